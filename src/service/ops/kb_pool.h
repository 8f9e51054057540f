/*  kb_pool.h - warm kernels: started and ready before anyone asks, so that
    creating a context or running isolated code takes a kernel at once.
    The pool gets and gives back kernels through a launcher (kb_kernel_source.h)
    and knows nothing else of the engine. Engine thread only.
*/
#ifndef KB_POOL_H_INCLUDED
#define KB_POOL_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "kernel/kb_kernel.h"
#include "kernelbridge/kb_error.h"
#include "service/engine/kb_kernel_source.h"
#include "util/kb_loop.h"

typedef struct kb_pool kb_pool_t;

/*  A pool of the NULL-terminated entries "language=count" (or
    "kernelspec=count"; count 0-64), nothing started yet. launcher and loop
    are borrowed. NULL with err (BAD_REQUEST) for a bad entry. */
kb_pool_t *kb_pool_new(const char *const *entries, const kb_kernel_source_t *launcher,
                       kb_loop_t *loop, kb_error_t *err);

/*  Safe on NULL; the pool must be stopped. Sets *self_p NULL. */
void kb_pool_destroy(kb_pool_t **self_p);

/*  Start the kernels of every entry (within the launcher's room). */
void kb_pool_start(kb_pool_t *self);

/*  Give every kernel back to the launcher; no more refills. */
void kb_pool_stop(kb_pool_t *self);

/*  A ready pooled kernel of that kernelspec, now the caller's; or NULL. A
    refill follows on a later loop turn. */
kb_kernel_t *kb_pool_take(kb_pool_t *self, const char *spec_name);

/*  Take a kernel being adopted (kb_kernel_adopt) into the slot of its
    kernelspec, when that slot has room: it is ready once it answers.
    False, and the kernel is still the caller's, when no slot wants it. */
bool kb_pool_adopt(kb_pool_t *self, kb_kernel_t *kernel);

/*  Kernels in the pool not ready yet (starting, or being adopted). */
size_t kb_pool_starting(kb_pool_t *self);

/*  Whether a kernel in the pool (ready or starting) has process pid. */
bool kb_pool_owns(kb_pool_t *self, pid_t pid);

/*  Kernels in the pool, ready or starting. */
size_t kb_pool_size(kb_pool_t *self);

/*  The pids of the kernels in the pool, ready or starting (those spawned:
    pid > 0), as a JSON array. Caller owns; NULL: out of memory. */
json_t *kb_pool_pids(kb_pool_t *self);

/*  A kernel went away: refill whatever the limit kept from refilling. */
void kb_pool_poke(kb_pool_t *self);

/*  Whether a ready kernel of that kernelspec waits in the pool. */
bool kb_pool_has(kb_pool_t *self, const char *spec_name);

/*  Give up one pooled kernel to make room; false when the pool is empty. */
bool kb_pool_evict(kb_pool_t *self);

/*  {key: {target, ready, starting, kernel_name, ready_pids, failures}}. */
json_t *kb_pool_json(kb_pool_t *self);

#endif
