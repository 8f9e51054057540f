/*  kb_kernel.c - launch or adopt, connect, watch and stop one Jupyter
    kernel.

    The kernel is started by kb_launch.c (connection file, log, process),
    or was started by someone else and is adopted: then its pid is trusted
    only together with its start time, checked again before every signal.
    Its death is seen through a pidfd on the loop, so it is noticed at once
    (and reaped, when it is our child); its own stdout/stderr go to a log
    file that outlives the daemon, cut to its tail once a second when it
    has grown too long. Readiness means a kernel_info_reply (on shell; on
    control for an adopted kernel, which may be busy on shell) and at least
    one message on iopub: until both came, the kernel_info_request is
    repeated, which defeats the ZeroMQ "slow joiner" that would otherwise
    lose the first outputs of the first run.

    An idle kernel costs the loop nothing: its watches fire only when a
    socket has input, the control socket is connected on first use
    (interrupt_request, shutdown_request), and the heartbeat runs only for
    a kernel without a pidfd (the pidfd says at once when it dies). The
    one periodic cost is the log check: one fstat a second.
*/
#include "kernel/kb_kernel.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/rand.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernel/kb_kernel_impl.h"
#include "kernel/kb_launch.h"
#include "kernel/kb_proctree.h"

#define KB_READY_TICK_MS 10  /* readiness check period */
#define KB_KI_RESEND_MS 20   /* repeat kernel_info_request after this */
#define KB_HEARTBEAT_MS 3000 /* heartbeat period */
#define KB_DYING_HB_MS 200   /* heartbeat period of an attached kernel shutting down */
#define KB_LOG_CHECK_MS 1000 /* how often the log's size is checked */
/*  Of the log, in a start failure's reason: its end must fit in an error's
    message (1024 bytes) after what is said before it. */
#define KB_TAIL_BYTES 640

static int64_t s_now_ms(void)
{
    return kb_launch_now_ms();
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
    if (transport && strcmp(transport, "ipc") == 0)
        return zsys_sprintf("ipc://%s-%d", ip, port);
    if (strchr(ip, ':'))
        return zsys_sprintf("tcp://[%s]:%d", ip, port); /* IPv6 literal */
    return zsys_sprintf("tcp://%s:%d", ip, port);
}

/* ---- the process, ours or not ------------------------------------------- */

/*  Whether pid is still the kernel. A child we spawned cannot be another
    process before we reap it; any other pid is trusted only while its
    start time is the one recorded, so that a reused pid is never hit. */
static bool s_still_ours(const kb_kernel_t *self)
{
    if (self->pid <= 0 || self->reaped)
        return false;
    return self->own_child || kb_proc_start_time(self->pid) == self->pid_start;
}

/*  sig to the kernel's process group (and to the kernel, should it have
    left its group), once it is known to be the kernel still; a group
    paused for its output's sake goes on, to take sig. 0 / -1. */
static int s_kill(kb_kernel_t *self, int sig)
{
    if (!s_still_ours(self)) {
        errno = ESRCH;
        return -1;
    }
    int group = kill(-self->pgid, sig);
    kb_kernel_resume(self);
    /*  The leader is one of its group unless it left it: signalled again,
        it would get sig twice when it took the first already (a second
        SIGINT lands while ipykernel reports the first KeyboardInterrupt,
        which then comes out as a bare stderr line and no error). */
    if (group == 0 && getpgid(self->pid) == self->pgid)
        return 0;
    int leader = kill(self->pid, sig);
    return group == 0 || leader == 0 ? 0 : -1;
}

/*  After the leader's exit: SIGKILL whatever it left in its group. For a
    kernel not our child, only while its pid is not another live process
    (a group id is not reused while any member lives). */
static void s_sweep_group(const kb_kernel_t *self)
{
    if (self->pgid <= 0)
        return;
    unsigned long long start = self->own_child ? 0 : kb_proc_start_time(self->pid);
    if (start == 0 || start == self->pid_start)
        kill(-self->pgid, SIGKILL);
}

