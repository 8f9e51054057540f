/*  kb_mcp_tools.c - the MCP server's tools (SPEC section 14): one table of
    name, description, input and output schemas and handler; arguments
    checked against the input schema (-32602 naming the argument), the
    options of a run or a context read by kb_request.c (KB_FRONT_MCP), the
    work done by the public C API as the native routes do it. A run is
    followed on its stream, its output sent as notifications/progress when
    the client asked, and a cancellation interrupts it (kb_mcp.c). */
#include "server/kb_mcp_tools.h"
#include "service/engine/kb_request.h"
#include "util/kb_alloc.h"
#include "util/kb_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*  notifications/progress at most this often, each carrying at most this
    much of the output that came since the last. */
#define KB_MCP_PROGRESS_MS 100
#define KB_MCP_PROGRESS_TEXT (64u << 10)
/*  get_process_logs' frames when the caller gives no limit. */
#define KB_MCP_LOGS_LIMIT 1000

typedef json_t *(kb_mcp_tool_fn)(const kb_mcp_call_t *call, const json_t *args, kb_error_t *err);

typedef struct {
    const char *name;
    const char *title;
    const char *description;
    const char *input;  /* JSON Schema, as text */
    const char *output; /* JSON Schema, as text */
    bool read_only;
    bool destructive;
    kb_mcp_tool_fn *call;
} kb_mcp_tool_t;

/* ---- Schemas ------------------------------------------------------------- */

#define S_STR(d) "{\"type\":\"string\",\"description\":\"" d "\"}"
#define S_CONTEXT_ID S_STR("the context's id (create_context or list_contexts gives it)")
#define S_CONTEXT                                                                                  \
    "{\"type\":\"object\",\"properties\":{\"context_id\":{\"type\":\"string\"},"                   \
    "\"language\":{\"type\":\"string\"},\"kernel_name\":{\"type\":\"string\"},"                    \
    "\"state\":{\"type\":\"string\"},\"cwd\":{\"type\":\"string\"},"                               \
    "\"generation\":{\"type\":\"integer\"}},\"required\":[\"context_id\",\"language\","            \
    "\"state\"]}"
#define S_ENV                                                                                      \
    "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"},"                         \
    "\"description\":\"environment variables (names to string values)\"}"

#define S_ROLLBACK                                                                                 \
    "\"rollback\":{\"type\":\"string\",\"enum\":[\"never\",\"on_error\"],\"description\":"         \
    "\"on_error: a checkpoint is taken before the run and restored when the run fails (the "       \
    "context keeps its state from before; rolled_back says so); never (default): nothing\"}"

static const char s_run_in[]
    = "{\"type\":\"object\",\"properties\":{"
      "\"code\":" S_STR(
          "the code to run") ","
                             "\"language\":" S_STR(
                                 "run on this language's default context (python when neither "
                                 "language nor context_id is given)") ","
                                                                      "\"context_id\":" S_STR(
                                                                          "run in this context: "
                                                                          "its variables and "
                                                                          "imports are kept "
                                                                          "between runs") ","
                                                                                          "\"timeou"
                                                                                          "t\":{"
                                                                                          "\"type\""
                                                                                          ":\"numbe"
                                                                                          "r\","
                                                                                          "\"minimu"
                                                                                          "m\":0,"
                                                                                          "\"descri"
                                                                                          "ption\":"
                                                                                          "\"second"
                                                                                          "s; the "
                                                                                          "run is "
                                                                                          "interrup"
                                                                                          "ted "
                                                                                          "then\"},"
                                                                                          "\"cwd\""
                                                                                          ":" S_STR(
                                                                                              "work"
                                                                                              "ing "
                                                                                              "dire"
                                                                                              "ctor"
                                                                                              "y "
                                                                                              "for "
                                                                                              "this"
                                                                                              " run"
                                                                                              " onl"
                                                                                              "y") ","
                                                                                                   "\"env\":" S_ENV
                                                                                                   "," S_ROLLBACK
                                                                                                   "},\"required\":[\"code\"],\"additionalProperties\":false}";

