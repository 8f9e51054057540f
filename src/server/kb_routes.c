/*  kb_routes.c - the routes of SPEC section 5, one function each: read the
    request (query parameters here; bodies with kb_request's parser), call
    one kb_service_* function and render what it returns. Every rule about
    contexts, runs and processes is the service's; nothing here keeps
    state between requests. */
#include "server/kb_http.h"
#include "server/kb_metrics_http.h"
#include "server/kb_openapi.h"
#include "server/kb_router.h"
#include "service/engine/kb_request.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Query parameters ---------------------------------------------------- */

static const char *query(kb_http_req_t *req, const char *key)
{
    return MHD_lookup_connection_value(req->connection, MHD_GET_ARGUMENT_KIND, key);
}

/*  The following parsers return 1 (present), 0 (absent) or -1 (invalid; the
    BAD_REQUEST reply is queued). */

static int query_bool(kb_http_req_t *req, const char *key, bool *out)
{
    const char *value = query(req, key);
    if (!value || !*value)
        return 0;
    if (strcmp(value, "true") == 0 || strcmp(value, "1") == 0) {
        *out = true;
        return 1;
    }
    if (strcmp(value, "false") == 0 || strcmp(value, "0") == 0) {
        *out = false;
        return 1;
    }
    kb_http_reply_errorf(req, KB_ERR_BAD_REQUEST, "query parameter %s must be true or false", key);
    return -1;
}

static int query_count(kb_http_req_t *req, const char *key, long long *out)
{
    const char *value = query(req, key);
    if (!value || !*value)
        return 0;
    char *end;
    errno = 0;
    long long n = strtoll(value, &end, 10);
    if (*end || errno || n < 0 || value[0] == '-' || value[0] == '+' || value[0] == ' ') {
        kb_http_reply_errorf(req, KB_ERR_BAD_REQUEST,
                             "query parameter %s must be a non-negative integer", key);
        return -1;
    }
    *out = n;
    return 1;
}

static int query_seconds(kb_http_req_t *req, const char *key, double *out)
{
    const char *value = query(req, key);
    if (!value || !*value)
        return 0;
    char *end;
    double n = strtod(value, &end);
    if (*end || !isfinite(n) || n < 0 || value[0] == ' ') {
        kb_http_reply_errorf(req, KB_ERR_BAD_REQUEST,
                             "query parameter %s must be a non-negative number of seconds", key);
        return -1;
    }
    *out = n;
    return 1;
}

/* ---- Replies from service calls ------------------------------------------ */

static void reply_object(kb_http_req_t *req, unsigned status, json_t *value, const kb_error_t *err)
{
    if (value)
        kb_http_reply_json(req, status, value);
    else
        kb_http_reply_error(req, err);
}

static void reply_rc(kb_http_req_t *req, unsigned status, int rc, const kb_error_t *err)
{
    if (rc == 0)
        kb_http_reply_empty(req, status);
    else
        kb_http_reply_error(req, err);
}

/*  A path id longer than any id the service hands out names nothing. */
static bool path_id_ok(kb_http_req_t *req, kb_code_t not_found)
{
    if (!req->id_too_long)
        return true;
    kb_http_reply_errorf(req, not_found, "no such id: %.40s...", req->id);
    return false;
}

static bool wants_event_stream(kb_http_req_t *req)
{
    const char *accept
        = MHD_lookup_connection_value(req->connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
    return accept && strstr(accept, "text/event-stream");
}

/* ---- Routes: service ----------------------------------------------------- */

/*  The listener's connections (kb_conns.h), for /health. */
static json_t *s_connections(kb_server_t *server)
{
    kb_conns_stats_t c;
    kb_conns_stats(server->conns, &c);
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "open", (json_int_t)c.open, "waiting",
                     (json_int_t)c.waiting, "reserved", (json_int_t)c.reserved, "refused",
                     (json_int_t)c.refused, "evicted", (json_int_t)c.evicted, "header_timeouts",
                     (json_int_t)c.header_timeouts);
}

