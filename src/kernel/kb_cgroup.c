/*  kb_cgroup.c - a cgroup v2 per kernel under the daemon's own delegated
    cgroup: detection and setup at start, one cgroup per kernel with its
    memory and pids limits, its figures (memory.events for the OOM
    killer's kills), killing what is in it and removing it. Every file is
    opened relative to a directory descriptor, without following links;
    nothing is written outside the daemon's cgroup. Not for: the parsers
    of what the kernel shows (kb_cgroup_parse.c), how a kernel is
    launched (kb_launch.c), what the service does with the figures.
*/
#include "kernel/kb_cgroup.h"

#include "util/kb_buf.h"
#include "util/kb_vec.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

#define KB_CGROUP_FILE_MAX (1 << 20) /* cgroup.procs of a fork bomb, mountinfo of a busy host */
#define KB_CGROUP_DEPTH_MAX 16       /* cgroups a kernel may nest below its own */
#define KB_CGROUP_KILL_WAIT_MS 2000
#define KB_CGROUP_RMDIR_WAIT_MS 1000
#define KB_CGROUP_POLL_MS 5

struct kb_cgroups {
    int fd;     /* <own> */
    char *path; /* <own> as a cgroup path */
    char *dir;  /* <own> as a directory */
    bool has_kill;
};

struct kb_cgroup {
    kb_cgroups_t *owner; /* borrowed */
    int fd;
    char name[KB_CGROUP_NAME_MAX + 1];
    char *path; /* as /proc/<pid>/cgroup shows it */
    uint64_t peak_seen;
    char err[256];
};

/* --------------------------------------------------------------------------
   Files, relative to a cgroup's descriptor, never through a link
   -------------------------------------------------------------------------- */

/*  The whole of file (at most KB_CGROUP_FILE_MAX), NUL-terminated; NULL
    with errno. Caller frees. */
