/*  kb_dispatch.c - what each call of the public API does on the engine
    thread: contexts by id (default, isolated, named), the ids of vanished
    ones, runs handed to their context, signals handed to their run, and
    the calls on records handed to the process store. It reads the engine
    and changes it only through kb_engine.h's functions. Engine thread
    only.
*/
#include <ctype.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "service/engine/kb_dispatch.h"
#include "service/fork/kb_checkpoints.h"
#include "service/fork/kb_fork.h"
#include "service/fork/kb_template.h"
#include "service/jupyter/kb_hub.h"
#include "service/run/kb_adapter.h"
#include "util/kb_clock.h"

static kb_context_t *s_lookup(kb_engine_t *self, const char *id, kb_call_t *call)
{
    kb_context_t *ctx = id ? kb_engine_context_find(self, id) : NULL;
    if (ctx && !kb_context_isolated(ctx))
        return ctx;
    const char *message = id ? kb_vanished_why(self->vanished, id) : NULL;
    if (message)
        kb_call_fail(call, KB_ERR_SESSION_NOT_FOUND, "%s", message);
    else
        kb_call_fail(call, KB_ERR_SESSION_NOT_FOUND, "no context %s", id ? id : "(none)");
    return NULL;
}

/* ---- contexts ---------------------------------------------------------------- */

static char *s_lower(const char *text)
{
    char *copy = strdup(text);
    for (char *p = copy; p && *p; p++)
        *p = (char)tolower((unsigned char)*p);
    return copy;
}

/*  A new context with its kernel starting, in the table: of kernel_name,
    else of opts->language; limits not given are the service's defaults.
    NULL with err. */
static kb_context_t *s_context_new(kb_engine_t *self, const char *kernel_name,
                                   kb_context_opts_int_t *opts, kb_error_t *err)
{
    kb_kernelspec_t *spec = self->launcher.find_spec(
        self->launcher.impl, kernel_name ? NULL : opts->language, kernel_name, err);
    if (!spec)
        return NULL;
    /*  At the limit, a pooled kernel makes room: taken if it fits, else
        given up for this one. */
    if (kb_engine_kernel_count(self) >= self->config.max_contexts
        && !kb_pool_has(self->pool, spec->name) && !kb_pool_evict(self->pool)) {
        kb_error_set(err, KB_ERR_TOO_MANY_CONTEXTS, "%zu kernels are running, the limit",
                     kb_engine_kernel_count(self));
        kb_kernelspec_destroy(&spec);
        return NULL;
    }
    if (kernel_name)
        opts->language = NULL; /* the kernelspec's */
    if (!opts->memory_limit)
        opts->memory_limit = self->config.memory_limit;
    if (!opts->pids_limit)
        opts->pids_limit = self->config.pids_limit;
    /*  A default context started afresh is the next generation of its id. */
    if (opts->is_default)
        opts->generation = kb_engine_next_generation(self, opts->id);
    kb_context_t *ctx = kb_context_new(&self->context_env, spec, opts, err);
    kb_kernelspec_destroy(&spec);
    if (!ctx)
        return NULL;
    kb_engine_context_add(self, ctx);
    kb_vanished_forget(self->vanished, kb_context_id(ctx));
    return ctx;
}

/*  The default context of a language (or kernelspec), started if it is not
    there; NULL with err set. */
static kb_context_t *s_default_context(kb_engine_t *self, const char *language,
                                       const char *kernel_name, kb_error_t *err)
{
    char *lower = s_lower(kernel_name ? kernel_name : language);
    char *id = lower ? zsys_sprintf("default-%s", lower) : NULL;
    kb_context_t *ctx = id ? zhashx_lookup(self->contexts, id) : NULL;
    if (!id)
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
    else if (!ctx) {
        kb_context_opts_int_t opts = { .id = id, .language = lower, .is_default = true };
        ctx = s_context_new(self, kernel_name, &opts, err);
    }
    free(id);
    free(lower);
    return ctx;
}

/*  Answer with json, built for the answer: NULL is out of memory. */
static void s_answer_built(kb_call_t *call, json_t *json)
{
    if (json)
        kb_call_answer_json(call, json);
    else
        kb_call_fail(call, KB_ERR_INTERNAL, "out of memory");
}

