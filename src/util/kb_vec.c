/*  kb_vec.c - growable arrays of items and of strings (see kb_vec.h).
    Pure code: memory only, no I/O, no globals. */
#include "util/kb_vec.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*  The first allocation of a vector, in items. */
#define KB_VEC_MIN_ALLOC 8

void kb_vec_init(kb_vec_t *self, size_t item_size, size_t cap)
{
    assert(self && item_size > 0);
    *self = (kb_vec_t)KB_VEC_INIT(item_size);
    self->cap = cap;
}

kb_buf_status_t kb_vec_reserve(kb_vec_t *self, size_t more)
{
    assert(self && self->size > 0);
    if (self->cap && more > self->cap - self->len)
        return KB_BUF_OVER_CAP;
    if (more > SIZE_MAX - self->len)
        return KB_BUF_NOMEM;
    size_t alloc;
    kb_buf_status_t status = kb_buf_grow_rule(self->alloc, self->len + more, KB_VEC_MIN_ALLOC,
                                              self->cap, self->size, &alloc);
    if (status != KB_BUF_OK || alloc == self->alloc)
        return status;
    void *items = realloc(self->items, alloc * self->size);
    if (!items)
        return KB_BUF_NOMEM;
    self->items = items;
    self->alloc = alloc;
    return KB_BUF_OK;
}

kb_buf_status_t kb_vec_push(kb_vec_t *self, const void *item)
{
    assert(item);
    kb_buf_status_t status = kb_vec_reserve(self, 1);
    if (status != KB_BUF_OK)
        return status;
    memcpy((char *)self->items + self->len * self->size, item, self->size);
    self->len++;
    return KB_BUF_OK;
}

void *kb_vec_at(const kb_vec_t *self, size_t index)
{
    assert(self && index < self->len);
    return (char *)self->items + index * self->size;
}

void kb_vec_free(kb_vec_t *self)
{
    if (!self)
        return;
    free(self->items);
    self->items = NULL;
    self->len = self->alloc = 0;
}

kb_buf_status_t kb_strv_push(kb_strv_t *self, char *s)
{
    assert(self);
    if (!s)
        return KB_BUF_NOMEM;
    size_t alloc;
    /* One slot for the string, one for the NULL after it. */
    kb_buf_status_t status = self->len > SIZE_MAX - 2
                                 ? KB_BUF_NOMEM
                                 : kb_buf_grow_rule(self->alloc, self->len + 2, KB_VEC_MIN_ALLOC, 0,
                                                    sizeof *self->items, &alloc);
    if (status == KB_BUF_OK && alloc != self->alloc) {
        char **items = realloc(self->items, alloc * sizeof *items);
        if (items) {
            self->items = items;
            self->alloc = alloc;
        } else
            status = KB_BUF_NOMEM;
    }
    if (status != KB_BUF_OK) {
        free(s);
        return status;
    }
    self->items[self->len++] = s;
    self->items[self->len] = NULL;
    return KB_BUF_OK;
}

kb_buf_status_t kb_strv_pushn(kb_strv_t *self, const char *text, size_t len)
{
    assert(text || len == 0);
    return kb_strv_push(self, strndup(text ? text : "", len));
}

char **kb_strv_take(kb_strv_t *self)
{
    assert(self);
    char **items = self->items;
    if (!items && (items = malloc(sizeof *items)))
        items[0] = NULL;
    *self = (kb_strv_t)KB_STRV_INIT;
    return items;
}

void kb_strv_clear(kb_strv_t *self)
{
    if (!self)
        return;
    for (size_t i = 0; i < self->len; i++)
        free(self->items[i]);
    free(self->items);
    *self = (kb_strv_t)KB_STRV_INIT;
}

void kb_strv_free(char **strv)
{
    if (!strv)
        return;
    for (char **s = strv; *s; s++)
        free(*s);
    free(strv);
}
