/*  kb_kernel.h - one running Jupyter kernel: its process, its connection
    file, its sockets, and the lifecycle state machine that ties them.

    A kb_kernel_t lives on the engine's loop (util/kb_loop.h): it watches
    its sockets and a pidfd for the process, keeps the log of the kernel's
    own stdout/stderr bounded, and reports back through callbacks, always
    on the loop's thread. A kernel is launched (kb_kernel_new), or adopted
    while it runs (kb_kernel_adopt: started by an earlier daemon, or by
    someone else), and ends destroyed (killed, files removed) or released
    (left running for a next daemon). It knows nothing of runs or results; it signs and sends
   requests, verifies and decodes replies, and says when the kernel is ready and when it is gone.
    Not for: folding outputs (service/kb_execution), choosing kernelspecs.
*/
#ifndef KB_KERNEL_H_INCLUDED
#define KB_KERNEL_H_INCLUDED

#include <czmq.h>
#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "kernel/kb_kernelspec.h"
#include "kernelbridge/kb_error.h"
#include "kernel/kb_launch.h"
#include "util/kb_loop.h"
#include "wire/kb_wire.h"

typedef struct kb_kernel kb_kernel_t;

typedef enum {
    KB_CHANNEL_SHELL,
    KB_CHANNEL_IOPUB,
    KB_CHANNEL_CONTROL,
    KB_CHANNEL_STDIN, /* input_request from the kernel, input_reply to it */
} kb_channel_t;

/*  "shell", "iopub", "control", "stdin": Jupyter's names. */
const char *kb_channel_name(kb_channel_t channel);

/*  The lifecycle. starting -> idle <-> busy -> interrupting -> (idle|busy);
    any -> dying -> dead; starting -> dead when the start fails. */
typedef enum {
    KB_KERNEL_STARTING,
    KB_KERNEL_IDLE,
    KB_KERNEL_BUSY,
    KB_KERNEL_INTERRUPTING,
    KB_KERNEL_DYING,
    KB_KERNEL_DEAD,
} kb_kernel_state_t;

typedef enum {
    KB_KEV_READY,     /* kernel_info_reply and live iopub both seen */
    KB_KEV_EXECUTE,   /* a request went out that keeps it busy */
    KB_KEV_DONE,      /* the owner says the work finished */
    KB_KEV_INTERRUPT, /* interrupt sent */
    KB_KEV_SHUTDOWN,  /* shutdown or kill begun */
    KB_KEV_EXITED,    /* the process is gone and reaped */
} kb_kernel_event_t;

/*  Callbacks to the owner, on the loop thread. The owner never destroys
    the kernel inside one of these callbacks: it defers that to the end of
    the loop turn (kb_loop_defer). After `exited` the kernel never calls
    back again. */
typedef struct {
    void (*ready)(kb_kernel_t *kernel, void *arg);
    /* the start failed (process exited, or not ready in time); why says so */
    void (*start_failed)(kb_kernel_t *kernel, const char *why, void *arg);
    /* a verified message on shell, iopub or control; msg borrowed */
    void (*message)(kb_kernel_t *kernel, kb_channel_t channel, const kb_msg_t *msg, void *arg);
    /* the process ended and was reaped (after ready, or during shutdown) */
    void (*exited)(kb_kernel_t *kernel, void *arg);
    /* the iopub connection was dropped while the kernel lived: a message
       over the max message size was refused (or the connection broke);
       what the kernel published until ZeroMQ connected again is lost */
    void (*iopub_dropped)(kb_kernel_t *kernel, void *arg);
    /* an interrupt is about to be sent (SIGINT, or interrupt_request) */
    void (*interrupting)(kb_kernel_t *kernel, void *arg);
} kb_kernel_callbacks_t;

/*  Launch a kernel from spec on loop. Returns NULL with err when it cannot
    even be spawned (bad argv, fork failure). Readiness, or its failure, is
    reported through callbacks later. Caller owns the kernel. */
kb_kernel_t *kb_kernel_new(kb_loop_t *loop, const kb_kernelspec_t *spec,
                           const kb_kernel_opts_t *opts, const kb_kernel_callbacks_t *callbacks,
                           void *arg, kb_error_t *err);

/*  What a kernel started by an earlier daemon (or by someone else) needs
    to be driven again. */