#define KB_ATTACH_TIMEOUT 5.0 /* seconds for an attached kernel to answer kernel_info */

/*  A context on a kernel someone else started (connection_info): its
    sockets connected, kernel_info asked; the call is answered once it
    answers. NULL with err. */
static kb_context_t *s_context_attach(kb_engine_t *self, const char *id,
                                      const kb_context_opts_t *opts, kb_error_t *err)
{
    kb_kernelspec_t *spec = self->launcher.find_spec(
        self->launcher.impl, opts->kernel_name ? NULL : opts->language, opts->kernel_name, err);
    if (!spec)
        return NULL;
    if (kb_engine_kernel_count(self) >= self->config.max_contexts) {
        kb_error_set(err, KB_ERR_TOO_MANY_CONTEXTS, "%zu kernels are running, the limit",
                     kb_engine_kernel_count(self));
        kb_kernelspec_destroy(&spec);
        return NULL;
    }
    kb_adopt_opts_t adopt = { .connection = opts->connection_info,
                              .timeout = KB_ATTACH_TIMEOUT,
                              .max_message = self->config.max_message_bytes };
    static const kb_kernel_callbacks_t none = { 0 };
    kb_error_t problem;
    kb_kernel_t *kernel = kb_kernel_adopt(self->loop, spec, &adopt, &none, NULL, &problem);
    if (!kernel) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "connection_info: %s", problem.message);
        kb_kernelspec_destroy(&spec);
        return NULL;
    }
    kb_kernel_set_observer(kernel, kb_metrics_observer(self->metrics));
    kb_context_opts_int_t ctx_opts
        = { .id = id, .language = opts->kernel_name ? NULL : opts->language, .attached = true };
    kb_context_t *ctx = kb_context_adopt(&self->context_env, spec, &ctx_opts, kernel, NULL, err);
    kb_kernelspec_destroy(&spec);
    if (!ctx) {
        kb_kernel_destroy(&kernel);
        return NULL;
    }
    kb_engine_context_add(self, ctx);
    kb_vanished_forget(self->vanished, kb_context_id(ctx));
    return ctx;
}

/*  A context made by forking opts->fork_from: the fork request with one
    id, answered with the context alone. */
static void s_create_fork(kb_engine_t *self, kb_call_t *call, const char *id)
{
    const kb_context_opts_t *opts = call->ask.context_opts;
    kb_context_t *parent = s_lookup(self, opts->fork_from, call);
    if (!parent)
        return;
    const char *ids[] = { id, NULL };
    kb_fork_opts_t fork = { .count = 1,
                            .context_ids = ids,
                            .memory_limit = opts->memory_limit,
                            .pids_limit = opts->pids_limit };
    kb_fork_contexts(self, parent, call, &fork, true); /* copied by the job */
}

static void s_handle_create(kb_engine_t *self, kb_call_t *call)
{
    const kb_context_opts_t *opts = call->ask.context_opts; /* checked: kb_context_opts_validate */
    char *id = opts->context_id ? strdup(opts->context_id) : kb_random_id("ctx_");
    if (!id) {
        kb_call_fail(call, KB_ERR_INTERNAL, "out of memory");
        return;
    }
    if (kb_engine_context_find(self, id)) {
        kb_call_fail(call, KB_ERR_CONTEXT_EXISTS, "context %s already exists", id);
        free(id);
        return;
    }
    if (opts->fork_from) {
        s_create_fork(self, call, id);
        free(id);
        return;
    }
    kb_error_t err;
    kb_context_opts_int_t ctx_opts = { .id = id,
                                       .language = opts->language,
                                       .cwd = opts->cwd,
                                       .env = opts->env,
                                       .is_default = strncmp(id, "default-", 8) == 0,
                                       .memory_limit = opts->memory_limit,
                                       .pids_limit = opts->pids_limit };
    kb_context_t *ctx = opts->connection_info
                            ? s_context_attach(self, id, opts, &err)
                            : s_context_new(self, opts->kernel_name, &ctx_opts, &err);
    free(id);
    if (!ctx)
        kb_call_fail(call, err.code, "%s", err.message);
    else
        kb_context_hold_call(ctx, call);
}

