/*  kb_limits.c - the sampler and the watches of kernels' process trees
    (see kb_limits.h). Engine thread only.
*/
#include "service/ops/kb_limits.h"

#include <assert.h>
#include <czmq.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "kernel/kb_cgroup.h"
#include "kernel/kb_proctree.h"
#include "util/kb_vec.h"

#define KB_USAGE_FRESH_MS (KB_SAMPLE_MS / 5) /* kb_watch_usage reads again past this */

/*  A kernel's cgroup: memory.max is the limit and an eighth (room for the
    interrupt to work before the OOM killer does; memory.high, 90% of it,
    is then about the limit), pids.max the limit and room for threads
    (pids.max counts threads; the sampler counts processes). */
#define KB_CGROUP_MEMORY_MAX(limit) ((limit) + (limit) / 8)
#define KB_CGROUP_THREAD_ROOM 64

struct kb_limits {
    kb_loop_t *loop;
    double grace;
    kb_procscan_t *scan;
    kb_vec_t watches; /* kb_watch_t * */
    size_t active;    /* watches with a limit or a run going */
    kb_timer_t timer;
    int64_t scanned_ms; /* of the last kb_procscan_update */
    double cost_s;      /* thread CPU spent in ticks */
    unsigned long long ticks;
    double start_s, end_s;           /* wall time spent measuring runs' starts, and ends */
    unsigned long long runs_metered; /* runs whose end was measured */
    kb_cgroups_t *cgroups;           /* the daemon's delegated cgroup v2, or NULL */
    kb_error_t mode_why;             /* why there is none */
    kb_vec_t retired;                /* kb_cgroup_t * of retired kernels, removed once empty */
    int64_t hog_after_ms;            /* a run busy this long is lowered; 0: never */
    int base_nice;                   /* the daemon's own nice, which kernels inherit */
    const char *hog_why;             /* why runs are not lowered, or NULL (static) */
    unsigned hogs;                   /* watches lowered now */
    unsigned long long hog_runs;     /* runs lowered so far */
};

struct kb_watch {
    kb_limits_t *limits;
    kb_proctree_t *tree;
    long long memory_limit, pids_limit; /* 0: none */
    kb_watch_fn *fn;
    void *arg;
    bool active;            /* counted in limits->active */
    bool running;           /* a run is going */
    bool pids_hit;          /* the run went over the pids limit */
    bool killing;           /* KB_WATCH_KILL was said */
    bool paused;            /* limits not enforced (a fork is being made) */
    bool lowered;           /* its run was busy past hog_after: below everyone's priority */
    unsigned hog_passes;    /* the tree's threads set to KB_HOG_NICE this many times */
    bool hog_spared;        /* its run is interrupted, or its cell ended: not lowered again */
    int64_t run_start_ms;   /* when the run started */
    int64_t over_since_ms;  /* over the memory limit since; 0: under */
    kb_tree_sample_t last;  /* the latest sample */
    int64_t sampled_ms;     /* when */
    int64_t cpu_sampled_ms; /* when last.cpu_time_s was read (stat) */
    double run_cpu_start;   /* the tree's CPU time when the run started */
    uint64_t run_peak;      /* the tree's largest sample during the run */
    uint64_t peak_since;    /* the largest sample while over the limit */
    kb_cgroup_t *cgroup;    /* its own, in cgroup mode with a limit; or NULL */
    uint64_t oom_kills;     /* memory.events oom_kill seen so far */
    char text[240], value[240];
};

static void s_tick(kb_timer_t *timer, void *arg);

static double s_thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- which watches are sampled ------------------------------------------------- */

static void s_update_active(kb_watch_t *self)
{
    kb_limits_t *limits = self->limits;
    bool active = self->memory_limit > 0 || self->pids_limit > 0 || self->running;
    if (active == self->active)
        return;
    self->active = active;
    if (active && limits->active++ == 0 && !kb_timer_active(&limits->timer))
        kb_timer_start(limits->loop, &limits->timer, KB_SAMPLE_MS, KB_SAMPLE_MS, s_tick, limits);
    else if (!active)
        limits->active--; /* the timer stops at its next tick */
}

static void s_scan(kb_limits_t *self)
{
    kb_procscan_update(self->scan);
    self->scanned_ms = kb_loop_now_ms(self->loop);
}

