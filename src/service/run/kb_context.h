/*  kb_context.h - one context: a kernel, its identity, and its FIFO queue
    of runs (SPEC section 3).

    The context is the only writer of its state: whether its kernel is
    ready, which run has the kernel, its queue, its execution count and
    activity. Runs tell it when they end (kb_run.h); its kernel tells it
    when it is ready, fails to start, sends a message or exits. When the
    context is over (deleted, its kernel dead, an isolated run done, its
    start failed) it tells its owner once through `gone`, and the owner
    takes it out of its table and frees it at the end of the loop turn.
    Not for: finding contexts by id or remembering vanished ones (the
    engine). Engine thread only.
*/
#ifndef KB_CONTEXT_H_INCLUDED
#define KB_CONTEXT_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>

#include "kernel/kb_kernelspec.h"
#include "kernelbridge/kb_error.h"
#include "service/engine/kb_call.h"
#include "service/engine/kb_kernel_source.h"
#include "service/ops/kb_limits.h"
#include "service/run/kb_context_jobs.h"
#include "service/run/kb_run.h"
#include "state/kb_db.h"

typedef struct kb_context kb_context_t;

/*  The context is over. vanished: it had lived (a later call naming it is
    told when and why it went); false when it never started. why is
    borrowed. The owner must not free it now. */
typedef void(kb_context_gone_fn)(kb_context_t *ctx, const char *why, bool vanished, void *arg);

/*  What contexts share; borrowed for the life of every context. */
typedef struct {
    const kb_kernel_source_t *launcher;
    const kb_run_settings_t *run_settings;
    kb_limits_t *limits; /* the sampler of every context's watch */
    const char *sandbox_id;
    kb_context_gone_fn *gone;
    void *gone_arg;
    /* what the state database keeps of it changed: written at the end of
       the turn when at_once (its kernel, as it starts: a crash leaves no
       orphan), else with the next batch (a run's count, with its record);
       called with gone_arg; may be NULL */
    void (*changed)(kb_context_t *ctx, bool at_once, void *arg);
} kb_context_env_t;

typedef struct {
    const char *id;
    const char *language; /* lower-cased copy kept; NULL: the kernelspec's */
    const char *cwd;      /* NULL: the daemon's */
    const json_t *env;    /* borrowed; NULL for none */
    bool is_default;
    bool isolated;        /* for one isolated run: over once the run ends */
    long long generation; /* 0: 1 (a new context); a default context started afresh: one more */
    bool attached;        /* a kernel this daemon did not start (adopted by connection_info) */
    long long memory_limit, pids_limit; /* of the kernel's tree; 0: none */
    const json_t *forked_from;          /* a fork: {context_id, execution_count, generation}
                                           (copied); NULL: none */
    bool fresh; /* adopted, but a new process (a fork made now): its shell ran nothing */
} kb_context_opts_int_t;

/*  What a context brings back from the state database. */
typedef struct {
    long long execution_count, generation;
    double created_at, last_activity_at;
} kb_context_restored_t;

/*  A context whose kernel is starting (or taken ready from the pool).
    NULL with err when the kernel cannot even be launched. Caller owns it. */
kb_context_t *kb_context_new(const kb_context_env_t *env, const kb_kernelspec_t *spec,
                             const kb_context_opts_int_t *opts, kb_error_t *err);

/*  A context around a kernel being adopted (kb_kernel_adopt; taken): the
    same id, counts and times as before (restored may be NULL for a kernel
    adopted by connection_info). It is ready when the kernel answers; its
    runs wait until the kernel's shell is free of whatever it ran before.
    When the kernel does not answer, the context vanishes (its kernel
    killed) and says why. NULL with err (out of memory; kernel not taken). */
kb_context_t *kb_context_adopt(const kb_context_env_t *env, const kb_kernelspec_t *spec,
                               const kb_context_opts_int_t *opts, kb_kernel_t *kernel,
                               const kb_context_restored_t *restored, kb_error_t *err);

/*  Whether the kernel answered or the context is over (adoption settled). */
bool kb_context_settled(const kb_context_t *self);

/*  Its row for the state database: fields borrowed from the context, but
    for the strings in the returned allocation (caller frees it). */
char *kb_context_row(const kb_context_t *self, kb_db_context_t *row);

/*  The service stops and keeps kernels (--keep-kernels): runs end as
    stopped, the kernel is released, still running, for the next daemon.
    No `gone` call. */
void kb_context_release(kb_context_t *self);

/*  Free a context that is over or never had a kernel. Safe on NULL. */
void kb_context_destroy(kb_context_t **self_p);

const char *kb_context_id(const kb_context_t *self);
/*  Its id in Jupyter's API (/api/kernels/{id}): a UUID named by the
    sandbox id and the context id, so the same after a daemon restart.
    Shown in its JSON as kernel_id. */
const char *kb_context_kernel_id(const kb_context_t *self);
/*  The same kernel_id for context id in sandbox sandbox_id, into out
    (KB_UUID_LEN + 1 bytes): what a vanished context's kernel_id was. */
