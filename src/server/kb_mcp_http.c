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
#include "server/kb_router.h"
#include "util/kb_alloc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* ---- A call answered as an SSE stream ------------------------------------------ */

/*  Between the call's worker thread, which queues the messages, and the
    connection's thread, which writes them as events. */
typedef struct kb_mcp_outbox {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned refs;             /* the worker's and the response's */
    json_t *queue;             /* messages not written yet */
    bool done;                 /* the response is in queue (or the worker gave up) */
    kb_mcp_t *mcp;             /* borrowed */
    kb_mcp_session_t *session; /* the worker's reference */
    json_t *message;           /* the request (the worker's) */
    kb_server_t *server;       /* borrowed */
    kb_buf_t pending;          /* rendered, not handed to MHD yet */
    size_t sent;
    bool finished; /* the last event is in pending */
    bool stream;   /* a GET stream: comments only, until the session ends */
} kb_mcp_outbox_t;

static void s_outbox_unref(void *cls)
{
    kb_mcp_outbox_t *box = cls;
    pthread_mutex_lock(&box->lock);
    bool last = --box->refs == 0;
    pthread_mutex_unlock(&box->lock);
    if (!last)
        return;
    if (box->stream)
        kb_mcp_session_release(box->mcp, &box->session);
    json_decref(box->queue);
    json_decref(box->message);
    kb_buf_free(&box->pending);
    pthread_cond_destroy(&box->cond);
    pthread_mutex_destroy(&box->lock);
    free(box);
}

/*  The worker's messages (kb_mcp_send_fn). */
static void s_outbox_push(void *arg, json_t *message)
{
    kb_mcp_outbox_t *box = arg;
    pthread_mutex_lock(&box->lock);
    json_array_append_new(box->queue, message);
    pthread_cond_signal(&box->cond);
    pthread_mutex_unlock(&box->lock);
}

static void *s_worker(void *arg)
{
    kb_mcp_outbox_t *box = arg;
    json_t *response = kb_mcp_handle(box->mcp, &box->session, box->message, s_outbox_push, box);
    pthread_mutex_lock(&box->lock);
    if (response)
        json_array_append_new(box->queue, response);
    box->done = true;
    pthread_cond_signal(&box->cond);
    pthread_mutex_unlock(&box->lock);
    kb_mcp_t *mcp = box->mcp;
    kb_mcp_session_release(mcp, &box->session);
    s_outbox_unref(box);
    kb_mcp_worker_end(mcp);
    return NULL;
}

static void s_deadline(struct timespec *at, unsigned ms)
{
    clock_gettime(CLOCK_MONOTONIC, at);
    at->tv_sec += ms / 1000;
    at->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (at->tv_nsec >= 1000000000L) {
        at->tv_sec++;
        at->tv_nsec -= 1000000000L;
    }
}

/*  Render what is queued (lock held) into pending. */
static void s_render(kb_mcp_outbox_t *box)
{
    size_t i;
    json_t *message;
    json_array_foreach(box->queue, i, message)
    {
        kb_buf_puts(&box->pending, "event: message\ndata: ");
        kb_buf_append_json(&box->pending, message, JSON_COMPACT);
        kb_buf_puts(&box->pending, "\n\n");
    }
    json_array_clear(box->queue);
}

/*  The server drains: a GET stream ends, so that it does not hold the
    drain for its grace period (a call's stream goes on to its result). */
static bool s_draining(kb_mcp_outbox_t *box)
{
    pthread_mutex_lock(&box->server->lock);
    bool draining = box->server->draining;
    pthread_mutex_unlock(&box->server->lock);
    return draining;
}

/*  Wait for the next messages (a keep-alive comment after each idle
    period); -1 when the server stops or memory runs out. */
static int s_fill(kb_mcp_outbox_t *box)
{
    double waited = 0;
    pthread_mutex_lock(&box->lock);
    for (;;) {
        if (atomic_load(&box->server->stopping))
            break;
        if (json_array_size(box->queue) > 0 || box->done) {
            s_render(box);
            box->finished = box->done;
            break;
        }
        if (box->stream && (kb_mcp_session_ended(box->mcp, box->session) || s_draining(box))) {
            box->finished = true;
            break;
        }
        if (waited >= box->server->sse_keepalive_ms) {
            kb_buf_puts(&box->pending, ": keep-alive\n\n");
            break;
        }
        struct timespec at;
        s_deadline(&at, KB_MCP_SLICE_MS);
        pthread_cond_timedwait(&box->cond, &box->lock, &at);
        waited += KB_MCP_SLICE_MS;
    }
    bool stopping = atomic_load(&box->server->stopping);
    pthread_mutex_unlock(&box->lock);
    return stopping || kb_buf_status(&box->pending) != KB_BUF_OK ? -1 : 0;
}

