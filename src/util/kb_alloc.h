/*  kb_alloc.h - allocation of the daemon's own bookkeeping, under the one
    out-of-memory policy (docs/ARCHITECTURE.md, "Memory"):

    - memory whose size a client or a kernel decides (a body, a run's
      output, a message, a buffer that grows with input) goes through
      kb_buf_t / kb_vec_t, whose failure is a typed error the caller
      reports (INTERNAL_ERROR or PAYLOAD_TOO_LARGE); nothing is lost;
    - a small allocation of fixed size for the daemon's own records (an
      object, a copy of an id, a czmq container) that fails ends the
      process at once with a message naming the place, as czmq's own
      allocator does: half-made bookkeeping is worse than a restart,
      from which the state dir brings the contexts back.

    kb_x* never return NULL. */
#ifndef KB_ALLOC_H_INCLUDED
#define KB_ALLOC_H_INCLUDED

#include <stddef.h>

/*  Writes "out of memory at FILE:LINE" to stderr and aborts. */
_Noreturn void kb_oom(const char *file, int line);

void *kb_xcalloc_at(size_t n, size_t size, const char *file, int line);
char *kb_xstrdup_at(const char *text, const char *file, int line);

/*  Zeroed memory for n objects of size bytes. Caller frees. */
#define kb_xcalloc(n, size) kb_xcalloc_at((n), (size), __FILE__, __LINE__)
/*  A copy of text (NULL for NULL). Caller frees. */
#define kb_xstrdup(text) kb_xstrdup_at((text), __FILE__, __LINE__)
/*  Aborts with the place when ptr (a czmq container just made, say) is NULL. */
#define KB_NOT_NULL(ptr) ((ptr) ? (void)0 : kb_oom(__FILE__, __LINE__))

#endif
