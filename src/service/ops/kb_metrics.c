/*  kb_metrics.c - the engine's counters and their Prometheus text. See
    kb_metrics.h. Engine thread only. */
#include "service/ops/kb_metrics.h"

#include <stdlib.h>
#include <string.h>

#include "util/kb_prom.h"

/*  Buckets (seconds): a run takes milliseconds to minutes; a kernel takes
    a fraction of a second (from the pool's point of view) to a minute. */
static const double s_run_bounds[]
    = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300 };
#define KB_RUN_BUCKETS (sizeof s_run_bounds / sizeof s_run_bounds[0])
static const double s_start_bounds[] = { 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60 };
static const double s_fork_bounds[] = { 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5 };
#define KB_FORK_BUCKETS (sizeof s_fork_bounds / sizeof s_fork_bounds[0])
#define KB_START_BUCKETS (sizeof s_start_bounds / sizeof s_start_bounds[0])

/*  The states of a context (kb_context_state), each shown even at 0. */
static const char *const s_context_states[] = { "starting", "idle", "busy", "dead" };
#define KB_CONTEXT_STATES (sizeof s_context_states / sizeof s_context_states[0])

static const char *const s_output_kinds[KB_OUTPUT_KINDS] = { "stdout", "stderr", "display" };

typedef struct {
    unsigned long long runs[KB_REASON_LAST + 1]; /* by kb_reason_t */
    unsigned long long duration[KB_RUN_BUCKETS + 1];
    double duration_sum;
} kb_language_counts_t;

struct kb_metrics {
    kb_kernel_observer_t observer; /* what the kernels hold a pointer to */
    char *languages[KB_METRICS_NAMES_MAX];
    size_t language_count;
    kb_language_counts_t by_language[KB_METRICS_NAMES_MAX];
    char *kernel_names[KB_METRICS_NAMES_MAX];
    size_t kernel_name_count;
    unsigned long long starts[KB_METRICS_NAMES_MAX][KB_START_OUTCOMES];
    unsigned long long start_duration[KB_START_BUCKETS + 1]; /* of the starts that were ready */
    double start_duration_sum;
    unsigned long long dropped[KB_DROP_REASONS];
    unsigned long long forks, fork_failures, checkpoints, restores;
    unsigned long long fork_duration[KB_FORK_BUCKETS + 1]; /* of fork requests answered */
    double fork_duration_sum;
};

/* ---- counting ---------------------------------------------------------------- */

/*  The slot of name among names[0..*count): added when new; once the
    table is full but for its last slot, every new name shares that one,
    "other". -1 when out of memory. */
static int s_slot(char **names, size_t *count, const char *name)
{
    for (size_t i = 0; i < *count; i++)
        if (strcmp(names[i], name) == 0)
            return (int)i;
    if (*count == KB_METRICS_NAMES_MAX)
        return KB_METRICS_NAMES_MAX - 1;
    names[*count] = strdup(*count == KB_METRICS_NAMES_MAX - 1 ? "other" : name);
    return names[*count] ? (int)(*count)++ : -1;
}

/*  Count value into the bucket of the first bound it does not exceed. */
static void s_observe(unsigned long long *buckets, const double *bounds, size_t n, double *sum,
                      double value)
{
    size_t i = 0;
    while (i < n && value > bounds[i])
        i++;
    buckets[i]++;
    *sum += value;
}

void kb_metrics_run_ended(kb_metrics_t *self, const char *language, kb_reason_t reason,
                          double seconds)
{
    if (!self || reason <= KB_REASON_NONE || reason > KB_REASON_LAST)
        return;
    int slot = s_slot(self->languages, &self->language_count, language ? language : "unknown");
    if (slot < 0)
        return;
    kb_language_counts_t *counts = &self->by_language[slot];
    counts->runs[reason]++;
    s_observe(counts->duration, s_run_bounds, KB_RUN_BUCKETS, &counts->duration_sum,
              seconds > 0 ? seconds : 0);
}

static void s_count_start(kb_metrics_t *self, const char *kernel_name, kb_start_outcome_t outcome,
                          double seconds)
{
    if ((unsigned)outcome >= KB_START_OUTCOMES)
        return;
    int slot = s_slot(self->kernel_names, &self->kernel_name_count,
                      kernel_name ? kernel_name : "unknown");
    if (slot < 0)
        return;
    self->starts[slot][outcome]++;
    if (outcome == KB_START_OK)
        s_observe(self->start_duration, s_start_bounds, KB_START_BUCKETS, &self->start_duration_sum,
                  seconds > 0 ? seconds : 0);
}

