/*  kb_run.c - one run on its kernel: kb_run_apply performs what the
    transition table (kb_run_table.c) says each event does, and this file
    does the I/O: the steps sent to the kernel, their messages, the
    timers, the interrupts and signals, and the end written to the record
    and the stream. Engine thread only. */
#include "service/run/kb_run.h"
#include "service/run/kb_run_impl.h"

#include <assert.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/kb_kernelspec.h"
#include "service/run/kb_adapter.h"
#include "service/run/kb_execution.h"
#include "util/kb_alloc.h"
#include "util/kb_clock.h"

#define KB_BACKLOG_WAIT 120.0    /* the grace prolonged while the kernel's output is read */
#define KB_INTERRUPTED_REPLY 0.2 /* after an interrupt, wait for the other of reply and idle */

/* struct kb_run: kb_run_impl.h */

/* ---- events out ------------------------------------------------------------- */

/*  Every event of the run's fold comes through here: text goes to the
    record's log as well as to the stream. */
static void s_emit(kb_event_type_t type, json_t *data, long long cursor, void *arg)
{
    kb_run_t *self = arg;
    if (cursor >= 0) {
        /* Text kept in the record's output: followers and the stream get
           its cursor. */
        kb_proc_logged(self->proc, cursor);
        if (self->stream)
            kb_stream_push_text(self->stream, type, kb_proc_outlog(self->proc), cursor);
    } else if (self->stream)
        kb_stream_push(self->stream, type, data);
    else
        json_decref(data);
}

static kb_execution_t *s_main_exec(kb_run_t *self)
{
    if (!self->exec) {
        kb_execution_opts_t opts
            = { self->settings->max_output_bytes, self->strip_ansi, kb_proc_outlog(self->proc) };
        self->exec = kb_execution_new("", &opts, s_emit, self);
    }
    return self->exec;
}

/*  A note of the daemon's own: a system log frame and a stream event. */
static void s_system(kb_run_t *self, const char *text)
{
    kb_execution_system(s_main_exec(self), text);
}

/* ---- the end ------------------------------------------------------------------ */

static void s_free(void *arg)
{
    kb_run_t *self = arg;
    kb_execution_destroy(&self->exec);
    kb_execution_destroy(&self->step_exec);
    kb_stream_unref(&self->stream);
    json_decref(self->identity);
    json_decref(self->env);
    free(self->language);
    free(self->code);
    free(self->cwd);
    free(self->rollback);
    free(self);
}

void kb_run_answer_call(kb_run_t *self)
{
    if (self->held_call) {
        kb_call_answer_json(self->held_call, NULL);
        self->held_call = NULL;
    }
}

void kb_run_answer_queued_call(kb_run_t *self)
{
    if (self->state == KB_RUN_QUEUED)
        kb_run_answer_call(self);
}

/*  The loop's monotonic clock, in seconds. */
static double s_now(const kb_run_t *self)
{
    return (double)kb_loop_now_ms(self->settings->loop) / 1000;
}

/*  What the run cost: nothing when it never had the kernel. */
static void s_measure(kb_run_t *self, kb_resources_t *out)
{
    if (!self->started_at) {
        *out = (kb_resources_t){ 0, 0, 0 };
        return;
    }
    out->wall_time_s = s_now(self) - self->started_at;
    if (self->meter)
        self->meter(self, out, self->ended_arg);
}

/*  End the run as the outcome's row says. value is the error's value for a
    row that forces its error; raw_reason and the given signal may be NULL;
    exit_code < 0 is null. The owner hears of it last. */
