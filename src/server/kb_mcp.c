/*  kb_mcp.c - the MCP server's messages and sessions (kb_mcp.h): JSON-RPC
    envelopes read and checked, the lifecycle (initialize and its version
    negotiation, ping, notifications), tools/list and tools/call handed to
    kb_mcp_tools.c, notifications/cancelled turned into a SIGINT for the
    call's run. Not for transports (kb_mcp_http.c, src/cli/kb_cli_mcp.c). */
#include "server/kb_mcp.h"
#include "server/kb_mcp_stream.h"
#include "server/kb_mcp_tools.h"
#include "util/kb_alloc.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

/*  The revisions we speak, newest first (the answer to one we do not). */
static const char *const s_versions[] = { "2025-11-25", "2025-06-18", "2025-03-26" };
#define KB_MCP_BATCH_VERSION "2025-03-26" /* the one revision with batches */

/*  Calls in flight per session that a cancellation can reach. */
#define KB_MCP_CALLS_MAX 64
/*  A request id as its compact JSON text, for cancellations. */
#define KB_MCP_RID_MAX 128

typedef struct {
    char rid[KB_MCP_RID_MAX];
    char process_id[80]; /* "" until the run started */
    bool used;
    bool cancelled; /* before the run had a process id */
} kb_mcp_inflight_t;

struct kb_mcp_session {
    char id[KB_MCP_SESSION_ID_MAX + 1];
    char version[16];
    unsigned refs; /* the table's, while live, and each holder's */
    bool ended;
    bool initialized; /* notifications/initialized came */
    kb_mcp_inflight_t calls[KB_MCP_CALLS_MAX];
};

struct kb_mcp {
    kb_service_t *service; /* borrowed */
    size_t max_text;
    char **origins; /* owned copies, NULL-terminated */
    bool any_origin;
    char server_name[64];
    pthread_mutex_t lock; /* guards sessions, their fields, workers */
    pthread_cond_t idle;  /* workers fell to 0 */
    unsigned workers;
    kb_mcp_session_t *sessions[KB_MCP_SESSIONS_MAX];
    kb_mcp_streams_t *streams; /* the sessions' SSE streams (Streamable HTTP) */
};

/* ---- Lifecycle of the server --------------------------------------------- */

kb_mcp_t *kb_mcp_new(kb_service_t *service, const kb_mcp_config_t *config)
{
    assert(service && config);
    kb_mcp_t *self = kb_xcalloc(1, sizeof *self);
    self->service = service;
    self->max_text = config->max_text ? config->max_text : KB_MCP_MAX_TEXT_DEFAULT;
    size_t n = 0;
    while (config->allow_origins && config->allow_origins[n])
        n++;
    self->origins = kb_xcalloc(n + 1, sizeof *self->origins);
    for (size_t i = 0; i < n; i++) {
        self->origins[i] = kb_xstrdup(config->allow_origins[i]);
        self->any_origin = self->any_origin || strcmp(config->allow_origins[i], "*") == 0;
    }
    snprintf(self->server_name, sizeof self->server_name, "%s",
             config->server_name ? config->server_name : "kernelbridge");
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->idle, NULL);
    self->streams = kb_mcp_streams_new();
    return self;
}

