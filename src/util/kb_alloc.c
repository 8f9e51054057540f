/*  kb_alloc.c - the daemon's own bookkeeping allocations: they succeed or
    the process ends with the place (see kb_alloc.h). */
#include "util/kb_alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kb_oom(const char *file, int line)
{
    fprintf(stderr, "kernelbridge: out of memory at %s:%d\n", file, line);
    fflush(stderr);
    abort();
}

void *kb_xcalloc_at(size_t n, size_t size, const char *file, int line)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        kb_oom(file, line);
    return p;
}

char *kb_xstrdup_at(const char *text, const char *file, int line)
{
    if (!text)
        return NULL;
    char *copy = strdup(text);
    if (!copy)
        kb_oom(file, line);
    return copy;
}
