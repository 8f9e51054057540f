/*  kb_run_table.c - a run's transition table, its outcome table, and the
    pure decisions kb_run.c takes on the way (see kb_run_table.h).
*/
#include "service/run/kb_run_table.h"

#include <assert.h>
#include <signal.h>

#define KB_APPLY_ATTEMPTS 3 /* sends of an apply snippet that the kernel aborted */
#define KB_MAIN_ATTEMPTS 3  /* resends of the code when the kernel aborted it */

/*  Interrupting a request (seconds; see kb_run_signal_due). */
#define KB_INTERRUPT_SETTLE 0.02 /* from the request's status: busy to the signal */
#define KB_INTERRUPT_NO_BUSY 0.1 /* from the send, for kernels that send no busy */
#define KB_INTERRUPT_EARLY 0.1   /* a first signal this soon may be missed */

const char kb_run_signal_given[] = "given";
#define GIVEN kb_run_signal_given

static const kb_run_row_t s_rows[KB_RUN_OUTCOME_COUNT] = {
    [KB_RUN_OUT_FINISHED] = { KB_REASON_EXITED, NULL, NULL },
    [KB_RUN_OUT_TIMED_OUT] = { KB_REASON_TIMED_OUT, "SIGINT", "TimeoutError" },
    [KB_RUN_OUT_TIMED_OUT_KILLED] = { KB_REASON_TIMED_OUT, "SIGKILL", "TimeoutError" },
    [KB_RUN_OUT_TIMED_OUT_DIED] = { KB_REASON_TIMED_OUT, "SIGINT", "TimeoutError" },
    [KB_RUN_OUT_TIMED_OUT_QUEUED] = { KB_REASON_TIMED_OUT, NULL, "TimeoutError" },
    [KB_RUN_OUT_INTERRUPTED] = { KB_REASON_SIGNALED, "SIGINT", NULL },
    [KB_RUN_OUT_INTERRUPTED_DIED] = { KB_REASON_SIGNALED, "SIGINT", "KernelDied" },
    [KB_RUN_OUT_INTERRUPTED_QUEUED] = { KB_REASON_SIGNALED, "SIGINT", "KeyboardInterrupt" },
    [KB_RUN_OUT_CANCELLED_QUEUED] = { KB_REASON_SIGNALED, GIVEN, "RunCancelled" },
    [KB_RUN_OUT_KILLED] = { KB_REASON_SIGNALED, GIVEN, "KernelKilled" },
    [KB_RUN_OUT_KERNEL_DIED] = { KB_REASON_FAILED, GIVEN, "KernelDied" },
    [KB_RUN_OUT_NOT_STARTED] = { KB_REASON_FAILED, NULL, "KernelDied" },
    [KB_RUN_OUT_STOPPED] = { KB_REASON_SANDBOX_STOPPED, NULL, "SandboxStopped" },
    [KB_RUN_OUT_MEMORY] = { KB_REASON_MEMORY_LIMIT, "SIGINT", "MemoryLimitExceeded" },
    [KB_RUN_OUT_MEMORY_KILLED] = { KB_REASON_MEMORY_LIMIT, "SIGKILL", "OutOfMemory" },
    [KB_RUN_OUT_MEMORY_DIED] = { KB_REASON_MEMORY_LIMIT, "SIGINT", "OutOfMemory" },
    [KB_RUN_OUT_PIDS] = { KB_REASON_PIDS_LIMIT, "SIGKILL", "PidsLimitExceeded" },
};

const kb_run_row_t *kb_run_row(kb_run_outcome_t outcome)
{
    assert(outcome >= 0 && outcome < KB_RUN_OUTCOME_COUNT);
    return &s_rows[outcome];
}

/* ---- the transition table --------------------------------------------------- */

/* clang-format off */
#define ACT(name) { KB_RUN_ACT_##name, KB_RUN_OUT_FINISHED }
#define END(outcome) { KB_RUN_ACT_END, KB_RUN_OUT_##outcome }
#define START_FAILED { KB_RUN_ACT_START_FAILED, KB_RUN_OUT_NOT_STARTED }
/* clang-format on */

/*  A run that has its kernel: every step, and HOLDING. SETTLED is only
    for SETTLING (below). */
#define STARTED                                                                                    \
    [KB_RUN_EV_START] = ACT(IGNORE), [KB_RUN_EV_MESSAGE] = ACT(MESSAGE),                           \
    [KB_RUN_EV_TIMEOUT] = ACT(TIMEOUT), [KB_RUN_EV_SIGNAL] = ACT(SIGNAL),                          \
    [KB_RUN_EV_KERNEL_EXITED] = ACT(KERNEL_EXITED), [KB_RUN_EV_START_FAILED] = START_FAILED,       \
    [KB_RUN_EV_CONTEXT_GONE] = END(KILLED), [KB_RUN_EV_SERVICE_STOPS] = END(STOPPED),              \
    [KB_RUN_EV_STEP_OVERDUE] = ACT(STEP_OVERDUE), [KB_RUN_EV_GRACE_OVER] = ACT(GRACE_OVER),        \
    [KB_RUN_EV_INTERRUPT_DUE] = ACT(INTERRUPT_STEP), [KB_RUN_EV_LIMIT] = ACT(LIMIT)

