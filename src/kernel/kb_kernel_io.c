/*  kb_kernel_io.c - one kernel's messages: the sockets to its channels
    (shell and iopub from the start; control, and stdin for a client that
    answers input_request, on first use), what is sent (requests built
    here, or a client's messages signed elsewhere with the kernel's key)
    and what is read, verified and dispatched to the owner's callbacks.
    Private to src/kernel, with kb_kernel.c (lifecycle) and
    kb_kernel_adopt.c.
*/
#include "kernel/kb_kernel.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "kernel/kb_kernel_impl.h"
#include "kernel/kb_launch.h"
#include "util/kb_clock.h"
#include "wire/kb_wire.h"

#define KB_DRAIN_BATCH 256        /* messages read per socket per loop turn */
#define KB_DRAIN_BYTES (2u << 20) /* and bytes, about: a flood takes turns with others */
#define KB_FLOW_RECENT_MS 2000    /* a message read this recently: output still flows */
#define KB_FLOW_REFILL_US 5000    /* a paused kernel goes on this long before its backlog ends */

const char *kb_channel_name(kb_channel_t channel)
{
    static const char *const names[] = { "shell", "iopub", "control", "stdin" };
    return (unsigned)channel < 4 ? names[channel] : "?";
}

/* ---- iopub flow control ------------------------------------------------------ */

/*  Microseconds since the epoch of a Jupyter date, "2026-12-03T13:02:28.123456Z"
    (or +00:00, or no zone: UTC, as kernels send it); -1 when it is not one.
    The seconds of the last date read are kept (per thread): a kernel's
    messages mostly share them, and sscanf with timegm costs more than the
    rest of a message's flow check. */
static int64_t s_date_us(const char *date)
{
    enum { SECONDS_LEN = 19 }; /* "2026-12-03T13:02:28" */
    static _Thread_local char last[SECONDS_LEN + 1];
    static _Thread_local time_t last_secs;
    if (!date || strlen(date) < SECONDS_LEN)
        return -1;
    if (memcmp(date, last, SECONDS_LEN) != 0) {
        struct tm tm = { 0 };
        int used = 0;
        if (sscanf(date, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                   &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &used)
                != 6
            || used != SECONDS_LEN)
            return -1;
        tm.tm_year -= 1900;
        tm.tm_mon -= 1;
        time_t secs = timegm(&tm);
        if (secs == (time_t)-1)
            return -1;
        memcpy(last, date, SECONDS_LEN);
        last_secs = secs;
    }
    int64_t us = 0, scale = 100000;
    const char *p = date + SECONDS_LEN;
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++, scale /= 10)
            us += (*p - '0') * scale;
    return (int64_t)last_secs * 1000000 + us;
}

static int64_t s_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/*  Still the process we started or adopted (its pid not reused). */
static bool s_ours(const kb_kernel_t *self)
{
    return self->pid > 0 && self->pgid > 0 && !self->reaped
           && (self->own_child || kb_proc_start_time(self->pid) == self->pid_start);
}

/*  The kernel's iopub message was dated lag_us ago: past KB_FLOW_LAG_MS,
    the engine is behind it, and it waits (stopped) while its backlog is
    read. Only while it runs a request: a starting or dying kernel, or one
    being judged after its connection dropped, is left alone. */
static void s_flow_check(kb_kernel_t *self, const kb_msg_t *msg)
{
    if (self->state != KB_KERNEL_BUSY && self->state != KB_KERNEL_INTERRUPTING)
        return;
    int64_t dated = s_date_us(msg->date);
    self->io.lag_us = dated < 0 ? 0 : s_wall_us() - dated;
    self->io.read_ms = kb_launch_now_ms();
    /*  Paused, and what is left to read is what it sent in its last few
        milliseconds: it goes on now, so that its next output is there when
        the engine has read the rest (the engine does not wait idle). */
    if (self->io.paused && dated >= self->io.paused_us - KB_FLOW_REFILL_US)
        kb_kernel_resume(self);
    /*  What it sent before its last pause ended waited through the pause:
        late, but no sign that the engine is behind what it sends now. */
    if (self->io.paused || kb_timer_active(&self->io.iopub_drop_timer)
        || self->io.lag_us <= (int64_t)KB_FLOW_LAG_MS * 1000 || dated < self->io.resumed_us
        || !s_ours(self))
        return;
    if (kill(-self->pgid, SIGSTOP) != 0)
        return;
    self->io.paused = true;
    self->io.paused_us = s_wall_us();
    self->io.pauses++;
}