/*  A sample of the watch's tree; with cpu the CPU time too (stat), else
    memory and pids only (statm, the cheaper: the sampler's ticks), the
    CPU time kept from before. */
static void s_sample(kb_watch_t *self, bool cpu)
{
    if (cpu) {
        kb_proctree_sample(self->tree, &self->last);
    } else {
        double cpu_time_s = self->last.cpu_time_s;
        kb_proctree_sample_memory(self->tree, &self->last);
        self->last.cpu_time_s = cpu_time_s;
    }
    self->sampled_ms = kb_loop_now_ms(self->limits->loop);
    if (cpu)
        self->cpu_sampled_ms = self->sampled_ms;
    if (self->running && self->last.rss_bytes > self->run_peak)
        self->run_peak = self->last.rss_bytes;
}

/* ---- limits -------------------------------------------------------------------- */

/*  What the tree is charged: its resident memory, the kernel's own counted
    proportionally (PSS), so that pages a fork shares with its template or
    its parent are not charged in full to every fork. Reads smaps_rollup:
    called only when RSS alone says over the limit, or when asked. */
static uint64_t s_charged(const kb_watch_t *self)
{
    uint64_t pss = 0;
    if (kb_proc_memory(kb_proctree_root(self->tree), NULL, &pss) != 0
        || pss > self->last.root_rss_bytes)
        return self->last.rss_bytes;
    return self->last.rss_bytes - self->last.root_rss_bytes + pss;
}

static void s_say(kb_watch_t *self, kb_watch_event_t event, size_t killed)
{
    kb_watch_info_t info = { .rss_bytes = self->last.rss_bytes,
                             .peak_bytes = self->peak_since,
                             .pids = self->last.pids,
                             .killed = killed,
                             .text = self->text,
                             .value = self->value };
    self->fn(self, event, &info, self->arg);
}

/*  The grace passed and the tree is still over the memory limit: its
    descendants go; the kernel too when it alone is over. */
static void s_memory_grace_over(kb_watch_t *self)
{
    unsigned before = self->last.pids;
    size_t killed = kb_proctree_kill_descendants(self->tree);
    s_sample(self, false);
    uint64_t limit = (uint64_t)self->memory_limit, root = self->last.root_rss_bytes;
    if (root > limit && kb_proc_memory(kb_proctree_root(self->tree), NULL, &root) != 0)
        root = self->last.root_rss_bytes;
    if (root > limit) {
        self->killing = true;
        snprintf(self->text, sizeof self->text,
                 "still over the memory limit of %llu bytes after %.1f s (the kernel alone "
                 "holds %llu bytes); killing the kernel",
                 (unsigned long long)limit, self->limits->grace, (unsigned long long)root);
        snprintf(self->value, sizeof self->value,
                 "the kernel's processes used %llu bytes at the peak, over the memory limit of "
                 "%llu bytes; the kernel was killed",
                 (unsigned long long)self->peak_since, (unsigned long long)limit);
        s_say(self, KB_WATCH_KILL, killed);
        return;
    }
    self->over_since_ms = 0;
    snprintf(self->text, sizeof self->text,
             "still over the memory limit of %llu bytes after %.1f s: killed %zu of the "
             "kernel's %u processes (the kernel itself is kept)",
             (unsigned long long)limit, self->limits->grace, killed, before);
    s_say(self, KB_WATCH_UNDER, killed);
}

static void s_check_memory(kb_watch_t *self, int64_t now)
{
    uint64_t limit = (uint64_t)self->memory_limit;
    if (!limit || self->killing)
        return;
    uint64_t used = self->last.rss_bytes;
    if (used > limit)
        used = s_charged(self);
    if (used <= limit) {
        if (self->over_since_ms) {
            self->over_since_ms = 0;
            snprintf(self->text, sizeof self->text,
                     "back under the memory limit: %llu bytes in %u processes",
                     (unsigned long long)used, self->last.pids);
            s_say(self, KB_WATCH_UNDER, 0);
        }
        return;
    }
    if (used > self->peak_since || !self->over_since_ms)
        self->peak_since = used;
    if (!self->over_since_ms) {
        self->over_since_ms = now;
        snprintf(self->text, sizeof self->text,
                 "the kernel's %u processes hold %llu bytes, over the memory limit of %llu "
                 "bytes; interrupting",
                 self->last.pids, (unsigned long long)used, (unsigned long long)limit);
        snprintf(self->value, sizeof self->value,
                 "the kernel's processes used %llu bytes, over the memory limit of %llu bytes; "
                 "the run was interrupted",
                 (unsigned long long)used, (unsigned long long)limit);
        s_say(self, KB_WATCH_OVER_MEMORY, 0);
        return;
    }
    if ((double)(now - self->over_since_ms) >= self->limits->grace * 1000)
        s_memory_grace_over(self);
}

