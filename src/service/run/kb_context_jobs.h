/*  kb_context_jobs.h - private to src/service/run: a context's jobs (a
    fork, a checkpoint: kb_context_job_t of kb_context.h), held in struct
    kb_context as `jobs` and written by kb_context_jobs.c alone: those
    waiting in the run queue's order, the one that has the kernel, and the
    checkpoint armed for the next run that asked for a rollback. Engine
    thread only. */
#ifndef KB_CONTEXT_JOBS_H_INCLUDED
#define KB_CONTEXT_JOBS_H_INCLUDED

#include <czmq.h>
#include <stdbool.h>

#include "kernel/kb_kernel.h"

struct kb_context;

/*  Work on the context's kernel between runs (a fork, a checkpoint), in
    the order of the run queue: it waits for the runs queued before it,
    then has the kernel alone from `start` until `message` says it is done
    (returns true), or start returns false (done at once). `cancel` instead, once, when it will not
   start or not finish: the context is over or deleted, its kernel died or was replaced, the service
   stops (why says which). The context calls these on the engine thread with arg and never frees
   arg. */
typedef struct {
    bool (*start)(void *arg, kb_kernel_t *kernel);
    bool (*message)(void *arg, kb_channel_t channel, const kb_msg_t *msg);
    void (*cancel)(void *arg, const char *why);
} kb_context_job_t;

/*  A job waiting in the queue, or having the kernel: its owner's ops and
    arg, and the run queued last when it came (it goes after that one). */
typedef struct kb_context_job_entry {
    const kb_context_job_t *ops;
    void *arg;
    const void *after;
} kb_context_job_entry_t;

typedef struct kb_context_jobs {
    zlistx_t *waiting;              /* kb_context_job_entry_t *, FIFO */
    kb_context_job_entry_t *held;   /* the one that has the kernel, or NULL */
    struct kb_context_armed *armed; /* a checkpoint armed for a run's rollback, or NULL */
} kb_context_jobs_t;

/*  What is told of the run a checkpoint was armed for, at its end: the
    run's context, and whether the run is rolled back (then the context
    has no ready kernel until kb_context_replace_kernel, or a restart). */
typedef struct {
    void (*ended)(void *arg, struct kb_context *ctx, bool rolled_back);
} kb_context_rollback_t;

/*  The checkpoint armed for the run of process process_id. */
typedef struct kb_context_armed {
    char *checkpoint_id, *process_id;
    const kb_context_rollback_t *ops;
    void *arg;
} kb_context_armed_t;

/*  0 / -1 (out of memory). */
int kb_context_jobs_init(kb_context_jobs_t *self);
void kb_context_jobs_fini(kb_context_jobs_t *self);

/*  Queue a job behind after (the run queued last now, or NULL). 0 / -1. */
int kb_context_jobs_add(kb_context_jobs_t *self, const kb_context_job_t *ops, void *arg,
                        const void *after);

/*  Start the jobs whose runs before them are done (none of them is in
    queue) until one keeps the kernel. True: one has it. */
bool kb_context_jobs_start(kb_context_jobs_t *self, zlistx_t *queue, kb_kernel_t *kernel);

/*  A kernel message for the job that has the kernel; true when that job
    is done with it now (it is freed). */
bool kb_context_jobs_message(kb_context_jobs_t *self, kb_channel_t channel, const kb_msg_t *msg);

/*  Cancel the job that has the kernel, and with all those waiting. */
void kb_context_jobs_cancel(kb_context_jobs_t *self, const char *why, bool all);

/*  Whether a job has the kernel or waits. */
bool kb_context_jobs_pending(const kb_context_jobs_t *self);

/*  Arm a checkpoint for the run of process_id (both copied); ops and arg
    are told when that run ends. An earlier armed one, whose run ended
    before it started, is told now (not rolled back). 0 / -1 (OOM). */
int kb_context_jobs_arm(kb_context_jobs_t *self, const char *checkpoint_id, const char *process_id,
                        const kb_context_rollback_t *ops, void *arg, struct kb_context *ctx);

/*  The armed checkpoint when it is for process_id (taken: the caller's),
    else NULL. */
kb_context_armed_t *kb_context_jobs_take_armed(kb_context_jobs_t *self, const char *process_id);

/*  The armed checkpoint's run will not come: it is told (not rolled
    back) and forgotten. */
void kb_context_jobs_disarm(kb_context_jobs_t *self, struct kb_context *ctx);

/*  Free one taken. Safe on NULL. */
void kb_context_armed_free(kb_context_armed_t *armed);

#endif