static const char s_run_out[]
    = "{\"type\":\"object\",\"properties\":{"
      "\"process\":{\"type\":\"object\",\"properties\":{\"process_id\":{\"type\":\"string\"},"
      "\"reason\":{\"type\":\"string\"}}},"
      "\"results\":{\"type\":\"array\",\"items\":{\"type\":\"object\"}},"
      "\"logs\":{\"type\":\"object\",\"properties\":{\"stdout\":{\"type\":\"string\"},"
      "\"stderr\":{\"type\":\"string\"}}},"
      "\"error\":{\"type\":[\"object\",\"null\"]},"
      "\"execution_count\":{\"type\":[\"integer\",\"null\"]},"
      "\"context\":{\"type\":[\"object\",\"null\"]},"
      "\"truncated\":{\"type\":\"boolean\"},\"rolled_back\":{\"type\":\"boolean\"}},"
      "\"required\":[\"process\",\"results\",\"logs\",\"error\"]}";

static const char s_create_in[]
    = "{\"type\":\"object\",\"properties\":{"
      "\"language\":" S_STR(
          "python, r, javascript, ... (python when neither language nor "
          "kernel_name is given)") ","
                                   "\"kernel_name\":" S_STR(
                                       "a kernelspec's name (list_kernelspecs), instead of "
                                       "language") ","
                                                   "\"context_id\":" S_STR(
                                                       "the id to give it: 1 to 64 of A-Z a-z 0-9 "
                                                       ". _ -; "
                                                       "generated when absent") ","
                                                                                "\"cwd\":" S_STR(
                                                                                    "the kernel's "
                                                                                    "working "
                                                                                    "directory") ","
                                                                                                 "\"env\":" S_ENV
                                                                                                 "}"
                                                                                                 ","
                                                                                                 "\"additionalProperties\":false}";

static const char s_id_in[] = "{\"type\":\"object\",\"properties\":{\"context_id\":" S_CONTEXT_ID
                              "},\"required\":[\"context_id\"],\"additionalProperties\":false}";

static const char s_list_in[]
    = "{\"type\":\"object\",\"properties\":{\"all\":{\"type\":\"boolean\",\"description\":"
      "\"also the languages' default contexts\"}},\"additionalProperties\":false}";

static const char s_list_out[] = "{\"type\":\"object\",\"properties\":{\"contexts\":{\"type\":"
                                 "\"array\",\"items\":" S_CONTEXT "}},\"required\":[\"contexts\"]}";

static const char s_done_out[]
    = "{\"type\":\"object\",\"properties\":{\"context_id\":{\"type\":\"string\"},"
      "\"done\":{\"type\":\"boolean\"}},\"required\":[\"context_id\",\"done\"]}";

static const char s_none_in[] = "{\"type\":\"object\",\"properties\":{},"
                                "\"additionalProperties\":false}";

static const char s_specs_out[]
    = "{\"type\":\"object\",\"properties\":{\"kernelspecs\":{\"type\":\"array\",\"items\":{"
      "\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"language\":{"
      "\"type\":\"string\"},\"display_name\":{\"type\":\"string\"}}}}},"
      "\"required\":[\"kernelspecs\"]}";

static const char s_logs_in[]
    = "{\"type\":\"object\",\"properties\":{"
      "\"process_id\":" S_STR(
          "a run's process id (structuredContent.process.process_id of "
          "run_code)") ","
                       "\"cursor\":{\"type\":\"integer\",\"minimum\":0,\"description\":\"the first "
                       "frame to "
                       "give (next_cursor of the previous call); absent: the first kept\"},"
                       "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"frames at "
                       "most "
                       "(default "
                       "1000)\"}},\"required\":[\"process_id\"],\"additionalProperties\":false}";

static const char s_logs_out[]
    = "{\"type\":\"object\",\"properties\":{\"frames\":{\"type\":\"array\",\"items\":{"
      "\"type\":\"object\",\"properties\":{\"cursor\":{\"type\":\"integer\"},\"channel\":{"
      "\"type\":\"string\"},\"data\":{\"type\":\"string\"}}}},"
      "\"next_cursor\":{\"type\":\"integer\"},\"eof\":{\"type\":\"boolean\"}},"
      "\"required\":[\"frames\",\"next_cursor\",\"eof\"]}";

