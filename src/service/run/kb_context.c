/*  kb_context.c - a context's kernel, its readiness and its run queue.
    Engine thread only.
*/
#include "service/run/kb_context.h"
#include "service/run/kb_context_impl.h"
#include "service/run/kb_context_jobs.h"

#include <assert.h>
#include <ctype.h>
#include <czmq.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <signal.h>

#include "kernel/kb_proctree.h"
#include "service/run/kb_adapter.h"
#include "service/jupyter/kb_hub.h"
#include "service/run/kb_execution.h"
#include "util/kb_alloc.h"
#include "util/kb_buf.h"
#include "util/kb_clock.h"

/* struct kb_context: kb_context_impl.h */

static void s_on_ready(kb_kernel_t *kernel, void *arg);
static void s_on_start_failed(kb_kernel_t *kernel, const char *why, void *arg);
static void s_on_message(kb_kernel_t *kernel, kb_channel_t channel, const kb_msg_t *msg, void *arg);
static void s_on_exited(kb_kernel_t *kernel, void *arg);

/*  ZeroMQ refused a message over the max message size: the run says so. */
static void s_on_iopub_dropped(kb_kernel_t *kernel, void *arg)
{
    kb_context_t *self = arg;
    if (self->running)
        kb_run_message_refused(self->running, kb_kernel_max_message(kernel));
}

static void s_on_interrupting(kb_kernel_t *kernel, void *arg)
{
    kb_watch_spare(((kb_context_t *)arg)->watch); /* a lowered run answers in time */
    (void)kernel;
}

static const kb_kernel_callbacks_t s_kernel_callbacks = {
    .ready = s_on_ready,
    .start_failed = s_on_start_failed,
    .message = s_on_message,
    .exited = s_on_exited,
    .iopub_dropped = s_on_iopub_dropped,
    .interrupting = s_on_interrupting,
};

/* ---- the run queue -------------------------------------------------------------- */

static void s_changed(kb_context_t *self, bool at_once)
{
    if (self->env->changed && !self->over)
        self->env->changed(self, at_once, self->env->gone_arg);
}

/*  The run in progress ends: what it cost the kernel's tree. */
static void s_meter(kb_run_t *run, kb_resources_t *out, void *arg)
{
    (void)run;
    kb_context_t *self = arg;
    if (self->watch)
        kb_watch_run_end(self->watch, out);
}

static bool s_in_queue(const void *run, void *arg)
{
    kb_context_t *self = arg;
    return zlistx_find(self->queue, (void *)run) != NULL;
}

static void s_pump(kb_context_t *self)
{
    if (!self->ready || self->running || self->jobs.held || !self->kernel || self->over
        || self->barrier)
        return;
    if (self->hub && kb_hub_busy(self->hub))
        return;
    bool held = kb_context_jobs_start(&self->jobs, self->queue, self->kernel);
    kb_watch_pause(self->watch, held); /* the fork is in its tree for a moment */
    if (held)
        return;
    if (self->hub && kb_hub_pump(self->hub, self->kernel, s_in_queue, self))
        return; /* a websocket client's execute is out: runs wait */
    kb_run_t *run = zlistx_detach(self->queue, NULL);
    if (!run)
        return;
    self->running = run;
    self->last_activity_at = kb_now();
    if (kb_run_wants_rollback(run)
        && (self->rolling = kb_context_jobs_take_armed(&self->jobs, kb_proc_id(kb_run_proc(run)))))
        kb_run_set_rollback(run, kb_xstrdup(self->rolling->checkpoint_id));
    if (self->watch)
        kb_run_set_meter(run, s_meter);
    kb_run_apply(run, &(kb_run_event_t){ .type = KB_RUN_EV_START, .kernel = self->kernel });
    /*  Measured once the request is out: the kernel reads it meanwhile
        (CPU comes in clock ticks, so the few microseconds do not show). */
    if (self->watch && self->running == run)
        kb_watch_run_start(self->watch);
}

static void s_over(kb_context_t *self, const char *why, bool vanished);

