/*  kb_cgroup.h - a cgroup v2 per kernel, under the cgroup the daemon was
    started in, when that cgroup is delegated to it: writable by the
    daemon's uid, with the memory and pids controllers. Each kernel's
    cgroup has memory.max, memory.high and pids.max; what the kernel's OOM
    killer did is read back from memory.events.

    The layout, under the daemon's cgroup <own>:
        <own>/daemon     the daemon itself (cgroup v2 lets a cgroup give
                         controllers to its children only when it has no
                         processes of its own, so the daemon moves here)
        <own>/k-<n>      one per kernel, named by the caller
    A daemon started in a leaf named "daemon" whose parent is writable by
    it and has no processes (an earlier run of itself, or systemd's
    DelegateSubgroup=daemon) takes that parent as <own>.

    Nothing is written outside <own>: every file is opened relative to a
    descriptor of <own> or of a kernel's cgroup, without following links,
    and a cgroup path with "." or ".." components is refused, as is the
    root of the hierarchy (the daemon does not own it, whatever its uid).

    The limits contain accidents (a runaway allocation, a fork bomb), not
    a hostile kernel: a kernel runs as the daemon's uid, and cgroup v2
    lets that uid write its own cgroup's files.

    The parsers at the end are pure functions of text, for the tests.
    Engine thread only (detection: once, at start, before other threads
    fork). Not for: cgroup v1, which the daemon leaves alone.
*/
#ifndef KB_CGROUP_H_INCLUDED
#define KB_CGROUP_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kernelbridge/kb_error.h"

/*  The longest name of a kernel's cgroup. */
#define KB_CGROUP_NAME_MAX 64

typedef struct kb_cgroups kb_cgroups_t;
typedef struct kb_cgroup kb_cgroup_t;

/*  What a kernel's cgroup has used and met. Counters count since the
    cgroup was made, over it and every cgroup below it. */
typedef struct {
    uint64_t memory_current;   /* memory.current, bytes */
    uint64_t memory_peak;      /* memory.peak when the kernel has it (5.19+), else the
                                  highest memory.current that kb_cgroup_stats has read */
    uint64_t pids_current;     /* pids.current */
    uint64_t oom_kill;         /* memory.events oom_kill: processes the OOM killer killed */
    uint64_t oom;              /* memory.events oom: times reclaim failed at memory.max */
    uint64_t memory_max_hits;  /* memory.events max: times usage was about to go over max */
    uint64_t memory_high_hits; /* memory.events high: times usage went over memory.high
                                  and the cgroup was throttled into reclaim */
    uint64_t pids_max_hits;    /* pids.events max: forks refused at pids.max */
} kb_cgroup_stats_t;

/*  Look at the daemon's own cgroup (/proc/self/cgroup, /proc/self/mountinfo)
    and, when it is delegated, set it up: move the daemon into <own>/daemon
    and enable "+memory +pids" in <own>/cgroup.subtree_control (both
    skipped when already so). The result, or NULL with why naming the
    first thing missing, e.g. "no cgroup2 mount", "cgroup /x is not
    writable by uid 1000", "controllers memory, pids not available in /x
    (have: cpu io)". Setup that fails half way puts the daemon back where
    it was. The caller logs which mode is in force: kb_cgroups_path, or
    the reason. Caller owns the result. */
kb_cgroups_t *kb_cgroups_detect(kb_error_t *err);

/*  kb_cgroups_detect on given texts of /proc/self/cgroup and mountinfo.
    With KB_CGROUPS_ANY_FS the directories need not be on a cgroup2 file
    system (a tree of plain files, for the tests); never use it on a
    real system. */
#define KB_CGROUPS_ANY_FS 1u
kb_cgroups_t *kb_cgroups_detect_from(const char *proc_cgroup, const char *mountinfo, unsigned flags,
                                     kb_error_t *err);

/*  The cgroup under which kernels go, as a cgroup path ("/user.slice/..."),
    and as a directory ("/sys/fs/cgroup/user.slice/..."). Borrowed. */
const char *kb_cgroups_path(const kb_cgroups_t *self);
const char *kb_cgroups_dir(const kb_cgroups_t *self);

/*  The names of the kernel cgroups under <own> (every child but
    "daemon"), for a restarted daemon to open those of the kernels it
    adopts and remove the others. NULL-terminated, freed with kb_strv_free
    (caller owns); NULL with errno. */
char **kb_cgroups_list(kb_cgroups_t *self);

/*  Close; the daemon stays in <own>/daemon and the kernels' cgroups stay
    (their kernels may be adopted by the next daemon). Sets *self_p to
    NULL; safe on NULL. */
void kb_cgroups_destroy(kb_cgroups_t **self_p);

/*  A new cgroup <own>/<name> with the limits of kb_cgroup_set_limits.
    name: letters, digits, '-' and '_', at most KB_CGROUP_NAME_MAX, not
    starting with '-', not "daemon" (e.g.
    "k-<serial>"). A cgroup of that name that is there already is an
    error (kb_cgroup_open it, or remove it). NULL with err; a cgroup made
    before the failure is removed. owner borrowed, and must outlive the
    result. Caller owns the result. */
