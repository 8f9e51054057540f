/*  kb_service.h - the public C API of kernelbridge: contexts, runs, processes.

    A kb_service_t owns one engine thread (a czmq actor running a zloop) that
    holds every context, kernel, run queue and process record. The functions
    below hand requests to that thread and wait for its answer, so they are
    safe to call from any number of threads at once. Nothing here is an HTTP
    concept: the server layer only parses requests, calls these functions and
    renders the JSON they return.

    JSON values follow jansson's rule: a returned json_t * is owned by the
    caller (json_decref it); a json_t * argument is borrowed unless the comment
    says "stolen".
*/
#ifndef KB_SERVICE_H_INCLUDED
#define KB_SERVICE_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "kb_error.h"
#include "kb_export.h"
#include "kb_result.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kb_service kb_service_t;

/*  Settings of one service. Zero / NULL fields take the documented default. */
typedef struct {
    const char *state_dir;         /* private 0700 dir: the lock, state.db (contexts, process
                                      records and their logs, kept across restarts) and
                                      kernels/ (connection files, kernel logs); NULL: a fresh
                                      one under $XDG_RUNTIME_DIR or /tmp, without state.db,
                                      removed on destroy (nothing survives) */
    const char *sandbox_id;        /* NULL: $KB_SANDBOX_ID, else kept in state_dir/sandbox_id */
    const char *transport;         /* "ipc" (default) or "tcp" (127.0.0.1) */
    const char *const *kernel_map; /* NULL-terminated "language=kernelspec" overrides */
    double default_timeout;        /* seconds; 0 = runs without timeout are unbounded */
    double interrupt_grace;        /* seconds between interrupt and kill at timeout; 0 = 2.0 */
    double start_timeout;          /* seconds for a kernel to become ready; 0 = 60 */
    double completion_grace;       /* seconds to wait for the missing one of reply/idle; 0 = 3 */
    double hog_after;              /* seconds a run is busy before its kernel drops below the
                                      daemon's and other kernels' CPU priority until the run
                                      ends; 0 = 1; < 0 = never */
    size_t max_message_bytes;      /* largest kernel message taken (larger: refused at the
                                      socket, the run ends saying so); 0 = 128 MiB */
    size_t max_contexts;           /* 0 = 64 */
    size_t max_code_bytes;         /* 0 = 8 MiB */
    size_t max_output_bytes;       /* per run; 0 = 64 MiB */
    size_t max_processes;          /* finished process records kept; 0 = 1000 */
    size_t max_process_bytes;      /* bytes of finished records' logs kept; 0 = 256 MiB */
    size_t max_output_memory;      /* all output held in memory, running and finished
                                      runs together; 0 = 256 MiB */
    const char *system_python;     /* argv[0] for kernelspecs that say python/python3;
                                      NULL = /usr/bin/python3 */
    const char *const *pool;       /* NULL-terminated "language=count" (or "kernelspec=count"):
                                      kernels kept started and ready for new contexts and
                                      isolated runs; NULL = no pool */
    bool no_adopt;                 /* kernels recorded in state_dir are killed, not adopted */
    bool keep_kernels;             /* destroy leaves kernels running for the next service on
                                      state_dir (runs still going end as sandbox_stopped) */
    long long memory_limit;        /* bytes, of each context's kernel tree (contexts and
                                      isolated runs that give none); 0 = none */
    long long pids_limit;          /* processes of each context's kernel tree; 0 = none */
    const char *kernel_user;       /* kernels run as this unprivileged user, with a private
                                      working dir each (its HOME; its cwd when the context
                                      gives none); needs root; NULL: as the daemon's user */
    unsigned kernel_uid_min;       /* > 0: each kernel runs as a uid of its own from
                                      kernel_uid_min..kernel_uid_max (gid the same number),
                                      with a private working dir; needs root; excludes
                                      kernel_user */
    unsigned kernel_uid_max;
    double cull_idle_timeout; /* seconds: a context idle that long (no run out or queued, no
                                 websocket cell out, no websocket client connected) is
                                 deleted, and later calls naming it get SESSION_NOT_FOUND
                                 saying so; 0 = never */
    size_t max_checkpoints;   /* checkpoints per context (SPEC section 13); 0 = 8 */
    const char *const *fork_templates; /* NULL-terminated "LANG" or "LANG=MOD,MOD": new
                                          kernels of LANG are forked from a frozen template
                                          with those modules imported (SPEC section 13);
                                          NULL = none */
    bool no_display_ext;               /* Python contexts (ipykernel) start without the project's
                                          IPython extension kernelbridge_display (charts and tables
                                          as data, docs/charts.md) */
    const char *python_dir;            /* dir holding the project's kernel-side packages
                                          (kernelbridge_display); NULL = the installed one
                                          (<datadir>/kernelbridge/python), or the source tree's
                                          python/ for a daemon run from its build tree */
    unsigned kernel_port_min;          /* > 0: tcp kernels listen on ports from
                                          kernel_port_min..kernel_port_max (at least 5, within
                                          1024..65535), handed out in turn; 0: ports the system
                                          gives a bind to port 0 */
    unsigned kernel_port_max;
} kb_service_config_t;