/*  A run that asked for a rollback ended: its checkpoint's owner is told
    whether to restore it (the context then waits for the kernel it
    brings) or to drop it. */
static void s_rollback_ended(kb_context_t *self, kb_run_t *run)
{
    bool rolled_back = false;
    kb_context_armed_t *armed = NULL;
    const char *process_id = kb_proc_id(kb_run_proc(run));
    if (self->rolling && strcmp(self->rolling->process_id, process_id) == 0) {
        armed = self->rolling; /* it started with it (and may be off the kernel already) */
        self->rolling = NULL;
        kb_run_rollback(run, &rolled_back);
    } else
        armed = kb_context_jobs_take_armed(&self->jobs, process_id);
    if (!armed)
        return;
    if (rolled_back && !self->over)
        self->restoring = true, self->ready = false;
    armed->ops->ended(armed->arg, self, rolled_back && !self->over);
    kb_context_armed_free(armed);
}

static void s_on_run_ended(kb_run_t *run, long long execution_count, void *arg)
{
    kb_context_t *self = arg;
    if (kb_run_wants_rollback(run))
        s_rollback_ended(self, run);
    if (run != self->running) {
        void *handle = zlistx_find(self->queue, run);
        if (handle)
            zlistx_detach(self->queue, handle);
        return;
    }
    self->running = NULL;
    if (execution_count >= 0)
        self->execution_count = execution_count;
    self->last_activity_at = kb_now();
    s_changed(self, false); /* with the run's record, in the next batch */
    if (self->isolated)
        s_over(self, "isolated run finished", false);
    else
        s_pump(self);
}

void kb_context_enqueue(kb_context_t *self, kb_run_t *run)
{
    kb_run_set_owner(run, s_on_run_ended, self);
    zlistx_add_end(self->queue, run);
    s_pump(self);
}

/*  End every queued run with the same event. */
static void s_end_queued(kb_context_t *self, const kb_run_event_t *event)
{
    kb_run_t *run;
    while ((run = zlistx_detach(self->queue, NULL)))
        kb_run_apply(run, event);
}

/*  Take the run in progress off the kernel and end it with event. */
static void s_end_running(kb_context_t *self, const kb_run_event_t *event)
{
    kb_run_t *run = self->running;
    self->running = NULL;
    if (run)
        kb_run_apply(run, event);
}

/*  Cancel the job that has the kernel (all: and those waiting). */
static void s_cancel_jobs(kb_context_t *self, const char *why, bool all)
{
    kb_watch_pause(self->watch, false);
    kb_context_jobs_cancel(&self->jobs, why, all);
}

int kb_context_enqueue_job(kb_context_t *self, const kb_context_job_t *ops, void *arg,
                           kb_error_t *err)
{
    if (self->over)
        return kb_error_set(err, KB_ERR_SESSION_NOT_FOUND, "context %s is gone", self->id);
    if (kb_context_jobs_add(&self->jobs, ops, arg, zlistx_last(self->queue)) != 0)
        return kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
    s_pump(self);
    return 0;
}

/*  Tell the observer once that the context settled. */
static void s_settle(kb_context_t *self, bool ok, const char *why)
{
    if (self->settled)
        return;
    self->settled = true;
    if (self->settled_fn)
        self->settled_fn(self, ok, why, self->settled_arg);
}

void kb_context_on_settled(kb_context_t *self, kb_context_settled_fn *fn, void *arg)
{
    self->settled_fn = fn;
    self->settled_arg = arg;
    if (self->settled || self->ready || self->over) {
        self->settled = true;
        fn(self, self->ready && !self->over, self->ready ? NULL : "the context is over", arg);
    }
}

/* ---- limits ---------------------------------------------------------------------- */

