/*  kb_cli_serve_values.h - value parsers of `kernelbridge serve`'s flags.
    what is the flag's name as messages show it ("--max-body"); each returns
    0, or -1 after a message on stderr. */
#ifndef KB_CLI_SERVE_VALUES_H_INCLUDED
#define KB_CLI_SERVE_VALUES_H_INCLUDED

#include <stddef.h>

#include "cli/kb_cli_serve_flags.h"

/*  Say that what's value is bad and what was expected; returns -1. */
int kb_serve_bad_value(const char *what, const char *value, const char *expected);

/*  A non-negative, finite number of seconds. */
int kb_serve_parse_seconds(const char *what, const char *value, double *out);

/*  A non-negative decimal integer. */
int kb_serve_parse_count(const char *what, const char *value, size_t *out);

/*  An integer with an optional K, M or G suffix (powers of 1024). */
int kb_serve_parse_bytes(const char *what, const char *value, size_t *out);

/*  "HOST:PORT", "[V6]:PORT" or ":PORT" into addr (value borrowed). */
int kb_serve_parse_listen(const char *flag, const char *value, kb_listen_addr_t *addr);

/*  "A-B" with lo <= A <= B <= hi and count_min <= B - A + 1 <= count_max;
    otherwise a message for flag that says expected. */
typedef struct {
    const char *flag;
    unsigned long long lo, hi, count_min, count_max;
    const char *expected;
} kb_serve_range_t;
int kb_serve_parse_range(const kb_serve_range_t *range, const char *value, unsigned *first,
                         unsigned *last);

/*  A comma-separated list (spaces before an item ignored) appended to
    list; -1 when out of memory, with no message. value may be NULL. */
int kb_serve_parse_list(const char *value, kb_strv_t *list);

#endif