/*  The websockets of Jupyter's kernel channels, for /health. */
static json_t *s_websockets(kb_server_t *server)
{
    kb_ws_stats_t ws;
    kb_ws_group_stats(server->websockets, &ws);
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "open", (json_int_t)ws.open,
                     "opened", (json_int_t)ws.opened, "messages_in", (json_int_t)ws.messages_in,
                     "messages_out", (json_int_t)ws.messages_out, "malformed_dropped",
                     (json_int_t)atomic_load(&server->ws_malformed), "closed_backpressure",
                     (json_int_t)ws.closed_backpressure, "closed_too_big",
                     (json_int_t)ws.closed_too_big, "closed_unresponsive",
                     (json_int_t)ws.closed_unresponsive, "closed", (json_int_t)ws.closed);
}

static void route_health(kb_http_req_t *req)
{
    kb_error_t err = { .code = KB_ERR_INTERNAL, .message = "health unavailable" };
    json_t *health = kb_service_health(req->server->service);
    if (health && req->server->websockets)
        json_object_set_new(health, "websockets", s_websockets(req->server));
    if (health)
        json_object_set_new(health, "connections", s_connections(req->server));
    reply_object(req, MHD_HTTP_OK, health, &err);
}

/*  The OpenAPI document, compiled in (kb_openapi.h); open, like /health:
    it describes the API and holds no secret. */
static void route_openapi(kb_http_req_t *req)
{
    struct MHD_Response *response = MHD_create_response_from_buffer(
        kb_openapi_json_len, (void *)kb_openapi_json, MHD_RESPMEM_PERSISTENT);
    if (!response
        || MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json")
               != MHD_YES) {
        if (response)
            MHD_destroy_response(response);
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "cannot build the OpenAPI document's response");
        return;
    }
    kb_http_reply_response(req, MHD_HTTP_OK, response);
    MHD_destroy_response(response);
}

static void route_kernelspecs(kb_http_req_t *req)
{
    kb_error_t err = { .code = KB_ERR_INTERNAL, .message = "kernelspecs unavailable" };
    reply_object(req, MHD_HTTP_OK, kb_service_kernelspecs(req->server->service), &err);
}

/* ---- Routes: contexts ---------------------------------------------------- */

static void route_contexts_list(kb_http_req_t *req)
{
    bool all = false;
    if (query_bool(req, "all", &all) < 0)
        return;
    kb_error_t err = { KB_OK, "" };
    reply_object(req, MHD_HTTP_OK, kb_service_context_list(req->server->service, all, &err), &err);
}

static void route_contexts_create(kb_http_req_t *req)
{
    kb_error_t err = { KB_OK, "" };
    kb_context_request_t request;
    if (kb_context_request_parse(&request, KB_FRONT_NATIVE, req->body.data, req->body.len, &err)
        != 0) {
        kb_http_reply_error(req, &err);
        return;
    }
    json_t *context = kb_service_context_create(req->server->service, &request.opts, &err);
    reply_object(req, MHD_HTTP_CREATED, context, &err);
    kb_context_request_clear(&request);
}

static void route_context_get(kb_http_req_t *req)
{
    if (!path_id_ok(req, KB_ERR_SESSION_NOT_FOUND))
        return;
    kb_error_t err = { KB_OK, "" };
    reply_object(req, MHD_HTTP_OK, kb_service_context_get(req->server->service, req->id, &err),
                 &err);
}

static void route_context_delete(kb_http_req_t *req)
{
    if (!path_id_ok(req, KB_ERR_SESSION_NOT_FOUND))
        return;
    kb_error_t err = { KB_OK, "" };
    int rc = kb_service_context_delete(req->server->service, req->id, &err);
    reply_rc(req, MHD_HTTP_NO_CONTENT, rc, &err);
}

static void route_context_restart(kb_http_req_t *req)
{
    if (!path_id_ok(req, KB_ERR_SESSION_NOT_FOUND))
        return;
    kb_error_t err = { KB_OK, "" };
    json_t *context = kb_service_context_restart(req->server->service, req->id, &err);
    reply_object(req, MHD_HTTP_OK, context, &err);
}

