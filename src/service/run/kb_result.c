/*  kb_result.c - the InterpreterResult of one run (SPEC section 2): how it is
    built piece by piece (kb_result_internal.h), rendered as JSON and freed.
    Not for folding kernel messages: that is kb_execution.c. Pure code. */
#include "service/run/kb_result_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "util/kb_buf.h"
#include "util/kb_vec.h"

/*  What a result is built in. The public struct comes first, so that a
    kb_result_t * made by kb_result_new is one of these; its logs and
    outputs fields mirror the buffers below, which only this file grows. */
typedef struct {
    kb_result_t pub;
    kb_buf_t logs[2]; /* stdout, stderr: pub.*_text and *_len */
    kb_vec_t outputs; /* of kb_output_t: pub.outputs and outputs_len */
} kb_result_build_t;

/*  A cleared log keeps at most this much memory. */
#define KB_RESULT_LOG_KEEP 64

static kb_result_build_t *s_build(kb_result_t *self)
{
    return (kb_result_build_t *)self;
}

/*  Point the public fields at the buffers again after they changed. */
static void s_mirror(kb_result_build_t *build)
{
    build->pub.stdout_text = build->logs[0].data;
    build->pub.stdout_len = build->logs[0].len;
    build->pub.stderr_text = build->logs[1].data;
    build->pub.stderr_len = build->logs[1].len;
    build->pub.outputs = build->outputs.items;
    build->pub.outputs_len = build->outputs.len;
}

const char *kb_reason_name(kb_reason_t reason)
{
    switch (reason) {
        case KB_REASON_NONE:
            return NULL;
        case KB_REASON_EXITED:
            return "exited";
        case KB_REASON_TIMED_OUT:
            return "timed_out";
        case KB_REASON_SIGNALED:
            return "signaled";
        case KB_REASON_FAILED:
            return "failed";
        case KB_REASON_SANDBOX_STOPPED:
            return "sandbox_stopped";
        case KB_REASON_MEMORY_LIMIT:
            return "memory_limit";
        case KB_REASON_PIDS_LIMIT:
            return "pids_limit";
    }
    return NULL;
}

kb_result_t *kb_result_new(void)
{
    kb_result_build_t *build = calloc(1, sizeof *build);
    if (!build)
        return NULL;
    build->pub.resources = (kb_resources_t){ 0, -1, -1 };
    kb_vec_init(&build->outputs, sizeof(kb_output_t), 0);
    /* The logs are never NULL: "" from the start. */
    if (kb_buf_reserve(&build->logs[0], 0) != KB_BUF_OK
        || kb_buf_reserve(&build->logs[1], 0) != KB_BUF_OK) {
        kb_buf_free(&build->logs[0]);
        kb_buf_free(&build->logs[1]);
        free(build);
        return NULL;
    }
    s_mirror(build);
    build->pub.execution_count = -1;
    build->pub.reason = KB_REASON_NONE;
    return &build->pub;
}

int kb_result_append_log(kb_result_t *self, bool is_stderr, const char *text, size_t len)
{
    assert(self);
    assert(text || len == 0);
    kb_result_build_t *build = s_build(self);
    kb_buf_t *log = &build->logs[is_stderr ? 1 : 0];
    kb_buf_status_t status = kb_buf_append(log, text, len);
    kb_buf_recover(log); /* what did not fit is dropped; later text may fit */
    s_mirror(build);
    return status == KB_BUF_OK ? 0 : -1;
}

kb_output_t *kb_result_append_output(kb_result_t *self, json_t *data, json_t *metadata,
                                     const char *display_id, bool is_main_result)
{
    assert(self);
    char *id_copy = NULL;
    if (!data || !json_is_object(data))
        goto fail;
    if (!metadata)
        metadata = json_object();
    if (!metadata)
        goto fail;
    if (display_id && !(id_copy = strdup(display_id)))
        goto fail;
    kb_result_build_t *build = s_build(self);
    kb_output_t entry = { data, metadata, id_copy, is_main_result };
    if (kb_vec_push(&build->outputs, &entry) != KB_BUF_OK)
        goto fail;
    s_mirror(build);
    kb_output_t *out = kb_vec_at(&build->outputs, build->outputs.len - 1);
    return out;
fail:
    json_decref(data);
    json_decref(metadata);
    free(id_copy);
    return NULL;
}

