/*  kb_fork_impl.h - private to src/service/fork: the steps kb_fork.c
    (forks, checkpoints, restores) and kb_rollback.c (rollbacks) share. */
#ifndef KB_FORK_IMPL_H_INCLUDED
#define KB_FORK_IMPL_H_INCLUDED

#include "service/engine/kb_engine.h"
#include "service/fork/kb_checkpoints.h"

#define KB_FORK_CHILD_TIMEOUT 30.0 /* seconds the kernel side gives its child to start */

/*  Send the kernel a request that calls kernelbridge_fork.<call>(arg);
    msg_id (96 bytes) gets its id. 0 / -1. */
int kb_fork_send(kb_engine_t *engine, kb_kernel_t *kernel, const char *call, const json_t *arg,
                 char *msg_id);

/*  The reply to a request: the new process's pid, or 0 with err
    (UNSUPPORTED_OPTION: the kernel cannot fork; KERNEL_START_FAILED). */
pid_t kb_fork_reply_pid(const kb_msg_t *msg, kb_error_t *err);

/*  Adopt the forked process pid on the connection conn/info (its files
    taken by the kernel on success, removed otherwise). NULL with err; the
    process is then killed when it is still the one that answered. */
kb_kernel_t *kb_fork_adopt(kb_engine_t *engine, const kb_kernelspec_t *spec, pid_t pid,
                           const json_t *info, kb_connection_t *conn, kb_error_t *err);

/*  A restore of checkpoint id on *info whose tcp port was taken
    (kb_connection_port_taken) is asked once more, on a new connection
    (conn and *info replaced; *asked_again set): done(arg, ...) is then
    told again later. False when it is not (asked again already, another
    reason, or the request could not be made). */
bool kb_fork_restore_again(kb_engine_t *engine, const kb_kernelspec_t *spec, const char *id,
                           kb_connection_t *conn, json_t **info, bool *asked_again, const char *why,
                           kb_checkpoint_done_fn *done, void *arg);

#endif