static void s_on_limit(kb_watch_t *watch, kb_watch_event_t event, const kb_watch_info_t *info,
                       void *arg)
{
    (void)watch;
    kb_context_t *self = arg;
    zsys_warning("context %s: %s", self->id, info->text);
    static const kb_run_limit_t limits[] = {
        [KB_WATCH_OVER_MEMORY] = KB_RUN_LIMIT_MEMORY,
        [KB_WATCH_KILL] = KB_RUN_LIMIT_MEMORY_KILL,
        [KB_WATCH_OVER_PIDS] = KB_RUN_LIMIT_PIDS,
        [KB_WATCH_UNDER] = KB_RUN_LIMIT_UNDER,
    };
    kb_run_event_t run_event = {
        .type = KB_RUN_EV_LIMIT, .limit = limits[event], .note = info->text, .text = info->value
    };
    if (self->running)
        kb_run_apply(self->running, &run_event);
    else if (self->hub && kb_hub_busy(self->hub) && self->kernel
             && (event == KB_WATCH_OVER_MEMORY || event == KB_WATCH_OVER_PIDS))
        kb_kernel_interrupt(self->kernel); /* a websocket client's cell: its own error tells */
    if (event != KB_WATCH_KILL || !self->kernel)
        return;
    snprintf(self->limit_why, sizeof self->limit_why,
             "it exceeded its memory limit of %lld bytes (peak %llu bytes); its kernel was killed",
             self->memory_limit, (unsigned long long)info->peak_bytes);
    if (kb_kernel_state(self->kernel) != KB_KERNEL_DEAD) {
        kb_kernel_apply(self->kernel, KB_KEV_SHUTDOWN);
        kb_kernel_signal(self->kernel, SIGKILL); /* its exit ends the run, and the context */
    }
}

/*  Watch the kernel's tree (one this daemon started). set_rlimit: the
    kernel did not get its RLIMIT_DATA at launch (one from the pool). */
static void s_watch_start(kb_context_t *self, bool set_rlimit)
{
    pid_t pid = self->kernel && !self->attached ? kb_kernel_pid(self->kernel) : 0;
    if (!self->env->limits || pid <= 0)
        return;
    self->watch = kb_watch_new(self->env->limits, pid, self->memory_limit, self->pids_limit,
                               set_rlimit && kb_context_data_limit(self), s_on_limit, self);
    if (!self->watch)
        zsys_warning("context %s: out of memory for its watch: its limits are not enforced",
                     self->id);
}

static void s_retire_kernel(kb_context_t *self, bool kill_now)
{
    kb_watch_destroy(&self->watch);
    if (self->kernel)
        self->env->launcher->retire(self->env->launcher->impl, self->kernel, kill_now);
    self->kernel = NULL;
}

/*  The context is over: held calls fail, queued runs end unstarted, the
    kernel is killed, and the owner is told. */
static void s_over(kb_context_t *self, const char *why, bool vanished)
{
    assert(!self->over);
    self->over = true;
    s_cancel_jobs(self, why, true);
    s_settle(self, false, why);
    kb_call_t *call;
    while ((call = zlistx_detach(self->held, NULL)))
        kb_call_fail(call, KB_ERR_KERNEL_START_FAILED, "%s", why);
    s_end_queued(self, &(kb_run_event_t){ .type = KB_RUN_EV_CONTEXT_GONE, .why = why });
    s_retire_kernel(self, true);
    if (self->hub)
        kb_hub_kernel_gone(self->hub, "dead");
    kb_hub_destroy(&self->hub, why);
    self->env->gone(self, why, vanished, self->env->gone_arg);
}

/* ---- kernel callbacks --------------------------------------------------------- */

static void s_became_ready(kb_context_t *self)
{
    self->ready = true;
    self->relaunched = false;
    self->ready_at = kb_now();
    s_settle(self, true, NULL);
    kb_call_t *call;
    while ((call = zlistx_detach(self->held, NULL))) {
        kb_call_answer_json(call, kb_context_json(self));
    }
    for (kb_run_t *run = zlistx_first(self->queue); run; run = zlistx_next(self->queue))
        kb_run_answer_call(run);
    s_pump(self);
}

