/*  kb_mcp.h - kernelbridge as an MCP server (SPEC section 14), the part
    every transport shares: JSON-RPC messages in, JSON-RPC messages out,
    its sessions (the negotiated revision, the calls in flight) and its
    tools (kb_mcp_tools.c), each a call of the public C API
    (kernelbridge/kb_service.h), as the native routes make them.

    What it is not for: HTTP (kb_mcp_http.c: /mcp's POST, GET and DELETE,
    headers, Origin, SSE) and stdio (src/cli/kb_cli_mcp.c). It keeps no
    socket, prints nothing, and never blocks except in a tool's service
    call, for as long as that call takes. */
#ifndef KB_MCP_H_INCLUDED
#define KB_MCP_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "kernelbridge/kb_error.h"
#include "kernelbridge/kb_service.h"

/*  JSON-RPC's own error codes. */
#define KB_RPC_PARSE_ERROR (-32700)
#define KB_RPC_INVALID_REQUEST (-32600)
#define KB_RPC_METHOD_NOT_FOUND (-32601)
#define KB_RPC_INVALID_PARAMS (-32602)
#define KB_RPC_INTERNAL_ERROR (-32603)

/*  Text of a call's content, by default (a run's output past it is cut
    with a note naming get_process_logs). */
#define KB_MCP_MAX_TEXT_DEFAULT (1u << 20)
/*  Sessions at once; an initialize past them is refused (-32600). */
#define KB_MCP_SESSIONS_MAX 1024
/*  Longest Mcp-Session-Id we hand out (and accept). */
#define KB_MCP_SESSION_ID_MAX 64

typedef struct kb_mcp kb_mcp_t;
typedef struct kb_mcp_streams kb_mcp_streams_t;
typedef struct kb_mcp_session kb_mcp_session_t;

typedef struct {
    size_t max_text;                  /* 0: KB_MCP_MAX_TEXT_DEFAULT */
    const char *const *allow_origins; /* NULL-terminated, borrowed: Origins beyond loopback
                                         ones ("*": any); NULL: loopback alone */
    const char *server_name;          /* serverInfo.name; NULL: "kernelbridge" */
} kb_mcp_config_t;

/*  Messages a call sends before its answer (notifications/progress), on
    the call's thread; message stolen. */
typedef void(kb_mcp_send_fn)(void *arg, json_t *message);

/*  A new MCP server on service (borrowed; it must outlive the server).
    Caller owns the result (its bookkeeping is allocated or the process
    ends, kb_alloc.h). */
kb_mcp_t *kb_mcp_new(kb_service_t *service, const kb_mcp_config_t *config);

/*  Wait for the calls still running on other threads (their runs end when
    the service stops), then free. Safe on NULL; sets *self_p to NULL. */
void kb_mcp_destroy(kb_mcp_t **self_p);

/* ---- Messages ------------------------------------------------------------ */

/*  The JSON text data[0..len) (borrowed) as a message or a batch (an
    array), or NULL with *error set to the JSON-RPC error response to send
    (-32700, or -32600 for what is JSON but no message). Caller owns both. */
json_t *kb_mcp_parse(const char *data, size_t len, json_t **error);

/*  The message's method when it is a request (an id and a method), else
    NULL. Borrowed from message. */
const char *kb_mcp_request_method(const json_t *message);

/*  True when message is a tools/call whose _meta asks for progress. */
bool kb_mcp_wants_progress(const json_t *message);

/*  Handle one message (a request, a notification or a response; not a
    batch) of *session's client. An initialize makes a session and sets
    *session to it (the caller releases it); any other request needs one
    (-32600 without). send (may be NULL) gets the call's notifications.
    Returns the response (caller owns), or NULL when none is due. */
json_t *kb_mcp_handle(kb_mcp_t *self, kb_mcp_session_t **session, const json_t *message,
                      kb_mcp_send_fn *send, void *arg);

/*  Handle a batch (2025-03-26 allows them; later revisions refuse them
    with -32600): each message in turn. Returns the array of responses
    (caller owns), NULL when none is due. */
json_t *kb_mcp_handle_batch(kb_mcp_t *self, kb_mcp_session_t **session, const json_t *batch);

/*  A JSON-RPC error response: id borrowed (NULL: null), our code in
    data.code (KB_OK: none), data.field when field is not NULL. */
json_t *kb_mcp_error(const json_t *id, int rpc_code, kb_code_t code, const char *field,
                     const char *message);

/* ---- Sessions ------------------------------------------------------------ */

/*  The live session of id, with a reference the caller gives back with
    kb_mcp_session_release; NULL when unknown or ended. */
kb_mcp_session_t *kb_mcp_session_find(kb_mcp_t *self, const char *id);
void kb_mcp_session_release(kb_mcp_t *self, kb_mcp_session_t **session_p);

/*  End the session of id (HTTP DELETE): later requests naming it are
    refused. Its runs go on (their records stay). 0, or -1 when unknown. */
int kb_mcp_session_end(kb_mcp_t *self, const char *id);

/*  The sessions' resumable SSE streams (kb_mcp_stream.h); borrowed, as
    long as the server lives. */
kb_mcp_streams_t *kb_mcp_streams(kb_mcp_t *self);

/*  A session's id and negotiated revision; borrowed, valid while held. */
const char *kb_mcp_session_id(const kb_mcp_session_t *session);
const char *kb_mcp_session_version(const kb_mcp_session_t *session);
bool kb_mcp_session_ended(kb_mcp_t *self, const kb_mcp_session_t *session);

/*  True when version is a revision this server speaks. */
bool kb_mcp_version_supported(const char *version);

/*  True when origin (an Origin header's value) may call: a loopback one
    (http or https, localhost, 127.x, [::1], any port), or one the
    configuration names. */
bool kb_mcp_origin_allowed(const kb_mcp_t *self, const char *origin);

/*  Calls running on other threads now. */
unsigned kb_mcp_workers(kb_mcp_t *self);

/*  A call on another thread begins and ends (kb_mcp_destroy waits). */
void kb_mcp_worker_begin(kb_mcp_t *self);
void kb_mcp_worker_end(kb_mcp_t *self);

#endif