static void s_check_pids(kb_watch_t *self)
{
    if (!self->pids_limit || self->last.pids <= (unsigned long long)self->pids_limit)
        return;
    unsigned count = self->last.pids;
    size_t killed = kb_proctree_kill_over(self->tree, (size_t)self->pids_limit);
    if (self->running)
        self->pids_hit = true;
    snprintf(self->text, sizeof self->text,
             "the kernel had %u processes, over the pids limit of %lld: killed the %zu newest",
             count, self->pids_limit, killed);
    snprintf(self->value, sizeof self->value,
             "the run started more processes than the pids limit of %lld allows; the newest "
             "were killed",
             self->pids_limit);
    s_sample(self, false);
    s_say(self, KB_WATCH_OVER_PIDS, killed);
}

/* ---- priority: long runs go below the daemon and the other kernels ------------ */

/*  Set the tree's threads to nice; a refusal is logged (once a run). */
static void s_renice(kb_watch_t *self, int nice)
{
    size_t failed;
    kb_proctree_renice(self->tree, nice, &failed);
    if (failed)
        zsys_warning("limits: kernel pid %d: cannot set the nice value of %zu of its threads "
                     "to %d: %s",
                     (int)kb_proctree_root(self->tree), failed, nice, strerror(errno));
}

/*  Passes over a lowered tree's threads: a thread or process made later
    inherits its maker's nice value, so only threads made while a pass read
    /proc can be missed; the passes on the next ticks take those. */
#define KB_HOG_PASSES 3

/*  A run busy past hog_after: its tree's threads go to KB_HOG_NICE for the
    rest of the run, in KB_HOG_PASSES passes on consecutive ticks. */
static void s_check_hog(kb_watch_t *self, int64_t now)
{
    kb_limits_t *limits = self->limits;
    if (!self->running || !limits->hog_after_ms || limits->hog_why || self->hog_spared)
        return;
    if (!self->lowered) {
        if (now - self->run_start_ms < limits->hog_after_ms)
            return;
        self->lowered = true;
        self->hog_passes = 0;
        limits->hogs++;
        limits->hog_runs++;
    }
    if (self->hog_passes >= KB_HOG_PASSES)
        return;
    self->hog_passes++;
    s_renice(self, KB_HOG_NICE);
}

/*  The run ended (or the watch goes): the tree back at the daemon's nice. */
static void s_restore_hog(kb_watch_t *self)
{
    if (!self->lowered)
        return;
    self->lowered = false;
    self->limits->hogs--;
    s_renice(self, self->limits->base_nice);
}

/*  Whether the daemon may raise a lowered kernel back (a lower nice value
    needs CAP_SYS_NICE, or RLIMIT_NICE allowing it). NULL, or why not. */
static const char *s_hog_why_not(int base_nice)
{
    if (base_nice >= KB_HOG_NICE)
        return "the daemon runs at the lowest priority already (nice 19)";
    struct rlimit limit;
    if (getrlimit(RLIMIT_NICE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
        && (rlim_t)(20 - base_nice) <= limit.rlim_cur)
        return NULL;
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    unsigned long long caps = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "CapEff: %llx", &caps) == 1)
            break;
    if (f)
        fclose(f);
    if (caps & (1ULL << 23)) /* CAP_SYS_NICE */
        return NULL;
    return "the daemon may not raise a kernel's priority back after a long run (it needs "
           "CAP_SYS_NICE or RLIMIT_NICE); long runs are not lowered";
}