kb_cgroup_t *kb_cgroup_new(kb_cgroups_t *owner, const char *name, int64_t memory_max,
                           int64_t pids_max, kb_error_t *err);

/*  The existing cgroup <own>/<name> (a kernel adopted after a restart).
    NULL with err (errno ENOENT when there is none). */
kb_cgroup_t *kb_cgroup_open(kb_cgroups_t *owner, const char *name, kb_error_t *err);

/*  Set the limits: memory.max to memory_max bytes, memory.high to 90% of
    it (so the kernel is throttled into reclaim before the OOM killer
    comes), memory.swap.max to 0 when the file is there (the limit is on
    memory, not moved to swap), pids.max to pids_max. 0 means no limit
    ("max"). 0, or -1 with kb_cgroup_error. */
int kb_cgroup_set_limits(kb_cgroup_t *self, int64_t memory_max, int64_t pids_max);

/*  Move the process pid (all its threads) into the cgroup. Its children
    forked before the move stay where they were: move a kernel right
    after posix_spawn, or start it in the cgroup (kb_cgroup_fd). 0, or -1
    with kb_cgroup_error. */
int kb_cgroup_add(kb_cgroup_t *self, pid_t pid);

/*  A descriptor of the cgroup's directory (O_RDONLY|O_DIRECTORY|O_CLOEXEC)
    for clone3's CLONE_INTO_CGROUP. Borrowed: closed by kb_cgroup_destroy. */
int kb_cgroup_fd(const kb_cgroup_t *self);

const char *kb_cgroup_name(const kb_cgroup_t *self);

/*  Read the cgroup's figures into out (a file that cannot be read leaves
    its fields 0). 0, or -1 with kb_cgroup_error when the cgroup is gone. */
int kb_cgroup_stats(kb_cgroup_t *self, kb_cgroup_stats_t *out);

/*  Kill every process in the cgroup and below it: cgroup.kill (5.14+)
    when there, else SIGKILL to each pid of cgroup.procs, round after
    round, so that children forked meanwhile go too. Then wait for the
    cgroup to be empty (cgroup.events populated 0), at most about 2 s.
    0 when empty, or -1 with kb_cgroup_error. */
int kb_cgroup_kill(kb_cgroup_t *self);

/*  Remove the cgroup and any cgroups below it (made by the kernel
    itself), retrying for about 1 s while they empty (kill first). 0, or
    -1 with kb_cgroup_error. The handle stays for kb_cgroup_destroy. */
int kb_cgroup_remove(kb_cgroup_t *self);

/*  The last error of the cgroup. Borrowed. */
const char *kb_cgroup_error(const kb_cgroup_t *self);

/*  Close; the cgroup itself stays. Sets *self_p to NULL; safe on NULL. */
void kb_cgroup_destroy(kb_cgroup_t **self_p);

/*  Parsers: pure, no file system. Each returns 0, or -1 with err. */

/*  The cgroup v2 path of /proc/<pid>/cgroup text: the "0::<path>" line.
    A path must be absolute, without "." or ".." components (a process
    outside its cgroup namespace's root sees "/.."), without empty ones.
    Errors: no such line ("no cgroup v2 entry in /proc/self/cgroup (a
    cgroup v1 system)"), two of them, a line without two ':'. */
int kb_cgroup_parse_proc(const char *text, char *path, size_t pathlen, kb_error_t *err);

/*  The directory of cgroup path on the cgroup2 mounts of mountinfo text:
    the mount whose root is path or above it (the longest such root), its
    mount point (octal escapes decoded) joined with the rest of path.
    Errors: "no cgroup2 mount", "cgroup /x is outside every cgroup2 mount
    (roots: /y)", "the cgroup2 mount at /m is read-only", a malformed
    line of a cgroup2 mount. */
int kb_cgroup_parse_mountinfo(const char *text, const char *path, char *dir, size_t dirlen,
                              kb_error_t *err);

/*  Whether the cgroup.controllers text of cgroup path lists memory and
    pids. If not, why is "controllers memory, pids not available in /x
    (have: cpu io)" ("have: none" when empty), and when mountinfo (may be
    NULL) shows the missing ones on cgroup v1, it says so: "; memory is
    on cgroup v1 at /sys/fs/cgroup/memory (a hybrid hierarchy)". */
int kb_cgroup_check_controllers(const char *controllers, const char *path, const char *mountinfo,
                                kb_error_t *err);

/*  The value of key in a flat keyed file (memory.events, pids.events,
    cgroup.events: "key value" lines). 1 found, 0 absent, -1 when the
    key's line has no unsigned number. */
int kb_cgroup_parse_keyed(const char *text, const char *key, uint64_t *value);

/*  Whether name may be a kernel's cgroup (see kb_cgroup_new). */
bool kb_cgroup_name_ok(const char *name);

#endif