static void route_context_interrupt(kb_http_req_t *req)
{
    if (!path_id_ok(req, KB_ERR_SESSION_NOT_FOUND))
        return;
    kb_error_t err = { KB_OK, "" };
    int rc = kb_service_context_interrupt(req->server->service, req->id, &err);
    reply_rc(req, MHD_HTTP_NO_CONTENT, rc, &err);
}

/* ---- Routes: forks, checkpoints, restores (SPEC section 13) --------------- */

static void route_context_fork(kb_http_req_t *req)
{
    if (!path_id_ok(req, KB_ERR_SESSION_NOT_FOUND))
        return;
    kb_error_t err = { KB_OK, "" };
    kb_fork_request_t request;
    if (kb_fork_request_parse(&request, req->body.data, req->body.len, &err) != 0) {
        kb_http_reply_error(req, &err);
        return;
    }
    json_t *forks = kb_service_context_fork(req->server->service, req->id, &request.opts, &err);
    reply_object(req, MHD_HTTP_CREATED, forks, &err);
    kb_fork_request_clear(&request);
}

static void route_checkpoint_create(kb_http_req_t *req)
{
    if (!path_id_ok(req, KB_ERR_SESSION_NOT_FOUND))
        return;
    kb_error_t err = { KB_OK, "" };
    json_t *body
        = req->body.len ? kb_request_body(req->body.data, req->body.len, true, &err) : NULL;
    if (req->body.len && !body) {
        kb_http_reply_error(req, &err);
        return;
    }
    json_decref(body); /* {} : nothing is read from it */
    reply_object(req, MHD_HTTP_CREATED,
                 kb_service_checkpoint_create(req->server->service, req->id, &err), &err);
}

static void route_checkpoints_list(kb_http_req_t *req)
{
    if (!path_id_ok(req, KB_ERR_SESSION_NOT_FOUND))
        return;
    kb_error_t err = { KB_OK, "" };
    reply_object(req, MHD_HTTP_OK, kb_service_checkpoint_list(req->server->service, req->id, &err),
                 &err);
}

static void route_checkpoint_delete(kb_http_req_t *req)
{
    if (!path_id_ok(req, KB_ERR_SESSION_NOT_FOUND))
        return;
    size_t len = 0;
    const char *given = kb_router_param(req, "checkpoint_id", &len);
    char id[KB_HTTP_ID_MAX + 1];
    if (!given || len > KB_HTTP_ID_MAX) {
        kb_http_reply_errorf(req, KB_ERR_CHECKPOINT_NOT_FOUND, "no such checkpoint");
        return;
    }
    memcpy(id, given, len);
    id[len] = 0;
    kb_error_t err = { KB_OK, "" };
    int rc = kb_service_checkpoint_delete(req->server->service, req->id, id, &err);
    reply_rc(req, MHD_HTTP_NO_CONTENT, rc, &err);
}

static void route_context_restore(kb_http_req_t *req)
{
    if (!path_id_ok(req, KB_ERR_SESSION_NOT_FOUND))
        return;
    kb_error_t err = { KB_OK, "" };
    json_t *body;
    const char *checkpoint_id
        = kb_restore_request_parse(&body, req->body.data, req->body.len, &err);
    if (!checkpoint_id) {
        kb_http_reply_error(req, &err);
        return;
    }
    json_t *context
        = kb_service_context_restore(req->server->service, req->id, checkpoint_id, &err);
    reply_object(req, MHD_HTTP_OK, context, &err);
    json_decref(body);
}

/* ---- Routes: runs -------------------------------------------------------- */

