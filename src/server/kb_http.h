/*  kb_http.h - private to src/server: the server and request structs that
    kb_server.c (MHD glue), kb_http.c (responses, SSE, auth, logs),
    kb_router.c (matching) and the front ends' routes share. Nothing here
    knows a route; nothing here touches service state. */
#ifndef KB_HTTP_H_INCLUDED
#define KB_HTTP_H_INCLUDED

#include <microhttpd.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/kb_conns.h"
#include "server/kb_server.h"
#include "server/kb_ws.h"
#include "util/kb_buf.h"

/*  Longest path id (context or process) a route accepts; longer ones cannot
    exist and are answered as not found. */
#define KB_HTTP_ID_MAX 128

/*  The daemon's limits on a request head (SPEC section 6), checked by
    kb_server.c before any route: the request target as sent (path and
    query) and the header lines (name, value, ": " and CRLF each). Over
    them: 414 URI_TOO_LONG, 431 HEADERS_TOO_LARGE, with our error body. */
#define KB_HTTP_URI_MAX (16u << 10)
#define KB_HTTP_HEADERS_MAX (32u << 10)

struct kb_server {
    kb_service_t *service; /* borrowed */
    struct MHD_Daemon *daemon;
    MHD_socket quiesced_fd; /* listen socket handed back by MHD_quiesce_daemon */
    int port;
    char url[80];
    char token[KB_SERVER_TOKEN_MAX]; /* zero padded; compared in constant time */
    size_t token_len;                /* 0: no auth */
    size_t max_body;
    unsigned sse_keepalive_ms;
    kb_log_format_t log_format;
    kb_server_api_t api;
    pthread_mutex_t lock; /* guards draining and in_flight */
    pthread_cond_t idle;  /* signalled when in_flight drops to 0 */
    bool draining;
    unsigned in_flight;                   /* requests between first callback and completion */
    atomic_bool stopping;                 /* stream readers give up at once */
    struct MHD_Response *empty;           /* shared, for 202/204 */
    kb_ws_group_t *websockets;            /* every websocket a route opened */
    atomic_ullong ws_malformed;           /* kernel websocket messages dropped as malformed */
    struct kb_jupyter_sessions *sessions; /* Jupyter's /api/sessions (native API only) */
    kb_conns_t *conns;                    /* who may hold a connection (kb_conns.h) */
    struct kb_mcp *mcp;                   /* MCP at /mcp (kb_mcp.h; native API only) */
    double log_window;                    /* libmicrohttpd's log lines: this second's start, */
    unsigned log_lines;                   /* lines in it, */
    unsigned long long log_suppressed;    /* and lines left out since the last one (lock) */
};

typedef struct kb_http_req kb_http_req_t;
typedef void(kb_route_fn)(kb_http_req_t *req);

/*  A {name} of the matched route's pattern: name and value borrowed from
    the pattern and the path, neither NUL-terminated (kb_router.h). */
#define KB_HTTP_PARAMS_MAX 2
typedef struct {
    const char *name;
    size_t name_len;
    const char *value;
    size_t len;
} kb_http_param_t;

/*  One HTTP request on a connection, from its headers to its response.
    Lives in its connection (allocated when the connection opens, reset per
    request) so a kept-alive connection costs no allocation per request;
    the body buffer is kept when small. */
