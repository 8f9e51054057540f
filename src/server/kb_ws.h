/*  kb_ws.h - a websocket (RFC 6455) opened from a libmicrohttpd access
    handler: the handshake, then wslay's event API on the upgraded socket.
    Knows no Jupyter message and no route.

    Thread:  each websocket runs on its connection's libmicrohttpd thread
             (thread-per-connection with MHD_ALLOW_UPGRADE, asserted);
             kb_ws_send/close/ref/unref may be called from any thread and
             never wait for the client.
    Owner:   reference counted; kb_ws_accept gives the request's reference
             (back with kb_ws_request_done), the open websocket holds one.
    End:     exactly one on_close per accepted websocket, whatever ends it
             (close handshake, EOF, ping timeout, 1009, 1008, 1001, 1006).
    Not for: framing (wslay), HTTP/2, permessage-deflate. */
#ifndef KB_WS_H_INCLUDED
#define KB_WS_H_INCLUDED

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kb_ws kb_ws_t;
typedef struct kb_ws_group kb_ws_group_t;

/*  Close codes of RFC 6455 section 7.4.1 that kb_ws uses. */
#define KB_WS_NORMAL 1000
#define KB_WS_GOING_AWAY 1001
#define KB_WS_POLICY 1008
#define KB_WS_TOO_BIG 1009
#define KB_WS_ABNORMAL 1006 /* never on the wire: no close frame was exchanged */

/*  Settings of one websocket. Zero / NULL fields take the default. */
typedef struct {
    const char *const *protocols; /* NULL-terminated subprotocols we speak, preferred
                                     first; borrowed for the call of kb_ws_accept */
    size_t max_message;           /* largest incoming message; 0 = 64 MiB; over: 1009 */
    size_t max_queued;            /* outgoing bytes not yet written; 0 = 64 MiB */
    unsigned ping_interval_ms;    /* a ping after this long; 0 = 30000 */
    unsigned pong_timeout_ms;     /* no frame this long after a ping: dropped; 0 = 30000 */
    unsigned close_timeout_ms;    /* wait for the answer to our close; 0 = 2000 */
} kb_ws_config_t;

/*  What the websocket tells its user, on its own thread. A callback may
    call kb_ws_send and kb_ws_close on its websocket, and may block (it
    holds up only this websocket). arg is the caller's, borrowed. */
typedef struct {
    /*  The websocket is up (after the 101). Optional. */
    void (*on_open)(kb_ws_t *ws, void *arg);
    /*  One whole message (fragments joined by wslay); data is borrowed for
        the call. Text messages are not checked for UTF-8 here. */
    void (*on_message)(kb_ws_t *ws, bool binary, const uint8_t *data, size_t len, void *arg);
    /*  The end, exactly once: code is the peer's close code when it closed
        first, ours when we did, KB_WS_ABNORMAL when no close frame was
        exchanged; reason is static or borrowed for the call. After it, no
        callback comes and arg is not used again. */
    void (*on_close)(kb_ws_t *ws, unsigned code, const char *reason, void *arg);
} kb_ws_handler_t;

/*  Counters of a group, read with kb_ws_group_stats. */
typedef struct {
    uint64_t opened; /* upgrades done */
    uint64_t closed; /* on_close calls */
    uint64_t messages_in, bytes_in;
    uint64_t messages_out, bytes_out; /* written to the socket's buffer */
    uint64_t closed_backpressure;     /* sender over max_queued (1008) */
    uint64_t closed_too_big;          /* peer's message over max_message (1009) */
    uint64_t closed_unresponsive;     /* no frame after a ping, or no answer to a close */
    uint64_t open;                    /* accepted and not yet ended */
} kb_ws_stats_t;

/*  What kb_ws_send returns. */
typedef enum {
    KB_WS_SENT = 0,      /* queued; the websocket's thread writes it */
    KB_WS_CLOSED = -1,   /* closing or closed: dropped */
    KB_WS_OVERFLOW = -2, /* over max_queued: dropped, and the websocket is being closed */
    KB_WS_NOMEM = -3,    /* no memory for a copy: dropped, the websocket goes on */
} kb_ws_send_status_t;

