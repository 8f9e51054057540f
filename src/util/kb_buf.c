/*  kb_buf.c - the growable byte buffer and the growth rule (see kb_buf.h).
    Pure code: memory only, no I/O, no globals. */
#include "util/kb_buf.h"

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/*  The first allocation of a buffer: small strings and short lines fit. */
#define KB_BUF_MIN_ALLOC 64

kb_code_t kb_buf_code(kb_buf_status_t status)
{
    switch (status) {
        case KB_BUF_OK:
            return KB_OK;
        case KB_BUF_NOMEM:
            return KB_ERR_INTERNAL;
        case KB_BUF_OVER_CAP:
            return KB_ERR_PAYLOAD_TOO_LARGE;
    }
    return KB_ERR_INTERNAL;
}

const char *kb_buf_status_str(kb_buf_status_t status)
{
    switch (status) {
        case KB_BUF_OK:
            return "ok";
        case KB_BUF_NOMEM:
            return "out of memory";
        case KB_BUF_OVER_CAP:
            return "over the size limit";
    }
    return "out of memory";
}

kb_buf_status_t kb_buf_grow_rule(size_t have, size_t need, size_t min, size_t limit, size_t unit,
                                 size_t *alloc_out)
{
    assert(unit > 0 && alloc_out);
    if (limit && need > limit)
        return KB_BUF_OVER_CAP;
    if (need > SIZE_MAX / unit)
        return KB_BUF_NOMEM;
    if (need <= have) {
        *alloc_out = have;
        return KB_BUF_OK;
    }
    size_t alloc = have > min ? have : min;
    if (alloc == 0)
        alloc = 1;
    while (alloc < need) {
        if (alloc > SIZE_MAX / 2 / unit) {
            alloc = need; /* doubling would overflow: exactly what is asked */
            break;
        }
        alloc *= 2;
    }
    if (limit && alloc > limit)
        alloc = limit;
    *alloc_out = alloc;
    return KB_BUF_OK;
}

void kb_buf_init(kb_buf_t *self, size_t cap)
{
    assert(self);
    *self = (kb_buf_t)KB_BUF_INIT;
    self->cap = cap;
}

static kb_buf_status_t s_fail(kb_buf_t *self, kb_buf_status_t status)
{
    self->status = status;
    return status;
}

kb_buf_status_t kb_buf_reserve(kb_buf_t *self, size_t more)
{
    assert(self);
    if (self->status != KB_BUF_OK)
        return self->status;
    if (self->cap && more > self->cap - self->len)
        return s_fail(self, KB_BUF_OVER_CAP);
    if (more > SIZE_MAX - 1 - self->len)
        return s_fail(self, KB_BUF_NOMEM);
    size_t need = self->len + more + 1; /* and the NUL */
    size_t alloc;
    kb_buf_status_t status = kb_buf_grow_rule(self->alloc, need, KB_BUF_MIN_ALLOC,
                                              self->cap ? self->cap + 1 : 0, 1, &alloc);
    if (status != KB_BUF_OK)
        return s_fail(self, status);
    if (alloc == self->alloc)
        return KB_BUF_OK;
    char *data = realloc(self->data, alloc);
    if (!data)
        return s_fail(self, KB_BUF_NOMEM);
    if (!self->data)
        data[0] = '\0';
    self->data = data;
    self->alloc = alloc;
    return KB_BUF_OK;
}

/*  An append of size bytes at len crosses into another KB_BUF_AHEAD of a
    big buffer: the whole pages of the next KB_BUF_AHEAD after it (within
    the allocation) are made present by one madvise, instead of a page
    fault each as the appends reach them. A hint: a kernel without
    MADV_POPULATE_WRITE (before Linux 5.14) says EINVAL and nothing
    changes. Contents are not touched. */
static void s_fault_ahead(const kb_buf_t *self, size_t size)
{
    if (self->alloc < KB_BUF_AHEAD_FROM
        || self->len / KB_BUF_AHEAD == (self->len + size) / KB_BUF_AHEAD)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = ((uintptr_t)self->data + self->len + size + page - 1) & ~(page - 1);
    uintptr_t end = (uintptr_t)self->data + self->alloc;
    if (start >= end)
        return;
    if (end - start > KB_BUF_AHEAD)
        end = start + KB_BUF_AHEAD;
    end &= ~(page - 1);
    if (end > start)
        (void)madvise((void *)start, end - start, MADV_POPULATE_WRITE);
}

kb_buf_status_t kb_buf_append(kb_buf_t *self, const void *data, size_t size)
{
    assert(self && (data || size == 0));
    kb_buf_status_t status = kb_buf_reserve(self, size);
    if (status != KB_BUF_OK)
        return status;
    s_fault_ahead(self, size);
    if (size > 0)
        memcpy(self->data + self->len, data, size);
    self->len += size;
    self->data[self->len] = '\0';
    return KB_BUF_OK;
}

kb_buf_status_t kb_buf_puts(kb_buf_t *self, const char *text)
{
    assert(text);
    return kb_buf_append(self, text, strlen(text));
}

kb_buf_status_t kb_buf_putc(kb_buf_t *self, char c)
{
    return kb_buf_append(self, &c, 1);
}

