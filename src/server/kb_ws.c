/*  kb_ws.c - websockets over libmicrohttpd's upgrade: the RFC 6455
    handshake (checked by kb_ws_handshake.c, answered here with 101), then
    one loop per websocket on its connection's thread, over wslay's event
    API: poll() on the socket and an eventfd that senders ring, pings and
    their deadline, the close handshake and its deadline, and the one end
    that calls on_close. Framing and masking are wslay's; the message
    meaning is the caller's. */
#include "server/kb_ws.h"
#include "util/kb_clock.h"
#include "server/kb_ws_handshake.h"
#include "util/kb_buf.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <wslay/wslay.h>

#define KB_WS_DEFAULT_MAX_MESSAGE ((size_t)64 << 20)
#define KB_WS_DEFAULT_MAX_QUEUED ((size_t)64 << 20)
#define KB_WS_DEFAULT_PING_MS 30000
#define KB_WS_DEFAULT_PONG_MS 30000
#define KB_WS_DEFAULT_CLOSE_MS 2000
/*  A close frame's payload is at most 125 bytes: the code and 123 of
    reason; wslay asks for fewer than 123. */
#define KB_WS_REASON_MAX 122

/* ---- Types --------------------------------------------------------------- */

/*  One outgoing message, queued by a sender, then read by wslay. */
typedef struct kb_ws_out {
    struct kb_ws_out *next;
    bool binary;
    size_t len;
    size_t sent; /* bytes handed to wslay */
    uint8_t data[];
} kb_ws_out_t;

typedef enum {
    KB_WS_PENDING = 0, /* 101 queued, not yet sent */
    KB_WS_OPEN,        /* the loop runs */
    KB_WS_ENDED,       /* on_close called or being called */
} kb_ws_state_t;

struct kb_ws_group {
    pthread_mutex_t lock; /* guards head, count, closing */
    pthread_cond_t empty;
    kb_ws_t *head;
    size_t count;
    bool closing; /* close_all was called: newcomers close at once */
    unsigned close_code;
    char close_reason[KB_WS_REASON_MAX + 1];
    atomic_uint_fast64_t opened, closed, messages_in, bytes_in, messages_out, bytes_out;
    atomic_uint_fast64_t closed_backpressure, closed_too_big, closed_unresponsive;
};

struct kb_ws {
    atomic_int refs;
    kb_ws_group_t *group; /* borrowed; valid until the end */
    kb_ws_t *prev, *next; /* in the group, under its lock */
    kb_ws_handler_t handler;
    void *arg;
    size_t max_message, max_queued;
    unsigned ping_ms, pong_ms, close_ms;
    char protocol[KB_WS_PROTOCOL_MAX];
    bool has_protocol;
    int wake_fd; /* eventfd: senders ring the loop */

    pthread_mutex_t lock; /* guards the fields down to the next blank line */
    kb_ws_state_t state;
    kb_ws_out_t *out_head, *out_tail; /* queued, not yet given to wslay */
    size_t queued;                    /* bytes of out_* and fly_* not yet handed to wslay */
    size_t peak;
    bool close_asked;
    bool overflow;
    unsigned close_code;
    char close_reason[KB_WS_REASON_MAX + 1];

    /* The websocket's own thread only. */
    MHD_socket fd;
    struct MHD_UpgradeResponseHandle *urh;
    wslay_event_context_ptr ctx;
    kb_ws_out_t *fly_head, *fly_tail; /* given to wslay, in order */
    kb_buf_t extra;                   /* bytes MHD read past the request */
    size_t extra_used;
    bool close_queued;    /* our close frame is with wslay */
    bool close_waits;     /* it waits for the messages queued before it to be written */
    unsigned our_code;    /* its code, copied from close_code */
    bool our_overflow;    /* it is for an overflow, copied from overflow */
    bool we_closed_first; /* it went before the peer's */
    bool peer_gone;       /* EOF or a socket error */
    int64_t next_ping_ms, ping_sent_ms, close_deadline_ms;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void copy_reason(char *dst, const char *reason)
{
    snprintf(dst, KB_WS_REASON_MAX + 1, "%s", reason ? reason : "");
}

static void wake(kb_ws_t *self)
{
    uint64_t one = 1;
    ssize_t n = write(self->wake_fd, &one, sizeof one);
    (void)n; /* a full counter is still a ring */
}

/* ---- Group --------------------------------------------------------------- */

kb_ws_group_t *kb_ws_group_new(void)
{
    kb_ws_group_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    pthread_mutex_init(&self->lock, NULL);
    kb_cond_init_monotonic(&self->empty);
    return self;
}

void kb_ws_group_close_all(kb_ws_group_t *self, unsigned code, const char *reason)
{
    pthread_mutex_lock(&self->lock);
    if (!self->closing) {
        self->closing = true;
        self->close_code = code;
        copy_reason(self->close_reason, reason);
    }
    for (kb_ws_t *ws = self->head; ws; ws = ws->next)
        kb_ws_close(ws, code, reason);
    pthread_mutex_unlock(&self->lock);
}

bool kb_ws_group_wait(kb_ws_group_t *self, unsigned timeout_ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (deadline.tv_nsec >= 1000000000) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&self->lock);
    while (self->count > 0) {
        if (pthread_cond_timedwait(&self->empty, &self->lock, &deadline) == ETIMEDOUT)
            break;
    }
    bool none = self->count == 0;
    pthread_mutex_unlock(&self->lock);
    return none;
}

