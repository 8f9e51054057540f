/*  kb_proc.c - runs and their process records: the steps of one run on its
    context's kernel (apply per-run cwd/env, the code, restore), timeouts,
    signals, the end of a run in each of the ways SPEC section 2 lists, log
    frames with cursors, followers and waiters, and retention of finished
    records. Engine thread only.
*/
#include "service/kb_engine.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    KB_STEP_QUEUED,
    KB_STEP_APPLY,   /* silent snippet setting per-run cwd/env */
    KB_STEP_MAIN,    /* the caller's code */
    KB_STEP_RESTORE, /* silent snippet restoring them */
    KB_STEP_DONE,
} kb_step_t;

typedef enum { KB_LOG_STDOUT, KB_LOG_STDERR, KB_LOG_SYSTEM } kb_log_channel_t;

/*  Interrupting a request (seconds; see s_interrupt_step). */
#define KB_INTERRUPT_SETTLE 0.02 /* from the request's status: busy to the signal */
#define KB_INTERRUPT_NO_BUSY 0.1 /* from the send, for kernels that send no busy */
#define KB_INTERRUPT_EARLY 0.1   /* a first signal this soon may be missed */
#define KB_INTERRUPTED_REPLY 0.2 /* after an interrupt, wait for the other of reply and idle */

typedef struct {
    long long cursor;
    kb_log_channel_t channel;
    char *data;
    double timestamp;
} kb_log_frame_t;

struct kb_proc {
    kb_engine_t *engine;
    char *id;
    kb_context_t *ctx; /* while queued or running */
    char *context_id;
    char *language;
    bool running;
    double submitted_at, started_at, ended_at;

    char *code;
    char *cwd;
    json_t *env;
    bool strip_ansi;
    bool use_adapter;
    double timeout;
    kb_step_t step;
    char msg_id[96];
    kb_execution_t *exec;      /* the caller's code */
    kb_execution_t *step_exec; /* an adapter step */
    int apply_attempts;
    int main_attempts; /* resends of an aborted main request */

    bool timed_out;    /* the timeout fired while running */
    bool timeout_kill; /* ... and the interrupt was ignored */
    int client_signal; /* SIGINT / SIGTERM / SIGKILL from a client, or 0 */
    int timeout_timer, grace_timer, completion_timer;
    int settle_timer;   /* waiting for output the kernel sends after idle */
    double late_output; /* the kernel's quirk: seconds to wait for it */

    int sends;            /* requests sent to the kernel */
    double sent_at;       /* of the current request */
    double busy_at;       /* its status: busy came, or 0 */
    int interrupted_send; /* the request with the kernel when the run was interrupted, or 0 */
    int signals;          /* interrupts sent for it */
    double first_signal_at, signal_at;
    int interrupt_timer;    /* the next signal (s_interrupt_step) */
    double completion_wait; /* seconds, of the completion timer */

    json_t *result; /* the InterpreterResult, once ended */
    kb_reason_t reason;
    int exit_code;
    const char *signal;
    char *raw_reason;

    kb_log_frame_t *frames;
    size_t frames_len, frames_cap;
    long long next_cursor;
    size_t log_bytes;

    kb_stream_t *stream; /* the run's own stream */
    zlistx_t *followers; /* kb_stream_t * following the logs */
    zlistx_t *waiters;   /* kb_request_t * waiting for the end */
    kb_request_t *start_request;
};

const char *kb_proc_id(const kb_proc_t *proc)
{
    return proc->id;
}

/* ---- logs -------------------------------------------------------------------- */

static const char *s_channel_name(kb_log_channel_t channel)
{
    return channel == KB_LOG_STDOUT ? "stdout" : channel == KB_LOG_STDERR ? "stderr" : "system";
}

static json_t *s_frame_json(const kb_log_frame_t *frame)
{
    char when[40];
    kb_iso_time(frame->timestamp, when, sizeof when);
    return json_pack("{s:I, s:s, s:s, s:s}", "cursor", (json_int_t)frame->cursor, "channel",
                     s_channel_name(frame->channel), "data", frame->data, "timestamp", when);
}

static void s_log(kb_proc_t *proc, kb_log_channel_t channel, const char *text)
{
    if (proc->frames_len == proc->frames_cap) {
        size_t cap = proc->frames_cap ? proc->frames_cap * 2 : 16;
        kb_log_frame_t *grown = realloc(proc->frames, cap * sizeof *grown);
        if (!grown)
            return;
        proc->frames = grown;
        proc->frames_cap = cap;
    }
    kb_log_frame_t *frame = &proc->frames[proc->frames_len++];
    frame->cursor = proc->next_cursor++;
    frame->channel = channel;
    frame->data = strdup(text);
    frame->timestamp = kb_now();
    proc->log_bytes += strlen(text) + sizeof *frame;
    for (kb_stream_t *follower = zlistx_first(proc->followers); follower;
         follower = zlistx_next(proc->followers))
        kb_stream_push(follower, KB_EVENT_LOG, s_frame_json(frame));
}

static void s_system(kb_proc_t *proc, const char *text)
{
    if (proc->exec)
        kb_execution_system(proc->exec, text); /* emits, which logs */
    else {
        s_log(proc, KB_LOG_SYSTEM, text);
        if (proc->stream)
            kb_stream_push(proc->stream, KB_EVENT_SYSTEM, json_pack("{s:s}", "text", text));
    }
}

