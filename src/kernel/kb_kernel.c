/*  kb_kernel.c - launch, connect, watch and stop one Jupyter kernel.

    The kernel is started with posix_spawn in a session and process group of
    its own, with a connection file (0600) in the service's private runtime
    dir. Its death is seen through a pidfd on the loop, so it is noticed
    at once and reaped at once; its own stdout/stderr go through a pipe into
    a ring buffer kept for diagnostics. Readiness means a kernel_info_reply
    on shell and at least one message on iopub: until both came, the
    kernel_info_request is repeated, which defeats the ZeroMQ "slow joiner"
    that would otherwise lose the first outputs of the first run.
*/
#include "kernel/kb_kernel.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/rand.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KB_OUTPUT_RING 16384 /* bytes of the kernel's own output kept */
#define KB_READY_TICK_MS 10  /* readiness check period */
#define KB_KI_RESEND_MS 20   /* repeat kernel_info_request after this */
#define KB_MAX_FRAMES 1100   /* frames read of one message, more are dropped */
#define KB_DRAIN_BATCH 256   /* messages read per socket per loop turn */
#define KB_HEARTBEAT_MS 3000 /* heartbeat period */

struct kb_kernel {
    zloop_t *loop;
    kb_kernelspec_t *spec;
    kb_kernel_callbacks_t callbacks;
    void *arg;
    kb_kernel_state_t state;

    pid_t pid;
    int pidfd;
    int output_fd; /* read end of the kernel's stdout+stderr pipe */
    zmq_pollitem_t pid_item;
    zmq_pollitem_t output_item;
    bool reaped;
    int exit_status; /* -1 unless exited normally */
    int term_signal; /* 0 unless killed by a signal */
    char exit_text[96];

    char *connection_file;
    char *ipc_base; /* ipc: sockets are <ipc_base>-<n> */
    kb_wire_t *wire;
    zsock_t *shell;
    zsock_t *control;
    zsock_t *iopub;
    zsock_t *hb;
    int hb_timer;
    bool hb_waiting;    /* a ping is out and its echo has not come */
    unsigned hb_misses; /* periods in a row without an echo */

    /* readiness */
    bool info_replied;
    bool iopub_live;
    int64_t started_ms;
    int64_t last_info_ms;
    int64_t deadline_ms;
    int ready_timer;
    char *language_info;

    /* shutdown escalation */
    int shutdown_timer;
    int shutdown_step;
    double shutdown_grace;

    size_t dropped;
    char ring[KB_OUTPUT_RING];
    size_t ring_head; /* total bytes ever written */
};

static int64_t s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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

const char *kb_signal_name(int sig)
{
    switch (sig) {
        case SIGHUP:
            return "SIGHUP";
        case SIGINT:
            return "SIGINT";
        case SIGQUIT:
            return "SIGQUIT";
        case SIGILL:
            return "SIGILL";
        case SIGTRAP:
            return "SIGTRAP";
        case SIGABRT:
            return "SIGABRT";
        case SIGBUS:
            return "SIGBUS";
        case SIGFPE:
            return "SIGFPE";
        case SIGKILL:
            return "SIGKILL";
        case SIGUSR1:
            return "SIGUSR1";
        case SIGSEGV:
            return "SIGSEGV";
        case SIGUSR2:
            return "SIGUSR2";
        case SIGPIPE:
            return "SIGPIPE";
        case SIGALRM:
            return "SIGALRM";
        case SIGTERM:
            return "SIGTERM";
        case SIGXCPU:
            return "SIGXCPU";
        case SIGXFSZ:
            return "SIGXFSZ";
        case SIGSYS:
            return "SIGSYS";
        default:
            return "SIGUNKNOWN";
    }
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

/* ---- connection file ------------------------------------------------------ */

/*  Five free TCP ports on 127.0.0.1, held open together so they differ. */
static int s_free_ports(int ports[5])
{
    int fds[5];
    int i, rc = -1;
    for (i = 0; i < 5; i++)
        fds[i] = -1;
    for (i = 0; i < 5; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds[i] < 0)
            goto done;
        struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = 0 };
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof addr;
        if (bind(fds[i], (struct sockaddr *)&addr, sizeof addr) != 0
            || getsockname(fds[i], (struct sockaddr *)&addr, &len) != 0)
            goto done;
        ports[i] = ntohs(addr.sin_port);
    }
    rc = 0;
done:
    for (i = 0; i < 5; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return rc;
}