/* ---- process -------------------------------------------------------------- */

char *kb_kernel_output_tail(const kb_kernel_t *self, size_t max_bytes)
{
    return kb_launch_log_tail(self->conn.log_file, max_bytes);
}

static void s_on_log_tick(kb_timer_t *timer, void *arg)
{
    kb_kernel_t *self = arg;
    if (kb_launch_log_trim_fd(self->log_fd) < 0)
        zsys_debug("kernel %d: cannot trim its log %s: %s", (int)self->pid, self->conn.log_file,
                   strerror(errno));
}

static void s_stop_timers(kb_kernel_t *self)
{
    kb_timer_stop(&self->ready_timer);
    kb_timer_stop(&self->shutdown_timer);
    kb_timer_stop(&self->hb_timer);
    kb_timer_stop(&self->log_timer);
    kb_timer_stop(&self->exit_timer);
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

/*  The kernel is gone: stop watching, tell the owner (the last call back). */
static void s_gone(kb_kernel_t *self)
{
    kb_io_stop(&self->pid_io);
    s_stop_timers(self);
    kb_kernel_state_t was = self->state;
    kb_kernel_apply(self, KB_KEV_EXITED);
    if (was == KB_KERNEL_STARTING) {
        kb_kernel_start_ended(self, KB_START_FAILED);
        char why[800];
        char *tail = kb_kernel_output_tail(self, KB_TAIL_BYTES);
        snprintf(why, sizeof why, "%s before it was ready; its output ends with: %s",
                 kb_kernel_exit_text(self), tail && *tail ? tail : "(nothing)");
        free(tail);
        if (self->callbacks.start_failed)
            self->callbacks.start_failed(self, why, self->arg);
        return;
    }
    if (self->callbacks.exited)
        self->callbacks.exited(self, self->arg);
}

/*  The process is gone: reap it (when it is our child), sweep its process
    group, tell the owner. A pidfd of a process that is not our child is
    readable once it exits, but waitpid says ECHILD: the status is unknown. */
static void s_on_pidfd(kb_io_t *io, void *arg)
{
    kb_kernel_t *self = arg;
    int status = 0;
    pid_t rc = waitpid(self->pid, &status, WNOHANG);
    if (rc == 0)
        return; /* our child, not exited: spurious */
    kb_io_stop(&self->pid_io);
    if (rc == self->pid)
        s_record_exit(self, status);
    else {
        self->reaped = true; /* by someone else: its status is unknown */
        if (self->adopted)
            snprintf(self->exit_text, sizeof self->exit_text,
                     "kernel exited (not our child: status unknown)");
    }
    s_sweep_group(self); /* whatever the kernel left running in its group */
    s_gone(self);
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
        char *tail = kb_kernel_output_tail(self, KB_TAIL_BYTES);
        snprintf(why, sizeof why, "%s not ready after %.1f s (%s); its output ends with: %s",
                 self->adopted ? "adopted kernel" : "kernel", (now - self->started_ms) / 1000.0,
                 self->io.info_replied ? "no iopub message came"
                 : self->adopted       ? "no kernel_info_reply came on control: a wrong key, or "
                                         "a kernel that does not answer"
                                       : "no kernel_info_reply came",
                 tail && *tail ? tail : "(nothing)");
        free(tail);
        /*  One we launched is killed; an adopted one is left as it is, for
            its owner to destroy (kill) or release. */
        if (!self->adopted)
            kb_kernel_signal(self, SIGKILL);
        kb_kernel_start_ended(self, KB_START_TIMEOUT);
        kb_kernel_apply(self, KB_KEV_SHUTDOWN);
        if (self->callbacks.start_failed)
            self->callbacks.start_failed(self, why, self->arg);
        return;
    }
    /*  The first request waits in the socket until the kernel binds; a
        reply without an iopub message means our subscription was not live
        yet when the kernel published, so ask again. */
    if (now - self->io.last_info_ms >= KB_KI_RESEND_MS
        && (self->io.info_replied || now - self->io.last_info_ms >= 1000))
        kb_kernel_send_kernel_info(self);
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
    if (self->hb_waiting && self->state == KB_KERNEL_DYING && self->pid == 0) {
        snprintf(self->exit_text, sizeof self->exit_text,
                 "attached kernel stopped answering its heartbeat after shutdown");
        s_gone(self); /* an attached kernel shutting down: silence is its exit */
        return;
    }
    zsock_send(self->hb, "ss", "", "ping");
    kb_io_poke(&self->hb_io);
    self->hb_waiting = true;
}

