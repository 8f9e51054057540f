/*  kb_checkpoints.h - the checkpoints of every context (SPEC section 13):
    frozen forks of a context's kernel, each a process that runs nothing
    and waits on a unix socket for a request to fork a kernel from it.

    The store keeps their records (id, context, pid and start time, the
    socket, the execution count at the checkpoint), shows them, asks one
    for a kernel without blocking the loop, and ends them (SIGTERM, which
    makes the process remove its socket; the socket is removed here too).
    A pid is signalled only while its start time is the one recorded.
    Not for: making a checkpoint (the kernel's freeze request,
    kb_fork.c) or the contexts they belong to. Engine thread only.
*/
#ifndef KB_CHECKPOINTS_H_INCLUDED
#define KB_CHECKPOINTS_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "kernelbridge/kb_error.h"
#include "util/kb_loop.h"

typedef struct kb_checkpoints kb_checkpoints_t;

/*  NULL: out of memory. */
kb_checkpoints_t *kb_checkpoints_new(kb_loop_t *loop);

/*  Forget every checkpoint; with end, end each process and remove its
    socket (a daemon that keeps kernels leaves them for the next one).
    Requests in flight are answered as failed first. Safe on NULL. */
void kb_checkpoints_destroy(kb_checkpoints_t **self_p, bool end);

/*  Record every checkpoint in state.db through persist from now on (rows
    of kind "checkpoint": the context's id and the socket in extra), and
    write the rows of those known already. */
struct kb_persist;
void kb_checkpoints_set_persist(kb_checkpoints_t *self, struct kb_persist *persist);

/*  A checkpoint recorded by an earlier daemon (a row of
    kb_restore_found_t's checkpoints): kept when its context came back and
    its process is still the one recorded; else ended (when still that
    process), its socket and row removed. */
void kb_checkpoints_adopt(kb_checkpoints_t *self, const json_t *row, bool context_came);

/*  A new checkpoint's id (prefix + 16 hex) and its socket path
    (<dir>/cp-<16 hex>.sock, which does not exist), both the caller's.
    0, or -1 with err (the path too long for a unix socket). The prefix
    is "cp_" for a client's checkpoint, "rb_" for one taken before a run
    that asked for a rollback: those are neither listed nor counted, and
    a client cannot restore or delete them. */
#define KB_CHECKPOINT_PREFIX "cp_"
#define KB_ROLLBACK_PREFIX "rb_"
int kb_checkpoints_name(const char *dir, const char *prefix, char **id, char **path,
                        kb_error_t *err);

/*  Record a frozen process of context_id made at execution_count. 0, or
    -1 with err (it is gone already, or out of memory: then it is ended). */
int kb_checkpoints_add(kb_checkpoints_t *self, const char *id, const char *context_id,
                       const char *path, pid_t pid, long long execution_count, kb_error_t *err);

/*  How many context_id has. */
size_t kb_checkpoints_count(const kb_checkpoints_t *self, const char *context_id);

/*  {checkpoint_id, context_id, execution_count, created_at, memory_bytes}
    (memory_bytes: what the process holds alone now, USS) of one, or NULL
    when context_id has no checkpoint id. Caller owns. */
json_t *kb_checkpoints_json(const kb_checkpoints_t *self, const char *context_id, const char *id);

/*  {checkpoints: [...]} of context_id, oldest first. Caller owns. */
json_t *kb_checkpoints_list(const kb_checkpoints_t *self, const char *context_id);

/*  Whether context_id has checkpoint id and its process is still there. */
bool kb_checkpoints_alive(const kb_checkpoints_t *self, const char *context_id, const char *id);

/*  Whether a checkpoint's process is pid (pid > 0), or its socket is path
    (path not NULL). */
bool kb_checkpoints_owns(const kb_checkpoints_t *self, pid_t pid, const char *path);

/*  Its execution count (-1 when there is no such checkpoint). */
long long kb_checkpoints_execution_count(const kb_checkpoints_t *self, const char *id);

/*  End one (context_id's checkpoint id). 0, or -1 with err
    (CHECKPOINT_NOT_FOUND). */
int kb_checkpoints_delete(kb_checkpoints_t *self, const char *context_id, const char *id,
                          kb_error_t *err);

/*  End every checkpoint of context_id (it is gone). */
void kb_checkpoints_drop_context(kb_checkpoints_t *self, const char *context_id);

/*  What a request for a kernel ends with: the forked kernel's pid, or 0
    and why. Called once, on the loop, never inside kb_checkpoints_request. */
typedef void(kb_checkpoint_done_fn)(void *arg, pid_t pid, const char *why);

/*  Ask checkpoint id for a kernel on the connection info (its JSON, key
    included): one line out, one line back on its socket, watched by the
    loop. 0, or -1 with err (no such checkpoint, its process gone, the
    socket refused). timeout: seconds the frozen process gives the new
    kernel to start. */
int kb_checkpoints_request(kb_checkpoints_t *self, const char *id, const json_t *connection,
                           double timeout, kb_checkpoint_done_fn *done, void *arg, kb_error_t *err);

/*  Cancel the requests made with arg: their done is never called (the
    kernel they ask for, if it comes, is not adopted by anyone). */
void kb_checkpoints_forget_requests(kb_checkpoints_t *self, void *arg);

#endif