static void s_end(kb_run_t *self, kb_run_outcome_t outcome, const char *value,
                  const char *raw_reason, const char *given_signal, int exit_code)
{
    assert(self->state != KB_RUN_ENDED);
    const kb_run_row_t *row = kb_run_row(outcome);
    const char *signal = row->signal == kb_run_signal_given ? given_signal : row->signal;
    kb_timer_stop(&self->timeout_timer);
    kb_timer_stop(&self->grace_timer);
    kb_timer_stop(&self->completion_timer);
    kb_timer_stop(&self->settle_timer);
    kb_timer_stop(&self->interrupt_timer);
    kb_execution_t *exec = s_main_exec(self);
    if (row->error)
        kb_execution_set_error(exec, row->error, value ? value : "", true);
    if (outcome == KB_RUN_OUT_FINISHED)
        exit_code = kb_execution_has_error(exec) ? 1 : 0;
    long long count = kb_execution_count(exec);
    kb_result_t *result = kb_execution_finish(exec, row->reason, exit_code, signal, raw_reason);
    const json_t *who = self->identity;
    result->process_id = kb_xstrdup(kb_proc_id(self->proc));
    result->sandbox_id = kb_xstrdup(json_string_value(json_object_get(who, "sandbox_id")));
    result->context_id = kb_xstrdup(json_string_value(json_object_get(who, "context_id")));
    result->language = kb_xstrdup(self->language);
    result->generation = json_integer_value(json_object_get(self->identity, "generation"));
    /*  Rolled back: the context's next generation is its state before. */
    self->rolled_back = self->rollback && kb_run_rolls_back(outcome, kb_execution_has_error(exec));
    result->rollback = self->wants_rollback;
    result->rolled_back = self->rolled_back;
    result->generation += self->rolled_back;
    s_measure(self, &result->resources);
    kb_metrics_run_ended(self->settings->metrics, self->language, row->reason,
                         result->resources.wall_time_s);
    /* The result without its logs' text, which stays in the record's
       output: the record, the stream's reader and the struct share it. */
    json_t *json = kb_result_to_json(result);
    self->state = KB_RUN_ENDED;
    if (self->stream) {
        kb_runlog_t *log = kb_proc_outlog(self->proc);
        kb_stream_set_result(self->stream, result, log);
        kb_stream_push_result(self->stream, json_incref(json), kb_result_doc_new(json, log));
        kb_stream_unref(&self->stream);
    } else
        kb_result_destroy(&result);
    kb_proc_end(self->proc, json, row->reason, exit_code, signal, raw_reason);
    kb_run_answer_call(self); /* when it ended before its context was ready */
    kb_loop_defer(self->settings->loop, s_free, self);
    if (self->ended)
        self->ended(self, count, self->ended_arg);
}

/*  The kernel could not start while the caller still waits: the caller
    gets an error instead of a run, and no record is kept. */
static void s_discard(kb_run_t *self, const char *why)
{
    kb_call_t *call = self->held_call;
    self->held_call = NULL;
    kb_call_fail(call, KB_ERR_KERNEL_START_FAILED, "kernel failed to start: %s", why);
    kb_timer_stop(&self->timeout_timer);
    kb_proc_forget(self->proc);
    self->proc = NULL;
    self->state = KB_RUN_ENDED;
    kb_loop_defer(self->settings->loop, s_free, self);
    if (self->ended)
        self->ended(self, -1, self->ended_arg);
}

/*  The steps are done: how did it end? */
static void s_finish(kb_run_t *self)
{
    kb_run_outcome_t outcome;
    if (kb_run_finish(self->cause, self->over_memory, &outcome) == KB_RUN_HOLDING) {
        self->state = KB_RUN_HOLDING; /* ends as the watch says: under, or killed */
        return;
    }
    if (self->kernel)
        kb_kernel_apply(self->kernel, KB_KEV_DONE);
    char value[120];
    switch (outcome) {
        case KB_RUN_OUT_TIMED_OUT:
            snprintf(value, sizeof value, "the run timed out after %g s and was interrupted",
                     self->timeout);
            s_end(self, outcome, value, "timeout; the kernel was interrupted", NULL, -1);
            return;
        case KB_RUN_OUT_INTERRUPTED:
            s_end(self, outcome, NULL, "interrupted by a client", NULL, -1);
            return;
        case KB_RUN_OUT_MEMORY:
            s_end(self, outcome, self->limit_value,
                  "over the memory limit; the kernel was interrupted", NULL, -1);
            return;
        case KB_RUN_OUT_MEMORY_KILLED:
            s_end(self, outcome, self->limit_value,
                  "over the memory limit after the interrupt grace; the kernel is killed", NULL,
                  -1);
            return;
        case KB_RUN_OUT_PIDS:
            s_end(self, outcome, self->limit_value,
                  "over the pids limit; the processes over it were killed and the kernel "
                  "interrupted",
                  NULL, -1);
            return;
        default:
            s_end(self, KB_RUN_OUT_FINISHED, NULL, NULL, NULL, 0);
            return;
    }
}