static int s_start_heartbeat(kb_kernel_t *self)
{
    self->hb = zsock_new(ZMQ_DEALER);
    if (self->hb)
        zsock_set_sndhwm(self->hb, 4);
    self->hb = kb_kernel_connect_endpoint(self->hb, self->hb_endpoint);
    if (!self->hb
        || kb_io_start_zmq(self->loop, &self->hb_io, zsock_resolve(self->hb), s_on_hb, self) != 0)
        return -1;
    kb_timer_start_coarse(self->loop, &self->hb_timer, KB_HEARTBEAT_MS, s_on_hb_tick, self);
    return 0;
}

/*  A kernel with nothing yet: no process, no sockets, timers stopped. */
kb_kernel_t *kb_kernel_blank(kb_loop_t *loop, const kb_kernelspec_t *spec,
                             const kb_kernel_callbacks_t *callbacks, void *arg, kb_error_t *err)
{
    kb_kernel_t *self = calloc(1, sizeof *self);
    if (!self) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return NULL;
    }
    self->loop = loop;
    self->callbacks = *callbacks;
    self->arg = arg;
    self->state = KB_KERNEL_STARTING;
    self->pid = -1;
    self->pidfd = -1;
    self->log_fd = -1;
    self->exit_status = -1;
    kb_timer_init(&self->ready_timer);
    kb_timer_init(&self->shutdown_timer);
    kb_timer_init(&self->hb_timer);
    kb_timer_init(&self->log_timer);
    kb_timer_init(&self->exit_timer);
    kb_kernel_io_init(self);
    self->spec = kb_kernelspec_dup(spec);
    if (!self->spec) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        free(self);
        return NULL;
    }
    return self;
}

/*  Whether the kernel was launched asking its output to wait rather than
    drop (its own /proc/<pid>/environ, which a fork shares with its
    template): its iopub queue then starts small (kb_kernel_io.c). An
    attached kernel is not asked. */
static void s_read_nodrop(kb_kernel_t *self)
{
    enum { ENV_MAX = 256 << 10 };
    char *env = self->pid > 0 ? malloc(ENV_MAX) : NULL;
    ssize_t n = env ? kb_proc_read(self->pid, "environ", env, ENV_MAX) : -1;
    self->nodrop_asked = n > 0 && kb_kernel_env_asks_nodrop(env, (size_t)n);
    free(env);
}

/*  An adopted kernel's record taken over (kb_kernel_adopt.c): its pid
    (0: attached), which is ours with its start time, and its connection
    and files. 0, or -1 with err. */
int kb_kernel_take_record(kb_kernel_t *self, const kb_adopt_opts_t *opts, kb_error_t *err)
{
    self->max_message = opts->max_message;
    self->adopted = true;
    self->pid = opts->pid;
    if (opts->pid > 0) {
        self->pgid = opts->pid; /* our kernels lead their own group */
        self->pid_start = opts->pid_start;
        self->remove_files = true; /* it is ours now */
        s_read_nodrop(self);
    }
    self->started_ms = s_now_ms();
    self->info = json_deep_copy(opts->connection);
    self->conn.connection_file = opts->connection_file ? strdup(opts->connection_file) : NULL;
    self->conn.log_file = opts->log_file ? strdup(opts->log_file) : NULL;
    const char *transport = json_string_value(json_object_get(self->info, "transport"));
    const char *ip = json_string_value(json_object_get(self->info, "ip"));
    if (opts->pid > 0 && transport && strcmp(transport, "ipc") == 0 && ip) {
        static const char *ports[]
            = { "shell_port", "iopub_port", "stdin_port", "control_port", "hb_port" };
        if (!(self->conn.ipc_base = strdup(ip)))
            goto nomem;
        for (int i = 0; i < 5; i++)
            self->conn.ipc_ports[i]
                = (int)json_integer_value(json_object_get(self->info, ports[i]));
    }
    if (!self->info || (opts->connection_file && !self->conn.connection_file)
        || (opts->log_file && !self->conn.log_file))
        goto nomem;
    return 0;
nomem:
    kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
    return -1;
}