void kb_ws_group_stats(kb_ws_group_t *self, kb_ws_stats_t *out)
{
    out->opened = atomic_load(&self->opened);
    out->closed = atomic_load(&self->closed);
    out->messages_in = atomic_load(&self->messages_in);
    out->bytes_in = atomic_load(&self->bytes_in);
    out->messages_out = atomic_load(&self->messages_out);
    out->bytes_out = atomic_load(&self->bytes_out);
    out->closed_backpressure = atomic_load(&self->closed_backpressure);
    out->closed_too_big = atomic_load(&self->closed_too_big);
    out->closed_unresponsive = atomic_load(&self->closed_unresponsive);
    pthread_mutex_lock(&self->lock);
    out->open = self->count;
    pthread_mutex_unlock(&self->lock);
}

void kb_ws_group_destroy(kb_ws_group_t **self_p)
{
    kb_ws_group_t *self = self_p ? *self_p : NULL;
    if (!self)
        return;
    kb_ws_group_close_all(self, KB_WS_GOING_AWAY, "the server is stopping");
    /* Each ends within its close timeout (plus its callbacks): the
       websockets borrow the group, so it must outlive them. */
    while (!kb_ws_group_wait(self, 1000))
        ;
    pthread_cond_destroy(&self->empty);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

/* ---- References and the end ---------------------------------------------- */

kb_ws_t *kb_ws_ref(kb_ws_t *self)
{
    atomic_fetch_add(&self->refs, 1);
    return self;
}

static void free_list(kb_ws_out_t *out)
{
    while (out) {
        kb_ws_out_t *next = out->next;
        free(out);
        out = next;
    }
}

void kb_ws_unref(kb_ws_t **self_p)
{
    kb_ws_t *self = self_p ? *self_p : NULL;
    if (!self)
        return;
    *self_p = NULL;
    if (atomic_fetch_sub(&self->refs, 1) != 1)
        return;
    assert(self->state != KB_WS_OPEN);
    free_list(self->out_head);
    free_list(self->fly_head);
    kb_buf_free(&self->extra);
    if (self->wake_fd >= 0)
        close(self->wake_fd);
    pthread_mutex_destroy(&self->lock);
    free(self);
}

/*  The one end of a websocket: no send is taken from now on, on_close is
    called, and the group lets it go. */
static void ws_end(kb_ws_t *self, unsigned code, const char *reason)
{
    pthread_mutex_lock(&self->lock);
    assert(self->state != KB_WS_ENDED);
    self->state = KB_WS_ENDED;
    kb_ws_out_t *out = self->out_head;
    self->out_head = self->out_tail = NULL;
    self->queued = 0;
    pthread_mutex_unlock(&self->lock);
    free_list(out);
    if (self->handler.on_close)
        self->handler.on_close(self, code, reason, self->arg);
    kb_ws_group_t *group = self->group;
    atomic_fetch_add(&group->closed, 1);
    pthread_mutex_lock(&group->lock);
    if (self->prev)
        self->prev->next = self->next;
    else
        group->head = self->next;
    if (self->next)
        self->next->prev = self->prev;
    self->prev = self->next = NULL;
    if (--group->count == 0)
        pthread_cond_broadcast(&group->empty);
    pthread_mutex_unlock(&group->lock);
}

void kb_ws_request_done(kb_ws_t **ws_p)
{
    kb_ws_t *self = ws_p ? *ws_p : NULL;
    if (!self)
        return;
    /* Completion comes after the upgrade handler has returned (same
       thread, thread-per-connection), so a websocket still pending here
       never had its 101 sent. */
    pthread_mutex_lock(&self->lock);
    bool pending = self->state == KB_WS_PENDING;
    pthread_mutex_unlock(&self->lock);
    if (pending)
        ws_end(self, KB_WS_ABNORMAL, "the upgrade did not happen");
    kb_ws_unref(ws_p);
}

/* ---- Senders ------------------------------------------------------------- */

const char *kb_ws_protocol(kb_ws_t *self)
{
    return self->has_protocol ? self->protocol : NULL;
}

size_t kb_ws_queued(kb_ws_t *self)
{
    pthread_mutex_lock(&self->lock);
    size_t queued = self->queued;
    pthread_mutex_unlock(&self->lock);
    return queued;
}

size_t kb_ws_queued_peak(kb_ws_t *self)
{
    pthread_mutex_lock(&self->lock);
    size_t peak = self->peak;
    pthread_mutex_unlock(&self->lock);
    return peak;
}

/*  Ask for the close under the lock; false when one was asked already or
    the websocket has ended. */
static bool ask_close_locked(kb_ws_t *self, unsigned code, const char *reason)
{
    if (self->state == KB_WS_ENDED || self->close_asked)
        return false;
    self->close_asked = true;
    self->close_code = code;
    copy_reason(self->close_reason, reason);
    return true;
}

void kb_ws_close(kb_ws_t *self, unsigned code, const char *reason)
{
    pthread_mutex_lock(&self->lock);
    bool asked = ask_close_locked(self, code, reason);
    pthread_mutex_unlock(&self->lock);
    if (asked)
        wake(self);
}

/*  The sender learns of an overflow at once; the websocket's thread sees
    the close asked and the flag, and drops what is still queued. */
static kb_ws_send_status_t overflow_locked(kb_ws_t *self)
{
    if (ask_close_locked(self, KB_WS_POLICY, "the client does not read its messages")) {
        self->overflow = true;
        /* Under the lock: the websocket has not ended, so its group lives. */
        atomic_fetch_add(&self->group->closed_backpressure, 1);
    }
    return KB_WS_OVERFLOW;
}

kb_ws_send_status_t kb_ws_send(kb_ws_t *self, bool binary, const void *data, size_t len)
{
    kb_ws_out_t *out = NULL;
    if (len <= self->max_queued) {
        out = malloc(sizeof *out + len);
        if (!out)
            return KB_WS_NOMEM;
        out->next = NULL;
        out->binary = binary;
        out->len = len;
        out->sent = 0;
        if (len)
            memcpy(out->data, data, len);
    }
    pthread_mutex_lock(&self->lock);
    kb_ws_send_status_t status = KB_WS_SENT;
    if (self->state == KB_WS_ENDED || self->close_asked)
        status = KB_WS_CLOSED;
    else if (!out || len > self->max_queued - self->queued)
        status = overflow_locked(self);
    if (status != KB_WS_SENT) {
        pthread_mutex_unlock(&self->lock);
        free(out);
        if (status == KB_WS_OVERFLOW)
            wake(self);
        return status;
    }
    if (self->out_tail)
        self->out_tail->next = out;
    else
        self->out_head = out;
    self->out_tail = out;
    self->queued += len;
    if (self->queued > self->peak)
        self->peak = self->queued;
    pthread_mutex_unlock(&self->lock);
    wake(self);
    return KB_WS_SENT;
}

/* ---- wslay callbacks (the websocket's thread) ----------------------------- */

static ssize_t on_wslay_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags,
                             void *user_data)
{
    kb_ws_t *self = user_data;
    if (self->extra_used < self->extra.len) {
        size_t n = self->extra.len - self->extra_used;
        n = n < len ? n : len;
        memcpy(buf, self->extra.data + self->extra_used, n);
        self->extra_used += n;
        if (self->extra_used == self->extra.len)
            kb_buf_free(&self->extra);
        return (ssize_t)n;
    }
    ssize_t n;
    do
        n = recv(self->fd, buf, len, 0);
    while (n < 0 && errno == EINTR);
    if (n > 0)
        return n;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
    } else {
        self->peer_gone = true; /* EOF or reset */
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
    }
    return -1;
}