/*  The kernel died or was killed while the run had it. */
static void s_kernel_exited(kb_run_t *self, kb_kernel_t *kernel)
{
    const char *exit_text = kb_kernel_exit_text(kernel);
    kb_run_outcome_t outcome = kb_run_exit_outcome(self->cause);
    char raw[240], value[160];
    switch (outcome) {
        case KB_RUN_OUT_KILLED:
            s_end(self, outcome, "the kernel was killed by a client", exit_text,
                  self->cause == KB_RUN_CAUSE_SIGKILL ? "SIGKILL" : "SIGTERM", -1);
            return;
        case KB_RUN_OUT_TIMED_OUT_KILLED:
            snprintf(raw, sizeof raw, "interrupt ignored for %.1f s; kernel killed",
                     self->settings->interrupt_grace);
            snprintf(value, sizeof value, "the run timed out after %g s; the kernel was killed",
                     self->timeout);
            s_end(self, outcome, value, raw, NULL, -1);
            return;
        case KB_RUN_OUT_TIMED_OUT_DIED:
            snprintf(raw, sizeof raw, "the kernel died when interrupted: %s", exit_text);
            snprintf(value, sizeof value,
                     "the run timed out after %g s; the kernel died when interrupted",
                     self->timeout);
            s_end(self, outcome, value, raw, NULL, -1);
            return;
        case KB_RUN_OUT_INTERRUPTED_DIED:
            snprintf(raw, sizeof raw, "the kernel died when interrupted: %s", exit_text);
            s_end(self, outcome, "the kernel died when interrupted", raw, NULL, -1);
            return;
        case KB_RUN_OUT_MEMORY_KILLED:
            s_end(self, outcome, self->limit_value,
                  "over the memory limit after the interrupt grace; the kernel's tree was killed",
                  NULL, -1);
            return;
        case KB_RUN_OUT_MEMORY_DIED:
            snprintf(raw, sizeof raw, "over the memory limit, the kernel died when interrupted: %s",
                     exit_text);
            s_end(self, outcome, self->limit_value, raw, NULL, -1);
            return;
        case KB_RUN_OUT_PIDS:
            snprintf(raw, sizeof raw, "over the pids limit, the kernel died: %s", exit_text);
            s_end(self, outcome, self->limit_value, raw, NULL, -1);
            return;
        default: { /* on its own */
            int sig = kb_kernel_term_signal(kernel);
            s_end(self, KB_RUN_OUT_KERNEL_DIED, exit_text, exit_text,
                  sig ? kb_signal_name(sig) : NULL, kb_kernel_exit_status(kernel));
            return;
        }
    }
}

/* ---- steps ------------------------------------------------------------------------ */

static void s_on_timer(kb_timer_t *timer, void *arg)
{
    kb_run_t *self = arg;
    kb_run_event_type_t type = timer == &self->timeout_timer     ? KB_RUN_EV_TIMEOUT
                               : timer == &self->grace_timer     ? KB_RUN_EV_GRACE_OVER
                               : timer == &self->settle_timer    ? KB_RUN_EV_SETTLED
                               : timer == &self->interrupt_timer ? KB_RUN_EV_INTERRUPT_DUE
                                                                 : KB_RUN_EV_STEP_OVERDUE;
    kb_run_apply(self, &(kb_run_event_t){ .type = type });
}

