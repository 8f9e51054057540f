/*  kb_wsmsg.h - the kernel websocket codec: the payloads of Jupyter
    Server's /api/kernels/{id}/channels <-> kernel messages (kb_msg_t).

    What it is for: reading what a websocket client (Jupyter Server's
    GatewayClient, @jupyterlab/services, VS Code) sends into a checked
    kb_msg_t and its channel, and writing a kernel's message for such a
    client, in either framing Jupyter Server speaks:

    legacy (no subprotocol): a text frame holding one JSON object
        {"header", "msg_id", "msg_type", "parent_header", "metadata",
         "content", "buffers": [], "channel"}
    or, when the message has buffers, a binary frame:
        u32 n | u32 offset[n] | JSON (as above, without "buffers") |
        buffer 1 | ... | buffer n-1
    with n = 1 + buffers and big-endian offsets from the frame's start;
    offset[0] = 4 * (n + 1), and the last part runs to the frame's end.

    v1.kernel.websocket.jupyter.org: always a binary frame:
        u64 n | u64 offset[n] | channel | header | parent_header |
        metadata | content | buffer 0 | ...
    with n = 6 + buffers and little-endian offsets from the frame's start;
    offset[0] = 8 * (n + 1), part i runs from offset[i] to offset[i + 1],
    and offset[n - 1] is the frame's size.

    What it is not for: the websocket framing itself (opcodes, masking,
    fragments: wslay, in the server layer), sockets, the clock or ids: like
    kb_wire it is a function of the bytes it is given, with no globals and
    no state. Signing is kb_wire's: a client's message becomes the kernel's
    signed frames with kb_wire_encode_msg on the kernel's own codec, so
    nothing a client sends reaches a kernel unsigned, and its header
    (msg_id, session) is kept so that replies find their way back. */
#ifndef KB_WSMSG_H_INCLUDED
#define KB_WSMSG_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

#include "util/kb_buf.h"
#include "wire/kb_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/*  The subprotocol a client offers in Sec-WebSocket-Protocol. */
#define KB_WSMSG_V1_SUBPROTOCOL "v1.kernel.websocket.jupyter.org"

typedef enum {
    KB_WSMSG_LEGACY = 0, /* no subprotocol: JSON text, or the legacy binary format */
    KB_WSMSG_V1 = 1      /* v1.kernel.websocket.jupyter.org: binary frames only */
} kb_wsmsg_protocol_t;

typedef enum {
    KB_WSMSG_SHELL = 0,
    KB_WSMSG_CONTROL = 1,
    KB_WSMSG_STDIN = 2,
    KB_WSMSG_IOPUB = 3 /* kernel -> client only */
} kb_wsmsg_channel_t;

typedef enum {
    KB_WSMSG_OK = 0,
    KB_WSMSG_MALFORMED = -1,   /* not a well-formed message in the framing */
    KB_WSMSG_BAD_CHANNEL = -2, /* well formed, for a channel a client may not send on */
    KB_WSMSG_TOO_LARGE = -3    /* over the limits (or, encoding, the framing's) */
} kb_wsmsg_status_t;

/*  Hard limits applied by kb_wsmsg_parse. A field left 0 takes its default. */
typedef struct {
    size_t max_buffers; /* binary buffers after content; default 1018, so that a
                           message fits kb_wire's default of 1024 frames */
    size_t max_bytes;   /* the whole payload; default 256 MiB */
} kb_wsmsg_limits_t;

/*  Parse one payload a client sent: data (borrowed; NULL allowed when size
    is 0) is a text frame when binary is false, else a binary frame, in the
    framing of protocol (a text frame is malformed under v1). limits is
    borrowed, NULL for the defaults.

    The parts are checked as kb_wire_decode checks a kernel's (through
    kb_wire_load_object and kb_wire_msg_new: header, parent_header,
    metadata and content JSON objects, msg_id and msg_type non-empty
    strings). Two leniencies, for what clients send: an empty (v1) or
    absent or null (legacy) parent_header or metadata is {}; and a legacy
    message without "channel" is for shell, as Jupyter Server takes it.
    A legacy JSON's top-level msg_id, msg_type and buffers are copies (or,
    in a text frame, placeholders) and are ignored. Offsets are checked
    before anything is read: a bounded count, the first one right after
    the table, never decreasing, within the payload, and (v1) the last one
    the payload's end.

    On KB_WSMSG_OK *msg_out is a new message (no identities; buffers
    copied out of data) and *channel_out its channel; the caller owns the
    message. On failure *msg_out is NULL and err (if not NULL) holds a
    short reason, e.g. "offset 3 (12) is before offset 2 (40)", "header
    lacks msg_id (a non-empty string)", "channel \"iopub\" is not shell,
    control or stdin" (KB_WSMSG_BAD_CHANNEL, which a server may log and
    drop as Jupyter Server does, rather than close the connection). */