void kb_context_kernel_id_of(const char *sandbox_id, const char *id, char *out);
const char *kb_context_language(const kb_context_t *self);
const char *kb_context_kernel_name(const kb_context_t *self);
bool kb_context_is_default(const kb_context_t *self);
bool kb_context_isolated(const kb_context_t *self);
bool kb_context_ready(const kb_context_t *self);
double kb_context_created_at(const kb_context_t *self);

/*  1 at creation, one more each time the kernel is replaced (restart): a
    caller that sees it change knows the state is gone. */
long long kb_context_generation(const kb_context_t *self);

/*  {sandbox_id, context_id, language, generation}. Caller owns. */
json_t *kb_context_identity(const kb_context_t *self);

/*  The context object of SPEC section 3. Caller owns. */
json_t *kb_context_json(const kb_context_t *self);

/*  Its state as the API shows it: "starting", "idle", "busy" or "dead".
    Static string. */
const char *kb_context_state(const kb_context_t *self);

/*  Answer call with the context object once the kernel is ready (at once
    when it is), or fail it when the start fails. */
void kb_context_hold_call(kb_context_t *self, kb_call_t *call);

/*  Queue a run (the context owns it until it ends); it starts when the
    kernel is ready and free. */
void kb_context_enqueue(kb_context_t *self, kb_run_t *run);

/*  Interrupt whatever the kernel runs now: a native run as a client's
    SIGINT to its process (timed by the run), else the kernel at once. */
void kb_context_interrupt(kb_context_t *self);

/*  A client deleted it: the run in progress ends killed, queued runs end
    not started, the kernel is shut down; `gone` follows. */
void kb_context_delete(kb_context_t *self);

/*  Seconds it has been idle at now: ready, no run out or queued, no
    websocket cell out and no websocket client connected (Jupyter Server's
    cull_connected false), since its last activity; negative when it is
    not idle. What culling looks at. */
double kb_context_idle_for(const kb_context_t *self, double now);

/*  Culled for being idle: deleted as by a client, and it vanishes with
    why; `gone` follows. */
void kb_context_cull(kb_context_t *self, const char *why);

/*  A fresh kernel of the same kernelspec, same id; the run in progress
    ends killed. 0, or -1 with err (the context is then gone). */
int kb_context_restart(kb_context_t *self, kb_error_t *err);

/*  The service stops: runs end as stopped, held calls fail, the kernel is
    shut down (killed when not ready). No `gone` call: the owner frees it. */
void kb_context_stop(kb_context_t *self);

/*  Queue a job (ops borrowed: static). 0, or -1 with err (out of memory,
    or the context is over). */
int kb_context_enqueue_job(kb_context_t *self, const kb_context_job_t *ops, void *arg,
                           kb_error_t *err);

/*  Told once when the context settles: its kernel is ready (ok), or it is
    over or stopping before it was (ok false, why). At most one observer;
    called at once when it has settled already. */
typedef void(kb_context_settled_fn)(kb_context_t *ctx, bool ok, const char *why, void *arg);
void kb_context_on_settled(kb_context_t *self, kb_context_settled_fn *fn, void *arg);

/*  Its kernel replaced by kernel (taken; adopted: a fork of one of its
    checkpoints): as in a restart the run in progress ends killed and a
    running job is cancelled, its generation grows by one; its execution
    count becomes execution_count and restored_from (copied) is shown. */
void kb_context_replace_kernel(kb_context_t *self, kb_kernel_t *kernel, long long execution_count,
                               const json_t *restored_from);

/*  Arm checkpoint_id for the rollback of the run of process_id, queued
    next; ops->ended(arg, ...) is told when that run ends. 0 / -1 (OOM). */
int kb_context_arm_rollback(kb_context_t *self, const char *checkpoint_id, const char *process_id,
                            const kb_context_rollback_t *ops, void *arg);

/*  Its kernel (borrowed; NULL when it has none now). */
kb_kernel_t *kb_context_kernel(const kb_context_t *self);
const char *kb_context_cwd(const kb_context_t *self);   /* as given, or NULL */
const json_t *kb_context_env(const kb_context_t *self); /* as given, or NULL */
long long kb_context_execution_count(const kb_context_t *self);
void kb_context_limits(const kb_context_t *self, long long *memory_limit, long long *pids_limit);

/*  Websocket clients of the kernel's channels (kb_hub.h): attach one
    (SESSION_NOT_FOUND once the context is over), detach it, and give the
    kernel a message it sent (stolen): an execute_request takes its turn
    in the queue. */
int kb_context_channels_attach(kb_context_t *self, kb_channels_t *client, kb_error_t *err);
/*  Whether the kernel's stdin is connected for its clients (true when
    there is no kernel now: nothing to wait for). */
bool kb_context_channels_ready(kb_context_t *self);
void kb_context_channels_detach(kb_context_t *self, kb_channels_t *client);
int kb_context_channels_input(kb_context_t *self, kb_channels_t *client, kb_channel_t channel,
                              kb_msg_t *msg, kb_error_t *err);

#endif
