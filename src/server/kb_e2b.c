/*  kb_e2b.c - the routes of E2B's code-interpreter server (see kb_e2b.h),
    one function each, on the service's contexts and runs. Like kb_routes.c
    it reads bodies with kb_request's parser (E2B's field names and ids),
    calls kb_service_* and renders; the one thing of its own is the
    translation of a run's events into E2B's lines (stdout, stderr, result,
    error, number_of_executions, keepalive, end_of_execution), streamed as
    they happen. */
#include "server/kb_e2b.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/kb_http.h"
#include "server/kb_router.h"
#include "service/engine/kb_request.h"

/*  E2B's server sends a keepalive line after this long without output. */
#define KB_E2B_KEEPALIVE_MS 5000
/*  A reader waits for events in slices this long, looking between them
    whether the client went away or the server stops. */
#define KB_E2B_SLICE_MS 200
/*  The rendered-lines buffer keeps at most this much between bursts. */
#define KB_E2B_KEEP (64u << 10)

/* ---- Start-up ------------------------------------------------------------ */

int kb_e2b_start_defaults(kb_service_t *service, kb_log_format_t format)
{
    static const char *const languages[] = { "python", "javascript" };
    for (size_t i = 0; i < sizeof languages / sizeof languages[0]; i++) {
        kb_error_t err = { KB_OK, "" };
        kb_context_opts_t opts = { .language = languages[i] };
        json_t *ctx = kb_service_context_default(service, &opts, &err);
        if (ctx) {
            kb_server_log(format, "info", "e2b: the default %s context is ready", languages[i]);
            json_decref(ctx);
            continue;
        }
        if (i == 0) {
            kb_server_log(format, "error", "e2b: cannot start the default python context: %s: %s",
                          kb_code_name(err.code), err.message);
            return -1;
        }
        kb_server_log(format, "warn", "e2b: no default %s context: %s: %s", languages[i],
                      kb_code_name(err.code), err.message);
    }
    return 0;
}

/* ---- Replies ---------------------------------------------------------------- */

/*  {id, language, cwd} of a service context object (borrowed). */
static json_t *context_json(json_t *ctx)
{
    json_t *cwd = json_object_get(ctx, "cwd");
    json_t *out = json_pack("{s:O, s:O}", "id", json_object_get(ctx, "context_id"), "language",
                            json_object_get(ctx, "language"));
    if (!out)
        return NULL;
    if (json_is_string(cwd)) {
        json_object_set(out, "cwd", cwd);
    } else {
        char here[4096];
        json_object_set_new(out, "cwd", json_string(getcwd(here, sizeof here) ? here : "/"));
    }
    return out;
}

/* ---- Routes: health and contexts ----------------------------------------- */

static void route_health(kb_http_req_t *req)
{
    kb_http_reply_json(req, MHD_HTTP_OK, json_string("OK"));
}

static void route_contexts_list(kb_http_req_t *req)
{
    kb_error_t err = { KB_OK, "" };
    json_t *list = kb_service_context_list(req->server->service, true, &err);
    if (!list) {
        kb_http_reply_error(req, &err);
        return;
    }
    json_t *out = json_array();
    json_t *ctx;
    size_t i;
    json_array_foreach(json_object_get(list, "contexts"), i, ctx)
    {
        if (json_array_append_new(out, context_json(ctx)) != 0) {
            json_decref(out);
            out = NULL; /* out of memory: kb_http_reply_json answers 500 */
            break;
        }
    }
    json_decref(list);
    kb_http_reply_json(req, MHD_HTTP_OK, out);
}