static const char s_fork_in[]
    = "{\"type\":\"object\",\"properties\":{\"context_id\":" S_CONTEXT_ID ","
      "\"count\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":64,\"description\":"
      "\"how many forks (default 1, or one per context_ids)\"},"
      "\"context_ids\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1,"
      "\"maxItems\":64,\"description\":\"the forks' ids (generated when absent)\"}},"
      "\"required\":[\"context_id\"],\"additionalProperties\":false}";

static const char s_checkpoint_out[]
    = "{\"type\":\"object\",\"properties\":{\"checkpoint_id\":{\"type\":\"string\"},"
      "\"context_id\":{\"type\":\"string\"},\"execution_count\":{\"type\":[\"integer\","
      "\"null\"]},\"created_at\":{\"type\":\"string\"},\"memory_bytes\":{\"type\":"
      "\"integer\"}},\"required\":[\"checkpoint_id\",\"context_id\"]}";

#define S_CHECKPOINT_ID S_STR("a checkpoint of the context (checkpoint_context gives it)")

static const char s_restore_in[]
    = "{\"type\":\"object\",\"properties\":{\"context_id\":" S_CONTEXT_ID ","
      "\"checkpoint_id\":" S_CHECKPOINT_ID "},\"required\":[\"context_id\",\"checkpoint_id\"],"
      "\"additionalProperties\":false}";

/* ---- Faults ---------------------------------------------------------------- */

static json_t *s_fault(kb_mcp_fault_t *fault, int rpc, kb_code_t code, const char *field,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static json_t *s_fault(kb_mcp_fault_t *fault, int rpc, kb_code_t code, const char *field,
                       const char *fmt, ...)
{
    fault->rpc = rpc;
    fault->code = code;
    snprintf(fault->field, sizeof fault->field, "%s", field ? field : "");
    va_list args;
    va_start(args, fmt);
    vsnprintf(fault->message, sizeof fault->message, fmt, args);
    va_end(args);
    return NULL;
}

/*  The argument a value error names (kb_request's messages name the
    field), or NULL. */
static const char *s_named_field(const json_t *schema, const char *message)
{
    const char *key;
    const json_t *value;
    json_object_foreach((json_t *)json_object_get(schema, "properties"), key, value)
    {
        const char *at = strstr(message, key);
        size_t len = strlen(key);
        if (at && (at == message || at[-1] == ' ') && (at[len] == ' ' || at[len] == '\0'))
            return key;
    }
    return NULL;
}

/* ---- Arguments ------------------------------------------------------------- */

static bool s_type_fits(const char *type, const json_t *value)
{
    if (strcmp(type, "string") == 0)
        return json_is_string(value);
    if (strcmp(type, "integer") == 0)
        return json_is_integer(value);
    if (strcmp(type, "number") == 0)
        return json_is_number(value);
    if (strcmp(type, "boolean") == 0)
        return json_is_boolean(value);
    if (strcmp(type, "object") == 0)
        return json_is_object(value);
    if (strcmp(type, "array") == 0)
        return json_is_array(value);
    return true;
}

/*  args against the tool's input schema: no argument it does not name,
    each of its type (a null is an absent one), the required ones given. */
static int s_check_args(const json_t *schema, const json_t *args, kb_mcp_fault_t *fault)
{
    const json_t *properties = json_object_get(schema, "properties");
    const char *key;
    const json_t *value;
    json_object_foreach((json_t *)args, key, value)
    {
        const json_t *property = json_object_get(properties, key);
        const char *type = json_string_value(json_object_get(property, "type"));
        if (!property) {
            s_fault(fault, KB_RPC_INVALID_PARAMS, KB_ERR_BAD_REQUEST, key,
                    "Invalid params: unknown argument %.60s", key);
            return -1;
        }
        if (type && !json_is_null(value) && !s_type_fits(type, value)) {
            s_fault(fault, KB_RPC_INVALID_PARAMS, KB_ERR_BAD_REQUEST, key,
                    "Invalid params: argument %s must be %s %s", key,
                    strchr("aeiou", type[0]) ? "an" : "a", type);
            return -1;
        }
    }
    size_t i;
    const json_t *name;
    json_array_foreach(json_object_get(schema, "required"), i, name)
    {
        const json_t *given = json_object_get(args, json_string_value(name));
        if (!given || json_is_null(given)) {
            s_fault(fault, KB_RPC_INVALID_PARAMS, KB_ERR_BAD_REQUEST, json_string_value(name),
                    "Invalid params: argument %s is required", json_string_value(name));
            return -1;
        }
    }
    return 0;
}

/*  A copy of args without its null members (absent, for kb_request). */
static json_t *s_given_args(const json_t *args)
{
    json_t *copy = json_object();
    KB_NOT_NULL(copy);
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)args, key, value) if (!json_is_null(value))
        json_object_set(copy, key, value);
    return copy;
}

