/*  kb_kernel.c - launch, connect, watch and stop one Jupyter kernel.

    The kernel is started by kb_launch.c (connection file, process). Its
    death is seen through a pidfd on the loop, so it is noticed at once and
    reaped at once; its own stdout/stderr go through a pipe into a ring
    buffer kept for diagnostics. Readiness means a kernel_info_reply on
    shell and at least one message on iopub: until both came, the
    kernel_info_request is repeated, which defeats the ZeroMQ "slow joiner"
    that would otherwise lose the first outputs of the first run.

    An idle kernel costs the loop nothing: its watches fire only when a
    socket has input, the control socket is connected on first use
    (interrupt_request, shutdown_request), and the heartbeat runs only for
    a kernel without a pidfd (the pidfd says at once when it dies).
*/
#include "kernel/kb_kernel.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernel/kb_launch.h"

#define KB_OUTPUT_RING 16384 /* bytes of the kernel's own output kept */
#define KB_READY_TICK_MS 10  /* readiness check period */
#define KB_KI_RESEND_MS 20   /* repeat kernel_info_request after this */
#define KB_MAX_PARTS 64      /* frames read of one message; longer ones are dropped */
#define KB_DRAIN_BATCH 256   /* messages read per socket per loop turn */
#define KB_HEARTBEAT_MS 3000 /* heartbeat period */

struct kb_kernel {
    kb_loop_t *loop;
    kb_kernelspec_t *spec;
    kb_kernel_callbacks_t callbacks;
    void *arg;
    kb_kernel_state_t state;

    pid_t pid;
    int pidfd;
    int output_fd; /* read end of the kernel's stdout+stderr pipe */
    kb_io_t pid_io;
    kb_io_t output_io;
    bool reaped;
    int exit_status; /* -1 unless exited normally */
    int term_signal; /* 0 unless killed by a signal */
    char exit_text[96];

    kb_connection_t conn;
    char *control_endpoint; /* connected on first use */
    char *hb_endpoint;
    zsock_t *shell;
    zsock_t *control;
    zsock_t *iopub;
    zsock_t *hb; /* only without a pidfd */
    kb_io_t shell_io, control_io, iopub_io, hb_io;
    kb_timer_t hb_timer;
    bool hb_waiting;    /* a ping is out and its echo has not come */
    unsigned hb_misses; /* periods in a row without an echo */

    /* readiness */
    bool info_replied;
    bool iopub_live;
    int64_t started_ms;
    int64_t last_info_ms;
    int64_t deadline_ms;
    kb_timer_t ready_timer;
    char *language_info;

    /* shutdown escalation */
    kb_timer_t shutdown_timer;
    int shutdown_step;
    double shutdown_grace;

    size_t dropped;
    char *ring;       /* KB_OUTPUT_RING bytes, made when the kernel first writes */
    size_t ring_head; /* total bytes ever written */
};

static int64_t s_now_ms(void)
{
    return kb_launch_now_ms();
}

static void s_iso_now(char *buf, size_t size)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, size - n, ".%06ldZ", (long)tv.tv_usec);
}

const char *kb_kernel_state_name(kb_kernel_state_t state)
{
    static const char *names[] = { "starting", "idle", "busy", "interrupting", "dying", "dead" };
    return names[state];
}

void kb_kernel_set_callbacks(kb_kernel_t *self, const kb_kernel_callbacks_t *callbacks, void *arg)
{
    self->callbacks = *callbacks;
    self->arg = arg;
}

kb_kernel_state_t kb_kernel_state(const kb_kernel_t *self)
{
    return self->state;
}

/*  The one place where the lifecycle moves. */
kb_kernel_state_t kb_kernel_apply(kb_kernel_t *self, kb_kernel_event_t event)
{
    kb_kernel_state_t s = self->state;
    switch (event) {
        case KB_KEV_READY:
            if (s == KB_KERNEL_STARTING)
                s = KB_KERNEL_IDLE;
            break;
        case KB_KEV_EXECUTE:
            if (s == KB_KERNEL_IDLE)
                s = KB_KERNEL_BUSY;
            break;
        case KB_KEV_DONE:
            if (s == KB_KERNEL_BUSY || s == KB_KERNEL_INTERRUPTING)
                s = KB_KERNEL_IDLE;
            break;
        case KB_KEV_INTERRUPT:
            if (s == KB_KERNEL_BUSY)
                s = KB_KERNEL_INTERRUPTING;
            break;
        case KB_KEV_SHUTDOWN:
            if (s != KB_KERNEL_DEAD)
                s = KB_KERNEL_DYING;
            break;
        case KB_KEV_EXITED:
            s = KB_KERNEL_DEAD;
            break;
    }
    self->state = s;
    return s;
}