typedef struct {
    const json_t *connection;     /* its connection-file JSON, key included; borrowed */
    const char *connection_file;  /* path of that file, kept while adopted and removed at
                                     destroy (not at release); NULL: none */
    const char *log_file;         /* the kernel's stdout/stderr log, or NULL */
    pid_t pid;                    /* 0: not a process of ours (an attached kernel): never
                                     signalled, liveness by heartbeat */
    unsigned long long pid_start; /* must equal kb_proc_start_time(pid) when pid > 0 */
    double timeout;               /* seconds to answer kernel_info; 0 means 1.0 */
    kb_kernel_users_t *users;     /* the daemon's kernel users: the kernel's uid (from
                                     /proc/<pid>/status), when one of theirs, is in use until
                                     it is destroyed; NULL: none. Borrowed */
    const char *work_root;        /* where its private dir would be (<work_root>/k-<hex>,
                                     named like its connection file); NULL: none */
    uint64_t max_message;         /* as kb_kernel_opts_t's; 0: no limit */
} kb_adopt_opts_t;

/*  Drive a kernel that is already running: check pid and start time
    (a pid that is gone or is another process now: NULL with err, and
    nothing signalled), connect its sockets with the stored key, and ask
    kernel_info on the CONTROL channel (so that a kernel busy with a long
    cell on shell answers at once), repeating until the reply comes and
    iopub is live, or timeout passes (then start_failed with why). Ready is
    reported through callbacks like a launched kernel's. Caller owns it.
    The connection is checked with kb_connection_check first (NULL with its
    reason). A failed adoption signals nothing: the kernel is left as it
    is, dying, for the owner to destroy (kill) or release.
    pid > 0 (adopted): signals go to its process group -pid, and only
    after kb_proc_start_time(pid) was checked again against pid_start;
    destroy kills it and removes connection_file, log_file and its ipc
    sockets, as for a kernel of our own. pid == 0 (attached): nothing is
    ever signalled nor removed; interrupts are interrupt_request on
    control whatever the kernelspec says; a heartbeat runs; a shutdown is
    a shutdown_request, and `exited` comes when the heartbeat stops
    answering or after the graces; kb_kernel_signal (SIGTERM, SIGKILL)
    sends a shutdown_request and reports `exited` on the next loop turn,
    since we cannot do more (the kernel may run on: it is not ours). */
kb_kernel_t *kb_kernel_adopt(kb_loop_t *loop, const kb_kernelspec_t *spec,
                             const kb_adopt_opts_t *opts, const kb_kernel_callbacks_t *callbacks,
                             void *arg, kb_error_t *err);

/*  The connection of a kernel that parent is about to fork (SPEC section
    13): a new key, new ports (or ipc paths), and a connection file and an
    empty log named as a launch's, in opts' dirs; conn filled. Returns the
    connection JSON, key included, for the fork request (caller owns), or
    NULL with err: UNSUPPORTED_OPTION when parent cannot be forked (not
    running, attached, or run as another user, whose uid and private dir
    a fork would share). Then kb_kernel_adopt the forked process with it,
    and end conn with kb_fork_connection_end (remove: no kernel took it). */
json_t *kb_kernel_fork_connection(const kb_kernel_t *parent, const kb_kernel_opts_t *opts,
                                  kb_connection_t *conn, kb_error_t *err);
void kb_fork_connection_end(kb_connection_t *conn, bool remove);

/*  The same for a kernel of spec forked from a checkpoint, whose parent
    may be gone (checked when the checkpoint was made). */
json_t *kb_kernel_spec_connection(const kb_kernelspec_t *spec, const kb_kernel_opts_t *opts,
                                  kb_connection_t *conn, kb_error_t *err);

/*  Kill whatever is left (SIGKILL to the process group, once the pid is
    known to be still the kernel), reap it, close sockets, remove the
    connection file, the log and ipc sockets. Blocks at most for the
    reaping of a killed process (up to 2 s for an adopted one that is not
    our child). An attached kernel (pid 0) is neither signalled nor are
    its files removed. Safe on NULL; sets *self_p NULL. */
void kb_kernel_destroy(kb_kernel_t **self_p);

/*  Let the kernel go on running without us: close sockets and descriptors
    and free, but send no signal and remove neither its connection file
    nor its log (a next daemon adopts it). Safe on NULL; sets *self_p NULL. */
void kb_kernel_release(kb_kernel_t **self_p);

/*  Point the callbacks at another owner (a kernel handed to the reaper). */
void kb_kernel_set_callbacks(kb_kernel_t *self, const kb_kernel_callbacks_t *callbacks, void *arg);

