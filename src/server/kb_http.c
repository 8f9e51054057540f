/*  kb_http.c - the HTTP mechanics that every route shares: bounded request
    bodies, JSON and error responses, Server-Sent Events fed by a service
    stream, Bearer token checks and the one-line-per-request log. It knows
    no route and makes no service call except reading streams it is given. */
#include "server/kb_http.h"
#include "server/kb_metrics_http.h"
#include "util/kb_utf8.h"

#include <assert.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/*  A stream reader waits for events in slices this long, so that it notices
    a server that stops without waiting a whole keep-alive period. */
#define KB_SSE_SLICE_MS 1000
/*  A stream's rendered-events buffer keeps at most this much memory
    between bursts (MHD asks for up to 64 KiB at a time). */
#define KB_SSE_KEEP (64u << 10)

/* ---- Time ---------------------------------------------------------------- */

double kb_http_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void kb_http_timestamp(char *buf, size_t size)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, size - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

/* ---- Text from the wire --------------------------------------------------- */

void kb_http_text(char *dst, size_t size, const char *src, bool printable)
{
    assert(size > 0);
    const unsigned char *s = (const unsigned char *)(src ? src : "-");
    size_t left = strlen((const char *)s), i = 0;
    while (*s && i + 1 < size) {
        size_t len = kb_utf8_sequence(s, left, NULL);
        if (len == 0 || (printable && (*s <= 0x20 || *s == 0x7f))) {
            dst[i++] = '?';
            s++;
            left--;
            continue;
        }
        if (i + len >= size)
            break;
        memcpy(dst + i, s, len);
        i += len;
        s += len;
        left -= len;
    }
    dst[i] = '\0';
}

/* ---- Auth ---------------------------------------------------------------- */

bool kb_http_authorized(kb_http_req_t *req)
{
    kb_server_t *server = req->server;
    if (server->token_len == 0)
        return true;
    const char *header = MHD_lookup_connection_value(req->connection, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_AUTHORIZATION);
    const char *token = NULL;
    if (header && strncasecmp(header, "Bearer ", 7) == 0)
        token = header + 7;
    else if (header && strncasecmp(header, "token ", 6) == 0)
        token = header + 6;
    else if (req->jupyter)
        token = MHD_lookup_connection_value(req->connection, MHD_GET_ARGUMENT_KIND, "token");
    else if (server->api == KB_API_E2B)
        token = MHD_lookup_connection_value(req->connection, MHD_HEADER_KIND, "X-Access-Token");
    if (!token)
        return false;
    while (*token == ' ')
        token++;
    size_t len = strlen(token);
    while (len > 0 && token[len - 1] == ' ')
        len--;
    if (len == 0 || len > KB_SERVER_TOKEN_MAX)
        return false;
    /* Compare the whole zero-padded buffer so the time depends on neither
       the contents nor the length of the configured token. */
    char given[KB_SERVER_TOKEN_MAX] = { 0 };
    memcpy(given, token, len);
    int differ = CRYPTO_memcmp(given, server->token, sizeof given);
    return (differ == 0) & (len == server->token_len);
}

/* ---- Body ---------------------------------------------------------------- */

void kb_http_body_append(kb_http_req_t *req, const char *data, size_t size)
{
    if (req->body_status != KB_BUF_OK)
        return;
    req->body_status = kb_buf_append(&req->body, data, size);
    if (req->body_status != KB_BUF_OK)
        kb_buf_reset(&req->body);
}

/* ---- Responses ----------------------------------------------------------- */

static void queue(kb_http_req_t *req, unsigned status, struct MHD_Response *response)
{
    if (MHD_queue_response(req->connection, status, response) == MHD_YES)
        req->status = status;
    else
        kb_server_log(req->server->log_format, "error", "cannot queue a %u response for %s %s",
                      status, req->method, req->path);
}

