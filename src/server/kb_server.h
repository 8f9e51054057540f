/*  kb_server.h - the HTTP face of kernelbridge (SPEC section 5): a
    libmicrohttpd daemon whose routes parse requests, call the kb_service_*
    functions and render the JSON they return. It holds no service state of
    its own; contexts, runs and process records live in the service.

    Threading: one thread per connection (MHD), so a route may block in a
    service call or on a stream for as long as the run takes.

    Shutdown, in this order: kb_server_drain (stop accepting, answer every new
    request with 503 and make no new service call), kb_service_destroy (ends
    runs in progress, whose clients still get their result), then
    kb_server_destroy (lets responses in flight finish, bounded, then stops).
*/
#ifndef KB_SERVER_H_INCLUDED
#define KB_SERVER_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

#include "kernelbridge/kb_error.h"
#include "kernelbridge/kb_service.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kb_server kb_server_t;

typedef enum {
    KB_LOG_TEXT = 0, /* "2025-01-01T00:00:00.000Z GET /health 200 0.1ms" */
    KB_LOG_JSON,     /* one JSON object per line */
} kb_log_format_t;

/*  Limits of the tokens the server accepts. */
#define KB_SERVER_TOKEN_MAX 512

/*  Which HTTP API a server speaks. */
typedef enum {
    KB_API_NATIVE = 0, /* SPEC section 5 */
    KB_API_E2B,        /* E2B's code-interpreter server (src/server/kb_e2b.h) */
    KB_API_METRICS,    /* GET /metrics and GET /health alone (--metrics-listen) */
} kb_server_api_t;

/*  Settings of one server. Zero / NULL fields take the documented default. */
typedef struct {
    const char *host;            /* NULL: "127.0.0.1"; IPv4, IPv6 or a name */
    unsigned port;               /* 0: an ephemeral port (see kb_server_port) */
    const char *token;           /* NULL or "": no auth; else Bearer token, borrowed
                                    (the server keeps its own copy) */
    bool insecure;               /* allow a non-loopback host without a token */
    size_t max_body;             /* request body limit; 0 = 16 MiB */
    unsigned max_connections;    /* 0 = 256 */
    unsigned max_per_address;    /* connections of one client address; 0 = half the above */
    unsigned reserve;            /* more, for GET /health and /metrics only; 0 = 16 */
    double header_timeout;       /* seconds to send a request head; 0 = 10 */
    unsigned connection_timeout; /* idle seconds before a connection is closed; 0 = 60 */
    unsigned sse_keepalive_ms;   /* comment line on idle streams; 0 = 15000 */
    kb_log_format_t log_format;  /* request log lines on stderr */
    kb_server_api_t api;         /* the routes served; errors are plain text for E2B */
    const char *const *mcp_allow_origins; /* NULL-terminated Origins /mcp takes beyond
                                             loopback ones ("*": any); borrowed */
    size_t mcp_max_text;                  /* text of an MCP call's content; 0 = 1 MiB */
} kb_server_config_t;

/*  Check a configuration without starting anything: the host resolves, and
    a non-loopback host has a token unless insecure. Returns 0, or -1 with
    err set (BAD_REQUEST with a message for the operator). */
int kb_server_check_config(const kb_server_config_t *config, kb_error_t *err);

/*  Start listening and serving. service is borrowed and must outlive every
    request (see the shutdown order above). Returns NULL with err set when
    the configuration is refused (BAD_REQUEST) or the socket cannot be bound
    (UNAVAILABLE). Caller owns the result. */
kb_server_t *kb_server_new(kb_service_t *service, const kb_server_config_t *config,
                           kb_error_t *err);

/*  The TCP port the server listens on (the bound one when 0 was asked). */
int kb_server_port(kb_server_t *self);

/*  The base URL, "http://127.0.0.1:8899" or "http://[::1]:8899". Borrowed,
    valid until destroy. */
const char *kb_server_url(kb_server_t *self);

/*  Stop accepting connections; requests that arrive from now on get 503
    UNAVAILABLE and never reach the service. Requests already in a service
    call carry on. Idempotent. */
void kb_server_drain(kb_server_t *self);

/*  Drain, wait (bounded) for responses in flight to be sent, close every
    connection and free. Safe on NULL; sets *self_p to NULL. */
void kb_server_destroy(kb_server_t **self_p);

/*  Write one log line to stderr in the given format: level is "info",
    "warn" or "error". Thread-safe, one write per line. */
void kb_server_log(kb_log_format_t format, const char *level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#endif
