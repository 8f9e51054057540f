/*  kb_result.h - the InterpreterResult of one run (SPEC section 2): rich
    outputs, logs, error and the process record that says how it ended. */
#ifndef KB_RESULT_H_INCLUDED
#define KB_RESULT_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "kb_export.h"

#ifdef __cplusplus
extern "C" {
#endif

/*  The MIME types of the project's IPython extension (docs/charts.md): a
    results entry whose data holds one (an object) also carries it as
    `chart` / `table`; E2B's API returns them as `chart` / `data`. */
#define KB_MIME_CHART "application/vnd.kernelbridge.chart+json"
#define KB_MIME_TABLE "application/vnd.kernelbridge.table+json"

/*  How a run ended (the process table of SPEC section 2). */
typedef enum {
    KB_REASON_NONE = 0,        /* still running */
    KB_REASON_EXITED,          /* "exited" */
    KB_REASON_TIMED_OUT,       /* "timed_out" */
    KB_REASON_SIGNALED,        /* "signaled" */
    KB_REASON_FAILED,          /* "failed" */
    KB_REASON_SANDBOX_STOPPED, /* "sandbox_stopped" */
    KB_REASON_MEMORY_LIMIT,    /* "memory_limit" */
    KB_REASON_PIDS_LIMIT,      /* "pids_limit" */
} kb_reason_t;

#define KB_REASON_LAST KB_REASON_PIDS_LIMIT

/*  What a run cost its kernel's process tree (SPEC section 9). */
typedef struct {
    double wall_time_s;          /* from the run's start on the kernel to its end; 0 unstarted */
    double cpu_time_s;           /* user + system of the tree; < 0: unknown (a kernel this
                                    daemon did not start) */
    long long peak_memory_bytes; /* the tree's peak resident memory; < 0: unknown */
} kb_resources_t;

/*  "exited", ...; NULL for KB_REASON_NONE. Static string. */
KB_EXPORT const char *kb_reason_name(kb_reason_t reason);

typedef struct {
    json_t *data;        /* the whole MIME bundle as sent */
    json_t *metadata;    /* object, may be empty */
    char *display_id;    /* from transient.display_id, or NULL */
    bool is_main_result; /* true only for execute_result */
} kb_output_t;

typedef struct {
    char *name;
    char *value;
    char **traceback; /* traceback_len lines */
    size_t traceback_len;
} kb_run_error_t;

typedef struct {
    /* process */
    char *process_id;
    bool has_exit_code;
    int exit_code;
    const char *signal; /* static "SIGINT"... or NULL */
    kb_reason_t reason;
    char *raw_reason; /* or NULL */
    /* outputs, in arrival order */
    kb_output_t *outputs;
    size_t outputs_len;
    /* logs */
    char *stdout_text; /* never NULL */
    size_t stdout_len;
    char *stderr_text; /* never NULL */
    size_t stderr_len;
    kb_run_error_t *error;     /* or NULL */
    long long execution_count; /* -1 when the kernel gave none */
    bool truncated;            /* output beyond the cap was dropped */
    /* context */
    char *sandbox_id;
    char *context_id;
    char *language;
    long long generation; /* the context's generation (SPEC section 3); 0: unknown */
    kb_resources_t resources;
    bool rollback;    /* the run asked for rollback "on_error": rolled_back is shown */
    bool rolled_back; /* it failed and the context was put back as it was before it */
} kb_result_t;

/*  {wall_time_s, cpu_time_s, peak_memory_bytes}, unknown figures null.
    Caller owns. */
KB_EXPORT json_t *kb_resources_to_json(const kb_resources_t *self);

/*  The result as InterpreterResult JSON. Caller owns. */
KB_EXPORT json_t *kb_result_to_json(const kb_result_t *self);

/*  Safe on NULL; sets *self_p to NULL. */
KB_EXPORT void kb_result_destroy(kb_result_t **self_p);

#ifdef __cplusplus
}
#endif

#endif