/* ---- Results --------------------------------------------------------------- */

/*  A CallToolResult of a JSON object (stolen): structuredContent, and the
    same as text for clients that read content alone. */
static json_t *s_structured(json_t *value)
{
    char *text = json_dumps(value, JSON_COMPACT);
    KB_NOT_NULL(text);
    json_t *result = json_pack("{s:[{s:s, s:s}], s:o}", "content", "type", "text", "text", text,
                               "structuredContent", value);
    KB_NOT_NULL(result);
    free(text);
    return result;
}

static json_t *s_done(const char *context_id)
{
    json_t *value = json_pack("{s:s, s:b}", "context_id", context_id, "done", 1);
    KB_NOT_NULL(value);
    return s_structured(value);
}

/* ---- Runs ------------------------------------------------------------------ */

typedef struct {
    const kb_mcp_call_t *call;
    kb_buf_t text; /* output not sent yet */
    bool dropped;  /* some of it was over KB_MCP_PROGRESS_TEXT */
    long long sent;
    double last;
} kb_mcp_progress_t;

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void s_progress_flush(kb_mcp_progress_t *p, bool force)
{
    if (p->text.len == 0 && !p->dropped)
        return;
    if (!force && (s_now() - p->last) * 1000 < KB_MCP_PROGRESS_MS)
        return;
    if (p->dropped)
        kb_buf_puts(&p->text, "\n[output left out of progress; run_code's result has it]\n");
    kb_mcp_strip_ansi(p->text.data);
    json_t *message
        = json_pack("{s:s, s:s, s:{s:O, s:I, s:s}}", "jsonrpc", "2.0", "method",
                    "notifications/progress", "params", "progressToken", p->call->progress_token,
                    "progress", (json_int_t)++p->sent, "message", kb_buf_cstr(&p->text));
    KB_NOT_NULL(message);
    p->call->send(p->call->arg, message);
    kb_buf_reset(&p->text);
    p->dropped = false;
    p->last = s_now();
}

static void s_progress_add(kb_mcp_progress_t *p, const kb_event_t *event)
{
    const char *text = json_string_value(json_object_get(event->data, "text"));
    if (!text || !p->call->progress_token || !p->call->send)
        return;
    size_t len = strlen(text);
    if (p->text.len + len > KB_MCP_PROGRESS_TEXT || kb_buf_append(&p->text, text, len) != KB_BUF_OK)
        p->dropped = true;
    s_progress_flush(p, false);
}

/*  Follow a run's stream to its result (caller owns), sending progress;
    the run's process id is told to the session for cancellations. */
static json_t *s_follow(const kb_mcp_call_t *call, kb_stream_t *stream)
{
    kb_mcp_progress_t progress = { .call = call, .text = KB_BUF_INIT, .last = s_now() };
    json_t *result = NULL;
    while (!result) {
        kb_event_t *event = kb_stream_next(stream, KB_MCP_PROGRESS_MS);
        if (!event) {
            if (kb_stream_ended(stream))
                break;
            s_progress_flush(&progress, false);
            continue;
        }
        const char *process_id = json_string_value(json_object_get(event->data, "process_id"));
        if (event->type == KB_EVENT_START && process_id
            && kb_mcp_session_call_started(call->mcp, call->session, call->request_id,
                                           process_id)) {
            kb_error_t err = { KB_OK, "" };
            (void)kb_service_process_signal(call->service, process_id, "SIGINT", &err);
        } else if (event->type == KB_EVENT_STDOUT || event->type == KB_EVENT_STDERR) {
            s_progress_add(&progress, event);
        } else if (event->type == KB_EVENT_RESULT) {
            result = event->doc ? kb_result_doc_json(event->doc) : json_incref(event->data);
            KB_NOT_NULL(result);
        }
        kb_event_destroy(&event);
    }
    if (call->progress_token && call->send)
        s_progress_flush(&progress, true);
    kb_buf_free(&progress.text);
    return result;
}

