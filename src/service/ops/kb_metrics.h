/*  kb_metrics.h - the engine's part of GET /metrics: counters of runs (by
    language and reason, and a histogram of their time on the kernel), of
    kernel starts (by kernel name and outcome, and a histogram of the time
    to ready), of kernel messages dropped (by reason); and their rendering,
    with the gauges the engine samples at a scrape (contexts by state, ready
    pool kernels, output held in memory and sent), in Prometheus' text
    format (util/kb_prom.h).

    Engine thread only: written as things happen (kb_run.c when a run ends,
    kernels through the observer), read when a scrape asks
    (KB_CALL_METRICS), so no locks. Counters only grow: kernels that go away
    leave their counts here. Label values are bounded sets: languages and
    kernel names come from installed kernelspecs, and past
    KB_METRICS_NAMES_MAX distinct names the rest count as "other"; never a
    context id, a process id or a pid.
    Not for: HTTP requests and the process' own figures, which the server
    adds to the text (server/kb_metrics_http.c).
*/
#ifndef KB_METRICS_H_INCLUDED
#define KB_METRICS_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "kernel/kb_kernel.h"
#include "kernelbridge/kb_result.h"
#include "service/output/kb_runlog.h"
#include "util/kb_buf.h"

#define KB_METRICS_NAMES_MAX 64 /* languages, and kernel names, kept apart; the last is "other" */

typedef struct kb_metrics kb_metrics_t;

/*  Empty counters. NULL when out of memory. Caller owns it; it must
    outlive every kernel given its observer. */
kb_metrics_t *kb_metrics_new(void);

/*  Safe on NULL; sets *self_p to NULL. */
void kb_metrics_destroy(kb_metrics_t **self_p);

/*  What kernels report to (kb_kernel_set_observer): starts and dropped
    messages. Borrowed; valid until destroy. */
kb_kernel_observer_t *kb_metrics_observer(kb_metrics_t *self);

/*  A run of language ended with reason, after seconds on its kernel (the
    result's wall_time_s: 0 when it never started). Safe on NULL self. */
void kb_metrics_run_ended(kb_metrics_t *self, const char *language, kb_reason_t reason,
                          double seconds);

/*  A kernel of kernel_name could not even be spawned (no kernel exists to
    report it): a start with outcome failed. Safe on NULL self. */
void kb_metrics_start_failed(kb_metrics_t *self, const char *kernel_name);

/*  A fork request answered after seconds: ok, forks more contexts; else
    one failure. A checkpoint made; a context restored. Safe on NULL. */
void kb_metrics_forked(kb_metrics_t *self, size_t forks, bool ok, double seconds);
void kb_metrics_checkpointed(kb_metrics_t *self);
void kb_metrics_restored(kb_metrics_t *self);

/*  Messages dropped since the start, all kernels: the total, and by
    reason into by_reason (KB_DROP_REASONS entries) when not NULL. */
unsigned long long kb_metrics_dropped(const kb_metrics_t *self, unsigned long long *by_reason);

/*  What the engine samples at a scrape; all borrowed. */
typedef struct {
    const char *const *context_states; /* kb_context_state of each context the API shows */
    size_t contexts;
    const json_t *pool;        /* kb_pool_json: {entry: {ready, ...}}, or NULL */
    const kb_budget_t *budget; /* the output budget and the output sent, or NULL */
} kb_metrics_sample_t;

/*  Append every family of the engine (HELP, TYPE, samples) to out: the
    counters, and the gauges of sample. Failure is sticky on out. */
void kb_metrics_render(const kb_metrics_t *self, const kb_metrics_sample_t *sample, kb_buf_t *out);

#endif