static char *s_endpoint(json_t *info, const char *port_key)
{
    const char *transport = json_string_value(json_object_get(info, "transport"));
    const char *ip = json_string_value(json_object_get(info, "ip"));
    int port = (int)json_integer_value(json_object_get(info, port_key));
    if (strcmp(transport, "ipc") == 0)
        return zsys_sprintf("ipc://%s-%d", ip, port);
    return zsys_sprintf("tcp://%s:%d", ip, port);
}

/* ---- sending -------------------------------------------------------------- */

static void s_on_control(kb_io_t *io, void *arg);

static zsock_t *s_connect(zsock_t *sock, const char *endpoint)
{
    if (!sock)
        return NULL;
    zsock_set_linger(sock, 0);
    if (zsock_connect(sock, "%s", endpoint) != 0)
        zsock_destroy(&sock);
    return sock;
}

/*  The control socket, connected on first use: most kernels never need it. */
static zsock_t *s_control(kb_kernel_t *self)
{
    if (self->control)
        return self->control;
    self->control = s_connect(zsock_new(ZMQ_DEALER), self->control_endpoint);
    if (self->control
        && kb_io_start_zmq(self->loop, &self->control_io, zsock_resolve(self->control),
                           s_on_control, self)
               != 0)
        zsock_destroy(&self->control);
    return self->control;
}