/*  Start a service and its engine thread. Returns NULL and fills err on
    failure (bad state dir, bad kernel map). Caller owns the result. */
KB_EXPORT kb_service_t *kb_service_new(const kb_service_config_t *config, kb_error_t *err);

/*  Stop the service: runs still going end as sandbox_stopped, every kernel
    is shut down (shutdown_request, SIGTERM, SIGKILL, each after a bounded
    wait) and reaped, its files are removed. Safe on NULL; sets *self_p NULL. */
KB_EXPORT void kb_service_destroy(kb_service_t **self_p);

/*  Stop the service without freeing it: runs still going end as
    sandbox_stopped, kernels are shut down and reaped, every call waiting
    is answered, and later calls fail with UNAVAILABLE at once. Streams
    already handed out stay readable. Idempotent. */
KB_EXPORT void kb_service_stop(kb_service_t *self);

/*  The sandbox id of this service. Borrowed, valid until destroy. */
KB_EXPORT const char *kb_service_sandbox_id(kb_service_t *self);

/*  {status, version, sandbox_id, contexts, uptime_s, pool: {key: {target, ready,
    starting, kernel_name, ready_pids, failures}}, output_memory, state, limits,
    dropped_messages (kernel messages dropped since the start, all kernels),
    dropped_messages_by_reason: {malformed, bad_signature, replayed, too_large,
    too_many_parts}}. Caller owns. */
KB_EXPORT json_t *kb_service_health(kb_service_t *self);

/*  The service's metrics in Prometheus' text format (version 0.0.4): runs,
    kernel starts, dropped kernel messages, contexts by state, the pool,
    output; every family with its HELP and TYPE lines. The HTTP server
    adds its own (requests) and the process' (process_*). NULL when the
    service is stopping or out of memory. Caller frees. */
KB_EXPORT char *kb_service_metrics(kb_service_t *self);

/*  {kernelspecs:[{name, display_name, language, interrupt_mode, resource_dir}]}
    as discovered now. Caller owns. */
KB_EXPORT json_t *kb_service_kernelspecs(kb_service_t *self);

/* ---- Contexts ---------------------------------------------------------- */

typedef struct {
    const char *language; /* one of language / kernel_name is required */
    const char *kernel_name;
    const char *context_id;  /* NULL: generated "ctx_..." */
    const char *cwd;         /* NULL: the daemon's cwd */
    json_t *env;             /* object of string values, or NULL; borrowed */
    json_t *connection_info; /* a running kernel's connection file (its JSON): drive that
                                kernel instead of starting one; it is never signalled;
                                NULL: start one; borrowed */
    long long memory_limit;  /* bytes of the kernel's process tree; 0: the service's default */
    long long pids_limit;    /* processes of the kernel's tree; 0: the service's default */
    const char *fork_from;   /* a context id: the new context is a fork of it (SPEC section
                                13), and language, kernel_name, cwd, env and
                                connection_info must not be given; NULL: none */
} kb_context_opts_t;

