/*  kb_proctree.c - process trees read from /proc (see kb_proctree.h).
    Engine thread only.
*/
#include "kernel/kb_proctree.h"

#include <czmq.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "util/kb_vec.h"

#define KB_KILL_ROUNDS 8 /* of kb_proctree_kill_descendants */

/*  What a sample needs of /proc/<pid>/stat. */
typedef struct {
    char state;
    pid_t ppid, session;
    unsigned long long cpu_ticks; /* utime + stime + cutime + cstime */
    unsigned long long start;     /* clock ticks since boot */
    unsigned long long rss_pages;
} kb_stat_t;

typedef struct {
    pid_t pid;
    unsigned long long start;
    int fd;  /* /proc/<pid>/stat, open */
    int mfd; /* /proc/<pid>/statm, open: what a memory-only sample reads */
} kb_member_t;

/*  A candidate of this update: its member record, then its stat. */
typedef struct {
    kb_member_t m;
    kb_stat_t st;
} kb_fresh_t;

struct kb_proctree {
    kb_procscan_t *scan;
    pid_t root;
    int status_fd, clear_fd; /* the root's status and clear_refs, opened on first use */
    kb_vec_t members;        /* kb_member_t, in the order found: the root first */
};

struct kb_procscan {
    kb_vec_t trees;          /* kb_proctree_t * */
    kb_vec_t seen;           /* pid_t, ascending: the pids of the last update */
    kb_vec_t next;           /* pid_t: this update's, swapped with seen */
    kb_vec_t fresh;          /* kb_fresh_t: candidates of this update, not yet placed */
    bool full;               /* the next update reads every process, not only new ones */
    struct timespec updated; /* of the last update (CLOCK_MONOTONIC) */
    int loadavg_fd;          /* /proc/loadavg, whose last field is the last pid given out */
    long last_pid;           /* as of the last listing of /proc; -1: unknown */
};

static long s_page_size, s_ticks;

/* ---- /proc/<pid>/... -------------------------------------------------------------- */

ssize_t kb_proc_read(pid_t pid, const char *name, char *buf, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    return n;
}

/*  The kB figure of a "Name:" line of a /proc file read into text, in
    bytes; 0 when absent. */
static uint64_t s_kib_line(const char *text, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = text; p; p = strchr(p, '\n')) {
        p += *p == '\n';
        if (strncmp(p, name, len) == 0)
            return (uint64_t)strtoull(p + len, NULL, 10) << 10;
    }
    return 0;
}

/*  Parse a stat line. 0, or -1 when it is not one. */
static int s_parse_stat(char *buf, kb_stat_t *out)
{
    /*  "pid (comm) state ppid pgrp session ...": comm may hold spaces and
        parens, so the fields start after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || !p[2])
        return -1;
    p += 2;
    out->state = *p;
    unsigned long long f[24] = { 0 }; /* f[n]: field n, from 4 on */
    char *end;
    for (int field = 4; field <= 24; field++) {
        p = strchr(p, ' ');
        if (!p)
            return -1;
        p++;
        f[field - 1] = strtoull(p, &end, 10);
        if (end == p)
            f[field - 1] = (unsigned long long)strtoll(p, &end, 10);
    }
    out->ppid = (pid_t)f[3];
    out->session = (pid_t)f[5];
    out->cpu_ticks = f[13] + f[14] + f[15] + f[16];
    out->start = f[21];
    out->rss_pages = f[23];
    return 0;
}

static int s_read_stat_fd(int fd, kb_stat_t *out)
{
    char buf[1024];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    return s_parse_stat(buf, out);
}

/*  A member: /proc/<pid>/stat and /proc/<pid>/statm opened, then stat
    read. The read comes last, so that its success shows the process
    alive after both opens: both are then this one process's (a pid is not
    given to another while its process lives), whatever reuses the pid
    later. 0, or -1 with no descriptor left open. */
static int s_open_member(pid_t pid, kb_member_t *m, kb_stat_t *out)
{
    char path[48];
    m->pid = pid;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    m->fd = open(path, O_RDONLY | O_CLOEXEC);
    snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
    m->mfd = m->fd >= 0 ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (m->mfd < 0 || s_read_stat_fd(m->fd, out) != 0) {
        if (m->fd >= 0)
            close(m->fd);
        if (m->mfd >= 0)
            close(m->mfd);
        m->fd = m->mfd = -1;
        return -1;
    }
    m->start = out->start;
    return 0;
}