#define KB_NODROP_ENV "KERNELBRIDGE_IOPUB_NODROP=1"

bool kb_kernel_env_asks_nodrop(const char *env, size_t len)
{
    size_t want = sizeof KB_NODROP_ENV; /* with its NUL */
    for (size_t at = 0; at < len;) {
        const char *entry = env + at;
        size_t n = strnlen(entry, len - at);
        if (n + 1 == want && memcmp(entry, KB_NODROP_ENV, n) == 0)
            return true;
        at += n + 1;
    }
    return false;
}

/*  The kernel_info_reply says whether the kernel waits when the daemon
    does not read its output (asked at launch): for such a kernel, output
    that is recent is still flowing (kb_kernel_iopub_behind). Its iopub is
    read as the engine handles it (kb_zmtp, on the loop): what the engine
    has not read waits in the connection, and past it in the kernel, which
    waits or (any other kernel) is paused by the lag check above. */
static void s_nodrop_said(kb_kernel_t *self, const json_t *content)
{
    json_t *ours = json_object_get(content, "kernelbridge");
    self->io.nodrop = self->nodrop_asked && json_is_true(json_object_get(ours, "iopub_nodrop"));
}

/*  ZMQ_EVENTS of a socket whose watch is edge-triggered: asking takes the
    edge (ZeroMQ handles the commands that signal its descriptor), so a
    socket with input now is drained next turn, as if it had fired. */
static int s_events(zsock_t *sock, kb_io_t *io)
{
    int events = zsock_events(sock);
    if (events & ZMQ_POLLIN)
        kb_io_poke(io);
    return events;
}

bool kb_kernel_iopub_behind(kb_kernel_t *self)
{
    return self->io.paused || (self->iopub && kb_zmtp_unread(self->iopub) > 0)
           || ((self->io.pauses || self->io.nodrop)
               && kb_launch_now_ms() - self->io.read_ms < KB_FLOW_RECENT_MS);
}

void kb_kernel_resume(kb_kernel_t *self)
{
    if (!self->io.paused)
        return;
    self->io.paused = false;
    self->io.resumed_us = s_wall_us();
    if (s_ours(self))
        kill(-self->pgid, SIGCONT);
}

/* ---- sending -------------------------------------------------------------- */

zsock_t *kb_kernel_connect_endpoint(zsock_t *sock, const char *endpoint)
{
    if (!sock || !endpoint) { /* no endpoint: it could not be built (out of memory) */
        zsock_destroy(&sock);
        return NULL;
    }
    zsock_set_linger(sock, 0);
    if (strncmp(endpoint, "tcp://[", 7) == 0)
        zsock_set_ipv6(sock, 1);
    if (zsock_connect(sock, "%s", endpoint) != 0)
        zsock_destroy(&sock);
    return sock;
}

/*  The control socket, connected on first use: most kernels never need it. */
zsock_t *kb_kernel_control(kb_kernel_t *self)
{
    if (self->io.control)
        return self->io.control;
    self->io.control = kb_kernel_connect_endpoint(zsock_new(ZMQ_DEALER), self->control_endpoint);
    if (self->io.control
        && kb_io_start_zmq(self->loop, &self->io.control_io, zsock_resolve(self->io.control),
                           kb_kernel_on_control, self)
               != 0)
        zsock_destroy(&self->io.control);
    return self->io.control;
}

int kb_kernel_send(kb_kernel_t *self, kb_channel_t channel, const char *msg_type, json_t *content,
                   char *msg_id_out, size_t msg_id_size)
{
    char date[40];
    kb_iso_now_us(date, sizeof date);
    kb_frame_t *frames = NULL;
    size_t count = 0;
    if (self->state == KB_KERNEL_DEAD) {
        json_decref(content);
        return -1;
    }
    if (kb_wire_encode(self->conn.wire, msg_type, content, NULL, NULL, date, NULL, 0, &frames,
                       &count, msg_id_out, msg_id_size)
        != 0)
        return -1;
    bool control = channel == KB_CHANNEL_CONTROL;
    if (control)
        kb_kernel_resume(self); /* to answer it */
    int rc;
    if (!control)
        rc = kb_zmtp_send(self->shell, frames, count);
    else {
        zsock_t *sock = kb_kernel_control(self);
        rc = sock ? 0 : -1;
        for (size_t i = 0; i < count && rc == 0; i++)
            if (zmq_send(zsock_resolve(sock), frames[i].data, frames[i].size,
                         i + 1 < count ? ZMQ_SNDMORE : 0)
                < 0)
                rc = -1;
        /*  A send may take the socket's ZMQ_FD signal while replies wait. */
        kb_io_poke(&self->io.control_io);
    }
    kb_frames_free(frames, count);
    return rc;
}

