/*  kb_kernel_fork.c - what the daemon makes for a kernel that another
    kernel forks (SPEC section 13): its connection (a new key, new ports
    or ipc paths, the connection file and log a launch would have), chosen
    here and given to the parent kernel's fork request; the forked process
    is then adopted (kb_kernel_adopt). Not for: asking the kernel
    (service/engine/kb_fork.c), the kernel side (python/kernelbridge_fork).
*/
#include <stdlib.h>
#include <string.h>

#include "kernel/kb_kernel_impl.h"

json_t *kb_kernel_fork_connection(const kb_kernel_t *parent, const kb_kernel_opts_t *opts,
                                  kb_connection_t *conn, kb_error_t *err)
{
    memset(conn, 0, sizeof *conn);
    if (parent->users) {
        kb_error_set(err, KB_ERR_UNSUPPORTED_OPTION,
                     "contexts cannot be forked when kernels run as other users "
                     "(--kernel-user, --kernel-uids): a fork would share its parent's user and "
                     "private directory");
        return NULL;
    }
    if (parent->pid <= 0 || parent->state == KB_KERNEL_DEAD || parent->state == KB_KERNEL_DYING) {
        kb_error_set(err, KB_ERR_UNSUPPORTED_OPTION, "%s",
                     parent->pid == 0 ? "a kernel this daemon did not start cannot be forked"
                                      : "its kernel is not running");
        return NULL;
    }
    return kb_kernel_spec_connection(parent->spec, opts, conn, err);
}

json_t *kb_kernel_spec_connection(const kb_kernelspec_t *spec, const kb_kernel_opts_t *opts,
                                  kb_connection_t *conn, kb_error_t *err)
{
    memset(conn, 0, sizeof *conn);
    json_t *info = kb_connection_write(conn, spec, opts, NULL, err);
    if (!info)
        kb_fork_connection_end(conn, true);
    return info;
}

void kb_fork_connection_end(kb_connection_t *conn, bool remove)
{
    if (remove)
        kb_connection_remove(conn);
    else
        kb_connection_forget(conn);
    kb_wire_destroy(&conn->wire);
}