static ssize_t on_wslay_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len,
                             int flags, void *user_data)
{
    kb_ws_t *self = user_data;
    int more = (flags & WSLAY_MSG_MORE) ? MSG_MORE : 0;
    ssize_t n;
    do
        n = send(self->fd, data, len, MSG_NOSIGNAL | more);
    while (n < 0 && errno == EINTR);
    if (n >= 0)
        return n;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
    } else {
        self->peer_gone = true;
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
    }
    return -1;
}

/*  Any frame from the peer shows it alive: the ping waits again. */
static void on_wslay_frame_start(wslay_event_context_ptr ctx,
                                 const struct wslay_event_on_frame_recv_start_arg *arg,
                                 void *user_data)
{
    kb_ws_t *self = user_data;
    self->ping_sent_ms = 0;
    self->next_ping_ms = now_ms() + self->ping_ms;
}

static void on_wslay_message(wslay_event_context_ptr ctx,
                             const struct wslay_event_on_msg_recv_arg *arg, void *user_data)
{
    kb_ws_t *self = user_data;
    if (arg->opcode != WSLAY_TEXT_FRAME && arg->opcode != WSLAY_BINARY_FRAME)
        return; /* pings are answered by wslay, closes handled by the loop */
    atomic_fetch_add(&self->group->messages_in, 1);
    atomic_fetch_add(&self->group->bytes_in, arg->msg_length);
    pthread_mutex_lock(&self->lock);
    bool closing = self->close_asked;
    pthread_mutex_unlock(&self->lock);
    /* Once a close is asked (the daemon stops, say) nothing more reaches
       the caller. */
    if (!closing && self->handler.on_message)
        self->handler.on_message(self, arg->opcode == WSLAY_BINARY_FRAME, arg->msg, arg->msg_length,
                                 self->arg);
}

