/*  kb_wire.h - the Jupyter messaging wire codec: ZeroMQ frames <-> one
    message, with HMAC signing, signature checking and replay rejection.

    What it is for: turning the multipart frames of the Jupyter protocol
    (version 5.x) into a typed kb_msg_t and back, and refusing anything
    malformed, mis-signed, replayed or oversized with a precise reason.

    What it is not for: I/O. The codec never touches a socket, the clock or
    randomness and keeps no globals, like hiredis's read.c: it is a function
    of the bytes it is given plus the state of one kb_wire_t (the key, a
    message counter and the recent signatures). A kb_wire_t is not
    thread-safe; give each thread (each kernel connection) its own.

    Wire format, per the Jupyter messaging spec:

        [identity ...] "<IDS|MSG>" signature header parent_header metadata
        content [buffer ...]

    signature is the lowercase hex HMAC of header, parent_header, metadata
    and content concatenated in that order; it is empty when the key is. */
#ifndef KB_WIRE_H_INCLUDED
#define KB_WIRE_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "kernelbridge/kb_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KB_WIRE_DELIMITER "<IDS|MSG>"
#define KB_WIRE_PROTOCOL_VERSION "5.3"

/*  One ZeroMQ frame. Frames the codec hands out always have a non-NULL
    data, also when size is 0. */
typedef struct {
    unsigned char *data;
    size_t size;
} kb_frame_t;

/*  Free each frame's data and then the array itself. Safe on NULL. */
void kb_frames_free(kb_frame_t *frames, size_t count);

/*  One decoded message. Everything in it is owned by the message. */
typedef struct {
    kb_frame_t *identities; /* routing ids before <IDS|MSG>, owned */
    size_t identities_len;
    /* header, parent_header and metadata: read them with kb_msg_header(),
       kb_msg_parent_header() and kb_msg_metadata(). A decoded message
       keeps their bytes (checked well formed) and parses each on first
       use, which most messages never need; these are NULL until then.
       Owned. */
    json_t *header_json;
    json_t *parent_json;
    json_t *metadata_json;
    json_t *content;     /* owned, always a JSON object */
    kb_frame_t *buffers; /* extra buffers after content, owned */
    size_t buffers_len;
    /* Never NULL: msg_type and msg_id are validated non-empty strings
       without NUL; parent_msg_id is "" when parent_header has none (its
       msg_id absent or null). date is the header's "date" when that is a
       string (up to a NUL in it), else NULL. They point into ids. */
    const char *msg_type;
    const char *msg_id;
    const char *parent_msg_id;
    const char *date;
    /* With kb_wire_set_lazy_streams, a stream message's content frame is
       not parsed: content is {} and raw_content the frame's bytes, borrowed
       from the frames given to kb_wire_decode (valid only while those are).
       Otherwise raw_content.data is NULL. */
    kb_frame_t raw_content;
    /* Private: the bytes of header, parent_header and metadata (one block,
       raw_parts[0].data's; NULL for a message made by kb_wire_msg_new),
       and the decoded strings above. */
    kb_frame_t raw_parts[3];
    char *ids;
} kb_msg_t;

/*  The message's header, parent_header or metadata as a JSON object,
    parsed on first use (the message keeps it: the same object each time;
    not thread-safe, as the message is not); borrowed, valid while the
    message is. NULL only when out of memory. */
json_t *kb_msg_header(const kb_msg_t *msg);
json_t *kb_msg_parent_header(const kb_msg_t *msg);
json_t *kb_msg_metadata(const kb_msg_t *msg);

/*  Destroy a message and set the caller's pointer to NULL. Safe on NULL. */
void kb_msg_destroy(kb_msg_t **self_p);

typedef enum {
    KB_WIRE_OK = 0,
    KB_WIRE_MALFORMED = -1,     /* not a well-formed Jupyter message */
    KB_WIRE_BAD_SIGNATURE = -2, /* unsigned, or the HMAC does not match */
    KB_WIRE_REPLAYED = -3,      /* a valid signature seen before */
    KB_WIRE_TOO_LARGE = -4      /* frame count or sizes over the limits */
} kb_wire_status_t;

/*  Frames of one message (identities + 6 + buffers), at most: the one limit
    on frames, kept by the codec and by whoever reads a message's frames off
    a socket (a longer message is dropped and counted as too_many_parts). */
#define KB_WIRE_MAX_FRAMES 1024

/*  Hard limits applied by kb_wire_decode. A field left 0 takes its default. */
typedef struct {
    size_t max_frames;      /* default and most KB_WIRE_MAX_FRAMES */
    size_t max_frame_bytes; /* any single frame; default 256 MiB */
    size_t max_total_bytes; /* all frames together; default 512 MiB */
    size_t replay_window;   /* signatures remembered for replay rejection,
                               oldest forgotten first; default 65536 */
} kb_wire_limits_t;

typedef struct kb_wire kb_wire_t;

/*  Create a codec. scheme is "hmac-<digest>" with any digest OpenSSL knows
    ("hmac-sha256", "hmac-sha512", "hmac-sha1", "hmac-md5", "hmac-sha3_256",
    "hmac-blake2b", ...); NULL means "hmac-sha256". The key (borrowed, copied)
    may hold any bytes; key_len 0 means unsigned messages: the signature frame
    is left empty when encoding and is neither checked nor remembered when
    decoding. session and username (borrowed, copied; username NULL means
    "kernelbridge") go into the header of each encoded message; session must
    not be NULL. Returns NULL and a reason in err (if not NULL) on an unknown
    scheme or invalid UTF-8. Caller owns the result. */