static void s_close_member(kb_member_t *m)
{
    if (m->fd >= 0)
        close(m->fd);
    if (m->mfd >= 0)
        close(m->mfd);
    m->fd = m->mfd = -1;
}

/*  A member's resident pages from statm ("size resident shared ..."). 0
    with *live false for a zombie (no memory map: all zeros); -1 when the
    process is gone. */
static int s_read_statm(const kb_member_t *m, unsigned long long *pages, bool *live)
{
    char buf[160];
    ssize_t n = pread(m->mfd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    char *end;
    unsigned long long size = strtoull(buf, &end, 10);
    if (end == buf)
        return -1;
    *pages = strtoull(end, NULL, 10);
    *live = size > 0;
    return 0;
}

/* ---- trees ------------------------------------------------------------------------- */

static kb_member_t *s_member(const kb_proctree_t *self, size_t i)
{
    return kb_vec_at(&self->members, i);
}

static bool s_is_member(const kb_proctree_t *self, pid_t pid)
{
    for (size_t i = 0; i < self->members.len; i++)
        if (s_member(self, i)->pid == pid)
            return true;
    return false;
}

static void s_drop(kb_proctree_t *self, size_t i)
{
    kb_member_t *m = s_member(self, i);
    s_close_member(m);
    memmove(m, m + 1, (self->members.len - i - 1) * sizeof *m);
    self->members.len--;
}

void kb_procscan_disown(kb_procscan_t *self, pid_t pid)
{
    for (size_t t = 0; t < self->trees.len; t++) {
        kb_proctree_t *tree = *(kb_proctree_t **)kb_vec_at(&self->trees, t);
        if (tree->root == pid)
            continue;
        for (size_t i = 0; i < tree->members.len; i++)
            if (s_member(tree, i)->pid == pid) {
                s_drop(tree, i);
                break;
            }
    }
}

kb_proctree_t *kb_proctree_new(kb_procscan_t *scan, pid_t root)
{
    kb_procscan_disown(scan, root);
    kb_proctree_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->scan = scan;
    self->root = root;
    self->status_fd = self->clear_fd = -1;
    kb_vec_init(&self->members, sizeof(kb_member_t), 0);
    kb_stat_t st;
    kb_member_t m;
    bool opened = s_open_member(root, &m, &st) == 0;
    if ((opened && kb_vec_push(&self->members, &m) != KB_BUF_OK)
        || kb_vec_push(&scan->trees, &self) != KB_BUF_OK) {
        s_close_member(&m);
        kb_vec_free(&self->members);
        free(self);
        return NULL;
    }
    scan->full = true;
    return self;
}

void kb_proctree_destroy(kb_proctree_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_proctree_t *self = *self_p;
    *self_p = NULL;
    kb_vec_t *trees = &self->scan->trees;
    for (size_t i = 0; i < trees->len; i++) {
        kb_proctree_t **t = kb_vec_at(trees, i);
        if (*t == self) {
            memmove(t, t + 1, (trees->len - i - 1) * sizeof *t);
            trees->len--;
            break;
        }
    }
    while (self->members.len)
        s_drop(self, self->members.len - 1);
    if (self->status_fd >= 0)
        close(self->status_fd);
    if (self->clear_fd >= 0)
        close(self->clear_fd);
    kb_vec_free(&self->members);
    free(self);
}

pid_t kb_proctree_root(const kb_proctree_t *self)
{
    return self->root;
}

int kb_proctree_sample_memory(kb_proctree_t *self, kb_tree_sample_t *out)
{
    *out = (kb_tree_sample_t){ 0 };
    bool root_alive = false;
    unsigned long long pages = 0;
    for (size_t i = 0; i < self->members.len;) {
        kb_member_t *m = s_member(self, i);
        unsigned long long resident;
        bool live;
        if (s_read_statm(m, &resident, &live) != 0) {
            s_drop(self, i); /* gone: its descriptors fail once it is reaped */
            continue;
        }
        if (live) {
            pages += resident;
            out->pids++;
            if (m->pid == self->root) {
                root_alive = true;
                out->root_rss_bytes = (uint64_t)resident * (uint64_t)s_page_size;
            }
        }
        i++;
    }
    out->rss_bytes = (uint64_t)pages * (uint64_t)s_page_size;
    return root_alive ? 0 : -1;
}

int kb_proctree_sample(kb_proctree_t *self, kb_tree_sample_t *out)
{
    *out = (kb_tree_sample_t){ 0 };
    bool root_alive = false;
    unsigned long long ticks = 0, pages = 0;
    for (size_t i = 0; i < self->members.len;) {
        kb_member_t *m = s_member(self, i);
        kb_stat_t st;
        if (s_read_stat_fd(m->fd, &st) != 0 || st.start != m->start || st.state == 'X') {
            s_drop(self, i); /* gone (a reused pid is another process) */
            continue;
        }
        ticks += st.cpu_ticks;
        if (st.state != 'Z') {
            pages += st.rss_pages;
            out->pids++;
            if (m->pid == self->root) {
                root_alive = true;
                out->root_rss_bytes = (uint64_t)st.rss_pages * (uint64_t)s_page_size;
            }
        }
        i++;
    }
    out->rss_bytes = (uint64_t)pages * (uint64_t)s_page_size;
    out->cpu_time_s = (double)ticks / (double)s_ticks;
    return root_alive ? 0 : -1;
}

size_t kb_proctree_signal(kb_proctree_t *self, int sig, bool include_root)
{
    size_t n = 0;
    for (size_t i = self->members.len; i-- > 0;) {
        kb_member_t *m = s_member(self, i);
        if ((m->pid != self->root || include_root) && kill(m->pid, sig) == 0)
            n++;
    }
    return n;
}

size_t kb_proctree_kill_over(kb_proctree_t *self, size_t keep)
{
    kb_tree_sample_t sample;
    kb_proctree_sample(self, &sample); /* drops the dead */
    size_t killed = 0;
    /*  Members are in the order found, which is the order of creation but
        for the members of a full update; the newest have the latest start. */
    while (sample.pids > keep && killed < self->members.len) {
        kb_member_t *newest = NULL;
        for (size_t i = 0; i < self->members.len; i++) {
            kb_member_t *m = s_member(self, i);
            if (m->pid != self->root && m->fd >= 0 && (!newest || m->start >= newest->start))
                newest = m;
        }
        if (!newest)
            break;
        kill(newest->pid, SIGKILL);
        s_close_member(newest); /* not chosen again; dropped below */
        killed++;
        sample.pids--;
    }
    for (size_t i = 0; i < self->members.len;)
        if (s_member(self, i)->fd < 0)
            s_drop(self, i);
        else
            i++;
    return killed;
}

size_t kb_proctree_kill_descendants(kb_proctree_t *self)
{
    size_t killed = 0;
    for (int round = 0; round < KB_KILL_ROUNDS; round++) {
        /*  Stop them first, so that none forks again between the kills. */
        size_t n = kb_proctree_signal(self, SIGSTOP, false);
        kb_proctree_signal(self, SIGKILL, false);
        killed += n;
        kb_procscan_update(self->scan);
        kb_tree_sample_t sample;
        kb_proctree_sample(self, &sample);
        if (n == 0 || self->members.len <= 1)
            break;
    }
    return killed;
}

/*  The root's file name, kept open in *fd from its first use on: opened,
    then the root's stat read, whose success shows that the file is the
    root's own (the pid was not reused). The descriptor, or -1. */
static int s_root_file(kb_proctree_t *self, int *fd, const char *name, int flags)
{
    if (*fd >= 0)
        return *fd;
    const kb_member_t *root = self->members.len ? s_member(self, 0) : NULL;
    if (!root || root->pid != self->root || root->fd < 0)
        return -1;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)self->root, name);
    *fd = open(path, flags | O_CLOEXEC);
    kb_stat_t st;
    if (*fd >= 0 && (s_read_stat_fd(root->fd, &st) != 0 || st.start != root->start)) {
        close(*fd);
        *fd = -1;
    }
    return *fd;
}

