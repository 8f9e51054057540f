/*  kb_engine.h - the engine: the one thread that owns all service state.

    The engine holds the contexts by id (and the ids of vanished ones),
    the process records, the warm pool and the kernels being shut down; it
    answers each call of the public API (kb_call.h) on its loop. It is the
    launcher of kernels for contexts and the pool (kb_kernel_source.h).
    Everything here is touched by the engine thread alone, once started;
    kb_service.c creates it and runs its loop on the actor's thread.

    Only kb_engine.c writes these fields; kb_dispatch.c (what each call
    does) and kb_service.c read them and change the engine through the
    functions below. The engine calls down (kb_restore, kb_vanished, the
    run and ops folders), never up into kb_dispatch.c or kb_service.c.
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
#include "service/ops/kb_kernel_memory.h"
#include "service/ops/kb_limits.h"
#include "service/ops/kb_metrics.h"
#include "service/durable/kb_persist.h"
#include "service/durable/kb_restore.h"
#include "service/engine/kb_vanished.h"
#include "service/fork/kb_template.h"
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
    char **kernel_map;
    char *system_python;
    char *display_dir; /* on Python contexts' PYTHONPATH for kernelbridge_display; NULL: off */
    char *python_dir;  /* the kernel-side packages' (kb_engine_python_dir): on forkable kernels'
                          PYTHONPATH */
    kb_loop_t *loop;
    bool stopping;
    double started_at;

    zhashx_t *contexts;            /* id -> kb_context_t * (kb_engine_context_add) */
    zhashx_t *kernel_ids;          /* kb_context_kernel_id -> the same kb_context_t * */
    zlistx_t *gone;                /* kb_context_t * over, freed at the end of the loop turn */
    kb_vanished_t *vanished;       /* ids of vanished contexts, and why */
    zhashx_t *default_generations; /* default context id -> (intptr_t) its last generation */
    kb_procstore_t *procs;
    kb_pool_t *pool;
    kb_limits_t *limits;              /* the sampler of contexts' process trees */
    kb_kernel_memory_t kernel_memory; /* the kernels' memory /health shows, kept per pid */
    kb_metrics_t *metrics; /* counters for /metrics; every kernel reports to it; freed last */
    zlistx_t *dying;       /* kb_kernel_t * being shut down */
    zlistx_t *reap;        /* kb_kernel_t * gone, freed at the end of the loop turn */
    bool reap_scheduled;
    kb_timer_t stop_timer;
    kb_timer_t cull_timer; /* looks for idle contexts (config.cull_idle_timeout) */
    int64_t stop_deadline_ms;
    kb_kernelspecs_t *specs; /* discovered kernelspecs, refreshed when older than 2 s */
    int64_t specs_at_ms;

    kb_kernel_source_t launcher;       /* for contexts: the pool first */
    kb_kernel_source_t pool_launcher;  /* for the pool itself */
    kb_kernel_source_t plain_launcher; /* never from a template: for the templates */
    kb_run_settings_t run_settings;
    kb_context_env_t context_env;

    kb_restore_t *durable; /* the state dir's lock, state.db, its writer; NULL: ephemeral */
    struct kb_checkpoints *checkpoints; /* every context's (service/fork/kb_checkpoints.h) */
    struct kb_templates *templates;     /* --fork-template's (service/fork/kb_template.h) or NULL */

    /* kernels run as other users (kb_kernel_user.h); both NULL: as the daemon's */
    kb_kernel_users_t *users;
    char *work_root; /* <state_dir>/work: the kernels' private dirs */
    int64_t adopt_deadline_ms;
};

/*  An engine for config (copied; defaults filled in): state dir, socket
    dir, sandbox id, pool entries, loop. NULL with err. Caller owns it. */
kb_engine_t *kb_engine_new(const kb_service_config_t *config, kb_error_t *err);

/*  Free what kb_engine_new made (after kb_engine_destroy_all ran on the
    loop's thread, if the loop ran). Safe on NULL. */
void kb_engine_destroy(kb_engine_t **self_p);

/*  Start the pool (on the loop's thread, once it runs). */
void kb_engine_start(kb_engine_t *self);

/*  Runs end as sandbox_stopped; kernels are asked to shut down. */
void kb_engine_stop_begin(kb_engine_t *self);

/*  Stop: kb_engine_stop_begin, then the loop ends once the kernels are
    gone (5 s at most). */
void kb_engine_stop(kb_engine_t *self);

/*  A context is over: out of the tables now, freed at the end of the
    turn; with vanished, its id is remembered with why. */
void kb_engine_context_gone(kb_context_t *ctx, const char *why, bool vanished, void *arg);

/*  The generation a default context of id starts with: one more than its
    last. */
intptr_t kb_engine_next_generation(kb_engine_t *self, const char *id);

/*  Kernelspecs as discovered at most 2 s ago (fresh: now). Borrowed. */
const kb_kernelspecs_t *kb_engine_specs(kb_engine_t *self, bool fresh);

/*  Where a kernel of spec keeps its files and how it is reached (the
    runtime and ipc dirs, the transport, a new serial): the rest of out
    zeroed. */
void kb_engine_kernel_opts(kb_engine_t *self, const kb_kernelspec_t *spec, kb_kernel_opts_t *out);

/*  Launch a kernel of spec as kb_kernel_source_t.launch says, never from
    a template (what a template itself starts as). */
kb_kernel_t *kb_engine_launch(kb_engine_t *self, const kb_kernelspec_t *spec, const char *cwd,
                              const json_t *env, uint64_t data_limit,
                              const kb_kernel_callbacks_t *callbacks, void *arg, kb_error_t *err);

/*  The same as a kb_kernel_source_t's launch (impl: the engine). */
kb_kernel_t *kb_engine_plain_launch(void *impl, const kb_kernelspec_t *spec, const char *cwd,
                                    const json_t *env, uint64_t data_limit,
                                    const kb_kernel_callbacks_t *callbacks, void *arg,
                                    kb_error_t *err);

/*  What the engine lends its templates (service/fork/kb_template.h). */
void kb_engine_template_env(kb_engine_t *self, kb_template_env_t *out);

/*  Kernels of contexts and of the pool. */
size_t kb_engine_kernel_count(kb_engine_t *self);

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