kb_buf_status_t kb_buf_vprintf(kb_buf_t *self, const char *fmt, va_list args)
{
    assert(self && fmt);
    if (self->status != KB_BUF_OK)
        return self->status;
    /* Format into the room there is; only when that is short, grow to the
       length vsnprintf reported and format again. */
    size_t room = self->alloc - (self->data ? self->len : 0);
    va_list copy;
    va_copy(copy, args);
    int n = vsnprintf(self->data ? self->data + self->len : NULL, self->data ? room : 0, fmt, copy);
    va_end(copy);
    if (n < 0) {
        if (self->data)
            self->data[self->len] = '\0';
        return s_fail(self, KB_BUF_NOMEM); /* output longer than INT_MAX */
    }
    if (self->data && (size_t)n < room) {
        self->len += (size_t)n;
        return KB_BUF_OK;
    }
    if (self->data)
        self->data[self->len] = '\0'; /* the partial output is not contents */
    kb_buf_status_t status = kb_buf_reserve(self, (size_t)n);
    if (status != KB_BUF_OK)
        return status;
    vsnprintf(self->data + self->len, (size_t)n + 1, fmt, args);
    self->len += (size_t)n;
    return KB_BUF_OK;
}

kb_buf_status_t kb_buf_printf(kb_buf_t *self, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    kb_buf_status_t status = kb_buf_vprintf(self, fmt, args);
    va_end(args);
    return status;
}

static int s_dump(const char *chunk, size_t size, void *arg)
{
    return kb_buf_append(arg, chunk, size) == KB_BUF_OK ? 0 : -1;
}

kb_buf_status_t kb_buf_append_json(kb_buf_t *self, const json_t *value, size_t flags)
{
    assert(self);
    if (self->status != KB_BUF_OK)
        return self->status;
    if (!value)
        return kb_buf_append(self, "null", 4);
    size_t before = self->len;
    if (json_dump_callback(value, s_dump, self, flags | JSON_ENCODE_ANY) == 0)
        return KB_BUF_OK;
    /* jansson itself fails only when out of memory. */
    kb_buf_status_t status = self->status != KB_BUF_OK ? self->status : KB_BUF_NOMEM;
    self->len = before;
    if (self->data)
        self->data[before] = '\0';
    return s_fail(self, status);
}

const char *kb_buf_cstr(const kb_buf_t *self)
{
    assert(self);
    return self->data ? self->data : "";
}

kb_buf_status_t kb_buf_status(const kb_buf_t *self)
{
    assert(self);
    return self->status;
}

char *kb_buf_take(kb_buf_t *self, size_t *len_out)
{
    assert(self);
    char *data = self->data;
    size_t len = self->len;
    bool failed = self->status != KB_BUF_OK;
    size_t cap = self->cap;
    kb_buf_init(self, cap);
    if (failed) {
        free(data);
        data = NULL;
    } else if (!data && (data = malloc(1)))
        data[0] = '\0';
    if (len_out)
        *len_out = data ? len : 0;
    return data;
}

void kb_buf_recover(kb_buf_t *self)
{
    assert(self);
    self->status = KB_BUF_OK;
}

void kb_buf_truncate(kb_buf_t *self, size_t len)
{
    assert(self && len <= self->len);
    self->len = len;
    if (self->data)
        self->data[len] = '\0';
}

void kb_buf_overwrite(kb_buf_t *self, size_t at, const void *data, size_t size)
{
    assert(self && at <= self->len && size <= self->len - at);
    assert(data || size == 0);
    if (size)
        memcpy(self->data + at, data, size);
}

void kb_buf_reset(kb_buf_t *self)
{
    assert(self);
    self->len = 0;
    self->status = KB_BUF_OK;
    if (self->data)
        self->data[0] = '\0';
}

void kb_buf_trim(kb_buf_t *self, size_t keep)
{
    assert(self);
    kb_buf_reset(self);
    if (self->alloc <= keep)
        return;
    if (keep == 0) {
        free(self->data);
        self->data = NULL;
        self->alloc = 0;
        return;
    }
    char *smaller = realloc(self->data, keep);
    if (smaller) { /* else the larger block stays, emptied */
        self->data = smaller;
        self->alloc = keep;
    }
}

bool kb_buf_take_room(kb_buf_t *self, kb_buf_t *room)
{
    assert(self && room && self != room);
    if (self->status != KB_BUF_OK || !room->data || room->alloc <= self->len
        || room->alloc <= self->alloc)
        return false;
    if (self->data)
        memcpy(room->data, self->data, self->len + 1);
    else
        room->data[0] = '\0';
    free(self->data);
    self->data = room->data;
    self->alloc = room->alloc;
    *room = (kb_buf_t)KB_BUF_INIT;
    return true;
}

size_t kb_buf_written(const kb_buf_t *self)
{
    assert(self);
    if (self->alloc < KB_BUF_AHEAD_FROM)
        return self->alloc;
    return self->len + KB_BUF_AHEAD < self->alloc ? self->len + KB_BUF_AHEAD : self->alloc;
}

void kb_buf_fit(kb_buf_t *self, size_t slack)
{
    assert(self);
    if (!self->data || self->alloc - self->len - 1 <= slack)
        return;
    char *smaller = realloc(self->data, self->len + 1);
    if (smaller) { /* else the larger block stays */
        self->data = smaller;
        self->alloc = self->len + 1;
    }
}

void kb_buf_free(kb_buf_t *self)
{
    if (!self)
        return;
    free(self->data);
    kb_buf_init(self, self->cap);
}

char *kb_buf_sprintf(const char *fmt, ...)
{
    kb_buf_t buf = KB_BUF_INIT;
    va_list args;
    va_start(args, fmt);
    kb_buf_vprintf(&buf, fmt, args);
    va_end(args);
    return kb_buf_take(&buf, NULL);
}

void kb_say(char *buf, size_t len, const char *fmt, ...)
{
    if (!buf || len == 0)
        return;
    va_list args;
    va_start(args, fmt);
    vsnprintf(buf, len, fmt, args);
    va_end(args);
}