static void route_contexts_create(kb_http_req_t *req)
{
    kb_error_t err = { KB_OK, "" };
    kb_context_request_t request;
    if (kb_context_request_parse(&request, KB_FRONT_E2B, req->body.data, req->body.len, &err)
        != 0) {
        kb_http_reply_error(req, &err);
        return;
    }
    json_t *ctx = kb_service_context_create(req->server->service, &request.opts, &err);
    kb_context_request_clear(&request);
    if (!ctx) {
        kb_http_reply_error(req, &err);
        return;
    }
    kb_http_reply_json(req, MHD_HTTP_OK, context_json(ctx));
    json_decref(ctx);
}

/*  The service's id for the path's context id, or NULL with a 404 queued. */
static const char *path_context_id(kb_http_req_t *req)
{
    kb_error_t err = { KB_OK, "" };
    const char *id = kb_request_e2b_context_id(req->id, &err);
    if (!id)
        kb_http_reply_error(req, &err);
    return id;
}

static void route_context_restart(kb_http_req_t *req)
{
    const char *id = path_context_id(req);
    if (!id)
        return;
    kb_error_t err = { KB_OK, "" };
    json_t *ctx = kb_service_context_restart(req->server->service, id, &err);
    if (!ctx) {
        kb_http_reply_error(req, &err);
        return;
    }
    json_decref(ctx);
    kb_http_reply_json(req, MHD_HTTP_OK, json_null());
}

static void route_context_delete(kb_http_req_t *req)
{
    const char *id = path_context_id(req);
    if (!id)
        return;
    kb_error_t err = { KB_OK, "" };
    if (kb_service_context_delete(req->server->service, id, &err) < 0) {
        kb_http_reply_error(req, &err);
        return;
    }
    kb_http_reply_json(req, MHD_HTTP_OK, json_null());
}

/* ---- Execute: events to E2B's lines -------------------------------------- */

typedef struct {
    kb_server_t *server;   /* borrowed */
    kb_service_t *service; /* borrowed */
    kb_stream_t *stream;   /* owned */
    int fd;                /* the client's socket, watched for a hang-up */
    char process_id[KB_HTTP_ID_MAX + 1];
    kb_buf_t pending;    /* rendered lines not yet handed to MHD */
    size_t sent;         /* bytes of pending already handed over */
    bool errored;        /* an error line went out */
    char error_name[64]; /* its name */
    bool counted;        /* the number_of_executions line went out */
    bool done;           /* end_of_execution is in pending */
} kb_e2b_exec_t;

/*  Append one line (stolen; NULL: out of memory). 0 or -1. */
static int exec_append(kb_e2b_exec_t *self, json_t *line)
{
    kb_buf_status_t status = KB_BUF_NOMEM;
    if (line && kb_buf_append_json(&self->pending, line, JSON_COMPACT) == KB_BUF_OK)
        status = kb_buf_putc(&self->pending, '\n');
    json_decref(line);
    return status == KB_BUF_OK ? 0 : -1;
}

/*  Which field of E2B's result a MIME type fills; NULL: it goes to extra. */
static const char *result_field(const char *mime)
{
    static const char *const map[][2] = {
        { "text/plain", "text" },        { "text/html", "html" },
        { "text/markdown", "markdown" }, { "image/svg+xml", "svg" },
        { "image/png", "png" },          { "image/jpeg", "jpeg" },
        { "application/pdf", "pdf" },    { "text/latex", "latex" },
        { "application/json", "json" },  { "application/javascript", "javascript" },
        { "e2b/data", "data" },          { "e2b/chart", "chart" },
        { KB_MIME_TABLE, "data" },       { KB_MIME_CHART, "chart" },
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(mime, map[i][0]) == 0)
            return map[i][1];
    return NULL;
}

/*  A chart as E2B's API gives it: the chart format (docs/charts.md) says
    "" for a title or axis label that is not set, E2B's says null; a
    superchart's charts alike. A new value, or NULL when out of memory. */
