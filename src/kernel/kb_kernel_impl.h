/*  kb_kernel_impl.h - the kernel's struct and the steps of a start that
    kb_kernel.c (launch, lifecycle), kb_kernel_io.c (sockets, messages) and
    kb_kernel_adopt.c (adoption) share. Private to those files. The
    fields of struct kb_kernel are set in kb_kernel.c, those of its io
    (struct kb_kernel_io_state) in kb_kernel_io.c; kb_kernel_adopt.c and
    kb_kernel_query.c only read them.
*/
#ifndef KB_KERNEL_IMPL_H_INCLUDED
#define KB_KERNEL_IMPL_H_INCLUDED

#include "kernel/kb_kernel.h"
#include "kernel/kb_launch.h"
#include "wire/kb_zmtp.h"

/*  What kb_kernel_io.c alone writes: the sockets it connects on first use
    and the readiness it reads from messages. */
struct kb_kernel_io_state {
    zsock_t *control;    /* connected on first use */
    zsock_t *stdin_sock; /* connected on first use, with the shell's routing id */
    kb_io_t control_io, stdin_io;
    bool info_replied;              /* a kernel_info_reply came */
    bool iopub_live;                /* a message came on iopub */
    int64_t last_info_ms;           /* when kernel_info_request was last sent */
    char *language_info;            /* language_info.name of the reply, or NULL */
    kb_timer_t iopub_drop_timer;    /* a disconnection, judged 100 ms later */
    unsigned long long iopub_drops; /* iopub connections dropped while the kernel lived */
    bool paused;                    /* its process group stopped (SIGSTOP) until its iopub
                                       backlog is read */
    unsigned long long pauses;      /* times it was paused */
    int64_t lag_us;                 /* how old the last iopub message read while it ran was */
    int64_t read_ms;                /* when it was read (kb_launch_now_ms) */
    int64_t paused_us, resumed_us;  /* when its last pause began and ended (wall clock) */
    bool nodrop;                    /* asked and said: its iopub waits instead of dropping */
};

struct kb_kernel {
    kb_loop_t *loop;
    kb_kernelspec_t *spec;
    kb_kernel_callbacks_t callbacks;
    void *arg;
    kb_kernel_state_t state;

    pid_t pid;                    /* 0: attached (not a process of ours); -1 before spawn */
    pid_t pgid;                   /* signals go to -pgid; 0 when not ours */
    unsigned long long pid_start; /* kb_proc_start_time(pid) when it was ours */
    bool own_child;               /* spawned here: its pid cannot be reused before we reap it */
    bool adopted;                 /* started by someone else (pid > 0 or attached) */
    bool remove_files;            /* destroy removes connection file, log, ipc sockets */
    uint64_t max_message;         /* ZMQ_MAXMSGSIZE of its sockets; 0: none */
    bool nodrop_asked;            /* launched with KERNELBRIDGE_IOPUB_NODROP=1: its output may
                                     wait on its side (kb_kernel_io.c) */
    kb_kernel_users_t *users;     /* its uid came from there and goes back at destroy; or NULL */
    kb_kernel_cred_t cred;        /* who it runs as, with users */
    char *work_dir;               /* its private dir (HOME), removed at destroy; or NULL */
    int pidfd;
    int log_fd; /* O_RDWR|O_APPEND on the log, to keep it short; -1 without */
    kb_io_t pid_io;
    kb_timer_t log_timer;
    kb_timer_t exit_timer; /* attached: an exit reported on the next turn */
    bool reaped;
    int exit_status; /* -1 unless exited normally */
    int term_signal; /* 0 unless killed by a signal */
    char exit_text[96];

    kb_connection_t conn;
    json_t *info;           /* the connection file's JSON, key included */
    char *control_endpoint; /* connected on first use */
    char *iopub_endpoint;   /* connected again after a protocol error */
    char *stdin_endpoint;   /* idem */
    char *hb_endpoint;
    kb_zmtp_t *shell; /* shell and iopub: on the loop itself (kb_zmtp), not through */
    kb_zmtp_t *iopub; /* libzmq's I/O thread */
    zsock_t *hb;      /* only without a pidfd */
    kb_io_t hb_io;
    struct kb_kernel_io_state io; /* written by kb_kernel_io.c only */
    char routing_id[40];          /* shell's and stdin's: the kernel sends input_request to it */
    kb_timer_t hb_timer;
    bool hb_waiting;    /* a ping is out and its echo has not come */
    unsigned hb_misses; /* periods in a row without an echo */