static void s_handle_default(kb_engine_t *self, kb_call_t *call)
{
    const kb_context_opts_t *opts = call->ask.context_opts; /* checked: kb_context_opts_validate */
    kb_error_t err;
    kb_context_t *ctx = s_default_context(self, opts->kernel_name ? NULL : opts->language,
                                          opts->kernel_name, &err);
    if (!ctx)
        kb_call_fail(call, err.code, "%s", err.message);
    else
        kb_context_hold_call(ctx, call);
}

static int s_by_created_at(const void *a, const void *b)
{
    double x = kb_context_created_at(*(kb_context_t *const *)a);
    double y = kb_context_created_at(*(kb_context_t *const *)b);
    return x < y ? -1 : x > y;
}

/*  The kernelspecs, and "default": the one a run without a language gets
    (Python's, after --kernel-map), or null. */
static json_t *s_kernelspecs_json(kb_engine_t *self)
{
    const kb_kernelspecs_t *specs = kb_engine_specs(self, true);
    json_t *json = kb_kernelspecs_to_json(specs);
    const kb_kernelspec_t *python
        = kb_kernelspecs_for_language(specs, "python", (const char *const *)self->kernel_map);
    if (json)
        json_object_set_new(json, "default", python ? json_string(python->name) : json_null());
    return json;
}

static void s_handle_list(kb_engine_t *self, kb_call_t *call)
{
    size_t n = zhashx_size(self->contexts), count = 0;
    kb_context_t **items = calloc(n + 1, sizeof *items);
    if (!items) {
        kb_call_fail(call, KB_ERR_INTERNAL, "out of memory");
        return;
    }
    for (kb_context_t *ctx = zhashx_first(self->contexts); ctx; ctx = zhashx_next(self->contexts))
        if (!kb_context_isolated(ctx) && (!kb_context_is_default(ctx) || call->ask.all))
            items[count++] = ctx;
    qsort(items, count, sizeof *items, s_by_created_at); /* oldest first */
    json_t *list = json_array();
    for (size_t i = 0; i < count; i++)
        json_array_append_new(list, kb_context_json(items[i]));
    free(items);
    s_answer_built(call, json_pack("{s:o}", "contexts", list));
}

static void s_handle_delete(kb_engine_t *self, kb_call_t *call)
{
    kb_context_t *ctx = s_lookup(self, call->ask.id, call);
    if (!ctx)
        return;
    if (kb_context_is_default(ctx)) {
        kb_call_fail(call, KB_ERR_PROTECTED_CONTEXT,
                     "%s is a default context; it can be restarted, not deleted",
                     kb_context_id(ctx));
        return;
    }
    kb_context_delete(ctx);
    kb_call_answer_json(call, NULL);
}

/*  Forks, checkpoints and restores (SPEC section 13). */
static void s_handle_fork(kb_engine_t *self, kb_call_t *call)
{
    kb_context_t *ctx = s_lookup(self, call->ask.id, call);
    if (!ctx)
        return;
    if (!self->checkpoints) {
        kb_call_fail(call, KB_ERR_UNAVAILABLE, "the service is stopping");
        return;
    }
    switch (call->type) {
        case KB_CALL_CTX_FORK:
            kb_fork_contexts(self, ctx, call, call->ask.fork_opts, false);
            break;
        case KB_CALL_CTX_RESTORE:
            kb_fork_restore(self, ctx, call->ask.checkpoint_id, call);
            break;
        case KB_CALL_CHECKPOINT_CREATE:
            kb_fork_checkpoint(self, ctx, call);
            break;
        case KB_CALL_CHECKPOINT_LIST:
            s_answer_built(call, kb_checkpoints_list(self->checkpoints, kb_context_id(ctx)));
            break;
        default: {
            kb_error_t err;
            if (kb_checkpoints_delete(self->checkpoints, kb_context_id(ctx),
                                      call->ask.checkpoint_id, &err)
                != 0)
                kb_call_fail(call, err.code, "%s", err.message);
            else
                kb_call_answer_json(call, NULL);
        }
    }
}

static void s_handle_restart(kb_engine_t *self, kb_call_t *call)
{
    kb_context_t *ctx = s_lookup(self, call->ask.id, call);
    if (!ctx)
        return;
    kb_error_t err;
    if (kb_context_restart(ctx, &err) != 0)
        kb_call_fail(call, err.code, "%s", err.message);
    else
        kb_context_hold_call(ctx, call);
}

