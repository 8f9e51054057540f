/*  kb_proctree.h - a kernel's process tree, read from /proc: the kernel
    and every descendant, found incrementally; the tree's resident memory,
    CPU time and process count; signalling it; the kernel's RLIMIT_DATA.

    One kb_procscan_t serves every tree of a loop. Its update lists /proc
    and reads only the processes it has not seen before: a new process
    joins a tree when its parent is a member or when it is in the kernel's
    session (a kernel is started as a session leader, so orphans that init
    adopted are still found). An update lists /proc only when a pid was
    given out since the last one (/proc/loadavg names the last): idle
    kernels cost no listing. A member's stat and statm files stay open and
    are read with one pread per sample (statm, the cheaper, when only
    memory and the process count are wanted); a member that is gone is
    dropped. A pid is
    taken for one process by its start time (a reused pid is a new
    process). Without /proc entries for threads' children (no
    CONFIG_PROC_CHILDREN here), this is the cheap way to know a tree.
    Engine thread only.
*/
#ifndef KB_PROCTREE_H_INCLUDED
#define KB_PROCTREE_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct kb_procscan kb_procscan_t;
typedef struct kb_proctree kb_proctree_t;

/*  One sample of a tree. */
typedef struct {
    uint64_t rss_bytes;      /* resident memory, summed over the live members */
    uint64_t root_rss_bytes; /* the root's own */
    double cpu_time_s;       /* user+system time of live members and the children they reaped */
    unsigned pids;           /* live (not zombie) processes */
} kb_tree_sample_t;

/*  Read /proc/<pid>/<name> (at most size - 1 bytes) into buf, followed by
    a NUL. The number of bytes read, or -1 when it cannot be read or is
    empty. */
ssize_t kb_proc_read(pid_t pid, const char *name, char *buf, size_t size);

/*  NULL without memory. */
kb_procscan_t *kb_procscan_new(void);
void kb_procscan_destroy(kb_procscan_t **self_p);

/*  List /proc and give every process not seen before to the tree it
    belongs to. When the last update is over KB_PROCSCAN_STALE_MS old,
    every process is read again (a pid listed then may be another process
    now). 0, or -1 with errno (/proc unreadable). */
#define KB_PROCSCAN_STALE_MS 1000
int kb_procscan_update(kb_procscan_t *self);

/*  The tree of root (a kernel started as a session leader), registered
    with scan; the next update looks at every process once more to find
    its members (a re-adopted kernel may have children already). NULL
    without memory. */
kb_proctree_t *kb_proctree_new(kb_procscan_t *scan, pid_t root);

/*  pid is no member of any tree but its own (if it is a root): a fork of a
    kernel, or a checkpoint, found in its parent kernel's tree while it was
    being made (then a descendant), leaves it. Its own descendants, found
    from now on, join only the trees it is in. kb_proctree_new does it for
    its root. */
void kb_procscan_disown(kb_procscan_t *self, pid_t pid);
void kb_proctree_destroy(kb_proctree_t **self_p);

pid_t kb_proctree_root(const kb_proctree_t *self);

/*  Read every member's stat (dropping the members that are gone) into
    out. 0; -1 when the root itself is gone (out still filled from the
    rest). */
int kb_proctree_sample(kb_proctree_t *self, kb_tree_sample_t *out);

/*  The same from statm, for memory and the process count only: out's
    cpu_time_s is 0. About half the cost of kb_proctree_sample. */
int kb_proctree_sample_memory(kb_proctree_t *self, kb_tree_sample_t *out);

/*  Send sig to every member, newest first (the root last, and only with
    include_root). The number of processes signalled. */
size_t kb_proctree_signal(kb_proctree_t *self, int sig, bool include_root);

/*  SIGKILL the newest members (never the root) until at most keep are
    left alive. The number killed. */
size_t kb_proctree_kill_over(kb_proctree_t *self, size_t keep);

/*  SIGKILL every member but the root, updating scan between rounds so
    that children forked meanwhile go too (a few rounds at most). The
    number killed. */
size_t kb_proctree_kill_descendants(kb_proctree_t *self);

/*  The root's peak resident memory (VmHWM) since the last reset, and
    resetting it to the current figure (/proc/<pid>/clear_refs, "5").
    Both files stay open from their first use. 0 when unknown; reset -1
    with errno. */
uint64_t kb_proctree_root_peak(kb_proctree_t *self);
int kb_proctree_root_peak_reset(kb_proctree_t *self);

/*  Set RLIMIT_DATA (soft and hard) of every member to bytes. The number
    of members it could not be set on (errno: the last failure's). */
size_t kb_proctree_limit_data(kb_proctree_t *self, uint64_t bytes);

/*  Set the nice value of every thread of every member to nice (Linux
    nice is per thread; threads and processes started later inherit their
    creator's). The number of threads set; *failed: the number that
    refused (errno: the last failure's, EPERM / EACCES without
    CAP_SYS_NICE for a raise or for another user's threads). */
size_t kb_proctree_renice(kb_proctree_t *self, int nice, size_t *failed);

/*  Set the process's RLIMIT_DATA (soft and hard) to bytes, so that its
    allocator fails rather than the machine running out. 0, or -1 with
    errno. */
int kb_proc_limit_data(pid_t pid, uint64_t bytes);

/*  The process's working directory now (/proc/<pid>/cwd), into buf. 0, or
    -1 with errno: gone, not ours to read (another uid's, unless the daemon
    may ptrace it), its directory deleted, or longer than len. */
int kb_proc_cwd(pid_t pid, char *buf, size_t len);

/*  The process's memory from /proc/<pid>/smaps_rollup: uss, what it holds
    alone (Private_Clean + Private_Dirty), and pss, its proportional share
    (each may be NULL). 0, or -1 with errno (gone, not readable). */
int kb_proc_memory(pid_t pid, uint64_t *uss, uint64_t *pss);
/*  The same with its resident set size (Rss) too (any may be NULL). */
int kb_proc_memory_rss(pid_t pid, uint64_t *uss, uint64_t *pss, uint64_t *rss);

#endif