/*  An adopted kernel's log kept short, its uid (when it is one of users)
    and its private dir (when it is still there) ours until it is
    destroyed. */
void kb_kernel_take_files(kb_kernel_t *self, const kb_adopt_opts_t *opts)
{
    if (self->conn.log_file)
        self->log_fd = open(self->conn.log_file, O_RDWR | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
    long long uid = self->pid > 0 && opts->users ? kb_proc_uid(self->pid) : -1;
    if (uid >= 0 && kb_kernel_users_mark(opts->users, uid)) {
        self->users = opts->users;
        self->cred.uid = self->cred.gid = uid;
    }
    struct stat st;
    if (self->pid > 0 && opts->work_root && opts->connection_file
        && (self->work_dir = kb_work_dir_path(opts->work_root, opts->connection_file))
        && (lstat(self->work_dir, &st) != 0 || !S_ISDIR(st.st_mode))) {
        free(self->work_dir);
        self->work_dir = NULL;
    }
}

/*  A kb_zmtp socket of the kernel's, connecting to endpoint (which may be
    NULL: then none). NULL with err, naming the channel. */
static kb_zmtp_t *s_zmtp(kb_kernel_t *self, const char *channel, const char *endpoint,
                         const kb_zmtp_opts_t *opts, const kb_zmtp_callbacks_t *callbacks,
                         kb_error_t *err)
{
    kb_zmtp_t *zmtp = endpoint ? kb_zmtp_new(self->loop, endpoint, opts, callbacks, self) : NULL;
    if (!zmtp)
        kb_error_set(err, KB_ERR_INTERNAL, "cannot connect the %s socket to %s: %s", channel,
                     endpoint ? endpoint : "(none)", strerror(errno));
    return zmtp;
}

/*  Connect shell and iopub to the endpoints of self->info (kb_zmtp queues
    what is sent until the kernel binds) and watch them. 0, or -1 with err. */
int kb_kernel_connect_sockets(kb_kernel_t *self, kb_error_t *err)
{
    /*  A routing id of our own, shared with the stdin socket: the kernel
        sends input_request to the shell requester's id. */
    unsigned char raw[12];
    if (RAND_bytes(raw, sizeof raw) != 1) {
        kb_error_set(err, KB_ERR_INTERNAL, "no random bytes for a routing id");
        return -1;
    }
    strcpy(self->routing_id, "kb-");
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(self->routing_id + 3 + 2 * i, 3, "%02x", raw[i]);
    char *endpoint = s_endpoint(self->info, "shell_port");
    kb_zmtp_opts_t shell
        = { .type = KB_ZMTP_DEALER, .identity = self->routing_id, .max_frame = self->max_message };
    self->shell = s_zmtp(self, "shell", endpoint, &shell, kb_kernel_shell_callbacks(), err);
    zstr_free(&endpoint);
    if (!self->shell)
        return -1;
    self->control_endpoint = s_endpoint(self->info, "control_port");
    self->stdin_endpoint = s_endpoint(self->info, "stdin_port");
    self->hb_endpoint = s_endpoint(self->info, "hb_port");
    self->iopub_endpoint = s_endpoint(self->info, "iopub_port");
    kb_zmtp_opts_t iopub = { .type = KB_ZMTP_SUB, .max_frame = self->max_message };
    self->iopub
        = s_zmtp(self, "iopub", self->iopub_endpoint, &iopub, kb_kernel_iopub_callbacks(), err);
    return self->iopub ? 0 : -1;
}

/*  Watch the process through a pidfd; without pidfds (Linux before 5.3),
    or for an attached kernel, the heartbeat is all there is. */
int kb_kernel_watch_process(kb_kernel_t *self, kb_error_t *err)
{
    if (self->pid > 0) {
        self->pidfd = (int)pidfd_open(self->pid, 0);
        if (self->pidfd >= 0) {
            if (kb_io_start(self->loop, &self->pid_io, self->pidfd, s_on_pidfd, self) == 0)
                return 0;
            kb_error_set(err, KB_ERR_INTERNAL, "cannot watch the pidfd: %s", strerror(errno));
            return -1;
        }
        if (errno != ENOSYS) {
            kb_error_set(err, KB_ERR_INTERNAL, "pidfd_open(%d): %s", (int)self->pid,
                         strerror(errno));
            return -1;
        }
    }
    if (s_start_heartbeat(self) != 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot start the heartbeat: %s",
                     zmq_strerror(zmq_errno()));
        return -1;
    }
    return 0;
}