void kb_metrics_forked(kb_metrics_t *self, size_t forks, bool ok, double seconds)
{
    if (!self)
        return;
    if (!ok) {
        self->fork_failures++;
        return;
    }
    self->forks += forks;
    s_observe(self->fork_duration, s_fork_bounds, KB_FORK_BUCKETS, &self->fork_duration_sum,
              seconds > 0 ? seconds : 0);
}

void kb_metrics_checkpointed(kb_metrics_t *self)
{
    if (self)
        self->checkpoints++;
}

void kb_metrics_restored(kb_metrics_t *self)
{
    if (self)
        self->restores++;
}

static void s_render_forks(const kb_metrics_t *self, kb_buf_t *out)
{
    kb_prom_family(out, "kernelbridge_forks_total", "counter",
                   "Contexts made by forking another (SPEC section 13).");
    kb_prom_sample_u(out, "kernelbridge_forks_total", NULL, self->forks);
    kb_prom_family(out, "kernelbridge_fork_failures_total", "counter",
                   "Fork requests that failed (nothing of them was kept).");
    kb_prom_sample_u(out, "kernelbridge_fork_failures_total", NULL, self->fork_failures);
    kb_prom_family(out, "kernelbridge_fork_duration_seconds", "histogram",
                   "Time from a fork request to its answer, every fork of it ready.");
    kb_prom_histogram(out, "kernelbridge_fork_duration_seconds", NULL, s_fork_bounds,
                      KB_FORK_BUCKETS, self->fork_duration, self->fork_duration_sum);
    kb_prom_family(out, "kernelbridge_checkpoints_total", "counter", "Checkpoints made.");
    kb_prom_sample_u(out, "kernelbridge_checkpoints_total", NULL, self->checkpoints);
    kb_prom_family(out, "kernelbridge_restores_total", "counter",
                   "Contexts restored from a checkpoint (by a client or by a rollback).");
    kb_prom_sample_u(out, "kernelbridge_restores_total", NULL, self->restores);
}

void kb_metrics_start_failed(kb_metrics_t *self, const char *kernel_name)
{
    if (self)
        s_count_start(self, kernel_name, KB_START_FAILED, 0);
}

static void s_on_started(kb_kernel_observer_t *observer, const char *kernel_name,
                         kb_start_outcome_t outcome, double seconds)
{
    s_count_start((kb_metrics_t *)observer, kernel_name, outcome, seconds);
}

static void s_on_dropped(kb_kernel_observer_t *observer, kb_drop_reason_t reason)
{
    kb_metrics_t *self = (kb_metrics_t *)observer;
    if ((unsigned)reason < KB_DROP_REASONS)
        self->dropped[reason]++;
}

unsigned long long kb_metrics_dropped(const kb_metrics_t *self, unsigned long long *by_reason)
{
    unsigned long long total = 0;
    for (size_t i = 0; i < KB_DROP_REASONS; i++) {
        total += self->dropped[i];
        if (by_reason)
            by_reason[i] = self->dropped[i];
    }
    return total;
}

/* ---- lifecycle ------------------------------------------------------------------ */

kb_metrics_t *kb_metrics_new(void)
{
    kb_metrics_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->observer.started = s_on_started;
    self->observer.dropped = s_on_dropped;
    return self;
}

void kb_metrics_destroy(kb_metrics_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_metrics_t *self = *self_p;
    for (size_t i = 0; i < self->language_count; i++)
        free(self->languages[i]);
    for (size_t i = 0; i < self->kernel_name_count; i++)
        free(self->kernel_names[i]);
    free(self);
    *self_p = NULL;
}

kb_kernel_observer_t *kb_metrics_observer(kb_metrics_t *self)
{
    return &self->observer;
}

/* ---- rendering ------------------------------------------------------------------- */

static void s_render_runs(const kb_metrics_t *self, kb_buf_t *out)
{
    kb_prom_family(out, "kernelbridge_runs_total", "counter",
                   "Runs ended, by language and by the reason of their process (SPEC section 2).");
    for (size_t i = 0; i < self->language_count; i++)
        for (int reason = KB_REASON_NONE + 1; reason <= KB_REASON_LAST; reason++) {
            const char *labels[] = { "language", self->languages[i], "reason",
                                     kb_reason_name((kb_reason_t)reason), NULL };
            kb_prom_sample_u(out, "kernelbridge_runs_total", labels,
                             self->by_language[i].runs[reason]);
        }
    kb_prom_family(out, "kernelbridge_run_duration_seconds", "histogram",
                   "Time runs spent on their kernel (the result's wall_time_s; 0 for a run that "
                   "never started), by language.");
    for (size_t i = 0; i < self->language_count; i++) {
        const char *labels[] = { "language", self->languages[i], NULL };
        kb_prom_histogram(out, "kernelbridge_run_duration_seconds", labels, s_run_bounds,
                          KB_RUN_BUCKETS, self->by_language[i].duration,
                          self->by_language[i].duration_sum);
    }
}

