/*  kb_mcp_http.c - MCP's Streamable HTTP transport at /mcp on the native
    listener (SPEC section 14): POST carries JSON-RPC messages (answered as
    application/json, or as an SSE stream when a tools/call asks for
    progress), GET opens the session's stream of server messages, DELETE
    ends a session. Here: Origin (loopback unless --mcp-allow-origin),
    Mcp-Session-Id, MCP-Protocol-Version, the HTTP statuses; what a
    message does is kb_mcp.c's. The token is checked before any of this,
    as for every route (Authorization: Bearer). */
#include "server/kb_http.h"
#include "server/kb_mcp.h"
#include "server/kb_mcp_stream.h"
#include "server/kb_router.h"
#include "util/kb_alloc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KB_MCP_SLICE_MS 1000

/* ---- Replies ----------------------------------------------------------------- */

static const char *s_header(kb_http_req_t *req, const char *name)
{
    return MHD_lookup_connection_value(req->connection, MHD_HEADER_KIND, name);
}

/*  Queue body (stolen; NULL: an empty 202) with the session's id. */
static void s_reply(kb_http_req_t *req, unsigned status, json_t *body,
                    const kb_mcp_session_t *session)
{
    if (!body) {
        kb_http_reply_empty(req, MHD_HTTP_ACCEPTED);
        return;
    }
    kb_buf_t buf = KB_BUF_INIT;
    kb_buf_status_t rc = kb_buf_append_json(&buf, body, JSON_COMPACT);
    json_decref(body);
    size_t len;
    char *data = rc == KB_BUF_OK ? kb_buf_take(&buf, &len) : NULL;
    kb_buf_free(&buf);
    struct MHD_Response *response
        = data ? MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!response) {
        free(data);
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "out of memory");
        return;
    }
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (session)
        MHD_add_response_header(response, "Mcp-Session-Id", kb_mcp_session_id(session));
    kb_http_reply_response(req, status, response);
    MHD_destroy_response(response);
}

static void s_refuse(kb_http_req_t *req, unsigned status, kb_code_t code, const char *message)
{
    s_reply(req, status, kb_mcp_error(NULL, KB_RPC_INVALID_REQUEST, code, NULL, message), NULL);
}

/* ---- Gates --------------------------------------------------------------------- */

/*  Origin and MCP-Protocol-Version; then, when need_session, the session
    Mcp-Session-Id names (a reference into *session). -1 with the refusal
    queued. */
static int s_gate(kb_http_req_t *req, bool need_session, kb_mcp_session_t **session)
{
    kb_mcp_t *mcp = req->server->mcp;
    const char *origin = s_header(req, "Origin");
    if (origin && !kb_mcp_origin_allowed(mcp, origin)) {
        s_refuse(req, MHD_HTTP_FORBIDDEN, KB_ERR_UNAUTHORIZED,
                 "Forbidden: this Origin may not call /mcp (loopback origins only, unless "
                 "--mcp-allow-origin names it)");
        return -1;
    }
    const char *version = s_header(req, "MCP-Protocol-Version");
    if (version && !kb_mcp_version_supported(version)) {
        s_refuse(req, MHD_HTTP_BAD_REQUEST, KB_ERR_BAD_REQUEST,
                 "Bad Request: unsupported MCP-Protocol-Version (2025-03-26, 2025-06-18 and "
                 "2025-11-25 are)");
        return -1;
    }
    if (!need_session)
        return 0;
    const char *id = s_header(req, "Mcp-Session-Id");
    if (!id || !*id) {
        s_refuse(req, MHD_HTTP_BAD_REQUEST, KB_ERR_BAD_REQUEST,
                 "Bad Request: Mcp-Session-Id header is required (initialize first)");
        return -1;
    }
    *session = kb_mcp_session_find(mcp, id);
    if (!*session) {
        s_refuse(req, MHD_HTTP_NOT_FOUND, KB_ERR_SESSION_NOT_FOUND,
                 "Session not found: it ended or never was; initialize a new one");
        return -1;
    }
    if (version && strcmp(version, kb_mcp_session_version(*session)) != 0) {
        kb_mcp_session_release(mcp, session);
        s_refuse(req, MHD_HTTP_BAD_REQUEST, KB_ERR_BAD_REQUEST,
                 "Bad Request: MCP-Protocol-Version is not the session's negotiated one");
        return -1;
    }
    return 0;
}