size_t kb_result_update_display(kb_result_t *self, const char *display_id, json_t *data,
                                json_t *metadata)
{
    assert(self);
    assert(display_id);
    assert(data);
    json_t *empty = NULL;
    if (!metadata) {
        empty = json_object();
        if (!empty)
            return 0;
        metadata = empty;
    }
    size_t replaced = 0;
    for (size_t i = 0; i < self->outputs_len; i++) {
        kb_output_t *out = &self->outputs[i];
        if (!out->display_id || strcmp(out->display_id, display_id) != 0)
            continue;
        json_decref(out->data);
        out->data = json_incref(data);
        json_decref(out->metadata);
        out->metadata = json_incref(metadata);
        replaced++;
    }
    json_decref(empty);
    return replaced;
}

void kb_output_clear(kb_output_t *out)
{
    if (!out)
        return;
    json_decref(out->data);
    json_decref(out->metadata);
    free(out->display_id);
    memset(out, 0, sizeof *out);
}

void kb_result_clear_outputs(kb_result_t *self)
{
    assert(self);
    kb_result_build_t *build = s_build(self);
    for (size_t i = 0; i < self->outputs_len; i++)
        kb_output_clear(&self->outputs[i]);
    kb_vec_free(&build->outputs);
    /* Cleared output gives its memory back; the logs stay allocated ("")
       so that they are never NULL. */
    kb_buf_trim(&build->logs[0], KB_RESULT_LOG_KEEP);
    kb_buf_trim(&build->logs[1], KB_RESULT_LOG_KEEP);
    s_mirror(build);
}

size_t kb_json_payload_bytes(const json_t *value)
{
    size_t bytes = 0;
    switch (json_typeof(value)) {
        case JSON_STRING:
            return json_string_length(value) + 2;
        case JSON_OBJECT: {
            const char *key;
            json_t *item;
            /* json_object_foreach wants a non-const object; it only reads. */
            json_object_foreach((json_t *)value, key, item)
            {
                bytes += strlen(key) + 3 + kb_json_payload_bytes(item);
            }
            return bytes + 2;
        }
        case JSON_ARRAY: {
            size_t i;
            json_t *item;
            json_array_foreach(value, i, item)
            {
                bytes += kb_json_payload_bytes(item) + 1;
            }
            return bytes + 2;
        }
        case JSON_INTEGER:
        case JSON_REAL:
            return 8;
        default:
            return 4;
    }
}

json_t *kb_json_text(json_t *value)
{
    if (json_is_string(value))
        return json_incref(value);
    if (!json_is_array(value))
        return NULL;
    size_t total = 0, i;
    json_t *item;
    json_array_foreach(value, i, item)
    {
        if (!json_is_string(item))
            return NULL;
        total += json_string_length(item);
    }
    char *joined = malloc(total + 1);
    if (!joined)
        return NULL;
    size_t at = 0;
    json_array_foreach(value, i, item)
    {
        size_t n = json_string_length(item);
        memcpy(joined + at, json_string_value(item), n);
        at += n;
    }
    joined[at] = '\0';
    json_t *text = json_stringn_nocheck(joined, at);
    free(joined);
    return text;
}

/*  A JSON string of s, or null for NULL. Strings given to the result by
    the service may in theory be invalid UTF-8 (jansson refuses those):
    they render as null rather than fail the whole result. */
static json_t *string_or_null(const char *s)
{
    json_t *value = s ? json_string(s) : NULL;
    return value ? value : json_null();
}

/*  The shortcut field of a MIME type: its text, or null. */
static json_t *shortcut_text(json_t *data, const char *mime)
{
    json_t *text = kb_json_text(json_object_get(data, mime));
    return text ? text : json_null();
}

/*  entry[field] = data[mime] when the bundle has it as an object (charts
    and tables are; anything else a kernel sent under that name is left in
    data alone). 0, or -1 when out of memory. */