static void s_send(kb_run_t *self, const char *code, bool silent)
{
    kb_execution_opts_t opts
        = { self->settings->max_output_bytes, self->strip_ansi, kb_proc_outlog(self->proc) };
    kb_timer_stop(&self->completion_timer);
    if (kb_kernel_execute(self->kernel, code, silent, self->msg_id, sizeof self->msg_id) != 0) {
        self->msg_id[0] = 0; /* the kernel is gone; its exit ends the run */
        return;
    }
    self->sends++;
    self->sent_at = s_now(self);
    self->busy_at = 0;
    kb_kernel_apply(self->kernel, KB_KEV_EXECUTE);
    if (silent) {
        kb_execution_opts_t step = opts;
        step.log = NULL; /* a snippet's own output is not the run's */
        kb_execution_destroy(&self->step_exec);
        self->step_exec = kb_execution_new(self->msg_id, &step, NULL, NULL);
    } else {
        /*  Keep what the run gathered so far (a failed apply step's error). */
        kb_execution_t *before = self->exec;
        self->exec = kb_execution_new(self->msg_id, &opts, s_emit, self);
        kb_execution_destroy(&before);
    }
}

static void s_send_apply(kb_run_t *self)
{
    char *code = kb_adapter_apply_code(self->language, self->cwd, self->env);
    self->state = KB_RUN_APPLYING;
    self->apply_attempts++;
    if (!code) {
        /*  Nothing was sent, so nothing needs restoring. */
        kb_execution_set_error(s_main_exec(self), "InternalError",
                               "out of memory for the per-run cwd/env snippet", true);
        s_finish(self);
        return;
    }
    s_send(self, code, true);
    free(code);
}

static void s_send_restore(kb_run_t *self)
{
    char *code = kb_adapter_restore_code(self->language);
    self->state = KB_RUN_RESTORING;
    if (!code) {
        s_system(self, "out of memory for the cwd/env restore snippet; not restored");
        s_finish(self);
        return;
    }
    s_send(self, code, true);
    free(code);
}

static void s_send_main(kb_run_t *self)
{
    self->state = KB_RUN_EXECUTING;
    s_send(self, self->code, false);
}

/*  The request out now is complete (or one of its two messages is
    overdue): the next step. */
static void s_step_done(kb_run_t *self)
{
    kb_timer_stop(&self->completion_timer);
    kb_timer_stop(&self->settle_timer);
    kb_run_step_t step
        = { self->state, self->use_adapter, self->cause, false, false, self->apply_attempts };
    if (self->state == KB_RUN_APPLYING) {
        kb_result_t *applied
            = kb_execution_finish(self->step_exec, KB_REASON_EXITED, 0, NULL, NULL);
        kb_execution_destroy(&self->step_exec);
        step.failed = applied->error != NULL;
        step.aborted = step.failed && strcmp(applied->error->name, "ExecutionAborted") == 0;
        kb_run_state_t next = kb_run_after_step(&step);
        if (next != KB_RUN_APPLYING && step.failed)
            kb_execution_set_error(s_main_exec(self), applied->error->name, applied->error->value,
                                   true);
        kb_result_destroy(&applied);
        if (next == KB_RUN_APPLYING)
            s_send_apply(self);
        else if (next == KB_RUN_RESTORING)
            s_send_restore(self);
        else
            s_send_main(self);
        return;
    }
    if (kb_run_after_step(&step) == KB_RUN_RESTORING) {
        s_send_restore(self);
        return;
    }
    kb_execution_destroy(&self->step_exec);
    s_finish(self);
}

static kb_execution_t *s_current(kb_run_t *self)
{
    return self->state == KB_RUN_EXECUTING || self->state == KB_RUN_SETTLING ? self->exec
                                                                             : self->step_exec;
}

/*  An execute_reply "aborted" for the code: sent again while
    kb_run_resends_code says so. */
static bool s_retry_aborted(kb_run_t *self, kb_channel_t channel, const kb_msg_t *msg)
{
    if (channel != KB_CHANNEL_SHELL || strcmp(msg->msg_type, "execute_reply") != 0
        || !kb_run_resends_code(self->state, self->cause, self->main_attempts))
        return false;
    const char *status = json_string_value(json_object_get(msg->content, "status"));
    if (!status || (strcmp(status, "aborted") != 0 && strcmp(status, "abort") != 0))
        return false;
    self->main_attempts++;
    s_send_main(self);
    return true;
}