static json_t *e2b_chart(json_t *chart)
{
    static const char *const nullable[] = { "title", "x_label", "y_label" };
    json_t *copy = json_copy(chart);
    if (!copy || !json_is_object(copy))
        return copy;
    for (size_t i = 0; i < sizeof nullable / sizeof nullable[0]; i++) {
        json_t *text = json_object_get(copy, nullable[i]);
        if (json_is_string(text) && json_string_length(text) == 0
            && json_object_set_new(copy, nullable[i], json_null()) < 0)
            goto fail;
    }
    const char *type = json_string_value(json_object_get(copy, "type"));
    json_t *charts = json_object_get(copy, "elements");
    if (!type || strcmp(type, "superchart") != 0 || !json_is_array(charts))
        return copy;
    json_t *mapped = json_array();
    size_t i;
    json_t *element;
    json_array_foreach(charts, i, element)
    {
        if (!mapped || json_array_append_new(mapped, e2b_chart(element)) < 0) {
            json_decref(mapped);
            goto fail;
        }
    }
    if (json_object_set_new(copy, "elements", mapped) < 0)
        goto fail;
    return copy;
fail:
    json_decref(copy);
    return NULL;
}

/*  A results entry of the service ({data, is_main_result, ...}) as E2B's
    result line. */
static json_t *result_line(json_t *entry)
{
    json_t *bundle = json_object_get(entry, "data");
    json_t *line = json_pack("{s:s, s:b}", "type", "result", "is_main_result",
                             json_is_true(json_object_get(entry, "is_main_result")));
    json_t *extra = json_object();
    if (!line || !extra) {
        json_decref(line);
        json_decref(extra);
        return NULL;
    }
    const char *mime;
    json_t *value;
    json_object_foreach(bundle, mime, value)
    {
        const char *field = result_field(mime);
        if (!field) {
            json_object_set(extra, mime, value);
            continue;
        }
        if (strcmp(field, "chart") == 0) {
            json_object_set_new(line, field, e2b_chart(value));
            continue;
        }
        const char *text = json_string_value(value);
        size_t len = json_string_length(value);
        /* E2B shows a repr'd string without its one pair of quotes. */
        if (strcmp(field, "text") == 0 && text && len >= 2 && (text[0] == '\'' || text[0] == '"')
            && text[len - 1] == text[0])
            json_object_set_new(line, field, json_stringn(text + 1, len - 2));
        else
            json_object_set(line, field, value);
    }
    if (json_object_size(extra) > 0)
        json_object_set(line, "extra", extra);
    json_decref(extra);
    return line;
}

/*  An error {name, value, traceback:[...]} as E2B's error line, the
    traceback joined into one string. */
static json_t *error_line(json_t *error)
{
    kb_buf_t joined = KB_BUF_INIT;
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(error, "traceback"), i, item)
    {
        if (!json_is_string(item))
            continue;
        if (joined.len > 0)
            kb_buf_putc(&joined, '\n');
        kb_buf_append(&joined, json_string_value(item), json_string_length(item));
    }
    size_t len;
    char *text = kb_buf_take(&joined, &len);
    if (!text)
        return NULL;
    json_t *name = json_object_get(error, "name");
    json_t *value = json_object_get(error, "value");
    json_t *line
        = json_pack("{s:s, s:s, s:s, s:s%}", "type", "error", "name",
                    json_is_string(name) ? json_string_value(name) : "Error", "value",
                    json_is_string(value) ? json_string_value(value) : "", "traceback", text, len);
    free(text);
    return line;
}

/*  The number_of_executions line, once per execution. */
static int exec_count(kb_e2b_exec_t *self, json_t *count)
{
    if (self->counted || !json_is_integer(count))
        return 0;
    self->counted = true;
    return exec_append(
        self, json_pack("{s:s, s:O}", "type", "number_of_executions", "execution_count", count));
}