/*  Ask kernel_info now and again until ready or timeout seconds passed;
    keep the log short. */
void kb_kernel_ask_ready(kb_kernel_t *self, double timeout)
{
    self->deadline_ms = self->started_ms + (int64_t)(timeout * 1000);
    kb_kernel_send_kernel_info(self);
    kb_timer_start(self->loop, &self->ready_timer, KB_READY_TICK_MS, KB_READY_TICK_MS,
                   s_on_ready_tick, self);
    if (self->log_fd >= 0)
        kb_timer_start_coarse(self->loop, &self->log_timer, KB_LOG_CHECK_MS, s_on_log_tick, self);
}

kb_kernel_t *kb_kernel_new(kb_loop_t *loop, const kb_kernelspec_t *spec,
                           const kb_kernel_opts_t *opts, const kb_kernel_callbacks_t *callbacks,
                           void *arg, kb_error_t *err)
{
    int child_log = -1;
    kb_kernel_t *self = kb_kernel_blank(loop, spec, callbacks, arg, err);
    if (!self)
        return NULL;
    self->remove_files = true;
    self->max_message = opts->max_message;
    for (char *const *e = opts->envp; e && *e && !self->nodrop_asked; e++)
        self->nodrop_asked = kb_kernel_env_asks_nodrop(*e, strlen(*e));
    if (opts->users) {
        if (kb_kernel_users_take(opts->users, &self->cred, err) != 0)
            goto fail;
        self->users = opts->users;
    }
    self->info
        = kb_connection_write(&self->conn, self->spec, opts, self->users ? &self->cred : NULL, err);
    if (!self->info)
        goto fail;
    if (self->users
        && (!(self->work_dir = kb_work_dir_path(opts->work_root, self->conn.connection_file))
            || kb_work_dir_make(self->work_dir, &self->cred, err) != 0)) {
        free(self->work_dir);
        self->work_dir = NULL; /* not ours to remove */
        goto fail;
    }
    /*  Connect first: ZeroMQ queues the first kernel_info_request until the
        kernel binds, so no time is lost polling for the sockets. */
    if (kb_kernel_connect_sockets(self, err) != 0)
        goto fail;
    child_log = open(self->conn.log_file, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
    self->log_fd = open(self->conn.log_file, O_RDWR | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
    if (child_log < 0 || self->log_fd < 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot open %s: %s", self->conn.log_file,
                     strerror(errno));
        goto fail;
    }
    if (kb_launch_spawn(self->spec, self->conn.connection_file, opts,
                        self->users ? &self->cred : NULL, opts->cwd ? opts->cwd : self->work_dir,
                        self->work_dir, &self->pid, child_log, &self->started_ms, err)
        != 0)
        goto fail;
    close(child_log);
    child_log = -1;
    self->own_child = true;
    self->pgid = self->pid; /* it leads a process group of its own */
    self->pid_start = kb_proc_start_time(self->pid);
    if (kb_kernel_watch_process(self, err) != 0)
        goto fail;
    kb_kernel_ask_ready(self, opts->start_timeout > 0 ? opts->start_timeout : 60);
    return self;
fail:
    if (child_log >= 0)
        close(child_log);
    kb_kernel_destroy(&self);
    return NULL;
}

static void s_close_socket(kb_io_t *io, zsock_t **sock_p)
{
    kb_io_stop(io);
    zsock_destroy(sock_p);
}

/*  Close and free everything; remove the kernel's files when asked. */
static void s_free(kb_kernel_t *self, bool remove_files)
{
    s_stop_timers(self);
    kb_io_stop(&self->pid_io);
    if (self->pidfd >= 0)
        close(self->pidfd);
    if (self->log_fd >= 0)
        close(self->log_fd);
    s_close_socket(&self->hb_io, &self->hb);
    kb_zmtp_destroy(&self->shell);
    kb_zmtp_destroy(&self->iopub);
    kb_kernel_io_close(self);
    if (remove_files) {
        kb_connection_remove(&self->conn);
        if (self->work_dir)
            kb_work_dir_remove(self->work_dir);
    } else
        kb_connection_forget(&self->conn);
    free(self->work_dir);
    kb_wire_destroy(&self->conn.wire);
    kb_kernelspec_destroy(&self->spec);
    json_decref(self->info);
    free(self->control_endpoint);
    free(self->iopub_endpoint);
    free(self->stdin_endpoint);
    free(self->hb_endpoint);
    free(self);
}

void kb_kernel_destroy(kb_kernel_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_kernel_t *self = *self_p;
    *self_p = NULL;
    if (self->state == KB_KERNEL_STARTING)
        kb_kernel_start_ended(self, KB_START_CANCELLED);
    s_stop_timers(self);
    if (s_kill(self, SIGKILL) == 0) {
        int status;
        pid_t rc = waitpid(self->pid, &status, 0);
        if (rc == self->pid)
            s_record_exit(self, status);
        else if (self->pidfd >= 0) {
            /*  Not our child: nothing to reap, but wait (briefly) until it
                has gone, so that "destroyed" means "not running". */
            struct pollfd pfd = { .fd = self->pidfd, .events = POLLIN };
            poll(&pfd, 1, 2000);
        }
    }
    if (self->users && self->remove_files)
        kb_kernel_users_give(self->users, self->cred.uid); /* and what it left running */
    s_free(self, self->remove_files);
}

void kb_kernel_release(kb_kernel_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_kernel_t *self = *self_p;
    *self_p = NULL;
    kb_kernel_resume(self); /* a next daemon finds it running */
    s_free(self, false);
}

int kb_kernel_interrupt(kb_kernel_t *self)
{
    if (self->state == KB_KERNEL_DEAD || self->state == KB_KERNEL_DYING)
        return -1;
    kb_kernel_apply(self, KB_KEV_INTERRUPT);
    if (self->callbacks.interrupting)
        self->callbacks.interrupting(self, self->arg);
    bool by_message
        = self->pid == 0
          || (self->spec->interrupt_mode && strcmp(self->spec->interrupt_mode, "message") == 0);
    if (by_message)
        return kb_kernel_send(self, KB_CHANNEL_CONTROL, "interrupt_request", json_object(), NULL,
                              0);
    return s_kill(self, SIGINT);
}

static void s_send_shutdown(kb_kernel_t *self)
{
    if (self->shutdown_sent)
        return;
    self->shutdown_sent = true;
    kb_kernel_send(self, KB_CHANNEL_CONTROL, "shutdown_request", json_pack("{s:b}", "restart", 0),
                   NULL, 0);
}

static void s_on_exit_timer(kb_timer_t *timer, void *arg)
{
    s_gone(arg);
}

/*  An attached kernel cannot be signalled: ask it to shut down and let it
    go, reporting `exited` on the next turn (not from inside the caller's
    call). */
static void s_let_go(kb_kernel_t *self, const char *text)
{
    if (self->state == KB_KERNEL_DEAD || kb_timer_active(&self->exit_timer))
        return;
    s_send_shutdown(self);
    snprintf(self->exit_text, sizeof self->exit_text, "%s", text);
    kb_timer_start(self->loop, &self->exit_timer, 0, 0, s_on_exit_timer, self);
}

void kb_kernel_signal(kb_kernel_t *self, int sig)
{
    if (self->pid != 0) {
        s_kill(self, sig);
        return;
    }
    if (sig == SIGINT && self->state != KB_KERNEL_DEAD)
        kb_kernel_send(self, KB_CHANNEL_CONTROL, "interrupt_request", json_object(), NULL, 0);
    else if (sig == SIGKILL || sig == SIGTERM || sig == SIGQUIT || sig == SIGHUP)
        s_let_go(self, "attached kernel let go (not ours to signal; sent shutdown_request)");
}

static void s_on_shutdown_step(kb_timer_t *timer, void *arg)
{
    kb_kernel_t *self = arg;
    self->shutdown_step++;
    if (self->pid == 0) {
        /*  Attached: no signals to escalate to; after both graces it counts
            as gone whether or not its heartbeat still answers. */
        if (self->shutdown_step == 2) {
            kb_timer_stop(&self->shutdown_timer);
            s_let_go(self, "attached kernel asked to shut down (not ours to signal)");
        }
        return;
    }
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
        kb_kernel_start_ended(self, KB_START_CANCELLED);
        kb_kernel_signal(self, SIGKILL); /* nothing to save yet */
        return;
    }
    s_send_shutdown(self);
    size_t ms = (size_t)((grace > 0 ? grace : 1.0) * 1000);
    self->shutdown_step = 0;
    kb_timer_start(self->loop, &self->shutdown_timer, ms, ms, s_on_shutdown_step, self);
    if (self->pid == 0 && self->hb) {
        /*  Its heartbeat going silent is the only exit an attached kernel
            can show: listen closely while it shuts down. */
        self->hb_waiting = false;
        kb_timer_start(self->loop, &self->hb_timer, KB_DYING_HB_MS, KB_DYING_HB_MS, s_on_hb_tick,
                       self);
    }
}

