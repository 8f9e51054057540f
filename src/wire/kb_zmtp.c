/*  kb_zmtp.c - a connecting ZMTP 3.0 socket (NULL mechanism) on the loop.
    See kb_zmtp.h.

    The greeting is 64 bytes: 0xFF, 8 bytes of padding, 0x7F, the version
    (3, 0), the mechanism name padded to 20 bytes, as-server (0) and 31
    bytes of filler. Then each side sends a READY command with its
    properties (Socket-Type, Identity). After it, frames: a flags byte
    (MORE 1, LONG 2, COMMAND 4), the size in 1 byte or, when LONG, 8 bytes
    in network order, the body. A SUB subscribes with a message of one
    frame: 1 and the prefix (ZMTP 3.0's form, which 3.1 peers still take).
    PING gets its PONG (ZMTP 3.1's heartbeat, for a peer that sends it
    anyway); other commands after READY are skipped. */
#include "wire/kb_zmtp.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define KB_ZMTP_GREETING 64
#define KB_ZMTP_MORE 1u
#define KB_ZMTP_LONG 2u
#define KB_ZMTP_COMMAND 4u
#define KB_ZMTP_FIRST_READ (8u << 10) /* a buffer when made */

typedef enum { S_WAITING, S_CONNECTING, S_HANDSHAKE, S_OPEN } s_state_t;

typedef struct {
    unsigned char *data;
    size_t len, at, cap; /* at: the first byte not yet consumed */
} s_bytes_t;

struct kb_zmtp {
    kb_loop_t *loop;
    kb_zmtp_opts_t opts;
    char identity[256];
    kb_zmtp_callbacks_t callbacks;
    void *arg;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    bool tcp;

    s_state_t state;
    int fd;
    kb_io_t io;
    kb_timer_t retry;
    bool greeted;     /* the peer's greeting was read */
    bool reading;     /* kb_zmtp_set_reading */
    bool watching;    /* the watch waits for input */
    bool writing;     /* the watch waits for output */
    s_bytes_t in;     /* read, not yet consumed */
    s_bytes_t out;    /* this connection's bytes, not yet written */
    s_bytes_t queued; /* messages sent before the connection was open */
    uint64_t opens;

    int calling;  /* callbacks running */
    bool doomed;  /* destroyed inside one: freed when it returns */
    bool dropped; /* the connection went during a callback */
};

/* ---- byte queues ------------------------------------------------------------- */

static size_t s_pending(const s_bytes_t *b)
{
    return b->len - b->at;
}

