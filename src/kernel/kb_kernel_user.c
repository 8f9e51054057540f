/*  kb_kernel_user.c - who kernels run as: one user, or a uid of their own
    from a range handed out round robin; the private working dir of a
    kernel that runs as another user, and its removal without following
    links. See kb_kernel_user.h. Not for: the fork and exec that take the
    credentials (kb_launch.c).
*/
#include "kernel/kb_kernel_user.h"

#include "kernel/kb_proctree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define KB_RANGE_MAX 65536 /* uids in one range */

struct kb_kernel_users {
    bool range;
    kb_kernel_cred_t user; /* a --kernel-user */
    unsigned first, last;  /* a range */
    unsigned char *in_use; /* one byte per uid of the range */
    size_t next;           /* where the round robin looks first */
    char text[96];
};

static kb_kernel_users_t *s_new(kb_error_t *err)
{
    if (geteuid() != 0) {
        kb_error_set(err, KB_ERR_INTERNAL,
                     "running kernels as other users needs the daemon to run as root (it runs as "
                     "uid %u)",
                     (unsigned)geteuid());
        return NULL;
    }
    kb_kernel_users_t *self = calloc(1, sizeof *self);
    if (!self)
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
    return self;
}

kb_kernel_users_t *kb_kernel_users_new_user(const char *name, kb_error_t *err)
{
    kb_kernel_users_t *self = s_new(err);
    if (!self)
        return NULL;
    struct passwd entry, *found = NULL;
    char buf[8192];
    int rc = getpwnam_r(name, &entry, buf, sizeof buf, &found);
    if (rc != 0 || !found) {
        kb_error_set(err, KB_ERR_INTERNAL, "kernel user %s: %s", name,
                     rc ? strerror(rc) : "no such user");
        goto fail;
    }
    if (found->pw_uid == 0 || found->pw_gid == 0) {
        kb_error_set(err, KB_ERR_INTERNAL,
                     "kernel user %s is root (uid %u, gid %u): kernels would reach all", name,
                     (unsigned)found->pw_uid, (unsigned)found->pw_gid);
        goto fail;
    }
    kb_kernel_cred_t *cred = &self->user;
    cred->uid = found->pw_uid;
    cred->gid = found->pw_gid;
    cred->ngroups = KB_KERNEL_GROUPS_MAX;
    if (getgrouplist(name, found->pw_gid, cred->groups, &cred->ngroups) < 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "kernel user %s is in more than %d groups", name,
                     KB_KERNEL_GROUPS_MAX);
        goto fail;
    }
    for (int i = 0; i < cred->ngroups; i++)
        if (cred->groups[i] == 0) {
            kb_error_set(err, KB_ERR_INTERNAL, "kernel user %s is in group 0 (root)", name);
            goto fail;
        }
    snprintf(cred->name, sizeof cred->name, "%s", name);
    snprintf(self->text, sizeof self->text, "user %s (uid %u)", name, (unsigned)found->pw_uid);
    return self;
fail:
    kb_kernel_users_destroy(&self);
    return NULL;
}

kb_kernel_users_t *kb_kernel_users_new_range(unsigned first, unsigned last, kb_error_t *err)
{
    if (first == 0 || last < first || last - first >= KB_RANGE_MAX || last == (unsigned)-1) {
        kb_error_set(err, KB_ERR_INTERNAL,
                     "kernel uid range %u-%u: must be 1 to %d uids, none of them 0 or 4294967295",
                     first, last, KB_RANGE_MAX);
        return NULL;
    }
    kb_kernel_users_t *self = s_new(err);
    if (!self)
        return NULL;
    self->range = true;
    self->first = first;
    self->last = last;
    self->in_use = calloc((size_t)(last - first) + 1, 1);
    if (!self->in_use) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        kb_kernel_users_destroy(&self);
        return NULL;
    }
    snprintf(self->text, sizeof self->text, "uids %u-%u", first, last);
    return self;
}

void kb_kernel_users_destroy(kb_kernel_users_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free((*self_p)->in_use);
    free(*self_p);
    *self_p = NULL;
}

const char *kb_kernel_users_describe(const kb_kernel_users_t *self)
{
    return self->text;
}