static ssize_t s_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    kb_mcp_outbox_t *box = cls;
    if (box->sent == box->pending.len) {
        kb_buf_reset(&box->pending);
        box->sent = 0;
        if (box->finished)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (s_fill(box) < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (box->pending.len == 0)
            return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = box->pending.len - box->sent;
    n = n < max ? n : max;
    memcpy(out, box->pending.data + box->sent, n);
    box->sent += n;
    return (ssize_t)n;
}

static kb_mcp_outbox_t *s_outbox_new(kb_http_req_t *req, kb_mcp_session_t *session)
{
    kb_mcp_outbox_t *box = kb_xcalloc(1, sizeof *box);
    pthread_mutex_init(&box->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&box->cond, &attr);
    pthread_condattr_destroy(&attr);
    box->queue = json_array();
    KB_NOT_NULL(box->queue);
    box->mcp = req->server->mcp;
    box->server = req->server;
    box->session = session;
    box->pending = (kb_buf_t)KB_BUF_INIT;
    /* A comment first, so that the client has the stream's head at once. */
    kb_buf_puts(&box->pending, ": kernelbridge\n\n");
    return box;
}

/*  Queue the SSE response that box feeds (the response holds one
    reference). False when it cannot be made. */
static bool s_queue_stream(kb_http_req_t *req, kb_mcp_outbox_t *box, const char *session_id)
{
    struct MHD_Response *response = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024,
                                                                      s_read, box, s_outbox_unref);
    if (!response)
        return false;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(response, "X-Accel-Buffering", "no");
    if (session_id)
        MHD_add_response_header(response, "Mcp-Session-Id", session_id);
    kb_http_reply_response(req, MHD_HTTP_OK, response);
    MHD_destroy_response(response);
    return true;
}

/*  A tools/call with progress: a worker thread makes the call while this
    connection writes its messages. Takes the session's reference and the
    message's. A client that goes away leaves the run going. */
static void s_call_streamed(kb_http_req_t *req, kb_mcp_session_t **session, json_t *message)
{
    kb_mcp_t *mcp = req->server->mcp;
    kb_mcp_outbox_t *box = s_outbox_new(req, *session);
    *session = NULL;
    box->message = message;
    box->refs = 2;
    kb_mcp_worker_begin(mcp);
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    bool started = pthread_create(&thread, &attr, s_worker, box) == 0;
    pthread_attr_destroy(&attr);
    if (!started) {
        /* no thread: the call is made here, its messages all at the end */
        box->refs = 1;
        json_t *response = kb_mcp_handle(mcp, &box->session, message, s_outbox_push, box);
        s_outbox_push(box, response);
        box->done = true;
        kb_mcp_session_release(mcp, &box->session);
        kb_mcp_worker_end(mcp);
    }
    if (!s_queue_stream(req, box, NULL)) {
        s_outbox_unref(box);
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "out of memory");
    }
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

/*  GET: the session's stream of server messages. The server sends none
    unasked (no list changes, no requests of its own), so the stream
    carries keep-alive comments until the session ends; a Last-Event-ID
    has nothing to resume. */
static void route_mcp_get(kb_http_req_t *req)
{
    kb_mcp_session_t *session = NULL;
    if (s_gate(req, true, &session) < 0)
        return;
    if (!s_accepts_sse(req)) {
        kb_mcp_session_release(req->server->mcp, &session);
        s_refuse(req, MHD_HTTP_NOT_ACCEPTABLE, KB_ERR_BAD_REQUEST,
                 "Not Acceptable: GET /mcp is an event stream (Accept: text/event-stream)");
        return;
    }
    kb_mcp_outbox_t *box = s_outbox_new(req, session);
    box->stream = true;
    box->refs = 1;
    if (!s_queue_stream(req, box, kb_mcp_session_id(session))) {
        s_outbox_unref(box);
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "out of memory");
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
