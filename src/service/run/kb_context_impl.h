/*  kb_context_impl.h - struct kb_context, private to src/service/run: written
    by kb_context.c alone, read by kb_context_view.c (what a context shows,
    whether it is idle or settled).
    Include it after kb_context.h, whose types it uses. Engine thread only. */
#ifndef KB_CONTEXT_IMPL_H_INCLUDED
#define KB_CONTEXT_IMPL_H_INCLUDED

#include <czmq.h>

#include "service/jupyter/kb_hub.h"
#include "service/run/kb_context_jobs.h"
#include "service/run/kb_execution.h"
#include "util/kb_clock.h"

struct kb_context {
    const kb_context_env_t *env;
    kb_kernelspec_t *spec; /* what its kernels are started from */
    char *id;
    char kernel_id[KB_UUID_LEN + 1]; /* its name in Jupyter's API: a UUID named by the sandbox
                                        and id, the same after a restart */
    char *language;
    char *cwd;       /* as given at creation, or NULL: the kernel's own (the daemon's) */
    char *start_dir; /* absolute: cwd resolved, or the daemon's working directory */
    json_t *kernel_env;
    bool is_default;
    bool isolated;
    bool ready; /* the kernel answered and its cwd/env (from the pool) are applied */
    bool over;  /* gone was called */
    kb_kernel_t *kernel;
    double created_at;
    double last_activity_at;
    double ready_at; /* its kernel last became ready: idle time starts no sooner */
    long long execution_count;
    long long generation; /* 1 at creation, +1 each time its kernel is replaced */
    zlistx_t *queue;      /* kb_run_t * waiting, FIFO */
    kb_run_t *running;
    zlistx_t *held;        /* kb_call_t * answered when the kernel is ready */
    kb_execution_t *setup; /* applying cwd/env to a kernel taken from the pool */
    char setup_msg_id[96];
    bool adopted;    /* its kernel was taken over after a daemon restart */
    bool attached;   /* a kernel this daemon did not start (connection_info) */
    bool barrier;    /* adopted: the shell may still run the old daemon's cell */
    bool fresh;      /* adopted, but a new process (a fork): no barrier needed */
    bool attaching;  /* attached by a request now (not restored), not answered yet */
    bool relaunched; /* its kernel forked from a template failed: started again, ordinary */
    char barrier_msg_id[96];
    long long memory_limit, pids_limit; /* 0: none */
    kb_watch_t *watch;                  /* the kernel's tree; NULL for an attached kernel */
    char limit_why[300];                /* why the kernel was killed over a limit, or "" */
    kb_hub_t *hub;                      /* websocket clients of its channels, or NULL */
    struct kb_context_jobs jobs;        /* its jobs (kb_context_jobs.c writes them) */
    kb_context_settled_fn *settled_fn;  /* told once when it settles; NULL: no one */
    void *settled_arg;
    bool settled; /* ready, or over, once: settled_fn was called (or had nothing to say) */
    kb_context_armed_t *rolling; /* the rollback of the run out now, or NULL */
    bool restoring;      /* a rolled-back run's checkpoint is being restored: no kernel is ready */
    json_t *forked_from; /* {context_id, execution_count, generation}, or NULL */
    json_t *restored_from; /* {checkpoint_id, execution_count}, or NULL */
};

/*  Where a kernel starts (kb_launch: in cwd, relative to the daemon's
    directory, else in the daemon's), absolute. Caller owns it; NULL: OOM.
    (kb_context_view.c) */
char *kb_context_start_dir(const char *cwd);

/*  The RLIMIT_DATA of the context's kernel: its memory limit, unless its
    kernelspec opts out. 0: none. (kb_context_view.c) */
uint64_t kb_context_data_limit(const kb_context_t *self);

#endif