static bool s_accepts_sse(kb_http_req_t *req)
{
    const char *accept = s_header(req, MHD_HTTP_HEADER_ACCEPT);
    return accept && strstr(accept, "text/event-stream");
}

/* ---- SSE streams ---------------------------------------------------------------- */

/*  A connection reading one stream (kb_mcp_stream.h): the response's
    callback state, freed when libmicrohttpd is done with the response. */
typedef struct {
    kb_mcp_t *mcp;             /* borrowed */
    kb_server_t *server;       /* borrowed */
    kb_mcp_stream_t *stream;   /* a reference */
    unsigned ticket;           /* as the stream's reader */
    kb_mcp_session_t *session; /* a reference: a GET stream ends with it */
    bool standalone;
    kb_buf_t pending; /* rendered, not handed to MHD yet */
    size_t sent;
    unsigned idle_ms;
    bool finished; /* the last event is in pending */
} kb_mcp_reader_t;

static void s_reader_free(void *cls)
{
    kb_mcp_reader_t *reader = cls;
    kb_mcp_streams_t *streams = kb_mcp_streams(reader->mcp);
    kb_mcp_stream_detach(streams, reader->stream, reader->ticket);
    kb_mcp_stream_release(streams, &reader->stream);
    kb_mcp_session_release(reader->mcp, &reader->session);
    kb_buf_free(&reader->pending);
    free(reader);
}

/*  The server drains: a GET stream ends, so that it does not hold the
    drain for its grace period (a call's stream goes on to its result). */
static bool s_draining(kb_server_t *server)
{
    pthread_mutex_lock(&server->lock);
    bool draining = server->draining;
    pthread_mutex_unlock(&server->lock);
    return draining;
}

/*  Wait for the next events (a keep-alive comment after each idle
    period); -1 when the connection must end in error. */
static int s_fill(kb_mcp_reader_t *reader)
{
    kb_mcp_streams_t *streams = kb_mcp_streams(reader->mcp);
    for (;;) {
        if (atomic_load(&reader->server->stopping))
            return -1;
        if (reader->standalone
            && (kb_mcp_session_ended(reader->mcp, reader->session) || s_draining(reader->server))) {
            reader->finished = true;
            return 0;
        }
        kb_mcp_read_t rc = kb_mcp_stream_read(streams, reader->stream, reader->ticket,
                                              KB_MCP_SLICE_MS, &reader->pending);
        if (rc == KB_MCP_READ_LOST)
            return -1;
        reader->finished = rc == KB_MCP_READ_FINISHED;
        if (rc != KB_MCP_READ_IDLE) {
            reader->idle_ms = 0;
            break;
        }
        reader->idle_ms += KB_MCP_SLICE_MS;
        if (reader->idle_ms >= reader->server->sse_keepalive_ms) {
            reader->idle_ms = 0;
            kb_buf_puts(&reader->pending, ": keep-alive\n\n");
            break;
        }
    }
    return kb_buf_status(&reader->pending) != KB_BUF_OK ? -1 : 0;
}

static ssize_t s_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    kb_mcp_reader_t *reader = cls;
    if (reader->sent == reader->pending.len) {
        kb_buf_reset(&reader->pending);
        reader->sent = 0;
        if (reader->finished)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (s_fill(reader) < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (reader->pending.len == 0)
            return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = reader->pending.len - reader->sent;
    n = n < max ? n : max;
    memcpy(out, reader->pending.data + reader->sent, n);
    reader->sent += n;
    return (ssize_t)n;
}

/*  Answer req with stream (a reference, taken) as an SSE response read
    by this connection; session (a reference, taken) names it. */
static void s_serve_stream(kb_http_req_t *req, kb_mcp_stream_t *stream, kb_mcp_session_t *session,
                           bool standalone)
{
    kb_mcp_t *mcp = req->server->mcp;
    kb_mcp_reader_t *reader = kb_xcalloc(1, sizeof *reader);
    reader->mcp = mcp;
    reader->server = req->server;
    reader->stream = stream;
    reader->session = session;
    reader->standalone = standalone;
    reader->pending = (kb_buf_t)KB_BUF_INIT;
    reader->ticket = kb_mcp_stream_attach(kb_mcp_streams(mcp), stream);
    /* A comment first, so that the client has the stream's head at once. */
    kb_buf_puts(&reader->pending, ": kernelbridge\n\n");
    struct MHD_Response *response = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 64 * 1024, s_read, reader, s_reader_free);
    if (!response) {
        s_reader_free(reader);
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "out of memory");
        return;
    }
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(response, "X-Accel-Buffering", "no");
    MHD_add_response_header(response, "Mcp-Session-Id", kb_mcp_session_id(session));
    kb_http_reply_response(req, MHD_HTTP_OK, response);
    MHD_destroy_response(response);
}