/*  The cgroups of retired kernels that are empty now go. */
static void s_remove_retired(kb_limits_t *self)
{
    for (size_t i = 0; i < self->retired.len;) {
        kb_cgroup_t **at = kb_vec_at(&self->retired, i);
        kb_cgroup_stats_t stats;
        if (kb_cgroup_stats(*at, &stats) == 0 && stats.pids_current > 0) {
            i++;
            continue;
        }
        kb_cgroup_remove(*at);
        kb_cgroup_destroy(at);
        memmove(at, at + 1, (self->retired.len - i - 1) * sizeof *at);
        self->retired.len--;
    }
}

/*  Kills by the kernel's OOM killer in the watch's cgroup since the last
    look: the number, and text / value saying so. */
static uint64_t s_oom_kills(kb_watch_t *self)
{
    kb_cgroup_stats_t stats;
    if (!self->cgroup || kb_cgroup_stats(self->cgroup, &stats) != 0
        || stats.oom_kill <= self->oom_kills)
        return 0;
    uint64_t n = stats.oom_kill - self->oom_kills;
    self->oom_kills = stats.oom_kill;
    if (stats.memory_peak > self->peak_since)
        self->peak_since = stats.memory_peak;
    snprintf(self->text, sizeof self->text,
             "the kernel's OOM killer killed %llu of its processes at its cgroup's memory.max "
             "(%lld bytes of memory limit)",
             (unsigned long long)n, self->memory_limit);
    snprintf(self->value, sizeof self->value,
             "the kernel's processes used %llu bytes at the peak, over the memory limit of %lld "
             "bytes; the OOM killer killed %llu of them",
             (unsigned long long)self->peak_since, self->memory_limit, (unsigned long long)n);
    return n;
}

static void s_check_oom(kb_watch_t *self)
{
    if (!self->killing && s_oom_kills(self) > 0)
        s_say(self, self->last.pids ? KB_WATCH_OVER_MEMORY : KB_WATCH_KILL, 0);
}

static void s_tick(kb_timer_t *timer, void *arg)
{
    (void)timer;
    kb_limits_t *self = arg;
    if (self->active == 0 && self->retired.len == 0) {
        kb_timer_stop(&self->timer);
        return;
    }
    s_remove_retired(self);
    double cpu = s_thread_cpu();
    s_scan(self);
    int64_t now = self->scanned_ms;
    /*  By index and count: an owner may not destroy a watch in its
        callback, but the list is read afresh each time. */
    for (size_t i = 0; i < self->watches.len; i++) {
        kb_watch_t *watch = *(kb_watch_t **)kb_vec_at(&self->watches, i);
        if (!watch->active)
            continue;
        s_sample(watch, false);
        s_check_hog(watch, now);
        s_check_oom(watch);
        if (watch->paused)
            continue;
        s_check_pids(watch);
        s_check_memory(watch, now);
    }
    self->ticks++;
    self->cost_s += s_thread_cpu() - cpu;
}

void kb_watch_pause(kb_watch_t *self, bool paused)
{
    if (!self || self->paused == paused)
        return;
    self->paused = paused;
    self->over_since_ms = 0; /* a grace starts afresh */
}

/* ---- the sampler -------------------------------------------------------------------- */

kb_limits_t *kb_limits_new(kb_loop_t *loop, double grace, double hog_after)
{
    kb_limits_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->loop = loop;
    self->grace = grace;
    self->hog_after_ms = hog_after > 0 ? kb_loop_delay_ms(hog_after) : 0;
    errno = 0;
    self->base_nice = getpriority(PRIO_PROCESS, 0);
    self->hog_why = s_hog_why_not(self->base_nice);
    if (self->hog_after_ms && self->hog_why)
        zsys_warning("limits: %s", self->hog_why);
    self->scan = kb_procscan_new();
    kb_vec_init(&self->watches, sizeof(kb_watch_t *), 0);
    kb_vec_init(&self->retired, sizeof(kb_cgroup_t *), 0);
    kb_timer_init(&self->timer);
    if (!self->scan) {
        free(self);
        return NULL;
    }
    self->cgroups = kb_cgroups_detect(&self->mode_why);
    return self;
}

const char *kb_limits_mode(const kb_limits_t *self, const char **why)
{
    *why = self->cgroups ? NULL : self->mode_why.message;
    return self->cgroups ? "cgroup" : "sampler";
}

void kb_limits_disown(kb_limits_t *self, pid_t pid)
{
    kb_procscan_disown(self->scan, pid);
}