    /* readiness */
    int64_t started_ms;
    int64_t deadline_ms;
    kb_timer_t ready_timer;

    /* shutdown escalation */
    kb_timer_t shutdown_timer;
    int shutdown_step;
    double shutdown_grace;

    bool shutdown_sent;

    size_t dropped;
    kb_kernel_observer_t *observer; /* borrowed, or NULL */
    bool start_told;                /* the observer heard how the start ended */
};

/*  A kernel with nothing yet: no process, no sockets, timers stopped, the
    callbacks set and a copy of spec. NULL with err. */
kb_kernel_t *kb_kernel_blank(kb_loop_t *loop, const kb_kernelspec_t *spec,
                             const kb_kernel_callbacks_t *callbacks, void *arg, kb_error_t *err);

/*  An adopted kernel's record taken over: pid, connection, files. 0, or
    -1 with err (out of memory). */
int kb_kernel_take_record(kb_kernel_t *self, const kb_adopt_opts_t *opts, kb_error_t *err);

/*  An adopted kernel's log fd, uid (of opts->users) and private dir. */
void kb_kernel_take_files(kb_kernel_t *self, const kb_adopt_opts_t *opts);

/*  Connect shell and iopub to the endpoints of self->info (kb_zmtp queues
    what is sent until the kernel binds) and watch them. 0, or -1 with err. */
int kb_kernel_connect_sockets(kb_kernel_t *self, kb_error_t *err);

/*  The io's timers stopped (before any use): called by kb_kernel_blank. */
void kb_kernel_io_init(kb_kernel_t *self);

/*  Whether an environment (NUL-separated "NAME=value" strings, as
    /proc/<pid>/environ; len bytes) asks for KERNELBRIDGE_IOPUB_NODROP=1. */
bool kb_kernel_env_asks_nodrop(const char *env, size_t len);

/*  The control socket, connected on first use; NULL when it cannot be. */
zsock_t *kb_kernel_control(kb_kernel_t *self);

/*  sock (stolen) with linger 0 connected to endpoint, or NULL (destroyed;
    also when sock or endpoint is NULL). */
zsock_t *kb_kernel_connect_endpoint(zsock_t *sock, const char *endpoint);

/*  kernel_info_request: on control for an adopted kernel, else shell. */
void kb_kernel_send_kernel_info(kb_kernel_t *self);

/*  The shell and iopub sockets' callbacks (kb_zmtp): verify, dispatch;
    iopub's also pace a flood and judge a dropped connection. */
const kb_zmtp_callbacks_t *kb_kernel_shell_callbacks(void);
const kb_zmtp_callbacks_t *kb_kernel_iopub_callbacks(void);

/*  The watch of control: read, verify, dispatch. */
void kb_kernel_on_control(kb_io_t *io, void *arg);

/*  A stopped or traced process (state T or t in /proc/<pid>/stat). */
bool kb_kernel_proc_stopped(pid_t pid);

/*  Close the control and stdin sockets, if they were connected, and free
    the rest of self->io. */
void kb_kernel_io_close(kb_kernel_t *self);

/*  Watch self->pid through a pidfd; without pidfds (Linux before 5.3), or
    for an attached kernel (pid 0), run the heartbeat. 0, or -1 with err. */
int kb_kernel_watch_process(kb_kernel_t *self, kb_error_t *err);

/*  The start of a launched kernel ended: the observer hears it, once. */
void kb_kernel_start_ended(kb_kernel_t *self, kb_start_outcome_t outcome);

/*  A message was dropped unread: counted, and the observer hears why. */
void kb_kernel_count_drop(kb_kernel_t *self, kb_drop_reason_t reason);

/*  Send kernel_info_request now and again until ready, or start_failed
    once timeout seconds from started_ms passed; start the log check. */
void kb_kernel_ask_ready(kb_kernel_t *self, double timeout);

#endif