static char *s_slurp(int dirfd, const char *file)
{
    int fd = openat(dirfd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t len = 0, alloc = 4096;
    char *buf = malloc(alloc);
    while (buf) {
        if (len + 1 == alloc) {
            char *more = alloc < KB_CGROUP_FILE_MAX ? realloc(buf, alloc * 2) : NULL;
            if (!more) {
                free(buf);
                buf = NULL;
                errno = alloc < KB_CGROUP_FILE_MAX ? ENOMEM : EFBIG;
                break;
            }
            buf = more;
            alloc *= 2;
        }
        ssize_t n = read(fd, buf + len, alloc - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            free(buf);
            buf = NULL;
            errno = e;
            break;
        }
        if (n == 0) {
            buf[len] = 0;
            break;
        }
        len += (size_t)n;
    }
    int e = errno;
    close(fd);
    errno = e;
    return buf;
}

/*  One write of text to an existing file (a cgroup file takes one value
    per write). 0, or -1 with errno. */
static int s_write(int dirfd, const char *file, const char *text)
{
    int fd = openat(dirfd, file, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len = strlen(text);
    ssize_t n;
    do
        n = write(fd, text, len);
    while (n < 0 && errno == EINTR);
    int e = errno;
    close(fd);
    if (n == (ssize_t)len)
        return 0;
    errno = n < 0 ? e : EIO;
    return -1;
}

static int s_open_child(int dirfd, const char *name)
{
    return openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/*  Open the directory dir component by component from "/", refusing a
    link anywhere on the way. -1 with errno (ELOOP or ENOTDIR for a link). */
static int s_open_dir(const char *dir)
{
    if (dir[0] != '/') {
        errno = EINVAL;
        return -1;
    }
    int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char part[NAME_MAX + 1];
    for (const char *c = dir + 1; fd >= 0 && *c;) {
        size_t n = strcspn(c, "/");
        if (n > NAME_MAX) {
            close(fd);
            errno = ENAMETOOLONG;
            return -1;
        }
        memcpy(part, c, n);
        part[n] = 0;
        if (n == 0 || strcmp(part, ".") == 0 || strcmp(part, "..") == 0) {
            close(fd);
            errno = EINVAL;
            return -1;
        }
        int next = s_open_child(fd, part);
        int e = errno;
        close(fd);
        errno = e;
        fd = next;
        c += n;
        if (*c == '/')
            c++;
    }
    return fd;
}

/*  Whether the cgroup.procs text lists a pid other than self; the first
    few go to list. */
static bool s_other_pids(const char *procs, pid_t self, char *list, size_t listlen)
{
    bool any = false;
    size_t used = 0;
    list[0] = 0;
    for (const char *c = procs; *c;) {
        char *end;
        long pid = strtol(c, &end, 10);
        if (end == c) {
            c++;
            continue;
        }
        c = end;
        if (pid == self)
            continue;
        if (!any || used + 16 < listlen)
            used += (size_t)snprintf(list + used, listlen - used, "%s%ld", any ? ", " : "", pid);
        else if (!strstr(list, "..."))
            used += (size_t)snprintf(list + used, listlen - used, ", ...");
        any = true;
    }
    return any;
}

/* --------------------------------------------------------------------------
   The daemon's cgroup
   -------------------------------------------------------------------------- */

/*  The parent of cgroup path ("/a/b" -> "/a"; "/a" -> "/"). */
static void s_parent(const char *path, char *out, size_t outlen)
{
    const char *slash = strrchr(path, '/');
    size_t n = slash && slash != path ? (size_t)(slash - path) : 1;
    snprintf(out, outlen, "%.*s", (int)n, path);
}

static bool s_owned_writable(int fd, const char *path, kb_error_t *err)
{
    static const char *const files[] = { ".", "cgroup.procs", "cgroup.subtree_control" };
    uid_t uid = geteuid();
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        struct stat st;
        if (fstatat(fd, files[i], &st, AT_SYMLINK_NOFOLLOW) != 0) {
            kb_error_set(err, KB_ERR_INTERNAL, "cannot read %s%s%s: %s", path, i ? "/" : "",
                         i ? files[i] : "", strerror(errno));
            return false;
        }
        if (st.st_uid != uid) {
            kb_error_set(err, KB_ERR_INTERNAL, "cgroup %s%s%s is owned by uid %u, not by uid %u",
                         path, i ? "/" : "", i ? files[i] : "", (unsigned)st.st_uid, (unsigned)uid);
            return false;
        }
        if (faccessat(fd, files[i], W_OK, AT_EACCESS) != 0) {
            kb_error_set(err, KB_ERR_INTERNAL, "cgroup %s%s%s is not writable by uid %u", path,
                         i ? "/" : "", i ? files[i] : "", (unsigned)uid);
            return false;
        }
    }
    return true;
}

/*  Whether the daemon, in a leaf named "daemon", should take the leaf's
    parent as <own>: the parent is ours, writable, and holds no process. */
static int s_adopt_parent(const char *path, const char *mountinfo, unsigned flags, char *ppath,
                          size_t ppathlen, char *pdir, size_t pdirlen)
{
    const char *base = strrchr(path, '/');
    if (!base || strcmp(base + 1, "daemon") != 0 || base == path)
        return -1;
    s_parent(path, ppath, ppathlen);
    char ignored[256];
    if (kb_cgroup_parse_mountinfo(mountinfo, ppath, pdir, pdirlen, NULL) != 0)
        return -1;
    int fd = s_open_dir(pdir);
    if (fd < 0)
        return -1;
    struct statfs sfs;
    char *procs = NULL;
    if (!(flags & KB_CGROUPS_ANY_FS)
        && (fstatfs(fd, &sfs) != 0 || sfs.f_type != CGROUP2_SUPER_MAGIC))
        goto fail;
    if (!s_owned_writable(fd, ppath, NULL))
        goto fail;
    procs = s_slurp(fd, "cgroup.procs");
    if (!procs || s_other_pids(procs, 0, ignored, sizeof ignored))
        goto fail;
    free(procs);
    return fd;
fail:
    free(procs);
    close(fd);
    return -1;
}

/*  Detection as it goes: <own>'s path and directory, its fd and the
    daemon leaf's, and what to undo when a later step fails. */
typedef struct {
    char path[PATH_MAX], dir[PATH_MAX];
    int fd, daemon_fd;
    bool in_leaf, moved, made_leaf;
    char pid_text[32];
} s_detect_t;

/*  Find <own> (the daemon's cgroup, or the parent of its "daemon" leaf)
    and open it: a delegated cgroup2 directory, with memory and pids, owned
    and writable by the daemon. 0, or -1 with err. */
static int s_open_own(s_detect_t *d, const char *proc_cgroup, const char *mountinfo, unsigned flags,
                      kb_error_t *err)
{
    if (kb_cgroup_parse_proc(proc_cgroup, d->path, sizeof d->path, err) != 0
        || kb_cgroup_parse_mountinfo(mountinfo, d->path, d->dir, sizeof d->dir, err) != 0)
        return -1;
    char ppath[PATH_MAX], pdir[PATH_MAX];
    d->fd = s_adopt_parent(d->path, mountinfo, flags, ppath, sizeof ppath, pdir, sizeof pdir);
    if (d->fd >= 0) {
        d->in_leaf = true;
        memcpy(d->path, ppath, sizeof d->path);
        memcpy(d->dir, pdir, sizeof d->dir);
    } else if ((d->fd = s_open_dir(d->dir)) < 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot open cgroup %s at %s: %s", d->path, d->dir,
                     errno == ELOOP || errno == ENOTDIR ? "a symbolic link on the way"
                                                        : strerror(errno));
        return -1;
    }
    struct statfs sfs;
    if (!(flags & KB_CGROUPS_ANY_FS)
        && (fstatfs(d->fd, &sfs) != 0 || sfs.f_type != CGROUP2_SUPER_MAGIC)) {
        kb_error_set(err, KB_ERR_INTERNAL, "%s is not on a cgroup2 file system", d->dir);
        return -1;
    }
    char *text = s_slurp(d->fd, "cgroup.controllers");
    if (!text) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot read %s/cgroup.controllers: %s", d->dir,
                     strerror(errno));
        return -1;
    }
    int rc = kb_cgroup_check_controllers(text, d->path, mountinfo, err);
    free(text);
    if (rc != 0)
        return -1;
    /* The true root has no cgroup.type (a cgroup namespace's root has). */
    if (faccessat(d->fd, "cgroup.type", F_OK, 0) != 0) {
        kb_error_set(err, KB_ERR_INTERNAL,
                     "cgroup %s is the root of the cgroup2 hierarchy at %s, not one "
                     "delegated to the daemon",
                     d->path, d->dir);
        return -1;
    }
    return s_owned_writable(d->fd, d->path, err) ? 0 : -1;
}

