/*  kb_result_internal.h - helpers of the service layer to build a
    kb_result_t piece by piece (kb_execution.c folds kernel messages with
    them). Not public: the public side of a result is kb_result.h.

    A result made by kb_result_new keeps its logs and outputs in a kb_buf_t
    and a kb_vec_t of its own (src/util: amortised growth, a typed failure)
    that the public fields mirror, so only these helpers may grow or shrink
    them, and only kb_result_new makes a kb_result_t. */
#ifndef KB_RESULT_INTERNAL_H_INCLUDED
#define KB_RESULT_INTERNAL_H_INCLUDED

#include "kernelbridge/kb_result.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/*  An empty result: no outputs, empty logs, no error, execution_count -1,
    reason KB_REASON_NONE, every string NULL except the logs (""). Returns
    NULL when out of memory. Caller owns. */
kb_result_t *kb_result_new(void);

/*  Append text[0..len) to logs.stdout (or logs.stderr when is_stderr).
    Returns 0, or -1 when out of memory (the log is left as it was). */
int kb_result_append_log(kb_result_t *self, bool is_stderr, const char *text, size_t len);

/*  Append one output. data (an object) and metadata (an object or NULL for
    {}) are stolen, even on failure; display_id is copied (may be NULL).
    Returns the new entry (borrowed, valid until the next change of the
    outputs), or NULL when out of memory. */
kb_output_t *kb_result_append_output(kb_result_t *self, json_t *data, json_t *metadata,
                                     const char *display_id, bool is_main_result);

/*  Replace data and metadata of every output whose display_id equals
    display_id. data and metadata (NULL for {}) are borrowed: each entry
    keeps a reference. Returns the number of entries replaced. */
size_t kb_result_update_display(kb_result_t *self, const char *display_id, json_t *data,
                                json_t *metadata);

/*  Drop every output and empty both logs (clear_output). */
void kb_result_clear_outputs(kb_result_t *self);

/*  Free what an output holds and zero it. Safe on NULL. */
void kb_output_clear(kb_output_t *out);

/*  One results entry {data, is_main_result, text, html, png, svg, json,
    metadata, display_id (only when set), chart and table (only when data
    holds KB_MIME_CHART / KB_MIME_TABLE as an object)}. Shares nothing with out, so it may
    be handed to another thread. NULL when out of memory. Caller owns. */
json_t *kb_output_to_json(const kb_output_t *out);

/*  A rough count of the bytes an output's MIME bundle holds (string bytes of
    keys and values, a few bytes per other value): what the per-run output cap
    is measured in. */
size_t kb_json_payload_bytes(const json_t *value);

/*  The text of a string-valued MIME entry or stream: the string itself
    (a new reference), or a list of strings joined into one (a new string).
    NULL when value is neither. Caller owns. */
json_t *kb_json_text(json_t *value);

/*  A run error {name, value, traceback}. name and value are copied (NULL is
    taken as ""); traceback is an array of strings or NULL, borrowed (lines
    that are not strings are skipped). NULL when out of memory. Caller owns. */
kb_run_error_t *kb_run_error_new(const char *name, const char *value, const json_t *traceback);

/*  Safe on NULL; sets *self_p to NULL. */
void kb_run_error_destroy(kb_run_error_t **self_p);

/*  {name, value, traceback:[...]}; NULL when out of memory. Caller owns. */
json_t *kb_run_error_to_json(const kb_run_error_t *self);

#endif