static const kb_run_next_t s_next[KB_RUN_STATE_COUNT][KB_RUN_EVENT_COUNT] = {
    [KB_RUN_QUEUED] = {
        [KB_RUN_EV_START] = ACT(START),
        [KB_RUN_EV_MESSAGE] = ACT(IGNORE),
        [KB_RUN_EV_TIMEOUT] = END(TIMED_OUT_QUEUED),
        [KB_RUN_EV_SIGNAL] = ACT(END_SIGNALLED),
        [KB_RUN_EV_KERNEL_EXITED] = ACT(IGNORE),
        [KB_RUN_EV_START_FAILED] = START_FAILED,
        [KB_RUN_EV_CONTEXT_GONE] = END(NOT_STARTED),
        [KB_RUN_EV_SERVICE_STOPS] = END(STOPPED),
        [KB_RUN_EV_STEP_OVERDUE] = ACT(IGNORE),
        [KB_RUN_EV_SETTLED] = ACT(IGNORE),
        [KB_RUN_EV_GRACE_OVER] = ACT(IGNORE),
        [KB_RUN_EV_INTERRUPT_DUE] = ACT(IGNORE),
        [KB_RUN_EV_LIMIT] = ACT(IGNORE),
    },
    [KB_RUN_APPLYING] = { STARTED, [KB_RUN_EV_SETTLED] = ACT(IGNORE) },
    [KB_RUN_EXECUTING] = { STARTED, [KB_RUN_EV_SETTLED] = ACT(IGNORE) },
    [KB_RUN_SETTLING] = { STARTED, [KB_RUN_EV_SETTLED] = ACT(STEP_DONE) },
    [KB_RUN_RESTORING] = { STARTED, [KB_RUN_EV_SETTLED] = ACT(IGNORE) },
    [KB_RUN_HOLDING] = { STARTED, [KB_RUN_EV_SETTLED] = ACT(IGNORE) },
    [KB_RUN_ENDED] = { ACT(IGNORE) }, /* all of them: an ended run waits to be freed */
};

kb_run_next_t kb_run_next(kb_run_state_t state, kb_run_event_type_t event)
{
    assert(state >= 0 && state < KB_RUN_STATE_COUNT);
    assert(event >= 0 && event < KB_RUN_EVENT_COUNT);
    return s_next[state][event];
}

/* ---- steps and ends ------------------------------------------------------------- */

/*  ipykernel aborts requests that arrive just after a run failed (its
    stop_on_error window), even when the failed run has completed. Runs are
    sent one at a time, so an aborted request never ran: send it again. */
bool kb_run_resends_code(kb_run_state_t state, kb_run_cause_t cause, int attempts)
{
    return state == KB_RUN_EXECUTING && cause == KB_RUN_CAUSE_NONE && attempts < KB_MAIN_ATTEMPTS;
}

kb_run_state_t kb_run_first_step(bool use_adapter)
{
    return use_adapter ? KB_RUN_APPLYING : KB_RUN_EXECUTING;
}

kb_run_state_t kb_run_after_step(const kb_run_step_t *step)
{
    if (step->state == KB_RUN_APPLYING) {
        /*  The kernel was still aborting after an error: send it again. */
        if (step->aborted && step->apply_attempts < KB_APPLY_ATTEMPTS
            && step->cause == KB_RUN_CAUSE_NONE)
            return KB_RUN_APPLYING;
        /*  A failed apply, or one interrupted before the code went: the
            code never runs, the restore does. */
        if (step->failed || step->cause != KB_RUN_CAUSE_NONE)
            return KB_RUN_RESTORING;
        return KB_RUN_EXECUTING;
    }
    if ((step->state == KB_RUN_EXECUTING || step->state == KB_RUN_SETTLING) && step->use_adapter)
        return KB_RUN_RESTORING;
    return KB_RUN_ENDED;
}

