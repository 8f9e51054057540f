/*  kb_vec.h - growable arrays under kb_buf.h's out-of-memory policy (the
    same growth rule, the same typed kb_buf_status_t): kb_vec_t holds items
    of one fixed size, kb_strv_t owned strings kept NULL-terminated, ready
    to be an argv or an environment.

    Not for bytes (kb_buf_t) and not for lookups by key (czmq's zhashx).
    Like kb_buf_t, both are values embedded in their owner, valid when
    zeroed (with an item size for kb_vec_t); not thread-safe. */
#ifndef KB_VEC_H_INCLUDED
#define KB_VEC_H_INCLUDED

#include <stddef.h>

#include "util/kb_buf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    void *items;  /* owned; len items of size bytes; NULL until the first growth */
    size_t len;   /* items in use */
    size_t alloc; /* items allocated */
    size_t size;  /* bytes per item, fixed at init */
    size_t cap;   /* most items allowed; 0: no cap */
} kb_vec_t;

#define KB_VEC_INIT(item_size)                                                                     \
    {                                                                                              \
        NULL, 0, 0, (item_size), 0                                                                 \
    }

/*  An empty vector of items of item_size bytes, at most cap of them (0: no
    cap). */
void kb_vec_init(kb_vec_t *self, size_t item_size, size_t cap);

/*  Make room for more items after the ones in use. */
kb_buf_status_t kb_vec_reserve(kb_vec_t *self, size_t more);

/*  Append a copy of the size bytes at item (borrowed). */
kb_buf_status_t kb_vec_push(kb_vec_t *self, const void *item);

/*  The index-th item, index < len. Borrowed; valid until the vector grows. */
void *kb_vec_at(const kb_vec_t *self, size_t index);

/*  Free the array (not what its items point to); the vector is empty and
    may be used again. Safe on NULL. */
void kb_vec_free(kb_vec_t *self);

typedef struct {
    char **items; /* owned strings, then NULL; items is NULL until the first push */
    size_t len;   /* strings before the NULL */
    size_t alloc; /* slots allocated, the NULL's included */
} kb_strv_t;

#define KB_STRV_INIT                                                                               \
    {                                                                                              \
        NULL, 0, 0                                                                                 \
    }

/*  Append s, taking ownership of it also when the push fails (then s is
    freed). A NULL s fails as out of memory, so that the result of strdup
    or kb_buf_sprintf may be pushed unchecked. The owner may replace
    items[i] (i < len) itself, freeing the string it replaces. */
kb_buf_status_t kb_strv_push(kb_strv_t *self, char *s);

/*  Append a copy of text[0..len). */
kb_buf_status_t kb_strv_pushn(kb_strv_t *self, const char *text, size_t len);

/*  Hand over the NULL-terminated array (just { NULL } when empty), to be
    freed with kb_strv_free; NULL when out of memory. The vector is left
    empty. Caller owns the result. */
char **kb_strv_take(kb_strv_t *self);

/*  Free every string and the array; the vector is empty and may be used
    again. Safe on NULL. */
void kb_strv_clear(kb_strv_t *self);

/*  Free a NULL-terminated string array and its strings. Safe on NULL. */
void kb_strv_free(char **strv);

#ifdef __cplusplus
}
#endif

#endif