/*  Render one event of the run; most add one line, some none. */
static int exec_translate(kb_e2b_exec_t *self, const kb_event_t *event)
{
    json_t *data = event->data;
    switch (event->type) {
        case KB_EVENT_STDOUT:
        case KB_EVENT_STDERR: {
            json_t *text = json_object_get(data, "text");
            json_t *stamp = json_object_get(data, "timestamp");
            char now[40];
            if (!json_is_string(stamp))
                kb_http_timestamp(now, sizeof now);
            json_t *when = json_is_string(stamp) ? json_incref(stamp) : json_string(now);
            return exec_append(self, json_pack("{s:s, s:O, s:o}", "type",
                                               event->type == KB_EVENT_STDOUT ? "stdout" : "stderr",
                                               "text", text, "timestamp", when));
        }
        case KB_EVENT_DISPLAY:
            return exec_append(self, result_line(data));
        case KB_EVENT_ERROR:
            if (self->errored)
                return 0;
            self->errored = true;
            snprintf(self->error_name, sizeof self->error_name, "%s",
                     json_string_value(json_object_get(data, "name")) ?: "");
            return exec_append(self, error_line(data));
        case KB_EVENT_INPUT:
            return exec_count(self, json_object_get(data, "execution_count"));
        case KB_EVENT_RESULT: {
            json_t *error = json_object_get(data, "error");
            /* A kernel that echoes no input: the count of its reply. */
            if (exec_count(self, json_object_get(data, "execution_count")) < 0)
                return -1;
            /* Errors of the run's end (KernelDied, TimeoutError,
               SandboxStopped, MemoryLimitExceeded) come only with the
               result; one that replaces the kernel's own (its
               KeyboardInterrupt when it was interrupted) goes too, and
               E2B's SDKs keep the last. */
            const char *name = json_string_value(json_object_get(error, "name"));
            if (json_is_object(error)
                && (!self->errored
                    || strncmp(name ? name : "", self->error_name, sizeof self->error_name) != 0)) {
                self->errored = true;
                if (exec_append(self, error_line(error)) < 0)
                    return -1;
            }
            self->done = true;
            return exec_append(self, json_pack("{s:s}", "type", "end_of_execution"));
        }
        default:
            return 0; /* display updates, clear_output, system lines: not E2B's */
    }
}