/*  wslay reads a queued message from here, a frame's worth at a time, so
    that the message is never copied a second time. */
static ssize_t on_wslay_read_out(wslay_event_context_ptr ctx, uint8_t *buf, size_t len,
                                 const union wslay_event_msg_source *source, int *eof,
                                 void *user_data)
{
    kb_ws_t *self = user_data;
    kb_ws_out_t *out = source->data;
    assert(out == self->fly_head);
    size_t n = out->len - out->sent;
    n = n < len ? n : len;
    memcpy(buf, out->data + out->sent, n);
    out->sent += n;
    pthread_mutex_lock(&self->lock);
    self->queued -= n;
    pthread_mutex_unlock(&self->lock);
    if (out->sent == out->len) {
        *eof = 1;
        atomic_fetch_add(&self->group->messages_out, 1);
        atomic_fetch_add(&self->group->bytes_out, out->len);
        self->fly_head = out->next;
        if (!self->fly_head)
            self->fly_tail = NULL;
        free(out);
    }
    return (ssize_t)n;
}

/* ---- The loop (the websocket's thread) ----------------------------------- */

/*  Give wslay what senders queued, and our close when one was asked. */
static void take_outgoing(kb_ws_t *self)
{
    pthread_mutex_lock(&self->lock);
    kb_ws_out_t *out = self->out_head;
    self->out_head = self->out_tail = NULL;
    bool close_now = self->close_asked && !self->close_queued;
    bool overflow = self->overflow;
    unsigned code = self->close_code;
    char reason[KB_WS_REASON_MAX + 1];
    memcpy(reason, self->close_reason, sizeof reason);
    pthread_mutex_unlock(&self->lock);

    while (out) {
        kb_ws_out_t *next = out->next;
        out->next = NULL;
        int rc = -1;
        if (!overflow && out->len == 0) {
            struct wslay_event_msg msg
                = { out->binary ? WSLAY_BINARY_FRAME : WSLAY_TEXT_FRAME, NULL, 0 };
            rc = wslay_event_queue_msg(self->ctx, &msg);
            if (rc == 0)
                atomic_fetch_add(&self->group->messages_out, 1);
            free(out);
        } else if (!overflow) {
            struct wslay_event_fragmented_msg msg = {
                .opcode = out->binary ? WSLAY_BINARY_FRAME : WSLAY_TEXT_FRAME,
                .source.data = out,
                .read_callback = on_wslay_read_out,
            };
            rc = wslay_event_queue_fragmented_msg(self->ctx, &msg);
            if (rc == 0) {
                if (self->fly_tail)
                    self->fly_tail->next = out;
                else
                    self->fly_head = out;
                self->fly_tail = out;
            }
        }
        if (rc != 0 && out->len > 0) { /* after a close, or no memory: dropped */
            pthread_mutex_lock(&self->lock);
            self->queued -= out->len;
            pthread_mutex_unlock(&self->lock);
            free(out);
        }
        out = next;
    }
    if (close_now) {
        self->our_code = code;
        self->our_overflow = overflow;
        if (!self->close_deadline_ms) /* the wait below counts in the close's time */
            self->close_deadline_ms = now_ms() + self->close_ms;
    }
    /*  wslay sends control frames ahead of data, and no data after a
        close: our close goes once what was queued before it is written,
        or the last messages (a kernel's status: dead) would be lost. An
        overflow's close goes at once; its messages are dropped anyway. */
    self->close_waits = close_now && !overflow && wslay_event_want_write(self->ctx);
    if (self->close_waits)
        return; /* ws_loop comes back once they are written */
    if (close_now && !wslay_event_get_close_sent(self->ctx)) {
        self->close_queued = true;
        self->we_closed_first = !wslay_event_get_close_received(self->ctx);
        wslay_event_queue_close(self->ctx, (uint16_t)code, (const uint8_t *)reason, strlen(reason));
        self->close_deadline_ms = now_ms() + self->close_ms;
    } else if (close_now) {
        self->close_queued = true;
    }
}