/* ---- interrupts ------------------------------------------------------------------ */

/*  The run was interrupted (timeout or a client's SIGINT) while the
    request out now was. */
static bool s_current_interrupted(const kb_run_t *self)
{
    return self->interrupted_send > 0 && self->interrupted_send == self->sends;
}

/*  The interrupted request's signal, when kb_run_signal_due says; none
    once it has answered, or to a later request (the restore step). */
static void s_interrupt_step(kb_run_t *self)
{
    kb_timer_stop(&self->interrupt_timer);
    kb_execution_t *exec = s_current(self);
    if (!self->kernel || !s_current_interrupted(self) || !exec || kb_execution_has_reply(exec)
        || kb_execution_has_idle(exec) || kb_execution_has_error(exec))
        return;
    kb_run_signals_t signals
        = { self->sent_at,         self->busy_at,   self->signals,
            self->first_signal_at, self->signal_at, self->settings->interrupt_grace };
    double when = kb_run_signal_due(&signals);
    if (when < 0)
        return;
    double now = s_now(self);
    if (now < when) {
        kb_timer_start(self->settings->loop, &self->interrupt_timer, kb_loop_delay_ms(when - now),
                       0, s_on_timer, self);
        return;
    }
    if (self->signals > 0) {
        char text[120];
        snprintf(text, sizeof text, "no answer to the interrupt after %.1f s; interrupting again",
                 now - self->signal_at);
        s_system(self, text);
    } else
        self->first_signal_at = now;
    self->signals++;
    self->signal_at = now;
    kb_kernel_interrupt(self->kernel);
    s_interrupt_step(self); /* schedules the next one, if any */
}

/*  Interrupt the run: the request out now, as s_interrupt_step says. */
static void s_interrupt(kb_run_t *self)
{
    if (s_current_interrupted(self)) {
        if (self->signals > 0) { /* one more, as asked (a client's second SIGINT) */
            self->signals++;
            self->signal_at = s_now(self);
            kb_kernel_interrupt(self->kernel);
        }
        return; /* else the first is still to go */
    }
    self->interrupted_send = self->sends;
    self->signals = 0;
    s_interrupt_step(self);
}

static bool s_is_busy(const kb_msg_t *msg)
{
    const char *state = json_string_value(json_object_get(msg->content, "execution_state"));
    return strcmp(msg->msg_type, "status") == 0 && state && strcmp(state, "busy") == 0;
}

/* ---- messages ---------------------------------------------------------------------- */

static void s_on_message(kb_run_t *self, kb_channel_t channel, const kb_msg_t *msg)
{
    kb_execution_t *exec = s_current(self);
    if (!exec || s_retry_aborted(self, channel, msg))
        return;
    if (channel == KB_CHANNEL_IOPUB)
        kb_execution_fold_iopub(exec, msg);
    else if (channel == KB_CHANNEL_SHELL)
        kb_execution_fold_shell(exec, msg);
    else
        return;
    if (channel == KB_CHANNEL_IOPUB && !self->busy_at && s_is_busy(msg)) {
        self->busy_at = s_now(self);
        s_interrupt_step(self); /* a waiting signal goes a little later */
    }
    if (kb_execution_complete(exec)) {
        /*  A kernel that publishes output after idle (kb_kernelspec_quirks):
            the code step ends once none came for late_output seconds. */
        if (self->late_output > 0
            && (self->state == KB_RUN_EXECUTING || self->state == KB_RUN_SETTLING)) {
            self->state = KB_RUN_SETTLING;
            kb_timer_stop(&self->completion_timer);
            kb_timer_start(self->settings->loop, &self->settle_timer,
                           kb_loop_delay_ms(self->late_output), 0, s_on_timer, self);
            return;
        }
        s_step_done(self);
        return;
    }
    if ((kb_execution_has_reply(exec) || kb_execution_has_idle(exec))
        && !kb_timer_active(&self->completion_timer)) {
        /*  After an interrupt the other one is not waited for long: ipykernel
            sends idle and no reply when SIGINT lands in its own code. */
        self->completion_wait = self->settings->completion_grace;
        if (s_current_interrupted(self) && self->completion_wait > KB_INTERRUPTED_REPLY)
            self->completion_wait = KB_INTERRUPTED_REPLY;
        kb_timer_start(self->settings->loop, &self->completion_timer,
                       kb_loop_delay_ms(self->completion_wait), 0, s_on_timer, self);
    }
}