static json_t *s_run_code(const kb_mcp_call_t *call, const json_t *args, kb_error_t *err)
{
    kb_run_request_t request;
    if (kb_run_request_read(&request, KB_FRONT_MCP, s_given_args(args), err) != 0)
        return NULL;
    request.opts.strip_ansi = true;
    kb_mcp_session_call_begin(call->mcp, call->session, call->request_id);
    json_t *out = NULL;
    kb_stream_t *stream = kb_service_run_start(call->service, &request.opts, err);
    if (stream) {
        json_t *result = s_follow(call, stream);
        kb_stream_destroy(&stream);
        if (result)
            out = kb_mcp_run_result(result, call->max_text);
        else
            kb_error_set(err, KB_ERR_UNAVAILABLE, "the run's stream ended without a result");
        json_decref(result);
    }
    kb_mcp_session_call_end(call->mcp, call->session, call->request_id);
    kb_run_request_clear(&request);
    return out;
}

/* ---- Contexts, kernelspecs, logs ------------------------------------------- */

static json_t *s_create_context(const kb_mcp_call_t *call, const json_t *args, kb_error_t *err)
{
    json_t *given = s_given_args(args);
    if (!json_object_get(given, "language") && !json_object_get(given, "kernel_name"))
        json_object_set_new(given, "language", json_string("python"));
    kb_context_request_t request;
    if (kb_context_request_read(&request, KB_FRONT_MCP, given, err) != 0)
        return NULL;
    json_t *context = kb_service_context_create(call->service, &request.opts, err);
    kb_context_request_clear(&request);
    return context ? s_structured(context) : NULL;
}

static json_t *s_list_contexts(const kb_mcp_call_t *call, const json_t *args, kb_error_t *err)
{
    bool all = json_is_true(json_object_get(args, "all"));
    json_t *list = kb_service_context_list(call->service, all, err);
    return list ? s_structured(list) : NULL;
}

static const char *s_context_id(const json_t *args)
{
    return json_string_value(json_object_get(args, "context_id"));
}

static json_t *s_delete_context(const kb_mcp_call_t *call, const json_t *args, kb_error_t *err)
{
    const char *id = s_context_id(args);
    return kb_service_context_delete(call->service, id, err) == 0 ? s_done(id) : NULL;
}

static json_t *s_restart_context(const kb_mcp_call_t *call, const json_t *args, kb_error_t *err)
{
    json_t *context = kb_service_context_restart(call->service, s_context_id(args), err);
    return context ? s_structured(context) : NULL;
}

static json_t *s_interrupt_context(const kb_mcp_call_t *call, const json_t *args, kb_error_t *err)
{
    const char *id = s_context_id(args);
    return kb_service_context_interrupt(call->service, id, err) == 0 ? s_done(id) : NULL;
}

static json_t *s_list_kernelspecs(const kb_mcp_call_t *call, const json_t *args, kb_error_t *err)
{
    (void)args;
    json_t *specs = kb_service_kernelspecs(call->service);
    if (!specs)
        kb_error_set(err, KB_ERR_UNAVAILABLE, "kernelspecs unavailable");
    return specs ? s_structured(specs) : NULL;
}

/*  The frames of logs (borrowed) cut to max_text bytes of data: the rest
    is for the next call, from next_cursor. A first frame over the bound
    alone is cut itself, data_cut saying how many bytes were left out
    (GET /processes/{id}/logs has them). */
static void s_bound_frames(json_t *logs, size_t max_text)
{
    json_t *frames = json_object_get(logs, "frames");
    size_t used = 0, i;
    json_t *frame;
    json_array_foreach(frames, i, frame)
    {
        const char *data = json_string_value(json_object_get(frame, "data"));
        size_t len = data ? strlen(data) : 0;
        used += len;
        if (used > max_text && i == 0) {
            size_t keep = max_text;
            while (keep > 0 && ((unsigned char)data[keep] & 0xc0) == 0x80)
                keep--;
            json_object_set_new(frame, "data_cut", json_integer((json_int_t)(len - keep)));
            json_object_set_new(frame, "data", json_stringn(data, keep));
            used = keep;
        } else if (used > max_text) {
            json_object_set(logs, "next_cursor", json_object_get(frame, "cursor"));
            json_object_set_new(logs, "eof", json_false());
            while (json_array_size(frames) > i)
                json_array_remove(frames, i);
            return;
        }
    }
}