/*  True when the client closed its side or the socket failed. */
static bool client_gone(int fd)
{
    if (fd < 0)
        return false;
    struct pollfd pfd = { .fd = fd, .events = POLLRDHUP };
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static void exec_interrupt(kb_e2b_exec_t *self, const char *why)
{
    if (!self->process_id[0] || self->done || atomic_load(&self->server->stopping))
        return;
    kb_server_log(self->server->log_format, "info", "e2b: %s; interrupting %s", why,
                  self->process_id);
    kb_error_t err = { KB_OK, "" };
    kb_service_process_signal(self->service, self->process_id, "SIGINT", &err);
    self->done = true; /* once */
}

/*  Fill pending with the next lines, waiting for them (a keepalive line
    after each idle period). -1: stop the response (server stopping, client
    gone, out of memory). */
static int exec_fill(kb_e2b_exec_t *self, size_t max)
{
    double deadline = kb_http_now() + self->server->sse_keepalive_ms / 1000.0;
    for (;;) {
        if (atomic_load(&self->server->stopping))
            return -1;
        if (client_gone(self->fd)) {
            exec_interrupt(self, "the client went away during an execution");
            return -1;
        }
        double left_ms = (deadline - kb_http_now()) * 1000.0;
        if (left_ms <= 0)
            return exec_append(self, json_pack("{s:s}", "type", "keepalive"));
        int slice = left_ms < KB_E2B_SLICE_MS ? (int)left_ms + 1 : KB_E2B_SLICE_MS;
        kb_event_t *event = kb_stream_next(self->stream, slice);
        while (event) {
            int rc = exec_translate(self, event);
            kb_event_destroy(&event);
            if (rc < 0)
                return -1;
            if (self->done || self->pending.len >= max)
                break;
            event = kb_stream_next(self->stream, 0);
        }
        if (self->pending.len > 0)
            return 0;
        if (kb_stream_ended(self->stream)) {
            /* Cannot happen (RESULT ends every run), but never leave a
               client without its last line. */
            self->done = true;
            return exec_append(self, json_pack("{s:s}", "type", "end_of_execution"));
        }
    }
}

static ssize_t exec_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    kb_e2b_exec_t *self = cls;
    if (self->sent == self->pending.len) {
        /* All handed over: a burst goes back to small first. */
        kb_buf_trim(&self->pending, KB_E2B_KEEP);
        self->sent = 0;
        if (self->done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (exec_fill(self, max) < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = self->pending.len - self->sent;
    if (n > max)
        n = max;
    memcpy(out, self->pending.data + self->sent, n);
    self->sent += n;
    return (ssize_t)n;
}

/*  The response ended: after end_of_execution, or cut short because the
    client went away, in which case the run is interrupted (E2B's rule). */
static void exec_free(void *cls)
{
    kb_e2b_exec_t *self = cls;
    exec_interrupt(self, "the client went away during an execution");
    kb_stream_destroy(&self->stream);
    kb_buf_free(&self->pending);
    free(self);
}

static void route_execute(kb_http_req_t *req)
{
    kb_error_t err = { KB_OK, "" };
    kb_run_request_t request;
    if (kb_run_request_parse(&request, KB_FRONT_E2B, req->body.data, req->body.len, &err) != 0) {
        kb_http_reply_error(req, &err);
        return;
    }
    kb_e2b_exec_t *exec = calloc(1, sizeof *exec);
    if (!exec) {
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "out of memory");
        goto done;
    }
    exec->server = req->server;
    exec->service = req->server->service;
    exec->fd = -1;
    exec->stream = kb_service_run_start(req->server->service, &request.opts, &err);
    if (!exec->stream) {
        free(exec);
        kb_http_reply_error(req, &err);
        goto done;
    }
    /* START is the first event of every run, queued before the answer. */
    kb_event_t *start = kb_stream_next(exec->stream, 10000);
    if (start && start->type == KB_EVENT_START) {
        const char *pid = json_string_value(json_object_get(start->data, "process_id"));
        if (pid)
            snprintf(exec->process_id, sizeof exec->process_id, "%s", pid);
    } else if (start) {
        exec_translate(exec, start);
    }
    kb_event_destroy(&start);
    const union MHD_ConnectionInfo *info
        = MHD_get_connection_info(req->connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info)
        exec->fd = info->connect_fd;
    struct MHD_Response *response = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024,
                                                                      exec_read, exec, exec_free);
    if (!response) {
        exec_free(exec);
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "out of memory");
        goto done;
    }
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(response, "X-Accel-Buffering", "no");
    kb_http_reply_response(req, MHD_HTTP_OK, response);
    MHD_destroy_response(response);
done:
    kb_run_request_clear(&request);
}

/* ---- Routing ------------------------------------------------------------- */

/*  No trailing '/'; an id over KB_HTTP_ID_MAX reaches the route, which
    finds no such context. */
static const kb_route_t s_routes[] = {
    { "GET", "/health", route_health, KB_ROUTE_OPEN | KB_ROUTE_RESERVE },
    { "POST", "/execute", route_execute, KB_ROUTE_BODY },
    { "GET", "/contexts", route_contexts_list, KB_ROUTE_TOKEN },
    { "POST", "/contexts", route_contexts_create, KB_ROUTE_BODY },
    { "DELETE", "/contexts/{id}", route_context_delete, KB_ROUTE_TOKEN },
    { "POST", "/contexts/{id}/restart", route_context_restart, KB_ROUTE_TOKEN },
};

const kb_route_table_t kb_e2b_routes = {
    .name = "e2b",
    .routes = s_routes,
    .count = sizeof s_routes / sizeof s_routes[0],
};
