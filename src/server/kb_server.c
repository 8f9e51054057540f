/*  kb_server.c - the libmicrohttpd daemon of kernelbridge: binding, the
    per-connection request record, the access callback that bounds, gates,
    routes and authorizes each request before its body is read, and the
    drain / stop sequence. Routes are in kb_routes.c, responses in
    kb_http.c. */
#include "server/kb_http.h"
#include "util/kb_clock.h"
#include "server/kb_jupyter.h"
#include "server/kb_mcp.h"
#include "server/kb_metrics_http.h"
#include "server/kb_router.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define KB_DEFAULT_HOST "127.0.0.1"
#define KB_DEFAULT_MAX_BODY (16u << 20)
#define KB_DEFAULT_MAX_CONNECTIONS 256
#define KB_DEFAULT_CONNECTION_TIMEOUT 60
#define KB_DEFAULT_RESERVE 16
#define KB_DEFAULT_HEADER_TIMEOUT 10.0
#define KB_DEFAULT_SSE_KEEPALIVE_MS 15000
/*  How long destroy lets responses in flight finish before closing. */
#define KB_DRAIN_GRACE_S 5.0
/*  A body buffer keeps at most this much after its request, so that an
    idle kept-alive connection holds little memory. */
#define KB_BODY_KEEP 65536
/*  An over-limit chunked body is read and dropped (to answer 413) for at
    least this many bytes past the limit, then the connection is cut. */
#define KB_BODY_SLACK (1u << 20)
/*  libmicrohttpd's memory per connection: it must hold a whole request
    head (and 64 bytes per header field and query argument) before any
    callback of ours runs, so it is well above our limits on a head
    (kb_http.h): a head over them, up to 64 KiB, is ours to answer, not the
    library's (68 KiB is the least that holds a 64 KiB head and the
    answer's own header lines). The library zeroes all of it for each
    request of a kept-alive connection (its MHD_pool_reset), which every
    run pays for: no larger than that. Response bodies do not use it (a
    callback response has its own block). */
#define KB_CONNECTION_MEMORY (80u << 10)

/* ---- Configuration ------------------------------------------------------- */

static bool address_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return false;
}

/*  Resolve host (numeric or a name) to one address with port. */
static int resolve(const char *host, unsigned port, struct sockaddr_storage *addr, kb_error_t *err)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
    struct addrinfo *found = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &found);
    if (rc != 0 || !found)
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "cannot resolve listen host %s: %s", host,
                            gai_strerror(rc));
    memcpy(addr, found->ai_addr, found->ai_addrlen);
    freeaddrinfo(found);
    if (addr->ss_family == AF_INET)
        ((struct sockaddr_in *)addr)->sin_port = htons((uint16_t)port);
    else if (addr->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)addr)->sin6_port = htons((uint16_t)port);
    else
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "listen host %s is not an IP address", host);
    return 0;
}

int kb_server_check_config(const kb_server_config_t *config, kb_error_t *err)
{
    const char *host = config->host ? config->host : KB_DEFAULT_HOST;
    if (config->port > 65535)
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "port %u is out of range", config->port);
    if (config->token && strlen(config->token) > KB_SERVER_TOKEN_MAX)
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "the token is longer than %d bytes",
                            KB_SERVER_TOKEN_MAX);
    struct sockaddr_storage addr;
    if (resolve(host, config->port, &addr, err) < 0)
        return -1;
    bool has_token = config->token && config->token[0];
    if (!has_token && !config->insecure && !address_is_loopback((struct sockaddr *)&addr))
        return kb_error_set(err, KB_ERR_BAD_REQUEST,
                            "refusing to listen on %s without a token: anyone who can reach it "
                            "could run code; give --token-file (or KB_TOKEN), or --insecure",
                            host);
    return 0;
}

/* ---- MHD callbacks ------------------------------------------------------- */

/*  At most this many of libmicrohttpd's lines a second: a hostile client
    (or many) must not flood the log. The count left out is said with the
    next line. */
#define KB_MHD_LOG_RATE 20