static void s_on_stdin(kb_io_t *io, void *arg);

int kb_kernel_open_stdin(kb_kernel_t *self)
{
    if (self->io.stdin_sock)
        return 0;
    if (self->state == KB_KERNEL_DEAD || !self->stdin_endpoint)
        return -1;
    zsock_t *sock = zsock_new(ZMQ_DEALER);
    if (sock) {
        zsock_set_identity(sock, self->routing_id);
        zsock_set_immediate(sock, 1); /* writable once connected: kb_kernel_stdin_connected */
    }
    self->io.stdin_sock = kb_kernel_connect_endpoint(sock, self->stdin_endpoint);
    if (self->io.stdin_sock
        && kb_io_start_zmq(self->loop, &self->io.stdin_io, zsock_resolve(self->io.stdin_sock),
                           s_on_stdin, self)
               != 0)
        zsock_destroy(&self->io.stdin_sock);
    return self->io.stdin_sock ? 0 : -1;
}

bool kb_kernel_stdin_connected(kb_kernel_t *self)
{
    return self->io.stdin_sock && (s_events(self->io.stdin_sock, &self->io.stdin_io) & ZMQ_POLLOUT);
}

#define KB_IOPUB_DROP_JUDGED_MS 100

/*  The iopub connection went 100 ms ago: a kernel that died closed its
    sockets too, and its death (seen by its watch) says so; else it is a
    message over the max message size that kb_zmtp refused, or a broken
    connection: say so (kb_zmtp connects again by itself). */
static void s_on_iopub_drop(kb_timer_t *timer, void *arg)
{
    kb_kernel_t *self = arg;
    (void)timer;
    if (self->state == KB_KERNEL_DYING || self->state == KB_KERNEL_DEAD
        || self->state == KB_KERNEL_STARTING
        || (self->pid > 0 && kb_proc_start_time(self->pid) != self->pid_start))
        return;
    self->io.iopub_drops++;
    zsys_warning("kernel %d: its iopub connection was dropped (a message over the max "
                 "message size of %llu bytes, or a broken connection); connecting again",
                 (int)self->pid, (unsigned long long)self->max_message);
    if (self->callbacks.iopub_dropped)
        self->callbacks.iopub_dropped(self, self->arg);
}

void kb_kernel_io_init(kb_kernel_t *self)
{
    kb_timer_init(&self->io.iopub_drop_timer);
}

void kb_kernel_io_close(kb_kernel_t *self)
{
    kb_timer_stop(&self->io.iopub_drop_timer);
    kb_io_stop(&self->io.control_io);
    zsock_destroy(&self->io.control);
    kb_io_stop(&self->io.stdin_io);
    zsock_destroy(&self->io.stdin_sock);
    free(self->io.language_info);
    self->io.language_info = NULL;
}

kb_wire_t *kb_kernel_wire(kb_kernel_t *self)
{
    return self->conn.wire;
}

int kb_kernel_send_frames(kb_kernel_t *self, kb_channel_t channel, const kb_frame_t *frames,
                          size_t count)
{
    if (self->state == KB_KERNEL_DEAD || count == 0)
        return -1;
    kb_kernel_resume(self); /* a client's request is answered */
    if (channel == KB_CHANNEL_SHELL)
        return kb_zmtp_send(self->shell, frames, count);
    zsock_t *sock = NULL;
    kb_io_t *io = NULL;
    if (channel == KB_CHANNEL_CONTROL) {
        sock = kb_kernel_control(self);
        io = &self->io.control_io;
    } else if (channel == KB_CHANNEL_STDIN && kb_kernel_open_stdin(self) == 0) {
        sock = self->io.stdin_sock;
        io = &self->io.stdin_io;
    }
    if (!sock)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < count && rc == 0; i++)
        if (zmq_send(zsock_resolve(sock), frames[i].data, frames[i].size,
                     (i + 1 < count ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT)
            < 0)
            rc = -1;
    kb_io_poke(io);
    return rc;
}

