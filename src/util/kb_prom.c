/*  kb_prom.c - Prometheus' text exposition format: family headers,
    samples, histograms. See kb_prom.h. */
#include "util/kb_prom.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/kb_utf8.h"

/*  The shortest of %.15g, %.16g, %.17g that reads back as value. */
static void s_format(char *buf, size_t size, double value)
{
    for (int precision = 15; precision <= 17; precision++) {
        snprintf(buf, size, "%.*g", precision, value);
        if (strtod(buf, NULL) == value)
            return;
    }
}

static void s_escape(kb_buf_t *out, const char *text, bool quotes)
{
    size_t len = strlen(text);
    for (size_t i = 0; i < len;) {
        size_t n = kb_utf8_sequence((const unsigned char *)text + i, len - i, NULL);
        if (n == 0) {
            kb_buf_putc(out, '?');
            i++;
            continue;
        }
        char c = text[i];
        if (c == '\\')
            kb_buf_puts(out, "\\\\");
        else if (c == '\n')
            kb_buf_puts(out, "\\n");
        else if (c == '"' && quotes)
            kb_buf_puts(out, "\\\"");
        else
            kb_buf_append(out, text + i, n);
        i += n;
    }
}

void kb_prom_family(kb_buf_t *out, const char *name, const char *type, const char *help)
{
    kb_buf_printf(out, "# HELP %s ", name);
    s_escape(out, help, false);
    kb_buf_printf(out, "\n# TYPE %s %s\n", name, type);
}

/*  name{labels[,extra_key="extra_value"]} */
static void s_series(kb_buf_t *out, const char *name, const char *const *labels,
                     const char *extra_key, const char *extra_value)
{
    kb_buf_puts(out, name);
    bool any = (labels && labels[0]) || extra_key;
    if (!any)
        return;
    kb_buf_putc(out, '{');
    size_t pairs = 0;
    for (size_t i = 0; labels && labels[i] && labels[i + 1]; i += 2, pairs++) {
        kb_buf_printf(out, "%s%s=\"", pairs ? "," : "", labels[i]);
        s_escape(out, labels[i + 1], true);
        kb_buf_putc(out, '"');
    }
    if (extra_key)
        kb_buf_printf(out, "%s%s=\"%s\"", pairs ? "," : "", extra_key, extra_value);
    kb_buf_putc(out, '}');
}

static void s_value(kb_buf_t *out, double value)
{
    if (isnan(value))
        kb_buf_puts(out, " NaN\n");
    else if (isinf(value))
        kb_buf_puts(out, value > 0 ? " +Inf\n" : " -Inf\n");
    else if (value == floor(value) && fabs(value) <= 9007199254740992.0)
        kb_buf_printf(out, " %.0f\n", value);
    else {
        char text[40];
        s_format(text, sizeof text, value);
        kb_buf_printf(out, " %s\n", text);
    }
}

void kb_prom_sample(kb_buf_t *out, const char *name, const char *const *labels, double value)
{
    s_series(out, name, labels, NULL, NULL);
    s_value(out, value);
}

void kb_prom_sample_u(kb_buf_t *out, const char *name, const char *const *labels,
                      unsigned long long value)
{
    s_series(out, name, labels, NULL, NULL);
    kb_buf_printf(out, " %llu\n", value);
}

void kb_prom_histogram(kb_buf_t *out, const char *name, const char *const *labels,
                       const double *bounds, size_t n, const unsigned long long *counts, double sum)
{
    char series[128], le[40];
    snprintf(series, sizeof series, "%s_bucket", name);
    unsigned long long cumulative = 0;
    for (size_t i = 0; i <= n; i++) {
        cumulative += counts[i];
        if (i < n)
            s_format(le, sizeof le, bounds[i]);
        s_series(out, series, labels, "le", i < n ? le : "+Inf");
        kb_buf_printf(out, " %llu\n", cumulative);
    }
    snprintf(series, sizeof series, "%s_sum", name);
    kb_prom_sample(out, series, labels, sum);
    snprintf(series, sizeof series, "%s_count", name);
    kb_prom_sample_u(out, series, labels, cumulative);
}