void kb_mcp_destroy(kb_mcp_t **self_p)
{
    kb_mcp_t *self = self_p ? *self_p : NULL;
    if (!self)
        return;
    pthread_mutex_lock(&self->lock);
    while (self->workers > 0)
        pthread_cond_wait(&self->idle, &self->lock);
    pthread_mutex_unlock(&self->lock);
    kb_mcp_streams_destroy(&self->streams);
    for (size_t i = 0; i < KB_MCP_SESSIONS_MAX; i++)
        free(self->sessions[i]);
    for (char **o = self->origins; *o; o++)
        free(*o);
    free(self->origins);
    pthread_cond_destroy(&self->idle);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

unsigned kb_mcp_workers(kb_mcp_t *self)
{
    pthread_mutex_lock(&self->lock);
    unsigned n = self->workers;
    pthread_mutex_unlock(&self->lock);
    return n;
}

void kb_mcp_worker_begin(kb_mcp_t *self)
{
    pthread_mutex_lock(&self->lock);
    self->workers++;
    pthread_mutex_unlock(&self->lock);
}

void kb_mcp_worker_end(kb_mcp_t *self)
{
    pthread_mutex_lock(&self->lock);
    if (--self->workers == 0)
        pthread_cond_broadcast(&self->idle);
    pthread_mutex_unlock(&self->lock);
}

/* ---- Origins --------------------------------------------------------------- */

/*  The host of an origin "scheme://host[:port]" into host (without [] for
    IPv6); false when it has no such form. */
static bool s_origin_host(const char *origin, char *host, size_t size)
{
    const char *p = NULL;
    if (strncasecmp(origin, "http://", 7) == 0)
        p = origin + 7;
    else if (strncasecmp(origin, "https://", 8) == 0)
        p = origin + 8;
    if (!p)
        return false;
    size_t len;
    if (*p == '[') {
        p++;
        len = strcspn(p, "]");
        if (p[len] != ']')
            return false;
    } else {
        len = strcspn(p, ":/");
    }
    if (len == 0 || len >= size)
        return false;
    memcpy(host, p, len);
    host[len] = '\0';
    return true;
}

bool kb_mcp_origin_allowed(const kb_mcp_t *self, const char *origin)
{
    if (self->any_origin)
        return true;
    for (char **o = self->origins; *o; o++)
        if (strcasecmp(*o, origin) == 0)
            return true;
    char host[256];
    if (!s_origin_host(origin, host, sizeof host))
        return false;
    if (strcasecmp(host, "localhost") == 0 || strcmp(host, "::1") == 0)
        return true;
    /* 127.0.0.0/8, written as four numbers */
    unsigned a, b, c, d;
    char rest;
    return sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &rest) == 4 && a == 127 && b < 256
           && c < 256 && d < 256;
}

/* ---- Sessions -------------------------------------------------------------- */

bool kb_mcp_version_supported(const char *version)
{
    for (size_t i = 0; i < sizeof s_versions / sizeof s_versions[0]; i++)
        if (version && strcmp(version, s_versions[i]) == 0)
            return true;
    return false;
}

/*  A fresh session in the table, with the caller's reference; NULL when
    the table is full. */
static kb_mcp_session_t *s_session_new(kb_mcp_t *self, const char *version)
{
    unsigned char random[16];
    if (getrandom(random, sizeof random, 0) != (ssize_t)sizeof random) {
        /* getrandom of 16 bytes does not fail on Linux 3.17+; a clock
           stands in all the same */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        memcpy(random, &ts, sizeof ts < sizeof random ? sizeof ts : sizeof random);
    }
    kb_mcp_session_t *session = kb_xcalloc(1, sizeof *session);
    for (size_t i = 0; i < sizeof random; i++)
        snprintf(session->id + 2 * i, 3, "%02x", random[i]);
    snprintf(session->version, sizeof session->version, "%s", version);
    session->refs = 2;
    pthread_mutex_lock(&self->lock);
    size_t slot = KB_MCP_SESSIONS_MAX;
    for (size_t i = 0; i < KB_MCP_SESSIONS_MAX && slot == KB_MCP_SESSIONS_MAX; i++)
        if (!self->sessions[i])
            slot = i;
    if (slot < KB_MCP_SESSIONS_MAX)
        self->sessions[slot] = session;
    pthread_mutex_unlock(&self->lock);
    if (slot == KB_MCP_SESSIONS_MAX) {
        free(session);
        return NULL;
    }
    return session;
}

/*  Drop one reference (lock held); the last frees the session. */
static void s_unref(kb_mcp_session_t *session)
{
    if (--session->refs == 0)
        free(session);
}

kb_mcp_session_t *kb_mcp_session_find(kb_mcp_t *self, const char *id)
{
    kb_mcp_session_t *found = NULL;
    if (!id || strlen(id) > KB_MCP_SESSION_ID_MAX)
        return NULL;
    pthread_mutex_lock(&self->lock);
    for (size_t i = 0; i < KB_MCP_SESSIONS_MAX && !found; i++)
        if (self->sessions[i] && strcmp(self->sessions[i]->id, id) == 0)
            found = self->sessions[i];
    if (found)
        found->refs++;
    pthread_mutex_unlock(&self->lock);
    return found;
}

void kb_mcp_session_release(kb_mcp_t *self, kb_mcp_session_t **session_p)
{
    if (!session_p || !*session_p)
        return;
    pthread_mutex_lock(&self->lock);
    s_unref(*session_p);
    pthread_mutex_unlock(&self->lock);
    *session_p = NULL;
}

int kb_mcp_session_end(kb_mcp_t *self, const char *id)
{
    int rc = -1;
    pthread_mutex_lock(&self->lock);
    for (size_t i = 0; i < KB_MCP_SESSIONS_MAX && rc < 0; i++) {
        kb_mcp_session_t *session = self->sessions[i];
        if (session && strcmp(session->id, id) == 0) {
            session->ended = true;
            self->sessions[i] = NULL;
            s_unref(session);
            rc = 0;
        }
    }
    pthread_mutex_unlock(&self->lock);
    if (rc == 0)
        kb_mcp_streams_forget_session(self->streams, id);
    return rc;
}