kb_wsmsg_status_t kb_wsmsg_parse(kb_wsmsg_protocol_t protocol, bool binary, const void *data,
                                 size_t size, const kb_wsmsg_limits_t *limits,
                                 kb_wsmsg_channel_t *channel_out, kb_msg_t **msg_out,
                                 kb_error_t *err);

/*  Write the payload that carries msg (borrowed: a kernel's message from
    kb_wire_decode, or one of kb_wsmsg_status_new) on channel to a client:
    under KB_WSMSG_LEGACY the JSON text when msg has no buffers and the
    legacy binary format when it has; under KB_WSMSG_V1 the v1 binary
    format. A stream message left unparsed by kb_wire_set_lazy_streams is
    written with its raw content bytes. The payload replaces the contents
    of out (the caller's buffer, reused from one message to the next so
    that the hot path allocates nothing once it has grown; its cap is
    respected); *binary_out (may be NULL) says which websocket opcode to
    send it with. One pass, O(size of the message): the JSON parts are
    dumped compactly straight into out and the offsets filled in after.
    Returns KB_WSMSG_OK; KB_WSMSG_TOO_LARGE when out's cap is reached or
    (legacy binary) the payload would pass 4 GiB, which its 32-bit offsets
    cannot address; KB_WSMSG_MALFORMED when out of memory. On failure out
    is left empty and err (if not NULL) says why. */
kb_wsmsg_status_t kb_wsmsg_encode(kb_wsmsg_protocol_t protocol, kb_wsmsg_channel_t channel,
                                  const kb_msg_t *msg, kb_buf_t *out, bool *binary_out,
                                  kb_error_t *err);

/*  The status message Jupyter Server itself sends on iopub when a kernel
    restarts ("restarting") or cannot be restarted ("dead"), as if the
    kernel had sent it: header {msg_id, msg_type: "status", username,
    session, date, version: "5.3"}, parent_header and metadata {}, content
    {"execution_state": execution_state}. It is the daemon's message, not
    the kernel's, so nothing signs it; kb_wsmsg_encode it on
    KB_WSMSG_IOPUB. The codec keeps no clock and draws no ids: session (the
    websocket's session id), msg_id (unique, e.g. a UUID), date (ISO 8601)
    and username (NULL: "kernelbridge") come from the caller, all borrowed.
    Returns a new message the caller owns, or NULL (out of memory, or a
    string that is not UTF-8 or empty where msg_id is) with a reason in
    err. */
kb_msg_t *kb_wsmsg_status_new(const char *session, const char *msg_id, const char *date,
                              const char *username, const char *execution_state, kb_error_t *err);

/*  The protocol to answer a client that offered the comma-separated
    subprotocols in offered (borrowed; the Sec-WebSocket-Protocol header,
    NULL when absent): KB_WSMSG_V1 when it offers
    KB_WSMSG_V1_SUBPROTOCOL (the server then echoes that name), else
    KB_WSMSG_LEGACY (the server selects no subprotocol), as Jupyter
    Server chooses by default. */
kb_wsmsg_protocol_t kb_wsmsg_select_protocol(const char *offered);

/*  "shell", "control", "stdin", "iopub". Static string. */
const char *kb_wsmsg_channel_name(kb_wsmsg_channel_t channel);

/*  "ok", "malformed", "bad channel", "too large". Static string. */
const char *kb_wsmsg_status_str(kb_wsmsg_status_t status);

#ifdef __cplusplus
}
#endif

#endif