/*  {total, by_reason: {malformed, bad_signature, ...}} of the kernel
    messages dropped since the start, all kernels. */
static json_t *s_dropped_json(kb_engine_t *self)
{
    unsigned long long by_reason[KB_DROP_REASONS];
    unsigned long long total = kb_metrics_dropped(self->metrics, by_reason);
    json_t *reasons = json_object();
    for (int i = 0; i < KB_DROP_REASONS; i++)
        json_object_set_new(reasons, kb_drop_reason_name((kb_drop_reason_t)i),
                            json_integer((json_int_t)by_reason[i]));
    return json_pack("{s:I, s:o}", "total", (json_int_t)total, "by_reason", reasons);
}

/*  {kernels, rss_bytes, pss_bytes} of the processes in pids (a JSON
    array; stolen), added to *all; the figures kept for a while
    (kb_kernel_memory.h). */
static json_t *s_memory_of(kb_engine_t *self, json_t *pids, uint64_t all[3])
{
    uint64_t sum[3] = { 0, 0, 0 }, rss, pss;
    size_t i;
    json_t *pid;
    json_array_foreach(pids, i, pid)
    {
        pid_t one = (pid_t)json_integer_value(pid);
        if (kb_kernel_memory_of(&self->kernel_memory, one, &rss, &pss))
            sum[0]++, sum[1] += rss, sum[2] += pss;
    }
    json_decref(pids);
    for (int k = 0; k < 3; k++)
        all[k] += sum[k];
    return json_pack("{s:I, s:I, s:I}", "kernels", (json_int_t)sum[0], "rss_bytes",
                     (json_int_t)sum[1], "pss_bytes", (json_int_t)sum[2]);
}

/*  {kernels, rss_bytes, pss_bytes, contexts, pool, templates}: the
    resident memory of every kernel the daemon holds (the contexts', the
    pool's, the templates'), summed, beside their proportional share
    (pages shared between forks and their template counted once in all);
    then the same sums for each kind. */
static json_t *s_kernel_memory_json(kb_engine_t *self)
{
    uint64_t all[3] = { 0, 0, 0 };
    json_t *pids = json_array();
    for (kb_context_t *ctx = zhashx_first(self->contexts); pids && ctx;
         ctx = zhashx_next(self->contexts)) {
        kb_kernel_t *kernel = kb_context_kernel(ctx);
        if (kernel && kb_kernel_pid(kernel) > 0)
            json_array_append_new(pids, json_integer(kb_kernel_pid(kernel)));
    }
    kb_kernel_memory_begin(&self->kernel_memory, zclock_mono());
    json_t *contexts = s_memory_of(self, pids, all);
    json_t *pool = s_memory_of(self, kb_pool_pids(self->pool), all);
    json_t *templates = s_memory_of(self, kb_templates_pids(self->templates), all);
    kb_kernel_memory_end(&self->kernel_memory);
    return json_pack("{s:I, s:I, s:I, s:o, s:o, s:o}", "kernels", (json_int_t)all[0], "rss_bytes",
                     (json_int_t)all[1], "pss_bytes", (json_int_t)all[2], "contexts", contexts,
                     "pool", pool, "templates", templates);
}

/*  The contexts' kernels paused now until their output is read, and how
    often they were (kb_kernel.h's flow control), into output_memory. */
static void s_flow_json(kb_engine_t *self, json_t *output_memory)
{
    unsigned long long paused = 0, pauses = 0;
    for (kb_context_t *ctx = zhashx_first(self->contexts); ctx; ctx = zhashx_next(self->contexts)) {
        kb_kernel_t *kernel = kb_context_kernel(ctx);
        paused += kernel && kb_kernel_paused(kernel);
        pauses += kernel ? kb_kernel_pauses(kernel) : 0;
    }
    json_object_set_new(output_memory, "kernels_paused", json_integer((json_int_t)paused));
    json_object_set_new(output_memory, "kernel_pauses", json_integer((json_int_t)pauses));
}