static int s_set_data_field(json_t *entry, json_t *data, const char *field, const char *mime)
{
    json_t *value = json_object_get(data, mime);
    return json_is_object(value) ? json_object_set(entry, field, value) : 0;
}

json_t *kb_output_to_json(const kb_output_t *out)
{
    assert(out);
    json_t *entry = json_object();
    /* A deep copy: the entry goes to other threads (SSE writers, HTTP
       workers) while the result may still change or be freed. Within the
       copy the shortcuts share nodes with data, which is fine for a tree
       that is only read and dumped. */
    json_t *data = out->data ? json_deep_copy(out->data) : json_object();
    json_t *metadata = out->metadata ? json_deep_copy(out->metadata) : json_object();
    if (!entry || !data || !metadata)
        goto fail;
    json_t *as_json = json_object_get(data, "application/json");
    int rc = 0;
    rc |= json_object_set(entry, "data", data);
    rc |= json_object_set_new(entry, "is_main_result", json_boolean(out->is_main_result));
    rc |= json_object_set_new(entry, "text", shortcut_text(data, "text/plain"));
    rc |= json_object_set_new(entry, "html", shortcut_text(data, "text/html"));
    rc |= json_object_set_new(entry, "png", shortcut_text(data, "image/png"));
    rc |= json_object_set_new(entry, "svg", shortcut_text(data, "image/svg+xml"));
    rc |= json_object_set_new(entry, "json", as_json ? json_incref(as_json) : json_null());
    rc |= json_object_set(entry, "metadata", metadata);
    if (out->display_id)
        rc |= json_object_set_new(entry, "display_id", string_or_null(out->display_id));
    rc |= s_set_data_field(entry, data, "chart", KB_MIME_CHART);
    rc |= s_set_data_field(entry, data, "table", KB_MIME_TABLE);
    if (rc)
        goto fail;
    json_decref(data);
    json_decref(metadata);
    return entry;
fail:
    json_decref(entry);
    json_decref(data);
    json_decref(metadata);
    return NULL;
}

kb_run_error_t *kb_run_error_new(const char *name, const char *value, const json_t *traceback)
{
    kb_run_error_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->name = strdup(name ? name : "");
    self->value = strdup(value ? value : "");
    if (!self->name || !self->value)
        goto fail;
    size_t lines = json_is_array(traceback) ? json_array_size(traceback) : 0;
    if (lines > 0) {
        self->traceback = calloc(lines, sizeof(char *));
        if (!self->traceback)
            goto fail;
        for (size_t i = 0; i < lines; i++) {
            json_t *line = json_array_get(traceback, i);
            if (!json_is_string(line))
                continue;
            char *copy = malloc(json_string_length(line) + 1);
            if (!copy)
                goto fail;
            memcpy(copy, json_string_value(line), json_string_length(line) + 1);
            self->traceback[self->traceback_len++] = copy;
        }
    }
    return self;
fail:
    kb_run_error_destroy(&self);
    return NULL;
}

void kb_run_error_destroy(kb_run_error_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_run_error_t *self = *self_p;
    free(self->name);
    free(self->value);
    for (size_t i = 0; i < self->traceback_len; i++)
        free(self->traceback[i]);
    free(self->traceback);
    free(self);
    *self_p = NULL;
}

json_t *kb_run_error_to_json(const kb_run_error_t *self)
{
    assert(self);
    json_t *obj = json_object();
    json_t *lines = json_array();
    if (!obj || !lines)
        goto fail;
    for (size_t i = 0; i < self->traceback_len; i++)
        if (json_array_append_new(lines, string_or_null(self->traceback[i])))
            goto fail;
    int rc = 0;
    rc |= json_object_set_new(obj, "name", string_or_null(self->name));
    rc |= json_object_set_new(obj, "value", string_or_null(self->value));
    rc |= json_object_set(obj, "traceback", lines);
    if (rc)
        goto fail;
    json_decref(lines);
    return obj;
fail:
    json_decref(obj);
    json_decref(lines);
    return NULL;
}

/*  A log as a JSON string; the logs are built from kernel strings, so they
    are valid UTF-8, but never let a bad byte turn the field into null. */
