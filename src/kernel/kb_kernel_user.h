/*  kb_kernel_user.h - who a kernel runs as, and the private dir it gets.

    By default a kernel runs as the daemon's own user. A kb_kernel_users_t
    says otherwise: one unprivileged user for every kernel (--kernel-user),
    or a range of uids from which each kernel gets one of its own
    (--kernel-uid-range), so that kernels cannot read or signal the daemon
    nor, with a range, each other. Either needs the daemon to run as root.
    A kernel that runs as another user gets a working dir of its own
    (<work_root>/k-<hex>, named like its connection file, 0700, owned by
    its uid): its HOME, and its cwd when the context gives none.
    Engine thread only. Not for: starting processes (kb_launch.c).
*/
#ifndef KB_KERNEL_USER_H_INCLUDED
#define KB_KERNEL_USER_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "kernelbridge/kb_error.h"

#define KB_KERNEL_GROUPS_MAX 64 /* supplementary groups of a --kernel-user */

/*  The credentials a kernel is started with. */
typedef struct {
    long long uid, gid; /* -1: the daemon's own */
    int ngroups;        /* supplementary groups: none in a uid range */
    gid_t groups[KB_KERNEL_GROUPS_MAX];
    char name[64]; /* the user's name, "" for a uid of a range */
} kb_kernel_cred_t;

typedef struct kb_kernel_users kb_kernel_users_t;

/*  Every kernel runs as user name (resolved now: uid, gid and groups, as
    initgroups would set them). NULL with err when the daemon is not root,
    the user is unknown, or is root itself. Caller owns the result. */
kb_kernel_users_t *kb_kernel_users_new_user(const char *name, kb_error_t *err);

/*  Each kernel runs as a uid of its own from first..last (gid: the same
    number, no supplementary groups). NULL with err when the daemon is not
    root or the range is empty, holds 0, or is over 65536 uids. Caller
    owns the result. */
kb_kernel_users_t *kb_kernel_users_new_range(unsigned first, unsigned last, kb_error_t *err);

/*  Safe on NULL; sets *self_p NULL. Kernels that took a uid must have been
    destroyed or released before. */
void kb_kernel_users_destroy(kb_kernel_users_t **self_p);

/*  Credentials for a new kernel: the user's, or the next free uid of the
    range (round robin, so that a uid given back is handed out again as
    late as possible). 0, or -1 with err when every uid is in use. */
int kb_kernel_users_take(kb_kernel_users_t *self, kb_kernel_cred_t *cred, kb_error_t *err);

/*  The kernel that held uid is gone: in a range, every process still
    running as uid is killed (a helper takes the uid and kills all it may
    signal), then the uid is free again. Nothing for a --kernel-user. */
void kb_kernel_users_give(kb_kernel_users_t *self, long long uid);

/*  An adopted kernel runs as uid: true (and the uid is in use until it is
    given back) when uid is one of ours, false otherwise. */
bool kb_kernel_users_mark(kb_kernel_users_t *self, long long uid);

/*  "user kbtest (uid 999)", "uids 61000-61009". Static buffer of self. */
const char *kb_kernel_users_describe(const kb_kernel_users_t *self);

/*  The real uid of a process (Uid: of /proc/<pid>/status), or -1. */
long long kb_proc_uid(pid_t pid);

/*  <work_root>/k-<hex>: the private dir of the kernel whose connection
    file is <dir>/k-<hex>.json. Caller frees; NULL without memory. */
char *kb_work_dir_path(const char *work_root, const char *connection_file);

/*  Make path, 0700, owned by cred's uid and gid (it must not exist).
    0, or -1 with err. */
int kb_work_dir_make(const char *path, const kb_kernel_cred_t *cred, kb_error_t *err);

/*  Remove path and everything under it, never following a symbolic link
    (openat with O_NOFOLLOW, unlinkat), whatever the kernel left there.
    0, or -1 with errno; a path that does not exist is not an error. */
int kb_work_dir_remove(const char *path);

#endif