/*  After a close that the peer has not answered while it still sends (a
    message over the limit), stop writing and read what comes, so that
    the peer sees our close frame rather than a reset. */
static void linger(kb_ws_t *self)
{
    shutdown(self->fd, SHUT_WR);
    int64_t deadline = now_ms() + self->close_ms;
    char sink[4096];
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0)
            return;
        struct pollfd pfd = { .fd = self->fd, .events = POLLIN };
        int rc = poll(&pfd, 1, (int)left);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            return;
        ssize_t n = recv(self->fd, sink, sizeof sink, 0);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
            return;
    }
}

static int poll_timeout(kb_ws_t *self, int64_t now)
{
    int64_t next = self->ping_sent_ms ? self->ping_sent_ms + self->pong_ms : self->next_ping_ms;
    if (self->close_deadline_ms && self->close_deadline_ms < next)
        next = self->close_deadline_ms;
    int64_t left = next - now;
    return left <= 0 ? 0 : left > 60000 ? 60000 : (int)left;
}

/*  The code that ended a websocket whose close frames went as far as
    they did: the peer's when it closed first, else the one we sent. */
static unsigned end_code(kb_ws_t *self, const char **reason)
{
    if (wslay_event_get_close_received(self->ctx) && !self->we_closed_first) {
        *reason = "closed by the peer";
        return wslay_event_get_status_code_received(self->ctx);
    }
    if (self->close_queued) {
        *reason = NULL; /* ours: the caller's reason */
        return self->our_code;
    }
    /* wslay's own close: a message over the limit, a protocol error */
    unsigned code = wslay_event_get_status_code_sent(self->ctx);
    *reason = code == KB_WS_TOO_BIG    ? "message over the size limit"
              : code == KB_WS_ABNORMAL ? "the close could not be written"
                                       : "protocol error";
    if (code == KB_WS_TOO_BIG)
        atomic_fetch_add(&self->group->closed_too_big, 1);
    return code;
}

/*  Run until the websocket is over; the code and reason for on_close go
    to code and reason. */