static void s_step_overdue(kb_run_t *self)
{
    if (self->kernel && self->completion_wait < KB_BACKLOG_WAIT
        && kb_kernel_iopub_behind(self->kernel)) { /* its idle is in a paced flood's backlog */
        self->completion_wait += self->settings->completion_grace;
        kb_timer_start(self->settings->loop, &self->completion_timer,
                       kb_loop_delay_ms(self->settings->completion_grace), 0, s_on_timer, self);
        return;
    }
    kb_execution_t *exec = s_current(self);
    char text[200];
    snprintf(text, sizeof text,
             "%s never came for the %s%s request after %g s; the run ended with what it had",
             kb_execution_has_reply(exec) ? "status: idle" : "execute_reply",
             s_current_interrupted(self) ? "interrupted " : "",
             self->state == KB_RUN_EXECUTING ? "execute" : "cwd/env adapter",
             self->completion_wait);
    s_system(self, text);
    s_step_done(self);
}

static void s_start_grace(kb_run_t *self)
{
    if (!kb_timer_active(&self->grace_timer))
        kb_timer_start(self->settings->loop, &self->grace_timer,
                       kb_loop_delay_ms(self->settings->interrupt_grace), 0, s_on_timer, self);
}

static void s_grace_over(kb_run_t *self)
{
    if (!self->kernel)
        return;
    if (self->cause == KB_RUN_CAUSE_SIGTERM) {
        kb_kernel_signal(self->kernel, SIGKILL);
        return;
    }
    kb_execution_t *exec = s_current(self);
    if (s_current_interrupted(self) && exec
        && (kb_execution_has_reply(exec) || kb_execution_has_idle(exec))) {
        /*  The kernel answered the interrupt and only one of the two
            messages is missing: no reason to kill it. The steps still to
            come (the restore) get a grace of their own. */
        s_start_grace(self);
        s_step_overdue(self);
        return;
    }
    self->cause = KB_RUN_CAUSE_TIMEOUT_KILL;
    char text[120];
    snprintf(text, sizeof text, "interrupt ignored for %.1f s; killing the kernel",
             self->settings->interrupt_grace);
    s_system(self, text);
    kb_kernel_apply(self->kernel, KB_KEV_SHUTDOWN);
    kb_kernel_signal(self->kernel, SIGKILL); /* its exit ends the run */
}

/*  Its timeout ran out while it had the kernel (a queued run ends at
    once: s_end_now). */
static void s_timeout(kb_run_t *self)
{
    char value[120];
    self->cause = KB_RUN_CAUSE_TIMEOUT;
    snprintf(value, sizeof value, "timeout after %g s; interrupting the kernel", self->timeout);
    s_system(self, value);
    s_interrupt(self);
    s_start_grace(self);
}

/*  A client's signal while it had the kernel (a queued run ends at once). */
static void s_signal(kb_run_t *self, int sig)
{
    self->cause = kb_run_signal_cause(sig);
    if (sig == SIGINT) {
        s_interrupt(self);
        return;
    }
    kb_kernel_apply(self->kernel, KB_KEV_SHUTDOWN);
    kb_kernel_signal(self->kernel, sig);
    if (sig == SIGTERM)
        s_start_grace(self);
}

/*  The kernel's tree went over a limit, or back under the memory limit
    (the context's watch says so): interrupt, once; a kill of the kernel
    overrides that. A run interrupted over the memory limit ends once the
    tree is back under it. */