static void s_render_kernels(const kb_metrics_t *self, kb_buf_t *out)
{
    kb_prom_family(out, "kernelbridge_kernel_starts_total", "counter",
                   "Kernels launched, by kernelspec and by how their start ended (ok, failed, "
                   "timeout, cancelled).");
    for (size_t i = 0; i < self->kernel_name_count; i++)
        for (int outcome = 0; outcome < KB_START_OUTCOMES; outcome++) {
            const char *labels[] = { "kernel_name", self->kernel_names[i], "outcome",
                                     kb_start_outcome_name((kb_start_outcome_t)outcome), NULL };
            kb_prom_sample_u(out, "kernelbridge_kernel_starts_total", labels,
                             self->starts[i][outcome]);
        }
    kb_prom_family(out, "kernelbridge_kernel_start_duration_seconds", "histogram",
                   "Time from a kernel's spawn to ready, of the starts that became ready.");
    kb_prom_histogram(out, "kernelbridge_kernel_start_duration_seconds", NULL, s_start_bounds,
                      KB_START_BUCKETS, self->start_duration, self->start_duration_sum);
    kb_prom_family(out, "kernelbridge_kernel_messages_dropped_total", "counter",
                   "Kernel messages dropped unread, by reason (unsigned and mis-signed ones are "
                   "bad_signature).");
    for (int reason = 0; reason < KB_DROP_REASONS; reason++) {
        const char *labels[] = { "reason", kb_drop_reason_name((kb_drop_reason_t)reason), NULL };
        kb_prom_sample_u(out, "kernelbridge_kernel_messages_dropped_total", labels,
                         self->dropped[reason]);
    }
}

static void s_render_contexts(const kb_metrics_sample_t *sample, kb_buf_t *out)
{
    size_t counts[KB_CONTEXT_STATES] = { 0 };
    for (size_t i = 0; i < sample->contexts; i++)
        for (size_t s = 0; s < KB_CONTEXT_STATES; s++)
            if (strcmp(sample->context_states[i], s_context_states[s]) == 0)
                counts[s]++;
    kb_prom_family(out, "kernelbridge_contexts", "gauge",
                   "Contexts (default ones included, isolated runs' not), by state.");
    for (size_t s = 0; s < KB_CONTEXT_STATES; s++) {
        const char *labels[] = { "state", s_context_states[s], NULL };
        kb_prom_sample_u(out, "kernelbridge_contexts", labels, counts[s]);
    }
    kb_prom_family(out, "kernelbridge_pool_ready", "gauge",
                   "Warm pool kernels started and ready, by pool entry (--pool LANG=N).");
    const char *key;
    json_t *entry;
    json_object_foreach((json_t *)sample->pool, key, entry)
    {
        const char *labels[] = { "language", key, NULL };
        kb_prom_sample_u(out, "kernelbridge_pool_ready", labels,
                         (unsigned long long)json_integer_value(json_object_get(entry, "ready")));
    }
}

static void s_render_output(const kb_metrics_sample_t *sample, kb_buf_t *out)
{
    const kb_budget_t *budget = sample->budget;
    kb_prom_family(out, "kernelbridge_output_bytes_total", "counter",
                   "Bytes of output kernels sent for runs, kept or not: stream text, and the data "
                   "and metadata of rich outputs (display).");
    for (int kind = 0; kind < KB_OUTPUT_KINDS; kind++) {
        const char *labels[] = { "channel", s_output_kinds[kind], NULL };
        kb_prom_sample_u(out, "kernelbridge_output_bytes_total", labels,
                         budget ? budget->sent[kind] : 0);
    }
    kb_prom_family(out, "kernelbridge_output_memory_bytes", "gauge",
                   "Bytes of run output held in memory now, running and finished runs together.");
    kb_prom_sample_u(out, "kernelbridge_output_memory_bytes", NULL,
                     budget ? atomic_load(&budget->used) : 0);
    kb_prom_family(out, "kernelbridge_output_memory_limit_bytes", "gauge",
                   "The bound on output held in memory (--max-output-memory); 0: none.");
    kb_prom_sample_u(out, "kernelbridge_output_memory_limit_bytes", NULL,
                     budget ? budget->limit : 0);
}

void kb_metrics_render(const kb_metrics_t *self, const kb_metrics_sample_t *sample, kb_buf_t *out)
{
    s_render_runs(self, out);
    s_render_kernels(self, out);
    s_render_forks(self, out);
    s_render_contexts(sample, out);
    s_render_output(sample, out);
}