kb_kernel_state_t kb_kernel_state(const kb_kernel_t *self);
const char *kb_kernel_state_name(kb_kernel_state_t state);

/*  Apply a lifecycle event; returns the new state. Events that make no
    sense in the current state leave it unchanged. */
kb_kernel_state_t kb_kernel_apply(kb_kernel_t *self, kb_kernel_event_t event);

/*  Send a request on shell or control. content is stolen. msg_id_out (33+
    bytes) receives the request's msg_id. 0 / -1. */
int kb_kernel_send(kb_kernel_t *self, kb_channel_t channel, const char *msg_type, json_t *content,
                   char *msg_id_out, size_t msg_id_size);

/*  Send a message a client made, already encoded and signed with this
    kernel's key (kb_kernel_wire): the frames from "<IDS|MSG>" on
    (borrowed), on shell, control or stdin. 0 / -1 (dead, not connected,
    or a channel that takes nothing). */
int kb_kernel_send_frames(kb_kernel_t *self, kb_channel_t channel, const kb_frame_t *frames,
                          size_t count);

/*  Connect the stdin socket now (idempotent), with the shell's routing id,
    so that the kernel's input_request for a request sent on shell comes
    back to us; what comes on it is dispatched as KB_CHANNEL_STDIN. Only
    clients that answer input_request need it. 0 / -1. */
int kb_kernel_open_stdin(kb_kernel_t *self);

/*  Whether the stdin socket's connection to the kernel is made (it is
    opened with ZMQ_IMMEDIATE, so it can send only then): until it is, an
    input_request the kernel sends would be dropped by its ROUTER. */
bool kb_kernel_stdin_connected(kb_kernel_t *self);

/*  The codec that holds this kernel's key: what a client sends is signed
    with it. Borrowed; engine thread only. */
kb_wire_t *kb_kernel_wire(kb_kernel_t *self);

/*  execute_request with the given flags; msg_id as for kb_kernel_send. */
int kb_kernel_execute(kb_kernel_t *self, const char *code, bool silent, char *msg_id_out,
                      size_t msg_id_size);

/*  Interrupt per the kernelspec's interrupt_mode: SIGINT to the process
    group, or interrupt_request on control (always, for an attached
    kernel). 0 / -1. */
int kb_kernel_interrupt(kb_kernel_t *self);

/*  Send sig to the kernel's process group now (SIGKILL, SIGTERM). */
void kb_kernel_signal(kb_kernel_t *self, int sig);

/*  Begin a graceful shutdown: shutdown_request on control, then SIGTERM
    after grace seconds, then SIGKILL after grace more. `exited` is called
    when it is gone. */
void kb_kernel_shutdown(kb_kernel_t *self, double grace);

/*  The process: its pid (0 for an attached kernel, -1 before spawn). */
pid_t kb_kernel_pid(const kb_kernel_t *self);
const kb_kernelspec_t *kb_kernel_spec(const kb_kernel_t *self);

pid_t kb_kernel_pgid(const kb_kernel_t *self);                   /* 0 when not ours */
unsigned long long kb_kernel_pid_start(const kb_kernel_t *self); /* 0 when not ours */
const json_t *
kb_kernel_connection_info(const kb_kernel_t *self); /* the file's JSON, key included; borrowed */
const char *kb_kernel_connection_file(const kb_kernel_t *self); /* or NULL */
const char *kb_kernel_log_file(const kb_kernel_t *self);        /* or NULL */
bool kb_kernel_adopted(const kb_kernel_t *self);                /* started by someone else */
const char *kb_kernel_work_dir(const kb_kernel_t *self);        /* its private dir, or NULL */

/*  How the process ended: exit status (or -1) and terminating signal (or 0).
    Valid once dead. */
int kb_kernel_exit_status(const kb_kernel_t *self);
int kb_kernel_term_signal(const kb_kernel_t *self);

/*  "exited with status 3", "killed by SIGSEGV", "exited (not our child:
    status unknown)". Static buffer of the kernel. */
const char *kb_kernel_exit_text(kb_kernel_t *self);

/*  The last bytes the kernel wrote to its own stdout/stderr, read from its
    log ("" without one). Caller frees. */
char *kb_kernel_output_tail(const kb_kernel_t *self, size_t max_bytes);

/*  Messages dropped because they failed verification (bad signature,
    replay, malformed) since start. */
size_t kb_kernel_dropped(const kb_kernel_t *self);