/*  The daemon into <own>/daemon (already there when in_leaf) and that
    leaf opened. 0, or -1 with err. */
static int s_enter_leaf(s_detect_t *d, kb_error_t *err)
{
    if (!d->in_leaf) {
        if (mkdirat(d->fd, "daemon", 0755) == 0)
            d->made_leaf = true;
        else if (errno != EEXIST) {
            kb_error_set(err, KB_ERR_INTERNAL, "cannot make %s/daemon: %s", d->path,
                         strerror(errno));
            return -1;
        }
        d->daemon_fd = s_open_child(d->fd, "daemon");
        if (d->daemon_fd < 0 || s_write(d->daemon_fd, "cgroup.procs", d->pid_text) != 0) {
            kb_error_set(err, KB_ERR_INTERNAL, "cannot move the daemon into %s/daemon: %s", d->path,
                         strerror(errno));
            return -1;
        }
        d->moved = true;
    } else {
        d->daemon_fd = s_open_child(d->fd, "daemon");
    }
    if (d->daemon_fd < 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot open %s/daemon: %s", d->path, strerror(errno));
        return -1;
    }
    return 0;
}

/*  memory and pids for the children of <own>, unless already there; only
    possible once <own> holds no process but the daemon. 0, or -1 with err. */
static int s_enable_controllers(s_detect_t *d, kb_error_t *err)
{
    char others[128];
    char *text = s_slurp(d->fd, "cgroup.subtree_control");
    if (!text) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot read %s/cgroup.subtree_control: %s", d->path,
                     strerror(errno));
        return -1;
    }
    int rc = kb_cgroup_check_controllers(text, d->path, NULL, NULL);
    free(text);
    if (rc == 0)
        return 0;
    if (!(text = s_slurp(d->fd, "cgroup.procs"))) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot read %s/cgroup.procs: %s", d->path,
                     strerror(errno));
        return -1;
    }
    bool crowded = s_other_pids(text, getpid(), others, sizeof others);
    free(text);
    if (crowded) {
        kb_error_set(err, KB_ERR_INTERNAL,
                     "cgroup %s has processes other than the daemon (%s), so its "
                     "children cannot have controllers",
                     d->path, others);
        return -1;
    }
    if (s_write(d->fd, "cgroup.subtree_control", "+memory +pids") != 0) {
        kb_error_set(err, KB_ERR_INTERNAL,
                     "cannot enable memory and pids in %s/cgroup.subtree_control: %s", d->path,
                     strerror(errno));
        return -1;
    }
    return 0;
}

