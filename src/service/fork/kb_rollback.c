/*  kb_rollback.c - rollback "on_error" (SPEC section 13): the checkpoint
    taken before a run that asked for it (a job ahead of the run in its
    context's queue, "rb_..." in the store), armed for that run; at the
    run's end it is dropped, or, when the run failed, a kernel is asked of
    it and put in the context in place of the failed one. Engine thread
    only.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "service/fork/kb_checkpoints.h"
#include "service/fork/kb_fork.h"
#include "service/fork/kb_fork_impl.h"
#include "util/kb_alloc.h"

/*  A checkpoint taken before a run that asked for a rollback ("rb_..."),
    from the job that makes it until the run has ended and, when it was
    rolled back, the checkpoint's kernel is in the context. */
typedef struct {
    kb_engine_t *engine;
    kb_context_t *ctx; /* while the job is in its queue */
    char *ctx_id, *process_id, *id, *path;
    kb_kernelspec_t *spec;
    long long execution_count;
    kb_connection_t conn;
    json_t *info;
    bool asked_again; /* once, on new ports, after a tcp port was taken */
    char msg_id[96];
    char why[sizeof(((kb_error_t *)0)->message)]; /* why its restore could not be asked */
} kb_rollback_t;

static void s_rb_free(kb_rollback_t *rb)
{
    if (rb->info)
        kb_fork_connection_end(&rb->conn, true);
    json_decref(rb->info);
    kb_kernelspec_destroy(&rb->spec);
    free(rb->ctx_id);
    free(rb->process_id);
    free(rb->id);
    free(rb->path);
    free(rb);
}

/*  The checkpoint is no longer needed: ended, forgotten, freed. */
static void s_rb_drop(kb_rollback_t *rb)
{
    if (rb->engine->checkpoints)
        kb_checkpoints_delete(rb->engine->checkpoints, rb->ctx_id, rb->id, NULL);
    s_rb_free(rb);
}

static void s_rb_restored(void *arg, pid_t pid, const char *why)
{
    kb_rollback_t *rb = arg;
    kb_engine_t *engine = rb->engine;
    if (pid <= 0
        && kb_fork_restore_again(engine, rb->spec, rb->id, &rb->conn, &rb->info, &rb->asked_again,
                                 why, s_rb_restored, rb))
        return;
    kb_error_t err;
    kb_kernel_t *kernel = NULL;
    if (pid > 0) {
        kernel = kb_fork_adopt(engine, rb->spec, pid, rb->info, &rb->conn, &err);
        json_decref(rb->info);
        rb->info = NULL;
    } else
        kb_error_set(&err, KB_ERR_KERNEL_START_FAILED, "%s", why ? why : "no kernel came");
    kb_context_t *ctx = kb_engine_context_find(engine, rb->ctx_id);
    if (ctx && kernel) {
        kb_context_replace_kernel(ctx, kernel, rb->execution_count, NULL);
        kb_metrics_restored(engine->metrics);
    } else if (ctx) {
        zsys_warning("context %s: its rollback failed (%s); it starts afresh", rb->ctx_id,
                     err.message);
        if (kb_context_restart(ctx, &err) != 0)
            zsys_warning("context %s: %s", rb->ctx_id, err.message);
    } else
        kb_kernel_destroy(&kernel);
    s_rb_drop(rb);
}

static void s_rb_failed(void *arg)
{
    kb_rollback_t *rb = arg;
    s_rb_restored(rb, 0, rb->why);
}

