/*  test_prom.c - Prometheus' text format as kb_prom writes it: family
    headers, label escaping, value formatting, histograms. */
#include "kb_testutil.h"

#include <math.h>

#include "util/kb_prom.h"

/*  What the calls in fn wrote, as a string the test frees. */
static char *s_written(void (*fn)(kb_buf_t *out))
{
    kb_buf_t out = KB_BUF_INIT;
    fn(&out);
    CHECK(kb_buf_status(&out) == KB_BUF_OK);
    return kb_buf_take(&out, NULL);
}

static void s_family(kb_buf_t *out)
{
    kb_prom_family(out, "kb_x_total", "counter", "Back\\slash and\nnewline \"kept\".");
}

static void test_family_lines(void)
{
    char *text = s_written(s_family);
    CHECK_STR(text, "# HELP kb_x_total Back\\\\slash and\\nnewline \"kept\".\n"
                    "# TYPE kb_x_total counter\n");
    free(text);
}

static void s_samples(kb_buf_t *out)
{
    kb_prom_sample(out, "a", NULL, 3);
    kb_prom_sample(out, "b", NULL, 0.005);
    kb_prom_sample(out, "c", NULL, 1.0 / 3);
    kb_prom_sample(out, "d", NULL, NAN);
    kb_prom_sample(out, "e", NULL, -INFINITY);
    kb_prom_sample(out, "f", NULL, 1e300);
    kb_prom_sample_u(out, "g", NULL, 18446744073709551615ull);
    const char *labels[] = { "k", "a\"b\\c\nd", "z", "\xff\xfeok\xc3\xa9", NULL };
    kb_prom_sample_u(out, "h", labels, 7);
    const char *empty[] = { NULL };
    kb_prom_sample_u(out, "i", empty, 1);
}

static void test_samples(void)
{
    char *text = s_written(s_samples);
    CHECK_STR(text, "a 3\n"
                    "b 0.005\n"
                    "c 0.3333333333333333\n"
                    "d NaN\n"
                    "e -Inf\n"
                    "f 1e+300\n"
                    "g 18446744073709551615\n"
                    "h{k=\"a\\\"b\\\\c\\nd\",z=\"??ok\xc3\xa9\"} 7\n"
                    "i 1\n");
    free(text);
}

static void s_histogram(kb_buf_t *out)
{
    static const double bounds[] = { 0.1, 2.5 };
    static const unsigned long long counts[] = { 1, 0, 2 };
    const char *labels[] = { "language", "python", NULL };
    kb_prom_histogram(out, "kb_h_seconds", labels, bounds, 2, counts, 10.25);
    kb_prom_histogram(out, "kb_bare_seconds", NULL, bounds, 2, counts, 0);
}

static void test_histogram(void)
{
    char *text = s_written(s_histogram);
    CHECK_STR(text, "kb_h_seconds_bucket{language=\"python\",le=\"0.1\"} 1\n"
                    "kb_h_seconds_bucket{language=\"python\",le=\"2.5\"} 1\n"
                    "kb_h_seconds_bucket{language=\"python\",le=\"+Inf\"} 3\n"
                    "kb_h_seconds_sum{language=\"python\"} 10.25\n"
                    "kb_h_seconds_count{language=\"python\"} 3\n"
                    "kb_bare_seconds_bucket{le=\"0.1\"} 1\n"
                    "kb_bare_seconds_bucket{le=\"2.5\"} 1\n"
                    "kb_bare_seconds_bucket{le=\"+Inf\"} 3\n"
                    "kb_bare_seconds_sum 0\n"
                    "kb_bare_seconds_count 3\n");
    free(text);
}

int main(void)
{
    RUN_TEST(test_family_lines);
    RUN_TEST(test_samples);
    RUN_TEST(test_histogram);
    return kb_test_summary();
}