struct kb_http_req {
    kb_server_t *server; /* borrowed */
    struct MHD_Connection *connection;
    const char *method; /* borrowed from MHD, valid until completion */
    const char *path;   /* idem; decoded path without the query */
    /*  Routing, set by kb_router_match alone (kb_router.h). */
    const struct kb_route *route; /* the matched route, NULL when none */
    kb_route_fn *handler;         /* its handler; NULL when none or answered */
    const char *allow;            /* Allow header of the matched path (405), or NULL */
    char allow_buf[48];           /* what allow points to */
    bool open;                    /* the path needs no token (GET /health) */
    bool reserve;                 /* served on a connection of the reserve (probes) */
    bool wants_body;              /* the route parses a JSON body */
    bool jupyter;                 /* one of Jupyter's paths: its errors are Jupyter's JSON */
    char id[KB_HTTP_ID_MAX + 1];  /* the path's first {param}, or "" */
    bool begun;                   /* its headers reached us (else the library answers) */
    bool close;                   /* answer with Connection: close */
    size_t uri_len;               /* the request target's length as sent */
    bool id_too_long;
    kb_http_param_t params[KB_HTTP_PARAMS_MAX];
    unsigned param_count;
    bool counted;                /* in server->in_flight */
    kb_buf_t body;               /* capped at max_body; NUL terminated */
    kb_buf_status_t body_status; /* why the body was dropped: over the cap, or no memory */
    size_t received;             /* body bytes read, kept or not */
    unsigned status;             /* queued status, 0 before */
    double started;              /* monotonic seconds */
    kb_ws_t *ws;                 /* the request's reference, when a route opened one */
    kb_conn_t conn;              /* the connection's entry in server->conns */
};

/*  Seconds on the monotonic clock. */
double kb_http_now(void);

/*  RFC 3339 UTC time with milliseconds into buf (at least 32 bytes). */
void kb_http_timestamp(char *buf, size_t size);

/*  Copy src into dst (size bytes, NUL terminated), every byte that is not
    part of valid UTF-8 replaced by '?', and with printable also control
    characters and spaces. For request text headed to JSON and logs. */
void kb_http_text(char *dst, size_t size, const char *src, bool printable);

/*  True when the request carries the configured token, or when no token
    is configured: `Authorization: Bearer T`, or Jupyter's `Authorization:
    token T`; for Jupyter's paths also `?token=T` (a browser's websocket
    cannot send headers). Constant time in the token's contents. An E2B
    server also takes the token from X-Access-Token. */
bool kb_http_authorized(kb_http_req_t *req);

/*  Append upload data to the body, bounded by max_body: beyond it, or
    when it cannot be held, the body is dropped and body_status says why. */
void kb_http_body_append(kb_http_req_t *req, const char *data, size_t size);

/*  Queue a JSON response; body is stolen. */
void kb_http_reply_json(kb_http_req_t *req, unsigned status, json_t *body);

/*  Queue a run's result, rendered from its document (stolen): with a
    Content-Length when it is small, else written piece by piece (chunked)
    as the client reads, never as one string. */
void kb_http_reply_doc(kb_http_req_t *req, unsigned status, kb_result_doc_t *doc);

/*  Queue an empty response (202, 204). */
void kb_http_reply_empty(kb_http_req_t *req, unsigned status);

/*  Queue a plain-text response (text/plain; charset=utf-8). */
void kb_http_reply_text(kb_http_req_t *req, unsigned status, const char *text);

/*  Queue a response built by the caller (who keeps its reference). */
void kb_http_reply_response(kb_http_req_t *req, unsigned status, struct MHD_Response *response);

/*  Queue the JSON error body {code, message, status_code, path, method,
    timestamp} with the code's status; an E2B server answers the message as
    plain text instead, as E2B's server does; a Jupyter request gets
    Jupyter Server's {message, reason}. err is borrowed. */
void kb_http_reply_error(kb_http_req_t *req, const kb_error_t *err);

/*  Shorthand: an error of code with a printf message. */
void kb_http_reply_errorf(kb_http_req_t *req, kb_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*  Queue a Server-Sent Events response fed by stream; stream is stolen and
    destroyed when the response ends (or the client goes). id_field: emit
    "id: <cursor>" lines for LOG events (resumable with Last-Event-ID). */
void kb_http_reply_stream(kb_http_req_t *req, kb_stream_t *stream, bool id_field);

/*  The request log line for a finished request (status 0: no response). */
void kb_http_log_request(kb_http_req_t *req, enum MHD_RequestTerminationCode toe);

#endif