/*  An adopted kernel answered on control; its shell may still be busy with
    the cell the old daemon sent, whose reply goes to a socket that is gone.
    A kernel_info_request on shell is answered after that cell: until then
    the context is busy and runs wait. */
static void s_send_barrier(kb_context_t *self)
{
    self->barrier = kb_kernel_send(self->kernel, KB_CHANNEL_SHELL, "kernel_info_request",
                                   json_object(), self->barrier_msg_id, sizeof self->barrier_msg_id)
                    == 0;
}

static void s_on_ready(kb_kernel_t *kernel, void *arg)
{
    kb_context_t *self = arg;
    self->attaching = false;
    if (self->adopted && !self->fresh)
        s_send_barrier(self);
    s_changed(self, true);
    s_became_ready(self);
}

static void s_start_failed(kb_context_t *self, const char *why)
{
    zsys_warning("context %s: kernel %s failed to start: %s", self->id, self->spec->name, why);
    self->over = true;
    s_cancel_jobs(self, why, true);
    s_settle(self, false, why);
    kb_call_t *call;
    while ((call = zlistx_detach(self->held, NULL))) {
        if (self->attaching)
            kb_call_fail(call, KB_ERR_BAD_REQUEST,
                         "connection_info: the kernel did not answer (%s): its key or ports are "
                         "not usable",
                         why);
        else
            kb_call_fail(call, KB_ERR_KERNEL_START_FAILED, "kernel %s failed to start: %s",
                         self->spec->name, why);
    }
    s_end_queued(self, &(kb_run_event_t){ .type = KB_RUN_EV_START_FAILED, .why = why });
    s_retire_kernel(self, true);
    self->env->gone(self, why, false, self->env->gone_arg); /* it never lived */
}

static int s_start_kernel(kb_context_t *self, kb_error_t *err);

/*  Started again, once per start and with no error for the user, when a
    tcp port was taken before the kernel bound it (on new ports), or when a
    template's fork failed (the template is marked failed). True if so. */
static bool s_relaunch(kb_context_t *self, kb_kernel_t *kernel, const char *why)
{
    const kb_kernel_source_t *launcher = self->env->launcher;
    if (self->adopted || self->relaunched)
        return false;
    bool port = kb_connection_port_taken(kb_kernel_connection_info(kernel), why);
    if (!port && !(launcher->fork_failed && launcher->fork_failed(launcher->impl, kernel, why)))
        return false;
    zsys_warning("context %s: %s (%s); started %s", self->id,
                 port ? "a port of its kernel was taken before the kernel bound it"
                      : "its kernel forked from the template failed to start",
                 why, port ? "again on new ports" : "the ordinary way");
    self->relaunched = true;
    s_retire_kernel(self, true);
    if (self->hub)
        kb_hub_kernel_gone(self->hub, NULL);
    kb_error_t err;
    if (s_start_kernel(self, &err) != 0)
        s_start_failed(self, err.message);
    else if (self->hub)
        kb_hub_kernel_new(self->hub, self->kernel);
    return true;
}

static void s_on_start_failed(kb_kernel_t *kernel, const char *why, void *arg)
{
    kb_context_t *self = arg;
    if (!self->adopted || self->attaching || self->fresh) { /* a fork: it never lived */
        if (!s_relaunch(self, kernel, why))
            s_start_failed(self, why);
        return;
    }
    /*  It lived before the restart: it vanishes, and says why. */
    char text[700];
    snprintf(text, sizeof text,
             "its kernel (pid %d) did not answer after the daemon restarted (%s); it was killed",
             (int)kb_kernel_pid(kernel), why);
    zsys_warning("context %s: %s", self->id, text);
    s_over(self, text, true);
}

/*  The reply to the cwd/env snippet sent to a kernel taken from the pool:
    the context is ready, or it failed as a start would have. */