/*  Create a context and wait until its kernel is ready. Returns the context
    object {sandbox_id, context_id, language, kernel_name, cwd, state,
    created_at, last_activity_at, execution_count, pid, generation}, or NULL with err set
    (BAD_REQUEST, CONTEXT_EXISTS, LANGUAGE_NOT_SUPPORTED, KERNEL_START_FAILED,
    ...). Caller owns. */
KB_EXPORT json_t *kb_service_context_create(kb_service_t *self, const kb_context_opts_t *opts,
                                            kb_error_t *err);

/*  The default context of opts->language (or opts->kernel_name), started
    if it is not running yet; waits until its kernel is ready. Other fields
    of opts are ignored. Returns the context object. Caller owns. */
KB_EXPORT json_t *kb_service_context_default(kb_service_t *self, const kb_context_opts_t *opts,
                                             kb_error_t *err);

/*  The context object, or NULL with SESSION_NOT_FOUND (whose message says
    when and why a vanished context went). Caller owns. */
KB_EXPORT json_t *kb_service_context_get(kb_service_t *self, const char *context_id,
                                         kb_error_t *err);

/*  {contexts:[...]}; default contexts only when all is true. Caller owns. */
KB_EXPORT json_t *kb_service_context_list(kb_service_t *self, bool all, kb_error_t *err);

/*  Delete a context: its queued and running runs end as signaled/SIGKILL,
    its kernel is shut down. PROTECTED_CONTEXT for default contexts. */
KB_EXPORT int kb_service_context_delete(kb_service_t *self, const char *context_id,
                                        kb_error_t *err);

/*  Replace the context's kernel with a fresh one, same id; waits until ready.
    Returns the context object. Caller owns. */
KB_EXPORT json_t *kb_service_context_restart(kb_service_t *self, const char *context_id,
                                             kb_error_t *err);

/*  Interrupt whatever the context's kernel is running now. */
KB_EXPORT int kb_service_context_interrupt(kb_service_t *self, const char *context_id,
                                           kb_error_t *err);

/* ---- Forks, checkpoints and restores (SPEC section 13) ------------------ */

#define KB_FORK_MAX 64 /* forks of one request */

typedef struct {
    size_t count;                   /* 1..KB_FORK_MAX; 0: one per context id, or 1 */
    const char *const *context_ids; /* count ids (NULL-terminated when count is 0), or NULL:
                                       generated "ctx_..." */
    long long memory_limit;         /* 0: the parent's */
    long long pids_limit;           /* 0: the parent's */
} kb_fork_opts_t;

/*  Fork a context: every fork a new context with the parent's state at the
    fork point (the fork waits in the parent's run queue like a run).
    Returns {contexts: [...]} once every fork is ready, or NULL with err
    (UNSUPPORTED_OPTION for a kernel that cannot fork, SESSION_NOT_FOUND,
    CONTEXT_EXISTS, TOO_MANY_CONTEXTS, KERNEL_START_FAILED: then no fork
    is left). opts may be NULL (one fork). Caller owns. */
KB_EXPORT json_t *kb_service_context_fork(kb_service_t *self, const char *context_id,
                                          const kb_fork_opts_t *opts, kb_error_t *err);

/*  A checkpoint of the context (a frozen fork): {checkpoint_id, context_id,
    execution_count, created_at, memory_bytes}, or NULL with err
    (LIMIT_EXCEEDED over --max-checkpoints). Caller owns. */
KB_EXPORT json_t *kb_service_checkpoint_create(kb_service_t *self, const char *context_id,
                                               kb_error_t *err);