/*  Queue what buf holds as the body (taken over) with a content type; on
    failure to build the response the connection is simply closed by MHD. */
static void queue_buffer(kb_http_req_t *req, unsigned status, kb_buf_t *buf, const char *type)
{
    size_t len;
    char *data = kb_buf_take(buf, &len);
    if (!data)
        return;
    struct MHD_Response *response
        = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
    if (!response) {
        free(data);
        return;
    }
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (req->close)
        MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(response, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED && req->allow)
        MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, req->allow);
    queue(req, status, response);
    MHD_destroy_response(response);
}

void kb_http_reply_json(kb_http_req_t *req, unsigned status, json_t *body)
{
    kb_buf_t buf = KB_BUF_INIT;
    kb_buf_status_t rc = body ? kb_buf_append_json(&buf, body, JSON_COMPACT) : KB_BUF_NOMEM;
    json_decref(body);
    if (rc != KB_BUF_OK) {
        kb_buf_free(&buf);
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "cannot render the response of %s %s",
                             req->method, req->path);
        return;
    }
    queue_buffer(req, status, &buf, "application/json");
}

void kb_http_reply_empty(kb_http_req_t *req, unsigned status)
{
    queue(req, status, req->server->empty);
}

void kb_http_reply_text(kb_http_req_t *req, unsigned status, const char *text)
{
    kb_buf_t buf = KB_BUF_INIT;
    kb_buf_puts(&buf, text); /* a failure is seen by kb_buf_take */
    queue_buffer(req, status, &buf, "text/plain; charset=utf-8");
}

void kb_http_reply_response(kb_http_req_t *req, unsigned status, struct MHD_Response *response)
{
    queue(req, status, response);
}

/*  The native JSON error body into out (empty): {code, message,
    status_code, path, method, timestamp}. Returns the HTTP status. */
static unsigned error_body(kb_buf_t *out, kb_code_t code, const char *message, const char *path,
                           const char *method)
{
    unsigned status = (unsigned)kb_code_http_status(code);
    char stamp[40];
    kb_http_timestamp(stamp, sizeof stamp);
    json_t *body = json_pack("{s:s, s:s, s:i, s:s?, s:s?, s:s}", "code", kb_code_name(code),
                             "message", message, "status_code", (int)status, "path", path, "method",
                             method, "timestamp", stamp);
    if (!body || kb_buf_append_json(out, body, JSON_COMPACT) != KB_BUF_OK) {
        /* Out of memory: say so plainly. */
        kb_buf_free(out);
        kb_buf_puts(out, "{\"code\":\"INTERNAL_ERROR\",\"message\":\"out of memory\"}");
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
    json_decref(body);
    return status;
}

void kb_http_reply_error(kb_http_req_t *req, const kb_error_t *err)
{
    kb_code_t code = err->code == KB_OK ? KB_ERR_INTERNAL : err->code;
    unsigned status = (unsigned)kb_code_http_status(code);
    /* Path and message may carry bytes of the request that are not UTF-8;
       JSON cannot, and bad input must never turn into a 500. */
    char path[512], message[sizeof err->message];
    kb_http_text(path, sizeof path, req->path, false);
    kb_http_text(message, sizeof message, err->message[0] ? err->message : "internal error", false);
    if (req->server->api == KB_API_E2B) {
        kb_http_reply_text(req, status, message);
        return;
    }
    if (req->jupyter) {
        kb_http_reply_json(req, status,
                           json_pack("{s:s, s:s}", "message", message, "reason",
                                     MHD_get_reason_phrase_for(status)));
        return;
    }
    kb_buf_t buf = KB_BUF_INIT;
    status = error_body(&buf, code, message, path, req->method);
    queue_buffer(req, status, &buf, "application/json");
}

void kb_http_reply_errorf(kb_http_req_t *req, kb_code_t code, const char *fmt, ...)
{
    kb_error_t err = { .code = code };
    va_list args;
    va_start(args, fmt);
    vsnprintf(err.message, sizeof err.message, fmt, args);
    va_end(args);
    kb_http_reply_error(req, &err);
}

/* ---- Result documents ------------------------------------------------------ */

/*  A result small enough for one buffer goes out with its length; a larger
    one is written piece by piece as the client takes it. */
#define KB_DOC_BUFFERED (64 * 1024)

typedef struct {
    kb_result_doc_t *doc;
    kb_buf_t first; /* read before the response was made */
    size_t sent;
} kb_doc_reply_t;

static ssize_t doc_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    kb_doc_reply_t *reply = cls;
    if (reply->sent < reply->first.len) {
        size_t n = reply->first.len - reply->sent;
        n = n < max ? n : max;
        memcpy(out, reply->first.data + reply->sent, n);
        reply->sent += n;
        return (ssize_t)n;
    }
    kb_buf_free(&reply->first);
    size_t n = kb_result_doc_read(reply->doc, out, max);
    if (n == (size_t)-1)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    return n ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
}

