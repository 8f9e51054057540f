/*  kb_prom.h - Prometheus' text exposition format (version 0.0.4), written
    into a kb_buf_t: a family's HELP and TYPE lines, samples with escaped
    label values, and histograms (cumulative buckets, +Inf, _sum, _count).

    What it is for: getting the format right once, for every layer that
    renders a part of GET /metrics (service/kb_metrics.c, the server's
    kb_metrics_http.c). What it is not for: keeping counters, or choosing
    names (the callers keep the project's rules: kernelbridge_ prefix, base
    units, _total only on counters). Pure functions of their arguments; a
    failed append is sticky on the buffer (kb_buf.h), checked once at the
    end by the caller.
*/
#ifndef KB_PROM_H_INCLUDED
#define KB_PROM_H_INCLUDED

#include <stddef.h>

#include "util/kb_buf.h"

/*  The Content-Type of what these functions write. */
#define KB_PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/*  "# HELP name help" and "# TYPE name type" (type: counter, gauge,
    histogram). help is escaped (backslash, newline). */
void kb_prom_family(kb_buf_t *out, const char *name, const char *type, const char *help);

/*  "name{k1="v1",k2="v2"} value": labels is NULL or a NULL-terminated
    list of key, value, key, value...; values are escaped (backslash,
    double quote, newline) and bytes that are not well-formed UTF-8 become
    '?'. A value that is a whole number up to 2^53 is written without a
    fraction. */
void kb_prom_sample(kb_buf_t *out, const char *name, const char *const *labels, double value);

/*  The same for a counter's integer value, written exactly. */
void kb_prom_sample_u(kb_buf_t *out, const char *name, const char *const *labels,
                      unsigned long long value);

/*  One histogram: n upper bounds (ascending) and n + 1 counts, the
    observations in each bucket alone (the last: above every bound), and
    the sum of the observations. Written as name_bucket{...,le="b"} with
    cumulative counts, le="+Inf", name_sum and name_count. labels as for
    kb_prom_sample ("le" is added). */
void kb_prom_histogram(kb_buf_t *out, const char *name, const char *const *labels,
                       const double *bounds, size_t n, const unsigned long long *counts,
                       double sum);

#endif
