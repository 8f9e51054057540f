/*  kb_run_table.h - a run's state machine as data, which kb_run.c
    performs: the action each event takes in each state (kb_run_next, one
    table), what a step, a limit, a signal or the kernel's death leads to
    given why the run is being stopped (its cause), SPEC section 2's rows
    (the outcome table), and when an interrupted request gets its signal.

    Pure functions of their arguments: no kernel, no loop, no clock, no
    allocation. Not for: performing an action (kb_run.c). tests/test_run.c
    walks every event in every state.
*/
#ifndef KB_RUN_TABLE_H_INCLUDED
#define KB_RUN_TABLE_H_INCLUDED

#include <stdbool.h>

#include "kernelbridge/kb_result.h"

typedef enum {
    KB_RUN_QUEUED,    /* waiting for its context's kernel */
    KB_RUN_APPLYING,  /* the silent snippet setting per-run cwd/env */
    KB_RUN_EXECUTING, /* the caller's code */
    KB_RUN_SETTLING,  /* complete; waiting for output sent after idle */
    KB_RUN_RESTORING, /* the silent snippet restoring cwd/env */
    KB_RUN_HOLDING,   /* done, interrupted over the memory limit: until the tree is under */
    KB_RUN_ENDED,
} kb_run_state_t;

#define KB_RUN_STATE_COUNT (KB_RUN_ENDED + 1)

typedef enum {
    KB_RUN_EV_START,         /* the kernel (event.kernel) is the run's now */
    KB_RUN_EV_MESSAGE,       /* a kernel message of the run (event.channel, event.msg) */
    KB_RUN_EV_TIMEOUT,       /* its timeout ran out */
    KB_RUN_EV_SIGNAL,        /* a client's SIGINT, SIGTERM or SIGKILL (event.signal) */
    KB_RUN_EV_KERNEL_EXITED, /* the kernel died or was killed (event.kernel) */
    KB_RUN_EV_START_FAILED,  /* the kernel never became ready (event.why) */
    KB_RUN_EV_CONTEXT_GONE,  /* deleted or restarted (event.text, event.why) */
    KB_RUN_EV_SERVICE_STOPS, /* the daemon stops */
    KB_RUN_EV_STEP_OVERDUE,  /* internal: reply or idle came, the other did not */
    KB_RUN_EV_SETTLED,       /* internal: no more output came after idle */
    KB_RUN_EV_GRACE_OVER,    /* internal: an interrupt or SIGTERM was not heeded */
    KB_RUN_EV_INTERRUPT_DUE, /* internal: the time for an interrupt's (next) signal */
    KB_RUN_EV_LIMIT,         /* the kernel's tree went over a limit (event.limit, .note, .text) */
} kb_run_event_type_t;

#define KB_RUN_EVENT_COUNT (KB_RUN_EV_LIMIT + 1)

typedef enum {
    KB_RUN_LIMIT_MEMORY,      /* over the memory limit: interrupt */
    KB_RUN_LIMIT_MEMORY_KILL, /* still over: the owner kills the kernel */
    KB_RUN_LIMIT_PIDS,        /* processes over the pids limit were killed: interrupt */
    KB_RUN_LIMIT_UNDER,       /* back under the memory limit (or its descendants killed) */
    KB_RUN_LIMIT_MESSAGE,     /* a kernel message over the max message size was refused */
} kb_run_limit_t;

/*  Why a run is being stopped, once something outside it stepped in. */
typedef enum {
    KB_RUN_CAUSE_NONE,
    KB_RUN_CAUSE_TIMEOUT,      /* interrupted at its timeout */
    KB_RUN_CAUSE_TIMEOUT_KILL, /* ... and the interrupt was not heeded */
    KB_RUN_CAUSE_SIGINT,       /* a client's signals */
    KB_RUN_CAUSE_SIGTERM,
    KB_RUN_CAUSE_SIGKILL,
    KB_RUN_CAUSE_MEMORY,      /* interrupted over the memory limit */
    KB_RUN_CAUSE_MEMORY_KILL, /* ... and its kernel is being killed */
    KB_RUN_CAUSE_PIDS,        /* interrupted over the pids limit */
} kb_run_cause_t;

