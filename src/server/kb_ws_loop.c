/*  kb_ws_loop.c - a websocket's own thread: libmicrohttpd's upgrade
    handler runs one loop per websocket over wslay's event API: poll() on
    the socket and an eventfd that senders ring, pings and their deadline,
    the close handshake and its deadline, then the end (kb_ws_end). */
#include "server/kb_ws_impl.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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
    self->next_ping_ms = kb_ws_now_ms() + self->ping_ms;
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
            self->close_deadline_ms = kb_ws_now_ms() + self->close_ms;
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
        self->close_deadline_ms = kb_ws_now_ms() + self->close_ms;
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
    int64_t deadline = kb_ws_now_ms() + self->close_ms;
    char sink[4096];
    for (;;) {
        int64_t left = deadline - kb_ws_now_ms();
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
    self->next_ping_ms = kb_ws_now_ms() + self->ping_ms;
    for (;;) {
        take_outgoing(self);
        int64_t now = kb_ws_now_ms();
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

void kb_ws_on_upgrade(void *cls, struct MHD_Connection *connection, void *con_cls,
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
    kb_ws_free_list(self->fly_head);
    self->fly_head = self->fly_tail = NULL;
    kb_buf_free(&self->extra);
    /* libmicrohttpd closes the socket once this thread has returned. */
    MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
    kb_ws_end(self, code, reason);
    kb_ws_unref(&self);
}
