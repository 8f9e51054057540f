/*  kb_run_impl.h - struct kb_run, private to src/service/run: written by
    kb_run.c alone, read by kb_run_view.c (what a run shows). Include
    it after kb_run.h, whose types it uses. Engine thread only. */
#ifndef KB_RUN_IMPL_H_INCLUDED
#define KB_RUN_IMPL_H_INCLUDED

#include "service/run/kb_execution.h"

struct kb_run {
    const kb_run_settings_t *settings;
    kb_run_state_t state;
    kb_run_cause_t cause;
    kb_proc_t *proc;
    json_t *identity; /* {sandbox_id, context_id, language} */
    char *language;
    kb_kernel_t *kernel; /* borrowed from the context once started */

    char *code;
    char *cwd;
    json_t *env;
    bool strip_ansi;
    bool use_adapter;
    double timeout;
    double late_output; /* the kernel's habit: seconds to wait for output after idle */

    char msg_id[96];           /* the request out now */
    kb_execution_t *exec;      /* the caller's code */
    kb_execution_t *step_exec; /* an adapter snippet */
    int apply_attempts;
    int main_attempts;

    kb_timer_t timeout_timer, grace_timer, completion_timer, settle_timer;
    double completion_wait; /* seconds, of the completion timer */

    int sends;            /* requests sent to the kernel */
    double sent_at;       /* of the request out now */
    double busy_at;       /* its status: busy came, or 0 */
    int interrupted_send; /* the request out when the run was interrupted, or 0 */
    int signals;          /* interrupts sent for it */
    double first_signal_at, signal_at;
    kb_timer_t interrupt_timer; /* the next signal (s_interrupt_step) */

    double started_at;     /* on the kernel (loop clock), or 0 */
    char limit_value[240]; /* the error's value, for a limit's outcome */
    bool over_memory;      /* the tree is over the memory limit now */
    kb_run_meter_fn *meter;

    kb_stream_t *stream;
    kb_call_t *held_call;
    kb_run_ended_fn *ended;
    void *ended_arg;

    bool wants_rollback; /* rollback "on_error" was asked */
    char *rollback;      /* the checkpoint taken before it (SPEC section 13), or NULL */
    bool rolled_back;    /* it ended in a failure and is rolled back to that checkpoint */
};

#endif
