/*  kb_execution.h - the fold of one run: the iopub and shell messages of one
    execute_request, applied in arrival order, into one kb_result_t
    (SPEC section 2), with one stream event per step for live followers.

    What it is for: deciding what each kernel message means for the run
    (outputs, logs, error, execution count, completion) and bounding what is
    kept. What it is not for: I/O, timers or the process record. The caller
    reads sockets, decides when a run has waited long enough, and fills in
    process_id and the context fields of the finished result.

    Rules worth knowing beyond SPEC section 2:
    - The output cap counts the bytes of logs and of output data and metadata
      kept now (clear_output gives bytes back). Output beyond it is dropped
      and not emitted either (a stream message is cut at a UTF-8 boundary);
      the result says truncated, one SYSTEM event says so when it starts,
      and one more at the end says how many bytes were dropped.
    - An error from an execute_reply is held back until the iopub idle has
      come too (or until finish / set_error), because the iopub error of the
      same run may still be on its way on the other socket: the iopub error
      wins and only one ERROR event is emitted for it.
    - The execute_reply's page payloads (IPython's pager) become results
      entries, not main, held until idle (or finish) so that they follow
      every other entry; other payload kinds are left out (docs/results.md).
    - An iopub error is the next output for a clear_output(wait=true) before
      it: what was waiting is cleared, as nbclient and JupyterLab do.
    - Iopub message types with no meaning for a result (comm_*, debug_event,
      ...) of this run count as folded (1) and change nothing.
    - Folding after kb_execution_finish returns 0 and changes nothing. */
#ifndef KB_EXECUTION_H_INCLUDED
#define KB_EXECUTION_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "kernelbridge/kb_result.h"
#include "kernelbridge/kb_service.h" /* kb_event_type_t */
#include "service/output/kb_runlog.h"
#include "wire/kb_wire.h" /* kb_msg_t */

#ifdef __cplusplus
extern "C" {
#endif

/*  Gets one event of the run; takes ownership of data. With a log (see
    the options), stream and system text is frame cursor of the log and
    data is NULL; otherwise cursor is -1. */
typedef void(kb_execution_emit_fn)(kb_event_type_t type, json_t *data, long long cursor, void *arg);

typedef struct {
    size_t max_output_bytes; /* cap on outputs+logs kept for this run; 0 = 64 MiB */
    bool strip_ansi;         /* strip ANSI escape sequences from traceback lines */
    /* Where stream and system text is kept (borrowed; NULL: in the result's
       logs). With a log the finished result's logs are empty: they are the
       log's view. The log's budget may keep less than the cap. */
    kb_runlog_t *log;
} kb_execution_opts_t;

typedef struct kb_execution kb_execution_t;

/*  A run whose execute_request had header.msg_id == msg_id (borrowed,
    copied). opts is borrowed (NULL: all defaults). emit (may be NULL) gets
    one event per fold step, in order, on the calling thread. Returns NULL
    when out of memory. Caller owns the result. */
kb_execution_t *kb_execution_new(const char *msg_id, const kb_execution_opts_t *opts,
                                 kb_execution_emit_fn *emit, void *arg);

/*  Safe on NULL; sets *self_p to NULL. */
void kb_execution_destroy(kb_execution_t **self_p);

/*  Fold one iopub message (borrowed; the run may keep references to its
    JSON, never to the message). Returns 1 when folded, 0 when not for this
    run (parent_msg_id differs), -1 when for this run but malformed (e.g. a
    stream without text): the message is then ignored, and the caller
    counts it. */
int kb_execution_fold_iopub(kb_execution_t *self, const kb_msg_t *msg);

/*  Fold a shell message (execute_reply; borrowed). Same return convention;
    another msg_type with this run's parent, or a second execute_reply, is
    malformed. */
int kb_execution_fold_shell(kb_execution_t *self, const kb_msg_t *msg);

bool kb_execution_has_reply(const kb_execution_t *self);
bool kb_execution_has_idle(const kb_execution_t *self);

/*  The execute_reply and the iopub idle both came, in either order. */
bool kb_execution_complete(const kb_execution_t *self);

/*  An error was folded (iopub error, reply status error or aborted) or set
    by kb_execution_set_error. */
bool kb_execution_has_error(const kb_execution_t *self);

/*  Output of the run was lost before it reached the fold (a message over
    the max message size): the result says truncated. */
void kb_execution_dropped(kb_execution_t *self);

/*  Emit a system log line of the run (KB_EVENT_SYSTEM {text}); text is
    borrowed. Not kept in the result: system lines go to the process log. */
void kb_execution_system(kb_execution_t *self, const char *text);

/*  Set the error when the run ends for an outside reason (TimeoutError,
    KernelDied, KernelKilled, SandboxStopped; name and value borrowed, empty
    traceback). When the kernel already reported an error that one stays,
    unless force is true. Emits KB_EVENT_ERROR when the error was set. */
void kb_execution_set_error(kb_execution_t *self, const char *name, const char *value, bool force);

/*  Finish: move everything gathered into a new kb_result_t with the process
    fields given: exit_code < 0 means null; signal a static string or NULL;
    raw_reason borrowed and copied, may be NULL. For KB_REASON_EXITED the
    caller passes exit_code 0 or 1 from kb_execution_has_error. process_id,
    sandbox_id, context_id and language are left NULL for the caller to fill
    (malloc'd strings, freed by kb_result_destroy). Does not emit RESULT (the
    caller does). Call at most once. Never NULL. Caller owns the result. */
kb_result_t *kb_execution_finish(kb_execution_t *self, kb_reason_t reason, int exit_code,
                                 const char *signal, const char *raw_reason);

/*  The execution count from execute_input, execute_result or
    execute_reply; -1 if none came. */
long long kb_execution_count(const kb_execution_t *self);

#ifdef __cplusplus
}
#endif

#endif