/*  True when a line may go out now; *suppressed: lines left out before. */
static bool s_log_allowed(kb_server_t *self, unsigned long long *suppressed)
{
    double now = kb_http_now();
    pthread_mutex_lock(&self->lock);
    if (now - self->log_window >= 1.0) {
        self->log_window = now;
        self->log_lines = 0;
    }
    bool allowed = self->log_lines++ < KB_MHD_LOG_RATE;
    *suppressed = allowed ? self->log_suppressed : 0;
    if (allowed)
        self->log_suppressed = 0;
    else
        self->log_suppressed++;
    pthread_mutex_unlock(&self->lock);
    return allowed;
}

static void on_mhd_log(void *cls, const char *fmt, va_list args)
{
    kb_server_t *self = cls;
    unsigned long long suppressed;
    if (!s_log_allowed(self, &suppressed))
        return;
    char message[512];
    vsnprintf(message, sizeof message, fmt, args);
    size_t len = strlen(message);
    while (len > 0 && (message[len - 1] == '\n' || message[len - 1] == '\r'))
        message[--len] = '\0';
    /* an error libmicrohttpd answers itself (a request it cannot parse):
       its HTML page is not worth a log line */
    char *page = strstr(message, " ('<html>");
    if (page)
        strcpy(page, ")");
    if (suppressed)
        kb_server_log(self->log_format, "warn", "http: %s (and %llu lines like it left out)",
                      message, suppressed);
    else
        kb_server_log(self->log_format, "warn", "http: %s", message);
}

/*  Each connection owns one request record, reused by its requests. */
static void on_connection(void *cls, struct MHD_Connection *connection, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    kb_server_t *self = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info
            = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        int fd = info ? info->connect_fd : -1;
        /* Small responses go out at once: no Nagle delay on kept-alive
           request/response exchanges. */
        int one = 1;
        if (fd >= 0)
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        kb_http_req_t *req = fd >= 0 ? calloc(1, sizeof *req) : NULL;
        if (req) {
            req->server = self;
            req->connection = connection;
            kb_buf_init(&req->body, self->max_body);
            info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
            kb_conns_opened(self->conns, &req->conn, fd, info ? info->client_addr : NULL);
        }
        *socket_context = req; /* NULL: the access callback closes it */
        return;
    }
    kb_http_req_t *req = *socket_context;
    if (req) {
        kb_conns_closed(self->conns, &req->conn);
        kb_ws_request_done(&req->ws); /* given back on completion; this is in case */
        kb_buf_free(&req->body);
        free(req);
    }
    *socket_context = NULL;
}

/*  A request line is read (libmicrohttpd's URI log callback, before the
    headers are): the connection's request record is the request's from
    now on, and keeps the length of the target as sent for request_begin.
    Returns the record (the request's con_cls), NULL when it has none. */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info
        = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    kb_http_req_t *req = info ? info->socket_context : NULL;
    if (req) {
        req->begun = false;
        req->counted = false;
        req->status = 0;
        req->uri_len = uri ? strlen(uri) : 0;
    }
    return req;
}

static void on_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    kb_server_t *self = cls;
    kb_http_req_t *req = *con_cls;
    *con_cls = NULL;
    if (!req)
        return;
    /* What libmicrohttpd answered itself (a request it cannot parse), if
       it did: before the headers were whole, or in a chunked body. */
    const union MHD_ConnectionInfo *info
        = req->status ? NULL : MHD_get_connection_info(connection, MHD_CONNECTION_INFO_HTTP_STATUS);
    if (!req->begun) {
        /* counted with the status it was sent, its method unread ("other") */
        if (info)
            kb_metrics_count_request(NULL, info->http_status);
        return;
    }
    if (info)
        req->status = info->http_status;
    kb_http_log_request(req, toe);
    kb_ws_request_done(&req->ws);
    kb_buf_trim(&req->body, KB_BODY_KEEP);
    kb_conns_idle(self->conns, &req->conn); /* the header deadline runs again */
    if (req->counted) {
        pthread_mutex_lock(&self->lock);
        if (--self->in_flight == 0)
            pthread_cond_broadcast(&self->idle);
        pthread_mutex_unlock(&self->lock);
    }
}

static enum MHD_Result add_header_size(void *cls, enum MHD_ValueKind kind, const char *key,
                                       size_t key_size, const char *value, size_t value_size)
{
    *(size_t *)cls += key_size + value_size + 4; /* "name: value\r\n" */
    return MHD_YES;
}