/*  Room for more bytes at the end: consumed bytes go first, then it grows. */
static int s_reserve(s_bytes_t *b, size_t more)
{
    if (b->cap - b->len >= more)
        return 0;
    if (b->at > 0) {
        memmove(b->data, b->data + b->at, b->len - b->at);
        b->len -= b->at;
        b->at = 0;
        if (b->cap - b->len >= more)
            return 0;
    }
    size_t cap = b->cap ? b->cap : KB_ZMTP_FIRST_READ;
    while (cap - b->len < more) {
        if (cap > SIZE_MAX / 2) {
            errno = ENOMEM;
            return -1;
        }
        cap *= 2;
    }
    unsigned char *data = realloc(b->data, cap);
    if (!data)
        return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

static int s_put(s_bytes_t *b, const void *data, size_t size)
{
    if (size == 0)
        return 0;
    if (s_reserve(b, size) != 0)
        return -1;
    memcpy(b->data + b->len, data, size);
    b->len += size;
    return 0;
}

/*  Empty, its memory given back: an idle kernel's socket holds no buffer
    (one is made again, 8 KiB at first, by the next read or send). */
static void s_clear(s_bytes_t *b)
{
    free(b->data);
    *b = (s_bytes_t){ 0 };
}

static int s_put_frame(s_bytes_t *b, unsigned flags, const void *data, size_t size)
{
    unsigned char head[9];
    size_t n;
    if (size > 255) {
        head[0] = (unsigned char)(flags | KB_ZMTP_LONG);
        for (int i = 0; i < 8; i++)
            head[1 + i] = (unsigned char)((uint64_t)size >> (56 - 8 * i));
        n = 9;
    } else {
        head[0] = (unsigned char)flags;
        head[1] = (unsigned char)size;
        n = 2;
    }
    if (s_reserve(b, n + size) != 0)
        return -1;
    memcpy(b->data + b->len, head, n);
    if (size)
        memcpy(b->data + b->len + n, data, size);
    b->len += n + size;
    return 0;
}

/* ---- the endpoint ------------------------------------------------------------ */

static int s_parse_endpoint(kb_zmtp_t *self, const char *endpoint)
{
    if (strncmp(endpoint, "ipc://", 6) == 0) {
        const char *path = endpoint + 6;
        struct sockaddr_un *un = (struct sockaddr_un *)&self->addr;
        size_t len = strlen(path);
        if (len == 0 || len >= sizeof un->sun_path)
            return -1;
        un->sun_family = AF_UNIX;
        memcpy(un->sun_path, path, len + 1);
        self->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
        return 0;
    }
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return -1;
    const char *host = endpoint + 6;
    const char *colon = strrchr(host, ':');
    if (!colon || colon == host || colon[1] == 0)
        return -1;
    char name[256];
    size_t len = (size_t)(colon - host);
    int family = AF_INET; /* a name is looked up as IPv4, as libzmq does without ZMQ_IPV6 */
    if (host[0] == '[' && len >= 2 && colon[-1] == ']') { /* [IPv6] */
        host++;
        len -= 2;
        family = AF_INET6;
    }
    if (len == 0 || len >= sizeof name)
        return -1;
    memcpy(name, host, len);
    name[len] = 0;
    struct addrinfo hints
        = { .ai_family = family, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
    struct addrinfo *found = NULL;
    if (getaddrinfo(name, colon + 1, &hints, &found) != 0 || !found)
        return -1;
    memcpy(&self->addr, found->ai_addr, found->ai_addrlen);
    self->addr_len = found->ai_addrlen;
    freeaddrinfo(found);
    self->tcp = true;
    return 0;
}

/* ---- the connection ---------------------------------------------------------- */

static void s_on_io(kb_io_t *io, void *arg);
static void s_on_retry(kb_timer_t *timer, void *arg);

static bool s_reads(const kb_zmtp_t *self)
{
    return self->state == S_HANDSHAKE || (self->state == S_OPEN && self->reading);
}

/*  The watch waits for input while it reads, for output while bytes wait
    to be written (or the connect to end). */
static void s_watch(kb_zmtp_t *self)
{
    if (self->fd < 0)
        return;
    bool in = s_reads(self);
    bool out = self->state == S_CONNECTING || s_pending(&self->out) > 0;
    if (in == self->watching && out == self->writing)
        return;
    kb_io_set_events(&self->io, in, out);
    self->watching = in;
    self->writing = out;
}

static void s_close(kb_zmtp_t *self)
{
    kb_io_stop(&self->io);
    if (self->fd >= 0)
        close(self->fd);
    self->fd = -1;
    self->greeted = false;
    s_clear(&self->in);
    s_clear(&self->out);
}

/*  The connection is lost: the next one in KB_ZMTP_RECONNECT_MS. */
static void s_drop(kb_zmtp_t *self, kb_zmtp_drop_t why)
{
    bool was_up = self->state >= S_HANDSHAKE;
    s_close(self);
    self->state = S_WAITING;
    self->dropped = true;
    kb_timer_start(self->loop, &self->retry, KB_ZMTP_RECONNECT_MS, 0, s_on_retry, self);
    if (was_up && self->callbacks.dropped) {
        self->calling++;
        self->callbacks.dropped(self, why, self->arg);
        self->calling--;
    }
}

static size_t s_property_put(unsigned char *at, const char *name, const char *value)
{
    size_t name_len = strlen(name), value_len = strlen(value);
    at[0] = (unsigned char)name_len;
    memcpy(at + 1, name, name_len);
    at += 1 + name_len;
    at[0] = at[1] = at[2] = 0;
    at[3] = (unsigned char)value_len;
    memcpy(at + 4, value, value_len);
    return 1 + name_len + 4 + value_len;
}

/*  Our greeting and READY, the first bytes of a connection. */
static int s_greet(kb_zmtp_t *self)
{
    unsigned char greeting[KB_ZMTP_GREETING] = { 0xFF };
    greeting[8] = 1; /* what a ZMTP 1.0 peer would read as a length */
    greeting[9] = 0x7F;
    greeting[10] = 3;
    greeting[11] = 0;
    memcpy(greeting + 12, "NULL", 4);
    unsigned char ready[6 + (1 + 11 + 4 + 6) + (1 + 8 + 4 + 255)];
    size_t n = 0;
    ready[n++] = 5;
    memcpy(ready + n, "READY", 5);
    n += 5;
    n += s_property_put(ready + n, "Socket-Type",
                        self->opts.type == KB_ZMTP_SUB ? "SUB" : "DEALER");
    if (self->identity[0])
        n += s_property_put(ready + n, "Identity", self->identity);
    return s_put(&self->out, greeting, sizeof greeting) == 0
                   && s_put_frame(&self->out, KB_ZMTP_COMMAND, ready, n) == 0
               ? 0
               : -1;
}

static void s_connect(kb_zmtp_t *self)
{
    self->dropped = false;
    int fd = socket(self->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        self->state = S_WAITING;
        kb_timer_start(self->loop, &self->retry, KB_ZMTP_RECONNECT_MS, 0, s_on_retry, self);
        return;
    }
    if (self->tcp) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    self->fd = fd;
    self->state = S_CONNECTING;
    self->watching = true; /* as kb_io_start watches */
    self->writing = false;
    if (kb_io_start(self->loop, &self->io, fd, s_on_io, self) != 0 || s_greet(self) != 0) {
        s_drop(self, KB_ZMTP_CLOSED);
        return;
    }
    if (connect(fd, (struct sockaddr *)&self->addr, self->addr_len) == 0)
        self->state = S_HANDSHAKE;
    else if (errno != EINPROGRESS && errno != EAGAIN) {
        s_drop(self, KB_ZMTP_CLOSED);
        return;
    }
    s_watch(self);
}

static void s_on_retry(kb_timer_t *timer, void *arg)
{
    (void)timer;
    kb_zmtp_t *self = arg;
    if (self->state == S_WAITING)
        s_connect(self);
}

/*  Write what the connection takes now. -1 when it was dropped. */
static int s_flush(kb_zmtp_t *self)
{
    while (s_pending(&self->out) > 0) {
        ssize_t n = send(self->fd, self->out.data + self->out.at, s_pending(&self->out),
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            self->out.at += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        s_drop(self, KB_ZMTP_CLOSED);
        return -1;
    }
    if (s_pending(&self->out) == 0)
        s_clear(&self->out);
    s_watch(self);
    return 0;
}

/* ---- reading ----------------------------------------------------------------- */

/*  One frame's head at p, when the bytes hold it: its flags, the size and
    the head's length. 0 (not yet whole), 1, or -1 (a bad frame). */
static int s_frame_head(const unsigned char *p, size_t have, unsigned *flags, uint64_t *size,
                        size_t *head)
{
    if (have < 2)
        return 0;
    *flags = p[0];
    if (*flags & ~7u)
        return -1;
    if (!(*flags & KB_ZMTP_LONG)) {
        *size = p[1];
        *head = 2;
        return 1;
    }
    if (have < 9)
        return 0;
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n = (n << 8) | p[1 + i];
    if (n >> 62)
        return -1;
    *size = n;
    *head = 9;
    return 1;
}

/*  A property of a READY command's body: the value of name, or NULL. */
static const unsigned char *s_property(const unsigned char *body, size_t size, const char *name,
                                       size_t *value_len)
{
    size_t at = 6, want = strlen(name);
    while (at < size) {
        size_t name_len = body[at++];
        if (size - at < name_len + 4)
            return NULL;
        const unsigned char *found = body + at;
        at += name_len;
        uint64_t len = ((uint64_t)body[at] << 24) | ((uint64_t)body[at + 1] << 16)
                       | ((uint64_t)body[at + 2] << 8) | body[at + 3];
        at += 4;
        if (len > size - at)
            return NULL;
        if (name_len == want && strncasecmp((const char *)found, name, want) == 0) {
            *value_len = (size_t)len;
            return body + at;
        }
        at += (size_t)len;
    }
    return NULL;
}

static bool s_type_goes(const kb_zmtp_t *self, const unsigned char *type, size_t len)
{
    static const char *const dealer_peers[] = { "ROUTER", "DEALER", "REP", NULL };
    static const char *const sub_peers[] = { "PUB", "XPUB", NULL };
    const char *const *peers = self->opts.type == KB_ZMTP_SUB ? sub_peers : dealer_peers;
    for (size_t i = 0; peers[i]; i++)
        if (strlen(peers[i]) == len && memcmp(peers[i], type, len) == 0)
            return true;
    return false;
}

/*  The peer's READY: the connection opens, with what was queued. 0, or -1
    (refused: not READY, or a socket type that does not go with ours). */
static int s_ready(kb_zmtp_t *self, const unsigned char *body, size_t size)
{
    size_t type_len = 0;
    const unsigned char *type;
    if (size < 6 || body[0] != 5 || memcmp(body + 1, "READY", 5) != 0
        || !(type = s_property(body, size, "Socket-Type", &type_len))
        || !s_type_goes(self, type, type_len))
        return -1;
    self->state = S_OPEN;
    self->opens++;
    if (self->opts.type == KB_ZMTP_SUB && s_put_frame(&self->out, 0, "\1", 1) != 0)
        return -1;
    if (s_pending(&self->queued) > 0) {
        if (s_put(&self->out, self->queued.data + self->queued.at, s_pending(&self->queued)) != 0)
            return -1;
        s_clear(&self->queued);
    }
    return 0;
}

static void s_command(kb_zmtp_t *self, const unsigned char *body, size_t size)
{
    /* PING: its name, a TTL (2 bytes), a context (up to 16 bytes) → PONG with the context */
    if (size >= 7 && body[0] == 4 && memcmp(body + 1, "PING", 4) == 0) {
        unsigned char pong[5 + 16];
        size_t context = size - 7 > 16 ? 16 : size - 7;
        pong[0] = 4;
        memcpy(pong + 1, "PONG", 4);
        memcpy(pong + 5, body + 7, context);
        s_put_frame(&self->out, KB_ZMTP_COMMAND, pong, 5 + context);
    }
}

/*  What the owner is told of: the connection opened, a message, a message
    of too many frames. */
typedef enum { S_OPENED, S_MESSAGE, S_TOO_MANY } s_news_t;

static void s_call(kb_zmtp_t *self, s_news_t news, const kb_frame_t *frames, size_t count)
{
    self->calling++;
    switch (news) {
        case S_OPENED:
            if (self->callbacks.opened)
                self->callbacks.opened(self, self->arg);
            break;
        case S_MESSAGE:
            self->callbacks.message(self, frames, count, self->arg);
            break;
        case S_TOO_MANY:
            if (self->callbacks.too_many)
                self->callbacks.too_many(self, self->arg);
            break;
    }
    self->calling--;
}

/*  The peer's greeting, when it is whole. 0 (not yet, or read), -1 (not
    ZMTP 3 with NULL). */
static int s_greeting(kb_zmtp_t *self)
{
    s_bytes_t *in = &self->in;
    if (self->greeted || s_pending(in) < KB_ZMTP_GREETING)
        return 0;
    const unsigned char *g = in->data + in->at;
    if (g[0] != 0xFF || g[9] != 0x7F || g[10] < 3 || memcmp(g + 12, "NULL\0", 5) != 0)
        return -1;
    in->at += KB_ZMTP_GREETING;
    self->greeted = true;
    return 0;
}

/*  The next whole message or command in the read bytes, consumed. 1 (one
    was handled), 0 (none whole: room is made for the rest of it), or -1
    (drop with *why). */
static int s_consume_one(kb_zmtp_t *self, kb_zmtp_drop_t *why)
{
    s_bytes_t *in = &self->in;
    kb_frame_t frames[KB_WIRE_MAX_FRAMES];
    size_t p = in->at, count = 0;
    bool overflow = false;
    for (;;) {
        unsigned flags;
        uint64_t size;
        size_t head;
        int got = s_frame_head(in->data + p, in->len - p, &flags, &size, &head);
        if (got < 0)
            return -1;
        uint64_t need = (p - in->at) + (got ? head + size : 9);
        if (got == 0 || in->len - p - head < size) {
            if (got && self->opts.max_frame && size > self->opts.max_frame) {
                *why = KB_ZMTP_TOO_LARGE; /* refused before its body is read */
                return -1;
            }
            if (need > SIZE_MAX / 2 || s_reserve(in, (size_t)need - s_pending(in)) != 0) {
                *why = KB_ZMTP_CLOSED;
                return -1;
            }
            return 0;
        }
        if (self->opts.max_frame && size > self->opts.max_frame) {
            *why = KB_ZMTP_TOO_LARGE;
            return -1;
        }
        const unsigned char *body = in->data + p + head;
        p += head + (size_t)size;
        if (flags & KB_ZMTP_COMMAND) {
            if (count > 0 || (flags & KB_ZMTP_MORE))
                return -1; /* a command inside a message */
            in->at = p;
            if (self->state != S_HANDSHAKE) {
                s_command(self, body, (size_t)size);
                return 1;
            }
            if (s_ready(self, body, (size_t)size) != 0)
                return -1;
            s_call(self, S_OPENED, NULL, 0);
            return 1;
        }
        if (self->state == S_HANDSHAKE)
            return -1; /* a message before READY */
        if (count < self->opts.max_frames)
            frames[count++] = (kb_frame_t){ (unsigned char *)body, (size_t)size };
        else
            overflow = true;
        if (!(flags & KB_ZMTP_MORE)) {
            in->at = p;
            s_call(self, overflow ? S_TOO_MANY : S_MESSAGE, frames, count);
            return 1;
        }
    }
}

/*  Consume what the read bytes hold whole. 0, 1 (a callback destroyed it,
    or the connection went: stop), or -1 (drop with *why). */
static int s_consume(kb_zmtp_t *self, kb_zmtp_drop_t *why)
{
    *why = KB_ZMTP_PROTOCOL;
    if (s_greeting(self) != 0)
        return -1;
    if (!self->greeted)
        return 0;
    while (s_reads(self) && !self->doomed && !self->dropped) {
        int rc = s_consume_one(self, why);
        if (rc <= 0)
            return rc;
    }
    return self->doomed || self->dropped ? 1 : 0;
}

/*  Room to read into: consumed bytes go first; a buffer still nearly full
    (a flood, or a message larger than it) doubles. */
static int s_room(s_bytes_t *in)
{
    if (in->cap - in->len >= 1024)
        return 0;
    return s_reserve(in, in->cap - in->len + (in->cap ? in->cap / 2 : KB_ZMTP_FIRST_READ));
}

/*  Consume what was read, then read and consume until the socket has
    nothing (EAGAIN) or the turn's budget is used. A short read is not
    taken for the end: a kernel just paused by the flow control may still
    have bytes on their way, and `drained` resumes it (stopping at a short
    read cut its pauses to nothing under load). */
static void s_read(kb_zmtp_t *self)
{
    size_t budget = KB_ZMTP_READ_BUDGET;
    for (;;) {
        kb_zmtp_drop_t why = KB_ZMTP_PROTOCOL;
        int rc = s_pending(&self->in) > 0 ? s_consume(self, &why) : 0;
        if (rc < 0) {
            s_drop(self, why);
            return;
        }
        if (rc > 0 || self->fd < 0 || !s_reads(self))
            return;
        if (budget == 0) {
            /*  The turn's share is read: come back next turn whatever epoll
                says, so that a connection emptied by exactly this read is
                still found drained (a paused kernel waits on it). */
            kb_io_poke(&self->io);
            return;
        }
        s_bytes_t *in = &self->in;
        if (s_room(in) != 0) {
            s_drop(self, KB_ZMTP_CLOSED);
            return;
        }
        size_t room = in->cap - in->len;
        ssize_t n = recv(self->fd, in->data + in->len, room < budget ? room : budget, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            s_drop(self, KB_ZMTP_CLOSED);
            return;
        }
        in->len += (size_t)n;
        budget -= (size_t)n;
    }
    if (s_pending(&self->in) == 0)
        s_clear(&self->in);
    if (self->state == S_OPEN && self->callbacks.drained) {
        self->calling++;
        self->callbacks.drained(self, self->arg);
        self->calling--;
    }
}

/*  Not reading: the watch fired for output, or for an error (a reset
    connection, which epoll reports whatever it was asked). */
static void s_check_closed(kb_zmtp_t *self)
{
    char byte;
    ssize_t n = recv(self->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        s_drop(self, KB_ZMTP_CLOSED);
}

static void s_free(kb_zmtp_t *self);

static void s_on_io(kb_io_t *io, void *arg)
{
    (void)io;
    kb_zmtp_t *self = arg;
    self->calling++;
    if (self->state == S_CONNECTING) {
        int error = 0;
        socklen_t len = sizeof error;
        if (getsockopt(self->fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
            s_drop(self, KB_ZMTP_CLOSED);
            goto out;
        }
        self->state = S_HANDSHAKE;
    }
    if (s_flush(self) != 0)
        goto out;
    if (s_reads(self))
        s_read(self);
    else if (self->state == S_OPEN)
        s_check_closed(self);
    if (!self->doomed && self->fd >= 0)
        s_flush(self); /* what the callbacks sent, and PONGs; the watch as it now must be */
out:
    self->calling--;
    if (self->doomed && self->calling == 0)
        s_free(self);
}

/* ---- the API ----------------------------------------------------------------- */

kb_zmtp_t *kb_zmtp_new(kb_loop_t *loop, const char *endpoint, const kb_zmtp_opts_t *opts,
                       const kb_zmtp_callbacks_t *callbacks, void *arg)
{
    size_t id_len = opts->identity ? strlen(opts->identity) : 0;
    if (!endpoint || !callbacks->message || id_len > 255 || opts->max_frames > KB_WIRE_MAX_FRAMES) {
        errno = EINVAL;
        return NULL;
    }
    kb_zmtp_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->loop = loop;
    self->opts = *opts;
    if (!self->opts.max_frames)
        self->opts.max_frames = KB_WIRE_MAX_FRAMES;
    if (id_len)
        memcpy(self->identity, opts->identity, id_len);
    self->opts.identity = self->identity;
    self->callbacks = *callbacks;
    self->arg = arg;
    self->fd = -1;
    self->reading = true;
    kb_timer_init(&self->retry);
    if (s_parse_endpoint(self, endpoint) != 0) {
        free(self);
        errno = EINVAL;
        return NULL;
    }
    s_connect(self);
    return self;
}

static void s_free(kb_zmtp_t *self)
{
    s_close(self);
    kb_timer_stop(&self->retry);
    s_clear(&self->in);
    s_clear(&self->out);
    s_clear(&self->queued);
    free(self);
}

void kb_zmtp_destroy(kb_zmtp_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_zmtp_t *self = *self_p;
    *self_p = NULL;
    if (self->calling > 0) {
        s_close(self);
        kb_timer_stop(&self->retry);
        self->doomed = true;
        return;
    }
    s_free(self);
}

int kb_zmtp_send(kb_zmtp_t *self, const kb_frame_t *frames, size_t count)
{
    if (count == 0 || self->doomed) {
        errno = EINVAL;
        return -1;
    }
    s_bytes_t *to = self->state == S_OPEN ? &self->out : &self->queued;
    size_t total = 0;
    for (size_t i = 0; i < count; i++)
        total += frames[i].size + 9;
    if (s_pending(to) + total > KB_ZMTP_SEND_LIMIT) {
        errno = ENOBUFS;
        return -1;
    }
    size_t mark = to->len;
    for (size_t i = 0; i < count; i++)
        if (s_put_frame(to, i + 1 < count ? KB_ZMTP_MORE : 0, frames[i].data, frames[i].size)
            != 0) {
            to->len = mark; /* all or nothing */
            errno = ENOMEM;
            return -1;
        }
    if (self->state != S_OPEN)
        return 0;
    if (self->calling > 0) { /* written when the callback's turn ends */
        s_watch(self);
        return 0;
    }
    self->calling++;
    s_flush(self);
    self->calling--;
    return 0;
}

void kb_zmtp_set_reading(kb_zmtp_t *self, bool on)
{
    if (self->reading == on)
        return;
    self->reading = on;
    s_watch(self);
    if (on && s_pending(&self->in) > 0)
        kb_io_poke(&self->io); /* whole messages read before it stopped */
}

bool kb_zmtp_open(const kb_zmtp_t *self)
{
    return self->state == S_OPEN;
}

size_t kb_zmtp_unread(const kb_zmtp_t *self)
{
    return s_pending(&self->in);
}

uint64_t kb_zmtp_opens(const kb_zmtp_t *self)
{
    return self->opens;
}