uint64_t kb_proctree_root_peak(kb_proctree_t *self)
{
    int fd = s_root_file(self, &self->status_fd, "status", O_RDONLY);
    if (fd < 0)
        return 0;
    char buf[4096];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    return s_kib_line(buf, "VmHWM:");
}

int kb_proctree_root_peak_reset(kb_proctree_t *self)
{
    int fd = s_root_file(self, &self->clear_fd, "clear_refs", O_WRONLY);
    if (fd < 0)
        return -1;
    return pwrite(fd, "5", 1, 0) == 1 ? 0 : -1;
}

/* ---- the scan ------------------------------------------------------------------------ */

kb_procscan_t *kb_procscan_new(void)
{
    if (!s_page_size) {
        s_page_size = sysconf(_SC_PAGESIZE);
        s_ticks = sysconf(_SC_CLK_TCK);
        if (s_page_size <= 0)
            s_page_size = 4096;
        if (s_ticks <= 0)
            s_ticks = 100;
    }
    kb_procscan_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    kb_vec_init(&self->trees, sizeof(kb_proctree_t *), 0);
    kb_vec_init(&self->seen, sizeof(pid_t), 0);
    kb_vec_init(&self->next, sizeof(pid_t), 0);
    kb_vec_init(&self->fresh, sizeof(kb_fresh_t), 0);
    self->loadavg_fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    self->last_pid = -1;
    return self;
}

