/*  kb_kernel_memory.h - the kernels' resident memory as /health shows it
    (RSS and PSS, from /proc/<pid>/smaps_rollup), kept per pid.
    Reading smaps_rollup walks the process's whole address space: about
    half a millisecond per Python kernel, so a /health that read every
    kernel cost 60 ms with 100 of them. A figure is kept for
    KB_KERNEL_MEMORY_TTL_MS; a pass (one /health) reads every kernel it has
    no figure of, and at most KB_KERNEL_MEMORY_READS of those whose figure
    is older, so its cost does not grow with the number of kernels; with
    n kernels a figure is at most the TTL plus n / READS passes old.
    What it is not for: a context's own memory and the memory limit's
    checks (kb_watch_usage reads them fresh). Engine thread only. */
#ifndef KB_KERNEL_MEMORY_H_INCLUDED
#define KB_KERNEL_MEMORY_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/kb_vec.h"

#define KB_KERNEL_MEMORY_TTL_MS 10000
#define KB_KERNEL_MEMORY_READS 8

typedef struct {
    kb_vec_t entries; /* kb_kernel_memory_entry (kb_kernel_memory.c), in the order last asked */
    size_t next;      /* where the next pid is looked for first */
    unsigned reads;   /* older figures read again in this pass */
    unsigned pass;    /* counts passes: an entry not asked in one is dropped at its end */
    int64_t now_ms;
} kb_kernel_memory_t;

/*  An empty cache, valid until kb_kernel_memory_free. */
void kb_kernel_memory_init(kb_kernel_memory_t *self);

/*  Free the entries; the cache may be used again. */
void kb_kernel_memory_free(kb_kernel_memory_t *self);

/*  Begin a pass, at now_ms (monotonic). */
void kb_kernel_memory_begin(kb_kernel_memory_t *self, int64_t now_ms);

/*  The RSS and PSS (bytes) of pid, kept or read now; false when it cannot
    be read (the process is gone). */
bool kb_kernel_memory_of(kb_kernel_memory_t *self, pid_t pid, uint64_t *rss, uint64_t *pss);

/*  End the pass: the figures of pids it did not ask for are dropped. */
void kb_kernel_memory_end(kb_kernel_memory_t *self);

#endif