static void doc_free(void *cls)
{
    kb_doc_reply_t *reply = cls;
    kb_result_doc_destroy(&reply->doc);
    kb_buf_free(&reply->first);
    free(reply);
}

void kb_http_reply_doc(kb_http_req_t *req, unsigned status, kb_result_doc_t *doc)
{
    kb_doc_reply_t *reply = calloc(1, sizeof *reply);
    if (!reply) {
        kb_result_doc_destroy(&doc);
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "out of memory");
        return;
    }
    reply->doc = doc;
    /*  Read on the stack, kept at its size: a buffer of KB_DOC_BUFFERED
        for every answer would be a mapping of its own, made and unmapped
        per run (malloc's fixed mmap threshold, kb_cli_serve.c). */
    char first[KB_DOC_BUFFERED];
    size_t n = kb_result_doc_read(doc, first, sizeof first);
    if (n == (size_t)-1 || kb_buf_append(&reply->first, first, n) != KB_BUF_OK) {
        doc_free(reply);
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "cannot render the result");
        return;
    }
    char more[16];
    size_t m = kb_result_doc_read(doc, more, sizeof more);
    if (m == (size_t)-1 || (m > 0 && kb_buf_append(&reply->first, more, m) != KB_BUF_OK)) {
        doc_free(reply);
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "cannot render the result");
        return;
    }
    if (m == 0) {
        kb_buf_t buf = reply->first; /* all of it: one buffer, with its length */
        reply->first = (kb_buf_t)KB_BUF_INIT;
        doc_free(reply);
        queue_buffer(req, status, &buf, "application/json");
        return;
    }
    struct MHD_Response *response
        = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, doc_read, reply, doc_free);
    if (!response) {
        doc_free(reply);
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "out of memory");
        return;
    }
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    queue(req, status, response);
    MHD_destroy_response(response);
}

/* ---- Server-Sent Events -------------------------------------------------- */

typedef struct {
    kb_server_t *server; /* borrowed */
    kb_stream_t *stream; /* owned */
    kb_buf_t pending;    /* rendered, not yet handed to MHD */
    size_t sent;         /* bytes of pending already handed over */
    bool done;           /* the last event is in pending */
    bool id_field;
    kb_result_doc_t *doc; /* the result being written after pending */
} kb_sse_t;