kb_run_state_t kb_run_finish(kb_run_cause_t cause, bool over_memory, kb_run_outcome_t *outcome)
{
    switch (cause) {
        case KB_RUN_CAUSE_MEMORY:
            if (over_memory)
                return KB_RUN_HOLDING; /* ends as the watch says: under, or killed */
            *outcome = KB_RUN_OUT_MEMORY;
            break;
        case KB_RUN_CAUSE_TIMEOUT:
            *outcome = KB_RUN_OUT_TIMED_OUT;
            break;
        case KB_RUN_CAUSE_SIGINT:
            *outcome = KB_RUN_OUT_INTERRUPTED;
            break;
        case KB_RUN_CAUSE_MEMORY_KILL:
            *outcome = KB_RUN_OUT_MEMORY_KILLED;
            break;
        case KB_RUN_CAUSE_PIDS:
            *outcome = KB_RUN_OUT_PIDS;
            break;
        default: /* none, or a kill whose exit has not come yet */
            *outcome = KB_RUN_OUT_FINISHED;
            break;
    }
    return KB_RUN_ENDED;
}

kb_run_outcome_t kb_run_exit_outcome(kb_run_cause_t cause)
{
    switch (cause) {
        case KB_RUN_CAUSE_SIGKILL:
        case KB_RUN_CAUSE_SIGTERM:
            return KB_RUN_OUT_KILLED;
        case KB_RUN_CAUSE_TIMEOUT_KILL:
            return KB_RUN_OUT_TIMED_OUT_KILLED;
        case KB_RUN_CAUSE_TIMEOUT:
            /*  The kernel died of the interrupt (Deno's kernel, xeus-python
                0.14): the run still ended because of its timeout. */
            return KB_RUN_OUT_TIMED_OUT_DIED;
        case KB_RUN_CAUSE_SIGINT:
            return KB_RUN_OUT_INTERRUPTED_DIED;
        case KB_RUN_CAUSE_MEMORY_KILL:
            return KB_RUN_OUT_MEMORY_KILLED;
        case KB_RUN_CAUSE_MEMORY:
            return KB_RUN_OUT_MEMORY_DIED;
        case KB_RUN_CAUSE_PIDS:
            return KB_RUN_OUT_PIDS;
        case KB_RUN_CAUSE_NONE:
            break;
    }
    return KB_RUN_OUT_KERNEL_DIED;
}

kb_run_outcome_t kb_run_queued_signal_outcome(int sig)
{
    return sig == SIGINT ? KB_RUN_OUT_INTERRUPTED_QUEUED : KB_RUN_OUT_CANCELLED_QUEUED;
}

kb_run_cause_t kb_run_signal_cause(int sig)
{
    return sig == SIGINT    ? KB_RUN_CAUSE_SIGINT
           : sig == SIGTERM ? KB_RUN_CAUSE_SIGTERM
                            : KB_RUN_CAUSE_SIGKILL;
}

kb_run_cause_t kb_run_limit_cause(kb_run_cause_t cause, kb_run_limit_t limit)
{
    if (limit == KB_RUN_LIMIT_UNDER || limit == KB_RUN_LIMIT_MESSAGE)
        return cause; /* the run goes on: the error is set, its end is the kernel's */
    if (cause == KB_RUN_CAUSE_SIGTERM || cause == KB_RUN_CAUSE_SIGKILL
        || cause == KB_RUN_CAUSE_MEMORY_KILL)
        return cause; /* going already */
    bool kill = limit == KB_RUN_LIMIT_MEMORY_KILL;
    if (!kill && (cause == KB_RUN_CAUSE_MEMORY || cause == KB_RUN_CAUSE_PIDS))
        return cause; /* interrupted already */
    return kill                           ? KB_RUN_CAUSE_MEMORY_KILL
           : limit == KB_RUN_LIMIT_MEMORY ? KB_RUN_CAUSE_MEMORY
                                          : KB_RUN_CAUSE_PIDS;
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
    request (the restore step): kb_run.c checks that. */
double kb_run_signal_due(const kb_run_signals_t *signals)
{
    double when = signals->busy_at > 0 ? signals->busy_at + KB_INTERRUPT_SETTLE
                                       : signals->sent_at + KB_INTERRUPT_NO_BUSY;
    if (signals->signals > 0) {
        if (signals->signals > 1 || signals->first_signal_at >= when + KB_INTERRUPT_EARLY)
            return -1;
        double again = signals->signal_at + signals->grace / 2;
        if (when < again)
            when = again;
    }
    return when;
}

bool kb_run_rolls_back(kb_run_outcome_t outcome, bool has_error)
{
    switch (outcome) {
        case KB_RUN_OUT_FINISHED:
            return has_error;
        case KB_RUN_OUT_TIMED_OUT:
        case KB_RUN_OUT_TIMED_OUT_KILLED:
        case KB_RUN_OUT_TIMED_OUT_DIED:
        case KB_RUN_OUT_INTERRUPTED:
        case KB_RUN_OUT_INTERRUPTED_DIED:
        case KB_RUN_OUT_KERNEL_DIED:
        case KB_RUN_OUT_MEMORY:
        case KB_RUN_OUT_MEMORY_KILLED:
        case KB_RUN_OUT_MEMORY_DIED:
        case KB_RUN_OUT_PIDS:
            return true;
        default:
            return false;
    }
}