static void s_on_setup_reply(kb_context_t *self, const kb_msg_t *msg)
{
    kb_execution_fold_shell(self->setup, msg);
    kb_result_t *applied = kb_execution_finish(self->setup, KB_REASON_EXITED, 0, NULL, NULL);
    kb_execution_destroy(&self->setup);
    if (applied->error) {
        char why[600];
        snprintf(why, sizeof why, "cannot apply the context's cwd/env: %s: %s",
                 applied->error->name, applied->error->value);
        kb_result_destroy(&applied);
        s_start_failed(self, why);
        return;
    }
    kb_result_destroy(&applied);
    s_became_ready(self);
}

static void s_route(kb_context_t *self, kb_channel_t channel, const kb_msg_t *msg)
{
    if (self->setup) {
        if (channel == KB_CHANNEL_SHELL && strcmp(msg->parent_msg_id, self->setup_msg_id) == 0)
            s_on_setup_reply(self, msg);
        return;
    }
    if (self->barrier) {
        if (channel == KB_CHANNEL_SHELL && strcmp(msg->parent_msg_id, self->barrier_msg_id) == 0) {
            self->barrier = false;
            s_pump(self);
        }
        return; /* the old daemon's cell: nobody waits for it */
    }
    if (self->jobs.held) {
        if (kb_context_jobs_message(&self->jobs, channel, msg)) {
            kb_watch_pause(self->watch, false);
            s_pump(self);
        }
        return;
    }
    if (self->running && kb_run_owns_message(self->running, msg))
        kb_run_apply(
            self->running,
            &(kb_run_event_t){ .type = KB_RUN_EV_MESSAGE, .channel = channel, .msg = msg });
}

static void s_on_message(kb_kernel_t *kernel, kb_channel_t channel, const kb_msg_t *msg, void *arg)
{
    (void)kernel;
    kb_context_t *self = arg;
    bool client_done = self->hub && kb_hub_message(self->hub, channel, msg);
    if (self->running && channel == KB_CHANNEL_SHELL && strcmp(msg->msg_type, "execute_reply") == 0)
        kb_watch_spare(self->watch); /* its cell ended: its output's tail goes at full speed */
    s_route(self, channel, msg);
    if (client_done)
        s_pump(self); /* a websocket client's execute ended: the queue goes on */
}

static void s_on_exited(kb_kernel_t *kernel, void *arg)
{
    kb_context_t *self = arg;
    kb_watch_info_t oom;
    if (self->watch && !self->limit_why[0] && kb_watch_oom_killed(self->watch, &oom))
        s_on_limit(self->watch, KB_WATCH_KILL, &oom, self); /* the kernel's OOM killer did it */
    char why[320];
    snprintf(why, sizeof why, "%s",
             self->limit_why[0] ? self->limit_why : kb_kernel_exit_text(kernel));
    s_end_running(self, &(kb_run_event_t){ .type = KB_RUN_EV_KERNEL_EXITED, .kernel = kernel });
    s_retire_kernel(self, true); /* dead: freed at the end of the turn */
    if (!self->restoring)        /* else a rolled-back run's checkpoint brings a kernel */
        s_over(self, why, true);
}

/* ---- creation ------------------------------------------------------------------ */

/*  Take a warm kernel. Its cwd/env, when the context has them, are applied
    through the language's adapter before it counts as ready; a language
    with no adapter starts cold instead. */
static bool s_take_pooled(kb_context_t *self)
{
    bool has_env = self->kernel_env && json_object_size(self->kernel_env) > 0;
    bool setup = self->cwd || has_env;
    const kb_kernel_source_t *launcher = self->env->launcher;
    if ((setup && !kb_adapter_supported(self->language)) || !launcher->take_pooled)
        return false;
    char *code = setup ? kb_adapter_apply_code(self->language, self->cwd, self->kernel_env) : NULL;
    if (setup && !code)
        return false; /* out of memory for the snippet: start cold */
    kb_kernel_t *kernel
        = launcher->take_pooled(launcher->impl, self->spec->name, kb_context_data_limit(self));
    if (!kernel) {
        free(code);
        return false;
    }
    kb_kernel_set_callbacks(kernel, &s_kernel_callbacks, self);
    self->kernel = kernel;
    s_watch_start(self, true);
    s_changed(self, true);
    if (!setup) {
        self->ready = true;
        return true;
    }
    int rc = kb_kernel_execute(kernel, code, true, self->setup_msg_id, sizeof self->setup_msg_id);
    free(code);
    kb_execution_opts_t opts = { 0 };
    self->setup = rc == 0 ? kb_execution_new(self->setup_msg_id, &opts, NULL, NULL) : NULL;
    return true; /* a failed send means a dead kernel: its exit is reported */
}