/*  A set of websockets that end together (a server's). Caller owns the
    result; NULL when out of memory. */
kb_ws_group_t *kb_ws_group_new(void);

/*  Ask every websocket of the group to close with code and reason (cut to
    122 bytes); those that have yet to upgrade close right after. Does not
    wait. Any thread. */
void kb_ws_group_close_all(kb_ws_group_t *self, unsigned code, const char *reason);

/*  Wait until no websocket of the group is left, at most timeout_ms.
    Returns true when none is left. A websocket asked to close ends within
    its close_timeout_ms, plus the time its callbacks take. */
bool kb_ws_group_wait(kb_ws_group_t *self, unsigned timeout_ms);

/*  Copy the group's counters. Any thread. */
void kb_ws_group_stats(kb_ws_group_t *self, kb_ws_stats_t *out);

/*  Close all with 1001 going away, wait until none is left, and free.
    Safe on NULL; sets *self_p to NULL. */
void kb_ws_group_destroy(kb_ws_group_t **self_p);

/*  From an access handler of a thread-per-connection daemon started with
    MHD_ALLOW_UPGRADE, once the request's headers are in: check the
    upgrade request (GET; Upgrade: websocket; Connection: upgrade;
    Sec-WebSocket-Version: 13; a Sec-WebSocket-Key of 16 bytes in base64),
    choose the first subprotocol the client offers that config->protocols
    lists (none: no Sec-WebSocket-Protocol, the legacy form) and queue the
    101 response. On a bad request, queues the plain-text error itself
    (405 with Allow: GET, 400, or 426 with Sec-WebSocket-Version: 13) and
    returns NULL; *status_out says which (500: no memory). group, handler
    and arg are borrowed and must outlive the websocket's on_close.
    Returns the request's reference (see Ownership), to be given to
    kb_ws_request_done when the request completes. */
kb_ws_t *kb_ws_accept(struct MHD_Connection *connection, const char *method,
                      const kb_ws_config_t *config, kb_ws_group_t *group,
                      const kb_ws_handler_t *handler, void *arg, unsigned *status_out);

/*  From the request-completed callback of the request that kb_ws_accept
    answered: gives back the request's reference. When the upgrade did
    not happen (the 101 could not be sent), on_close comes from here, with
    KB_WS_ABNORMAL. Safe on NULL; sets *ws_p to NULL. */
void kb_ws_request_done(kb_ws_t **ws_p);

/*  The subprotocol chosen, or NULL (legacy). Borrowed, valid while the
    caller holds a reference. */
const char *kb_ws_protocol(kb_ws_t *self);

/*  Queue one message (a copy of len bytes of data, borrowed), text or
    binary. Any thread; never blocks on the client. Over max_queued the
    message is dropped, the websocket is closed with 1008 (policy) if the
    close frame can still be written within close_timeout_ms, else cut,
    and KB_WS_OVERFLOW returned. */
kb_ws_send_status_t kb_ws_send(kb_ws_t *self, bool binary, const void *data, size_t len);

/*  Start the close handshake with code and reason (cut to 122 bytes);
    the first close asked wins. The messages queued before it are written
    first (within close_timeout_ms); nothing queued after it is taken.
    Any thread; does not wait. on_close follows on the websocket's
    thread. */
void kb_ws_close(kb_ws_t *self, unsigned code, const char *reason);

/*  Outgoing bytes queued and not yet written. Any thread. */
size_t kb_ws_queued(kb_ws_t *self);

/*  The most bytes ever queued at once (for checks of the bound). */
size_t kb_ws_queued_peak(kb_ws_t *self);

/*  Add a reference. Returns self. Any thread. */
kb_ws_t *kb_ws_ref(kb_ws_t *self);

/*  Drop a reference; the last one frees. Safe on NULL; sets *self_p to
    NULL. Any thread. */
void kb_ws_unref(kb_ws_t **self_p);

#ifdef __cplusplus
}
#endif

#endif