static void s_limit(kb_run_t *self, const kb_run_event_t *event)
{
    if (event->note)
        s_system(self, event->note);
    kb_run_limit_t limit = event->limit;
    if (limit == KB_RUN_LIMIT_MESSAGE) {
        /*  What was refused is not kept, and what came after it until
            ZeroMQ connected again is lost: the run says so and ends as the
            kernel's reply (and the completion grace) allow. */
        kb_execution_t *exec = s_main_exec(self);
        kb_execution_dropped(exec);
        kb_execution_set_error(exec, "MessageTooLarge", event->text ? event->text : "", false);
        return;
    }
    self->over_memory = limit == KB_RUN_LIMIT_MEMORY || limit == KB_RUN_LIMIT_MEMORY_KILL;
    if (limit == KB_RUN_LIMIT_UNDER) {
        if (self->state == KB_RUN_HOLDING)
            s_finish(self);
        return;
    }
    kb_run_cause_t cause = kb_run_limit_cause(self->cause, limit);
    if (cause == self->cause)
        return; /* going already, or interrupted already */
    self->cause = cause;
    snprintf(self->limit_value, sizeof self->limit_value, "%s", event->text ? event->text : "");
    if (cause != KB_RUN_CAUSE_MEMORY_KILL)
        s_interrupt(self); /* a kill is the owner's: the kernel's exit ends the run */
}

static void s_start(kb_run_t *self, kb_kernel_t *kernel)
{
    self->kernel = kernel;
    self->started_at = s_now(self);
    self->late_output = kb_kernelspec_quirks(kb_kernel_spec(kernel)).late_output;
    if (kb_run_first_step(self->use_adapter) == KB_RUN_APPLYING)
        s_send_apply(self);
    else
        s_send_main(self);
    if (!(self->stream && kb_stream_final_only(self->stream)))
        kb_run_answer_call(self); /* after the send: the kernel starts meanwhile */
}

/*  The END rows of the transition table: the run ends as it is, in
    whatever step, without the kernel's say. */
static void s_end_now(kb_run_t *self, kb_run_outcome_t outcome, const kb_run_event_t *event)
{
    char value[120];
    switch (outcome) {
        case KB_RUN_OUT_TIMED_OUT_QUEUED:
            snprintf(value, sizeof value, "the run timed out after %g s before it started",
                     self->timeout);
            s_end(self, outcome, value, "timed out while queued", NULL, -1);
            return;
        case KB_RUN_OUT_NOT_STARTED:
            s_end(self, outcome, "the context went away before the run started", event->why, NULL,
                  -1);
            return;
        case KB_RUN_OUT_KILLED:
            s_end(self, outcome, event->text, event->why, "SIGKILL", -1);
            return;
        default:
            assert(outcome == KB_RUN_OUT_STOPPED);
            s_end(self, outcome,
                  self->state == KB_RUN_QUEUED ? "the service stopped before the run started"
                                               : "the service stopped during the run",
                  "the service stopped", NULL, -1);
            return;
    }
}

void kb_run_apply(kb_run_t *self, const kb_run_event_t *event)
{
    kb_run_next_t next = kb_run_next(self->state, event->type);
    switch (next.action) {
        case KB_RUN_ACT_IGNORE:
            break;
        case KB_RUN_ACT_START:
            s_start(self, event->kernel);
            break;
        case KB_RUN_ACT_MESSAGE:
            s_on_message(self, event->channel, event->msg);
            break;
        case KB_RUN_ACT_STEP_DONE:
            s_step_done(self);
            break;
        case KB_RUN_ACT_STEP_OVERDUE:
            s_step_overdue(self);
            break;
        case KB_RUN_ACT_TIMEOUT:
            s_timeout(self);
            break;
        case KB_RUN_ACT_GRACE_OVER:
            s_grace_over(self);
            break;
        case KB_RUN_ACT_INTERRUPT_STEP:
            s_interrupt_step(self);
            break;
        case KB_RUN_ACT_SIGNAL:
            s_signal(self, event->signal);
            break;
        case KB_RUN_ACT_LIMIT:
            s_limit(self, event);
            break;
        case KB_RUN_ACT_KERNEL_EXITED:
            s_kernel_exited(self, event->kernel);
            break;
        case KB_RUN_ACT_START_FAILED:
            if (self->held_call)
                s_discard(self, event->why);
            else
                s_end(self, next.outcome, "the kernel failed to start", event->why, NULL, -1);
            break;
        case KB_RUN_ACT_END:
            s_end_now(self, next.outcome, event);
            break;
        case KB_RUN_ACT_END_SIGNALLED:
            s_end(self, kb_run_queued_signal_outcome(event->signal), "signalled before it started",
                  "signalled while queued", kb_signal_name(event->signal), -1);
            break;
    }
}

