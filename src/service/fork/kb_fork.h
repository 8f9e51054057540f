/*  kb_fork.h - forks, checkpoints and restores of a context (SPEC section
    13), on the engine thread.

    A fork or a checkpoint is a job in the parent context's queue
    (kb_context_enqueue_job): when the runs before it are done it sends the
    kernel a silent execute_request that calls python/kernelbridge_fork
    (fork with a connection chosen here, or freeze with a socket path) and
    reads the new process's pid from the reply's user expression. A fork is
    then adopted (kb_kernel_adopt) into a new context; a checkpoint goes to
    the store (kb_checkpoints.h). A restore asks a checkpoint for a kernel
    on its socket and puts it in the context in place of its kernel.
    Each answers its call once: when every fork is ready (or, when one
    failed, after the others were deleted), when the checkpoint is
    recorded, when the restored kernel is ready. Not for: the kernel side
    (docs/fork.md), the store of checkpoints.
*/
#ifndef KB_FORK_H_INCLUDED
#define KB_FORK_H_INCLUDED

#include "service/engine/kb_call.h"
#include "service/engine/kb_engine.h"
#include "service/run/kb_context.h"

/*  Whether parent can be forked now; 0, or -1 with err
    (UNSUPPORTED_OPTION and the reason). */
int kb_fork_check(kb_engine_t *engine, kb_context_t *parent, kb_error_t *err);

/*  Fork parent per opts (checked; NULL: one fork; copied); the call is
    answered with {contexts: [...]}, or with the context alone when
    single. */
void kb_fork_contexts(kb_engine_t *engine, kb_context_t *parent, kb_call_t *call,
                      const kb_fork_opts_t *opts, bool single);

/*  A checkpoint of ctx; the call is answered with it. */
void kb_fork_checkpoint(kb_engine_t *engine, kb_context_t *ctx, kb_call_t *call);

/*  Replace ctx's kernel with a fork of its checkpoint checkpoint_id; the
    call is answered with the context once its new kernel is ready. */
void kb_fork_restore(kb_engine_t *engine, kb_context_t *ctx, const char *checkpoint_id,
                     kb_call_t *call);

/*  Take a checkpoint of ctx before the run of process_id, queued next
    (a job ahead of it); when the run ends in a failure the context is put
    back to it (kb_run_rolls_back), else it is dropped. 0, or -1 with err
    (UNSUPPORTED_OPTION: a kernel that cannot fork). */
int kb_fork_rollback(kb_engine_t *engine, kb_context_t *ctx, const char *process_id,
                     kb_error_t *err);

#endif