/*  {checkpoints: [...]} of the context, oldest first. Caller owns. */
KB_EXPORT json_t *kb_service_checkpoint_list(kb_service_t *self, const char *context_id,
                                             kb_error_t *err);

/*  End a checkpoint. CHECKPOINT_NOT_FOUND when the context has no such. */
KB_EXPORT int kb_service_checkpoint_delete(kb_service_t *self, const char *context_id,
                                           const char *checkpoint_id, kb_error_t *err);

/*  Replace the context's kernel with a fork of its checkpoint (which stays
    restorable); waits until ready. Returns the context object (generation
    + 1, restored_from). Caller owns. */
KB_EXPORT json_t *kb_service_context_restore(kb_service_t *self, const char *context_id,
                                             const char *checkpoint_id, kb_error_t *err);

/*  How many forks opts asks for (count, or the number of ids, or 1). */
KB_EXPORT size_t kb_fork_opts_count(const kb_fork_opts_t *opts);

/*  Check opts: count 1..KB_FORK_MAX, count and ids agree, ids valid and
    distinct, limits not negative. 0, or -1 with BAD_REQUEST. */
KB_EXPORT int kb_fork_opts_validate(const kb_fork_opts_t *opts, kb_error_t *err);

/* ---- Jupyter's kernel channels (a websocket client's) --------------------- */

typedef struct kb_channels kb_channels_t;

/*  A payload for the client (a websocket message: binary, else text);
    data borrowed for the call. Called on the engine thread: queue it and
    return, never block. */
typedef void(kb_channels_send_fn)(void *arg, bool binary, const void *data, size_t size);

/*  The kernel is gone for good (its context deleted, or it vanished):
    the client should close. Engine thread; called at most once. */
typedef void(kb_channels_end_fn)(void *arg, const char *why);

typedef struct {
    const char *kernel_id;  /* a context's kernel_id (or its context id) */
    const char *session_id; /* the client's session (?session_id=), or NULL */
    bool v1;                /* v1.kernel.websocket.jupyter.org framing, else the legacy one */
    kb_channels_send_fn *send;
    kb_channels_end_fn *end;
    void *arg;
} kb_channels_opts_t;

/*  Attach a client to the kernel's channels: from now on every iopub
    message of the kernel and every reply to the client's requests reach
    opts->send. NULL with err (SESSION_NOT_FOUND). Caller owns it, and
    gives it back with kb_service_channels_close. */
KB_EXPORT kb_channels_t *kb_service_channels_open(kb_service_t *self,
                                                  const kb_channels_opts_t *opts, kb_error_t *err);

/*  One payload the client sent (borrowed): parsed on the caller's thread,
    then signed with the kernel's key and sent (an execute_request takes
    its turn in the context's queue, with native runs). -1 with err:
    BAD_REQUEST for a malformed payload (nothing is sent; the client may
    go on), SESSION_NOT_FOUND when the kernel is gone. */
KB_EXPORT int kb_service_channels_input(kb_service_t *self, kb_channels_t *channels, bool binary,
                                        const void *data, size_t size, kb_error_t *err);

/*  Detach and free the client: no callback reaches it once this returns.
    Safe on NULL. */
KB_EXPORT void kb_service_channels_close(kb_service_t *self, kb_channels_t **channels_p);

/* ---- Runs ---------------------------------------------------------------- */

typedef struct {
    const char *code;        /* required; must not contain NUL */
    const char *language;    /* NULL: "python" (ignored when context_id is set) */
    const char *kernel_name; /* run on the default context of this kernelspec */
    const char *context_id;  /* NULL: the language's default context */
    bool isolated;           /* fresh kernel, destroyed afterwards */
    double timeout;          /* seconds from submission; 0 = service default */
    const char *cwd;         /* per-run cwd (adapter on persistent contexts) */
    json_t *env;             /* per-run env, object of strings; borrowed */
    bool strip_ansi;         /* remove ANSI escapes from traceback lines */
    long long memory_limit;  /* isolated runs only: as kb_context_opts_t's */
    long long pids_limit;
    const char *rollback; /* "never" (NULL) or "on_error": a checkpoint is taken before
                             the run and restored when it fails (SPEC section 13) */
} kb_run_opts_t;

