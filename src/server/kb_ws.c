/*  kb_ws.c - websockets over libmicrohttpd's upgrade: the RFC 6455
    handshake (checked by kb_ws_handshake.c, answered here with 101), the
    group of a server's websockets, the senders' queue, and the one end
    that calls on_close. The loop each websocket runs on its connection's
    thread is kb_ws_loop.c. Framing and masking are wslay's; the message
    meaning is the caller's. */
#include "server/kb_ws.h"
#include "server/kb_ws_impl.h"
#include "util/kb_clock.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define KB_WS_DEFAULT_MAX_MESSAGE ((size_t)64 << 20)
#define KB_WS_DEFAULT_MAX_QUEUED ((size_t)64 << 20)
#define KB_WS_DEFAULT_PING_MS 30000
#define KB_WS_DEFAULT_PONG_MS 30000
#define KB_WS_DEFAULT_CLOSE_MS 2000

int64_t kb_ws_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void kb_ws_copy_reason(char *dst, const char *reason)
{
    snprintf(dst, KB_WS_REASON_MAX + 1, "%s", reason ? reason : "");
}

void kb_ws_wake(kb_ws_t *self)
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
        kb_ws_copy_reason(self->close_reason, reason);
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

void kb_ws_free_list(kb_ws_out_t *out)
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
    kb_ws_free_list(self->out_head);
    kb_ws_free_list(self->fly_head);
    kb_buf_free(&self->extra);
    if (self->wake_fd >= 0)
        close(self->wake_fd);
    pthread_mutex_destroy(&self->lock);
    free(self);
}

/*  The one end of a websocket: no send is taken from now on, on_close is
    called, and the group lets it go. */
void kb_ws_end(kb_ws_t *self, unsigned code, const char *reason)
{
    pthread_mutex_lock(&self->lock);
    assert(self->state != KB_WS_ENDED);
    self->state = KB_WS_ENDED;
    kb_ws_out_t *out = self->out_head;
    self->out_head = self->out_tail = NULL;
    self->queued = 0;
    pthread_mutex_unlock(&self->lock);
    kb_ws_free_list(out);
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
        kb_ws_end(self, KB_WS_ABNORMAL, "the upgrade did not happen");
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
bool kb_ws_ask_close_locked(kb_ws_t *self, unsigned code, const char *reason)
{
    if (self->state == KB_WS_ENDED || self->close_asked)
        return false;
    self->close_asked = true;
    self->close_code = code;
    kb_ws_copy_reason(self->close_reason, reason);
    return true;
}

void kb_ws_close(kb_ws_t *self, unsigned code, const char *reason)
{
    pthread_mutex_lock(&self->lock);
    bool asked = kb_ws_ask_close_locked(self, code, reason);
    pthread_mutex_unlock(&self->lock);
    if (asked)
        kb_ws_wake(self);
}

/*  The sender learns of an overflow at once; the websocket's thread sees
    the close asked and the flag, and drops what is still queued. */
static kb_ws_send_status_t overflow_locked(kb_ws_t *self)
{
    if (kb_ws_ask_close_locked(self, KB_WS_POLICY, "the client does not read its messages")) {
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
            kb_ws_wake(self);
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
    kb_ws_wake(self);
    return KB_WS_SENT;
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
    response = MHD_create_response_for_upgrade(kb_ws_on_upgrade, self);
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
        kb_ws_ask_close_locked(self, group->close_code, group->close_reason);
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