static json_t *log_string(const char *text, size_t len)
{
    json_t *value = json_stringn(text ? text : "", text ? len : 0);
    return value ? value : json_string("");
}

/*  Seconds to the microsecond: no float noise in the JSON. */
static double s_micro(double seconds)
{
    return (double)(long long)(seconds * 1e6 + 0.5) / 1e6;
}

json_t *kb_resources_to_json(const kb_resources_t *self)
{
    return json_pack("{s:f, s:o, s:o}", "wall_time_s", s_micro(self->wall_time_s), "cpu_time_s",
                     self->cpu_time_s >= 0 ? json_real(s_micro(self->cpu_time_s)) : json_null(),
                     "peak_memory_bytes",
                     self->peak_memory_bytes >= 0 ? json_integer(self->peak_memory_bytes)
                                                  : json_null());
}

json_t *kb_result_to_json(const kb_result_t *self)
{
    assert(self);
    json_t *root = json_object();
    json_t *process = json_object();
    json_t *results = json_array();
    json_t *logs = json_object();
    json_t *context = json_object();
    json_t *error = NULL;
    if (!root || !process || !results || !logs || !context)
        goto fail;

    int rc = 0;
    rc |= json_object_set_new(process, "process_id", string_or_null(self->process_id));
    rc |= json_object_set_new(process, "exit_code",
                              self->has_exit_code ? json_integer(self->exit_code) : json_null());
    rc |= json_object_set_new(process, "signal", string_or_null(self->signal));
    rc |= json_object_set_new(process, "reason", string_or_null(kb_reason_name(self->reason)));
    rc |= json_object_set_new(process, "raw_reason", string_or_null(self->raw_reason));

    for (size_t i = 0; i < self->outputs_len; i++) {
        json_t *entry = kb_output_to_json(&self->outputs[i]);
        if (!entry || json_array_append_new(results, entry))
            goto fail;
    }

    rc |= json_object_set_new(logs, "stdout", log_string(self->stdout_text, self->stdout_len));
    rc |= json_object_set_new(logs, "stderr", log_string(self->stderr_text, self->stderr_len));

    if (self->error && !(error = kb_run_error_to_json(self->error)))
        goto fail;

    rc |= json_object_set_new(context, "sandbox_id", string_or_null(self->sandbox_id));
    rc |= json_object_set_new(context, "context_id", string_or_null(self->context_id));
    rc |= json_object_set_new(context, "language", string_or_null(self->language));
    if (self->generation > 0)
        rc |= json_object_set_new(context, "generation", json_integer(self->generation));

    rc |= json_object_set(root, "process", process);
    rc |= json_object_set(root, "results", results);
    rc |= json_object_set(root, "logs", logs);
    rc |= json_object_set_new(root, "error", error ? json_incref(error) : json_null());
    rc |= json_object_set_new(root, "execution_count",
                              self->execution_count >= 0 ? json_integer(self->execution_count)
                                                         : json_null());
    rc |= json_object_set(root, "context", context);
    rc |= json_object_set_new(root, "truncated", json_boolean(self->truncated));
    if (self->rollback)
        rc |= json_object_set_new(root, "rolled_back", json_boolean(self->rolled_back));
    rc |= json_object_set_new(root, "resources", kb_resources_to_json(&self->resources));
    if (rc)
        goto fail;
    json_decref(process);
    json_decref(results);
    json_decref(logs);
    json_decref(context);
    json_decref(error);
    return root;
fail:
    json_decref(root);
    json_decref(process);
    json_decref(results);
    json_decref(logs);
    json_decref(context);
    json_decref(error);
    return NULL;
}

void kb_result_destroy(kb_result_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_result_t *self = *self_p;
    free(self->process_id);
    free(self->raw_reason);
    kb_result_build_t *build = s_build(self);
    for (size_t i = 0; i < self->outputs_len; i++)
        kb_output_clear(&self->outputs[i]);
    kb_vec_free(&build->outputs);
    kb_buf_free(&build->logs[0]);
    kb_buf_free(&build->logs[1]);
    kb_run_error_destroy(&self->error);
    free(self->sandbox_id);
    free(self->context_id);
    free(self->language);
    free(build);
    *self_p = NULL;
}