/*  The daemon's own limits on a request head (kb_http.h), checked before
    anything else. True when the request is within them; else its error is
    queued, and the connection closes after it. */
static bool request_within_limits(kb_http_req_t *req)
{
    size_t headers = 0;
    MHD_get_connection_values_n(req->connection, MHD_HEADER_KIND, add_header_size, &headers);
    if (req->uri_len > KB_HTTP_URI_MAX) {
        req->close = true;
        kb_http_reply_errorf(req, KB_ERR_URI_TOO_LONG,
                             "the request's URI is longer than the server accepts (%zu bytes; "
                             "the limit is %u)",
                             req->uri_len, KB_HTTP_URI_MAX);
        return false;
    }
    if (headers > KB_HTTP_HEADERS_MAX) {
        req->close = true;
        kb_http_reply_errorf(req, KB_ERR_HEADERS_TOO_LARGE,
                             "the request's headers are larger than the server accepts (%zu "
                             "bytes; the limit is %u)",
                             headers, KB_HTTP_HEADERS_MAX);
        return false;
    }
    return true;
}

/*  Headers are in: bound, gate, route and authorize the request before a
    byte of body is read, so that refusals cost no upload. */
static void request_begin(kb_server_t *self, kb_http_req_t *req, const char *method,
                          const char *url)
{
    req->method = method;
    req->path = url;
    kb_router_reset(req);
    req->counted = false;
    req->close = false;
    kb_buf_reset(&req->body);
    req->body_status = KB_BUF_OK;
    req->received = 0;
    req->status = 0;
    req->started = kb_http_now();
    kb_conns_busy(self->conns, &req->conn);
    if (!request_within_limits(req))
        return;

    pthread_mutex_lock(&self->lock);
    bool draining = self->draining;
    if (!draining) {
        self->in_flight++;
        req->counted = true;
    }
    pthread_mutex_unlock(&self->lock);
    if (draining) {
        kb_http_reply_errorf(req, KB_ERR_UNAVAILABLE, "the daemon is shutting down");
        return;
    }

    kb_code_t code = kb_router_match(req, kb_router_tables(self->api));
    if (!req->open && !kb_http_authorized(req)) {
        kb_router_refuse(req);
        kb_http_reply_errorf(req, KB_ERR_UNAUTHORIZED,
                             self->api == KB_API_E2B
                                 ? "missing or wrong token: send X-Access-Token: <token>"
                                 : "missing or wrong token: send Authorization: Bearer <token>");
        return;
    }
    if (kb_conns_reserved(self->conns, &req->conn) && !req->reserve) {
        kb_router_refuse(req);
        kb_http_reply_errorf(req, KB_ERR_UNAVAILABLE,
                             "every connection slot is taken; this one is kept for GET /health "
                             "and GET /metrics");
        return;
    }
    if (code == KB_ERR_NOT_FOUND) {
        kb_http_reply_errorf(req, code, "no route %s", url);
        return;
    }
    if (code == KB_ERR_METHOD_NOT_ALLOWED) {
        kb_http_reply_errorf(req, code, "%s does not take %s (allowed: %s)", url, method,
                             req->allow);
        return;
    }
    const char *length = MHD_lookup_connection_value(req->connection, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (length) {
        unsigned long long declared = strtoull(length, NULL, 10);
        if (declared > self->max_body) {
            kb_router_refuse(req);
            kb_http_reply_errorf(req, KB_ERR_PAYLOAD_TOO_LARGE,
                                 "the request body of %llu bytes is over the limit of %zu",
                                 declared, self->max_body);
        }
    }
}

/*  The whole body is in: answer. */
static void request_dispatch(kb_server_t *self, kb_http_req_t *req)
{
    if (req->body_status == KB_BUF_OVER_CAP) {
        kb_http_reply_errorf(req, KB_ERR_PAYLOAD_TOO_LARGE,
                             "the request body is over the limit of %zu bytes", self->max_body);
        return;
    }
    if (req->body_status != KB_BUF_OK) {
        kb_http_reply_errorf(req, kb_buf_code(req->body_status),
                             "no memory for a request body of %zu bytes", req->received);
        return;
    }
    /* No service call starts once draining began: the service may be
       going away under us. */
    pthread_mutex_lock(&self->lock);
    bool draining = self->draining;
    pthread_mutex_unlock(&self->lock);
    if (draining) {
        kb_http_reply_errorf(req, KB_ERR_UNAVAILABLE, "the daemon is shutting down");
        return;
    }
    req->handler(req);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *connection, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **con_cls)
{
    kb_server_t *self = cls;
    kb_http_req_t *req = *con_cls; /* on_request_line's */
    if (!req)
        return MHD_NO; /* no memory for the connection: close it */
    if (!req->begun) {
        req->begun = true;
        request_begin(self, req, method, url);
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        /* Bodies of routes that take none, and of answered requests, are
           read and dropped; so is a body past the limit, which libmicrohttpd
           can only answer once it has been read (a declared length over the
           limit was answered before reading). */
        size_t size = *upload_data_size;
        *upload_data_size = 0;
        req->received += size;
        if (req->status != 0)
            return MHD_YES;
        if (req->wants_body)
            kb_http_body_append(req, upload_data, size);
        else if (req->received > self->max_body)
            req->body_status = KB_BUF_OVER_CAP;
        /* A chunked upload that goes on and on is cut off. */
        size_t slack = self->max_body > KB_BODY_SLACK ? self->max_body : KB_BODY_SLACK;
        return req->body_status == KB_BUF_OVER_CAP && req->received - self->max_body > slack
                   ? MHD_NO
                   : MHD_YES;
    }
    if (req->status == 0)
        request_dispatch(self, req);
    /* No response could be queued (out of memory): close the connection. */
    return req->status != 0 ? MHD_YES : MHD_NO;
}

/* ---- Lifecycle ----------------------------------------------------------- */

kb_server_t *kb_server_new(kb_service_t *service, const kb_server_config_t *config, kb_error_t *err)
{
    assert(service && config);
    if (kb_server_check_config(config, err) < 0)
        return NULL;
    kb_server_t *self = calloc(1, sizeof *self);
    if (!self) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return NULL;
    }
    self->service = service;
    self->quiesced_fd = MHD_INVALID_SOCKET;
    if (config->api == KB_API_NATIVE && !(self->sessions = kb_jupyter_sessions_new())) {
        free(self);
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return NULL;
    }
    if (config->api == KB_API_NATIVE) {
        kb_mcp_config_t mcp
            = { .max_text = config->mcp_max_text, .allow_origins = config->mcp_allow_origins };
        self->mcp = kb_mcp_new(service, &mcp);
    }
    self->max_body = config->max_body ? config->max_body : KB_DEFAULT_MAX_BODY;
    self->sse_keepalive_ms
        = config->sse_keepalive_ms ? config->sse_keepalive_ms : KB_DEFAULT_SSE_KEEPALIVE_MS;
    /* E2B's execute stream sends a keepalive line after 5 s without output. */
    if (config->api == KB_API_E2B && !config->sse_keepalive_ms)
        self->sse_keepalive_ms = 5000;
    self->log_format = config->log_format;
    self->api = config->api;
    if (config->token && config->token[0]) {
        self->token_len = strlen(config->token);
        memcpy(self->token, config->token, self->token_len);
    }
    pthread_mutex_init(&self->lock, NULL);
    kb_cond_init_monotonic(&self->idle);
    atomic_init(&self->stopping, false);
    self->empty = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    self->websockets = kb_ws_group_new();
    if (!self->empty || !self->websockets) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        goto fail;
    }

    const char *host = config->host ? config->host : KB_DEFAULT_HOST;
    struct sockaddr_storage addr;
    if (resolve(host, config->port, &addr, err) < 0)
        goto fail;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL
                     | MHD_USE_ITC | MHD_USE_ERROR_LOG | MHD_ALLOW_UPGRADE;
    if (addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    unsigned max_connections
        = config->max_connections ? config->max_connections : KB_DEFAULT_MAX_CONNECTIONS;
    kb_conns_config_t admission = {
        .max_connections = max_connections,
        .reserve = config->reserve ? config->reserve : KB_DEFAULT_RESERVE,
        .per_address
        = config->max_per_address ? config->max_per_address : (max_connections + 1) / 2,
        .header_ms = (unsigned)((config->header_timeout > 0 ? config->header_timeout
                                                            : KB_DEFAULT_HEADER_TIMEOUT)
                                * 1000),
    };
    if (!(self->conns = kb_conns_new(&admission))) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory or threads");
        goto fail;
    }
    unsigned timeout
        = config->connection_timeout ? config->connection_timeout : KB_DEFAULT_CONNECTION_TIMEOUT;
    /* libmicrohttpd counts a stream reader's wait for the next event as
       idle time: a stream must write (a keep-alive comment at worst) well
       within the connection timeout, or it is cut before its last event. */
    if (self->sse_keepalive_ms > timeout * 500u)
        self->sse_keepalive_ms = timeout * 500u;
    errno = 0;
    self->daemon = MHD_start_daemon(
        flags, (uint16_t)config->port, kb_conns_admit, self->conns, on_access, self,
        /* the logger first, so that MHD routes every message through it */
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, self, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_LIMIT, kb_conns_hard_limit(&admission),
        MHD_OPTION_CONNECTION_TIMEOUT, timeout, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)KB_CONNECTION_MEMORY, MHD_OPTION_URI_LOG_CALLBACK, on_request_line, self,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, self, MHD_OPTION_NOTIFY_CONNECTION,
        on_connection, self, MHD_OPTION_END);
    if (!self->daemon) {
        kb_error_set(err, KB_ERR_UNAVAILABLE, "cannot listen on %s port %u: %s", host, config->port,
                     errno ? strerror(errno) : "libmicrohttpd refused");
        goto fail;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(self->daemon, MHD_DAEMON_INFO_BIND_PORT);
    self->port = info ? info->port : (int)config->port;
    bool v6 = addr.ss_family == AF_INET6;
    snprintf(self->url, sizeof self->url, "http://%s%.45s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "",
             self->port);
    return self;
fail:
    kb_server_destroy(&self);
    return NULL;
}