static void route_run(kb_http_req_t *req)
{
    kb_error_t err = { KB_OK, "" };
    kb_run_request_t request;
    if (kb_run_request_parse(&request, KB_FRONT_NATIVE, req->body.data, req->body.len, &err) != 0) {
        kb_http_reply_error(req, &err);
        return;
    }
    /* The values (code, context_id, timeout, env...) are checked by the
       service, for every caller alike. */
    if (!wants_event_stream(req)) {
        /* Plain JSON: the result alone; this thread wakes once. */
        kb_result_doc_t *doc = kb_service_run_doc(req->server->service, &request.opts, &err);
        if (doc)
            kb_http_reply_doc(req, MHD_HTTP_OK, doc);
        else
            kb_http_reply_error(req, &err);
        goto done;
    }
    kb_stream_t *stream = kb_service_run_start(req->server->service, &request.opts, &err);
    if (!stream) {
        kb_http_reply_error(req, &err);
        goto done;
    }
    kb_http_reply_stream(req, stream, false);
done:
    kb_run_request_clear(&request);
}

/* ---- Routes: processes --------------------------------------------------- */

static void route_processes_list(kb_http_req_t *req)
{
    const char *state = query(req, "state");
    const char *context_id = query(req, "context_id");
    if (state && !*state)
        state = NULL;
    if (context_id && !*context_id)
        context_id = NULL;
    if (state && strcmp(state, "running") != 0 && strcmp(state, "terminal") != 0) {
        kb_http_reply_errorf(req, KB_ERR_BAD_REQUEST,
                             "query parameter state must be running or terminal");
        return;
    }
    kb_error_t err = { KB_OK, "" };
    json_t *list = kb_service_process_list(req->server->service, state, context_id, &err);
    reply_object(req, MHD_HTTP_OK, list, &err);
}

static void route_process_get(kb_http_req_t *req)
{
    if (!path_id_ok(req, KB_ERR_PROCESS_NOT_FOUND))
        return;
    kb_error_t err = { KB_OK, "" };
    reply_object(req, MHD_HTTP_OK, kb_service_process_get(req->server->service, req->id, &err),
                 &err);
}

static void route_process_delete(kb_http_req_t *req)
{
    if (!path_id_ok(req, KB_ERR_PROCESS_NOT_FOUND))
        return;
    kb_error_t err = { KB_OK, "" };
    int rc = kb_service_process_delete(req->server->service, req->id, &err);
    reply_rc(req, MHD_HTTP_NO_CONTENT, rc, &err);
}

static void route_process_result(kb_http_req_t *req)
{
    if (!path_id_ok(req, KB_ERR_PROCESS_NOT_FOUND))
        return;
    kb_error_t err = { KB_OK, "" };
    kb_result_doc_t *doc = kb_service_process_result_doc(req->server->service, req->id, &err);
    if (doc)
        kb_http_reply_doc(req, MHD_HTTP_OK, doc);
    else
        kb_http_reply_error(req, &err);
}

/*  The cursor to resume an event stream from: the id of the last event the
    client saw (Last-Event-ID), plus one. */
static int last_event_cursor(kb_http_req_t *req, long long *cursor)
{
    const char *value
        = MHD_lookup_connection_value(req->connection, MHD_HEADER_KIND, "Last-Event-ID");
    if (!value || !*value)
        return 0;
    char *end;
    errno = 0;
    long long id = strtoll(value, &end, 10);
    if (*end || errno || id < 0 || id == LLONG_MAX) {
        kb_http_reply_errorf(req, KB_ERR_BAD_REQUEST, "Last-Event-ID must be a log cursor");
        return -1;
    }
    *cursor = id + 1;
    return 1;
}

static void route_process_logs(kb_http_req_t *req)
{
    if (!path_id_ok(req, KB_ERR_PROCESS_NOT_FOUND))
        return;
    bool follow = false;
    long long cursor = -1, limit = 0;
    int has_cursor = query_count(req, "cursor", &cursor);
    if (has_cursor < 0 || query_count(req, "limit", &limit) < 0
        || query_bool(req, "follow", &follow) < 0)
        return;
    kb_error_t err = { KB_OK, "" };
    if (follow) {
        if (has_cursor == 0 && last_event_cursor(req, &cursor) < 0)
            return;
        kb_stream_t *stream
            = kb_service_process_follow(req->server->service, req->id, cursor, &err);
        if (stream)
            kb_http_reply_stream(req, stream, true);
        else
            kb_http_reply_error(req, &err);
        return;
    }
    json_t *logs
        = kb_service_process_logs(req->server->service, req->id, cursor, (size_t)limit, &err);
    reply_object(req, MHD_HTTP_OK, logs, &err);
}