static void s_handle_health(kb_engine_t *self, kb_call_t *call)
{
    size_t count = 0;
    for (kb_context_t *ctx = zhashx_first(self->contexts); ctx; ctx = zhashx_next(self->contexts))
        if (!kb_context_isolated(ctx))
            count++;
    /* the state dir: durable (state.db and its writer) or ephemeral */
    kb_persist_t *persist = kb_restore_persist(self->durable);
    json_t *state = persist ? kb_persist_json(persist) : json_object();
    json_object_set_new(state, "durable", json_boolean(persist != NULL));
    json_object_set_new(state, "dir", json_string(self->state_dir));
    kb_limits_cost_t cost;
    kb_limits_cost(self->limits, &cost);
    const char *why;
    const char *mode = kb_limits_mode(self->limits, &why);
    const char *hog_why;
    double hog_after = kb_limits_hog_after(self->limits, &hog_why);
    json_t *limits
        = json_pack("{s:s, s:s?, s:I, s:I, s:f, s:I, s:f, s:f, s:I}", "mode", mode, "why", why,
                    "memory_limit", (json_int_t)self->config.memory_limit, "pids_limit",
                    (json_int_t)self->config.pids_limit, "sampler_cpu_s", cost.sampler_cpu_s,
                    "sampler_ticks", (json_int_t)cost.ticks, "accounting_start_s", cost.start_s,
                    "accounting_end_s", cost.end_s, "runs_metered", (json_int_t)cost.runs);
    json_object_set_new(limits, "priority",
                        json_pack("{s:f, s:i, s:i, s:I, s:I, s:s?}", "hog_after_s", hog_after,
                                  "daemon_nice", kb_limits_daemon_nice(self->limits), "hog_nice",
                                  KB_HOG_NICE, "lowered_now", (json_int_t)cost.hogs, "lowered_runs",
                                  (json_int_t)cost.hog_runs, "why", hog_why));
    json_t *dropped = s_dropped_json(self);
    json_t *templates = kb_templates_json(self->templates);
    json_t *health =

        json_pack("{s:s, s:s, s:s, s:I, s:f, s:o, s:o, s:o, s:o, s:O, s:O}", "status", "ok",
                  "version", KB_VERSION, "sandbox_id", self->sandbox_id, "contexts",
                  (json_int_t)count, "uptime_s", kb_now() - self->started_at, "pool",
                  kb_pool_json(self->pool), "output_memory", kb_procstore_budget_json(self->procs),
                  "state", state, "limits", limits, "dropped_messages",
                  json_object_get(dropped, "total"), "dropped_messages_by_reason",
                  json_object_get(dropped, "by_reason"));
    if (health) {
        json_object_set_new(health, "kernel_memory", s_kernel_memory_json(self));
        s_flow_json(self, json_object_get(health, "output_memory"));
    }
    if (health && templates) {
        json_object_set(health, "template", json_array_get(templates, 0));
        json_object_set(health, "templates", templates);
    }
    json_decref(templates);
    json_decref(dropped);
    s_answer_built(call, health);
}

/*  The engine's families for GET /metrics, as Prometheus text: the
    counters, and the gauges sampled now. */
static void s_handle_metrics(kb_engine_t *self, kb_call_t *call)
{
    size_t count = 0;
    const char **states = calloc(zhashx_size(self->contexts) + 1, sizeof *states);
    if (!states) {
        kb_call_fail(call, KB_ERR_INTERNAL, "out of memory");
        return;
    }
    for (kb_context_t *ctx = zhashx_first(self->contexts); ctx; ctx = zhashx_next(self->contexts))
        if (!kb_context_isolated(ctx))
            states[count++] = kb_context_state(ctx);
    json_t *pool = kb_pool_json(self->pool);
    kb_metrics_sample_t sample = { .context_states = states,
                                   .contexts = count,
                                   .pool = pool,
                                   .budget = kb_procstore_budget(self->procs) };
    kb_buf_t out = KB_BUF_INIT;
    kb_metrics_render(self->metrics, &sample, &out);
    bool ok = kb_buf_status(&out) == KB_BUF_OK;
    json_decref(pool);
    free(states);
    if (!ok) {
        kb_buf_free(&out);
        kb_call_fail(call, KB_ERR_INTERNAL, "out of memory");
        return;
    }
    kb_call_answer_text(call, kb_buf_take(&out, NULL));
}

/* ---- runs ---------------------------------------------------------------------- */

/*  The context a run goes to, created when it is a default or isolated
    one; NULL after failing the call. */