int kb_kernel_execute(kb_kernel_t *self, const char *code, bool silent, char *msg_id_out,
                      size_t msg_id_size)
{
    json_t *content = json_pack("{s:s, s:b, s:b, s:o, s:b, s:b}", "code", code, "silent", silent,
                                "store_history", !silent, "user_expressions", json_object(),
                                "allow_stdin", 0, "stop_on_error", !silent);
    if (!content)
        return -1;
    return kb_kernel_send(self, KB_CHANNEL_SHELL, "execute_request", content, msg_id_out,
                          msg_id_size);
}

/*  On control for an adopted kernel: it may be busy with a long cell on
    shell, and control answers at once (ipykernel publishes busy/idle on
    iopub for control requests too, which shows that iopub is live). */
void kb_kernel_send_kernel_info(kb_kernel_t *self)
{
    self->io.last_info_ms = kb_launch_now_ms();
    kb_kernel_send(self, self->adopted ? KB_CHANNEL_CONTROL : KB_CHANNEL_SHELL,
                   "kernel_info_request", json_object(), NULL, 0);
}

/* ---- receiving ------------------------------------------------------------ */

static void s_became_ready(kb_kernel_t *self)
{
    kb_timer_stop(&self->ready_timer);
    kb_kernel_start_ended(self, KB_START_OK);
    kb_kernel_apply(self, KB_KEV_READY);
    if (self->callbacks.ready)
        self->callbacks.ready(self, self->arg);
}

static void s_dispatch(kb_kernel_t *self, kb_channel_t channel, const kb_msg_t *msg)
{
    if (self->state == KB_KERNEL_STARTING) {
        if (channel == KB_CHANNEL_IOPUB)
            self->io.iopub_live = true;
        else if (strcmp(msg->msg_type, "kernel_info_reply") == 0) {
            self->io.info_replied = true;
            s_nodrop_said(self, msg->content);
            json_t *info = json_object_get(msg->content, "language_info");
            const char *name = json_string_value(json_object_get(info, "name"));
            /* a copy that fails leaves the language unknown, as when none is named */
            char *copy = name && !self->io.language_info ? strdup(name) : NULL;
            if (copy)
                self->io.language_info = copy;
        }
        if (self->io.info_replied && self->io.iopub_live)
            s_became_ready(self);
        return;
    }
    if (self->state == KB_KERNEL_DEAD)
        return;
    if (self->callbacks.message)
        self->callbacks.message(self, channel, msg, self->arg);
}

static kb_drop_reason_t s_drop_reason(kb_wire_status_t status)
{
    switch (status) {
        case KB_WIRE_BAD_SIGNATURE:
            return KB_DROP_BAD_SIGNATURE;
        case KB_WIRE_REPLAYED:
            return KB_DROP_REPLAYED;
        case KB_WIRE_TOO_LARGE:
            return KB_DROP_TOO_LARGE;
        default:
            return KB_DROP_MALFORMED;
    }
}

/*  One message read whole: verify, decode and dispatch it. A message of
    more than KB_WIRE_MAX_FRAMES frames (overflow) is counted as dropped,
    too_many_parts. */
static void s_handle(kb_kernel_t *self, kb_channel_t channel, const kb_frame_t *frames,
                     size_t count, bool overflow)
{
    if (overflow) {
        kb_kernel_count_drop(self, KB_DROP_TOO_MANY_PARTS);
        return;
    }
    kb_msg_t *msg = NULL;
    kb_error_t err;
    kb_wire_status_t status = kb_wire_decode(self->conn.wire, frames, count, &msg, &err);
    if (status != KB_WIRE_OK) {
        kb_kernel_count_drop(self, s_drop_reason(status));
        zsys_debug("kernel %d: dropped a message on %s: %s", (int)self->pid,
                   kb_channel_name(channel), err.message);
        return;
    }
    if (channel == KB_CHANNEL_IOPUB)
        s_flow_check(self, msg);
    s_dispatch(self, channel, msg);
    kb_msg_destroy(&msg);
}

/*  Read the messages waiting on one socket, verify and dispatch each. The
    watch is edge-triggered: read until nothing is left, or poke it to come
    back next turn when the batch is used up (other kernels get their turn).
    A message of too many frames is read to its end and dropped. */