static int sse_append_event(kb_sse_t *sse, kb_event_t *event)
{
    kb_buf_t *buf = &sse->pending;
    if (event->type == KB_EVENT_INPUT)
        return 0; /* not an event of SPEC's stream */
    kb_buf_printf(buf, "event: %s\n", kb_event_type_name(event->type));
    if (sse->id_field && event->type == KB_EVENT_LOG) {
        json_t *cursor = json_object_get(event->data, "cursor");
        if (json_is_integer(cursor))
            kb_buf_printf(buf, "id: %lld\n", (long long)json_integer_value(cursor));
    }
    /* Compact JSON has no raw newline, so one data line carries it. */
    kb_buf_puts(buf, "data: ");
    if (event->type == KB_EVENT_RESULT && event->doc) {
        /* The result goes out from the run's kept output, after pending. */
        sse->doc = event->doc;
        event->doc = NULL;
        sse->done = true;
        return kb_buf_status(buf) == KB_BUF_OK ? 0 : -1;
    }
    kb_buf_append_json(buf, event->data, JSON_COMPACT);
    if (kb_buf_puts(buf, "\n\n") != KB_BUF_OK) /* failures are sticky: one check */
        return -1;
    if (event->type == KB_EVENT_RESULT || event->type == KB_EVENT_END)
        sse->done = true;
    return 0;
}

/*  Fill pending with the next event (waiting for it, with a keep-alive
    comment after each idle period) and whatever else is already queued,
    up to about max bytes. Returns -1 when the server stops. */
static int sse_fill(kb_sse_t *sse, size_t max)
{
    unsigned keepalive = sse->server->sse_keepalive_ms;
    double deadline = kb_http_now() + keepalive / 1000.0;
    kb_event_t *event = NULL;
    for (;;) {
        if (atomic_load(&sse->server->stopping))
            return -1;
        double left_ms = (deadline - kb_http_now()) * 1000.0;
        if (left_ms <= 0) {
            return kb_buf_puts(&sse->pending, ": keep-alive\n\n") == KB_BUF_OK ? 0 : -1;
        }
        int slice = left_ms < KB_SSE_SLICE_MS ? (int)left_ms + 1 : KB_SSE_SLICE_MS;
        event = kb_stream_next(sse->stream, slice);
        /* The first event goes out at once; only events already waiting
           are coalesced with it, so batching never delays output. */
        while (event) {
            int rc = sse_append_event(sse, event);
            kb_event_destroy(&event);
            if (rc < 0)
                return -1;
            if (sse->done || sse->pending.len >= max)
                break;
            event = kb_stream_next(sse->stream, 0);
        }
        if (sse->pending.len > 0 || sse->done)
            return 0; /* else what came renders to nothing: wait on */
        if (kb_stream_ended(sse->stream)) {
            sse->done = true;
            return 0;
        }
    }
}