/*  The run ended: the checkpoint is dropped, or restored in its place. */
static void s_rb_ended(void *arg, kb_context_t *ctx, bool rolled_back)
{
    kb_rollback_t *rb = arg;
    kb_error_t err;
    kb_kernel_opts_t opts;
    if (!rolled_back || !rb->engine->checkpoints) {
        s_rb_drop(rb);
        return;
    }
    kb_engine_kernel_opts(rb->engine, rb->spec, &opts);
    rb->info = kb_kernel_spec_connection(rb->spec, &opts, &rb->conn, &err);
    if (!rb->info
        || kb_checkpoints_request(rb->engine->checkpoints, rb->id, rb->info, KB_FORK_CHILD_TIMEOUT,
                                  s_rb_restored, rb, &err)
               != 0) {
        /*  Told on the next turn (the context is in the middle of the
            run's end now), as a failed request: the context starts afresh. */
        snprintf(rb->why, sizeof rb->why, "%s", err.message);
        if (kb_loop_defer(rb->engine->loop, s_rb_failed, rb) != 0)
            s_rb_drop(rb);
    }
}

static const kb_context_rollback_t s_rb_rollback = { .ended = s_rb_ended };

static bool s_rb_start(void *arg, kb_kernel_t *kernel)
{
    kb_rollback_t *rb = arg;
    kb_kernel_opts_t opts;
    kb_engine_kernel_opts(rb->engine, kb_kernel_spec(kernel), &opts);
    json_t *path = NULL;
    rb->execution_count = kb_context_execution_count(rb->ctx);
    if (kb_checkpoints_name(opts.runtime_dir, KB_ROLLBACK_PREFIX, &rb->id, &rb->path, NULL) != 0
        || !(path = json_string(rb->path))
        || kb_fork_send(rb->engine, kernel, "freeze", path, rb->msg_id) != 0) {
        zsys_warning("context %s: no checkpoint for the rollback of %s: it runs without one",
                     rb->ctx_id, rb->process_id);
        json_decref(path);
        s_rb_free(rb);
        return false;
    }
    json_decref(path);
    return true;
}

static bool s_rb_message(void *arg, kb_channel_t channel, const kb_msg_t *msg)
{
    kb_rollback_t *rb = arg;
    if (channel != KB_CHANNEL_SHELL || strcmp(msg->parent_msg_id, rb->msg_id) != 0)
        return false;
    kb_error_t err;
    pid_t pid = kb_fork_reply_pid(msg, &err);
    if (pid > 0)
        kb_limits_disown(rb->engine->limits, pid); /* not the context's to count */
    if (pid <= 0
        || kb_checkpoints_add(rb->engine->checkpoints, rb->id, rb->ctx_id, rb->path, pid,
                              rb->execution_count, &err)
               != 0) {
        zsys_warning("context %s: no checkpoint for the rollback of %s (%s): it runs without one",
                     rb->ctx_id, rb->process_id, err.message);
        unlink(rb->path);
        s_rb_free(rb);
    } else if (kb_context_arm_rollback(rb->ctx, rb->id, rb->process_id, &s_rb_rollback, rb) != 0)
        s_rb_drop(rb);
    return true;
}

static void s_rb_cancel(void *arg, const char *why)
{
    kb_rollback_t *rb = arg;
    if (rb->path)
        unlink(rb->path);
    s_rb_free(rb);
}

static const kb_context_job_t s_rb_ops = {
    .start = s_rb_start,
    .message = s_rb_message,
    .cancel = s_rb_cancel,
};

int kb_fork_rollback(kb_engine_t *engine, kb_context_t *ctx, const char *process_id,
                     kb_error_t *err)
{
    if (kb_fork_check(engine, ctx, err) != 0)
        return -1;
    kb_rollback_t *rb = calloc(1, sizeof *rb);
    kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
    if (rb) {
        *rb = (kb_rollback_t){ .engine = engine, .ctx = ctx };
        rb->ctx_id = kb_xstrdup(kb_context_id(ctx));
        rb->process_id = kb_xstrdup(process_id);
        rb->spec = kb_kernelspec_dup(kb_kernel_spec(kb_context_kernel(ctx)));
    }
    if (!rb || !rb->spec || kb_context_enqueue_job(ctx, &s_rb_ops, rb, err) != 0) {
        if (rb)
            s_rb_free(rb);
        return -1;
    }
    return 0;
}