static int s_start_kernel(kb_context_t *self, kb_error_t *err)
{
    const kb_kernel_source_t *launcher = self->env->launcher;
    self->ready = false;
    self->kernel = launcher->launch(launcher->impl, self->spec, self->cwd, self->kernel_env,
                                    kb_context_data_limit(self), &s_kernel_callbacks, self, err);
    if (!self->kernel)
        return -1;
    self->limit_why[0] = 0;
    s_watch_start(self, false);
    s_changed(self, true); /* recorded while it starts: a crash now leaves no orphan */
    return 0;
}

/*  A context without a kernel: what every one has, from opts. NULL with
    err (out of memory). */
static kb_context_t *s_alloc(const kb_context_env_t *env, const kb_kernelspec_t *spec,
                             const kb_context_opts_int_t *opts, kb_error_t *err)
{
    kb_context_t *self = calloc(1, sizeof *self);
    if (!self) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return NULL;
    }
    self->env = env;
    self->spec = kb_kernelspec_dup(spec);
    self->id = kb_xstrdup(opts->id);
    kb_context_kernel_id_of(env->sandbox_id, opts->id, self->kernel_id);
    self->language = strdup(opts->language ? opts->language : spec->language);
    for (char *p = self->language; p && *p; p++)
        *p = (char)tolower((unsigned char)*p);
    self->cwd = opts->cwd ? strdup(opts->cwd) : NULL;
    self->start_dir = kb_context_start_dir(opts->cwd);
    self->kernel_env = opts->env ? json_deep_copy(opts->env) : NULL;
    self->is_default = opts->is_default;
    self->isolated = opts->isolated;
    self->attached = opts->attached;
    self->generation = opts->generation > 0 ? opts->generation : 1;
    self->memory_limit = opts->memory_limit;
    self->pids_limit = opts->pids_limit;
    self->created_at = self->last_activity_at = kb_now();
    self->queue = zlistx_new();
    self->held = zlistx_new();
    self->forked_from = opts->forked_from ? json_deep_copy(opts->forked_from) : NULL;
    self->fresh = opts->fresh;
    if (!self->spec || !self->id || !self->kernel_id[0] || !self->language || !self->queue
        || !self->held || kb_context_jobs_init(&self->jobs) != 0 || !self->start_dir
        || (opts->forked_from && !self->forked_from) || (opts->cwd && !self->cwd)
        || (opts->env && !self->kernel_env)) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        kb_context_destroy(&self);
        return NULL;
    }
    return self;
}

kb_context_t *kb_context_new(const kb_context_env_t *env, const kb_kernelspec_t *spec,
                             const kb_context_opts_int_t *opts, kb_error_t *err)
{
    kb_context_t *self = s_alloc(env, spec, opts, err);
    if (!self)
        return NULL;
    if (!s_take_pooled(self) && s_start_kernel(self, err) != 0) {
        kb_context_destroy(&self);
        return NULL;
    }
    return self;
}

void kb_context_destroy(kb_context_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_context_t *self = *self_p;
    *self_p = NULL;
    assert(!self->kernel && !self->running && !self->watch);
    assert(!self->queue || zlistx_size(self->queue) == 0);
    kb_hub_destroy(&self->hub, "the service stopped");
    zlistx_destroy(&self->queue);
    zlistx_destroy(&self->held);
    kb_context_jobs_disarm(&self->jobs, self);
    if (self->rolling)
        self->rolling->ops->ended(self->rolling->arg, self, false);
    kb_context_armed_free(self->rolling);
    kb_context_jobs_fini(&self->jobs);
    json_decref(self->forked_from);
    json_decref(self->restored_from);
    kb_execution_destroy(&self->setup);
    kb_kernelspec_destroy(&self->spec);
    json_decref(self->kernel_env);
    free(self->id);
    free(self->language);
    free(self->cwd);
    free(self->start_dir);
    free(self);
}