void kb_limits_destroy(kb_limits_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_limits_t *self = *self_p;
    *self_p = NULL;
    assert(self->watches.len == 0);
    kb_timer_stop(&self->timer);
    for (size_t i = 0; i < self->retired.len; i++) {
        kb_cgroup_t **at = kb_vec_at(&self->retired, i);
        kb_cgroup_kill(*at); /* the kernels were shut down: what is left is stray */
        kb_cgroup_remove(*at);
        kb_cgroup_destroy(at);
    }
    kb_vec_free(&self->retired);
    kb_cgroups_destroy(&self->cgroups);
    kb_vec_free(&self->watches);
    kb_procscan_destroy(&self->scan);
    free(self);
}

void kb_limits_cost(const kb_limits_t *self, kb_limits_cost_t *out)
{
    *out = (kb_limits_cost_t){ self->cost_s,       self->ticks, self->start_s, self->end_s,
                               self->runs_metered, self->hogs,  self->hog_runs };
}

int kb_limits_daemon_nice(const kb_limits_t *self)
{
    return self->base_nice;
}

double kb_limits_hog_after(const kb_limits_t *self, const char **why)
{
    *why = self->hog_why;
    return self->hog_after_ms && !self->hog_why ? (double)self->hog_after_ms / 1000 : 0;
}

/* ---- watches ------------------------------------------------------------------------ */

/*  Put the kernel at pid into a cgroup of its own (k-<pid>; the one there
    already for a kernel adopted after a restart). A failure is logged:
    the sampler still keeps the limits. */
static void s_join_cgroup(kb_watch_t *self, pid_t pid)
{
    char name[32];
    kb_error_t err;
    snprintf(name, sizeof name, "k-%d", (int)pid);
    int64_t memory = self->memory_limit ? KB_CGROUP_MEMORY_MAX(self->memory_limit) : 0;
    int64_t pids = self->pids_limit ? self->pids_limit + KB_CGROUP_THREAD_ROOM : 0;
    kb_cgroup_t *cgroup = kb_cgroup_open(self->limits->cgroups, name, &err);
    if (cgroup && kb_cgroup_set_limits(cgroup, memory, pids) != 0)
        zsys_warning("limits: %s: %s", name, kb_cgroup_error(cgroup));
    if (!cgroup)
        cgroup = kb_cgroup_new(self->limits->cgroups, name, memory, pids, &err);
    if (cgroup && kb_cgroup_add(cgroup, pid) != 0) {
        kb_error_set(&err, KB_ERR_INTERNAL, "%s", kb_cgroup_error(cgroup));
        kb_cgroup_remove(cgroup);
        kb_cgroup_destroy(&cgroup);
    }
    if (!cgroup) {
        zsys_warning("limits: no cgroup for the kernel %d: %s", (int)pid, err.message);
        return;
    }
    kb_cgroup_stats_t stats;
    if (kb_cgroup_stats(cgroup, &stats) == 0)
        self->oom_kills = stats.oom_kill;
    self->cgroup = cgroup;
}

kb_watch_t *kb_watch_new(kb_limits_t *limits, pid_t pid, long long memory_limit,
                         long long pids_limit, bool rlimit, kb_watch_fn *fn, void *arg)
{
    kb_watch_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->limits = limits;
    self->memory_limit = memory_limit > 0 ? memory_limit : 0;
    self->pids_limit = pids_limit > 0 ? pids_limit : 0;
    self->fn = fn;
    self->arg = arg;
    self->tree = kb_proctree_new(limits->scan, pid);
    if (!self->tree || kb_vec_push(&limits->watches, &self) != KB_BUF_OK) {
        kb_proctree_destroy(&self->tree);
        free(self);
        return NULL;
    }
    if (limits->cgroups && (self->memory_limit || self->pids_limit))
        s_join_cgroup(self, pid);
    if (rlimit && self->memory_limit) {
        /*  The processes there are now (a kernel from the pool may have
            children); the ones they start inherit it. */
        s_scan(limits);
        size_t failed = kb_proctree_limit_data(self->tree, (uint64_t)self->memory_limit);
        if (failed)
            zsys_warning("kernel pid %d: cannot set RLIMIT_DATA on %zu of its processes: %s",
                         (int)pid, failed, strerror(errno));
    }
    s_update_active(self);
    return self;
}

