/*  kb_buf.h - the growable byte buffer of every layer, and the one
    out-of-memory policy of kernelbridge: grow by doubling, stop at an
    optional cap, and fail with a typed status (kb_buf_status_t) that the
    caller maps to a KB_ERR_* code with kb_buf_code. Nothing aborts, nothing
    retries, nothing is half-written: a failed call leaves the contents as
    they were.

    What it is for: request bodies, rendered responses and event streams,
    JSON dumps (wire frames, log lines), strings built piece by piece (code
    snippets, argv and env entries). What it is not for: arrays of items
    (kb_vec.h) or anything shared between threads (a buffer has one owner).

    A kb_buf_t is a value, embedded in the struct that owns it, so that a
    buffer costs no allocation of its own (a request record keeps its body
    buffer across the requests of a kept-alive connection). A zeroed
    kb_buf_t (KB_BUF_INIT) is an empty buffer without a cap; its data is
    NULL until the first growth, and a terminating NUL is kept after the
    contents from then on. The fields are read-only outside kb_buf.c. */
#ifndef KB_BUF_H_INCLUDED
#define KB_BUF_H_INCLUDED

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "kernelbridge/kb_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/*  What a growing call returns. Sticky on a kb_buf_t: after a failure
    every later write fails with the same status, changing nothing, until
    kb_buf_recover, kb_buf_reset, kb_buf_trim, kb_buf_take or kb_buf_free;
    so a caller that appends many pieces may check once at the end. */
typedef enum {
    KB_BUF_OK = 0,
    KB_BUF_NOMEM = -1,    /* the allocator said no, or the size does not fit a size_t */
    KB_BUF_OVER_CAP = -2, /* the contents would exceed the buffer's cap */
} kb_buf_status_t;

/*  The error code a status stands for: KB_OK, KB_ERR_INTERNAL (out of
    memory is never the caller's fault) or KB_ERR_PAYLOAD_TOO_LARGE. */
kb_code_t kb_buf_code(kb_buf_status_t status);

/*  "ok", "out of memory", "over the size limit". Static string. */
const char *kb_buf_status_str(kb_buf_status_t status);

/*  The one growth rule of every kb_buf_t and kb_vec_t: the new number of
    units (of unit bytes each) to allocate so that need units fit, when
    have are allocated now: have itself when it fits, else at least min,
    doubled until need fits, never more than limit (0: no limit) as long as
    need is within it. KB_BUF_OVER_CAP when need > limit, KB_BUF_NOMEM when
    need units do not fit a size_t of bytes. */
kb_buf_status_t kb_buf_grow_rule(size_t have, size_t need, size_t min, size_t limit, size_t unit,
                                 size_t *alloc_out);

typedef struct {
    char *data;   /* owned; NULL until the first growth, then NUL-terminated at len */
    size_t len;   /* bytes of contents, not counting the NUL */
    size_t alloc; /* bytes allocated */
    size_t cap;   /* most bytes of contents allowed; 0: no cap */
    kb_buf_status_t status;
} kb_buf_t;

#define KB_BUF_INIT                                                                                \
    {                                                                                              \
        NULL, 0, 0, 0, KB_BUF_OK                                                                   \
    }

/*  An empty buffer whose contents may not exceed cap bytes (0: no cap). */
void kb_buf_init(kb_buf_t *self, size_t cap);

/*  Make room for more bytes after the contents (and the NUL). */
kb_buf_status_t kb_buf_reserve(kb_buf_t *self, size_t more);

/*  A buffer of KB_BUF_AHEAD_FROM bytes or more is filled faster than page
    by page: when an append crosses into another KB_BUF_AHEAD of it, the
    next KB_BUF_AHEAD after the contents are faulted in at once. */
#define KB_BUF_AHEAD ((size_t)2 << 20)
#define KB_BUF_AHEAD_FROM ((size_t)4 << 20)