kb_mcp_streams_t *kb_mcp_streams(kb_mcp_t *self)
{
    return self->streams;
}

const char *kb_mcp_session_id(const kb_mcp_session_t *session)
{
    return session->id;
}

const char *kb_mcp_session_version(const kb_mcp_session_t *session)
{
    return session->version;
}

bool kb_mcp_session_ended(kb_mcp_t *self, const kb_mcp_session_t *session)
{
    pthread_mutex_lock(&self->lock);
    bool ended = session->ended;
    pthread_mutex_unlock(&self->lock);
    return ended;
}

/* ---- Calls in flight (cancellation) ---------------------------------------- */

static void s_rid(const json_t *id, char *out, size_t size)
{
    out[0] = '\0';
    char *text = id ? json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    if (text)
        snprintf(out, size, "%s", text);
    free(text);
}

static kb_mcp_inflight_t *s_inflight(kb_mcp_session_t *session, const char *rid)
{
    for (size_t i = 0; i < KB_MCP_CALLS_MAX; i++)
        if (session->calls[i].used && strcmp(session->calls[i].rid, rid) == 0)
            return &session->calls[i];
    return NULL;
}

void kb_mcp_session_call_begin(kb_mcp_t *self, kb_mcp_session_t *session, const json_t *id)
{
    char rid[KB_MCP_RID_MAX];
    s_rid(id, rid, sizeof rid);
    pthread_mutex_lock(&self->lock);
    for (size_t i = 0; i < KB_MCP_CALLS_MAX; i++) {
        kb_mcp_inflight_t *call = &session->calls[i];
        if (!call->used) {
            *call = (kb_mcp_inflight_t){ .used = true };
            snprintf(call->rid, sizeof call->rid, "%s", rid);
            break;
        }
    }
    pthread_mutex_unlock(&self->lock);
}

bool kb_mcp_session_call_started(kb_mcp_t *self, kb_mcp_session_t *session, const json_t *id,
                                 const char *process_id)
{
    char rid[KB_MCP_RID_MAX];
    s_rid(id, rid, sizeof rid);
    pthread_mutex_lock(&self->lock);
    kb_mcp_inflight_t *call = s_inflight(session, rid);
    bool cancelled = call && call->cancelled;
    if (call)
        snprintf(call->process_id, sizeof call->process_id, "%s", process_id);
    pthread_mutex_unlock(&self->lock);
    return cancelled;
}

void kb_mcp_session_call_end(kb_mcp_t *self, kb_mcp_session_t *session, const json_t *id)
{
    char rid[KB_MCP_RID_MAX];
    s_rid(id, rid, sizeof rid);
    pthread_mutex_lock(&self->lock);
    kb_mcp_inflight_t *call = s_inflight(session, rid);
    if (call)
        call->used = false;
    pthread_mutex_unlock(&self->lock);
}

/*  notifications/cancelled: the call's run gets SIGINT now, or as soon as
    it has a process (kb_mcp_session_call_started says so). */
static void s_cancel(kb_mcp_t *self, kb_mcp_session_t *session, const json_t *params)
{
    char rid[KB_MCP_RID_MAX], process_id[80] = "";
    s_rid(json_object_get(params, "requestId"), rid, sizeof rid);
    pthread_mutex_lock(&self->lock);
    kb_mcp_inflight_t *call = s_inflight(session, rid);
    if (call && call->process_id[0])
        snprintf(process_id, sizeof process_id, "%s", call->process_id);
    else if (call)
        call->cancelled = true;
    pthread_mutex_unlock(&self->lock);
    if (process_id[0]) {
        kb_error_t err = { KB_OK, "" };
        (void)kb_service_process_signal(self->service, process_id, "SIGINT", &err);
    }
}

/* ---- Envelopes ------------------------------------------------------------- */

json_t *kb_mcp_error(const json_t *id, int rpc_code, kb_code_t code, const char *field,
                     const char *message)
{
    json_t *error = json_pack("{s:i, s:s}", "code", rpc_code, "message", message);
    KB_NOT_NULL(error);
    if (code != KB_OK || field) {
        json_t *data = json_object();
        KB_NOT_NULL(data);
        if (code != KB_OK)
            json_object_set_new(data, "code", json_string(kb_code_name(code)));
        if (field)
            json_object_set_new(data, "field", json_string(field));
        json_object_set_new(error, "data", data);
    }
    json_t *response = json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id",
                                 id ? (json_t *)id : json_null(), "error", error);
    KB_NOT_NULL(response);
    return response;
}

