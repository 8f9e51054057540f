/*  kb_orphans.h - kernels a daemon killed mid-way left behind: processes
    whose command line names a file in the daemon's kernels dir (every
    kernel is started with its connection file there, and a fork of a
    kernel keeps its parent's command line) that the next daemon did not
    adopt. A daemon SIGKILLed in the middle of a fork or a checkpoint
    leaves such a process: made, but recorded nowhere. Engine thread, at
    start (kb_engine_orphans.c), before any request is served.
*/
#ifndef KB_ORPHANS_H_INCLUDED
#define KB_ORPHANS_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/*  Whether pid is a kernel the caller has adopted or started. */
typedef bool(kb_orphan_ours_fn)(void *arg, pid_t pid);

/*  SIGKILL every process (its process group, when it leads one) whose
    command line has an argument inside dir, that is not this process's
    child (a kernel this daemon started) and not ours(arg, pid). The
    number of processes ended; each is logged. */
size_t kb_orphans_end(const char *dir, kb_orphan_ours_fn *ours, void *arg);

/*  Whether the NUL-separated arguments in args[0..len) have one that lies
    inside dir ("dir/..."). */
bool kb_orphans_names_dir(const char *args, size_t len, const char *dir);

#endif