#define KB_RUN_CAUSE_COUNT (KB_RUN_CAUSE_PIDS + 1)

/*  How a run ended: one row each of SPEC section 2's table. */
typedef enum {
    KB_RUN_OUT_FINISHED,           /* the code ran to its end (with or without an error) */
    KB_RUN_OUT_TIMED_OUT,          /* interrupted in time at its timeout */
    KB_RUN_OUT_TIMED_OUT_KILLED,   /* the interrupt was ignored; the kernel was killed */
    KB_RUN_OUT_TIMED_OUT_DIED,     /* the kernel died of the interrupt */
    KB_RUN_OUT_TIMED_OUT_QUEUED,   /* its timeout ran out before it started */
    KB_RUN_OUT_INTERRUPTED,        /* a client's SIGINT; the kernel's own error */
    KB_RUN_OUT_INTERRUPTED_DIED,   /* a client's SIGINT, which the kernel died of */
    KB_RUN_OUT_INTERRUPTED_QUEUED, /* a client's SIGINT before it started */
    KB_RUN_OUT_CANCELLED_QUEUED,   /* a client's SIGTERM/SIGKILL before it started */
    KB_RUN_OUT_KILLED,        /* a client's SIGTERM/SIGKILL, its context deleted or restarted */
    KB_RUN_OUT_KERNEL_DIED,   /* the kernel died on its own */
    KB_RUN_OUT_NOT_STARTED,   /* its kernel never started, or its context went away first */
    KB_RUN_OUT_STOPPED,       /* the service stopped */
    KB_RUN_OUT_MEMORY,        /* over the memory limit, interrupted; the context is kept */
    KB_RUN_OUT_MEMORY_KILLED, /* over the memory limit, the kernel killed */
    KB_RUN_OUT_MEMORY_DIED,   /* over the memory limit, the kernel died when interrupted */
    KB_RUN_OUT_PIDS,          /* over the pids limit, the processes over it killed */
} kb_run_outcome_t;

#define KB_RUN_OUTCOME_COUNT (KB_RUN_OUT_PIDS + 1)

/*  Whether a run that ended with outcome (has_error: its code raised) is
    rolled back when it asked for it: an error, a timeout, an interrupt, a
    memory or pids limit, the kernel's death; not a run that never
    started, was killed by a client, or ended with its context. */
bool kb_run_rolls_back(kb_run_outcome_t outcome, bool has_error);

/*  A row's signal that comes with the end (the client's, the kernel's
    death's) rather than with the row. */
extern const char kb_run_signal_given[];

/*  One row of the outcome table: the process's reason, its signal (a
    static name, NULL, or kb_run_signal_given) and the error the result
    gets (NULL: the kernel's own, if any). */
typedef struct {
    kb_reason_t reason;
    const char *signal;
    const char *error;
} kb_run_row_t;

/*  The row of an outcome (static). */
const kb_run_row_t *kb_run_row(kb_run_outcome_t outcome);