/* ---- operations ------------------------------------------------------------------ */

void kb_context_hold_call(kb_context_t *self, kb_call_t *call)
{
    if (self->ready) {
        kb_call_answer_json(call, kb_context_json(self));
    } else
        zlistx_add_end(self->held, call);
}

void kb_context_interrupt(kb_context_t *self)
{
    if (!self->kernel || !self->ready)
        return;
    /*  A native run goes through its own interrupt, as a client's SIGINT
        to its process does: a signal that lands before ipykernel runs the
        user's code is ignored or drops the request, so the run times it
        (kb_run's s_interrupt_step) and names the outcome. A websocket
        client's cell, or nothing, gets the signal at once, as from
        Jupyter Server. */
    if (self->running)
        kb_run_apply(self->running,
                     &(kb_run_event_t){ .type = KB_RUN_EV_SIGNAL, .signal = SIGINT });
    else
        kb_kernel_interrupt(self->kernel);
}

static void s_delete(kb_context_t *self, const char *why)
{
    bool busy = self->running != NULL;
    s_end_running(self, &(kb_run_event_t){ .type = KB_RUN_EV_CONTEXT_GONE,
                                           .text = "the context was deleted during the run",
                                           .why = why });
    if (self->ready && !busy)
        s_retire_kernel(self, false); /* graceful: nothing of value is lost */
    s_over(self, why, true);
}

void kb_context_delete(kb_context_t *self)
{
    s_delete(self, "deleted by a client");
}

void kb_context_cull(kb_context_t *self, const char *why)
{
    s_delete(self, why);
}

int kb_context_restart(kb_context_t *self, kb_error_t *err)
{
    s_end_running(self, &(kb_run_event_t){ .type = KB_RUN_EV_CONTEXT_GONE,
                                           .text = "the context was restarted during the run",
                                           .why = "restarted by a client" });
    s_cancel_jobs(self, "the context was restarted", false);
    s_retire_kernel(self, true);
    if (self->hub)
        kb_hub_kernel_gone(self->hub, NULL);
    kb_execution_destroy(&self->setup);
    self->execution_count = 0;
    self->generation++;
    /* the new kernel is one of ours, started now */
    self->adopted = self->attached = self->barrier = self->fresh = self->restoring = false;
    self->last_activity_at = kb_now();
    if (s_start_kernel(self, err) != 0) {
        s_over(self, "its restart failed", true);
        return -1;
    }
    if (self->hub)
        kb_hub_kernel_new(self->hub, self->kernel);
    return 0;
}

void kb_context_replace_kernel(kb_context_t *self, kb_kernel_t *kernel, long long execution_count,
                               const json_t *restored_from)
{
    s_end_running(self, &(kb_run_event_t){ .type = KB_RUN_EV_CONTEXT_GONE,
                                           .text = "the context was restored during the run",
                                           .why = "restored by a client" });
    s_cancel_jobs(self, "the context was restored", false);
    s_retire_kernel(self, true);
    if (self->hub)
        kb_hub_kernel_gone(self->hub, NULL);
    kb_execution_destroy(&self->setup);
    self->ready = false;
    self->execution_count = execution_count;
    self->generation++;
    json_decref(self->restored_from);
    self->restored_from = restored_from ? json_deep_copy(restored_from) : NULL;
    self->adopted = self->fresh = true; /* answers on control; its shell ran nothing */
    self->restoring = false;
    self->attached = self->barrier = false;
    self->limit_why[0] = 0;
    self->last_activity_at = kb_now();
    self->kernel = kernel;
    kb_kernel_set_callbacks(kernel, &s_kernel_callbacks, self);
    s_watch_start(self, false);
    s_changed(self, true);
    if (self->hub)
        kb_hub_kernel_new(self->hub, self->kernel);
}

