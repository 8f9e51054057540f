/*  kb_cli_serve_values.c - the value parsers of `kernelbridge serve`'s flags:
    seconds, counts, sizes in bytes, HOST:PORT, uid ranges and
    comma-separated lists. Each returns 0, or -1 after saying on stderr which
    flag had which bad value. Not for the table of flags itself
    (kb_cli_serve_flags.c). */
#include "cli/kb_cli_serve_values.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int kb_serve_bad_value(const char *what, const char *value, const char *expected)
{
    fprintf(stderr, "kernelbridge serve: %s: bad value '%s' (%s)\n", what, value, expected);
    return -1;
}

int kb_serve_parse_seconds(const char *what, const char *value, double *out)
{
    char *end;
    errno = 0;
    double n = strtod(value, &end);
    if (!*value || *end || errno || !isfinite(n) || n < 0)
        return kb_serve_bad_value(what, value, "a non-negative number of seconds");
    *out = n;
    return 0;
}

int kb_serve_parse_count(const char *what, const char *value, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long n = strtoull(value, &end, 10);
    if (!*value || *end || errno || value[0] == '-')
        return kb_serve_bad_value(what, value, "a non-negative integer");
    *out = (size_t)n;
    return 0;
}

/*  The power of two of a K, M or G suffix (an optional B or iB after it);
    -1 for anything else. */
static int suffix_shift(const char *end)
{
    unsigned shift;
    switch (*end | 0x20) {
        case 'k':
            shift = 10;
            break;
        case 'm':
            shift = 20;
            break;
        case 'g':
            shift = 30;
            break;
        default:
            return -1;
    }
    end++;
    if (strcasecmp(end, "") != 0 && strcasecmp(end, "b") != 0 && strcasecmp(end, "ib") != 0)
        return -1;
    return (int)shift;
}

int kb_serve_parse_bytes(const char *what, const char *value, size_t *out)
{
    const char *expected = "a size in bytes, with an optional K, M or G";
    char *end;
    errno = 0;
    unsigned long long n = strtoull(value, &end, 10);
    if (!*value || errno || value[0] == '-' || end == value)
        return kb_serve_bad_value(what, value, expected);
    int shift = *end ? suffix_shift(end) : 0;
    if (shift < 0)
        return kb_serve_bad_value(what, value, expected);
    if (n > (SIZE_MAX >> shift))
        return kb_serve_bad_value(what, value, "too large");
    *out = (size_t)(n << shift);
    return 0;
}

int kb_serve_parse_listen(const char *flag, const char *value, kb_listen_addr_t *addr)
{
    const char *colon = strrchr(value, ':');
    if (!colon || strlen(value) >= sizeof addr->buf)
        return kb_serve_bad_value(flag, value, "HOST:PORT");
    size_t host_len = (size_t)(colon - value);
    memcpy(addr->buf, value, host_len);
    addr->buf[host_len] = '\0';
    char *host = addr->buf;
    if (host[0] == '[') {
        if (host_len < 2 || host[host_len - 1] != ']')
            return kb_serve_bad_value(flag, value, "[IPv6]:PORT");
        host[host_len - 1] = '\0';
        host++;
    }
    size_t port;
    if (kb_serve_parse_count(flag, colon + 1, &port) < 0 || port > 65535)
        return kb_serve_bad_value(flag, value, "a port from 0 to 65535");
    addr->value = value;
    addr->host = *host ? host : NULL;
    addr->port = (unsigned)port;
    return 0;
}

int kb_serve_parse_list(const char *value, kb_strv_t *list)
{
    for (const char *p = value; p && *p;) {
        size_t n = strcspn(p, ",");
        while (n > 0 && *p == ' ')
            p++, n--;
        if (n > 0 && kb_strv_pushn(list, p, n) != KB_BUF_OK)
            return -1;
        p += n;
        if (*p == ',')
            p++;
    }
    return 0;
}

int kb_serve_parse_range(const kb_serve_range_t *range, const char *value, unsigned *first,
                         unsigned *last)
{
    char *end;
    errno = 0;
    unsigned long long a = strtoull(value, &end, 10);
    if (end == value || *end != '-' || errno || value[0] == '-' || end[1] == '-')
        return kb_serve_bad_value(range->flag, value, range->expected);
    const char *second = end + 1;
    unsigned long long b = strtoull(second, &end, 10);
    if (end == second || *end || errno || a < range->lo || b < a || b > range->hi
        || b - a + 1 < range->count_min || b - a + 1 > range->count_max)
        return kb_serve_bad_value(range->flag, value, range->expected);
    *first = (unsigned)a;
    *last = (unsigned)b;
    return 0;
}