static void ws_loop(kb_ws_t *self, unsigned *code, const char **reason)
{
    self->next_ping_ms = now_ms() + self->ping_ms;
    for (;;) {
        take_outgoing(self);
        int64_t now = now_ms();
        /* A close under way, whoever began it (wslay stops reading after
           a close comes, or when it refuses a message), ends in time. */
        bool closing = self->close_queued || wslay_event_get_close_received(self->ctx)
                       || !wslay_event_get_read_enabled(self->ctx);
        if (closing && !self->close_deadline_ms)
            self->close_deadline_ms = now + self->close_ms;
        if (self->ping_sent_ms && now - self->ping_sent_ms >= self->pong_ms) {
            atomic_fetch_add(&self->group->closed_unresponsive, 1);
            *reason = "no answer to a ping";
            return;
        }
        if (self->close_deadline_ms && now >= self->close_deadline_ms) {
            if (!self->our_overflow)
                atomic_fetch_add(&self->group->closed_unresponsive, 1);
            *code = end_code(self, reason);
            if (!*reason)
                *reason = "no answer to the close";
            return;
        }
        if (!closing && !self->ping_sent_ms && now >= self->next_ping_ms) {
            struct wslay_event_msg ping = { WSLAY_PING, NULL, 0 };
            if (wslay_event_queue_msg(self->ctx, &ping) == 0)
                self->ping_sent_ms = now;
        }
        if (wslay_event_want_write(self->ctx) && wslay_event_send(self->ctx) < 0) {
            *reason = self->peer_gone ? "the peer went away" : "cannot write";
            return;
        }
        if (self->close_waits && !wslay_event_want_write(self->ctx))
            continue; /* written: our close goes now (take_outgoing) */
        if (!wslay_event_want_read(self->ctx) && !wslay_event_want_write(self->ctx))
            break;
        struct pollfd fds[2] = {
            { .fd = self->fd,
              .events = (short)((wslay_event_want_read(self->ctx) ? POLLIN : 0)
                                | (wslay_event_want_write(self->ctx) ? POLLOUT : 0)) },
            { .fd = self->wake_fd, .events = POLLIN },
        };
        int rc = poll(fds, 2, poll_timeout(self, now));
        if (rc < 0 && errno != EINTR) {
            *reason = "poll failed";
            return;
        }
        if (rc <= 0)
            continue;
        if (fds[1].revents & POLLIN) {
            uint64_t rings;
            ssize_t n = read(self->wake_fd, &rings, sizeof rings);
            (void)n;
        }
        short ready = fds[0].revents;
        if ((ready & (POLLIN | POLLHUP | POLLERR)) && wslay_event_want_read(self->ctx)) {
            if (wslay_event_recv(self->ctx) < 0) {
                *reason = self->peer_gone ? "the peer went away" : "cannot read";
                return;
            }
        } else if (ready & (POLLHUP | POLLERR)) {
            *reason = "the peer went away";
            return;
        }
    }
    /* Both directions are done: a close was exchanged, or ours went out
       after wslay stopped reading (a message over the limit). */
    *code = end_code(self, reason);
    if (!wslay_event_get_close_received(self->ctx))
        linger(self);
}

static void on_upgrade(void *cls, struct MHD_Connection *connection, void *con_cls,
                       const char *extra_in, size_t extra_in_size, MHD_socket sock,
                       struct MHD_UpgradeResponseHandle *urh)
{
    kb_ws_t *self = kb_ws_ref(cls);
    self->fd = sock;
    self->urh = urh;
    unsigned code = KB_WS_ABNORMAL;
    const char *reason = "out of memory";
    char ours[KB_WS_REASON_MAX + 1] = "";

    pthread_mutex_lock(&self->lock);
    self->state = KB_WS_OPEN;
    pthread_mutex_unlock(&self->lock);
    atomic_fetch_add(&self->group->opened, 1);

    if (extra_in_size > 0 && kb_buf_append(&self->extra, extra_in, extra_in_size) != KB_BUF_OK)
        goto end;
    int flags = fcntl(sock, F_GETFL);
    if (flags < 0 || fcntl(sock, F_SETFL, flags | O_NONBLOCK) < 0) {
        reason = "cannot make the socket non-blocking";
        goto end;
    }
    /* libmicrohttpd turns Nagle back on for the upgrade; small messages
       must go out at once. */
    int one = 1;
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct wslay_event_callbacks callbacks = {
        .recv_callback = on_wslay_recv,
        .send_callback = on_wslay_send,
        .on_frame_recv_start_callback = on_wslay_frame_start,
        .on_msg_recv_callback = on_wslay_message,
    };
    if (wslay_event_context_server_init(&self->ctx, &callbacks, self) != 0)
        goto end;
    wslay_event_config_set_max_recv_msg_length(self->ctx, self->max_message);
    if (self->handler.on_open)
        self->handler.on_open(self, self->arg);
    ws_loop(self, &code, &reason);
    if (!reason) {
        pthread_mutex_lock(&self->lock);
        memcpy(ours, self->close_reason, sizeof ours);
        pthread_mutex_unlock(&self->lock);
        reason = ours;
    }
end:
    if (self->ctx)
        wslay_event_context_free(self->ctx);
    self->ctx = NULL;
    free_list(self->fly_head);
    self->fly_head = self->fly_tail = NULL;
    kb_buf_free(&self->extra);
    /* libmicrohttpd closes the socket once this thread has returned. */
    MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
    ws_end(self, code, reason);
    kb_ws_unref(&self);
}