static kb_context_t *s_context_for_run(kb_engine_t *self, kb_call_t *call)
{
    const kb_run_opts_t *opts = call->ask.run_opts;
    kb_error_t err;
    if (opts->context_id)
        return s_lookup(self, opts->context_id, call);
    const char *language = opts->language ? opts->language : "python";
    kb_context_t *ctx;
    if (opts->isolated) {
        char *id = kb_random_id("iso_");
        if (!id) {
            kb_call_fail(call, KB_ERR_INTERNAL, "out of memory");
            return NULL;
        }
        kb_context_opts_int_t ctx_opts = { .id = id,
                                           .language = language,
                                           .cwd = opts->cwd,
                                           .env = opts->env,
                                           .isolated = true,
                                           .memory_limit = opts->memory_limit,
                                           .pids_limit = opts->pids_limit };
        ctx = s_context_new(self, opts->kernel_name, &ctx_opts, &err);
        free(id);
    } else
        ctx = s_default_context(self, opts->kernel_name ? NULL : language, opts->kernel_name, &err);
    if (!ctx)
        kb_call_fail(call, err.code, "%s", err.message);
    return ctx;
}

static void s_handle_run(kb_engine_t *self, kb_call_t *call)
{
    const kb_run_opts_t *opts = call->ask.run_opts; /* checked: kb_run_opts_validate */
    kb_context_t *ctx = s_context_for_run(self, call);
    if (!ctx)
        return;
    bool has_env = opts->env && json_object_size(opts->env) > 0;
    bool use_adapter = !kb_context_isolated(ctx) && (opts->cwd || has_env);
    if (use_adapter && !kb_adapter_supported(kb_context_language(ctx))) {
        kb_call_fail(call, KB_ERR_UNSUPPORTED_OPTION,
                     "per-run cwd/env is not supported for language %s; give them when "
                     "creating the context, or run isolated",
                     kb_context_language(ctx));
        return;
    }
    kb_error_t err;
    if (opts->rollback && strcmp(opts->rollback, "on_error") == 0
        && kb_fork_check(self, ctx, &err) != 0) {
        kb_call_fail(call, err.code, "rollback: %s", err.message);
        return;
    }
    kb_proc_t *proc = kb_procstore_add(self->procs, kb_context_id(ctx), kb_context_language(ctx));
    double timeout = opts->timeout > 0 ? opts->timeout : self->config.default_timeout;
    kb_run_t *run = kb_run_new(&self->run_settings, proc, opts, timeout, kb_context_language(ctx),
                               kb_context_identity(ctx), use_adapter, call->ask.stream);
    if (!run) {
        kb_proc_forget(proc);
        kb_call_fail(call, KB_ERR_INTERNAL, "out of memory");
        return;
    }
    if (kb_run_wants_rollback(run)
        && kb_fork_rollback(self, ctx, kb_proc_id(kb_run_proc(run)), &err) != 0) {
        kb_call_fail(call, err.code, "%s", err.message);
        kb_run_apply(run, &(kb_run_event_t){ .type = KB_RUN_EV_CONTEXT_GONE,
                                             .why = "its rollback checkpoint could not be asked" });
        return;
    }
    /*  Answered once the code is with the kernel, or at the run's end
        when the caller waits for that (kb_run_hold_call), or at once,
        queued behind another run on a ready context. */
    kb_run_hold_call(run, call);
    bool ready = kb_context_ready(ctx);
    kb_context_enqueue(ctx, run); /* the code goes to the kernel first, */
    if (ready)
        kb_run_answer_queued_call(run); /* then the caller wakes */
}

static void s_handle_signal(kb_engine_t *self, kb_call_t *call)
{
    kb_proc_t *proc = kb_procstore_find(self->procs, call->ask.id);
    if (!proc) {
        kb_call_fail(call, KB_ERR_PROCESS_NOT_FOUND, "no process %s",
                     call->ask.id ? call->ask.id : "(none)");
        return;
    }
    int sig = !call->ask.signal                          ? 0
              : strcmp(call->ask.signal, "SIGINT") == 0  ? SIGINT
              : strcmp(call->ask.signal, "SIGTERM") == 0 ? SIGTERM
              : strcmp(call->ask.signal, "SIGKILL") == 0 ? SIGKILL
                                                         : 0;
    if (!sig) {
        kb_call_fail(call, KB_ERR_BAD_REQUEST, "signal must be SIGINT, SIGTERM or SIGKILL");
        return;
    }
    kb_run_t *run = kb_proc_owner(proc);
    if (run)
        kb_run_apply(run, &(kb_run_event_t){ .type = KB_RUN_EV_SIGNAL, .signal = sig });
    kb_call_answer_json(call, NULL);
}