static void s_drain(kb_kernel_t *self, kb_io_t *io, zsock_t *sock, kb_channel_t channel)
{
    void *socket = zsock_resolve(sock);
    zmq_msg_t parts[KB_WIRE_MAX_FRAMES];
    kb_frame_t frames[KB_WIRE_MAX_FRAMES];
    size_t bytes = 0;
    for (int batch = 0;; batch++) {
        if (batch == KB_DRAIN_BATCH || bytes >= KB_DRAIN_BYTES) {
            s_events(sock, io); /* poked to come back when a message waits */
            return;
        }
        size_t count = 0;
        bool overflow = false;
        int more = 1;
        while (more) {
            zmq_msg_t part;
            zmq_msg_init(&part);
            if (zmq_msg_recv(&part, socket, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&part);
                if (count == 0)
                    return; /* nothing waiting */
                break;      /* cannot happen mid-message; treat as truncated */
            }
            more = zmq_msg_more(&part);
            if (count < KB_WIRE_MAX_FRAMES) {
                parts[count] = part;
                frames[count].data = zmq_msg_data(&parts[count]);
                frames[count].size = zmq_msg_size(&parts[count]);
                bytes += frames[count].size;
                count++;
            } else {
                overflow = true;
                zmq_msg_close(&part);
            }
        }
        s_handle(self, channel, frames, count, overflow);
        for (size_t i = 0; i < count; i++)
            zmq_msg_close(&parts[i]);
        if (self->state == KB_KERNEL_DEAD)
            return;
    }
}

/*  The shell and iopub sockets (kb_zmtp on the loop): each whole
    message, a message of too many frames. */
static kb_channel_t s_channel_of(const kb_kernel_t *self, const kb_zmtp_t *zmtp)
{
    return zmtp == self->shell ? KB_CHANNEL_SHELL : KB_CHANNEL_IOPUB;
}

static void s_on_zmtp_message(kb_zmtp_t *zmtp, const kb_frame_t *frames, size_t count, void *arg)
{
    s_handle(arg, s_channel_of(arg, zmtp), frames, count, false);
}

static void s_on_zmtp_too_many(kb_zmtp_t *zmtp, void *arg)
{
    s_handle(arg, s_channel_of(arg, zmtp), NULL, 0, true);
}

/*  The shell's connection dropped: a frame over max_message (the
    connection is made again; what the frame was is lost, and counted). */
static void s_on_shell_dropped(kb_zmtp_t *zmtp, kb_zmtp_drop_t why, void *arg)
{
    (void)zmtp;
    kb_kernel_t *self = arg;
    if (why == KB_ZMTP_TOO_LARGE && self->state != KB_KERNEL_DEAD)
        kb_kernel_count_drop(self, KB_DROP_TOO_LARGE);
}

/*  The iopub socket. What it read is all handled: a paused kernel goes on.
    Its connection dropped: judged 100 ms later (s_on_iopub_drop). */
static void s_on_iopub_drained(kb_zmtp_t *zmtp, void *arg)
{
    (void)zmtp;
    kb_kernel_resume(arg); /* its backlog is read */
}

static void s_on_iopub_dropped(kb_zmtp_t *zmtp, kb_zmtp_drop_t why, void *arg)
{
    (void)zmtp;
    (void)why;
    kb_kernel_t *self = arg;
    if (!kb_timer_active(&self->io.iopub_drop_timer))
        kb_timer_start(self->loop, &self->io.iopub_drop_timer, KB_IOPUB_DROP_JUDGED_MS, 0,
                       s_on_iopub_drop, self);
}

const kb_zmtp_callbacks_t *kb_kernel_iopub_callbacks(void)
{
    static const kb_zmtp_callbacks_t callbacks = { .message = s_on_zmtp_message,
                                                   .too_many = s_on_zmtp_too_many,
                                                   .dropped = s_on_iopub_dropped,
                                                   .drained = s_on_iopub_drained };
    return &callbacks;
}

const kb_zmtp_callbacks_t *kb_kernel_shell_callbacks(void)
{
    static const kb_zmtp_callbacks_t callbacks = { .message = s_on_zmtp_message,
                                                   .too_many = s_on_zmtp_too_many,
                                                   .dropped = s_on_shell_dropped };
    return &callbacks;
}

void kb_kernel_on_control(kb_io_t *io, void *arg)
{
    kb_kernel_t *self = arg;
    s_drain(self, io, self->io.control, KB_CHANNEL_CONTROL);
}

static void s_on_stdin(kb_io_t *io, void *arg)
{
    kb_kernel_t *self = arg;
    s_drain(self, io, self->io.stdin_sock, KB_CHANNEL_STDIN);
}
