/*  kb_console.h - private to src/server: the web console of SPEC section
    11 (kb_console.c), served from files compiled into the binary. The
    table of files is generated at build time from web/console by
    cmake/embed.cmake; nothing here reads the disk. */
#ifndef KB_CONSOLE_H_INCLUDED
#define KB_CONSOLE_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

#include "server/kb_http.h"

/*  One embedded file: its name under /console/, its Content-Type, its
    bytes (followed by a NUL that size does not count). */
typedef struct {
    const char *name;
    const char *content_type;
    const unsigned char *data;
    size_t size;
} kb_console_file_t;

/*  Every file of web/console, ended by an entry whose name is NULL
    (generated: kb_console_files.c in the build dir). */
extern const kb_console_file_t kb_console_files[];

#endif
