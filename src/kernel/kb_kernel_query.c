/*  kb_kernel_query.c - what a kernel says of itself: its process, its
    kernelspec, how it ended, its connection and files. Read-only: every
    field is set in kb_kernel.c.
*/
#include "kernel/kb_kernel_impl.h"
#include "kernel/kb_proctree.h"

#include <string.h>

pid_t kb_kernel_pid(const kb_kernel_t *self)
{
    return self->pid;
}

const kb_kernelspec_t *kb_kernel_spec(const kb_kernel_t *self)
{
    return self->spec;
}

int kb_kernel_exit_status(const kb_kernel_t *self)
{
    return self->exit_status;
}

int kb_kernel_term_signal(const kb_kernel_t *self)
{
    return self->term_signal;
}

size_t kb_kernel_dropped(const kb_kernel_t *self)
{
    return self->dropped;
}

const char *kb_kernel_language_info(const kb_kernel_t *self)
{
    return self->io.language_info;
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

uint64_t kb_kernel_max_message(const kb_kernel_t *self)
{
    return self->max_message;
}

/*  A stopped or traced process (state T or t in /proc/<pid>/stat). */
bool kb_kernel_proc_stopped(pid_t pid)
{
    char buf[512];
    if (kb_proc_read(pid, "stat", buf, sizeof buf) < 0)
        return false;
    const char *close_paren = strrchr(buf, ')'); /* the name may hold spaces and parens */
    return close_paren && close_paren[1] == ' ' && (close_paren[2] == 'T' || close_paren[2] == 't');
}

bool kb_kernel_paused(const kb_kernel_t *self)
{
    return self->io.paused;
}

bool kb_kernel_iopub_waits(const kb_kernel_t *self)
{
    return self->io.nodrop;
}

unsigned long long kb_kernel_pauses(const kb_kernel_t *self)
{
    return self->io.pauses;
}

unsigned kb_kernel_heartbeat_misses(const kb_kernel_t *self)
{
    if (self->io.paused) /* stopped by us until its output is read: not late */
        return 0;
    if (self->hb || self->state == KB_KERNEL_DEAD || self->pid <= 0)
        return self->hb_misses;
    return kb_kernel_proc_stopped(self->pid) ? 2 : 0;
}