int kb_kernel_users_take(kb_kernel_users_t *self, kb_kernel_cred_t *cred, kb_error_t *err)
{
    if (!self->range) {
        *cred = self->user;
        return 0;
    }
    size_t count = (size_t)(self->last - self->first) + 1;
    for (size_t i = 0; i < count; i++) {
        size_t slot = (self->next + i) % count;
        if (self->in_use[slot])
            continue;
        self->in_use[slot] = 1;
        self->next = (slot + 1) % count;
        *cred = (kb_kernel_cred_t){ .uid = self->first + (long long)slot,
                                    .gid = self->first + (long long)slot };
        return 0;
    }
    kb_error_set(err, KB_ERR_INTERNAL,
                 "no free uid in the kernel uid range %u-%u: all %zu are in use by running kernels",
                 self->first, self->last, count);
    return -1;
}

/*  Kill every process running as uid, but the caller: a child takes the
    uid (raw syscalls: one thread after fork, nothing of glibc's setxid
    machinery) and sends SIGKILL to all it may signal, i.e. to that uid's
    processes. Whatever a kernel left behind (a daemonized child that left
    its process group) dies with it, before the uid serves another. */
static void s_kill_uid(long long uid)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (syscall(SYS_setgroups, 0, NULL) != 0 || syscall(SYS_setresgid, uid, uid, uid) != 0
            || syscall(SYS_setresuid, uid, uid, uid) != 0)
            _exit(127);
        kill(-1, SIGKILL);
        _exit(0);
    }
    int status;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
}

void kb_kernel_users_give(kb_kernel_users_t *self, long long uid)
{
    if (!self->range || uid < self->first || uid > self->last)
        return;
    s_kill_uid(uid);
    self->in_use[uid - self->first] = 0;
}

bool kb_kernel_users_mark(kb_kernel_users_t *self, long long uid)
{
    if (!self->range)
        return uid == self->user.uid;
    if (uid < self->first || uid > self->last)
        return false;
    self->in_use[uid - self->first] = 1;
    return true;
}

long long kb_proc_uid(pid_t pid)
{
    char buf[2048];
    if (kb_proc_read(pid, "status", buf, sizeof buf) < 0)
        return -1;
    const char *line = strstr(buf, "\nUid:");
    if (!line)
        return -1;
    char *end;
    long long uid = strtoll(line + 5, &end, 10);
    return end == line + 5 || uid < 0 ? -1 : uid;
}

/* ---- the working dir ----------------------------------------------------------- */

char *kb_work_dir_path(const char *work_root, const char *connection_file)
{
    const char *base = strrchr(connection_file, '/');
    base = base ? base + 1 : connection_file;
    size_t len = strlen(base);
    if (len > 5 && strcmp(base + len - 5, ".json") == 0)
        len -= 5;
    size_t size = strlen(work_root) + len + 2;
    char *path = malloc(size);
    if (path)
        snprintf(path, size, "%s/%.*s", work_root, (int)len, base);
    return path;
}

int kb_work_dir_make(const char *path, const kb_kernel_cred_t *cred, kb_error_t *err)
{
    if (mkdir(path, 0700) != 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot create the kernel's dir %s: %s", path,
                     strerror(errno));
        return -1;
    }
    /*  Made by root in a dir only root writes to: nothing can have been
        put in its place between the mkdir and this. */
    if (chown(path, (uid_t)cred->uid, (gid_t)cred->gid) != 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot give %s to uid %lld: %s", path, cred->uid,
                     strerror(errno));
        rmdir(path);
        return -1;
    }
    return 0;
}

/*  Empty the dir open at fd and close it; links are removed, not followed. */
static int s_empty_dir(int fd, int depth)
{
    DIR *dir = fdopendir(fd);
    if (!dir) {
        close(fd);
        return -1;
    }
    int rc = 0;
    struct dirent *entry;
    while ((entry = readdir(dir))) {
        const char *name = entry->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            continue;
        if (unlinkat(dirfd(dir), name, 0) == 0 || errno == ENOENT)
            continue;
        if (errno != EISDIR && errno != EPERM) {
            rc = -1;
            continue;
        }
        int sub = depth < 256
                      ? openat(dirfd(dir), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                      : -1;
        if (sub < 0 || s_empty_dir(sub, depth + 1) != 0
            || unlinkat(dirfd(dir), name, AT_REMOVEDIR) != 0)
            rc = -1;
    }
    closedir(dir);
    return rc;
}

int kb_work_dir_remove(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    if (s_empty_dir(fd, 0) != 0)
        return -1;
    return rmdir(path) == 0 || errno == ENOENT ? 0 : -1;
}
