/*  kb_fork.c - forks, checkpoints and restores of a context: the jobs
    that ask its kernel, and what is made of the answer. Engine thread
    only.
*/
#include "service/fork/kb_fork.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "service/fork/kb_checkpoints.h"
#include "service/fork/kb_fork_impl.h"
#include "util/kb_alloc.h"
#include "util/kb_buf.h"
#include "util/kb_clock.h"

#define KB_FORK_ADOPT_TIMEOUT 10.0 /* seconds for a forked kernel to answer kernel_info */

static const char *const s_expression = "__import__('kernelbridge_fork').last";

/*  The code of a request: kernelbridge_fork.<call>(<arg>), arg passed as
    JSON text (the package's dir is on the kernel's PYTHONPATH since its
    launch: kb_engine_launch.c). NULL: OOM. */
static char *s_code(const char *call, const json_t *arg)
{
    char *arg_text = json_dumps(arg, JSON_COMPACT | JSON_ENCODE_ANY);
    json_t *arg_string = arg_text ? json_string(arg_text) : NULL;
    char *arg_literal = arg_string ? json_dumps(arg_string, JSON_ENCODE_ANY) : NULL;
    char *code = arg_literal ? kb_buf_sprintf("__import__('kernelbridge_fork').%s("
                                              "__import__('json').loads(%s))\n",
                                              call, arg_literal)
                             : NULL;
    json_decref(arg_string);
    free(arg_text);
    free(arg_literal);
    return code;
}

/*  Send the request; msg_id (96 bytes) gets its id. 0 / -1. */
int kb_fork_send(kb_engine_t *engine, kb_kernel_t *kernel, const char *call, const json_t *arg,
                 char *msg_id)
{
    char *code = s_code(call, arg);
    json_t *content = code ? json_pack("{s:s, s:b, s:b, s:b, s:b, s:{s:s}}", "code", code, "silent",
                                       1, "store_history", 0, "allow_stdin", 0, "stop_on_error", 0,
                                       "user_expressions", "fork", s_expression)
                           : NULL;
    free(code);
    if (!content)
        return -1;
    return kb_kernel_send(kernel, KB_CHANNEL_SHELL, "execute_request", content, msg_id, 96);
}

/*  The reply's answer ({"pid": N} or {"pids": [...]}), or NULL with err
    (ForkRefused and a package that cannot be imported: UNSUPPORTED_OPTION;
    anything else: KERNEL_START_FAILED). Borrowed from msg. */
static json_t *s_reply_answer(const kb_msg_t *msg, kb_error_t *err)
{
    const json_t *content = msg->content;
    const char *status = json_string_value(json_object_get(content, "status"));
    if (status && strcmp(status, "ok") != 0) {
        const char *name = json_string_value(json_object_get(content, "ename"));
        const char *value = json_string_value(json_object_get(content, "evalue"));
        name = name ? name : "error";
        bool refused = strcmp(name, "ForkRefused") == 0 || strcmp(name, "ModuleNotFoundError") == 0;
        kb_error_set(err, refused ? KB_ERR_UNSUPPORTED_OPTION : KB_ERR_KERNEL_START_FAILED,
                     "the kernel cannot fork: %s: %s", name, value ? value : "");
        return NULL;
    }
    json_t *result = json_object_get(json_object_get(content, "user_expressions"), "fork");
    json_t *data = json_object_get(json_object_get(result, "data"), "application/json");
    if (!json_is_object(data))
        kb_error_set(err, KB_ERR_KERNEL_START_FAILED, "the kernel's reply carries no answer");
    return json_is_object(data) ? data : NULL;
}

/*  The reply to a request: the new process's pid, or 0 with err. */
pid_t kb_fork_reply_pid(const kb_msg_t *msg, kb_error_t *err)
{
    json_t *data = s_reply_answer(msg, err);
    if (!data)
        return 0;
    json_t *pid = json_object_get(data, "pid");
    if (!json_is_integer(pid) || json_integer_value(pid) <= 0) {
        kb_error_set(err, KB_ERR_KERNEL_START_FAILED, "the kernel's reply carries no pid");
        return 0;
    }
    return (pid_t)json_integer_value(pid);
}

/*  The pids of a fork_many reply, count of them, into pids. 0, or -1 with
    err. */