/*  What a stream of events carries. START {process_id, context};
    STDOUT/STDERR {text, timestamp} (timestamp: the kernel message's
    header date, absent when it has none); DISPLAY (one results entry); DISPLAY_UPDATE
    {display_id, data}; CLEAR_OUTPUT {wait}; ERROR {name, value, traceback};
    SYSTEM {text} (a system log line); RESULT (the whole InterpreterResult,
    always last for a run); LOG (one log frame {cursor, channel, data,
    timestamp}) and END {cursor} for process log following; INPUT
    {execution_count} when the kernel echoes the code it runs (execute_input;
    not every kernel does, and the native SSE stream leaves it out). */
typedef enum {
    KB_EVENT_START,
    KB_EVENT_STDOUT,
    KB_EVENT_STDERR,
    KB_EVENT_DISPLAY,
    KB_EVENT_DISPLAY_UPDATE,
    KB_EVENT_CLEAR_OUTPUT,
    KB_EVENT_ERROR,
    KB_EVENT_SYSTEM,
    KB_EVENT_RESULT,
    KB_EVENT_LOG,
    KB_EVENT_END,
    KB_EVENT_INPUT,
} kb_event_type_t;

/*  The SSE event name of a type ("start", "stdout", ... "result", "log",
    "eof"). Static string. */
KB_EXPORT const char *kb_event_type_name(kb_event_type_t type);

/*  A run's result, kept once: its JSON text is rendered on demand from
    the run's kept output, piece by piece, so that a 64 MiB result is never
    one string in memory. Any thread; one reader at a time. */
typedef struct kb_result_doc kb_result_doc_t;

/*  The next bytes of the result's JSON text (compact, as json_dumps would
    give it), at most cap (at least 16); 0 at the end. Returns (size_t)-1 when out of
    memory. */
KB_EXPORT size_t kb_result_doc_read(kb_result_doc_t *self, char *buf, size_t cap);

/*  The whole result as one JSON value (a copy of the logs). NULL when out
    of memory. Caller owns. */
KB_EXPORT json_t *kb_result_doc_json(const kb_result_doc_t *self);

/*  Safe on NULL; sets *self_p to NULL. */
KB_EXPORT void kb_result_doc_destroy(kb_result_doc_t **self_p);

/*  One event. For KB_EVENT_RESULT, data is the result without the text of
    its logs (logs.stdout and logs.stderr are "") and doc renders the whole
    result (kb_result_doc_json gives it as one value); for every other type
    doc is NULL. */
typedef struct {
    kb_event_type_t type;
    json_t *data;         /* owned by the event */
    kb_result_doc_t *doc; /* owned by the event; RESULT only */
} kb_event_t;

KB_EXPORT void kb_event_destroy(kb_event_t **self_p);

/*  A live stream of events from the engine to one reader (a run being
    followed, or a process's logs being followed). The engine never blocks
    on a slow reader: events queue in the stream. Destroying the stream
    detaches the reader; the run itself goes on. */
typedef struct kb_stream kb_stream_t;

/*  Next event, waiting at most timeout_ms (-1 = forever). NULL on time-out.
    After the last event (RESULT for runs, END for log follows) it returns
    NULL at once and kb_stream_ended() is true. Caller owns the event. */
KB_EXPORT kb_event_t *kb_stream_next(kb_stream_t *self, int timeout_ms);
KB_EXPORT bool kb_stream_ended(kb_stream_t *self);
KB_EXPORT void kb_stream_destroy(kb_stream_t **self_p);