/*  Append size bytes of data (which may hold NULs; borrowed). A buffer of
    KB_BUF_AHEAD_FROM or more faults in KB_BUF_AHEAD ahead at once (madvise
    MADV_POPULATE_WRITE), so it holds at most KB_BUF_AHEAD of memory beyond
    its contents and its allocation.
    A run's output of 100 MiB taken in: about a fifth less of the engine's
    CPU (docs/PERFORMANCE.md, "The engine's intake"). */
kb_buf_status_t kb_buf_append(kb_buf_t *self, const void *data, size_t size);

/*  Append a C string (borrowed). */
kb_buf_status_t kb_buf_puts(kb_buf_t *self, const char *text);

/*  Append one byte. */
kb_buf_status_t kb_buf_putc(kb_buf_t *self, char c);

/*  Append printf-formatted text. */
kb_buf_status_t kb_buf_printf(kb_buf_t *self, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
kb_buf_status_t kb_buf_vprintf(kb_buf_t *self, const char *fmt, va_list args);

/*  Append the JSON text of value (borrowed; NULL appends "null") dumped
    with jansson's flags (JSON_ENCODE_ANY is added). */
kb_buf_status_t kb_buf_append_json(kb_buf_t *self, const json_t *value, size_t flags);

/*  The contents as a C string: data, or "" while nothing is allocated.
    Borrowed; valid until the next change of the buffer. */
const char *kb_buf_cstr(const kb_buf_t *self);

/*  The status of the last failure since the buffer was last emptied. */
kb_buf_status_t kb_buf_status(const kb_buf_t *self);

/*  Hand over the contents: a NUL-terminated string the caller owns ("" when
    empty), with its length in *len_out (may be NULL). NULL when a write
    failed since the buffer was last emptied (the contents are freed then)
    or when even "" cannot be allocated. Either way the buffer is left
    empty, with nothing allocated and its cap kept. */
char *kb_buf_take(kb_buf_t *self, size_t *len_out);

/*  Forget the failure of an earlier write, keeping the contents (which a
    failure never changes): for a buffer whose later writes go in whether
    or not an earlier one did (a log that drops what does not fit). */
void kb_buf_recover(kb_buf_t *self);

/*  Cut the contents back to their first len bytes (len <= the length),
    for a writer that undoes what it appended; the status and the
    allocation are kept. */
void kb_buf_truncate(kb_buf_t *self, size_t len);

/*  Overwrite size bytes of the contents from offset at (at + size <= the
    length) with data (borrowed), for a writer that fills in a length or
    an offset table once what follows it is written. Cannot fail. */
void kb_buf_overwrite(kb_buf_t *self, size_t at, const void *data, size_t size);

/*  Empty the buffer and clear its status; the allocation is kept. */
void kb_buf_reset(kb_buf_t *self);

/*  Empty the buffer and clear its status, giving back memory beyond keep
    bytes (keep 0: all of it), so that a burst does not stay allocated. */
void kb_buf_trim(kb_buf_t *self, size_t keep);

/*  Move room's allocation under self: self's contents (and NUL) are copied
    into it, self's own allocation is freed, and room is left empty
    (KB_BUF_INIT, its cap gone with it). For memory that was used before
    and is faster to write than fresh memory (kb_runlog's spare). False,
    and nothing changed, when room has no allocation larger than self's
    contents and allocation, or self has failed. */
bool kb_buf_take_room(kb_buf_t *self, kb_buf_t *room);

/*  Bytes of self's allocation that were written or faulted in: its
    contents and the KB_BUF_AHEAD after them for a big buffer, all of a
    small one. */
size_t kb_buf_written(const kb_buf_t *self);

/*  Give back the allocation beyond the contents (and NUL) when it is more
    than slack bytes; the contents stay. Out of memory: nothing changes. */
void kb_buf_fit(kb_buf_t *self, size_t slack);

/*  Free the contents; the buffer is empty and may be used again. */
void kb_buf_free(kb_buf_t *self);

/*  A new string formatted like printf. NULL when out of memory. Caller
    owns the result. */
char *kb_buf_sprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*  Format like printf into the fixed buffer buf of len bytes (cut to fit,
    NUL-terminated): an object's own error string (kb_cgroup's err).
    Nothing when buf is NULL or len 0. */
void kb_say(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#endif