/*  Every event of the run's fold comes through here. */
static void s_emit(kb_event_type_t type, json_t *data, void *arg)
{
    kb_proc_t *proc = arg;
    const char *text = json_string_value(json_object_get(data, "text"));
    if (type == KB_EVENT_STDOUT && text)
        s_log(proc, KB_LOG_STDOUT, text);
    else if (type == KB_EVENT_STDERR && text)
        s_log(proc, KB_LOG_STDERR, text);
    else if (type == KB_EVENT_SYSTEM && text)
        s_log(proc, KB_LOG_SYSTEM, text);
    if (proc->stream)
        kb_stream_push(proc->stream, type, data);
    else
        json_decref(data);
}

/* ---- records ------------------------------------------------------------------ */

static json_t *s_proc_json(const kb_proc_t *proc)
{
    char started[40], ended[40];
    kb_iso_time(proc->submitted_at, started, sizeof started);
    kb_iso_time(proc->ended_at, ended, sizeof ended);
    return json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:o}", "process_id", proc->id, "kind",
        "code", "state", proc->running ? "running" : "terminal", "context_id", proc->context_id,
        "language", proc->language, "started_at", started, "ended_at",
        proc->running ? json_null() : json_string(ended), "exit_code",
        proc->running || proc->exit_code < 0 ? json_null() : json_integer(proc->exit_code),
        "signal", proc->signal ? json_string(proc->signal) : json_null(), "reason",
        proc->running ? json_null() : json_string(kb_reason_name(proc->reason)), "raw_reason",
        proc->raw_reason ? json_string(proc->raw_reason) : json_null());
}

static json_t *s_wait_json(const kb_proc_t *proc)
{
    json_t *json = s_proc_json(proc);
    json_t *wait = json_pack(
        "{s:O, s:O, s:O, s:O, s:O}", "state", json_object_get(json, "state"), "exit_code",
        json_object_get(json, "exit_code"), "signal", json_object_get(json, "signal"), "reason",
        json_object_get(json, "reason"), "raw_reason", json_object_get(json, "raw_reason"));
    json_decref(json);
    return wait;
}

static void s_proc_free(kb_proc_t *proc)
{
    kb_execution_destroy(&proc->exec);
    kb_execution_destroy(&proc->step_exec);
    for (size_t i = 0; i < proc->frames_len; i++)
        free(proc->frames[i].data);
    free(proc->frames);
    kb_stream_t *stream;
    while ((stream = zlistx_detach(proc->followers, NULL)))
        kb_stream_unref(&stream);
    zlistx_destroy(&proc->followers);
    zlistx_destroy(&proc->waiters);
    kb_stream_unref(&proc->stream);
    json_decref(proc->result);
    json_decref(proc->env);
    free(proc->id);
    free(proc->context_id);
    free(proc->language);
    free(proc->code);
    free(proc->cwd);
    free(proc->raw_reason);
    free(proc);
}

static size_t s_proc_bytes(const kb_proc_t *proc)
{
    return proc->log_bytes * 2 + 1024;
}

/*  Keep finished records within the configured count and bytes. */
static void s_enforce_retention(kb_engine_t *self)
{
    while (zlistx_size(self->finished) > self->config.max_processes
           || (self->finished_bytes > self->config.max_process_bytes
               && zlistx_size(self->finished) > 1)) {
        kb_proc_t *oldest = zlistx_detach(self->finished, NULL);
        self->finished_bytes -= s_proc_bytes(oldest);
        zhashx_delete(self->procs, oldest->id);
        s_proc_free(oldest);
    }
}

/* ---- timers --------------------------------------------------------------------- */

/*  Seconds to a timer delay; 0 when the delay is too long to be a deadline
    anyone waits for (over 30 days: a budget, not a timer). */
static size_t s_delay_ms(double seconds)
{
    if (!(seconds > 0) || seconds > 30 * 86400.0)
        return 0;
    double ms = seconds * 1000;
    return ms < 1 ? 1 : (size_t)ms;
}

static void s_timer_stop(kb_proc_t *proc, int *timer)
{
    if (*timer >= 0)
        zloop_timer_end(proc->engine->loop, *timer);
    *timer = -1;
}

/* ---- the end of a run ----------------------------------------------------------- */

static kb_execution_t *s_main_exec(kb_proc_t *proc)
{
    if (!proc->exec) {
        kb_execution_opts_t opts = { proc->engine->config.max_output_bytes, proc->strip_ansi };
        proc->exec = kb_execution_new("", &opts, s_emit, proc);
    }
    return proc->exec;
}

