/*  kb_engine.h - the engine: the one thread that owns all service state.

    The engine holds the contexts by id (and the ids of vanished ones),
    the process records, the warm pool and the kernels being shut down; it
    answers each call of the public API (kb_call.h) on its loop. It is the
    launcher of kernels for contexts and the pool (kb_kernel_source.h).
    Everything here is touched by the engine thread alone, once started;
    kb_service.c creates it and runs its loop on the actor's thread.
*/
#ifndef KB_ENGINE_H_INCLUDED
#define KB_ENGINE_H_INCLUDED

#include <czmq.h>

#include "kernel/kb_kernel.h"
#include "kernel/kb_kernel_user.h"
#include "kernel/kb_kernelspec.h"
#include "kernelbridge/kb_service.h"
#include "service/engine/kb_call.h"
#include "service/run/kb_context.h"
#include "service/engine/kb_kernel_source.h"
#include "service/ops/kb_limits.h"
#include "service/ops/kb_metrics.h"
#include "service/durable/kb_persist.h"
#include "service/ops/kb_pool.h"
#include "service/output/kb_procstore.h"
#include "service/run/kb_run.h"
#include "state/kb_db.h"
#include "util/kb_loop.h"

typedef struct kb_engine kb_engine_t;

struct kb_engine {
    kb_service_config_t config; /* defaults filled in; no pointers kept */
    char *sandbox_id;
    char *state_dir;
    bool own_state_dir;
    char *ipc_dir; /* short private dir for ipc sockets, or NULL (tcp) */
    unsigned long kernel_serial;
    char **kernel_map;
    char *system_python;
    kb_loop_t *loop;
    bool stopping;
    double started_at;

    zhashx_t *contexts;            /* id -> kb_context_t * (kb_engine_context_add) */
    zhashx_t *kernel_ids;          /* kb_context_kernel_id -> the same kb_context_t * */
    zlistx_t *gone;                /* kb_context_t * over, freed at the end of the loop turn */
    zhashx_t *vanished;            /* context id -> message */
    zlistx_t *vanished_order;      /* ids, oldest first */
    zhashx_t *vanished_kernels;    /* kernel_id -> context id, of those in vanished */
    zhashx_t *default_generations; /* default context id -> (intptr_t) its last generation */
    kb_procstore_t *procs;
    kb_pool_t *pool;
    kb_limits_t *limits;   /* the sampler of contexts' process trees */
    kb_metrics_t *metrics; /* counters for /metrics; every kernel reports to it; freed last */
    zlistx_t *dying;       /* kb_kernel_t * being shut down */
    zlistx_t *reap;        /* kb_kernel_t * gone, freed at the end of the loop turn */
    bool reap_scheduled;
    kb_timer_t stop_timer;
    kb_timer_t cull_timer; /* looks for idle contexts (config.cull_idle_timeout) */
    int64_t stop_deadline_ms;
    kb_kernelspecs_t *specs; /* discovered kernelspecs, refreshed when older than 2 s */
    int64_t specs_at_ms;

    kb_kernel_source_t launcher;      /* for contexts: the pool first */
    kb_kernel_source_t pool_launcher; /* for the pool itself */
    kb_run_settings_t run_settings;
    kb_context_env_t context_env;

    /* durable state (kb_restore.c); all NULL / -1 with an ephemeral state dir */
    int lock_fd;           /* holds <state_dir>/lock */
    kb_db_t *db;           /* state.db while restoring; then the writer's */
    kb_persist_t *persist; /* the writer */
    char *kernel_dir;      /* <state_dir>/kernels: connection files, kernel logs */

    /* kernels run as other users (kb_kernel_user.h); both NULL: as the daemon's */
    kb_kernel_users_t *users;
    char *work_root;          /* <state_dir>/work: the kernels' private dirs */
    zhashx_t *dirty_contexts; /* id -> kb_context_t * whose row changed this turn */
    int64_t adopt_deadline_ms;
};

/*  An engine for config (copied; defaults filled in): state dir, socket
    dir, sandbox id, pool entries, loop. NULL with err. Caller owns it. */
kb_engine_t *kb_engine_new(const kb_service_config_t *config, kb_error_t *err);

/*  Free what kb_engine_new made (after kb_engine_destroy_all ran on the
    loop's thread, if the loop ran). Safe on NULL. */
void kb_engine_destroy(kb_engine_t **self_p);

/*  Answer one call. */
void kb_engine_handle(kb_engine_t *self, kb_call_t *call);

/*  Start the pool (on the loop's thread, once it runs). */
void kb_engine_start(kb_engine_t *self);

/*  Runs end as sandbox_stopped; kernels are asked to shut down. */
void kb_engine_stop_begin(kb_engine_t *self);

/*  The state dir (kb_restore.c): take the lock, open state.db, choose
    the kernels' dirs. 0, or -1 with err. */
int kb_restore_open(kb_engine_t *self, kb_error_t *err);

/*  Bring back what state.db holds (records, then kernels, adopted on the
    loop before it returns) and start writing changes. 0, or -1 with err. */
int kb_restore_run(kb_engine_t *self, kb_error_t *err);

/*  The row of ctx changed / ctx is over: written at the end of the turn. */
void kb_restore_mark(kb_engine_t *self, kb_context_t *ctx);
void kb_restore_forget(kb_engine_t *self, kb_context_t *ctx);

/*  The service stops and keeps ctx's kernel: its row is written now. */
void kb_restore_keep(kb_engine_t *self, kb_context_t *ctx);

/*  Write what is queued, close state.db, let the lock go. */
void kb_restore_close(kb_engine_t *self);

/*  Remember that context id vanished, and why (SESSION_NOT_FOUND says it). */
void kb_dispatch_remember_vanished(kb_engine_t *self, const char *id, const char *why);

/*  Kernels still shutting down. */
size_t kb_engine_dying(const kb_engine_t *self);

/*  On the way out of the loop: kill and reap whatever is left. */
void kb_engine_destroy_all(kb_engine_t *self);

/*  Put ctx in the tables (by its id and by its kernel_id), take it out
    (when it is the one there), and find one by either id. */
void kb_engine_context_add(kb_engine_t *self, kb_context_t *ctx);
void kb_engine_context_remove(kb_engine_t *self, kb_context_t *ctx);
kb_context_t *kb_engine_context_find(kb_engine_t *self, const char *id);

#endif