static json_t *s_get_process_logs(const kb_mcp_call_t *call, const json_t *args, kb_error_t *err)
{
    const json_t *cursor = json_object_get(args, "cursor");
    const json_t *limit = json_object_get(args, "limit");
    if ((json_is_integer(cursor) && json_integer_value(cursor) < 0)
        || (json_is_integer(limit) && json_integer_value(limit) < 1)) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "%s must be %s",
                     json_is_integer(limit) ? "limit" : "cursor",
                     "a non-negative integer (limit at least 1)");
        return NULL;
    }
    json_t *logs = kb_service_process_logs(
        call->service, json_string_value(json_object_get(args, "process_id")),
        json_is_integer(cursor) ? json_integer_value(cursor) : -1,
        json_is_integer(limit) ? (size_t)json_integer_value(limit) : KB_MCP_LOGS_LIMIT, err);
    if (!logs)
        return NULL;
    s_bound_frames(logs, call->max_text);
    return s_structured(logs);
}

/* ---- Forks, checkpoints, restores (SPEC section 13) ------------------------ */

static json_t *s_fork_context(const kb_mcp_call_t *call, const json_t *args, kb_error_t *err)
{
    json_t *given = s_given_args(args);
    json_object_del(given, "context_id");
    char *body = json_dumps(given, JSON_COMPACT); /* read as POST /contexts/{id}/fork's */
    KB_NOT_NULL(body);
    json_decref(given);
    kb_fork_request_t request;
    int rc = kb_fork_request_parse(&request, body, strlen(body), err);
    free(body);
    if (rc != 0)
        return NULL;
    json_t *forks = kb_service_context_fork(call->service, s_context_id(args), &request.opts, err);
    kb_fork_request_clear(&request);
    return forks ? s_structured(forks) : NULL;
}

static json_t *s_checkpoint_context(const kb_mcp_call_t *call, const json_t *args, kb_error_t *err)
{
    json_t *checkpoint = kb_service_checkpoint_create(call->service, s_context_id(args), err);
    return checkpoint ? s_structured(checkpoint) : NULL;
}

static json_t *s_restore_context(const kb_mcp_call_t *call, const json_t *args, kb_error_t *err)
{
    const char *checkpoint_id = json_string_value(json_object_get(args, "checkpoint_id"));
    json_t *context
        = kb_service_context_restore(call->service, s_context_id(args), checkpoint_id, err);
    return context ? s_structured(context) : NULL;
}

/* ---- The table ------------------------------------------------------------- */

static const kb_mcp_tool_t s_tools[] = {
    { "run_code", "Run code",
      "Run code in a live Jupyter kernel and return its output, results (images, HTML) and "
      "error. State is kept per context: pass context_id to reuse variables.",
      s_run_in, s_run_out, false, false, s_run_code },
    { "create_context", "Create a context",
      "Start a new kernel (a context) for a language and return its context_id for run_code.",
      s_create_in, S_CONTEXT, false, false, s_create_context },
    { "list_contexts", "List contexts",
      "List the contexts (kernels) that are running, with their state.", s_list_in, s_list_out,
      true, false, s_list_contexts },
    { "delete_context", "Delete a context", "Shut down a context's kernel; its variables are lost.",
      s_id_in, s_done_out, false, true, s_delete_context },
    { "restart_context", "Restart a context",
      "Replace a context's kernel with a fresh one (same context_id, state lost).", s_id_in,
      S_CONTEXT, false, true, s_restart_context },
    { "interrupt_context", "Interrupt a context",
      "Interrupt the code a context is running now (like Ctrl-C).", s_id_in, s_done_out, false,
      false, s_interrupt_context },
    { "list_kernelspecs", "List kernelspecs",
      "List the installed kernels (languages) that contexts can run.", s_none_in, s_specs_out, true,
      false, s_list_kernelspecs },
    { "get_process_logs", "Get a run's logs",
      "Read a run's full stdout/stderr log frames, page by page from a cursor.", s_logs_in,
      s_logs_out, true, false, s_get_process_logs },
    { "fork_context", "Fork a context",
      "Copy a python context: each fork is a new context holding the parent's variables, "
      "imports and data at this point; the two then change independently.",
      s_fork_in, s_list_out, false, false, s_fork_context },
    { "checkpoint_context", "Checkpoint a context",
      "Save a python context's state (variables, imports, data) as a checkpoint that "
      "restore_context can put back.",
      s_id_in, s_checkpoint_out, false, false, s_checkpoint_context },
    { "restore_context", "Restore a context",
      "Put a context back to one of its checkpoints (same context_id; the state since is lost; "
      "the checkpoint stays).",
      s_restore_in, S_CONTEXT, false, true, s_restore_context },
};