static void route_process_wait(kb_http_req_t *req)
{
    if (!path_id_ok(req, KB_ERR_PROCESS_NOT_FOUND))
        return;
    double timeout = -1; /* absent: until the process ends */
    if (query_seconds(req, "timeout", &timeout) < 0)
        return;
    kb_error_t err = { KB_OK, "" };
    json_t *state = kb_service_process_wait(req->server->service, req->id, timeout, &err);
    reply_object(req, MHD_HTTP_OK, state, &err);
}

static void route_process_signal(kb_http_req_t *req)
{
    if (!path_id_ok(req, KB_ERR_PROCESS_NOT_FOUND))
        return;
    kb_error_t err = { KB_OK, "" };
    const char *signal = kb_signal_request_parse(req->body.data, req->body.len, &err);
    if (!signal) {
        kb_http_reply_error(req, &err);
        return;
    }
    int rc = kb_service_process_signal(req->server->service, req->id, signal, &err);
    reply_rc(req, MHD_HTTP_ACCEPTED, rc, &err);
}

/* ---- Routing ------------------------------------------------------------- */

static const kb_route_t s_routes[] = {
    { "GET", "/health", route_health, KB_ROUTE_OPEN | KB_ROUTE_RESERVE },
    { "GET", "/openapi.json", route_openapi, KB_ROUTE_OPEN },
    { "GET", "/kernelspecs", route_kernelspecs, KB_ROUTE_TOKEN },
    { "GET", "/metrics", kb_metrics_route, KB_ROUTE_TOKEN | KB_ROUTE_RESERVE },
    { "GET", "/contexts", route_contexts_list, KB_ROUTE_TOKEN },
    { "POST", "/contexts", route_contexts_create, KB_ROUTE_BODY },
    { "GET", "/contexts/{id}", route_context_get, KB_ROUTE_TOKEN },
    { "DELETE", "/contexts/{id}", route_context_delete, KB_ROUTE_TOKEN },
    { "POST", "/contexts/{id}/restart", route_context_restart, KB_ROUTE_TOKEN },
    { "POST", "/contexts/{id}/interrupt", route_context_interrupt, KB_ROUTE_TOKEN },
    { "POST", "/contexts/{id}/fork", route_context_fork, KB_ROUTE_BODY },
    { "POST", "/contexts/{id}/checkpoints", route_checkpoint_create, KB_ROUTE_BODY },
    { "GET", "/contexts/{id}/checkpoints", route_checkpoints_list, KB_ROUTE_TOKEN },
    { "DELETE", "/contexts/{id}/checkpoints/{checkpoint_id}", route_checkpoint_delete,
      KB_ROUTE_TOKEN },
    { "POST", "/contexts/{id}/restore", route_context_restore, KB_ROUTE_BODY },
    { "POST", "/run", route_run, KB_ROUTE_BODY },
    { "GET", "/processes", route_processes_list, KB_ROUTE_TOKEN },
    { "GET", "/processes/{id}", route_process_get, KB_ROUTE_TOKEN },
    { "DELETE", "/processes/{id}", route_process_delete, KB_ROUTE_TOKEN },
    { "GET", "/processes/{id}/result", route_process_result, KB_ROUTE_TOKEN },
    { "GET", "/processes/{id}/logs", route_process_logs, KB_ROUTE_TOKEN },
    { "GET", "/processes/{id}/wait", route_process_wait, KB_ROUTE_TOKEN },
    { "POST", "/processes/{id}/signals", route_process_signal, KB_ROUTE_BODY },
};

/*  SPEC section 5: every path the console and Jupyter's API leave. An id
    over KB_HTTP_ID_MAX reaches the route, which answers its own 404. */
const kb_route_table_t kb_native_routes = {
    .name = "native",
    .routes = s_routes,
    .count = sizeof s_routes / sizeof s_routes[0],
};