static void s_end(kb_proc_t *proc, kb_reason_t reason, int exit_code, const char *signal,
                  const char *raw_reason)
{
    kb_engine_t *self = proc->engine;
    assert(proc->running);
    s_timer_stop(proc, &proc->timeout_timer);
    s_timer_stop(proc, &proc->grace_timer);
    s_timer_stop(proc, &proc->completion_timer);
    s_timer_stop(proc, &proc->settle_timer);
    s_timer_stop(proc, &proc->interrupt_timer);
    kb_execution_destroy(&proc->step_exec);
    kb_result_t *result
        = kb_execution_finish(s_main_exec(proc), reason, exit_code, signal, raw_reason);
    result->process_id = strdup(proc->id);
    result->sandbox_id = strdup(self->sandbox_id);
    result->context_id = strdup(proc->context_id);
    result->language = strdup(proc->language);
    proc->result = kb_result_to_json(result);
    kb_execution_destroy(&proc->exec);

    proc->running = false;
    proc->step = KB_STEP_DONE;
    proc->ctx = NULL;
    proc->ended_at = kb_now();
    proc->reason = reason;
    proc->exit_code = exit_code;
    proc->signal = signal;
    proc->raw_reason = raw_reason ? strdup(raw_reason) : NULL;

    if (proc->stream) {
        kb_stream_set_result(proc->stream, result);
        kb_stream_push(proc->stream, KB_EVENT_RESULT, json_deep_copy(proc->result));
        kb_stream_unref(&proc->stream);
    } else
        kb_result_destroy(&result);
    kb_stream_t *follower;
    while ((follower = zlistx_detach(proc->followers, NULL))) {
        kb_stream_push(follower, KB_EVENT_END,
                       json_pack("{s:I}", "cursor", (json_int_t)proc->next_cursor));
        kb_stream_unref(&follower);
    }
    kb_request_t *waiter;
    while ((waiter = zlistx_detach(proc->waiters, NULL))) {
        if (waiter->timer >= 0)
            zloop_timer_end(self->loop, waiter->timer);
        waiter->result = s_wait_json(proc);
        waiter->rc = 0;
        kb_request_answer(waiter);
    }
    kb_proc_answer_start(proc); /* when it ended before its context was ready */
    zlistx_add_end(self->finished, proc);
    self->finished_bytes += s_proc_bytes(proc);
    s_enforce_retention(self);
}

void kb_proc_end(kb_proc_t *proc, kb_reason_t reason, int exit_code, const char *signal,
                 const char *error_name, const char *error_value, const char *raw_reason)
{
    if (error_name)
        kb_execution_set_error(s_main_exec(proc), error_name, error_value, true);
    s_end(proc, reason, exit_code, signal, raw_reason);
}

/*  The run's steps are done: decide how it ended, free its context. */
static void s_finish(kb_proc_t *proc)
{
    kb_context_t *ctx = proc->ctx;
    kb_execution_t *exec = s_main_exec(proc);
    if (kb_execution_count(exec) >= 0)
        ctx->execution_count = kb_execution_count(exec);
    ctx->running = NULL;
    ctx->last_activity_at = kb_now();
    if (ctx->kernel)
        kb_kernel_apply(ctx->kernel, KB_KEV_DONE);
    if (proc->timed_out) {
        char value[120];
        snprintf(value, sizeof value, "the run timed out after %g s and was interrupted",
                 proc->timeout);
        kb_proc_end(proc, KB_REASON_TIMED_OUT, -1, "SIGINT", "TimeoutError", value,
                    "timeout; the kernel was interrupted");
    } else if (proc->client_signal == SIGINT)
        s_end(proc, KB_REASON_SIGNALED, -1, "SIGINT", "interrupted by a client");
    else
        s_end(proc, KB_REASON_EXITED, kb_execution_has_error(exec) ? 1 : 0, NULL, NULL);
    if (ctx->isolated)
        kb_engine_remove_context(ctx->engine, ctx, "isolated run finished");
    else
        kb_context_pump(ctx);
}

/* ---- steps ------------------------------------------------------------------------ */

static void s_on_completion_grace(kb_proc_t *proc);

static int s_completion_timer(zloop_t *loop, int timer_id, void *arg)
{
    kb_proc_t *proc = arg;
    proc->completion_timer = -1;
    s_on_completion_grace(proc);
    return 0;
}

static void s_step_done(kb_proc_t *proc);

static int s_settle_timer(zloop_t *loop, int timer_id, void *arg)
{
    kb_proc_t *proc = arg;
    proc->settle_timer = -1;
    s_step_done(proc);
    return 0;
}

static void s_send(kb_proc_t *proc, const char *code, bool silent)
{
    kb_kernel_t *kernel = proc->ctx->kernel;
    kb_execution_opts_t opts = { proc->engine->config.max_output_bytes, proc->strip_ansi };
    if (kb_kernel_execute(kernel, code, silent, proc->msg_id, sizeof proc->msg_id) != 0) {
        proc->msg_id[0] = 0; /* the kernel is gone; its exit ends the run */
        return;
    }
    proc->sends++;
    proc->sent_at = kb_now();
    proc->busy_at = 0;
    kb_kernel_apply(kernel, KB_KEV_EXECUTE);
    if (silent) {
        kb_execution_destroy(&proc->step_exec);
        proc->step_exec = kb_execution_new(proc->msg_id, &opts, NULL, NULL);
    } else {
        /*  Keep what the run gathered so far (a failed apply step's error). */
        kb_execution_t *before = proc->exec;
        proc->exec = kb_execution_new(proc->msg_id, &opts, s_emit, proc);
        kb_execution_destroy(&before);
    }
}

static void s_send_restore(kb_proc_t *proc)
{
    char *code = kb_adapter_restore_code(proc->language);
    proc->step = KB_STEP_RESTORE;
    s_send(proc, code, true);
    free(code);
}

static void s_send_apply(kb_proc_t *proc)
{
    char *code = kb_adapter_apply_code(proc->language, proc->cwd, proc->env);
    proc->step = KB_STEP_APPLY;
    proc->apply_attempts++;
    s_send(proc, code, true);
    free(code);
}