kb_cgroups_t *kb_cgroups_detect_from(const char *proc_cgroup, const char *mountinfo, unsigned flags,
                                     kb_error_t *err)
{
    s_detect_t d = { .fd = -1, .daemon_fd = -1 };
    kb_cgroups_t *self = NULL;
    snprintf(d.pid_text, sizeof d.pid_text, "%d", (int)getpid());
    if (s_open_own(&d, proc_cgroup, mountinfo, flags, err) != 0)
        goto fail;
    /* Set up: the daemon into <own>/daemon, then the controllers for the
       children of <own>. */
    if (s_enter_leaf(&d, err) != 0 || s_enable_controllers(&d, err) != 0)
        goto fail;
    self = calloc(1, sizeof *self);
    if (!self || !(self->path = strdup(d.path)) || !(self->dir = strdup(d.dir))) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        goto fail;
    }
    self->fd = d.fd;
    self->has_kill = faccessat(d.daemon_fd, "cgroup.kill", F_OK, 0) == 0;
    close(d.daemon_fd);
    return self;

fail:
    if (d.moved)
        s_write(d.fd, "cgroup.procs", d.pid_text); /* back where it was */
    if (d.made_leaf)
        unlinkat(d.fd, "daemon", AT_REMOVEDIR);
    if (d.daemon_fd >= 0)
        close(d.daemon_fd);
    if (d.fd >= 0)
        close(d.fd);
    if (self) {
        free(self->path);
        free(self->dir);
        free(self);
    }
    return NULL;
}

kb_cgroups_t *kb_cgroups_detect(kb_error_t *err)
{
    char *proc = s_slurp(AT_FDCWD, "/proc/self/cgroup");
    char *mountinfo = s_slurp(AT_FDCWD, "/proc/self/mountinfo");
    kb_cgroups_t *self = NULL;
    if (!proc || !mountinfo)
        kb_error_set(err, KB_ERR_INTERNAL, "cannot read /proc/self/%s: %s",
                     proc ? "mountinfo" : "cgroup", strerror(errno));
    else
        self = kb_cgroups_detect_from(proc, mountinfo, 0, err);
    free(proc);
    free(mountinfo);
    return self;
}

const char *kb_cgroups_path(const kb_cgroups_t *self)
{
    return self->path;
}

const char *kb_cgroups_dir(const kb_cgroups_t *self)
{
    return self->dir;
}

