/*  kb_cli_http.h - the CLI's HTTP client: requests to a running daemon
    (GET, and POST or DELETE with a JSON body), answered with JSON or a
    Server-Sent Events stream. */
#ifndef KB_CLI_HTTP_H_INCLUDED
#define KB_CLI_HTTP_H_INCLUDED

#include <jansson.h>
#include <stddef.h>

#include "util/kb_buf.h"

/*  A daemon that does not accept the connection within this is not there. */
#define KB_CLI_CONNECT_MS 5000
/*  A plain answer (a listing), and the head of a stream, come within this,
    or the daemon is stuck. A stream's events have no such bound: its
    keep-alive period is the daemon's to choose, and a daemon that goes
    away closes the socket. */
#define KB_CLI_ANSWER_MS 30000

/*  Where a daemon is, and its token. */
typedef struct {
    const char *url; /* borrowed: as given, for messages */
    char host[256];
    char port[8];
    const char *token; /* borrowed; NULL: none */
} kb_cli_daemon_t;

/*  Fill self from an http:// URL (the scheme may be left out; an IPv6
    address in brackets; port 80 when none), which it borrows. 0, or -1
    with err. */
int kb_cli_daemon_init(kb_cli_daemon_t *self, const char *url, kb_error_t *err);

/*  GET path (escaped already) as JSON. The answer (caller owns it), or NULL
    with err: the daemon unreachable, its error answer as "CODE: message",
    or an answer that is not JSON. */
json_t *kb_cli_get_json(const kb_cli_daemon_t *daemon, const char *path, kb_error_t *err);

/*  method path (escaped already) with body as its JSON body (borrowed;
    NULL: none). The answer (caller owns it; json_null() for a 204), or
    NULL with err as kb_cli_get_json's. */
json_t *kb_cli_request_json(const kb_cli_daemon_t *daemon, const char *method, const char *path,
                            json_t *body, kb_error_t *err);

/*  One event of a stream (data lines joined by \n; borrowed). Returns 1
    when it was the last one wanted, 0 to go on, -1 to give up (with err). */
typedef int(kb_cli_event_fn)(const char *event, const char *data, void *arg, kb_error_t *err);

/*  GET path as Server-Sent Events, calling on_event for each (comments are
    skipped) until it returns 1: then 0. -1 with err when the daemon is
    unreachable or answers an error, or the stream ends first. */
int kb_cli_get_events(const kb_cli_daemon_t *daemon, const char *path, kb_cli_event_fn *on_event,
                      void *arg, kb_error_t *err);

/*  An answer its caller reads itself: status, head fields, body. */
typedef struct kb_cli_reply kb_cli_reply_t;

/*  Send method path (escaped already) with the header lines headers (each
    "Name: value\r\n"; NULL: none) and body (len bytes of JSON text, NULL:
    none), and read the answer's head, waiting as long as it takes (a
    call may run long before its answer). Caller owns the result
    (kb_cli_reply_close); NULL with err when the daemon is unreachable. */
kb_cli_reply_t *kb_cli_reply_open(const kb_cli_daemon_t *daemon, const char *method,
                                  const char *path, const char *accept, const char *headers,
                                  const char *body, size_t len, kb_error_t *err);

/*  The answer's status, and the value of its head field name (borrowed;
    NULL when absent). */
int kb_cli_reply_status(const kb_cli_reply_t *reply);
const char *kb_cli_reply_header(const kb_cli_reply_t *reply, const char *name);

/*  The rest of the body appended to out (bounded by out's cap). 0, or -1
    with err. */
int kb_cli_reply_body(kb_cli_reply_t *reply, kb_buf_t *out, kb_error_t *err);

/*  The body as Server-Sent Events, on_event called for each (comments
    skipped) until the body ends (0) or on_event returns 1 (0) or -1. -1
    with err when reading fails. */
int kb_cli_reply_events(kb_cli_reply_t *reply, kb_cli_event_fn *on_event, void *arg,
                        kb_error_t *err);

void kb_cli_reply_close(kb_cli_reply_t **reply_p);

/*  Append text escaped for a URL's path or query: anything but RFC 3986's
    unreserved characters as %XX. */
void kb_cli_url_escape(kb_buf_t *out, const char *text);

#endif