static char *s_endpoint(kb_kernel_t *self, json_t *info, const char *port_key)
{
    const char *transport = json_string_value(json_object_get(info, "transport"));
    const char *ip = json_string_value(json_object_get(info, "ip"));
    int port = (int)json_integer_value(json_object_get(info, port_key));
    if (strcmp(transport, "ipc") == 0)
        return zsys_sprintf("ipc://%s-%d", ip, port);
    return zsys_sprintf("tcp://%s:%d", ip, port);
}

static json_t *s_write_connection_file(kb_kernel_t *self, const kb_kernel_opts_t *opts, char *err,
                                       size_t errlen)
{
    unsigned char raw[32];
    char key[65];
    if (RAND_bytes(raw, sizeof raw) != 1) {
        snprintf(err, errlen, "no random bytes for the kernel's key");
        return NULL;
    }
    for (int i = 0; i < 32; i++)
        sprintf(key + 2 * i, "%02x", raw[i]);

    /*  Short names in base 36: ipc endpoints must stay short (see ipc_dir). */
    char name[32];
    size_t at = sizeof name - 1;
    unsigned long serial = opts->serial;
    name[at] = 0;
    do {
        name[--at] = "0123456789abcdefghijklmnopqrstuvwxyz"[serial % 36];
        serial /= 36;
    } while (serial && at > 1);
    name[--at] = 'k';
    memmove(name, name + at, sizeof name - at);
    self->connection_file = zsys_sprintf("%s/%s.json", opts->runtime_dir, name);

    json_t *info = json_object();
    bool ipc = opts->transport && strcmp(opts->transport, "ipc") == 0;
    if (ipc) {
        self->ipc_base
            = zsys_sprintf("%s/%s", opts->ipc_dir ? opts->ipc_dir : opts->runtime_dir, name);
        json_object_set_new(info, "transport", json_string("ipc"));
        json_object_set_new(info, "ip", json_string(self->ipc_base));
        const char *keys[]
            = { "shell_port", "iopub_port", "stdin_port", "control_port", "hb_port" };
        for (int i = 0; i < 5; i++)
            json_object_set_new(info, keys[i], json_integer(i + 1));
    } else {
        int ports[5];
        if (s_free_ports(ports) != 0) {
            snprintf(err, errlen, "no free TCP ports on 127.0.0.1: %s", strerror(errno));
            json_decref(info);
            return NULL;
        }
        json_object_set_new(info, "transport", json_string("tcp"));
        json_object_set_new(info, "ip", json_string("127.0.0.1"));
        json_object_set_new(info, "shell_port", json_integer(ports[0]));
        json_object_set_new(info, "iopub_port", json_integer(ports[1]));
        json_object_set_new(info, "stdin_port", json_integer(ports[2]));
        json_object_set_new(info, "control_port", json_integer(ports[3]));
        json_object_set_new(info, "hb_port", json_integer(ports[4]));
    }
    json_object_set_new(info, "key", json_string(key));
    json_object_set_new(info, "signature_scheme", json_string("hmac-sha256"));
    json_object_set_new(info, "kernel_name", json_string(self->spec->name));

    int fd = open(self->connection_file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write %s: %s", self->connection_file, strerror(errno));
        json_decref(info);
        return NULL;
    }
    char *text = json_dumps(info, JSON_INDENT(1));
    size_t len = strlen(text);
    ssize_t n = write(fd, text, len);
    free(text);
    close(fd);
    if (n != (ssize_t)len) {
        snprintf(err, errlen, "cannot write %s", self->connection_file);
        json_decref(info);
        return NULL;
    }
    char session[128];
    snprintf(session, sizeof session, "%02x%02x%02x%02x%02x%02x-%s", raw[2], raw[3], raw[4], raw[5],
             raw[6], raw[7], name);
    self->wire = kb_wire_new("hmac-sha256", (const unsigned char *)key, 64, session, "kernelbridge",
                             err, errlen);
    if (!self->wire) {
        json_decref(info);
        return NULL;
    }
    return info;
}

/* ---- sending -------------------------------------------------------------- */