const char *kb_kernel_exit_text(kb_kernel_t *self)
{
    if (!self->exit_text[0])
        snprintf(self->exit_text, sizeof self->exit_text, "kernel gone");
    return self->exit_text;
}

const char *kb_drop_reason_name(kb_drop_reason_t reason)
{
    static const char *const names[KB_DROP_REASONS]
        = { "malformed", "bad_signature", "replayed", "too_large", "too_many_parts" };
    return (unsigned)reason < KB_DROP_REASONS ? names[reason] : "?";
}

const char *kb_start_outcome_name(kb_start_outcome_t outcome)
{
    static const char *const names[KB_START_OUTCOMES] = { "ok", "failed", "timeout", "cancelled" };
    return (unsigned)outcome < KB_START_OUTCOMES ? names[outcome] : "?";
}

void kb_kernel_set_observer(kb_kernel_t *self, kb_kernel_observer_t *observer)
{
    self->observer = observer;
}

void kb_kernel_start_ended(kb_kernel_t *self, kb_start_outcome_t outcome)
{
    if (self->start_told || self->adopted)
        return;
    self->start_told = true;
    if (self->observer)
        self->observer->started(self->observer, self->spec->name, outcome,
                                (s_now_ms() - self->started_ms) / 1000.0);
}

void kb_kernel_count_drop(kb_kernel_t *self, kb_drop_reason_t reason)
{
    self->dropped++;
    if (self->observer)
        self->observer->dropped(self->observer, reason);
}