static int s_reply_pids(const kb_msg_t *msg, pid_t *pids, size_t count, kb_error_t *err)
{
    json_t *data = s_reply_answer(msg, err);
    if (!data)
        return -1;
    json_t *list = json_object_get(data, "pids");
    for (size_t i = 0; i < count; i++) {
        json_t *pid = json_array_get(list, i);
        if (json_array_size(list) != count || !json_is_integer(pid) || json_integer_value(pid) <= 0)
            return kb_error_set(err, KB_ERR_KERNEL_START_FAILED,
                                "the kernel's reply does not carry %zu pids", count);
        pids[i] = (pid_t)json_integer_value(pid);
    }
    return 0;
}

/*  Adopt the forked process pid on the connection conn/info (its files
    taken by the kernel on success, removed otherwise). NULL with err; the
    process is then killed when it is still the one that answered. */
kb_kernel_t *kb_fork_adopt(kb_engine_t *engine, const kb_kernelspec_t *spec, pid_t pid,
                           const json_t *info, kb_connection_t *conn, kb_error_t *err)
{
    static const kb_kernel_callbacks_t none = { 0 };
    unsigned long long start = kb_proc_start_time(pid);
    kb_adopt_opts_t adopt = { .connection = info,
                              .connection_file = conn->connection_file,
                              .log_file = conn->log_file,
                              .pid = pid,
                              .pid_start = start,
                              .timeout = KB_FORK_ADOPT_TIMEOUT,
                              .max_message = engine->config.max_message_bytes };
    kb_error_t problem;
    kb_kernel_t *kernel
        = start ? kb_kernel_adopt(engine->loop, spec, &adopt, &none, NULL, &problem) : NULL;
    kb_fork_connection_end(conn, kernel == NULL);
    if (!kernel) {
        if (start && kb_proc_start_time(pid) == start)
            kill(-pid, SIGKILL);
        kb_error_set(err, KB_ERR_KERNEL_START_FAILED, "the forked kernel (pid %d) %s", (int)pid,
                     start ? problem.message : "is gone");
        return NULL;
    }
    kb_kernel_set_observer(kernel, kb_metrics_observer(engine->metrics));
    return kernel;
}

/*  A new connection for a fork of kernel: info, or NULL with err. */
static json_t *s_connection(kb_engine_t *engine, kb_kernel_t *kernel, kb_connection_t *conn,
                            kb_error_t *err)
{
    kb_kernel_opts_t opts;
    kb_engine_kernel_opts(engine, kb_kernel_spec(kernel), &opts);
    return kb_kernel_fork_connection(kernel, &opts, conn, err);
}

int kb_fork_check(kb_engine_t *engine, kb_context_t *parent, kb_error_t *err)
{
    const char *why = NULL;
    kb_kernel_t *kernel = kb_context_kernel(parent);
    if (!kernel)
        return kb_error_set(err, KB_ERR_UNSUPPORTED_OPTION, "context %s has no kernel now",
                            kb_context_id(parent));
    if (!kb_kernelspec_forkable(kb_kernel_spec(kernel), &why))
        return kb_error_set(err, KB_ERR_UNSUPPORTED_OPTION, "context %s (kernel %s): %s",
                            kb_context_id(parent), kb_context_kernel_name(parent), why);
    if (engine->users || kb_kernel_pid(kernel) == 0)
        return kb_error_set(err, KB_ERR_UNSUPPORTED_OPTION, "context %s cannot be forked: %s",
                            kb_context_id(parent),
                            engine->users ? "kernels run as other users (--kernel-user, "
                                            "--kernel-uids), whose uid and private dir a fork "
                                            "would share"
                                          : "its kernel was not started by this daemon");
    return 0;
}

/* ---- forks ------------------------------------------------------------------------ */

typedef struct {
    kb_engine_t *engine;
    kb_call_t *call;
    bool single;
    kb_context_t *parent; /* while the job is in its queue */
    kb_kernel_t *kernel;  /* the parent's, while the job has it */
    kb_kernelspec_t *spec;
    char *language, *cwd;
    json_t *env, *forked_from;
    long long memory_limit, pids_limit, execution_count;
    size_t count, asked, made, settled;
    char **ids;
    kb_connection_t *conns; /* of the forks asked (count), ended as each is adopted */
    json_t *infos;          /* their JSON, [count], or NULL */
    size_t prepared;        /* conns made and not ended yet: [0, prepared) */
    char msg_id[96];
    bool parent_done, finishing, failed;
    bool asked_again; /* once, on new ports, after a tcp port was taken */
    double began;     /* when it was asked */
    kb_code_t code;
    char why[800];
} kb_fork_job_t;

