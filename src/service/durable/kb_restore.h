/*  kb_restore.h - a durable state dir: its lock, state.db, and what a
    daemon finds there when it starts. The engine (kb_engine.c) opens it,
    lends what adoption needs (kb_restore_env_t), applies what it found
    (kb_restore_found_t: adopted contexts, vanished ids, generations), and
    then hands every change of a context's row back here to be written.
    kb_restore calls nothing of the engine's. Engine thread only (its
    loop; kb_restore_open before the thread starts). A NULL kb_restore_t
    is an ephemeral state dir: every call below is then a no-op.
*/
#ifndef KB_RESTORE_H_INCLUDED
#define KB_RESTORE_H_INCLUDED

#include <czmq.h>
#include <jansson.h>

#include "kernel/kb_kernel_user.h"
#include "kernelbridge/kb_error.h"
#include "service/durable/kb_persist.h"
#include "service/engine/kb_kernel_source.h"
#include "service/ops/kb_metrics.h"
#include "service/ops/kb_pool.h"
#include "service/output/kb_procstore.h"
#include "service/run/kb_context.h"
#include "util/kb_loop.h"

typedef struct kb_restore kb_restore_t;

/*  What adoption borrows from the engine. */
typedef struct {
    kb_loop_t *loop;
    const kb_kernel_source_t *launcher; /* find_spec */
    const kb_context_env_t *context_env;
    kb_pool_t *pool;
    kb_procstore_t *procs;
    kb_metrics_t *metrics;
    kb_kernel_users_t *users; /* or NULL */
    const char *work_root;    /* or NULL */
    uint64_t max_message;     /* of the kernels' sockets (kb_adopt_opts_t); 0: none */
    const char *sandbox_id;
    bool no_adopt;
} kb_restore_env_t;

/*  What a start found in state.db, for the engine to apply. */
typedef struct {
    json_t *generations; /* default context id -> its last generation */
    json_t *vanished;    /* [[id, why], ...], in the order they vanished */
    zlistx_t *contexts;  /* kb_context_t * adopted, the engine's to keep */
    json_t *checkpoints; /* [{id, context_id, path, pid, pid_start, execution_count,
                            created_at}]: the recorded checkpoints, for the engine */
} kb_restore_found_t;

/*  Take the lock of state_dir, create its kernels dir, open state.db.
    NULL with err (BAD_REQUEST). */
kb_restore_t *kb_restore_open(const char *state_dir, kb_error_t *err);

/*  The ipc dir of the last daemon when it is still a private dir of ours
    in /tmp (adopted kernels listen there), else NULL. Caller owns it. */
char *kb_restore_ipc_dir(kb_restore_t *self);

/*  Record the ipc dir this daemon uses (for the next one). */
void kb_restore_set_ipc_dir(kb_restore_t *self, const char *ipc_dir);

/*  <state_dir>/kernels: connection files and kernel logs; NULL when
    self is. Borrowed. */
const char *kb_restore_kernel_dir(const kb_restore_t *self);

/*  Bring back the process records (running ones end as sandbox_stopped)
    and begin adopting the recorded kernels; found gets what the engine
    must apply (free it with kb_restore_found_fini). 0, or -1 with err. */
int kb_restore_run(kb_restore_t *self, const kb_restore_env_t *env, kb_restore_found_t *found,
                   kb_error_t *err);

/*  Free what found holds but the contexts (handed over to the engine). */
void kb_restore_found_fini(kb_restore_found_t *found);

/*  After adoption settled: sweep files no kernel of contexts (id ->
    kb_context_t *) uses in the kernels dir and ipc_dir, start the writer,
    and write every context's row. 0, or -1 with err. */
int kb_restore_finish(kb_restore_t *self, const kb_restore_env_t *env, zhashx_t *contexts,
                      const char *ipc_dir, kb_error_t *err);

/*  The writer of state.db, or NULL (ephemeral, or before kb_restore_finish). */
kb_persist_t *kb_restore_persist(const kb_restore_t *self);

/*  The row of ctx changed: written at the end of the turn when at_once
    (a kernel recorded as it starts: a crash leaves no orphan), else with
    the next batch (a run's count: KB_PERSIST_HOLD_MS at most, with the
    run's record). ctx is over: its row is deleted. */
void kb_restore_mark(kb_restore_t *self, kb_context_t *ctx, bool at_once);
void kb_restore_forget(kb_restore_t *self, kb_context_t *ctx);

/*  The default contexts' generations (id -> (intptr_t) generation), kept
    across restarts. */
void kb_restore_generations(kb_restore_t *self, zhashx_t *generations);

/*  The service stops and keeps ctx's kernel: its row is written now. */
void kb_restore_keep(kb_restore_t *self, kb_context_t *ctx);

/*  Write what is queued, close state.db, let the lock go. Safe on NULL. */
void kb_restore_close(kb_restore_t **self_p);

#endif
