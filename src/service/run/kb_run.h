/*  kb_run.h - one run of code on a context's kernel, as a state machine.

    A run is queued on its context, started when the kernel is free, and
    goes through its steps: the silent snippet that applies a per-run
    cwd/env, the caller's code, the wait for output a kernel sends after
    idle, and the snippet that restores cwd/env. Everything that happens to
    it (a kernel message, a timer, a client's signal, the kernel's death,
    its context going away, the service stopping) is one event given to
    kb_run_apply, the only function that moves its state. Its states and
    events, what each event does in each state, and the row of SPEC
    section 2's table a run ends with are data (kb_run_table.h).

    The run writes its process record (kb_procstore.h) and its stream; it
    tells its owner (the context) that it ended through a callback, and the
    owner updates itself. It is freed at the end of the loop turn in which
    it ended. Not for: queues or kernels' lifecycles. Engine thread only.
*/
#ifndef KB_RUN_H_INCLUDED
#define KB_RUN_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>

#include "kernel/kb_kernel.h"
#include "kernelbridge/kb_service.h"
#include "service/engine/kb_call.h"
#include "service/ops/kb_metrics.h"
#include "service/output/kb_procstore.h"
#include "service/output/kb_stream.h"
#include "service/run/kb_run_table.h"
#include "util/kb_loop.h"

typedef struct kb_run kb_run_t;

typedef struct {
    kb_run_event_type_t type;
    kb_kernel_t *kernel; /* borrowed */
    kb_channel_t channel;
    const kb_msg_t *msg; /* borrowed */
    int signal;
    const char *text; /* borrowed: the error's value, where the event gives one */
    const char *why;  /* borrowed: raw_reason */
    kb_run_limit_t limit;
    const char *note; /* borrowed: a line for the run's system log */
} kb_run_event_t;

/*  The engine's settings a run uses; borrowed for the run's life. */
typedef struct {
    kb_loop_t *loop;
    const char *sandbox_id;
    double interrupt_grace;  /* seconds from interrupt to kill at timeout */
    double completion_grace; /* seconds to wait for the missing one of reply/idle */
    size_t max_output_bytes;
    kb_metrics_t *metrics; /* counts the run at its end; NULL: not counted */
} kb_run_settings_t;

/*  Called once, when the run has ended, with the execution count the
    kernel gave (-1 for none). The owner must not free the run. */
typedef void(kb_run_ended_fn)(kb_run_t *run, long long execution_count, void *arg);

/*  Fills in what the run cost the kernel's tree (CPU, memory peak), at
    its end, when it had started on the kernel. */
typedef void(kb_run_meter_fn)(kb_run_t *run, kb_resources_t *out, void *arg);

/*  A queued run of opts on a context (its identity JSON is stolen), for
    the record proc. With use_adapter the opts' cwd/env are applied by the
    language's snippets. stream is the caller's (a reference is taken) or
    NULL. Its timeout starts now. Never NULL. Caller owns it until it ends. */
kb_run_t *kb_run_new(const kb_run_settings_t *settings, kb_proc_t *proc, const kb_run_opts_t *opts,
                     double timeout, const char *language, json_t *identity, bool use_adapter,
                     kb_stream_t *stream);

/*  The owner told of the end (the context). */
void kb_run_set_owner(kb_run_t *self, kb_run_ended_fn *ended, void *arg);

/*  Who measures the run's resources (kb_run_meter_fn); called with the
    owner's arg. NULL: CPU and memory unknown. */
void kb_run_set_meter(kb_run_t *self, kb_run_meter_fn *meter);

/*  The call that waits until the run is sent to a kernel (or has ended):
    answered then; failed instead when the kernel could not start. A run
    whose stream keeps only its end (kb_stream_keep_final_only: the caller
    waits for the result anyway) answers it at its end instead, after the
    RESULT is queued: its caller wakes once, not twice.
    kb_run_answer_queued_call answers it now if the run is still queued
    (waiting behind another run, or for its kernel). */
void kb_run_hold_call(kb_run_t *self, kb_call_t *call);
void kb_run_answer_call(kb_run_t *self);
void kb_run_answer_queued_call(kb_run_t *self);

/*  Apply one event. Events that mean nothing in the current state change
    nothing. */
void kb_run_apply(kb_run_t *self, const kb_run_event_t *event);

/*  A message of the kernel over max_message bytes was refused (ZeroMQ):
    the run's log says so, and it ends with MessageTooLarge, truncated. */
void kb_run_message_refused(kb_run_t *self, uint64_t max_message);

kb_run_state_t kb_run_state(const kb_run_t *self);
kb_proc_t *kb_run_proc(const kb_run_t *self);

/*  Rollback (SPEC section 13): whether the run asked for it ("on_error");
    the checkpoint taken before it (taken; set as it starts); and, at its
    end, that checkpoint (borrowed; NULL: none) and whether the run ended
    in a failure it is rolled back from (the result says rolled_back and
    the next generation; the owner restores the checkpoint). */
bool kb_run_wants_rollback(const kb_run_t *self);
void kb_run_set_rollback(kb_run_t *self, char *checkpoint_id);
const char *kb_run_rollback(const kb_run_t *self, bool *rolled_back);

/*  Whether msg answers the request the run has out now. */
bool kb_run_owns_message(const kb_run_t *self, const kb_msg_t *msg);

#endif