#define KB_MCP_TOOLS (sizeof s_tools / sizeof s_tools[0])

static json_t *s_schema(const char *text)
{
    json_t *schema = json_loads(text, 0, NULL);
    KB_NOT_NULL(schema); /* our own constant text: a parse failure is a bug or no memory */
    return schema;
}

json_t *kb_mcp_tools_list(void)
{
    json_t *tools = json_array();
    KB_NOT_NULL(tools);
    for (size_t i = 0; i < KB_MCP_TOOLS; i++) {
        const kb_mcp_tool_t *t = &s_tools[i];
        json_t *tool
            = json_pack("{s:s, s:s, s:s, s:o, s:o, s:{s:s, s:b, s:b, s:b, s:b}}", "name", t->name,
                        "title", t->title, "description", t->description, "inputSchema",
                        s_schema(t->input), "outputSchema", s_schema(t->output), "annotations",
                        "title", t->title, "readOnlyHint", t->read_only, "destructiveHint",
                        t->destructive, "idempotentHint", t->read_only, "openWorldHint", 0);
        KB_NOT_NULL(tool);
        json_array_append_new(tools, tool);
    }
    json_t *list = json_pack("{s:o}", "tools", tools);
    KB_NOT_NULL(list);
    return list;
}

/*  The service's refusal as the tool's error (isError): the model reads
    it and may try otherwise. */
static json_t *s_tool_error(const kb_error_t *err)
{
    char text[1200];
    snprintf(text, sizeof text, "%s: %s", kb_code_name(err->code), err->message);
    json_t *result
        = json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text, "isError", 1);
    KB_NOT_NULL(result);
    return result;
}

json_t *kb_mcp_tools_call(const kb_mcp_call_t *call, const json_t *params, kb_mcp_fault_t *fault)
{
    const char *name = json_string_value(json_object_get(params, "name"));
    const json_t *args = json_object_get(params, "arguments");
    if (!name)
        return s_fault(fault, KB_RPC_INVALID_PARAMS, KB_ERR_BAD_REQUEST, "name",
                       "Invalid params: tools/call needs params.name, a string");
    if (args && !json_is_object(args))
        return s_fault(fault, KB_RPC_INVALID_PARAMS, KB_ERR_BAD_REQUEST, "arguments",
                       "Invalid params: arguments must be an object");
    const kb_mcp_tool_t *tool = NULL;
    for (size_t i = 0; i < KB_MCP_TOOLS && !tool; i++)
        if (strcmp(s_tools[i].name, name) == 0)
            tool = &s_tools[i];
    if (!tool)
        return s_fault(fault, KB_RPC_INVALID_PARAMS, KB_ERR_NOT_FOUND, "name",
                       "Unknown tool: %.100s", name);
    json_t *empty = args ? NULL : json_object();
    json_t *schema = s_schema(tool->input);
    json_t *result = NULL;
    if (s_check_args(schema, args ? args : empty, fault) == 0) {
        kb_error_t err = { KB_OK, "" };
        result = tool->call(call, args ? args : empty, &err);
        bool bad_params = err.code == KB_ERR_BAD_REQUEST || err.code == KB_ERR_INVALID_REQUEST_BODY
                          || err.code == KB_ERR_PAYLOAD_TOO_LARGE;
        if (!result && bad_params)
            s_fault(fault, KB_RPC_INVALID_PARAMS, err.code, s_named_field(schema, err.message),
                    "Invalid params: %s", err.message);
        else if (!result)
            result = s_tool_error(&err);
    }
    json_decref(schema);
    json_decref(empty);
    return result;
}