char **kb_cgroups_list(kb_cgroups_t *self)
{
    int fd = openat(self->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    kb_strv_t names = KB_STRV_INIT;
    bool ok = true;
    struct dirent *e;
    while (ok && (e = readdir(d)))
        if (e->d_type == DT_DIR && kb_cgroup_name_ok(e->d_name))
            ok = kb_strv_push(&names, strdup(e->d_name)) == KB_BUF_OK;
    closedir(d);
    char **out = ok ? kb_strv_take(&names) : NULL;
    kb_strv_clear(&names);
    if (!out)
        errno = ENOMEM;
    return out;
}

void kb_cgroups_destroy(kb_cgroups_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_cgroups_t *self = *self_p;
    close(self->fd);
    free(self->path);
    free(self->dir);
    free(self);
    *self_p = NULL;
}

/* --------------------------------------------------------------------------
   A kernel's cgroup
   -------------------------------------------------------------------------- */

static kb_cgroup_t *s_cgroup_make(kb_cgroups_t *owner, const char *name, bool create,
                                  kb_error_t *err)
{
    assert(owner && name);
    if (!kb_cgroup_name_ok(name)) {
        kb_error_set(err, KB_ERR_INTERNAL, "'%.80s' cannot name a kernel's cgroup", name);
        errno = EINVAL;
        return NULL;
    }
    kb_cgroup_t *self = calloc(1, sizeof *self);
    size_t plen = strlen(owner->path) + 1 + strlen(name) + 1;
    if (!self || !(self->path = malloc(plen))) {
        free(self);
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        errno = ENOMEM;
        return NULL;
    }
    self->owner = owner;
    self->fd = -1;
    snprintf(self->name, sizeof self->name, "%s", name);
    snprintf(self->path, plen, "%s%s%s", owner->path, strcmp(owner->path, "/") ? "/" : "", name);
    if (create && mkdirat(owner->fd, name, 0755) != 0) {
        int e = errno;
        kb_error_set(err, KB_ERR_INTERNAL, "cannot make cgroup %s: %s", self->path,
                     e == EEXIST ? "it exists already" : strerror(e));
        kb_cgroup_destroy(&self);
        errno = e;
        return NULL;
    }
    if ((self->fd = s_open_child(owner->fd, name)) < 0) {
        int e = errno;
        kb_error_set(err, KB_ERR_INTERNAL, "cannot open cgroup %s: %s", self->path,
                     e == ELOOP || e == ENOTDIR ? "not a directory" : strerror(e));
        if (create)
            unlinkat(owner->fd, name, AT_REMOVEDIR);
        kb_cgroup_destroy(&self);
        errno = e;
        return NULL;
    }
    return self;
}

kb_cgroup_t *kb_cgroup_new(kb_cgroups_t *owner, const char *name, int64_t memory_max,
                           int64_t pids_max, kb_error_t *err)
{
    kb_cgroup_t *self = s_cgroup_make(owner, name, true, err);
    if (self && kb_cgroup_set_limits(self, memory_max, pids_max) != 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "%s", self->err);
        kb_cgroup_remove(self);
        kb_cgroup_destroy(&self);
    }
    return self;
}

kb_cgroup_t *kb_cgroup_open(kb_cgroups_t *owner, const char *name, kb_error_t *err)
{
    return s_cgroup_make(owner, name, false, err);
}

/*  Write the limit value ("max" for 0) to file. */
static int s_set(kb_cgroup_t *self, const char *file, int64_t value)
{
    char text[32];
    if (value > 0)
        snprintf(text, sizeof text, "%" PRId64, value);
    else
        snprintf(text, sizeof text, "max");
    if (s_write(self->fd, file, text) == 0)
        return 0;
    kb_say(self->err, sizeof self->err, "cannot write %s to %s/%s: %s", text, self->path, file,
           strerror(errno));
    return -1;
}

