/*  kernelspec_testlib.h - the few file helpers test_kernelspec.c and
    test_kernelspecs.c share: directories and kernel.json files in private
    temp dirs. */
#ifndef KERNELSPEC_TESTLIB_H_INCLUDED
#define KERNELSPEC_TESTLIB_H_INCLUDED

#include "kb_testutil.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/*  mkdir -p */
static inline void make_dirs(const char *path)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(buf, 0700);
            *p = '/';
        }
    mkdir(buf, 0700);
}

static inline void write_file(const char *path, const char *text)
{
    FILE *file = fopen(path, "w");
    CHECK(file != NULL);
    if (!file)
        return;
    fputs(text, file);
    fclose(file);
}

/*  Write <root>/kernels/<name>/kernel.json holding text. */
static inline void write_spec(const char *root, const char *name, const char *text)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/kernels/%s", root, name);
    make_dirs(path);
    strncat(path, "/kernel.json", sizeof path - strlen(path) - 1);
    write_file(path, text);
}

static inline char *join(const char *a, const char *b)
{
    char *out = NULL;
    if (asprintf(&out, "%s/%s", a, b) < 0)
        return NULL;
    return out;
}

#endif
