/*  kb_statedir.c - the state dir: its default place, making it private,
    and its lock. See kb_statedir.h.
*/
#include "state/kb_statedir.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define KB_STATEDIR_ROOT "/var/lib/kernelbridge"

static char *s_join(const char *a, const char *b)
{
    size_t len = strlen(a) + strlen(b) + 1;
    char *path = malloc(len);
    if (path)
        snprintf(path, len, "%s%s", a, b);
    return path;
}

char *kb_statedir_default_for(uid_t euid, const char *xdg_state_home, const char *home)
{
    if (euid == 0)
        return strdup(KB_STATEDIR_ROOT);
    if (xdg_state_home && xdg_state_home[0] == '/')
        return s_join(xdg_state_home, "/kernelbridge");
    if (home && home[0] == '/')
        return s_join(home, "/.local/state/kernelbridge");
    struct passwd entry, *found = NULL;
    char buf[4096];
    if (getpwuid_r(euid, &entry, buf, sizeof buf, &found) != 0 || !found || !found->pw_dir
        || found->pw_dir[0] != '/')
        return NULL;
    return s_join(found->pw_dir, "/.local/state/kernelbridge");
}

char *kb_statedir_default(void)
{
    return kb_statedir_default_for(geteuid(), getenv("XDG_STATE_HOME"), getenv("HOME"));
}

/*  mkdir -p: the parts that are missing, each 0700. */
static int s_make_parents(char *path, kb_error_t *err)
{
    for (char *slash = strchr(path + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        int rc = mkdir(path, 0700);
        int saved = errno;
        *slash = '/';
        if (rc != 0 && saved != EEXIST) {
            *slash = '\0';
            kb_error_set(err, KB_ERR_INTERNAL, "cannot create %s: %s", path, strerror(saved));
            *slash = '/';
            return -1;
        }
    }
    return 0;
}

int kb_statedir_prepare(const char *path, kb_error_t *err)
{
    if (!path || !*path) {
        kb_error_set(err, KB_ERR_INTERNAL, "the state dir is an empty path");
        return -1;
    }
    char *copy = strdup(path);
    if (!copy) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return -1;
    }
    size_t len = strlen(copy);
    while (len > 1 && copy[len - 1] == '/')
        copy[--len] = '\0';
    int rc = s_make_parents(copy, err);
    if (rc == 0 && mkdir(copy, 0700) != 0 && errno != EEXIST) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot create state dir %s: %s", copy, strerror(errno));
        rc = -1;
    }
    struct stat st;
    if (rc == 0 && lstat(copy, &st) != 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "state dir %s: %s", copy, strerror(errno));
        rc = -1;
    } else if (rc == 0 && !S_ISDIR(st.st_mode)) {
        kb_error_set(err, KB_ERR_INTERNAL, "state dir %s is not a directory%s", copy,
                     S_ISLNK(st.st_mode) ? " (a symbolic link)" : "");
        rc = -1;
    } else if (rc == 0 && st.st_uid != geteuid()) {
        kb_error_set(err, KB_ERR_INTERNAL,
                     "state dir %s is owned by uid %u, not by this user (uid %u)", copy,
                     (unsigned)st.st_uid, (unsigned)geteuid());
        rc = -1;
    } else if (rc == 0 && (st.st_mode & 07777) != 0700 && chmod(copy, 0700) != 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot make state dir %s private (0700): %s", copy,
                     strerror(errno));
        rc = -1;
    }
    free(copy);
    return rc;
}

int kb_statedir_lock(const char *path, int *fd_out, kb_error_t *err)
{
    *fd_out = -1;
    char *lock = s_join(path, "/lock");
    if (!lock) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return -1;
    }
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot open %s: %s", lock, strerror(errno));
        free(lock);
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int saved = errno;
        char holder[32] = "";
        ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = '\0';
        holder[strcspn(holder, "\r\n")] = '\0';
        if (saved == EWOULDBLOCK)
            kb_error_set(
                err, KB_ERR_INTERNAL,
                "state dir %s is in use by another kernelbridge (pid %s): stop it, or give "
                "this one another --state-dir",
                path, holder[0] ? holder : "unknown");
        else
            kb_error_set(err, KB_ERR_INTERNAL, "cannot lock %s: %s", lock, strerror(saved));
        close(fd);
        free(lock);
        return -1;
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot write %s: %s", lock, strerror(errno));
        close(fd);
        free(lock);
        return -1;
    }
    free(lock);
    *fd_out = fd;
    return 0;
}

void kb_statedir_unlock(int *fd)
{
    if (fd && *fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}