static json_t *s_result(const json_t *id, json_t *result)
{
    json_t *response = json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
    KB_NOT_NULL(response);
    return response;
}

json_t *kb_mcp_parse(const char *data, size_t len, json_t **error)
{
    *error = NULL;
    json_error_t jerr;
    /* NUL passes the parser so that a string holding one is refused by
       name (kb_request.c), as -32602, not as malformed JSON. */
    json_t *message = len ? json_loadb(data, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr) : NULL;
    if (!message) {
        char text[256];
        snprintf(text, sizeof text, "Parse error: %s", len ? jerr.text : "empty body");
        *error = kb_mcp_error(NULL, KB_RPC_PARSE_ERROR, KB_ERR_INVALID_REQUEST_BODY, NULL, text);
        return NULL;
    }
    if (!json_is_object(message) && !(json_is_array(message) && json_array_size(message) > 0)) {
        json_decref(message);
        *error = kb_mcp_error(NULL, KB_RPC_INVALID_REQUEST, KB_ERR_BAD_REQUEST, NULL,
                              "Invalid Request: a JSON-RPC message is an object");
        return NULL;
    }
    return message;
}

/*  An id JSON-RPC allows: a string or an integer (MCP: never null). */
static bool s_id_valid(const json_t *id)
{
    return json_is_string(id) || json_is_integer(id);
}

const char *kb_mcp_request_method(const json_t *message)
{
    const json_t *id = json_object_get(message, "id");
    const json_t *method = json_object_get(message, "method");
    return json_is_object(message) && id && json_is_string(method) ? json_string_value(method)
                                                                   : NULL;
}

bool kb_mcp_wants_progress(const json_t *message)
{
    const char *method = kb_mcp_request_method(message);
    if (!method || strcmp(method, "tools/call") != 0)
        return false;
    const json_t *meta = json_object_get(json_object_get(message, "params"), "_meta");
    const json_t *token = json_object_get(meta, "progressToken");
    return json_is_string(token) || json_is_integer(token);
}

/* ---- Methods --------------------------------------------------------------- */

static json_t *s_initialize(kb_mcp_t *self, kb_mcp_session_t **session, const json_t *id,
                            const json_t *params)
{
    const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
    if (!json_is_object(params) || !asked)
        return kb_mcp_error(id, KB_RPC_INVALID_PARAMS, KB_ERR_BAD_REQUEST, "protocolVersion",
                            "initialize needs params.protocolVersion, a string");
    /* Ours when we speak it, else our newest: the client decides. */
    const char *version = kb_mcp_version_supported(asked) ? asked : s_versions[0];
    kb_mcp_session_t *made = s_session_new(self, version);
    if (!made)
        return kb_mcp_error(id, KB_RPC_INVALID_REQUEST, KB_ERR_UNAVAILABLE, NULL,
                            "too many MCP sessions; end one (DELETE /mcp) first");
    kb_mcp_session_release(self, session);
    *session = made;
    json_t *result = json_pack(
        "{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", version, "capabilities",
        "tools", "listChanged", 0, "serverInfo", "name", self->server_name, "title", "kernelbridge",
        "version", KB_VERSION, "instructions",
        "Run code in live Jupyter kernels. run_code keeps state per context: create_context "
        "gives one, or omit context_id to use the language's default context.");
    KB_NOT_NULL(result);
    return s_result(id, result);
}

static json_t *s_tools_call(kb_mcp_t *self, kb_mcp_session_t *session, const json_t *id,
                            const json_t *params, kb_mcp_send_fn *send, void *arg)
{
    kb_mcp_call_t call = {
        .mcp = self,
        .service = self->service,
        .session = session,
        .request_id = id,
        .progress_token = json_object_get(json_object_get(params, "_meta"), "progressToken"),
        .send = send,
        .arg = arg,
        .max_text = self->max_text,
    };
    kb_mcp_fault_t fault = { .rpc = 0 };
    json_t *result = kb_mcp_tools_call(&call, params, &fault);
    if (!result)
        return kb_mcp_error(id, fault.rpc, fault.code, fault.field[0] ? fault.field : NULL,
                            fault.message);
    return s_result(id, result);
}