int kb_server_port(kb_server_t *self)
{
    return self->port;
}

const char *kb_server_url(kb_server_t *self)
{
    return self->url;
}

void kb_server_drain(kb_server_t *self)
{
    pthread_mutex_lock(&self->lock);
    if (!self->draining && self->daemon)
        self->quiesced_fd = MHD_quiesce_daemon(self->daemon);
    self->draining = true;
    pthread_mutex_unlock(&self->lock);
    /* Websockets make service calls too: they close now (1001), and
       destroy waits for them. */
    if (self->websockets)
        kb_ws_group_close_all(self->websockets, KB_WS_GOING_AWAY, "the server is stopping");
}

void kb_server_destroy(kb_server_t **self_p)
{
    kb_server_t *self = self_p ? *self_p : NULL;
    if (!self)
        return;
    if (self->daemon) {
        kb_server_drain(self);
        struct timespec deadline;
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += (time_t)KB_DRAIN_GRACE_S;
        pthread_mutex_lock(&self->lock);
        while (self->in_flight > 0) {
            if (pthread_cond_timedwait(&self->idle, &self->lock, &deadline) == ETIMEDOUT)
                break;
        }
        pthread_mutex_unlock(&self->lock);
        /* An open websocket holds its connection's thread, which
           MHD_stop_daemon joins: they end first (each within its close
           timeout). */
        kb_ws_group_destroy(&self->websockets);
        atomic_store(&self->stopping, true);
        MHD_stop_daemon(self->daemon);
        self->daemon = NULL;
    }
    /* MHD hands the quiesced socket back to us, to close after the stop. */
    if (self->quiesced_fd != MHD_INVALID_SOCKET)
        close(self->quiesced_fd);
    if (self->empty)
        MHD_destroy_response(self->empty);
    kb_ws_group_destroy(&self->websockets);
    kb_conns_destroy(&self->conns); /* after the stop: no connection is left */
    pthread_cond_destroy(&self->idle);
    pthread_mutex_destroy(&self->lock);
    explicit_bzero(self->token, sizeof self->token);
    kb_jupyter_sessions_destroy(&self->sessions);
    kb_mcp_destroy(&self->mcp); /* after the stop: no request holds it */
    free(self);
    *self_p = NULL;
}