int kb_context_arm_rollback(kb_context_t *self, const char *checkpoint_id, const char *process_id,
                            const kb_context_rollback_t *ops, void *arg)
{
    return kb_context_jobs_arm(&self->jobs, checkpoint_id, process_id, ops, arg, self);
}

/*  The service stops: runs end as stopped, waiting calls are refused. */
static void s_stop_runs(kb_context_t *self)
{
    self->over = true;
    s_cancel_jobs(self, "the service is stopping", true);
    s_settle(self, false, "the service is stopping");
    s_end_running(self, &(kb_run_event_t){ .type = KB_RUN_EV_SERVICE_STOPS });
    s_end_queued(self, &(kb_run_event_t){ .type = KB_RUN_EV_SERVICE_STOPS });
    kb_call_t *call;
    while ((call = zlistx_detach(self->held, NULL)))
        kb_call_fail(call, KB_ERR_UNAVAILABLE, "the service is stopping");
}

void kb_context_stop(kb_context_t *self)
{
    s_stop_runs(self);
    s_retire_kernel(self, !self->ready);
}

/* ---- websocket clients of its channels -------------------------------------------- */

int kb_context_channels_attach(kb_context_t *self, kb_channels_t *client, kb_error_t *err)
{
    if (self->over)
        return kb_error_set(err, KB_ERR_SESSION_NOT_FOUND, "context %s is gone", self->id);
    if (!self->hub && !(self->hub = kb_hub_new()))
        return kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
    kb_hub_attach(self->hub, client, self, self->kernel);
    self->last_activity_at = kb_now();
    return 0;
}

void kb_context_channels_detach(kb_context_t *self, kb_channels_t *client)
{
    if (self->hub)
        kb_hub_detach(self->hub, client);
    self->last_activity_at = kb_now(); /* its idle time starts when the last client leaves */
    s_pump(self);                      /* an execute it left queued is gone */
}

int kb_context_channels_input(kb_context_t *self, kb_channels_t *client, kb_channel_t channel,
                              kb_msg_t *msg, kb_error_t *err)
{
    if (!self->hub || !self->kernel || self->over) {
        kb_msg_destroy(&msg);
        return kb_error_set(err, KB_ERR_SESSION_NOT_FOUND, "context %s has no kernel now",
                            self->id);
    }
    int rc = kb_hub_input(self->hub, client, self->kernel, channel, msg, zlistx_last(self->queue),
                          err);
    self->last_activity_at = kb_now();
    s_pump(self);
    return rc;
}

kb_context_t *kb_context_adopt(const kb_context_env_t *env, const kb_kernelspec_t *spec,
                               const kb_context_opts_int_t *opts, kb_kernel_t *kernel,
                               const kb_context_restored_t *restored, kb_error_t *err)
{
    kb_context_t *self = s_alloc(env, spec, opts, err);
    if (!self)
        return NULL;
    self->attaching = opts->attached && !restored;
    self->adopted = true;
    if (restored) {
        self->generation = restored->generation > 0 ? restored->generation : 1;
        self->execution_count = restored->execution_count;
        if (restored->created_at > 0)
            self->created_at = restored->created_at;
        if (restored->last_activity_at > 0)
            self->last_activity_at = restored->last_activity_at;
    }
    self->kernel = kernel;
    kb_kernel_set_callbacks(kernel, &s_kernel_callbacks, self);
    s_watch_start(self, false); /* its RLIMIT_DATA came with its launch */
    return self;
}

void kb_context_release(kb_context_t *self)
{
    s_stop_runs(self);
    kb_watch_release(&self->watch);
    if (self->kernel && self->ready && !self->isolated
        && kb_kernel_state(self->kernel) != KB_KERNEL_DEAD)
        kb_kernel_release(&self->kernel); /* left running for the next daemon */
    else
        s_retire_kernel(self, !self->ready);
}