int kb_cgroup_set_limits(kb_cgroup_t *self, int64_t memory_max, int64_t pids_max)
{
    assert(memory_max >= 0 && pids_max >= 0);
    /* 90%: the kernel is throttled and reclaimed from before it meets max. */
    int64_t high = memory_max > 0 ? memory_max / 10 * 9 : 0;
    if (memory_max > 0 && high == 0)
        high = memory_max;
    if (s_set(self, "memory.high", high) != 0 || s_set(self, "memory.max", memory_max) != 0
        || s_set(self, "pids.max", pids_max) != 0)
        return -1;
    const char *swap = memory_max > 0 ? "0" : "max";
    if (s_write(self->fd, "memory.swap.max", swap) != 0 && errno != ENOENT) {
        kb_say(self->err, sizeof self->err, "cannot write %s to %s/memory.swap.max: %s", swap,
               self->path, strerror(errno));
        return -1;
    }
    return 0;
}

int kb_cgroup_add(kb_cgroup_t *self, pid_t pid)
{
    char text[32];
    snprintf(text, sizeof text, "%d", (int)pid);
    if (s_write(self->fd, "cgroup.procs", text) == 0)
        return 0;
    kb_say(self->err, sizeof self->err, "cannot move pid %d into %s: %s", (int)pid, self->path,
           strerror(errno));
    return -1;
}

int kb_cgroup_fd(const kb_cgroup_t *self)
{
    return self->fd;
}

const char *kb_cgroup_name(const kb_cgroup_t *self)
{
    return self->name;
}

const char *kb_cgroup_error(const kb_cgroup_t *self)
{
    return self->err;
}

/*  A file holding one number ("max" reads as UINT64_MAX). 0, or -1 with errno. */
static int s_read_number(int dirfd, const char *file, uint64_t *out)
{
    char *text = s_slurp(dirfd, file);
    if (!text)
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    int rc = 0;
    if (strncmp(text, "max", 3) == 0)
        v = UINT64_MAX;
    else if (end == text || errno)
        rc = -1, errno = EINVAL;
    free(text);
    if (rc == 0)
        *out = v;
    return rc;
}

static void s_read_keyed(int dirfd, const char *file, const char *const *keys, uint64_t **out,
                         size_t n)
{
    char *text = s_slurp(dirfd, file);
    for (size_t i = 0; text && i < n; i++)
        if (kb_cgroup_parse_keyed(text, keys[i], out[i]) != 1)
            *out[i] = 0;
    free(text);
}

int kb_cgroup_stats(kb_cgroup_t *self, kb_cgroup_stats_t *out)
{
    memset(out, 0, sizeof *out);
    if (s_read_number(self->fd, "memory.current", &out->memory_current) != 0) {
        kb_say(self->err, sizeof self->err, "cannot read %s/memory.current: %s", self->path,
               strerror(errno));
        return -1;
    }
    if (out->memory_current > self->peak_seen)
        self->peak_seen = out->memory_current;
    if (s_read_number(self->fd, "memory.peak", &out->memory_peak) != 0)
        out->memory_peak = self->peak_seen;
    if (s_read_number(self->fd, "pids.current", &out->pids_current) != 0)
        out->pids_current = 0;
    static const char *const mem_keys[] = { "oom_kill", "oom", "max", "high" };
    uint64_t *mem_out[]
        = { &out->oom_kill, &out->oom, &out->memory_max_hits, &out->memory_high_hits };
    s_read_keyed(self->fd, "memory.events", mem_keys, mem_out, 4);
    static const char *const pids_keys[] = { "max" };
    uint64_t *pids_out[] = { &out->pids_max_hits };
    s_read_keyed(self->fd, "pids.events", pids_keys, pids_out, 1);
    return 0;
}

static void s_sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/*  Whether the cgroup (or one below it) still has a process. */
static bool s_populated(kb_cgroup_t *self)
{
    char *text = s_slurp(self->fd, "cgroup.events");
    uint64_t populated = 1;
    if (!text)
        populated = errno != ENOENT && errno != ENODEV; /* gone: empty */
    else if (kb_cgroup_parse_keyed(text, "populated", &populated) != 1)
        populated = 1;
    free(text);
    return populated != 0;
}

