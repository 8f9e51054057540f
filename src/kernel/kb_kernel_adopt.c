/*  kb_kernel_adopt.c - drive a kernel that is running already: started by
    an earlier daemon (its record: connection JSON with the key, files, pid
    and start time), or by someone else (pid 0: attached). The pid is
    trusted only with its start time; readiness is asked on control, so
    that a kernel busy on shell answers at once. Not for: launching, the
    lifecycle once started (kb_kernel.c).
*/
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernel/kb_kernel_impl.h"

kb_kernel_t *kb_kernel_adopt(kb_loop_t *loop, const kb_kernelspec_t *spec,
                             const kb_adopt_opts_t *opts, const kb_kernel_callbacks_t *callbacks,
                             void *arg, char *err, size_t errlen)
{
    kb_error_t why;
    if (kb_connection_check(opts->connection, &why) != 0) {
        snprintf(err, errlen, "bad connection: %s", why.message);
        return NULL;
    }
    if (opts->pid < 0) {
        snprintf(err, errlen, "pid %d: must be a process id, or 0 for an attached kernel",
                 (int)opts->pid);
        return NULL;
    }
    if (opts->pid > 0) {
        unsigned long long start = kb_proc_start_time(opts->pid);
        if (start == 0) {
            snprintf(err, errlen, "process %d is gone", (int)opts->pid);
            return NULL;
        }
        if (start != opts->pid_start) {
            snprintf(err, errlen,
                     "process %d is another process now: it started at tick %llu, the kernel "
                     "at %llu",
                     (int)opts->pid, start, opts->pid_start);
            return NULL;
        }
    }
    kb_kernel_t *self = kb_kernel_blank(loop, spec, callbacks, arg, err, errlen);
    if (!self)
        return NULL;
    self->adopted = true;
    self->pid = opts->pid;
    if (opts->pid > 0) {
        self->pgid = opts->pid; /* our kernels lead their own group */
        self->pid_start = opts->pid_start;
        self->remove_files = true; /* it is ours now */
    }
    self->started_ms = kb_launch_now_ms();
    self->info = json_deep_copy(opts->connection);
    self->conn.connection_file = opts->connection_file ? strdup(opts->connection_file) : NULL;
    self->conn.log_file = opts->log_file ? strdup(opts->log_file) : NULL;
    const char *transport = json_string_value(json_object_get(self->info, "transport"));
    if (opts->pid > 0 && transport && strcmp(transport, "ipc") == 0) {
        static const char *ports[]
            = { "shell_port", "iopub_port", "stdin_port", "control_port", "hb_port" };
        self->conn.ipc_base = strdup(json_string_value(json_object_get(self->info, "ip")));
        for (int i = 0; i < 5; i++)
            self->conn.ipc_ports[i]
                = (int)json_integer_value(json_object_get(self->info, ports[i]));
    }
    if (!self->info || (opts->connection_file && !self->conn.connection_file)
        || (opts->log_file && !self->conn.log_file)) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (kb_connection_key(&self->conn, self->info, &why) != 0) {
        snprintf(err, errlen, "%s", why.message);
        goto fail;
    }
    if (kb_kernel_connect_sockets(self, err, errlen) != 0)
        goto fail;
    if (!kb_kernel_control(self)) {
        snprintf(err, errlen, "cannot connect the control socket: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (kb_kernel_watch_process(self, err, errlen) != 0)
        goto fail;
    /*  The pid may have ended, and been reused, between the check and
        pidfd_open: the pidfd is of the kernel only if it is still there. */
    if (self->pid > 0 && kb_proc_start_time(self->pid) != self->pid_start) {
        snprintf(err, errlen, "process %d is gone", (int)self->pid);
        goto fail;
    }
    if (self->conn.log_file)
        self->log_fd = open(self->conn.log_file, O_RDWR | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
    /*  Ours now: its uid is in use until it is destroyed, and so is its dir. */
    long long uid = self->pid > 0 && opts->users ? kb_proc_uid(self->pid) : -1;
    if (uid >= 0 && kb_kernel_users_mark(opts->users, uid)) {
        self->users = opts->users;
        self->cred.uid = self->cred.gid = uid;
    }
    struct stat st;
    if (self->pid > 0 && opts->work_root && opts->connection_file
        && (self->work_dir = kb_work_dir_path(opts->work_root, opts->connection_file))
        && (lstat(self->work_dir, &st) != 0 || !S_ISDIR(st.st_mode))) {
        free(self->work_dir);
        self->work_dir = NULL;
    }
    kb_kernel_ask_ready(self, opts->timeout > 0 ? opts->timeout : 1.0);
    return self;
fail:
    kb_kernel_release(&self); /* signals nothing, removes nothing */
    return NULL;
}

pid_t kb_kernel_pgid(const kb_kernel_t *self)
{
    return self->pgid;
}

unsigned long long kb_kernel_pid_start(const kb_kernel_t *self)
{
    return self->pid_start;
}

const json_t *kb_kernel_connection_info(const kb_kernel_t *self)
{
    return self->info;
}

const char *kb_kernel_connection_file(const kb_kernel_t *self)
{
    return self->conn.connection_file;
}

const char *kb_kernel_log_file(const kb_kernel_t *self)
{
    return self->conn.log_file;
}

const char *kb_kernel_work_dir(const kb_kernel_t *self)
{
    return self->work_dir;
}

bool kb_kernel_adopted(const kb_kernel_t *self)
{
    return self->adopted;
}