void kb_procscan_destroy(kb_procscan_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_procscan_t *self = *self_p;
    *self_p = NULL;
    kb_vec_free(&self->trees);
    kb_vec_free(&self->seen);
    kb_vec_free(&self->next);
    kb_vec_free(&self->fresh);
    if (self->loadavg_fd >= 0)
        close(self->loadavg_fd);
    free(self);
}

/*  The tree a process belongs to: its parent's or its session's. */
static kb_proctree_t *s_tree_of(const kb_procscan_t *self, const kb_stat_t *st)
{
    for (size_t i = 0; i < self->trees.len; i++) {
        kb_proctree_t *tree = *(kb_proctree_t **)kb_vec_at(&self->trees, i);
        if (st->session == tree->root || s_is_member(tree, st->ppid))
            return tree;
    }
    return NULL;
}

/*  Place the candidates whose parent is known, until none moves (a child
    listed before its parent, as after a pid wrap, waits a pass). */
static void s_place_fresh(kb_procscan_t *self)
{
    bool moved = true;
    while (moved && self->fresh.len) {
        moved = false;
        for (size_t i = 0; i < self->fresh.len;) {
            kb_fresh_t *f = kb_vec_at(&self->fresh, i);
            kb_proctree_t *tree = s_tree_of(self, &f->st);
            if (!tree || s_is_member(tree, f->m.pid)) {
                i++;
                continue;
            }
            if (kb_vec_push(&tree->members, &f->m) != KB_BUF_OK) {
                i++;
                continue;
            }
            f->m.fd = f->m.mfd = -1; /* the tree has them now */
            memmove(f, f + 1, (self->fresh.len - i - 1) * sizeof *f);
            self->fresh.len--;
            moved = true;
        }
    }
    for (size_t i = 0; i < self->fresh.len; i++)
        s_close_member(&((kb_fresh_t *)kb_vec_at(&self->fresh, i))->m);
    self->fresh.len = 0;
}

/*  The last pid given out in our pid namespace (/proc/loadavg's last
    field), or -1. */
static long s_last_pid(const kb_procscan_t *self)
{
    char buf[128];
    ssize_t n = self->loadavg_fd >= 0 ? pread(self->loadavg_fd, buf, sizeof buf - 1, 0) : -1;
    if (n <= 0)
        return -1;
    buf[n] = 0;
    const char *last = strrchr(buf, ' ');
    return last ? strtol(last + 1, NULL, 10) : -1;
}

int kb_procscan_update(kb_procscan_t *self)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long long age_ms = (long long)(now.tv_sec - self->updated.tv_sec) * 1000
                       + (now.tv_nsec - self->updated.tv_nsec) / 1000000;
    self->updated = now;
    bool full = self->full || self->trees.len == 0 || age_ms > KB_PROCSCAN_STALE_MS;
    /*  No pid given out since the last listing: no process is new, so
        there is nothing to list (the common case of idle kernels). */
    long last_pid = s_last_pid(self);
    if (!full && last_pid >= 0 && last_pid == self->last_pid)
        return 0;
    DIR *dir = opendir("/proc");
    if (!dir)
        return -1;
    self->last_pid = last_pid;
    self->full = false;
    self->next.len = 0;
    size_t at = 0; /* in seen, ascending like readdir's numbered entries */
    struct dirent *entry;
    while ((entry = readdir(dir))) {
        const char *name = entry->d_name;
        if (*name < '1' || *name > '9')
            continue;
        pid_t pid = (pid_t)strtol(name, NULL, 10);
        kb_vec_push(&self->next, &pid);
        while (at < self->seen.len && *(pid_t *)kb_vec_at(&self->seen, at) < pid)
            at++;
        bool known = at < self->seen.len && *(pid_t *)kb_vec_at(&self->seen, at) == pid;
        if ((known && !full) || self->trees.len == 0)
            continue;
        kb_fresh_t f;
        if (s_open_member(pid, &f.m, &f.st) != 0)
            continue;
        if (f.st.state == 'Z' || f.st.state == 'X' || kb_vec_push(&self->fresh, &f) != KB_BUF_OK)
            s_close_member(&f.m);
    }
    closedir(dir);
    kb_vec_t swap = self->seen;
    self->seen = self->next;
    self->next = swap;
    s_place_fresh(self);
    return 0;
}