static void s_step_done(kb_proc_t *proc)
{
    s_timer_stop(proc, &proc->completion_timer);
    s_timer_stop(proc, &proc->settle_timer);
    if (proc->step == KB_STEP_APPLY) {
        kb_result_t *applied
            = kb_execution_finish(proc->step_exec, KB_REASON_EXITED, 0, NULL, NULL);
        kb_execution_destroy(&proc->step_exec);
        bool aborted = applied->error && strcmp(applied->error->name, "ExecutionAborted") == 0;
        if (aborted && proc->apply_attempts < 3 && !proc->timed_out && !proc->client_signal) {
            kb_result_destroy(&applied);
            s_send_apply(proc); /* the kernel was still aborting after an error */
            return;
        }
        if (applied->error) {
            kb_execution_set_error(s_main_exec(proc), applied->error->name, applied->error->value,
                                   true);
            kb_result_destroy(&applied);
            s_send_restore(proc);
            return;
        }
        kb_result_destroy(&applied);
        if (proc->timed_out || proc->client_signal) {
            s_send_restore(proc); /* interrupted before the code went: it never runs */
            return;
        }
        proc->step = KB_STEP_MAIN;
        s_send(proc, proc->code, false);
        return;
    }
    if (proc->step == KB_STEP_MAIN && proc->use_adapter) {
        s_send_restore(proc);
        return;
    }
    kb_execution_destroy(&proc->step_exec);
    s_finish(proc);
}

static kb_execution_t *s_current(kb_proc_t *proc)
{
    return proc->step == KB_STEP_MAIN ? proc->exec : proc->step_exec;
}

/*  The run was interrupted (timeout or a client's SIGINT) while the
    request now with the kernel was. */
static bool s_current_interrupted(const kb_proc_t *proc)
{
    return proc->interrupted_send > 0 && proc->interrupted_send == proc->sends;
}

static void s_on_completion_grace(kb_proc_t *proc)
{
    kb_execution_t *exec = s_current(proc);
    char text[200];
    snprintf(text, sizeof text,
             "%s never came for the %s%s request after %g s; the run ended with what it had",
             kb_execution_has_reply(exec) ? "status: idle" : "execute_reply",
             s_current_interrupted(proc) ? "interrupted " : "",
             proc->step == KB_STEP_MAIN ? "execute" : "cwd/env adapter", proc->completion_wait);
    s_system(proc, text);
    s_step_done(proc);
}

/* ---- interrupts ------------------------------------------------------------------ */

/*  When an interrupted request gets its signal(s). A kernel takes SIGINT
    well only once it runs the request's code: ipykernel ignores SIGINT
    until its handler for the request is in place, exits (status 0) if
    SIGINT lands while it installs that handler, drops the request (status:
    idle, no execute_reply) if SIGINT lands in its own code around the
    user's, and IPython swallows it in its pre-run hooks. So the first
    signal waits until KB_INTERRUPT_SETTLE after the request's status: busy
    (it goes at once when that is long past; KB_INTERRUPT_NO_BUSY after the
    send for a kernel that sends no busy). A first signal that went early
    (within KB_INTERRUPT_EARLY of that, or before the busy came) may still
    be lost, or wait in a system call the code just entered: if the request
    has not answered (error, reply or idle) by half the grace, it is sent
    once more, not sooner, as IPython may take most of a second to format
    the traceback of the first. Code that ran a while before the interrupt
    gets one signal, so that code catching KeyboardInterrupt keeps the grace
    to clean up. Nothing goes once the request has answered, or to a later
    request (the restore step). */
static void s_interrupt_step(kb_proc_t *proc);

static int s_interrupt_timer(zloop_t *loop, int timer_id, void *arg)
{
    kb_proc_t *proc = arg;
    proc->interrupt_timer = -1;
    s_interrupt_step(proc);
    return 0;
}

/*  The earliest time for the first signal to the current request. */
static double s_interrupt_ready_at(const kb_proc_t *proc)
{
    return proc->busy_at > 0 ? proc->busy_at + KB_INTERRUPT_SETTLE
                             : proc->sent_at + KB_INTERRUPT_NO_BUSY;
}

static void s_interrupt_step(kb_proc_t *proc)
{
    s_timer_stop(proc, &proc->interrupt_timer);
    kb_execution_t *exec = s_current(proc);
    if (!proc->running || !proc->ctx || !proc->ctx->kernel || !s_current_interrupted(proc) || !exec
        || kb_execution_has_reply(exec) || kb_execution_has_idle(exec)
        || kb_execution_has_error(exec))
        return;
    double when = s_interrupt_ready_at(proc);
    if (proc->signals > 0) {
        if (proc->signals > 1 || proc->first_signal_at >= when + KB_INTERRUPT_EARLY)
            return;
        double again = proc->signal_at + proc->engine->config.interrupt_grace / 2;
        if (when < again)
            when = again;
    }
    double now = kb_now();
    if (now < when) {
        proc->interrupt_timer
            = zloop_timer(proc->engine->loop, s_delay_ms(when - now), 1, s_interrupt_timer, proc);
        return;
    }
    if (proc->signals > 0) {
        char text[120];
        snprintf(text, sizeof text, "no answer to the interrupt after %.1f s; interrupting again",
                 now - proc->signal_at);
        s_system(proc, text);
    } else
        proc->first_signal_at = now;
    proc->signals++;
    proc->signal_at = now;
    kb_kernel_interrupt(proc->ctx->kernel);
    s_interrupt_step(proc); /* schedules the next one, if any */
}