/*  Whether /proc/<pid>/cgroup puts pid at or below cgroup path. */
static bool s_pid_in(pid_t pid, const char *path)
{
    char file[64], in[PATH_MAX];
    snprintf(file, sizeof file, "/proc/%d/cgroup", (int)pid);
    char *text = s_slurp(AT_FDCWD, file);
    size_t n = strlen(path);
    bool yes = text && kb_cgroup_parse_proc(text, in, sizeof in, NULL) == 0
               && strncmp(in, path, n) == 0 && (in[n] == 0 || in[n] == '/');
    free(text);
    return yes;
}

/*  SIGKILL to every pid of cgroup.procs at dirfd and below (without
    cgroup.kill). A pid is taken by a pidfd and checked to be in the
    cgroup before the signal, so that a pid reused meanwhile is spared. */
static void s_kill_round(int dirfd, const char *path, int depth)
{
    char *procs = s_slurp(dirfd, "cgroup.procs");
    for (const char *c = procs ? procs : ""; *c;) {
        char *end;
        long pid = strtol(c, &end, 10);
        if (end == c)
            break;
        c = *end ? end + 1 : end;
        if (pid <= 0)
            continue;
        int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
        if (pidfd >= 0) {
            if (s_pid_in((pid_t)pid, path))
                syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
            close(pidfd);
        } else if (errno == ENOSYS && s_pid_in((pid_t)pid, path)) {
            kill((pid_t)pid, SIGKILL);
        }
    }
    free(procs);
    if (depth >= KB_CGROUP_DEPTH_MAX)
        return;
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_type != DT_DIR || strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        int child = s_open_child(dirfd, e->d_name);
        if (child < 0)
            continue;
        s_kill_round(child, path, depth + 1);
        close(child);
    }
    closedir(d);
}

int kb_cgroup_kill(kb_cgroup_t *self)
{
    bool by_file = self->owner->has_kill && s_write(self->fd, "cgroup.kill", "1") == 0;
    for (int waited = 0; waited <= KB_CGROUP_KILL_WAIT_MS; waited += KB_CGROUP_POLL_MS) {
        if (!by_file)
            s_kill_round(self->fd, self->path, 0);
        if (!s_populated(self))
            return 0;
        s_sleep_ms(KB_CGROUP_POLL_MS);
    }
    kb_say(self->err, sizeof self->err, "cgroup %s still has processes after %d ms of SIGKILL",
           self->path, KB_CGROUP_KILL_WAIT_MS);
    return -1;
}

/*  rmdir name under dirfd, the cgroups below it first. 0, or -1 with errno. */
static int s_rmdir_tree(int dirfd, const char *name, int depth)
{
    int fd = s_open_child(dirfd, name);
    if (fd < 0)
        return -1;
    int dup_fd
        = depth < KB_CGROUP_DEPTH_MAX ? openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d && dup_fd >= 0)
        close(dup_fd);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_type == DT_DIR && strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            s_rmdir_tree(fd, e->d_name, depth + 1);
    if (d)
        closedir(d);
    close(fd);
    return unlinkat(dirfd, name, AT_REMOVEDIR);
}

int kb_cgroup_remove(kb_cgroup_t *self)
{
    for (int waited = 0;; waited += KB_CGROUP_POLL_MS) {
        if (s_rmdir_tree(self->owner->fd, self->name, 0) == 0 || errno == ENOENT)
            return 0;
        if ((errno != EBUSY && errno != ENOTEMPTY) || waited >= KB_CGROUP_RMDIR_WAIT_MS)
            break;
        s_sleep_ms(KB_CGROUP_POLL_MS);
    }
    kb_say(self->err, sizeof self->err, "cannot remove cgroup %s: %s", self->path,
           errno == EBUSY ? "it still has processes" : strerror(errno));
    return -1;
}

void kb_cgroup_destroy(kb_cgroup_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_cgroup_t *self = *self_p;
    if (self->fd >= 0)
        close(self->fd);
    free(self->path);
    free(self);
    *self_p = NULL;
}