size_t kb_proctree_limit_data(kb_proctree_t *self, uint64_t bytes)
{
    size_t failed = 0;
    for (size_t i = 0; i < self->members.len; i++)
        if (kb_proc_limit_data(s_member(self, i)->pid, bytes) != 0)
            failed++;
    return failed;
}

/*  Set the nice value of every thread of pid (Linux keeps one per thread:
    setpriority on the pid alone moves its main thread only). The number
    of threads set; *failed counts those that refused (errno kept). */
static size_t s_renice_threads(pid_t pid, int nice, size_t *failed)
{
    char path[48];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *dir = opendir(path);
    if (!dir)
        return 0; /* gone */
    size_t n = 0;
    struct dirent *entry;
    while ((entry = readdir(dir))) {
        char *end;
        long tid = strtol(entry->d_name, &end, 10);
        if (end == entry->d_name || *end || tid <= 0)
            continue;
        if (setpriority(PRIO_PROCESS, (id_t)tid, nice) == 0)
            n++;
        else if (errno != ESRCH)
            (*failed)++;
    }
    int saved = errno;
    closedir(dir);
    errno = saved;
    return n;
}

/*  With the scheduler's autogroups on (kernel.sched_autogroup_enabled),
    CPU is shared between sessions first and nice values count only within
    one: a kernel leads its own session, so its autogroup gets nice too
    (/proc/<pid>/autogroup, absent when autogroups are off). */
static void s_renice_autogroup(pid_t root, int nice)
{
    char path[48], value[16];
    snprintf(path, sizeof path, "/proc/%d/autogroup", (int)root);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    int len = snprintf(value, sizeof value, "%d", nice);
    if (write(fd, value, (size_t)len) != len && errno != ESRCH)
        zsys_debug("cannot set the autogroup nice of pid %d: %s", (int)root, strerror(errno));
    close(fd);
}

size_t kb_proctree_renice(kb_proctree_t *self, int nice, size_t *failed)
{
    size_t n = 0;
    *failed = 0;
    for (size_t i = 0; i < self->members.len; i++)
        n += s_renice_threads(s_member(self, i)->pid, nice, failed);
    s_renice_autogroup(self->root, nice);
    return n;
}

int kb_proc_limit_data(pid_t pid, uint64_t bytes)
{
    struct rlimit limit = { (rlim_t)bytes, (rlim_t)bytes };
    return prlimit(pid, RLIMIT_DATA, &limit, NULL);
}

int kb_proc_cwd(pid_t pid, char *buf, size_t len)
{
    char link[64];
    snprintf(link, sizeof link, "/proc/%d/cwd", (int)pid);
    ssize_t n = len > 0 ? readlink(link, buf, len) : -1;
    if (n < 0)
        return -1;
    if ((size_t)n >= len || buf[0] != '/') {
        errno = (size_t)n >= len ? ENAMETOOLONG : ENOENT;
        return -1;
    }
    buf[n] = 0;
    /* a directory that was removed reads "/path (deleted)" (unless one
       of that very name exists) */
    if (n > 10 && strcmp(buf + n - 10, " (deleted)") == 0 && access(buf, F_OK) != 0) {
        errno = ENOENT;
        return -1;
    }
    return 0;
}

int kb_proc_memory(pid_t pid, uint64_t *uss, uint64_t *pss)
{
    return kb_proc_memory_rss(pid, uss, pss, NULL);
}

int kb_proc_memory_rss(pid_t pid, uint64_t *uss, uint64_t *pss, uint64_t *rss)
{
    char buf[4096];
    if (kb_proc_read(pid, "smaps_rollup", buf, sizeof buf) < 0)
        return -1;
    if (uss)
        *uss = s_kib_line(buf, "Private_Clean:") + s_kib_line(buf, "Private_Dirty:");
    if (pss)
        *pss = s_kib_line(buf, "Pss:");
    if (rss)
        *rss = s_kib_line(buf, "Rss:");
    return 0;
}