/*  Interrupt the run: the request now with the kernel, as s_interrupt_step says. */
static void s_interrupt(kb_proc_t *proc)
{
    if (s_current_interrupted(proc)) {
        if (proc->signals > 0) { /* one more, as asked (a client's second SIGINT) */
            proc->signals++;
            proc->signal_at = kb_now();
            kb_kernel_interrupt(proc->ctx->kernel);
        }
        return; /* else the first is still to go */
    }
    proc->interrupted_send = proc->sends;
    proc->signals = 0;
    s_interrupt_step(proc);
}

static bool s_is_busy(const kb_msg_t *msg)
{
    const char *state = json_string_value(json_object_get(msg->content, "execution_state"));
    return strcmp(msg->msg_type, "status") == 0 && state && strcmp(state, "busy") == 0;
}

bool kb_proc_owns_message(kb_proc_t *proc, const kb_msg_t *msg)
{
    return proc->msg_id[0] && strcmp(msg->parent_msg_id, proc->msg_id) == 0;
}

/*  ipykernel aborts requests that arrive just after a run failed (its
    stop_on_error window), even when the failed run has completed. Runs are
    sent one at a time, so an aborted request never ran: send it again. */
static bool s_retry_aborted(kb_proc_t *proc, kb_channel_t channel, const kb_msg_t *msg)
{
    if (channel != KB_CHANNEL_SHELL || proc->step != KB_STEP_MAIN
        || strcmp(msg->msg_type, "execute_reply") != 0 || proc->main_attempts >= 3
        || proc->timed_out || proc->client_signal)
        return false;
    const char *status = json_string_value(json_object_get(msg->content, "status"));
    if (!status || (strcmp(status, "aborted") != 0 && strcmp(status, "abort") != 0))
        return false;
    s_timer_stop(proc, &proc->completion_timer);
    proc->main_attempts++;
    s_send(proc, proc->code, false);
    return true;
}

void kb_proc_on_message(kb_proc_t *proc, kb_channel_t channel, const kb_msg_t *msg)
{
    kb_execution_t *exec = s_current(proc);
    if (!exec)
        return;
    if (s_retry_aborted(proc, channel, msg))
        return;
    if (channel == KB_CHANNEL_IOPUB)
        kb_execution_fold_iopub(exec, msg);
    else if (channel == KB_CHANNEL_SHELL)
        kb_execution_fold_shell(exec, msg);
    else
        return;
    if (channel == KB_CHANNEL_IOPUB && !proc->busy_at && s_is_busy(msg)) {
        proc->busy_at = kb_now();
        s_interrupt_step(proc); /* a waiting signal goes a little later */
    }
    if (kb_execution_complete(exec)) {
        /*  A kernel that publishes output after idle (kb_kernelspec_quirks):
            the code step ends once none came for late_output seconds. */
        if (proc->late_output > 0 && proc->step == KB_STEP_MAIN) {
            s_timer_stop(proc, &proc->completion_timer);
            s_timer_stop(proc, &proc->settle_timer);
            proc->settle_timer = zloop_timer(proc->engine->loop, s_delay_ms(proc->late_output), 1,
                                             s_settle_timer, proc);
            return;
        }
        s_step_done(proc);
        return;
    }
    if ((kb_execution_has_reply(exec) || kb_execution_has_idle(exec))
        && proc->completion_timer < 0) {
        /*  After an interrupt the other one is not waited for long: ipykernel
            sends idle and no reply when SIGINT lands in its own code. */
        proc->completion_wait = proc->engine->config.completion_grace;
        if (s_current_interrupted(proc) && proc->completion_wait > KB_INTERRUPTED_REPLY)
            proc->completion_wait = KB_INTERRUPTED_REPLY;
        proc->completion_timer = zloop_timer(proc->engine->loop, s_delay_ms(proc->completion_wait),
                                             1, s_completion_timer, proc);
    }
}

void kb_proc_answer_start(kb_proc_t *proc)
{
    if (proc->start_request) {
        proc->start_request->rc = 0;
        kb_request_answer(proc->start_request);
        proc->start_request = NULL;
    }
}

void kb_proc_start(kb_proc_t *proc)
{
    proc->started_at = kb_now();
    proc->late_output = kb_kernelspec_quirks(kb_kernel_spec(proc->ctx->kernel)).late_output;
    if (proc->use_adapter)
        s_send_apply(proc);
    else {
        proc->step = KB_STEP_MAIN;
        s_send(proc, proc->code, false);
    }
    kb_proc_answer_start(proc); /* after the send: the kernel starts meanwhile */
}

/* ---- outside events ------------------------------------------------------------------ */

