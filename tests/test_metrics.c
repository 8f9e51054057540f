/*  test_metrics.c - the engine's counters for GET /metrics (kb_metrics):
    runs by language and reason with their histogram, kernel starts and
    dropped messages through the kernels' observer, the bound on distinct
    label values, the gauges of a sample, and the whole text checked by
    Debian's promtool when it is installed. */
#include "kb_testutil.h"

#include <unistd.h>

#include "service/ops/kb_metrics.h"

#define PROMTOOL "/usr/bin/promtool"

static char *s_render(const kb_metrics_t *metrics, const kb_metrics_sample_t *sample)
{
    kb_buf_t out = KB_BUF_INIT;
    kb_metrics_render(metrics, sample, &out);
    CHECK(kb_buf_status(&out) == KB_BUF_OK);
    return kb_buf_take(&out, NULL);
}

static bool s_has(const char *text, const char *line)
{
    char *want = kb_buf_sprintf("\n%s\n", line);
    bool found = strstr(text, want) != NULL;
    if (!found)
        fprintf(stderr, "missing line: %s\n", line);
    free(want);
    return found;
}

static void test_runs(void)
{
    kb_metrics_t *metrics = kb_metrics_new();
    kb_metrics_run_ended(metrics, "python", KB_REASON_EXITED, 0.003);
    kb_metrics_run_ended(metrics, "python", KB_REASON_EXITED, 0.2);
    kb_metrics_run_ended(metrics, "python", KB_REASON_TIMED_OUT, 1000);
    kb_metrics_run_ended(metrics, "r", KB_REASON_FAILED, 0);
    kb_metrics_run_ended(metrics, "r", KB_REASON_NONE, 1);     /* not an end: ignored */
    kb_metrics_run_ended(NULL, "python", KB_REASON_EXITED, 1); /* no metrics: nothing */
    kb_metrics_sample_t sample = { 0 };
    char *text = s_render(metrics, &sample);
    CHECK(s_has(text, "kernelbridge_runs_total{language=\"python\",reason=\"exited\"} 2"));
    CHECK(s_has(text, "kernelbridge_runs_total{language=\"python\",reason=\"timed_out\"} 1"));
    CHECK(s_has(text, "kernelbridge_runs_total{language=\"python\",reason=\"failed\"} 0"));
    CHECK(s_has(text, "kernelbridge_runs_total{language=\"r\",reason=\"failed\"} 1"));
    CHECK(s_has(text, "kernelbridge_runs_total{language=\"r\",reason=\"exited\"} 0"));
    CHECK(s_has(text,
                "kernelbridge_run_duration_seconds_bucket{language=\"python\",le=\"0.005\"} 1"));
    CHECK(
        s_has(text, "kernelbridge_run_duration_seconds_bucket{language=\"python\",le=\"0.25\"} 2"));
    CHECK(
        s_has(text, "kernelbridge_run_duration_seconds_bucket{language=\"python\",le=\"300\"} 2"));
    CHECK(
        s_has(text, "kernelbridge_run_duration_seconds_bucket{language=\"python\",le=\"+Inf\"} 3"));
    CHECK(s_has(text, "kernelbridge_run_duration_seconds_sum{language=\"python\"} 1000.203"));
    CHECK(s_has(text, "kernelbridge_run_duration_seconds_count{language=\"r\"} 1"));
    free(text);
    kb_metrics_destroy(&metrics);
    CHECK(metrics == NULL);
    kb_metrics_destroy(&metrics);
}

static void test_observer(void)
{
    kb_metrics_t *metrics = kb_metrics_new();
    kb_kernel_observer_t *observer = kb_metrics_observer(metrics);
    observer->started(observer, "python3", KB_START_OK, 1.5);
    observer->started(observer, "python3", KB_START_TIMEOUT, 60);
    observer->started(observer, "ir", KB_START_CANCELLED, 0.2);
    kb_metrics_start_failed(metrics, "python3");
    observer->dropped(observer, KB_DROP_BAD_SIGNATURE);
    observer->dropped(observer, KB_DROP_BAD_SIGNATURE);
    observer->dropped(observer, KB_DROP_TOO_MANY_PARTS);
    unsigned long long by_reason[KB_DROP_REASONS];
    CHECK(kb_metrics_dropped(metrics, by_reason) == 3);
    CHECK(by_reason[KB_DROP_BAD_SIGNATURE] == 2 && by_reason[KB_DROP_MALFORMED] == 0);
    CHECK(kb_metrics_dropped(metrics, NULL) == 3);
    kb_metrics_sample_t sample = { 0 };
    char *text = s_render(metrics, &sample);
    CHECK(
        s_has(text, "kernelbridge_kernel_starts_total{kernel_name=\"python3\",outcome=\"ok\"} 1"));
    CHECK(s_has(text,
                "kernelbridge_kernel_starts_total{kernel_name=\"python3\",outcome=\"failed\"} 1"));
    CHECK(s_has(text,
                "kernelbridge_kernel_starts_total{kernel_name=\"python3\",outcome=\"timeout\"} 1"));
    CHECK(s_has(text,
                "kernelbridge_kernel_starts_total{kernel_name=\"ir\",outcome=\"cancelled\"} 1"));
    /* Only the starts that became ready are timed. */
    CHECK(s_has(text, "kernelbridge_kernel_start_duration_seconds_bucket{le=\"1\"} 0"));
    CHECK(s_has(text, "kernelbridge_kernel_start_duration_seconds_bucket{le=\"2\"} 1"));
    CHECK(s_has(text, "kernelbridge_kernel_start_duration_seconds_sum 1.5"));
    CHECK(s_has(text, "kernelbridge_kernel_start_duration_seconds_count 1"));
    CHECK(s_has(text, "kernelbridge_kernel_messages_dropped_total{reason=\"bad_signature\"} 2"));
    CHECK(s_has(text, "kernelbridge_kernel_messages_dropped_total{reason=\"too_many_parts\"} 1"));
    CHECK(s_has(text, "kernelbridge_kernel_messages_dropped_total{reason=\"malformed\"} 0"));
    free(text);
    kb_metrics_destroy(&metrics);
}