static ssize_t sse_read(void *cls, uint64_t pos, char *out, size_t max)
{
    kb_sse_t *sse = cls;
    if (sse->sent == sse->pending.len && sse->doc) {
        size_t n = kb_result_doc_read(sse->doc, out, max);
        if (n == (size_t)-1)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (n > 0)
            return (ssize_t)n;
        kb_result_doc_destroy(&sse->doc);
        kb_buf_trim(&sse->pending, KB_SSE_KEEP);
        sse->sent = 0;
        if (kb_buf_puts(&sse->pending, "\n\n") != KB_BUF_OK)
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    if (sse->sent == sse->pending.len) {
        /* All handed over: a burst (say the 20 MiB result) goes back to
           small before the next events are rendered. */
        kb_buf_trim(&sse->pending, KB_SSE_KEEP);
        sse->sent = 0;
        if (sse->done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (sse_fill(sse, max) < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (sse->pending.len == 0)
            return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = sse->pending.len - sse->sent;
    if (n > max)
        n = max;
    memcpy(out, sse->pending.data + sse->sent, n);
    sse->sent += n;
    return (ssize_t)n;
}

/*  Called by MHD when the response ends or the client goes away: the
    stream is dropped; the run itself goes on in the service. */
static void sse_free(void *cls)
{
    kb_sse_t *sse = cls;
    kb_stream_destroy(&sse->stream);
    kb_result_doc_destroy(&sse->doc);
    kb_buf_free(&sse->pending);
    free(sse);
}

void kb_http_reply_stream(kb_http_req_t *req, kb_stream_t *stream, bool id_field)
{
    kb_sse_t *sse = calloc(1, sizeof *sse);
    if (!sse) {
        kb_stream_destroy(&stream);
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "out of memory");
        return;
    }
    sse->server = req->server;
    sse->stream = stream;
    sse->id_field = id_field;
    struct MHD_Response *response
        = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, sse_read, sse, sse_free);
    if (!response) {
        sse_free(sse);
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "out of memory");
        return;
    }
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(response, "X-Accel-Buffering", "no");
    queue(req, MHD_HTTP_OK, response);
    MHD_destroy_response(response);
}

/* ---- Logs ---------------------------------------------------------------- */

static void write_line(const char *line, size_t len)
{
    /* One write per line keeps lines whole between threads. */
    while (len > 0) {
        ssize_t n = write(STDERR_FILENO, line, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        line += n;
        len -= (size_t)n;
    }
}

static void write_json_line(json_t *line)
{
    kb_buf_t buf = KB_BUF_INIT;
    if (line && kb_buf_append_json(&buf, line, JSON_COMPACT) == KB_BUF_OK
        && kb_buf_putc(&buf, '\n') == KB_BUF_OK)
        write_line(buf.data, buf.len);
    kb_buf_free(&buf);
    json_decref(line);
}

/*  Write text (up to len bytes) as one line, cut to fit and always ended
    by a newline. */
static void write_text_line(char *line, size_t size, int n)
{
    size_t len = n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
    if (len > 0 && line[len - 1] != '\n')
        line[len - 1] = '\n';
    write_line(line, len);
}

void kb_server_log(kb_log_format_t format, const char *level, const char *fmt, ...)
{
    char stamp[40], raw[1024], message[1024];
    kb_http_timestamp(stamp, sizeof stamp);
    va_list args;
    va_start(args, fmt);
    vsnprintf(raw, sizeof raw, fmt, args);
    va_end(args);
    kb_http_text(message, sizeof message, raw, false);
    if (format == KB_LOG_JSON) {
        write_json_line(
            json_pack("{s:s, s:s, s:s}", "time", stamp, "level", level, "msg", message));
        return;
    }
    char line[1200];
    int n = snprintf(line, sizeof line, "%s %s %s\n", stamp, level, message);
    write_text_line(line, sizeof line, n);
}

static const char *termination_note(enum MHD_RequestTerminationCode toe)
{
    switch (toe) {
        case MHD_REQUEST_TERMINATED_COMPLETED_OK:
            return NULL;
        case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED:
            return "timeout";
        case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN:
            return "shutdown";
        case MHD_REQUEST_TERMINATED_CLIENT_ABORT:
            return "client closed";
        default:
            return "error";
    }
}

void kb_http_log_request(kb_http_req_t *req, enum MHD_RequestTerminationCode toe)
{
    kb_metrics_count_request(req->method, req->status);
    char stamp[40], path[512];
    kb_http_timestamp(stamp, sizeof stamp);
    double ms = (kb_http_now() - req->started) * 1000.0;
    const char *note = termination_note(toe);
    if (req->server->log_format == KB_LOG_JSON) {
        kb_http_text(path, sizeof path, req->path, false);
        json_t *line
            = json_pack("{s:s, s:s, s:s, s:s, s:i, s:f}", "time", stamp, "level", "info", "method",
                        req->method, "path", path, "status", (int)req->status, "duration_ms", ms);
        if (line && note)
            json_object_set_new(line, "note", json_string(note));
        write_json_line(line);
        return;
    }
    /* The path is decoded: keep control bytes and spaces out of the line. */
    kb_http_text(path, sizeof path, req->path, true);
    char line[800];
    int n = snprintf(line, sizeof line, "%s %s %s %u %.3fms%s%s\n", stamp, req->method, path,
                     req->status, ms, note ? " " : "", note ? note : "");
    write_text_line(line, sizeof line, n);
}