void kb_proc_on_kernel_exit(kb_proc_t *proc, kb_kernel_t *kernel)
{
    const char *exit_text = kb_kernel_exit_text(kernel);
    if (proc->client_signal == SIGKILL || proc->client_signal == SIGTERM) {
        kb_proc_end(proc, KB_REASON_SIGNALED, -1, kb_signal_name(proc->client_signal),
                    "KernelKilled", "the kernel was killed by a client", exit_text);
        return;
    }
    if (proc->timeout_kill) {
        char raw[160], value[120];
        snprintf(raw, sizeof raw, "interrupt ignored for %.1f s; kernel killed",
                 proc->engine->config.interrupt_grace);
        snprintf(value, sizeof value, "the run timed out after %g s; the kernel was killed",
                 proc->timeout);
        kb_proc_end(proc, KB_REASON_TIMED_OUT, -1, "SIGKILL", "TimeoutError", value, raw);
        return;
    }
    if (proc->timed_out || proc->client_signal == SIGINT) {
        /*  The kernel died of the interrupt (Deno's kernel, xeus-python 0.14):
            the run still ended because of the timeout or the client. */
        char raw[240], value[160];
        snprintf(raw, sizeof raw, "the kernel died when interrupted: %s", exit_text);
        if (proc->timed_out) {
            snprintf(value, sizeof value,
                     "the run timed out after %g s; the kernel died when interrupted",
                     proc->timeout);
            kb_proc_end(proc, KB_REASON_TIMED_OUT, -1, "SIGINT", "TimeoutError", value, raw);
        } else
            kb_proc_end(proc, KB_REASON_SIGNALED, -1, "SIGINT", "KernelDied",
                        "the kernel died when interrupted", raw);
        return;
    }
    int status = kb_kernel_exit_status(kernel);
    int sig = kb_kernel_term_signal(kernel);
    kb_proc_end(proc, KB_REASON_FAILED, status, sig ? kb_signal_name(sig) : NULL, "KernelDied",
                exit_text, exit_text);
}

void kb_proc_start_failed(kb_proc_t *proc, const char *why)
{
    kb_request_t *request = proc->start_request;
    if (request) {
        /*  Never started: the caller gets an error instead of a run. */
        proc->start_request = NULL;
        kb_request_fail(request, KB_ERR_KERNEL_START_FAILED, "kernel failed to start: %s", why);
        s_timer_stop(proc, &proc->timeout_timer);
        zhashx_delete(proc->engine->procs, proc->id);
        s_proc_free(proc);
        return;
    }
    kb_proc_end(proc, KB_REASON_FAILED, -1, NULL, "KernelDied", "the kernel failed to start", why);
}

static void s_start_grace(kb_proc_t *proc);

static int s_on_grace(zloop_t *loop, int timer_id, void *arg)
{
    kb_proc_t *proc = arg;
    proc->grace_timer = -1;
    if (!proc->running || !proc->ctx || !proc->ctx->kernel)
        return 0;
    if (proc->client_signal == SIGTERM) {
        kb_kernel_signal(proc->ctx->kernel, SIGKILL);
        return 0;
    }
    kb_execution_t *exec = s_current(proc);
    if (s_current_interrupted(proc) && exec
        && (kb_execution_has_reply(exec) || kb_execution_has_idle(exec))) {
        /*  The kernel answered the interrupt and only one of the two
            messages is missing: no reason to kill it. The steps still to
            come (the restore) get a grace of their own. */
        s_start_grace(proc);
        s_on_completion_grace(proc);
        return 0;
    }
    proc->timeout_kill = true;
    char text[120];
    snprintf(text, sizeof text, "interrupt ignored for %.1f s; killing the kernel",
             proc->engine->config.interrupt_grace);
    s_system(proc, text);
    kb_kernel_apply(proc->ctx->kernel, KB_KEV_SHUTDOWN);
    kb_kernel_signal(proc->ctx->kernel, SIGKILL); /* its exit ends the run */
    return 0;
}

static void s_start_grace(kb_proc_t *proc)
{
    if (proc->grace_timer < 0)
        proc->grace_timer
            = zloop_timer(proc->engine->loop, s_delay_ms(proc->engine->config.interrupt_grace), 1,
                          s_on_grace, proc);
}

/*  Take a run that has not started out of its context's queue. */
static void s_dequeue(kb_proc_t *proc)
{
    void *handle = zlistx_find(proc->ctx->queue, proc);
    if (handle)
        zlistx_detach(proc->ctx->queue, handle);
}

static int s_on_timeout(zloop_t *loop, int timer_id, void *arg)
{
    kb_proc_t *proc = arg;
    proc->timeout_timer = -1;
    if (!proc->running)
        return 0;
    char value[120];
    if (proc->step == KB_STEP_QUEUED) {
        snprintf(value, sizeof value, "the run timed out after %g s before it started",
                 proc->timeout);
        s_dequeue(proc);
        kb_proc_end(proc, KB_REASON_TIMED_OUT, -1, NULL, "TimeoutError", value,
                    "timed out while queued");
        return 0;
    }
    proc->timed_out = true;
    snprintf(value, sizeof value, "timeout after %g s; interrupting the kernel", proc->timeout);
    s_system(proc, value);
    s_interrupt(proc);
    s_start_grace(proc);
    return 0;
}

/* ---- creation ---------------------------------------------------------------------------- */

kb_proc_t *kb_proc_new(kb_engine_t *engine, kb_context_t *ctx, const kb_run_opts_t *opts,
                       kb_stream_t *stream)
{
    kb_proc_t *proc = calloc(1, sizeof *proc);
    proc->engine = engine;
    proc->id = kb_random_id("prc_");
    proc->ctx = ctx;
    proc->context_id = strdup(ctx->id);
    proc->language = strdup(ctx->language);
    proc->running = true;
    proc->submitted_at = kb_now();
    proc->code = strdup(opts->code);
    proc->strip_ansi = opts->strip_ansi;
    proc->timeout = opts->timeout > 0 ? opts->timeout : engine->config.default_timeout;
    proc->timeout_timer = proc->grace_timer = proc->completion_timer = proc->settle_timer = -1;
    proc->interrupt_timer = -1;
    proc->exit_code = -1;
    proc->followers = zlistx_new();
    proc->waiters = zlistx_new();
    bool has_env = opts->env && json_object_size(opts->env) > 0;
    if (!ctx->isolated && (opts->cwd || has_env)) {
        proc->use_adapter = true;
        proc->cwd = opts->cwd ? strdup(opts->cwd) : NULL;
        proc->env = has_env ? json_deep_copy(opts->env) : NULL;
    }
    if (stream)
        proc->stream = kb_stream_ref(stream);
    zhashx_insert(engine->procs, proc->id, proc);
    if (proc->stream)
        kb_stream_push(
            proc->stream, KB_EVENT_START,
            json_pack("{s:s, s:o}", "process_id", proc->id, "context", kb_context_identity(ctx)));
    if (s_delay_ms(proc->timeout))
        proc->timeout_timer
            = zloop_timer(engine->loop, s_delay_ms(proc->timeout), 1, s_on_timeout, proc);
    return proc;
}

