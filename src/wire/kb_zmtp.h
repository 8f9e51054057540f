/*  kb_zmtp.h - one connecting ZeroMQ socket spoken on the engine's own
    loop: ZMTP 3.0 with the NULL mechanism (RFC 23 and 37), over TCP or a
    Unix socket, as a DEALER or a SUB to a kernel's ROUTER or PUB.

    Why not libzmq: a libzmq socket hands every message across its I/O
    thread, a wake-up of that thread and one of the engine's per message
    each way (docs/PERFORMANCE.md, "Wake-ups"). Here the engine reads the
    kernel's TCP connection itself: one wake-up per burst of messages, and
    a send is a write(2) from the engine's thread.

    What a libzmq connecting socket does and this does too: it connects
    when the peer is not yet bound and again after the connection is lost
    (every 100 ms, libzmq's ZMQ_RECONNECT_IVL), and queues what is sent
    until the connection is open; a DEALER says its routing id (ZMQ_IDENTITY)
    in its READY command; a SUB subscribes to everything; a frame larger
    than max_frame (ZMQ_MAXMSGSIZE) drops the connection before its body is
    read, and so does anything that is not ZMTP 3 with NULL, or a peer of a
    socket type that does not go with ours. What it does not do: ZMTP 1.0
    and 2.0 peers (libzmq before 4.0), CURVE and PLAIN, binding, several
    peers.

    Messages are given whole to the message callback, their frames pointing
    into the read buffer (valid during the call only). Reading happens on
    the loop, at most KB_ZMTP_READ_BUDGET bytes per turn (other watches get
    theirs), and can be stopped (kb_zmtp_set_reading): what the peer sends
    then waits in the TCP connection and, past it, in the peer's socket.

    Callbacks may send, stop reading or destroy the socket. Not thread-safe:
    the loop's thread only. */
#ifndef KB_ZMTP_H_INCLUDED
#define KB_ZMTP_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/kb_loop.h"
#include "wire/kb_wire.h"

/*  Bytes read from one connection per loop turn, at most. */
#define KB_ZMTP_READ_BUDGET (1u << 20)
/*  Bytes queued to send, at most (a send beyond fails). */
#define KB_ZMTP_SEND_LIMIT ((size_t)1 << 30)
/*  Milliseconds between a refused or lost connection and the next try. */
#define KB_ZMTP_RECONNECT_MS 100

typedef enum { KB_ZMTP_DEALER, KB_ZMTP_SUB } kb_zmtp_type_t;

/*  Why a connection was dropped (it is made again by itself). */
typedef enum {
    KB_ZMTP_CLOSED,    /* the peer closed it, or it failed */
    KB_ZMTP_TOO_LARGE, /* a frame over max_frame */
    KB_ZMTP_PROTOCOL,  /* not ZMTP 3 with NULL, a bad frame, a socket type that does not go */
} kb_zmtp_drop_t;

typedef struct kb_zmtp kb_zmtp_t;

typedef struct {
    /* a whole message; frames valid during the call only. count is at
       most max_frames: a message with more is dropped (too_many) */
    void (*message)(kb_zmtp_t *zmtp, const kb_frame_t *frames, size_t count, void *arg);
    /* a message of more than max_frames frames was read and dropped */
    void (*too_many)(kb_zmtp_t *zmtp, void *arg);
    /* the connection was dropped; may be NULL */
    void (*dropped)(kb_zmtp_t *zmtp, kb_zmtp_drop_t why, void *arg);
    /* the handshake ended: messages flow; may be NULL */
    void (*opened)(kb_zmtp_t *zmtp, void *arg);
    /* a turn's reading ended with the connection empty and every whole
       message given; may be NULL */
    void (*drained)(kb_zmtp_t *zmtp, void *arg);
} kb_zmtp_callbacks_t;

typedef struct {
    kb_zmtp_type_t type;
    const char *identity; /* a DEALER's routing id, or NULL; at most 255 bytes */
    uint64_t max_frame;   /* 0: no limit */
    size_t max_frames;    /* at most KB_WIRE_MAX_FRAMES; 0: KB_WIRE_MAX_FRAMES */
} kb_zmtp_opts_t;

/*  A socket that connects to endpoint ("tcp://HOST:PORT" with an IPv4
    address or a name looked up as IPv4, "tcp://[IPv6]:PORT", or
    "ipc://PATH") now and again until it is destroyed. NULL with errno: EINVAL (an endpoint it
   cannot read), ENOMEM. */
kb_zmtp_t *kb_zmtp_new(kb_loop_t *loop, const char *endpoint, const kb_zmtp_opts_t *opts,
                       const kb_zmtp_callbacks_t *callbacks, void *arg);

/*  Close it and free it (in a callback of its own: at the callback's end).
    Safe on NULL; sets *self_p NULL. */
void kb_zmtp_destroy(kb_zmtp_t **self_p);

/*  Queue one message of count frames and write what the connection takes
    now. 0, or -1 with errno: ENOMEM, ENOBUFS (KB_ZMTP_SEND_LIMIT queued),
    EINVAL (count 0). */
int kb_zmtp_send(kb_zmtp_t *self, const kb_frame_t *frames, size_t count);

/*  Stop reading (false) or read again (true). It reads when made. */
void kb_zmtp_set_reading(kb_zmtp_t *self, bool on);

/*  The connection is open (handshake done). */
bool kb_zmtp_open(const kb_zmtp_t *self);

/*  Bytes read and not yet given as whole messages. */
size_t kb_zmtp_unread(const kb_zmtp_t *self);

/*  Times the handshake ended (1 after the first connection). */
uint64_t kb_zmtp_opens(const kb_zmtp_t *self);

#endif