/*  Past KB_METRICS_NAMES_MAX distinct languages, the rest count as one,
    "other": a label cannot grow without bound. */
static void test_names_are_bounded(void)
{
    kb_metrics_t *metrics = kb_metrics_new();
    for (int i = 0; i < 3 * KB_METRICS_NAMES_MAX; i++) {
        char name[32];
        snprintf(name, sizeof name, "lang%d", i);
        kb_metrics_run_ended(metrics, name, KB_REASON_EXITED, 0.1);
    }
    kb_metrics_run_ended(metrics, "lang0", KB_REASON_EXITED, 0.1);
    kb_metrics_sample_t sample = { 0 };
    char *text = s_render(metrics, &sample);
    CHECK(s_has(text, "kernelbridge_runs_total{language=\"lang0\",reason=\"exited\"} 2"));
    char line[128];
    snprintf(line, sizeof line, "kernelbridge_runs_total{language=\"other\",reason=\"exited\"} %d",
             3 * KB_METRICS_NAMES_MAX - (KB_METRICS_NAMES_MAX - 1));
    CHECK(s_has(text, line));
    snprintf(line, sizeof line, "language=\"lang%d\"", KB_METRICS_NAMES_MAX - 1);
    CHECK(strstr(text, line) == NULL);
    free(text);
    kb_metrics_destroy(&metrics);
}

static void test_sample_gauges(void)
{
    kb_metrics_t *metrics = kb_metrics_new();
    const char *states[] = { "idle", "busy", "idle", "starting", "weird" };
    json_t *pool
        = json_pack("{s:{s:i, s:i}, s:{s:i}}", "python", "ready", 2, "target", 2, "r", "ready", 0);
    kb_budget_t budget = { .limit = 1 << 20 };
    atomic_init(&budget.used, 1234);
    budget.sent[KB_OUTPUT_STDOUT] = 10;
    budget.sent[KB_OUTPUT_DISPLAY] = 99;
    kb_metrics_sample_t sample
        = { .context_states = states, .contexts = 5, .pool = pool, .budget = &budget };
    char *text = s_render(metrics, &sample);
    CHECK(s_has(text, "kernelbridge_contexts{state=\"idle\"} 2"));
    CHECK(s_has(text, "kernelbridge_contexts{state=\"busy\"} 1"));
    CHECK(s_has(text, "kernelbridge_contexts{state=\"starting\"} 1"));
    CHECK(s_has(text, "kernelbridge_contexts{state=\"dead\"} 0"));
    CHECK(s_has(text, "kernelbridge_pool_ready{language=\"python\"} 2"));
    CHECK(s_has(text, "kernelbridge_pool_ready{language=\"r\"} 0"));
    CHECK(s_has(text, "kernelbridge_output_bytes_total{channel=\"stdout\"} 10"));
    CHECK(s_has(text, "kernelbridge_output_bytes_total{channel=\"stderr\"} 0"));
    CHECK(s_has(text, "kernelbridge_output_bytes_total{channel=\"display\"} 99"));
    CHECK(s_has(text, "kernelbridge_output_memory_bytes 1234"));
    CHECK(s_has(text, "kernelbridge_output_memory_limit_bytes 1048576"));
    free(text);
    json_decref(pool);
    kb_metrics_destroy(&metrics);
}

/*  The whole text, with every family, through promtool's own checks. */
static void test_promtool_accepts_it(void)
{
    if (access(PROMTOOL, X_OK) != 0) {
        fprintf(stderr, "%s is not installed: not checked\n", PROMTOOL);
        return;
    }
    kb_metrics_t *metrics = kb_metrics_new();
    kb_metrics_run_ended(metrics, "python", KB_REASON_EXITED, 0.01);
    kb_metrics_run_ended(metrics, "we\"ird\\lang", KB_REASON_MEMORY_LIMIT, 2);
    kb_kernel_observer_t *observer = kb_metrics_observer(metrics);
    observer->started(observer, "python3", KB_START_OK, 0.7);
    observer->dropped(observer, KB_DROP_REPLAYED);
    const char *states[] = { "idle" };
    json_t *pool = json_pack("{s:{s:i}}", "python", "ready", 1);
    kb_budget_t budget = { .limit = 0 };
    atomic_init(&budget.used, 0);
    kb_metrics_sample_t sample
        = { .context_states = states, .contexts = 1, .pool = pool, .budget = &budget };
    char *text = s_render(metrics, &sample);
    char *dir = kb_test_tmpdir();
    char *path = kb_buf_sprintf("%s/metrics.txt", dir);
    FILE *file = fopen(path, "w");
    CHECK(file && fputs(text, file) >= 0 && fclose(file) == 0);
    char *command = kb_buf_sprintf(PROMTOOL " check metrics < %s 2>&1; echo rc=$?", path);
    char *output = kb_test_capture(command);
    CHECK_STR(output, "rc=0\n");
    free(output);
    free(command);
    free(path);
    kb_test_rmtree(dir);
    free(dir);
    free(text);
    json_decref(pool);
    kb_metrics_destroy(&metrics);
}

int main(void)
{
    RUN_TEST(test_runs);
    RUN_TEST(test_observer);
    RUN_TEST(test_names_are_bounded);
    RUN_TEST(test_sample_gauges);
    RUN_TEST(test_promtool_accepts_it);
    return kb_test_summary();
}