void kb_run_message_refused(kb_run_t *self, uint64_t max_message)
{
    char note[240], value[200];
    snprintf(note, sizeof note,
             "a message of the kernel over the max message size of %llu bytes was refused "
             "(--max-message-size); its output, and what the kernel published until its "
             "connection was made again, are lost",
             (unsigned long long)max_message);
    snprintf(value, sizeof value,
             "the kernel sent a message over the max message size of %llu bytes; it was refused "
             "and its output is lost",
             (unsigned long long)max_message);
    zsys_warning("%s: %s", kb_proc_id(self->proc), note);
    kb_run_event_t event
        = { .type = KB_RUN_EV_LIMIT, .limit = KB_RUN_LIMIT_MESSAGE, .note = note, .text = value };
    kb_run_apply(self, &event);
}

/* ---- creation and accessors ---------------------------------------------------- */

kb_run_t *kb_run_new(const kb_run_settings_t *settings, kb_proc_t *proc, const kb_run_opts_t *opts,
                     double timeout, const char *language, json_t *identity, bool use_adapter,
                     kb_stream_t *stream)
{
    kb_run_t *self = kb_xcalloc(1, sizeof *self);
    self->settings = settings;
    self->state = KB_RUN_QUEUED;
    self->proc = proc;
    self->identity = identity;
    self->language = kb_xstrdup(language);
    self->code = kb_xstrdup(opts->code);
    self->strip_ansi = opts->strip_ansi;
    self->wants_rollback = opts->rollback && strcmp(opts->rollback, "on_error") == 0;
    self->timeout = timeout;
    kb_timer_init(&self->timeout_timer);
    kb_timer_init(&self->grace_timer);
    kb_timer_init(&self->completion_timer);
    kb_timer_init(&self->settle_timer);
    kb_timer_init(&self->interrupt_timer);
    if (use_adapter) {
        self->use_adapter = true;
        self->cwd = kb_xstrdup(opts->cwd);
        if (opts->env && json_object_size(opts->env)) {
            self->env = json_deep_copy(opts->env);
            KB_NOT_NULL(self->env);
        }
    }
    kb_proc_set_owner(proc, self);
    if (stream) {
        self->stream = kb_stream_ref(stream);
        kb_stream_push(
            self->stream, KB_EVENT_START,
            json_pack("{s:s, s:O}", "process_id", kb_proc_id(proc), "context", identity));
    }
    if (kb_loop_delay_ms(timeout))
        kb_timer_start(settings->loop, &self->timeout_timer, kb_loop_delay_ms(timeout), 0,
                       s_on_timer, self);
    return self;
}

void kb_run_set_owner(kb_run_t *self, kb_run_ended_fn *ended, void *arg)
{
    self->ended = ended;
    self->ended_arg = arg;
}

void kb_run_set_rollback(kb_run_t *self, char *checkpoint_id)
{
    free(self->rollback);
    self->rollback = checkpoint_id;
}

void kb_run_set_meter(kb_run_t *self, kb_run_meter_fn *meter)
{
    self->meter = meter;
}

void kb_run_hold_call(kb_run_t *self, kb_call_t *call)
{
    self->held_call = call;
}