static zsock_t *s_channel_socket(kb_kernel_t *self, kb_channel_t channel)
{
    return channel == KB_CHANNEL_CONTROL ? self->control : self->shell;
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
    if (kb_wire_encode(self->wire, msg_type, content, NULL, NULL, date, NULL, 0, &frames, &count,
                       msg_id_out, msg_id_size)
        != 0)
        return -1;
    void *socket = zsock_resolve(s_channel_socket(self, channel));
    int rc = 0;
    for (size_t i = 0; i < count && rc == 0; i++)
        if (zmq_send(socket, frames[i].data, frames[i].size, i + 1 < count ? ZMQ_SNDMORE : 0) < 0)
            rc = -1;
    kb_frames_free(frames, count);
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
    if (self->ready_timer >= 0) {
        zloop_timer_end(self->loop, self->ready_timer);
        self->ready_timer = -1;
    }
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

/*  Read every message waiting on one socket, verify and dispatch each. */
static void s_drain(kb_kernel_t *self, zsock_t *sock, kb_channel_t channel)
{
    void *socket = zsock_resolve(sock);
    zmq_msg_t parts[64];
    kb_frame_t frames[64];
    for (int batch = 0; batch < KB_DRAIN_BATCH; batch++) {
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
            if (count < 64) {
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
            if (kb_wire_decode(self->wire, frames, count, &msg, err, sizeof err) == KB_WIRE_OK) {
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

static int s_on_shell(zloop_t *loop, zsock_t *sock, void *arg)
{
    s_drain(arg, sock, KB_CHANNEL_SHELL);
    return 0;
}

static int s_on_control(zloop_t *loop, zsock_t *sock, void *arg)
{
    s_drain(arg, sock, KB_CHANNEL_CONTROL);
    return 0;
}

static int s_on_iopub(zloop_t *loop, zsock_t *sock, void *arg)
{
    s_drain(arg, sock, KB_CHANNEL_IOPUB);
    return 0;
}

/* ---- process -------------------------------------------------------------- */

static void s_ring_append(kb_kernel_t *self, const char *data, size_t len)
{
    for (size_t i = 0; i < len; i++)
        self->ring[(self->ring_head + i) % KB_OUTPUT_RING] = data[i];
    self->ring_head += len;
}

char *kb_kernel_output_tail(const kb_kernel_t *self, size_t max_bytes)
{
    size_t have = self->ring_head < KB_OUTPUT_RING ? self->ring_head : KB_OUTPUT_RING;
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
        zloop_poller_end(self->loop, &self->output_item);
        close(self->output_fd);
        self->output_fd = -1;
    }
}

static int s_on_output(zloop_t *loop, zmq_pollitem_t *item, void *arg)
{
    s_read_output(arg);
    return 0;
}

static void s_stop_timers(kb_kernel_t *self)
{
    if (self->ready_timer >= 0)
        zloop_timer_end(self->loop, self->ready_timer);
    if (self->shutdown_timer >= 0)
        zloop_timer_end(self->loop, self->shutdown_timer);
    if (self->hb_timer >= 0)
        zloop_timer_end(self->loop, self->hb_timer);
    self->ready_timer = self->shutdown_timer = self->hb_timer = -1;
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
static int s_on_pidfd(zloop_t *loop, zmq_pollitem_t *item, void *arg)
{
    kb_kernel_t *self = arg;
    int status = 0;
    pid_t rc = waitpid(self->pid, &status, WNOHANG);
    if (rc == 0)
        return 0; /* spurious */
    zloop_poller_end(self->loop, &self->pid_item);
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
        return 0;
    }
    if (self->callbacks.exited)
        self->callbacks.exited(self, self->arg); /* last call: the owner may destroy us */
    return 0;
}

static int s_on_ready_tick(zloop_t *loop, int timer_id, void *arg)
{
    kb_kernel_t *self = arg;
    if (self->state != KB_KERNEL_STARTING)
        return 0;
    int64_t now = s_now_ms();
    if (now >= self->deadline_ms) {
        zloop_timer_end(loop, self->ready_timer);
        self->ready_timer = -1;
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
        return 0;
    }
    /*  The first request waits in the socket until the kernel binds; a
        reply without an iopub message means our subscription was not live
        yet when the kernel published, so ask again. */
    if (now - self->last_info_ms >= KB_KI_RESEND_MS
        && (self->info_replied || now - self->last_info_ms >= 1000))
        s_send_kernel_info(self);
    return 0;
}

static char **s_spawn_args(kb_kernel_t *self, const kb_kernel_opts_t *opts)
{
    return kb_kernelspec_build_argv(self->spec, self->connection_file, opts->system_python);
}

static int s_spawn(kb_kernel_t *self, const kb_kernel_opts_t *opts, char *err, size_t errlen)
{
    int pipefd[2] = { -1, -1 };
    char **argv = s_spawn_args(self, opts);
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    int rc = -1;
    if (!argv || !argv[0]) {
        snprintf(err, errlen, "kernelspec %s has an empty argv", self->spec->name);
        kb_strv_free(argv);
        return -1;
    }
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        kb_strv_free(argv);
        return -1;
    }
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, pipefd[1], 1);
    posix_spawn_file_actions_adddup2(&actions, pipefd[1], 2);
    if (opts->cwd && *opts->cwd)
        posix_spawn_file_actions_addchdir_np(&actions, opts->cwd);
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr,
                             POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    int e = posix_spawnp(&self->pid, argv[0], &actions, &attr, argv, opts->envp);
    if (e != 0) {
        snprintf(err, errlen, "cannot start %s: %s%s%s", argv[0], strerror(e),
                 opts->cwd ? " (cwd " : "", opts->cwd ? opts->cwd : "");
        if (opts->cwd)
            strncat(err, ")", errlen - strlen(err) - 1);
        goto done;
    }
    self->started_ms = s_now_ms();
    self->output_fd = pipefd[0];
    pipefd[0] = -1;
    fcntl(self->output_fd, F_SETFL, O_NONBLOCK);
    rc = 0;
done:
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (pipefd[0] >= 0)
        close(pipefd[0]);
    close(pipefd[1]);
    kb_strv_free(argv);
    return rc;
}

/*  Heartbeat: a DEALER sends [empty, ping] each period; ROUTER-echo and REP
    heartbeats both send it back. Missing echoes are only counted and shown:
    death itself is seen at once through the pidfd. */
static int s_on_hb(zloop_t *loop, zsock_t *sock, void *arg)
{
    kb_kernel_t *self = arg;
    zmsg_t *echo = zmsg_recv(sock);
    zmsg_destroy(&echo);
    self->hb_waiting = false;
    self->hb_misses = 0;
    return 0;
}

static int s_on_hb_tick(zloop_t *loop, int timer_id, void *arg)
{
    kb_kernel_t *self = arg;
    if (self->state == KB_KERNEL_STARTING || self->state == KB_KERNEL_DEAD)
        return 0;
    if (self->hb_waiting)
        self->hb_misses++;
    zsock_send(self->hb, "ss", "", "ping");
    self->hb_waiting = true;
    return 0;
}

unsigned kb_kernel_heartbeat_misses(const kb_kernel_t *self)
{
    return self->hb_misses;
}

static zsock_t *s_connect(zsock_t *sock, const char *endpoint)
{
    if (!sock)
        return NULL;
    zsock_set_linger(sock, 0);
    if (zsock_connect(sock, "%s", endpoint) != 0)
        zsock_destroy(&sock);
    return sock;
}

kb_kernel_t *kb_kernel_new(zloop_t *loop, const kb_kernelspec_t *spec, const kb_kernel_opts_t *opts,
                           const kb_kernel_callbacks_t *callbacks, void *arg, char *err,
                           size_t errlen)
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
    self->ready_timer = -1;
    self->shutdown_timer = -1;
    self->hb_timer = -1;
    self->spec = kb_kernelspec_dup(spec);
    if (!self->spec) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    info = s_write_connection_file(self, opts, err, errlen);
    if (!info)
        goto fail;

    /*  Connect first: ZeroMQ queues the first kernel_info_request until the
        kernel binds, so no time is lost polling for the sockets. */
    endpoint = s_endpoint(self, info, "shell_port");
    self->shell = s_connect(zsock_new(ZMQ_DEALER), endpoint);
    zstr_free(&endpoint);
    endpoint = s_endpoint(self, info, "control_port");
    self->control = s_connect(zsock_new(ZMQ_DEALER), endpoint);
    zstr_free(&endpoint);
    endpoint = s_endpoint(self, info, "hb_port");
    self->hb = zsock_new(ZMQ_DEALER);
    if (self->hb)
        zsock_set_sndhwm(self->hb, 4);
    self->hb = s_connect(self->hb, endpoint);
    zstr_free(&endpoint);
    endpoint = s_endpoint(self, info, "iopub_port");
    self->iopub = zsock_new(ZMQ_SUB);
    if (self->iopub) {
        zsock_set_subscribe(self->iopub, "");
        zsock_set_rcvhwm(self->iopub, 100000);
    }
    self->iopub = s_connect(self->iopub, endpoint);
    zstr_free(&endpoint);
    if (!self->shell || !self->control || !self->iopub || !self->hb) {
        snprintf(err, errlen, "cannot connect sockets: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (s_spawn(self, opts, err, errlen) != 0)
        goto fail;

    self->pidfd = (int)pidfd_open(self->pid, 0);
    if (self->pidfd < 0) {
        snprintf(err, errlen, "pidfd_open: %s", strerror(errno));
        goto fail;
    }
    self->pid_item = (zmq_pollitem_t){ NULL, self->pidfd, ZMQ_POLLIN, 0 };
    self->output_item = (zmq_pollitem_t){ NULL, self->output_fd, ZMQ_POLLIN, 0 };
    zloop_poller(loop, &self->pid_item, s_on_pidfd, self);
    zloop_poller(loop, &self->output_item, s_on_output, self);
    zloop_reader(loop, self->shell, s_on_shell, self);
    zloop_reader(loop, self->control, s_on_control, self);
    zloop_reader(loop, self->iopub, s_on_iopub, self);
    zloop_reader_set_tolerant(loop, self->shell);
    zloop_reader_set_tolerant(loop, self->control);
    zloop_reader_set_tolerant(loop, self->iopub);
    zloop_reader(loop, self->hb, s_on_hb, self);
    zloop_reader_set_tolerant(loop, self->hb);
    self->hb_timer = zloop_timer(loop, KB_HEARTBEAT_MS, 0, s_on_hb_tick, self);

    double timeout = opts->start_timeout > 0 ? opts->start_timeout : 60;
    self->deadline_ms = self->started_ms + (int64_t)(timeout * 1000);
    s_send_kernel_info(self);
    self->ready_timer = zloop_timer(loop, KB_READY_TICK_MS, 0, s_on_ready_tick, self);
    json_decref(info);
    return self;
fail:
    json_decref(info);
    kb_kernel_destroy(&self);
    return NULL;
}

static void s_remove_files(kb_kernel_t *self)
{
    if (self->connection_file)
        unlink(self->connection_file);
    if (self->ipc_base)
        for (int i = 1; i <= 5; i++) {
            char path[600];
            snprintf(path, sizeof path, "%s-%d", self->ipc_base, i);
            unlink(path);
        }
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
    if (self->pidfd >= 0) {
        zloop_poller_end(self->loop, &self->pid_item);
        close(self->pidfd);
    }
    if (self->output_fd >= 0) {
        zloop_poller_end(self->loop, &self->output_item);
        close(self->output_fd);
    }
    if (self->shell)
        zloop_reader_end(self->loop, self->shell);
    if (self->control)
        zloop_reader_end(self->loop, self->control);
    if (self->iopub)
        zloop_reader_end(self->loop, self->iopub);
    if (self->hb)
        zloop_reader_end(self->loop, self->hb);
    zsock_destroy(&self->hb);
    zsock_destroy(&self->shell);
    zsock_destroy(&self->control);
    zsock_destroy(&self->iopub);
    s_remove_files(self);
    kb_wire_destroy(&self->wire);
    kb_kernelspec_destroy(&self->spec);
    free(self->connection_file);
    free(self->ipc_base);
    free(self->language_info);
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

static int s_on_shutdown_step(zloop_t *loop, int timer_id, void *arg)
{
    kb_kernel_t *self = arg;
    self->shutdown_step++;
    if (self->shutdown_step == 1) {
        kb_kernel_signal(self, SIGTERM);
        return 0;
    }
    zloop_timer_end(loop, self->shutdown_timer);
    self->shutdown_timer = -1;
    kb_kernel_signal(self, SIGKILL);
    return 0;
}

void kb_kernel_shutdown(kb_kernel_t *self, double grace)
{
    if (self->state == KB_KERNEL_DEAD || self->shutdown_timer >= 0)
        return;
    bool was_starting = self->state == KB_KERNEL_STARTING;
    if (self->ready_timer >= 0) {
        zloop_timer_end(self->loop, self->ready_timer);
        self->ready_timer = -1;
    }
    kb_kernel_apply(self, KB_KEV_SHUTDOWN);
    if (was_starting) {
        kb_kernel_signal(self, SIGKILL); /* nothing to save yet */
        return;
    }
    kb_kernel_send(self, KB_CHANNEL_CONTROL, "shutdown_request", json_pack("{s:b}", "restart", 0),
                   NULL, 0);
    size_t ms = (size_t)((grace > 0 ? grace : 1.0) * 1000);
    self->shutdown_step = 0;
    self->shutdown_timer = zloop_timer(self->loop, ms, 0, s_on_shutdown_step, self);
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