/* ---- websocket clients of kernels' channels ----------------------------------- */

static void s_handle_channels(kb_engine_t *self, kb_call_t *call)
{
    kb_context_t *ctx = kb_channels_context(call->ask.channels);
    kb_error_t err = { KB_OK, "" };
    int rc = 0;
    switch (call->type) {
        case KB_CALL_CHANNELS_OPEN:
            if (!(ctx = s_lookup(self, call->ask.id, call)))
                return;
            rc = kb_context_channels_attach(ctx, call->ask.channels, &err);
            break;
        case KB_CALL_CHANNELS_INPUT:
            if (!ctx) {
                kb_msg_t *msg = kb_call_take_msg(call);
                kb_msg_destroy(&msg);
                rc = kb_error_set(&err, KB_ERR_SESSION_NOT_FOUND, "the kernel is gone");
            } else {
                kb_msg_t *msg = kb_call_take_msg(call);
                rc = kb_context_channels_input(ctx, call->ask.channels,
                                               (kb_channel_t)call->ask.channel, msg, &err);
            }
            break;
        case KB_CALL_CHANNELS_READY:
            /*  1, no error: not yet; the caller asks again. */
            rc = ctx && !kb_context_channels_ready(ctx) ? 1 : 0;
            break;
        default:
            if (ctx)
                kb_context_channels_detach(ctx, call->ask.channels);
            break;
    }
    if (rc == 1)
        kb_call_answer_not_yet(call);
    else if (rc != 0)
        kb_call_fail(call, err.code, "%s", err.message);
    else
        kb_call_answer_json(call, NULL);
}

/* ---- dispatch ------------------------------------------------------------------ */

void kb_dispatch_handle(kb_engine_t *self, kb_call_t *call)
{
    kb_context_t *ctx;
    switch (call->type) {
        case KB_CALL_HEALTH:
            s_handle_health(self, call);
            break;
        case KB_CALL_METRICS:
            s_handle_metrics(self, call);
            break;
        case KB_CALL_KERNELSPECS:
            s_answer_built(call, s_kernelspecs_json(self));
            break;
        case KB_CALL_CTX_CREATE:
            s_handle_create(self, call);
            break;
        case KB_CALL_CTX_DEFAULT:
            s_handle_default(self, call);
            break;
        case KB_CALL_CTX_GET:
            if ((ctx = s_lookup(self, call->ask.id, call)))
                s_answer_built(call, kb_context_json(ctx));
            break;
        case KB_CALL_CTX_LIST:
            s_handle_list(self, call);
            break;
        case KB_CALL_CTX_DELETE:
            s_handle_delete(self, call);
            break;
        case KB_CALL_CTX_RESTART:
            s_handle_restart(self, call);
            break;
        case KB_CALL_CTX_INTERRUPT:
            if ((ctx = s_lookup(self, call->ask.id, call))) {
                kb_context_interrupt(ctx);
                kb_call_answer_json(call, NULL);
            }
            break;
        case KB_CALL_RUN:
            s_handle_run(self, call);
            break;
        case KB_CALL_PROC_SIGNAL:
            s_handle_signal(self, call);
            break;
        case KB_CALL_CTX_FORK:
        case KB_CALL_CTX_RESTORE:
        case KB_CALL_CHECKPOINT_CREATE:
        case KB_CALL_CHECKPOINT_LIST:
        case KB_CALL_CHECKPOINT_DELETE:
            s_handle_fork(self, call);
            break;
        case KB_CALL_CHANNELS_OPEN:
        case KB_CALL_CHANNELS_INPUT:
        case KB_CALL_CHANNELS_READY:
        case KB_CALL_CHANNELS_CLOSE:
            s_handle_channels(self, call);
            break;
        default:
            kb_procstore_handle(self->procs, call);
            break;
    }
}