/* ---- requests ---------------------------------------------------------------------------- */

static void s_answer(kb_request_t *request, json_t *json)
{
    request->result = json;
    request->rc = 0;
    kb_request_answer(request);
}

static kb_proc_t *s_lookup(kb_engine_t *self, kb_request_t *request)
{
    kb_proc_t *proc = request->id ? zhashx_lookup(self->procs, request->id) : NULL;
    if (!proc)
        kb_request_fail(request, KB_ERR_PROCESS_NOT_FOUND, "no process %s",
                        request->id ? request->id : "(none)");
    return proc;
}

static bool s_has_nul_free_env(const json_t *env)
{
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)env, key, value)
    {
        if (!json_is_string(value) || strchr(key, '=') || !*key)
            return false;
    }
    return true;
}

static void s_handle_run(kb_engine_t *self, kb_request_t *request)
{
    const kb_run_opts_t *opts = request->run_opts;
    if (!opts || !opts->code) {
        kb_request_fail(request, KB_ERR_BAD_REQUEST, "code is required");
        return;
    }
    if (strlen(opts->code) > self->config.max_code_bytes) {
        kb_request_fail(request, KB_ERR_PAYLOAD_TOO_LARGE, "code is %zu bytes, the limit is %zu",
                        strlen(opts->code), self->config.max_code_bytes);
        return;
    }
    if (opts->isolated && opts->context_id) {
        kb_request_fail(request, KB_ERR_BAD_REQUEST, "isolated runs cannot name a context_id");
        return;
    }
    if (opts->timeout < 0) {
        kb_request_fail(request, KB_ERR_BAD_REQUEST, "timeout must not be negative");
        return;
    }
    if (opts->env && (!json_is_object(opts->env) || !s_has_nul_free_env(opts->env))) {
        kb_request_fail(request, KB_ERR_BAD_REQUEST,
                        "env must be an object of string values with non-empty names");
        return;
    }
    kb_context_t *ctx = kb_engine_context_for_run(self, request);
    if (!ctx)
        return;
    bool has_env = opts->env && json_object_size(opts->env) > 0;
    if (!ctx->isolated && (opts->cwd || has_env) && !kb_adapter_supported(ctx->language)) {
        kb_request_fail(request, KB_ERR_UNSUPPORTED_OPTION,
                        "per-run cwd/env is not supported for language %s; give them when "
                        "creating the context, or run isolated",
                        ctx->language);
        return;
    }
    kb_proc_t *proc = kb_proc_new(self, ctx, opts, request->stream);
    zlistx_add_end(ctx->queue, proc);
    proc->start_request = request; /* answered once the kernel is ready */
    if (ctx->ready) {
        kb_context_pump(ctx);       /* the request goes to the kernel first, */
        kb_proc_answer_start(proc); /* then the caller wakes (if still queued too) */
    }
}

static void s_handle_list(kb_engine_t *self, kb_request_t *request)
{
    json_t *list = json_array();
    for (kb_proc_t *proc = zhashx_first(self->procs); proc; proc = zhashx_next(self->procs)) {
        if (request->filter_state && *request->filter_state
            && strcmp(request->filter_state, proc->running ? "running" : "terminal") != 0)
            continue;
        if (request->filter_context && *request->filter_context
            && strcmp(request->filter_context, proc->context_id) != 0)
            continue;
        json_array_append_new(list, s_proc_json(proc));
    }
    s_answer(request, json_pack("{s:o}", "processes", list));
}

static size_t s_first_index(kb_proc_t *proc, long long cursor)
{
    size_t i = 0;
    if (cursor >= 0)
        while (i < proc->frames_len && proc->frames[i].cursor < cursor)
            i++;
    return i;
}

static void s_handle_logs(kb_engine_t *self, kb_request_t *request)
{
    kb_proc_t *proc = s_lookup(self, request);
    if (!proc)
        return;
    json_t *frames = json_array();
    size_t i = s_first_index(proc, request->cursor);
    long long next = request->cursor >= 0 ? request->cursor
                     : proc->frames_len   ? proc->frames[0].cursor
                                          : proc->next_cursor;
    for (; i < proc->frames_len && (!request->limit || json_array_size(frames) < request->limit);
         i++) {
        json_array_append_new(frames, s_frame_json(&proc->frames[i]));
        next = proc->frames[i].cursor + 1;
    }
    s_answer(request,
             json_pack("{s:o, s:I, s:b}", "frames", frames, "next_cursor", (json_int_t)next, "eof",
                       !proc->running && next >= proc->next_cursor));
}

