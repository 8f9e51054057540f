/*  kb_limits.h - each context's limits and accounting (SPEC section 9):
    the sampler of the engine and one watch per kernel.

    A watch follows one kernel's process tree (kernel/kb_proctree.h). The
    sampler's timer ticks every KB_SAMPLE_MS while any watch is active (it
    has a limit, or a run is going), lists /proc once per tick and samples
    the active trees: an idle context without limits costs nothing. What a
    watch finds goes to its owner (the context) as one event:

    - over the memory limit: KB_WATCH_OVER_MEMORY (the owner interrupts the
      run); if the tree is still over when the grace has passed, the watch
      kills every descendant of the kernel; if the kernel alone is still
      over, KB_WATCH_KILL (the owner kills the kernel: OutOfMemory); else,
      or when the tree came back under the limit by itself, KB_WATCH_UNDER;
    - over the pids limit: the newest processes over it are killed at once,
      then KB_WATCH_OVER_PIDS (the owner interrupts the run); at the end of
      that run the kernel's descendants are killed.

    Where the daemon's cgroup v2 is delegated to it (kernel/kb_cgroup.h),
    a kernel with a limit also gets a cgroup of its own (memory.max,
    memory.high, pids.max); kills by the kernel's OOM killer there are told
    as KB_WATCH_OVER_MEMORY (the kernel lives) or KB_WATCH_KILL.

    A run busy longer than hog_after goes below the CPU priority of the
    daemon and of the other kernels for the rest of the run: every thread
    of its tree gets nice KB_HOG_NICE (Linux nice is per thread), and the
    daemon's own nice again when the run ends. Kernels start at the
    daemon's nice (they inherit it), so the daemon never runs below them.
    Raising a kernel back needs CAP_SYS_NICE (or RLIMIT_NICE): without it
    runs are not lowered at all, and kb_limits_hog_after says why.

    It also sets RLIMIT_DATA on the tree's processes (not for a kernelspec
    that opts out) and accounts each run: wall and CPU time, and the peak
    of the tree's resident memory. Engine thread only.
*/
#ifndef KB_LIMITS_H_INCLUDED
#define KB_LIMITS_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kernelbridge/kb_result.h"
#include "util/kb_loop.h"

#define KB_SAMPLE_MS 100 /* the sampler's period: at most this apart */
#define KB_HOG_NICE 19   /* the nice of a kernel whose run is past hog_after */

typedef struct kb_limits kb_limits_t;
typedef struct kb_watch kb_watch_t;

typedef enum {
    KB_WATCH_OVER_MEMORY, /* over the memory limit: interrupt */
    KB_WATCH_KILL,        /* still over after the grace, the kernel alone: kill it */
    KB_WATCH_OVER_PIDS,   /* processes over the pids limit were killed: interrupt */
    KB_WATCH_UNDER,       /* back under the memory limit, maybe by killing descendants */
} kb_watch_event_t;

/*  What the event is about. text: a sentence for the run's system log,
    value: for the error's value (both in the watch, valid for the call). */
typedef struct {
    uint64_t rss_bytes, peak_bytes;
    unsigned pids;
    size_t killed; /* processes killed just now */
    const char *text, *value;
} kb_watch_info_t;

typedef void(kb_watch_fn)(kb_watch_t *watch, kb_watch_event_t event, const kb_watch_info_t *info,
                          void *arg);

/*  Now: the tree's resident memory, CPU time so far, and processes. */
typedef struct {
    uint64_t memory_bytes; /* resident, the kernel's own pages proportionally (PSS) */
    double cpu_time_s;
    unsigned pids;
} kb_usage_t;

/*  grace: seconds from over the memory limit to killing (the interrupt
    grace); hog_after: seconds a run is busy before its kernel is lowered
    (0: never). NULL without memory. */
kb_limits_t *kb_limits_new(kb_loop_t *loop, double grace, double hog_after);
void kb_limits_destroy(kb_limits_t **self_p);

/*  Watch the tree of the kernel at pid (its session leader), with limits
    (0: none), reporting to fn. RLIMIT_DATA is set to memory_limit on the
    tree's processes unless rlimit is false. NULL without memory. */
kb_watch_t *kb_watch_new(kb_limits_t *limits, pid_t pid, long long memory_limit,
                         long long pids_limit, bool rlimit, kb_watch_fn *fn, void *arg);
void kb_watch_destroy(kb_watch_t **self_p);

/*  pid (a checkpoint's frozen process) is counted in no watch's tree: it
    leaves its parent kernel's, where it was found while being made. */
void kb_limits_disown(kb_limits_t *self, pid_t pid);

/*  Stop enforcing the limits (paused) for a while, or enforce them again:
    while the kernel forks, its tree holds the new process for a moment,
    whose pages are counted twice (RSS) and which must not be killed.
    Sampling and the cgroup's own limits go on. Safe on NULL. */
void kb_watch_pause(kb_watch_t *self, bool paused);

/*  The same for a kernel left running for the next daemon: its cgroup
    stays. */
void kb_watch_release(kb_watch_t **self_p);

/*  Whether the kernel's OOM killer killed processes of the watch's cgroup
    since the last look (the kernel just died: was it that?); info then
    says so. False without a cgroup. */
bool kb_watch_oom_killed(kb_watch_t *self, kb_watch_info_t *info);

/*  A run starts on the kernel (the tree is sampled while it goes), or ends:
    out gets its CPU time and memory peak (wall time is the run's own).
    At the end of a run over the pids limit, the kernel's descendants are
    killed. */
void kb_watch_run_start(kb_watch_t *self);
void kb_watch_run_end(kb_watch_t *self, kb_resources_t *out);

/*  The run is being interrupted, or its cell ended (execute_reply) and
    what is left is its output: a lowered tree goes back to the daemon's
    priority now, and is not lowered again in this run, so that it answers
    the interrupt within the grace, and sends the rest of its output
    (which waits for the daemon, kernelbridge_display's backpressure),
    however busy the machine is. Safe on NULL. */
void kb_watch_spare(kb_watch_t *self);

/*  The tree now (read at most KB_SAMPLE_MS / 5 ago). */
void kb_watch_usage(kb_watch_t *self, kb_usage_t *out);

/*  "cgroup" (a cgroup v2 per limited kernel, and the sampler) or
    "sampler" (the sampler alone; *why then says why). Static / borrowed. */
const char *kb_limits_mode(const kb_limits_t *self, const char **why);

/*  What the limits have cost so far (for /health and the bench). */
typedef struct {
    double sampler_cpu_s;        /* CPU seconds of this thread spent in the sampler's ticks */
    unsigned long long ticks;    /* the sampler's ticks */
    double start_s;              /* wall seconds spent measuring runs' starts (request sent) */
    double end_s;                /* and their ends (on the result's path) */
    unsigned long long runs;     /* runs whose end was measured */
    unsigned hogs;               /* kernels lowered now (a run past hog_after) */
    unsigned long long hog_runs; /* runs lowered so far */
} kb_limits_cost_t;

void kb_limits_cost(const kb_limits_t *self, kb_limits_cost_t *out);

/*  Seconds a run is busy before its kernel is lowered; 0 when runs are
    never lowered (*why then says why when it is not by configuration:
    static, or NULL). */
double kb_limits_hog_after(const kb_limits_t *self, const char **why);

/*  The daemon's nice value (its kernels start at it; lowered ones go to
    KB_HOG_NICE, and back to it). */
int kb_limits_daemon_nice(const kb_limits_t *self);

#endif