/*  A request of a session's client. */
static json_t *s_request(kb_mcp_t *self, kb_mcp_session_t **session, const json_t *message,
                         const char *method, kb_mcp_send_fn *send, void *arg)
{
    const json_t *id = json_object_get(message, "id");
    const json_t *params = json_object_get(message, "params");
    if (!s_id_valid(id))
        return kb_mcp_error(NULL, KB_RPC_INVALID_REQUEST, KB_ERR_BAD_REQUEST, "id",
                            "Invalid Request: id must be a string or an integer");
    if (params && !json_is_object(params))
        return kb_mcp_error(id, KB_RPC_INVALID_PARAMS, KB_ERR_BAD_REQUEST, "params",
                            "params must be an object");
    if (strcmp(method, "initialize") == 0)
        return s_initialize(self, session, id, params);
    if (strcmp(method, "ping") == 0) {
        json_t *empty = json_object();
        KB_NOT_NULL(empty);
        return s_result(id, empty);
    }
    if (!*session)
        return kb_mcp_error(id, KB_RPC_INVALID_REQUEST, KB_ERR_BAD_REQUEST, NULL,
                            "Invalid Request: initialize first");
    if (strcmp(method, "tools/list") == 0)
        return s_result(id, kb_mcp_tools_list());
    if (strcmp(method, "tools/call") == 0)
        return s_tools_call(self, *session, id, params, send, arg);
    char text[160];
    snprintf(text, sizeof text, "Method not found: %.100s", method);
    return kb_mcp_error(id, KB_RPC_METHOD_NOT_FOUND, KB_ERR_NOT_FOUND, NULL, text);
}

json_t *kb_mcp_handle(kb_mcp_t *self, kb_mcp_session_t **session, const json_t *message,
                      kb_mcp_send_fn *send, void *arg)
{
    const json_t *version = json_object_get(message, "jsonrpc");
    const json_t *method = json_object_get(message, "method");
    const json_t *id = json_object_get(message, "id");
    if (!json_is_object(message) || !json_is_string(version)
        || strcmp(json_string_value(version), "2.0") != 0)
        return kb_mcp_error(s_id_valid(id) ? id : NULL, KB_RPC_INVALID_REQUEST, KB_ERR_BAD_REQUEST,
                            "jsonrpc", "Invalid Request: jsonrpc must be \"2.0\"");
    if (method && !json_is_string(method))
        return kb_mcp_error(s_id_valid(id) ? id : NULL, KB_RPC_INVALID_REQUEST, KB_ERR_BAD_REQUEST,
                            "method", "Invalid Request: method must be a string");
    if (!method) {
        /* A response to us: we send no requests, so it is dropped. One
           that is neither a result nor an error is no message at all. */
        if (id && (json_object_get(message, "result") || json_object_get(message, "error")))
            return NULL;
        return kb_mcp_error(s_id_valid(id) ? id : NULL, KB_RPC_INVALID_REQUEST, KB_ERR_BAD_REQUEST,
                            "method", "Invalid Request: no method");
    }
    const char *name = json_string_value(method);
    if (id)
        return s_request(self, session, message, name, send, arg);
    /* Notifications: never answered. */
    if (*session && strcmp(name, "notifications/cancelled") == 0)
        s_cancel(self, *session, json_object_get(message, "params"));
    else if (*session && strcmp(name, "notifications/initialized") == 0) {
        pthread_mutex_lock(&self->lock);
        (*session)->initialized = true;
        pthread_mutex_unlock(&self->lock);
    }
    return NULL;
}

json_t *kb_mcp_handle_batch(kb_mcp_t *self, kb_mcp_session_t **session, const json_t *batch)
{
    if (!*session || strcmp((*session)->version, KB_MCP_BATCH_VERSION) != 0)
        return kb_mcp_error(NULL, KB_RPC_INVALID_REQUEST, KB_ERR_BAD_REQUEST, NULL,
                            "Invalid Request: batches are not part of this protocol revision");
    json_t *responses = json_array();
    KB_NOT_NULL(responses);
    size_t i;
    const json_t *message;
    json_array_foreach(batch, i, message)
    {
        const char *method = kb_mcp_request_method(message);
        json_t *response
            = method && strcmp(method, "initialize") == 0
                  ? kb_mcp_error(json_object_get(message, "id"), KB_RPC_INVALID_REQUEST,
                                 KB_ERR_BAD_REQUEST, NULL,
                                 "Invalid Request: initialize cannot be part of a batch")
                  : kb_mcp_handle(self, session, message, NULL, NULL);
        if (response)
            json_array_append_new(responses, response);
    }
    if (json_array_size(responses) == 0) {
        json_decref(responses);
        return NULL;
    }
    return responses;
}