/*  The largest message frame its sockets take (ZMQ_MAXMSGSIZE); 0: none. */
uint64_t kb_kernel_max_message(const kb_kernel_t *self);

/*  Why a kernel's message was dropped unread. */
typedef enum {
    KB_DROP_MALFORMED,      /* not a well-formed Jupyter message */
    KB_DROP_BAD_SIGNATURE,  /* unsigned, or the HMAC does not match */
    KB_DROP_REPLAYED,       /* a valid signature seen before */
    KB_DROP_TOO_LARGE,      /* over the codec's limits on frames or bytes */
    KB_DROP_TOO_MANY_PARTS, /* more frames than are read of one message */
    KB_DROP_REASONS,
} kb_drop_reason_t;

/*  "malformed", "bad_signature", "replayed", "too_large", "too_many_parts". */
const char *kb_drop_reason_name(kb_drop_reason_t reason);

/*  How the start of a kernel this daemon launched ended. */
typedef enum {
    KB_START_OK,        /* ready */
    KB_START_FAILED,    /* not spawned, or exited before it was ready */
    KB_START_TIMEOUT,   /* not ready within the start timeout (then killed) */
    KB_START_CANCELLED, /* shut down or destroyed while starting */
    KB_START_OUTCOMES,
} kb_start_outcome_t;

/*  "ok", "failed", "timeout", "cancelled". */
const char *kb_start_outcome_name(kb_start_outcome_t outcome);

/*  Whoever counts for the whole daemon (service/kb_metrics.h): told by
    each kernel given it, on the loop's thread. */
typedef struct kb_kernel_observer {
    /* a launched kernel's start ended, seconds after its spawn (once per
       kernel; adopted kernels are not starts) */
    void (*started)(struct kb_kernel_observer *self, const char *kernel_name,
                    kb_start_outcome_t outcome, double seconds);
    /* one of its messages was dropped */
    void (*dropped)(struct kb_kernel_observer *self, kb_drop_reason_t reason);
} kb_kernel_observer_t;

/*  Report to observer from now on (borrowed: it must outlive the kernel;
    NULL: to no one). Set right after kb_kernel_new or kb_kernel_adopt,
    before the loop runs again: nothing is reported before that. */
void kb_kernel_set_observer(kb_kernel_t *self, kb_kernel_observer_t *observer);

/*  Output flow control. A kernel of ours (not attached) whose iopub
    messages are read more than KB_FLOW_LAG_MS after the kernel dated them
    (the engine falls behind: several kernels flood at once) is paused:
    SIGSTOP to its process group, while the daemon reads what it queued.
    It goes on (SIGCONT) once what is left to read is what it sent in its
    last 5 ms before the pause, or before any signal, control request or
    client message is sent to it, and when it is released. Only while it runs a request (busy or
   interrupting). So the output the daemon holds unread is what kernels publish in about
    KB_FLOW_LAG_MS, whatever their number, and nothing is lost to a full
    queue. */
#define KB_FLOW_LAG_MS 10
bool kb_kernel_paused(const kb_kernel_t *self);
unsigned long long kb_kernel_pauses(const kb_kernel_t *self); /* since it started */

/*  Its iopub waits for the daemon instead of dropping: launched with
    KERNELBRIDGE_IOPUB_NODROP=1, and its kernel_info_reply said so (the
    extension kernelbridge_display). Any other kernel's PUB socket drops
    what it cannot queue when the engine, or the kernel's own I/O thread,
    gets no CPU for longer than its queues last. */
bool kb_kernel_iopub_waits(const kb_kernel_t *self);

/*  Its iopub output is still being read: paused, messages waiting, or (a
    kernel that was ever paused, or one whose output waits on its side
    when the daemon's queue is full) a message read while it ran in the
    last 2 s. What it sent last (status: idle) is then still to come. */
bool kb_kernel_iopub_behind(kb_kernel_t *self);

/*  Let a paused kernel go on now (SIGCONT to its group). Safe when not paused. */
void kb_kernel_resume(kb_kernel_t *self);

/*  Heartbeat periods in a row without an echo (0 = healthy). A kernel with
    a pidfd runs no heartbeat: 2 when its process is stopped (not by the
    flow control: a paused kernel is 0), else 0. */
unsigned kb_kernel_heartbeat_misses(const kb_kernel_t *self);

/*  language_info.name from the kernel_info_reply, or NULL. Borrowed. */
const char *kb_kernel_language_info(const kb_kernel_t *self);

#endif