int kb_kernel_send(kb_kernel_t *self, kb_channel_t channel, const char *msg_type, json_t *content,
                   char *msg_id_out, size_t msg_id_size)
{
    char date[40];
    s_iso_now(date, sizeof date);
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
    zsock_t *sock = control ? s_control(self) : self->shell;
    int rc = sock ? 0 : -1;
    for (size_t i = 0; i < count && rc == 0; i++)
        if (zmq_send(zsock_resolve(sock), frames[i].data, frames[i].size,
                     i + 1 < count ? ZMQ_SNDMORE : 0)
            < 0)
            rc = -1;
    kb_frames_free(frames, count);
    /*  A send may take the socket's ZMQ_FD signal while replies wait. */
    kb_io_poke(control ? &self->control_io : &self->shell_io);
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

static void s_send_kernel_info(kb_kernel_t *self)
{
    self->last_info_ms = s_now_ms();
    kb_kernel_send(self, KB_CHANNEL_SHELL, "kernel_info_request", json_object(), NULL, 0);
}

/* ---- receiving ------------------------------------------------------------ */

static void s_became_ready(kb_kernel_t *self)
{
    kb_timer_stop(&self->ready_timer);
    kb_kernel_apply(self, KB_KEV_READY);
    if (self->callbacks.ready)
        self->callbacks.ready(self, self->arg);
}

static void s_dispatch(kb_kernel_t *self, kb_channel_t channel, const kb_msg_t *msg)
{
    if (self->state == KB_KERNEL_STARTING) {
        if (channel == KB_CHANNEL_IOPUB)
            self->iopub_live = true;
        else if (strcmp(msg->msg_type, "kernel_info_reply") == 0) {
            self->info_replied = true;
            json_t *info = json_object_get(msg->content, "language_info");
            const char *name = json_string_value(json_object_get(info, "name"));
            if (name && !self->language_info)
                self->language_info = strdup(name);
        }
        if (self->info_replied && self->iopub_live)
            s_became_ready(self);
        return;
    }
    if (self->state == KB_KERNEL_DEAD)
        return;
    if (self->callbacks.message)
        self->callbacks.message(self, channel, msg, self->arg);
}

/*  Read the messages waiting on one socket, verify and dispatch each. The
    watch is edge-triggered: read until nothing is left, or poke it to come
    back next turn when the batch is used up (other kernels get their turn). */
static void s_drain(kb_kernel_t *self, kb_io_t *io, zsock_t *sock, kb_channel_t channel)
{
    void *socket = zsock_resolve(sock);
    zmq_msg_t parts[KB_MAX_PARTS];
    kb_frame_t frames[KB_MAX_PARTS];
    for (int batch = 0;; batch++) {
        if (batch == KB_DRAIN_BATCH) {
            kb_io_poke(io);
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
            if (count < KB_MAX_PARTS) {
                parts[count] = part;
                frames[count].data = zmq_msg_data(&parts[count]);
                frames[count].size = zmq_msg_size(&parts[count]);
                count++;
            } else {
                overflow = true;
                zmq_msg_close(&part);
            }
        }
        if (overflow) {
            self->dropped++;
        } else {
            kb_msg_t *msg = NULL;
            char err[256];
            if (kb_wire_decode(self->conn.wire, frames, count, &msg, err, sizeof err)
                == KB_WIRE_OK) {
                s_dispatch(self, channel, msg);
                kb_msg_destroy(&msg);
            } else {
                self->dropped++;
                zsys_debug("kernel %d: dropped a message on %s: %s", (int)self->pid,
                           channel == KB_CHANNEL_IOPUB ? "iopub" : "shell", err);
            }
        }
        for (size_t i = 0; i < count; i++)
            zmq_msg_close(&parts[i]);
        if (self->state == KB_KERNEL_DEAD)
            return;
    }
}

static void s_on_shell(kb_io_t *io, void *arg)
{
    kb_kernel_t *self = arg;
    s_drain(self, io, self->shell, KB_CHANNEL_SHELL);
}

static void s_on_control(kb_io_t *io, void *arg)
{
    kb_kernel_t *self = arg;
    s_drain(self, io, self->control, KB_CHANNEL_CONTROL);
}

static void s_on_iopub(kb_io_t *io, void *arg)
{
    kb_kernel_t *self = arg;
    s_drain(self, io, self->iopub, KB_CHANNEL_IOPUB);
}

/* ---- process -------------------------------------------------------------- */

static void s_ring_append(kb_kernel_t *self, const char *data, size_t len)
{
    if (!self->ring && !(self->ring = malloc(KB_OUTPUT_RING)))
        return; /* a diagnostic only: without memory, it is not kept */
    for (size_t i = 0; i < len; i++)
        self->ring[(self->ring_head + i) % KB_OUTPUT_RING] = data[i];
    self->ring_head += len;
}

char *kb_kernel_output_tail(const kb_kernel_t *self, size_t max_bytes)
{
    size_t have = !self->ring                        ? 0
                  : self->ring_head < KB_OUTPUT_RING ? self->ring_head
                                                     : KB_OUTPUT_RING;
    size_t len = have < max_bytes ? have : max_bytes;
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    size_t start = self->ring_head - len;
    for (size_t i = 0; i < len; i++)
        out[i] = self->ring[(start + i) % KB_OUTPUT_RING];
    out[len] = 0;
    return out;
}

static void s_read_output(kb_kernel_t *self)
{
    char buf[4096];
    while (self->output_fd >= 0) {
        ssize_t n = read(self->output_fd, buf, sizeof buf);
        if (n > 0) {
            s_ring_append(self, buf, (size_t)n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        kb_io_stop(&self->output_io);
        close(self->output_fd);
        self->output_fd = -1;
    }
}

static void s_on_output(kb_io_t *io, void *arg)
{
    s_read_output(arg);
}

static void s_stop_timers(kb_kernel_t *self)
{
    kb_timer_stop(&self->ready_timer);
    kb_timer_stop(&self->shutdown_timer);
    kb_timer_stop(&self->hb_timer);
}

static void s_record_exit(kb_kernel_t *self, int status)
{
    self->reaped = true;
    if (WIFEXITED(status)) {
        self->exit_status = WEXITSTATUS(status);
        snprintf(self->exit_text, sizeof self->exit_text, "kernel exited with status %d",
                 self->exit_status);
    } else if (WIFSIGNALED(status)) {
        self->term_signal = WTERMSIG(status);
        snprintf(self->exit_text, sizeof self->exit_text, "kernel killed by %s",
                 kb_signal_name(self->term_signal));
    }
}

/*  The process is gone: reap it, sweep its process group, tell the owner. */
static void s_on_pidfd(kb_io_t *io, void *arg)
{
    kb_kernel_t *self = arg;
    int status = 0;
    pid_t rc = waitpid(self->pid, &status, WNOHANG);
    if (rc == 0)
        return; /* spurious */
    kb_io_stop(&self->pid_io);
    if (rc == self->pid)
        s_record_exit(self, status);
    else
        self->reaped = true;
    kill(-self->pid, SIGKILL); /* whatever the kernel left running in its group */
    if (self->output_fd >= 0)
        s_read_output(self);
    s_stop_timers(self);
    kb_kernel_state_t was = self->state;
    kb_kernel_apply(self, KB_KEV_EXITED);
    if (was == KB_KERNEL_STARTING) {
        char why[512];
        char *tail = kb_kernel_output_tail(self, 2000);
        snprintf(why, sizeof why, "%s before it was ready; its output ends with: %s",
                 self->exit_text, tail && *tail ? tail : "(nothing)");
        free(tail);
        if (self->callbacks.start_failed)
            self->callbacks.start_failed(self, why, self->arg);
        return;
    }
    if (self->callbacks.exited)
        self->callbacks.exited(self, self->arg); /* the last call back */
}

static void s_on_ready_tick(kb_timer_t *timer, void *arg)
{
    kb_kernel_t *self = arg;
    if (self->state != KB_KERNEL_STARTING)
        return;
    int64_t now = s_now_ms();
    if (now >= self->deadline_ms) {
        kb_timer_stop(&self->ready_timer);
        char why[1024];
        char *tail = kb_kernel_output_tail(self, 2000);
        snprintf(why, sizeof why, "kernel not ready after %.1f s (%s); its output ends with: %s",
                 (now - self->started_ms) / 1000.0,
                 self->info_replied ? "no iopub message came" : "no kernel_info_reply came",
                 tail && *tail ? tail : "(nothing)");
        free(tail);
        kb_kernel_signal(self, SIGKILL);
        kb_kernel_apply(self, KB_KEV_SHUTDOWN);
        if (self->callbacks.start_failed)
            self->callbacks.start_failed(self, why, self->arg);
        return;
    }
    /*  The first request waits in the socket until the kernel binds; a
        reply without an iopub message means our subscription was not live
        yet when the kernel published, so ask again. */
    if (now - self->last_info_ms >= KB_KI_RESEND_MS
        && (self->info_replied || now - self->last_info_ms >= 1000))
        s_send_kernel_info(self);
}

/*  Heartbeat, for a kernel without a pidfd: a DEALER sends [empty, ping]
    each period; ROUTER-echo and REP heartbeats both send it back. Missing
    echoes are counted and shown. With a pidfd, death is seen at once and a
    stopped process is read from /proc, so no heartbeat runs. */
static void s_on_hb(kb_io_t *io, void *arg)
{
    kb_kernel_t *self = arg;
    zmsg_t *echo;
    while ((echo = zmsg_recv_nowait(self->hb))) {
        zmsg_destroy(&echo);
        self->hb_waiting = false;
        self->hb_misses = 0;
    }
}

static void s_on_hb_tick(kb_timer_t *timer, void *arg)
{
    kb_kernel_t *self = arg;
    if (self->state == KB_KERNEL_STARTING || self->state == KB_KERNEL_DEAD)
        return;
    if (self->hb_waiting)
        self->hb_misses++;
    zsock_send(self->hb, "ss", "", "ping");
    kb_io_poke(&self->hb_io);
    self->hb_waiting = true;
}

static int s_start_heartbeat(kb_kernel_t *self)
{
    self->hb = zsock_new(ZMQ_DEALER);
    if (self->hb)
        zsock_set_sndhwm(self->hb, 4);
    self->hb = s_connect(self->hb, self->hb_endpoint);
    if (!self->hb
        || kb_io_start_zmq(self->loop, &self->hb_io, zsock_resolve(self->hb), s_on_hb, self) != 0)
        return -1;
    kb_timer_start(self->loop, &self->hb_timer, KB_HEARTBEAT_MS, KB_HEARTBEAT_MS, s_on_hb_tick,
                   self);
    return 0;
}

/*  A stopped or traced process (state T or t in /proc/<pid>/stat). */
static bool s_process_stopped(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *file = fopen(path, "re");
    if (!file)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, file);
    fclose(file);
    buf[n] = 0;
    const char *close_paren = strrchr(buf, ')'); /* the name may hold spaces and parens */
    return close_paren && close_paren[1] == ' ' && (close_paren[2] == 'T' || close_paren[2] == 't');
}

unsigned kb_kernel_heartbeat_misses(const kb_kernel_t *self)
{
    if (self->hb || self->state == KB_KERNEL_DEAD || self->pid <= 0)
        return self->hb_misses;
    return s_process_stopped(self->pid) ? 2 : 0;
}

kb_kernel_t *kb_kernel_new(kb_loop_t *loop, const kb_kernelspec_t *spec,
                           const kb_kernel_opts_t *opts, const kb_kernel_callbacks_t *callbacks,
                           void *arg, char *err, size_t errlen)
{
    kb_kernel_t *self = calloc(1, sizeof *self);
    json_t *info = NULL;
    char *endpoint = NULL;
    if (!self) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    self->loop = loop;
    self->callbacks = *callbacks;
    self->arg = arg;
    self->state = KB_KERNEL_STARTING;
    self->pid = -1;
    self->pidfd = -1;
    self->output_fd = -1;
    self->exit_status = -1;
    kb_timer_init(&self->ready_timer);
    kb_timer_init(&self->shutdown_timer);
    kb_timer_init(&self->hb_timer);
    self->spec = kb_kernelspec_dup(spec);
    if (!self->spec) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    info = kb_connection_write(&self->conn, self->spec, opts, err, errlen);
    if (!info)
        goto fail;

    /*  Connect first: ZeroMQ queues the first kernel_info_request until the
        kernel binds, so no time is lost polling for the sockets. */
    endpoint = s_endpoint(info, "shell_port");
    self->shell = s_connect(zsock_new(ZMQ_DEALER), endpoint);
    zstr_free(&endpoint);
    self->control_endpoint = s_endpoint(info, "control_port");
    self->hb_endpoint = s_endpoint(info, "hb_port");
    endpoint = s_endpoint(info, "iopub_port");
    self->iopub = zsock_new(ZMQ_SUB);
    if (self->iopub) {
        zsock_set_subscribe(self->iopub, "");
        zsock_set_rcvhwm(self->iopub, 100000);
    }
    self->iopub = s_connect(self->iopub, endpoint);
    zstr_free(&endpoint);
    if (!self->shell || !self->iopub) {
        snprintf(err, errlen, "cannot connect sockets: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (kb_launch_spawn(self->spec, self->conn.connection_file, opts, &self->pid, &self->output_fd,
                        &self->started_ms, err, errlen)
        != 0)
        goto fail;

    if (kb_io_start(loop, &self->output_io, self->output_fd, s_on_output, self) != 0
        || kb_io_start_zmq(loop, &self->shell_io, zsock_resolve(self->shell), s_on_shell, self) != 0
        || kb_io_start_zmq(loop, &self->iopub_io, zsock_resolve(self->iopub), s_on_iopub, self)
               != 0) {
        snprintf(err, errlen, "cannot watch the kernel's sockets: %s", strerror(errno));
        goto fail;
    }
    /*  Linux before 5.3 has no pidfd: the heartbeat is all there is then. */
    self->pidfd = (int)pidfd_open(self->pid, 0);
    if (self->pidfd < 0 && errno == ENOSYS) {
        if (s_start_heartbeat(self) != 0) {
            snprintf(err, errlen, "cannot start the heartbeat: %s", zmq_strerror(zmq_errno()));
            goto fail;
        }
    } else if (self->pidfd < 0
               || kb_io_start(loop, &self->pid_io, self->pidfd, s_on_pidfd, self) != 0) {
        snprintf(err, errlen, "pidfd_open: %s", strerror(errno));
        goto fail;
    }

    double timeout = opts->start_timeout > 0 ? opts->start_timeout : 60;
    self->deadline_ms = self->started_ms + (int64_t)(timeout * 1000);
    s_send_kernel_info(self);
    kb_timer_start(loop, &self->ready_timer, KB_READY_TICK_MS, KB_READY_TICK_MS, s_on_ready_tick,
                   self);
    json_decref(info);
    return self;
fail:
    json_decref(info);
    kb_kernel_destroy(&self);
    return NULL;
}

static void s_close_socket(kb_io_t *io, zsock_t **sock_p)
{
    kb_io_stop(io);
    zsock_destroy(sock_p);
}

void kb_kernel_destroy(kb_kernel_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_kernel_t *self = *self_p;
    *self_p = NULL;
    s_stop_timers(self);
    if (self->pid > 0 && !self->reaped) {
        kill(-self->pid, SIGKILL);
        kill(self->pid, SIGKILL);
        int status;
        if (waitpid(self->pid, &status, 0) == self->pid)
            s_record_exit(self, status);
    }
    kb_io_stop(&self->pid_io);
    if (self->pidfd >= 0)
        close(self->pidfd);
    kb_io_stop(&self->output_io);
    if (self->output_fd >= 0)
        close(self->output_fd);
    s_close_socket(&self->hb_io, &self->hb);
    s_close_socket(&self->shell_io, &self->shell);
    s_close_socket(&self->control_io, &self->control);
    s_close_socket(&self->iopub_io, &self->iopub);
    kb_connection_remove(&self->conn);
    kb_wire_destroy(&self->conn.wire);
    kb_kernelspec_destroy(&self->spec);
    free(self->control_endpoint);
    free(self->hb_endpoint);
    free(self->language_info);
    free(self->ring);
    free(self);
}

int kb_kernel_interrupt(kb_kernel_t *self)
{
    if (self->state == KB_KERNEL_DEAD || self->state == KB_KERNEL_DYING)
        return -1;
    kb_kernel_apply(self, KB_KEV_INTERRUPT);
    if (self->spec->interrupt_mode && strcmp(self->spec->interrupt_mode, "message") == 0)
        return kb_kernel_send(self, KB_CHANNEL_CONTROL, "interrupt_request", json_object(), NULL,
                              0);
    return kill(-self->pid, SIGINT) == 0 || kill(self->pid, SIGINT) == 0 ? 0 : -1;
}

void kb_kernel_signal(kb_kernel_t *self, int sig)
{
    if (self->pid > 0 && !self->reaped) {
        kill(-self->pid, sig);
        kill(self->pid, sig);
    }
}

static void s_on_shutdown_step(kb_timer_t *timer, void *arg)
{
    kb_kernel_t *self = arg;
    self->shutdown_step++;
    if (self->shutdown_step == 1) {
        kb_kernel_signal(self, SIGTERM);
        return;
    }
    kb_timer_stop(&self->shutdown_timer);
    kb_kernel_signal(self, SIGKILL);
}

void kb_kernel_shutdown(kb_kernel_t *self, double grace)
{
    if (self->state == KB_KERNEL_DEAD || kb_timer_active(&self->shutdown_timer))
        return;
    bool was_starting = self->state == KB_KERNEL_STARTING;
    kb_timer_stop(&self->ready_timer);
    kb_kernel_apply(self, KB_KEV_SHUTDOWN);
    if (was_starting) {
        kb_kernel_signal(self, SIGKILL); /* nothing to save yet */
        return;
    }
    kb_kernel_send(self, KB_CHANNEL_CONTROL, "shutdown_request", json_pack("{s:b}", "restart", 0),
                   NULL, 0);
    size_t ms = (size_t)((grace > 0 ? grace : 1.0) * 1000);
    self->shutdown_step = 0;
    kb_timer_start(self->loop, &self->shutdown_timer, ms, ms, s_on_shutdown_step, self);
}

pid_t kb_kernel_pid(const kb_kernel_t *self)
{
    return self->pid;
}

const kb_kernelspec_t *kb_kernel_spec(const kb_kernel_t *self)
{
    return self->spec;
}

int kb_kernel_exit_status(const kb_kernel_t *self)
{
    return self->exit_status;
}

int kb_kernel_term_signal(const kb_kernel_t *self)
{
    return self->term_signal;
}

const char *kb_kernel_exit_text(kb_kernel_t *self)
{
    if (!self->exit_text[0])
        snprintf(self->exit_text, sizeof self->exit_text, "kernel gone");
    return self->exit_text;
}

size_t kb_kernel_dropped(const kb_kernel_t *self)
{
    return self->dropped;
}

const char *kb_kernel_language_info(const kb_kernel_t *self)
{
    return self->language_info;
}