/*  What kb_run_apply does with an event. */
typedef enum {
    KB_RUN_ACT_IGNORE,         /* it means nothing in this state: nothing changes */
    KB_RUN_ACT_START,          /* take the kernel; send the first step (kb_run_first_step) */
    KB_RUN_ACT_MESSAGE,        /* fold the message into the request out now */
    KB_RUN_ACT_STEP_DONE,      /* the request out now is done: kb_run_after_step */
    KB_RUN_ACT_STEP_OVERDUE,   /* say which message never came, then as STEP_DONE */
    KB_RUN_ACT_TIMEOUT,        /* cause TIMEOUT: interrupt, and kill after the grace */
    KB_RUN_ACT_GRACE_OVER,     /* kill a kernel that did not heed, or end an answered step */
    KB_RUN_ACT_INTERRUPT_STEP, /* the interrupt's signal due now (kb_run_signal_due) */
    KB_RUN_ACT_SIGNAL,         /* a client's signal for the kernel (kb_run_signal_cause) */
    KB_RUN_ACT_LIMIT,          /* a limit changes the cause (kb_run_limit_cause) */
    KB_RUN_ACT_KERNEL_EXITED,  /* end as the cause says (kb_run_exit_outcome) */
    KB_RUN_ACT_START_FAILED,   /* fail the call still held (no record), or end with .outcome */
    KB_RUN_ACT_END,            /* end with .outcome */
    KB_RUN_ACT_END_SIGNALLED,  /* end as kb_run_queued_signal_outcome says */
} kb_run_action_t;

#define KB_RUN_ACTION_COUNT (KB_RUN_ACT_END_SIGNALLED + 1)

typedef struct {
    kb_run_action_t action;
    kb_run_outcome_t outcome; /* of START_FAILED and END; FINISHED for the others */
} kb_run_next_t;

/*  The transition table: what event does in state. */
kb_run_next_t kb_run_next(kb_run_state_t state, kb_run_event_type_t event);

/*  The first step once the run has its kernel: APPLYING with a per-run
    cwd/env to apply, else EXECUTING. */
kb_run_state_t kb_run_first_step(bool use_adapter);

/*  What a step that is done tells about the next one. */
typedef struct {
    kb_run_state_t state; /* the step's: APPLYING, EXECUTING, SETTLING or RESTORING */
    bool use_adapter;
    kb_run_cause_t cause;
    bool failed;        /* the apply snippet gave an error */
    bool aborted;       /* ... and it was ExecutionAborted */
    int apply_attempts; /* sends of the apply snippet so far */
} kb_run_step_t;

/*  The next step: APPLYING (the aborted apply snippet again), EXECUTING,
    RESTORING, or ENDED for none (the steps are done: kb_run_finish). */
kb_run_state_t kb_run_after_step(const kb_run_step_t *step);

/*  Whether the code, which the kernel answered as aborted, is sent again
    (attempts: resends so far). */
bool kb_run_resends_code(kb_run_state_t state, kb_run_cause_t cause, int attempts);

/*  How a run whose steps are done ends: HOLDING while it was interrupted
    over the memory limit and the tree is still over, else ENDED with
    *outcome set. */
kb_run_state_t kb_run_finish(kb_run_cause_t cause, bool over_memory, kb_run_outcome_t *outcome);

/*  How a run whose kernel died or was killed ends. */
kb_run_outcome_t kb_run_exit_outcome(kb_run_cause_t cause);

/*  A client's signal: the outcome of a queued run, and the cause of a
    started one (SIGINT, SIGTERM, anything else as SIGKILL). */
kb_run_outcome_t kb_run_queued_signal_outcome(int sig);
kb_run_cause_t kb_run_signal_cause(int sig);

/*  The cause after a limit's event: unchanged when it changes nothing
    (back under; stopping already; interrupted already by a limit). A
    changed cause other than MEMORY_KILL interrupts the kernel. */
kb_run_cause_t kb_run_limit_cause(kb_run_cause_t cause, kb_run_limit_t limit);

/*  The interrupted request out now (times on the loop's clock, seconds). */
typedef struct {
    double sent_at;         /* its send */
    double busy_at;         /* its status: busy, or 0 */
    int signals;            /* signals sent for it so far */
    double first_signal_at; /* of the first one */
    double signal_at;       /* of the last one */
    double grace;           /* the interrupt grace */
} kb_run_signals_t;

/*  When its next signal is due (it goes at once when that is past), or
    a negative number when no more is to go. */
double kb_run_signal_due(const kb_run_signals_t *signals);

#endif
