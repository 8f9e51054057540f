/*  kb_kernel_adopt.c - drive a kernel that is running already: started by
    an earlier daemon (its record: connection JSON with the key, files, pid
    and start time), or by someone else (pid 0: attached). The pid is
    trusted only with its start time; readiness is asked on control, so
    that a kernel busy on shell answers at once. Not for: launching, the
    lifecycle once started (kb_kernel.c), which also sets every field
    of the kernel (kb_kernel_take_record, kb_kernel_take_files).
*/
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernel/kb_kernel_impl.h"

kb_kernel_t *kb_kernel_adopt(kb_loop_t *loop, const kb_kernelspec_t *spec,
                             const kb_adopt_opts_t *opts, const kb_kernel_callbacks_t *callbacks,
                             void *arg, kb_error_t *err)
{
    kb_error_t why;
    if (kb_connection_check(opts->connection, &why) != 0) {
        kb_error_set(err, why.code, "bad connection: %s", why.message);
        return NULL;
    }
    if (opts->pid < 0) {
        kb_error_set(err, KB_ERR_INTERNAL,
                     "pid %d: must be a process id, or 0 for an attached kernel", (int)opts->pid);
        return NULL;
    }
    if (opts->pid > 0) {
        unsigned long long start = kb_proc_start_time(opts->pid);
        if (start == 0) {
            kb_error_set(err, KB_ERR_INTERNAL, "process %d is gone", (int)opts->pid);
            return NULL;
        }
        if (start != opts->pid_start) {
            kb_error_set(err, KB_ERR_INTERNAL,
                         "process %d is another process now: it started at tick %llu, the kernel "
                         "at %llu",
                         (int)opts->pid, start, opts->pid_start);
            return NULL;
        }
    }
    kb_kernel_t *self = kb_kernel_blank(loop, spec, callbacks, arg, err);
    if (!self)
        return NULL;
    if (kb_kernel_take_record(self, opts, err) != 0)
        goto fail;
    if (kb_connection_key(&self->conn, self->info, err) != 0)
        goto fail;
    if (kb_kernel_connect_sockets(self, err) != 0)
        goto fail;
    if (!kb_kernel_control(self)) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot connect the control socket: %s",
                     zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (kb_kernel_watch_process(self, err) != 0)
        goto fail;
    /*  The pid may have ended, and been reused, between the check and
        pidfd_open: the pidfd is of the kernel only if it is still there. */
    if (self->pid > 0 && kb_proc_start_time(self->pid) != self->pid_start) {
        kb_error_set(err, KB_ERR_INTERNAL, "process %d is gone", (int)self->pid);
        goto fail;
    }
    /*  A daemon that ended while the kernel was paused for its output
        (kb_kernel.h) left it stopped: it goes on, to answer. */
    if (self->pid > 0 && self->pgid > 0 && kb_kernel_proc_stopped(self->pid))
        kill(-self->pgid, SIGCONT);
    /*  Ours now: its uid is in use until it is destroyed, and so is its dir. */
    kb_kernel_take_files(self, opts);
    kb_kernel_ask_ready(self, opts->timeout > 0 ? opts->timeout : 1.0);
    return self;
fail:
    kb_kernel_release(&self); /* signals nothing, removes nothing */
    return NULL;
}