/*  2025-11-25 streams open with an event of an id and no data, which the
    client may reconnect from; older revisions' clients get none. */
static bool s_primes(const kb_mcp_session_t *session)
{
    return strcmp(kb_mcp_session_version(session), "2025-11-25") >= 0;
}

/* ---- A call answered as an SSE stream ------------------------------------------ */

/*  A tools/call made on a worker thread, its messages pushed to its
    stream as they come. */
typedef struct {
    kb_mcp_t *mcp;             /* borrowed */
    kb_mcp_session_t *session; /* a reference */
    kb_mcp_stream_t *stream;   /* a reference */
    json_t *message;           /* the request */
} kb_mcp_call_job_t;

/*  The call's messages (kb_mcp_send_fn). */
static void s_job_push(void *arg, json_t *message)
{
    kb_mcp_call_job_t *job = arg;
    kb_mcp_stream_push(kb_mcp_streams(job->mcp), job->stream, message);
}

static void *s_worker(void *arg)
{
    kb_mcp_call_job_t *job = arg;
    kb_mcp_t *mcp = job->mcp;
    kb_mcp_streams_t *streams = kb_mcp_streams(mcp);
    json_t *response = kb_mcp_handle(mcp, &job->session, job->message, s_job_push, job);
    if (response)
        kb_mcp_stream_push(streams, job->stream, response);
    kb_mcp_stream_end(streams, job->stream);
    kb_mcp_stream_release(streams, &job->stream);
    kb_mcp_session_release(mcp, &job->session);
    json_decref(job->message);
    free(job);
    kb_mcp_worker_end(mcp);
    return NULL;
}

/*  A tools/call with progress: a worker thread makes the call while this
    connection writes its stream. Takes the session's reference and the
    message's. A client that goes away leaves the run going; its messages
    stay held for a resume (GET with Last-Event-ID). */
static void s_call_streamed(kb_http_req_t *req, kb_mcp_session_t **session, json_t *message)
{
    kb_mcp_t *mcp = req->server->mcp;
    kb_mcp_streams_t *streams = kb_mcp_streams(mcp);
    /* the reader's own reference to the session */
    kb_mcp_session_t *reading = kb_mcp_session_find(mcp, kb_mcp_session_id(*session));
    if (!reading) {
        json_decref(message);
        s_refuse(req, MHD_HTTP_NOT_FOUND, KB_ERR_SESSION_NOT_FOUND,
                 "Session not found: it ended or never was; initialize a new one");
        return;
    }
    kb_mcp_stream_t *stream
        = kb_mcp_streams_open(streams, kb_mcp_session_id(*session), false, s_primes(*session));
    kb_mcp_call_job_t *job = kb_xcalloc(1, sizeof *job);
    *job = (kb_mcp_call_job_t){ .mcp = mcp,
                                .session = *session,
                                .stream = kb_mcp_stream_hold(streams, stream),
                                .message = message };
    *session = NULL;
    kb_mcp_worker_begin(mcp);
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    bool started = pthread_create(&thread, &attr, s_worker, job) == 0;
    pthread_attr_destroy(&attr);
    if (!started)
        s_worker(job); /* no thread: the call is made here, its messages all at the end */
    s_serve_stream(req, stream, reading, false);
}

/* ---- Routes ------------------------------------------------------------------- */