static void s_handle_follow(kb_engine_t *self, kb_request_t *request)
{
    kb_proc_t *proc = s_lookup(self, request);
    if (!proc)
        return;
    for (size_t i = s_first_index(proc, request->cursor); i < proc->frames_len; i++)
        kb_stream_push(request->stream, KB_EVENT_LOG, s_frame_json(&proc->frames[i]));
    if (proc->running)
        zlistx_add_end(proc->followers, kb_stream_ref(request->stream));
    else
        kb_stream_push(request->stream, KB_EVENT_END,
                       json_pack("{s:I}", "cursor", (json_int_t)proc->next_cursor));
    s_answer(request, NULL);
}

/*  A wait ran out before the run ended: answer "still running". */
static int s_on_wait_timeout(zloop_t *loop, int timer_id, void *arg)
{
    kb_request_t *request = arg;
    kb_proc_t *proc = request->owner;
    request->timer = -1;
    void *handle = zlistx_find(proc->waiters, request);
    if (handle)
        zlistx_detach(proc->waiters, handle);
    s_answer(request, json_pack("{s:s, s:n, s:n, s:n, s:n}", "state", "running", "exit_code",
                                "signal", "reason", "raw_reason"));
    return 0;
}

static void s_handle_wait(kb_engine_t *self, kb_request_t *request)
{
    kb_proc_t *proc = s_lookup(self, request);
    if (!proc)
        return;
    if (!proc->running || request->timeout == 0) {
        s_answer(request, s_wait_json(proc));
        return;
    }
    zlistx_add_end(proc->waiters, request);
    request->owner = proc;
    if (s_delay_ms(request->timeout))
        request->timer
            = zloop_timer(self->loop, s_delay_ms(request->timeout), 1, s_on_wait_timeout, request);
}

static void s_handle_signal(kb_engine_t *self, kb_request_t *request)
{
    kb_proc_t *proc = s_lookup(self, request);
    if (!proc)
        return;
    int sig = !request->signal                          ? 0
              : strcmp(request->signal, "SIGINT") == 0  ? SIGINT
              : strcmp(request->signal, "SIGTERM") == 0 ? SIGTERM
              : strcmp(request->signal, "SIGKILL") == 0 ? SIGKILL
                                                        : 0;
    if (!sig) {
        kb_request_fail(request, KB_ERR_BAD_REQUEST, "signal must be SIGINT, SIGTERM or SIGKILL");
        return;
    }
    if (!proc->running) {
        s_answer(request, NULL);
        return;
    }
    if (proc->step == KB_STEP_QUEUED) {
        s_dequeue(proc);
        kb_proc_end(proc, KB_REASON_SIGNALED, -1, kb_signal_name(sig),
                    sig == SIGINT ? "KeyboardInterrupt" : "RunCancelled",
                    "signalled before it started", "signalled while queued");
        s_answer(request, NULL);
        return;
    }
    proc->client_signal = sig;
    kb_kernel_t *kernel = proc->ctx->kernel;
    if (sig == SIGINT)
        s_interrupt(proc);
    else {
        kb_kernel_apply(kernel, KB_KEV_SHUTDOWN);
        kb_kernel_signal(kernel, sig);
        if (sig == SIGTERM)
            s_start_grace(proc);
    }
    s_answer(request, NULL);
}

void kb_proc_handle(kb_engine_t *self, kb_request_t *request)
{
    kb_proc_t *proc;
    switch (request->type) {
        case KB_REQ_RUN:
            s_handle_run(self, request);
            break;
        case KB_REQ_PROC_LIST:
            s_handle_list(self, request);
            break;
        case KB_REQ_PROC_GET:
            if ((proc = s_lookup(self, request)))
                s_answer(request, s_proc_json(proc));
            break;
        case KB_REQ_PROC_RESULT:
            if (!(proc = s_lookup(self, request)))
                break;
            if (proc->running)
                kb_request_fail(request, KB_ERR_PROCESS_RUNNING, "process %s is still running",
                                proc->id);
            else
                s_answer(request, json_incref(proc->result));
            break;
        case KB_REQ_PROC_LOGS:
            s_handle_logs(self, request);
            break;
        case KB_REQ_PROC_FOLLOW:
            s_handle_follow(self, request);
            break;
        case KB_REQ_PROC_WAIT:
            s_handle_wait(self, request);
            break;
        case KB_REQ_PROC_SIGNAL:
            s_handle_signal(self, request);
            break;
        case KB_REQ_PROC_DELETE:
            if (!(proc = s_lookup(self, request)))
                break;
            if (proc->running) {
                kb_request_fail(request, KB_ERR_PROCESS_RUNNING, "process %s is still running",
                                proc->id);
                break;
            }
            zlistx_detach(self->finished, zlistx_find(self->finished, proc));
            self->finished_bytes -= s_proc_bytes(proc);
            zhashx_delete(self->procs, proc->id);
            s_proc_free(proc);
            s_answer(request, NULL);
            break;
        default:
            kb_request_fail(request, KB_ERR_INTERNAL, "unknown request %d", request->type);
            break;
    }
}

void kb_proc_destroy_all(kb_engine_t *self)
{
    zlistx_t *all = zhashx_values(self->procs);
    for (kb_proc_t *proc = zlistx_first(all); proc; proc = zlistx_next(all)) {
        assert(!proc->running);
        s_proc_free(proc);
    }
    zlistx_destroy(&all);
    zhashx_purge(self->procs);
    zlistx_purge(self->finished);
}