static void s_watch_free(kb_watch_t *self)
{
    s_restore_hog(self);
    self->running = false;
    self->memory_limit = self->pids_limit = 0;
    s_update_active(self);
    kb_vec_t *watches = &self->limits->watches;
    for (size_t i = 0; i < watches->len; i++) {
        kb_watch_t **at = kb_vec_at(watches, i);
        if (*at == self) {
            memmove(at, at + 1, (watches->len - i - 1) * sizeof *at);
            watches->len--;
            break;
        }
    }
    kb_proctree_destroy(&self->tree);
    free(self);
}

void kb_watch_destroy(kb_watch_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_watch_t *self = *self_p;
    *self_p = NULL;
    /*  The kernel is being shut down: its cgroup goes once it is empty. */
    if (self->cgroup && kb_vec_push(&self->limits->retired, &self->cgroup) == KB_BUF_OK) {
        self->cgroup = NULL;
        if (!kb_timer_active(&self->limits->timer))
            kb_timer_start(self->limits->loop, &self->limits->timer, KB_SAMPLE_MS, KB_SAMPLE_MS,
                           s_tick, self->limits);
    }
    kb_cgroup_destroy(&self->cgroup);
    s_watch_free(self);
}

void kb_watch_release(kb_watch_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_watch_t *self = *self_p;
    *self_p = NULL;
    kb_cgroup_destroy(&self->cgroup); /* kept, for the next daemon's adoption */
    s_watch_free(self);
}

bool kb_watch_oom_killed(kb_watch_t *self, kb_watch_info_t *info)
{
    if (s_oom_kills(self) == 0)
        return false;
    *info = (kb_watch_info_t){ .rss_bytes = self->last.rss_bytes,
                               .peak_bytes = self->peak_since,
                               .pids = self->last.pids,
                               .text = self->text,
                               .value = self->value };
    return true;
}

/*  Wall time now, for the accounting's own cost. */
static double s_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void kb_watch_run_start(kb_watch_t *self)
{
    double t0 = s_wall();
    self->running = true;
    self->pids_hit = false;
    self->hog_spared = false;
    self->run_start_ms = kb_loop_now_ms(self->limits->loop);
    kb_proctree_root_peak_reset(self->tree);
    s_sample(self, true);
    self->run_cpu_start = self->last.cpu_time_s;
    self->run_peak = self->last.rss_bytes;
    s_update_active(self);
    self->limits->start_s += s_wall() - t0;
}

void kb_watch_spare(kb_watch_t *self)
{
    if (!self || !self->running)
        return;
    self->hog_spared = true;
    s_restore_hog(self);
}

void kb_watch_run_end(kb_watch_t *self, kb_resources_t *out)
{
    if (!self->running)
        return;
    double t0 = s_wall();
    s_sample(self, true);
    double cpu = self->last.cpu_time_s - self->run_cpu_start;
    out->cpu_time_s = cpu > 0 ? cpu : 0;
    uint64_t peak = self->run_peak;
    uint64_t root_peak = kb_proctree_root_peak(self->tree);
    if (root_peak > peak)
        peak = root_peak;
    out->peak_memory_bytes = (long long)peak;
    self->running = false;
    s_restore_hog(self);
    if (self->pids_hit) {
        /*  What stayed under the limit of what the run started goes too. */
        kb_proctree_kill_descendants(self->tree);
        self->pids_hit = false;
    }
    s_update_active(self);
    self->limits->end_s += s_wall() - t0;
    self->limits->runs_metered++;
}

void kb_watch_usage(kb_watch_t *self, kb_usage_t *out)
{
    kb_limits_t *limits = self->limits;
    int64_t now = kb_loop_now_ms(limits->loop);
    /* a memory-only tick may be fresher, but its CPU time is the last stat's */
    if (now - self->cpu_sampled_ms > KB_USAGE_FRESH_MS || !self->cpu_sampled_ms) {
        if (now - limits->scanned_ms > KB_USAGE_FRESH_MS || !limits->scanned_ms)
            s_scan(limits);
        s_sample(self, true);
    }
    *out = (kb_usage_t){ s_charged(self), self->last.cpu_time_s, self->last.pids };
}