kb_wire_t *kb_wire_new(const char *scheme, const unsigned char *key, size_t key_len,
                       const char *session, const char *username, kb_error_t *err);

/*  Destroy a codec and set the caller's pointer to NULL. Safe on NULL. */
void kb_wire_destroy(kb_wire_t **self_p);

/*  Replace the limits (borrowed, copied; NULL restores every default).
    Shrinking replay_window forgets the oldest signatures beyond it. */
void kb_wire_set_limits(kb_wire_t *self, const kb_wire_limits_t *limits);

/*  Leave the content of "stream" messages unparsed (see kb_msg_t's
    raw_content): the caller scans it, and then checks it is well formed. */
void kb_wire_set_lazy_streams(kb_wire_t *self, bool lazy);

/*  Decode one multipart message. frames are borrowed (a frame of size 0 may
    have NULL data). On KB_WIRE_OK *msg_out is a new message the caller owns.
    On any failure *msg_out is NULL, the failure is counted, and err (if not
    NULL) says precisely why, e.g. "no <IDS|MSG> delimiter", "signature
    mismatch", "header is not a JSON object: ...", "header lacks msg_type",
    "replayed signature", "frame 3 is 300000000 bytes, limit 268435456".
    The signature is checked (in constant time) before any JSON is parsed;
    a signature is remembered only once its whole message has been accepted.
    header, parent_header and metadata are checked and their ids read by
    kb_scan_fields (no tree: see kb_msg_header), content is parsed; what
    is accepted and refused, and why, is as if all four were parsed.
    Invalid UTF-8 inside the JSON frames is replaced by U+FFFD, as
    jupyter_client does. Integers beyond 64 bits make a frame malformed. */
kb_wire_status_t kb_wire_decode(kb_wire_t *self, const kb_frame_t *frames, size_t count,
                                kb_msg_t **msg_out, kb_error_t *err);

/*  Encode one message: identities (borrowed, may be NULL/0), "<IDS|MSG>",
    signature, header, parent_header, metadata, content. The header is
    {msg_id, msg_type, username, session, date, version: "5.3"} where msg_id
    is "<session>_<n>" with n counting up per codec, and date is the caller's
    ISO 8601 string (borrowed). content (a JSON object) and metadata (a JSON
    object, NULL means {}) are stolen, even on failure; parent_header is
    borrowed (NULL means {}). JSON is dumped compactly. On success returns 0,
    *frames_out / *count_out are owned by the caller and the msg_id is copied
    into msg_id_out when that is not NULL. Returns -1 on failure (a NULL or
    non-object content, a msg_id_out too small, out of memory); then
    kb_wire_errstr says why. */
int kb_wire_encode(kb_wire_t *self, const char *msg_type, json_t *content,
                   const json_t *parent_header, json_t *metadata, const char *date,
                   const kb_frame_t *identities, size_t identities_len, kb_frame_t **frames_out,
                   size_t *count_out, char *msg_id_out, size_t msg_id_size);

/*  Encode a whole message as it stands, for forwarding one that was made
    elsewhere (a websocket client's request, see kb_wsmsg.h): its header,
    parent_header, metadata and content are dumped compactly as they are
    (msg_id, session and date are the sender's, not this codec's; the
    msg_id counter is not used), raw_content's bytes stand for content
    when set, and identities and buffers follow them; the frames are
    signed with this codec's key. msg is borrowed; its four parts must be
    JSON objects (as kb_wire_decode and kb_wire_msg_new make them). On
    success returns 0 and *frames_out / *count_out are owned by the
    caller; -1 when out of memory, and kb_wire_errstr says why. */
int kb_wire_encode_msg(kb_wire_t *self, const kb_msg_t *msg, kb_frame_t **frames_out,
                       size_t *count_out);

/*  Parse size bytes of JSON that must hold one object: a message part
    named name ("header", "content", ...), with the checks and the UTF-8
    repair of kb_wire_decode. data is borrowed (NULL allowed when size is
    0). Returns a new reference the caller owns, or NULL with a reason in
    err (if not NULL), e.g. "header is not a JSON object: it is an array". */
json_t *kb_wire_load_object(const void *data, size_t size, const char *name, kb_error_t *err);

/*  Make a message of four JSON objects, with the checks kb_wire_decode
    applies to a decoded one: header, parent_header, metadata and content
    objects, msg_id and msg_type non-empty strings without NUL, a
    parent_header msg_id (when present and not null) a string. For messages
    that do not come from ZeroMQ frames (the websocket framings of
    kb_wsmsg.h). The four are stolen, even on failure. On KB_WIRE_OK
    *msg_out is a new message without identities and buffers (the caller
    may attach buffers it allocated: they are freed with the message), which
    the caller owns. Otherwise KB_WIRE_MALFORMED, *msg_out NULL and the
    reason in err (if not NULL). No codec: nothing is counted. */
kb_wire_status_t kb_wire_msg_new(json_t *header, json_t *parent_header, json_t *metadata,
                                 json_t *content, kb_msg_t **msg_out, kb_error_t *err);

/*  Number of messages kb_wire_decode rejected with status since the codec
    was created (for KB_WIRE_OK: the number it accepted). */
size_t kb_wire_rejected(const kb_wire_t *self, kb_wire_status_t status);

/*  The reason of the last failure of this codec (decode or encode), "" when
    none yet. Borrowed; valid until the next call on the codec. */
const char *kb_wire_errstr(const kb_wire_t *self);

/*  A short constant name for a status: "ok", "malformed", "bad signature",
    "replayed", "too large". */
const char *kb_wire_status_str(kb_wire_status_t status);

#ifdef __cplusplus
}
#endif

#endif