static void route_mcp_post(kb_http_req_t *req)
{
    kb_mcp_t *mcp = req->server->mcp;
    json_t *error = NULL;
    kb_mcp_session_t *session = NULL;
    if (s_gate(req, false, NULL) < 0)
        return;
    json_t *message = kb_mcp_parse(req->body.data, req->body.len, &error);
    if (!message) {
        s_reply(req, MHD_HTTP_BAD_REQUEST, error, NULL);
        return;
    }
    const char *method = kb_mcp_request_method(message);
    bool initialize = method && strcmp(method, "initialize") == 0;
    if (!initialize && s_gate(req, true, &session) < 0)
        goto done;
    if (json_is_array(message)) {
        json_t *responses = kb_mcp_handle_batch(mcp, &session, message);
        s_reply(req, json_is_array(responses) || !responses ? MHD_HTTP_OK : MHD_HTTP_BAD_REQUEST,
                responses, NULL);
    } else if (!method) {
        /* notifications and responses: 202, or 400 with the error */
        json_t *response = kb_mcp_handle(mcp, &session, message, NULL, NULL);
        s_reply(req, MHD_HTTP_BAD_REQUEST, response, NULL);
    } else if (kb_mcp_wants_progress(message) && s_accepts_sse(req)) {
        s_call_streamed(req, &session, json_incref(message));
    } else {
        /* A request that is no valid message is a 400; a valid one's
           errors (no such method, bad params) come with a 200. */
        json_t *response = kb_mcp_handle(mcp, &session, message, NULL, NULL);
        json_t *code = json_object_get(json_object_get(response, "error"), "code");
        bool invalid = json_integer_value(code) == KB_RPC_INVALID_REQUEST;
        s_reply(req, invalid ? MHD_HTTP_BAD_REQUEST : MHD_HTTP_OK, response,
                initialize ? session : NULL);
    }
done:
    kb_mcp_session_release(mcp, &session);
    json_decref(message);
}

/*  GET: a new stream of server messages for the session, or, with
    Last-Event-ID, the stream that id is in, from the event after it (a
    call's stream goes on to its response). The server sends no message
    unasked (no list changes, no requests of its own), so a new stream
    carries keep-alive comments until the session ends. */
static void route_mcp_get(kb_http_req_t *req)
{
    kb_mcp_t *mcp = req->server->mcp;
    kb_mcp_streams_t *streams = kb_mcp_streams(mcp);
    kb_mcp_session_t *session = NULL;
    if (s_gate(req, true, &session) < 0)
        return;
    if (!s_accepts_sse(req)) {
        kb_mcp_session_release(mcp, &session);
        s_refuse(req, MHD_HTTP_NOT_ACCEPTABLE, KB_ERR_BAD_REQUEST,
                 "Not Acceptable: GET /mcp is an event stream (Accept: text/event-stream)");
        return;
    }
    const char *last = s_header(req, "Last-Event-ID");
    if (!last) {
        kb_mcp_stream_t *stream
            = kb_mcp_streams_open(streams, kb_mcp_session_id(session), true, s_primes(session));
        s_serve_stream(req, stream, session, true);
        return;
    }
    kb_mcp_stream_t *stream = NULL;
    switch (kb_mcp_streams_resume(streams, kb_mcp_session_id(session), last, &stream)) {
        case KB_MCP_RESUME_OK:
            s_serve_stream(req, stream, session, kb_mcp_stream_standalone(stream));
            return;
        case KB_MCP_RESUME_UNKNOWN:
            kb_mcp_session_release(mcp, &session);
            s_refuse(req, MHD_HTTP_BAD_REQUEST, KB_ERR_BAD_REQUEST,
                     "Bad Request: Last-Event-ID is no event id this server gave the session");
            return;
        case KB_MCP_RESUME_GONE:
            kb_mcp_session_release(mcp, &session);
            s_refuse(req, MHD_HTTP_GONE, KB_ERR_LIMIT_EXCEEDED,
                     "Gone: the events after this Last-Event-ID are no longer held (a stream "
                     "keeps its last 256 events, 1 MiB, for 5 minutes after it ends); a run's "
                     "output stays in its record: get_process_logs");
            return;
    }
}

static void route_mcp_delete(kb_http_req_t *req)
{
    kb_mcp_session_t *session = NULL;
    if (s_gate(req, true, &session) < 0)
        return;
    kb_mcp_session_end(req->server->mcp, kb_mcp_session_id(session));
    kb_mcp_session_release(req->server->mcp, &session);
    kb_http_reply_empty(req, MHD_HTTP_NO_CONTENT);
}

static const kb_route_t s_routes[] = {
    { "POST", "/mcp", route_mcp_post, KB_ROUTE_BODY },
    { "GET", "/mcp", route_mcp_get, KB_ROUTE_TOKEN },
    { "DELETE", "/mcp", route_mcp_delete, KB_ROUTE_TOKEN },
};

static const char *const s_claims[] = { "/mcp", NULL };

/*  MCP's endpoint on the native listener (SPEC section 14). */
const kb_route_table_t kb_mcp_routes = {
    .name = "mcp",
    .claims = s_claims,
    .routes = s_routes,
    .count = sizeof s_routes / sizeof s_routes[0],
};
