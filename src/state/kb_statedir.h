/*  kb_statedir.h - the daemon's state directory: where it is by default,
    making it private (0700, owned by us), and the lock that lets one
    daemon at a time use it.

    What it is for: the directory that holds state.db and the lock file.
    What it is not for: what is stored in it (kb_db.h), runtime files of
    kernels (connection files, ipc sockets), or choosing among the
    --state-dir flag and the default (the caller's business).
*/
#ifndef KB_STATEDIR_H_INCLUDED
#define KB_STATEDIR_H_INCLUDED

#include <stddef.h>
#include <sys/types.h>

#include "kernelbridge/kb_error.h"

/*  The default state dir of this process: kb_statedir_default_for with
    geteuid(), $XDG_STATE_HOME and $HOME. Caller owns the result; NULL when
    out of memory or when no home directory is known. */
char *kb_statedir_default(void);

/*  The default state dir for a user: /var/lib/kernelbridge for euid 0;
    else <xdg_state_home>/kernelbridge when xdg_state_home is an absolute
    path; else <home>/.local/state/kernelbridge, home being the passwd
    entry's directory of euid when home is NULL, empty or not absolute.
    Both strings are borrowed and may be NULL. Caller owns the result; NULL
    when out of memory or when no home directory is known. */
char *kb_statedir_default_for(uid_t euid, const char *xdg_state_home, const char *home);

/*  Make path a private directory: create it and its missing parents
    (0700), set its mode to 0700 when it exists with another, and check
    that it is a directory owned by geteuid(). Parents that exist are left
    as they are. 0, or -1 with a reason naming the path in err. */
int kb_statedir_prepare(const char *path, kb_error_t *err);

/*  Take the lock of the state dir path, so that one daemon at a time uses
    it: <path>/lock (created 0600, never removed), held with
    flock(LOCK_EX | LOCK_NB) and holding our pid. On success *fd_out is the
    descriptor that keeps the lock (caller owns it; kb_statedir_unlock) and
    0 is returned. When another process (or another open of the file in
    this one) holds the lock, -1 with err naming the path and the holder's
    pid; -1 with err on any other failure. */
int kb_statedir_lock(const char *path, int *fd_out, kb_error_t *err);

/*  Let the lock go: close *fd (when it is >= 0) and set it to -1. The lock
    file stays, with the pid of its last holder. */
void kb_statedir_unlock(int *fd);

#endif