static kb_ws_t *ws_new(const kb_ws_config_t *config, kb_ws_group_t *group,
                       const kb_ws_handler_t *handler, void *arg)
{
    kb_ws_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->wake_fd < 0) {
        free(self);
        return NULL;
    }
    atomic_init(&self->refs, 1);
    pthread_mutex_init(&self->lock, NULL);
    self->group = group;
    self->handler = *handler;
    self->arg = arg;
    self->fd = MHD_INVALID_SOCKET;
    self->max_message = config->max_message ? config->max_message : KB_WS_DEFAULT_MAX_MESSAGE;
    self->max_queued = config->max_queued ? config->max_queued : KB_WS_DEFAULT_MAX_QUEUED;
    self->ping_ms = config->ping_interval_ms ? config->ping_interval_ms : KB_WS_DEFAULT_PING_MS;
    self->pong_ms = config->pong_timeout_ms ? config->pong_timeout_ms : KB_WS_DEFAULT_PONG_MS;
    self->close_ms = config->close_timeout_ms ? config->close_timeout_ms : KB_WS_DEFAULT_CLOSE_MS;
    return self;
}

kb_ws_t *kb_ws_accept(struct MHD_Connection *connection, const char *method,
                      const kb_ws_config_t *config, kb_ws_group_t *group,
                      const kb_ws_handler_t *handler, void *arg, unsigned *status_out)
{
    assert(connection && method && config && group && handler && status_out);
#ifndef NDEBUG
    const union MHD_ConnectionInfo *info
        = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_DAEMON);
    const union MHD_DaemonInfo *flags
        = info ? MHD_get_daemon_info(info->daemon, MHD_DAEMON_INFO_FLAGS) : NULL;
    assert(flags && (flags->flags & MHD_USE_THREAD_PER_CONNECTION)
           && (flags->flags & MHD_ALLOW_UPGRADE));
#endif
    kb_ws_handshake_t handshake;
    unsigned status = kb_ws_handshake_check(connection, method, config->protocols, &handshake);
    if (status) {
        *status_out = kb_ws_handshake_refuse(connection, status, handshake.error);
        return NULL;
    }
    kb_ws_t *self = ws_new(config, group, handler, arg);
    struct MHD_Response *response = NULL;
    if (!self)
        goto fail;
    if (handshake.protocol[0]) {
        memcpy(self->protocol, handshake.protocol, sizeof self->protocol);
        self->has_protocol = true;
    }
    response = MHD_create_response_for_upgrade(on_upgrade, self);
    if (!response
        || MHD_add_response_header(response, MHD_HTTP_HEADER_UPGRADE, "websocket") != MHD_YES
        || MHD_add_response_header(response, "Sec-WebSocket-Accept", handshake.accept) != MHD_YES
        || (self->has_protocol
            && MHD_add_response_header(response, "Sec-WebSocket-Protocol", self->protocol)
                   != MHD_YES)
        || MHD_queue_response(connection, MHD_HTTP_SWITCHING_PROTOCOLS, response) != MHD_YES)
        goto fail;
    MHD_destroy_response(response);
    /* The upgrade handler runs on this thread once we return, so joining
       the group now is in time for it. */
    pthread_mutex_lock(&group->lock);
    self->next = group->head;
    if (group->head)
        group->head->prev = self;
    group->head = self;
    group->count++;
    if (group->closing) {
        pthread_mutex_lock(&self->lock);
        ask_close_locked(self, group->close_code, group->close_reason);
        pthread_mutex_unlock(&self->lock);
    }
    pthread_mutex_unlock(&group->lock);
    *status_out = MHD_HTTP_SWITCHING_PROTOCOLS;
    return self;
fail:
    if (response)
        MHD_destroy_response(response);
    if (self)
        self->state = KB_WS_ENDED;
    kb_ws_unref(&self);
    *status_out
        = kb_ws_handshake_refuse(connection, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    return NULL;
}
