/*  kb_ws_handshake.h - private to src/server: the websocket opening
    handshake (RFC 6455 section 4.2) checked on a libmicrohttpd request,
    for kb_ws.c. Not for the frames that follow (wslay's). */
#ifndef KB_WS_HANDSHAKE_H_INCLUDED
#define KB_WS_HANDSHAKE_H_INCLUDED

#include <microhttpd.h>

/*  Longest subprotocol name that can be chosen. */
#define KB_WS_PROTOCOL_MAX 128

/*  What a good upgrade request is answered with. */
typedef struct {
    char accept[29];                   /* Sec-WebSocket-Accept: base64(SHA-1(key GUID)) */
    char protocol[KB_WS_PROTOCOL_MAX]; /* the first offered that we speak, or "" */
    const char *error;                 /* why a request is refused; static text */
} kb_ws_handshake_t;

/*  Check an upgrade request: GET; Upgrade: websocket and Connection:
    upgrade (tokens of comma lists, in any case, over every header of the
    name); Sec-WebSocket-Version: 13; a Sec-WebSocket-Key of 16 bytes in
    base64. protocols (NULL-terminated, borrowed; may be NULL) are ours;
    the first of the client's Sec-WebSocket-Protocol values that is one of
    them is chosen. Returns 0 with out filled, or the status to refuse
    with (405, 400, 426; 500 when hashing failed) and out->error. */
unsigned kb_ws_handshake_check(struct MHD_Connection *connection, const char *method,
                               const char *const *protocols, kb_ws_handshake_t *out);

/*  Queue the plain-text refusal text (static) with status, and the header
    it needs (405: Allow: GET; 426: Sec-WebSocket-Version: 13). Returns
    the status queued, 500 when no response could be made. */
unsigned kb_ws_handshake_refuse(struct MHD_Connection *connection, unsigned status,
                                const char *text);

#endif