static void s_job_free(kb_fork_job_t *job)
{
    for (size_t i = 0; job->ids && i < job->count; i++)
        free(job->ids[i]);
    free(job->ids);
    kb_kernelspec_destroy(&job->spec);
    free(job->language);
    free(job->cwd);
    json_decref(job->env);
    json_decref(job->forked_from);
    json_decref(job->infos);
    free(job->conns);
    free(job);
}

static void s_fail(kb_fork_job_t *job, kb_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void s_fail(kb_fork_job_t *job, kb_code_t code, const char *fmt, ...)
{
    if (job->failed)
        return; /* the first reason is the one told */
    job->failed = true;
    job->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(job->why, sizeof job->why, fmt, ap);
    va_end(ap);
}

/*  The end of the turn once everything settled: answer, or delete the
    forks made and fail. */
static void s_finish(void *arg)
{
    kb_fork_job_t *job = arg;
    json_t *list = job->failed ? NULL : json_array();
    for (size_t i = 0; i < job->made; i++) {
        kb_context_t *ctx = kb_engine_context_find(job->engine, job->ids[i]);
        if (!ctx)
            s_fail(job, KB_ERR_KERNEL_START_FAILED, "fork %s ended before it was answered",
                   job->ids[i]);
        else if (job->failed)
            kb_context_delete(ctx);
        else
            json_array_append_new(list, kb_context_json(ctx));
    }
    kb_metrics_forked(job->engine->metrics, job->made, !job->failed, kb_now() - job->began);
    if (job->failed) {
        for (size_t i = 0; list && i < job->made; i++) {
            kb_context_t *ctx = kb_engine_context_find(job->engine, job->ids[i]);
            if (ctx)
                kb_context_delete(ctx); /* the ones listed before one was found gone */
        }
        kb_call_fail(job->call, job->code, "%s", job->why);
    } else if (job->single)
        kb_call_answer_json(job->call, json_incref(json_array_get(list, 0)));
    else
        kb_call_answer_json(job->call, json_pack("{s:O}", "contexts", list));
    json_decref(list);
    s_job_free(job);
}

static void s_maybe_finish(kb_fork_job_t *job)
{
    if (!job->parent_done || job->settled < job->made || job->finishing)
        return;
    job->finishing = true;
    if (kb_loop_defer(job->engine->loop, s_finish, job) != 0)
        s_finish(job);
}

static void s_on_settled(kb_context_t *ctx, bool ok, const char *why, void *arg)
{
    kb_fork_job_t *job = arg;
    job->settled++;
    if (!ok)
        s_fail(job, KB_ERR_KERNEL_START_FAILED, "fork %s did not start: %s", kb_context_id(ctx),
               why ? why : "");
    s_maybe_finish(job);
}

/*  The connections made and not taken by a kernel are removed. */
static void s_discard_conns(kb_fork_job_t *job)
{
    for (size_t i = 0; i < job->prepared; i++)
        kb_fork_connection_end(&job->conns[i], true);
    job->prepared = 0;
    json_decref(job->infos);
    job->infos = NULL;
}

/*  The forked process pid, on connection i, becomes the context ids[made]. */
static void s_make_context(kb_fork_job_t *job, size_t i, pid_t pid)
{
    kb_engine_t *engine = job->engine;
    kb_error_t err;
    kb_kernel_t *kernel = kb_fork_adopt(engine, job->spec, pid, json_array_get(job->infos, i),
                                        &job->conns[i], &err);
    if (!kernel) {
        s_fail(job, err.code, "%s", err.message);
        return;
    }
    const char *id = job->ids[job->made];
    if (kb_engine_context_find(engine, id)) {
        kb_kernel_destroy(&kernel);
        s_fail(job, KB_ERR_CONTEXT_EXISTS, "context %s already exists", id);
        return;
    }
    kb_context_opts_int_t opts = { .id = id,
                                   .language = job->language,
                                   .cwd = job->cwd,
                                   .env = job->env,
                                   .memory_limit = job->memory_limit,
                                   .pids_limit = job->pids_limit,
                                   .forked_from = job->forked_from,
                                   .fresh = true };
    kb_context_restored_t restored = { .execution_count = job->execution_count, .generation = 1 };
    kb_context_t *ctx
        = kb_context_adopt(&engine->context_env, job->spec, &opts, kernel, &restored, &err);
    if (!ctx) {
        kb_kernel_destroy(&kernel);
        s_fail(job, err.code, "%s", err.message);
        return;
    }
    kb_engine_context_add(engine, ctx);
    kb_vanished_forget(engine->vanished, id);
    job->made++;
    kb_context_on_settled(ctx, s_on_settled, job);
}

/*  Ask the kernel for every fork at once (fork_many: their start-ups
    overlap). True: the request is out. */
static bool s_ask(kb_fork_job_t *job, kb_kernel_t *kernel)
{
    kb_error_t err;
    job->conns = kb_xcalloc(job->count, sizeof *job->conns);
    job->infos = json_array();
    kb_error_set(&err, KB_ERR_INTERNAL, "out of memory");
    for (size_t i = 0; job->infos && i < job->count; i++) {
        json_t *info = s_connection(job->engine, kernel, &job->conns[i], &err);
        if (!info)
            break;
        job->prepared++;
        json_array_append_new(job->infos, info);
    }
    if (job->prepared < job->count || json_array_size(job->infos) < job->count) {
        s_discard_conns(job);
        s_fail(job, err.code, "%s", err.message);
        return false;
    }
    if (kb_fork_send(job->engine, kernel, "fork_many", job->infos, job->msg_id) != 0) {
        s_discard_conns(job);
        s_fail(job, KB_ERR_KERNEL_START_FAILED, "cannot send the fork request to the kernel");
        return false;
    }
    return true;
}

/*  The parent's kernel is no longer the job's. */
static void s_parent_done(kb_fork_job_t *job)
{
    job->parent_done = true;
    s_maybe_finish(job);
}

static bool s_job_start(void *arg, kb_kernel_t *kernel)
{
    kb_fork_job_t *job = arg;
    /*  The fork point: the parent's count and generation now. */
    job->kernel = kernel;
    job->execution_count = kb_context_execution_count(job->parent);
    job->forked_from = json_pack("{s:s, s:I, s:I}", "context_id", kb_context_id(job->parent),
                                 "execution_count", (json_int_t)job->execution_count, "generation",
                                 (json_int_t)kb_context_generation(job->parent));
    if (!job->forked_from)
        s_fail(job, KB_ERR_INTERNAL, "out of memory");
    else if (s_ask(job, kernel))
        return true;
    s_parent_done(job);
    return false;
}

bool kb_fork_restore_again(kb_engine_t *engine, const kb_kernelspec_t *spec, const char *id,
                           kb_connection_t *conn, json_t **info, bool *asked_again, const char *why,
                           kb_checkpoint_done_fn *done, void *arg)
{
    if (*asked_again || !kb_connection_port_taken(*info, why))
        return false;
    *asked_again = true;
    kb_fork_connection_end(conn, true);
    json_decref(*info);
    kb_kernel_opts_t opts;
    kb_engine_kernel_opts(engine, spec, &opts);
    kb_error_t err;
    *info = kb_kernel_spec_connection(spec, &opts, conn, &err);
    if (*info
        && kb_checkpoints_request(engine->checkpoints, id, *info, KB_FORK_CHILD_TIMEOUT, done, arg,
                                  &err)
               == 0) {
        zsys_warning("checkpoint %s: a port of its kernel was taken before the kernel bound it "
                     "(%s); asked again on new ports",
                     id, why);
        return true;
    }
    if (*info)
        kb_fork_connection_end(conn, true);
    json_decref(*info);
    *info = NULL;
    return false;
}

static bool s_job_message(void *arg, kb_channel_t channel, const kb_msg_t *msg)
{
    kb_fork_job_t *job = arg;
    if (channel != KB_CHANNEL_SHELL || strcmp(msg->parent_msg_id, job->msg_id) != 0)
        return false;
    kb_error_t err;
    pid_t *pids = kb_xcalloc(job->count, sizeof *pids);
    int rc = s_reply_pids(msg, pids, job->count, &err);
    if (rc != 0 && !job->asked_again && err.code == KB_ERR_KERNEL_START_FAILED
        && kb_connection_port_taken(json_array_get(job->infos, 0), err.message)) {
        /*  Every fork of the request has ended (fork_many kills those it
            started when one fails): ask once more on new ports. */
        free(pids);
        s_discard_conns(job);
        free(job->conns); /* s_ask makes them again */
        job->conns = NULL;
        job->asked_again = true;
        zsys_warning("context %s: a port of a fork was taken before the fork bound it (%s); "
                     "asked again on new ports",
                     kb_context_id(job->parent), err.message);
        if (s_ask(job, job->kernel))
            return false; /* the job keeps the kernel for its new request */
        s_parent_done(job);
        return true;
    }
    if (rc == 0) {
        for (size_t i = 0; i < job->count; i++)
            s_make_context(job, i, pids[i]);
        job->prepared = 0; /* each was taken by its kernel, or removed */
    } else
        s_fail(job, err.code, "%s", err.message);
    free(pids);
    s_discard_conns(job);
    s_parent_done(job);
    return true;
}

static void s_job_cancel(void *arg, const char *why)
{
    kb_fork_job_t *job = arg;
    /*  A request was out: a fork, if one comes up, has no one to answer
        (its parent is gone with the process that asked). */
    s_discard_conns(job);
    job->parent = NULL;
    job->kernel = NULL;
    s_fail(job,
           strstr(why, "stopping")  ? KB_ERR_UNAVAILABLE
           : strstr(why, "deleted") ? KB_ERR_SESSION_NOT_FOUND
                                    : KB_ERR_KERNEL_START_FAILED,
           "the fork did not happen: %s", why);
    s_parent_done(job);
}

static const kb_context_job_t s_fork_ops = {
    .start = s_job_start,
    .message = s_job_message,
    .cancel = s_job_cancel,
};

/*  The ids of the forks: given, or generated. 0 / -1 (OOM). */
static int s_fork_ids(kb_fork_job_t *job, const kb_fork_opts_t *opts)
{
    job->ids = calloc(job->count, sizeof *job->ids);
    for (size_t i = 0; job->ids && i < job->count; i++) {
        job->ids[i] = opts->context_ids ? strdup(opts->context_ids[i]) : kb_random_id("ctx_");
        if (!job->ids[i])
            return -1;
    }
    return job->ids ? 0 : -1;
}

void kb_fork_contexts(kb_engine_t *engine, kb_context_t *parent, kb_call_t *call,
                      const kb_fork_opts_t *given, bool single)
{
    static const kb_fork_opts_t one = { .count = 1 };
    const kb_fork_opts_t *opts = given ? given : &one; /* checked: kb_fork_opts_validate */
    kb_error_t err;
    if (kb_fork_check(engine, parent, &err) != 0) {
        kb_call_fail(call, err.code, "%s", err.message);
        return;
    }
    size_t count = kb_fork_opts_count(opts);
    for (size_t i = 0; opts->context_ids && i < count; i++)
        if (kb_engine_context_find(engine, opts->context_ids[i])) {
            kb_call_fail(call, KB_ERR_CONTEXT_EXISTS, "context %s already exists",
                         opts->context_ids[i]);
            return;
        }
    if (kb_engine_kernel_count(engine) + count > engine->config.max_contexts) {
        kb_call_fail(call, KB_ERR_TOO_MANY_CONTEXTS,
                     "%zu kernels are running and %zu forks would pass the limit of %zu",
                     kb_engine_kernel_count(engine), count, engine->config.max_contexts);
        return;
    }
    kb_fork_job_t *job = calloc(1, sizeof *job);
    long long memory_limit, pids_limit;
    kb_context_limits(parent, &memory_limit, &pids_limit);
    if (job) {
        job->engine = engine;
        job->call = call;
        job->single = single;
        job->began = kb_now();
        job->parent = parent;
        job->count = count;
        job->spec = kb_kernelspec_dup(kb_kernel_spec(kb_context_kernel(parent)));
        job->language = strdup(kb_context_language(parent));
        job->cwd = kb_context_cwd(parent) ? kb_xstrdup(kb_context_cwd(parent)) : NULL;
        job->env = kb_context_env(parent) ? json_deep_copy(kb_context_env(parent)) : NULL;
        job->memory_limit = opts->memory_limit ? opts->memory_limit : memory_limit;
        job->pids_limit = opts->pids_limit ? opts->pids_limit : pids_limit;
    }
    kb_error_set(&err, KB_ERR_INTERNAL, "out of memory");
    if (!job || !job->spec || !job->language || s_fork_ids(job, opts) != 0
        || kb_context_enqueue_job(parent, &s_fork_ops, job, &err) != 0) {
        kb_call_fail(call, err.code, "%s", err.message);
        if (job)
            s_job_free(job);
    }
}

/* ---- checkpoints ------------------------------------------------------------------ */

typedef struct {
    kb_engine_t *engine;
    kb_call_t *call;
    kb_context_t *ctx; /* while the job is in its queue */
    char *id, *path;
    long long execution_count;
    char msg_id[96];
} kb_cp_job_t;

static void s_cp_end(kb_cp_job_t *job)
{
    free(job->id);
    free(job->path);
    free(job);
}

static bool s_cp_start(void *arg, kb_kernel_t *kernel)
{
    kb_cp_job_t *job = arg;
    kb_error_t err;
    if (kb_checkpoints_count(job->engine->checkpoints, kb_context_id(job->ctx))
        >= job->engine->config.max_checkpoints) {
        kb_call_fail(job->call, KB_ERR_LIMIT_EXCEEDED,
                     "context %s has %zu checkpoints, the limit (--max-checkpoints); delete one",
                     kb_context_id(job->ctx), job->engine->config.max_checkpoints);
        s_cp_end(job);
        return false;
    }
    kb_kernel_opts_t opts;
    kb_engine_kernel_opts(job->engine, kb_kernel_spec(kernel), &opts);
    json_t *path = NULL;
    if (kb_checkpoints_name(opts.runtime_dir, KB_CHECKPOINT_PREFIX, &job->id, &job->path, &err) != 0
        || !(path = json_string(job->path))) {
        kb_call_fail(job->call, KB_ERR_INTERNAL, "%s", job->id ? "out of memory" : err.message);
        s_cp_end(job);
        return false;
    }
    job->execution_count = kb_context_execution_count(job->ctx);
    int rc = kb_fork_send(job->engine, kernel, "freeze", path, job->msg_id);
    json_decref(path);
    if (rc != 0) {
        kb_call_fail(job->call, KB_ERR_KERNEL_START_FAILED,
                     "cannot send the request to the kernel");
        s_cp_end(job);
        return false;
    }
    return true;
}

static bool s_cp_message(void *arg, kb_channel_t channel, const kb_msg_t *msg)
{
    kb_cp_job_t *job = arg;
    if (channel != KB_CHANNEL_SHELL || strcmp(msg->parent_msg_id, job->msg_id) != 0)
        return false;
    kb_error_t err;
    pid_t pid = kb_fork_reply_pid(msg, &err);
    const char *ctx_id = kb_context_id(job->ctx);
    if (pid > 0)
        kb_limits_disown(job->engine->limits, pid); /* not the parent's to count */
    if (pid <= 0) {
        unlink(job->path);
        kb_call_fail(job->call, err.code, "%s", err.message);
    } else if (kb_checkpoints_add(job->engine->checkpoints, job->id, ctx_id, job->path, pid,
                                  job->execution_count, &err)
               != 0)
        kb_call_fail(job->call, err.code, "%s", err.message);
    else {
        kb_metrics_checkpointed(job->engine->metrics);
        kb_call_answer_json(job->call,
                            kb_checkpoints_json(job->engine->checkpoints, ctx_id, job->id));
    }
    s_cp_end(job);
    return true;
}

static void s_cp_cancel(void *arg, const char *why)
{
    kb_cp_job_t *job = arg;
    if (job->path)
        unlink(job->path); /* a request was out: the frozen process, if any, has no socket */
    kb_call_fail(job->call, strstr(why, "stopping") ? KB_ERR_UNAVAILABLE : KB_ERR_SESSION_NOT_FOUND,
                 "the checkpoint was not made: %s", why);
    s_cp_end(job);
}

static const kb_context_job_t s_cp_ops = {
    .start = s_cp_start,
    .message = s_cp_message,
    .cancel = s_cp_cancel,
};

void kb_fork_checkpoint(kb_engine_t *engine, kb_context_t *ctx, kb_call_t *call)
{
    kb_error_t err;
    if (kb_fork_check(engine, ctx, &err) != 0) {
        kb_call_fail(call, err.code, "%s", err.message);
        return;
    }
    kb_cp_job_t *job = calloc(1, sizeof *job);
    kb_error_set(&err, KB_ERR_INTERNAL, "out of memory");
    if (job)
        *job = (kb_cp_job_t){ .engine = engine, .call = call, .ctx = ctx };
    if (!job || kb_context_enqueue_job(ctx, &s_cp_ops, job, &err) != 0) {
        kb_call_fail(call, err.code, "%s", err.message);
        free(job);
    }
}

/* ---- restore ------------------------------------------------------------------- */

typedef struct {
    kb_engine_t *engine;
    kb_call_t *call;
    char *ctx_id, *checkpoint_id;
    kb_kernelspec_t *spec;
    kb_connection_t conn;
    json_t *info;
    bool asked_again; /* once, on new ports, after a tcp port was taken */
} kb_restore_job_t;

static void s_restore_free(kb_restore_job_t *job)
{
    if (job->info)
        kb_fork_connection_end(&job->conn, true);
    json_decref(job->info);
    kb_kernelspec_destroy(&job->spec);
    free(job->ctx_id);
    free(job->checkpoint_id);
    free(job);
}

static void s_on_restore_pid(void *arg, pid_t pid, const char *why)
{
    kb_restore_job_t *job = arg;
    kb_engine_t *engine = job->engine;
    if (pid <= 0
        && kb_fork_restore_again(engine, job->spec, job->checkpoint_id, &job->conn, &job->info,
                                 &job->asked_again, why, s_on_restore_pid, job))
        return;
    kb_error_t err;
    kb_context_t *ctx = kb_engine_context_find(engine, job->ctx_id);
    kb_kernel_t *kernel = NULL;
    if (pid > 0) {
        kernel = kb_fork_adopt(engine, job->spec, pid, job->info, &job->conn, &err);
        json_decref(job->info);
        job->info = NULL;
    }
    long long count = kb_checkpoints_execution_count(engine->checkpoints, job->checkpoint_id);
    json_t *from = json_pack("{s:s, s:I}", "checkpoint_id", job->checkpoint_id, "execution_count",
                             (json_int_t)(count > 0 ? count : 0));
    if (pid <= 0)
        kb_call_fail(job->call, KB_ERR_KERNEL_START_FAILED, "%s", why ? why : "no kernel came");
    else if (!kernel)
        kb_call_fail(job->call, err.code, "%s", err.message);
    else if (!ctx || !from) {
        kb_kernel_destroy(&kernel);
        kb_call_fail(job->call, ctx ? KB_ERR_INTERNAL : KB_ERR_SESSION_NOT_FOUND,
                     ctx ? "out of memory" : "context %s was deleted during its restore",
                     job->ctx_id);
    } else {
        kb_context_replace_kernel(ctx, kernel, count > 0 ? count : 0, from);
        kb_metrics_restored(engine->metrics);
        kb_context_hold_call(ctx, job->call);
    }
    json_decref(from);
    s_restore_free(job);
}

void kb_fork_restore(kb_engine_t *engine, kb_context_t *ctx, const char *checkpoint_id,
                     kb_call_t *call)
{
    kb_error_t err;
    if (kb_fork_check(engine, ctx, &err) != 0) {
        kb_call_fail(call, err.code, "%s", err.message);
        return;
    }
    if (!kb_checkpoints_alive(engine->checkpoints, kb_context_id(ctx), checkpoint_id)) {
        json_t *known = kb_checkpoints_json(engine->checkpoints, kb_context_id(ctx), checkpoint_id);
        kb_call_fail(call, KB_ERR_CHECKPOINT_NOT_FOUND, "context %s has no checkpoint %s%s",
                     kb_context_id(ctx), checkpoint_id,
                     known ? " that can be restored: its process ended" : "");
        json_decref(known);
        return;
    }
    kb_restore_job_t *job = calloc(1, sizeof *job);
    kb_error_set(&err, KB_ERR_INTERNAL, "out of memory");
    if (job) {
        *job = (kb_restore_job_t){ .engine = engine, .call = call };
        job->ctx_id = strdup(kb_context_id(ctx));
        job->checkpoint_id = strdup(checkpoint_id);
        job->spec = kb_kernelspec_dup(kb_kernel_spec(kb_context_kernel(ctx)));
    }
    if (!job || !job->ctx_id || !job->checkpoint_id || !job->spec
        || !(job->info = s_connection(engine, kb_context_kernel(ctx), &job->conn, &err))
        || kb_checkpoints_request(engine->checkpoints, checkpoint_id, job->info,
                                  KB_FORK_CHILD_TIMEOUT, s_on_restore_pid, job, &err)
               != 0) {
        kb_call_fail(call, err.code, "%s", err.message);
        if (job)
            s_restore_free(job);
    }
}