/*  Submit a run. Returns a stream whose first event is START and whose last
    is RESULT, or NULL with err set for anything wrong before the run starts
    (BAD_REQUEST, SESSION_NOT_FOUND, LANGUAGE_NOT_SUPPORTED,
    UNSUPPORTED_OPTION, PAYLOAD_TOO_LARGE, KERNEL_START_FAILED for a default
    context that cannot start). Caller owns the stream. */
KB_EXPORT kb_stream_t *kb_service_run_start(kb_service_t *self, const kb_run_opts_t *opts,
                                            kb_error_t *err);

/*  Run and wait for the InterpreterResult JSON, with no events on the way
    (the caller's thread wakes once). NULL with err set as for
    kb_service_run_start. Caller owns. */
KB_EXPORT json_t *kb_service_run_json(kb_service_t *self, const kb_run_opts_t *opts,
                                      kb_error_t *err);

/*  The same, as a result document: nothing is copied. Caller owns. */
KB_EXPORT kb_result_doc_t *kb_service_run_doc(kb_service_t *self, const kb_run_opts_t *opts,
                                              kb_error_t *err);

/*  Called for each event of a run, on the calling thread, in order. The
    event is borrowed. */
typedef void(kb_event_fn)(const kb_event_t *event, void *arg);

/*  Run and wait: calls on_event (if not NULL) for every event and returns the
    result. NULL with err set on errors before the run starts. Caller owns. */
KB_EXPORT kb_result_t *kb_service_run(kb_service_t *self, const kb_run_opts_t *opts,
                                      kb_event_fn *on_event, void *arg, kb_error_t *err);

/* ---- Processes (run records) --------------------------------------------- */

/*  {processes:[...]} filtered by state ("running"|"terminal"|NULL) and
    context id (NULL: all). Caller owns. */
KB_EXPORT json_t *kb_service_process_list(kb_service_t *self, const char *state,
                                          const char *context_id, kb_error_t *err);

/*  The process record. PROCESS_NOT_FOUND when unknown. Caller owns. */
KB_EXPORT json_t *kb_service_process_get(kb_service_t *self, const char *process_id,
                                         kb_error_t *err);

/*  The InterpreterResult of a finished run; PROCESS_RUNNING while it runs. */
KB_EXPORT json_t *kb_service_process_result(kb_service_t *self, const char *process_id,
                                            kb_error_t *err);
KB_EXPORT kb_result_doc_t *kb_service_process_result_doc(kb_service_t *self, const char *process_id,
                                                         kb_error_t *err);

/*  {frames, next_cursor, eof} from cursor (negative: the first frame kept),
    at most limit frames (0: all). Caller owns. */
KB_EXPORT json_t *kb_service_process_logs(kb_service_t *self, const char *process_id,
                                          long long cursor, size_t limit, kb_error_t *err);

/*  Follow a process's logs: a LOG event per frame from cursor on (negative:
    first kept), live as they come, then END {cursor} once the run has
    ended. Caller owns the stream. */
KB_EXPORT kb_stream_t *kb_service_process_follow(kb_service_t *self, const char *process_id,
                                                 long long cursor, kb_error_t *err);

/*  Wait up to timeout seconds (negative: forever) for the process to end.
    Returns {state, exit_code, signal, reason, raw_reason}; state "running"
    with null fields when the wait ran out first. Caller owns. */
KB_EXPORT json_t *kb_service_process_wait(kb_service_t *self, const char *process_id,
                                          double timeout, kb_error_t *err);

/*  Signal a running process: "SIGINT" interrupts the kernel, "SIGTERM" and
    "SIGKILL" kill it (the context vanishes). PROCESS_NOT_FOUND,
    BAD_REQUEST for other names; a finished process is left alone (0). */
KB_EXPORT int kb_service_process_signal(kb_service_t *self, const char *process_id,
                                        const char *signal, kb_error_t *err);

/*  Forget a finished process record; PROCESS_RUNNING while it runs. */
KB_EXPORT int kb_service_process_delete(kb_service_t *self, const char *process_id,
                                        kb_error_t *err);

#ifdef __cplusplus
}
#endif

#endif
