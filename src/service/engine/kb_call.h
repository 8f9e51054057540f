/*  kb_call.h - one call of the public C API on its way to the engine
    thread: what is asked (borrowed from the blocked caller), the answer,
    and the handshake that wakes the caller.

    A call is answered exactly once. An answer may be deferred (a context
    create waits for readiness, a process wait for the end of its run):
    the caller is blocked until then, so the call stays valid. After the
    answer the engine never touches it again. Not for: the mailbox itself
    (kb_service.c) or what a call does (the engine's handlers).
*/
#ifndef KB_CALL_H_INCLUDED
#define KB_CALL_H_INCLUDED

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernelbridge/kb_service.h"
#include "service/output/kb_stream.h"
#include "util/kb_loop.h"

typedef enum {
    KB_CALL_HEALTH,
    KB_CALL_METRICS,
    KB_CALL_KERNELSPECS,
    KB_CALL_CTX_CREATE,
    KB_CALL_CTX_DEFAULT,
    KB_CALL_CTX_GET,
    KB_CALL_CTX_LIST,
    KB_CALL_CTX_DELETE,
    KB_CALL_CTX_RESTART,
    KB_CALL_CTX_INTERRUPT,
    KB_CALL_CTX_FORK,
    KB_CALL_CTX_RESTORE,
    KB_CALL_CHECKPOINT_CREATE,
    KB_CALL_CHECKPOINT_LIST,
    KB_CALL_CHECKPOINT_DELETE,
    KB_CALL_RUN,
    KB_CALL_PROC_LIST,
    KB_CALL_PROC_GET,
    KB_CALL_PROC_RESULT,
    KB_CALL_PROC_LOGS,
    KB_CALL_PROC_FOLLOW,
    KB_CALL_PROC_WAIT,
    KB_CALL_PROC_SIGNAL,
    KB_CALL_PROC_DELETE,
    KB_CALL_CHANNELS_OPEN,
    KB_CALL_CHANNELS_INPUT,
    KB_CALL_CHANNELS_READY,
    KB_CALL_CHANNELS_CLOSE,
} kb_call_type_t;

/*  What a call asks: filled by the asking side (kb_service.c) before the
    call is posted, read-only afterwards; its pointers are borrowed from the
    blocked caller. */
typedef struct kb_call_ask {
    const kb_context_opts_t *context_opts;
    const kb_run_opts_t *run_opts;
    const char *id;
    const char *checkpoint_id;       /* CTX_RESTORE, CHECKPOINT_DELETE */
    const kb_fork_opts_t *fork_opts; /* CTX_FORK: checked; NULL: one fork */
    const char *filter_state;
    const char *filter_context;
    const char *signal;
    bool all;
    long long cursor; /* -1: none given */
    size_t limit;
    double timeout;
    kb_stream_t *stream;     /* run / follow: the caller's stream */
    kb_channels_t *channels; /* CHANNELS_*: the websocket client */
    void *msg;               /* CHANNELS_INPUT: what it sent (kb_msg_t *), for the engine to take */
    int channel;             /* CHANNELS_INPUT: its kb_channel_t */
} kb_call_ask_t;

/*  One call: its question, and its answer and handshake, written by
    kb_call.c alone (the answering handlers call its functions). */
typedef struct kb_call {
    kb_call_type_t type;
    kb_call_ask_t ask;
    /* outputs */
    json_t *result;
    kb_result_doc_t *doc; /* PROC_RESULT: the result as a document */
    char *text;           /* METRICS: the engine's families, Prometheus text; the caller's */
    kb_error_t err;
    int rc;
    bool msg_taken; /* CHANNELS_INPUT: the engine took ask.msg */
    /* answer handshake: 1 once answered; the caller waits on it as a futex */
    _Atomic uint32_t done;
    kb_timer_t timer; /* deferred waits: the engine's timer */
    void *owner;      /* deferred waits: what the request waits on */
    struct kb_call *next;
} kb_call_t;

/*  Answer a call: wakes its caller, after which the engine must not
    touch it again. */
void kb_call_answer(kb_call_t *request);
void kb_call_fail(kb_call_t *request, kb_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*  Answer with success: result (stolen; may be NULL), doc (PROC_RESULT,
    stolen) or text (METRICS, stolen); rc 0. */
void kb_call_answer_json(kb_call_t *call, json_t *result);
void kb_call_answer_doc(kb_call_t *call, kb_result_doc_t *doc);
void kb_call_answer_text(kb_call_t *call, char *text);

/*  Answer "not yet, ask again" (rc 1, no error): CHANNELS_READY. */
void kb_call_answer_not_yet(kb_call_t *call);

/*  CHANNELS_INPUT: the message the client sent (a kb_msg_t *), which the
    engine now owns (msg_taken: the asking side frees it no more). */
void *kb_call_take_msg(kb_call_t *call);

/*  A deferred wait: what the call waits on (borrowed), for its timer. */
void kb_call_set_owner(kb_call_t *call, void *owner);

/*  The mailbox's link: the call after this one, or NULL. */
void kb_call_set_next(kb_call_t *call, kb_call_t *next);

/*  Fail a call that never reached the engine (the service is stopping),
    on the caller's own thread: its error set, rc -1, nothing to wait for. */
void kb_call_refuse(kb_call_t *call, kb_code_t code, const char *message);

/*  A call of that type with nothing asked yet (cursor -1, no timer). */
void kb_call_init(kb_call_t *call, kb_call_type_t type);

/*  The caller's side: block until the call is answered. */
void kb_call_wait(kb_call_t *call);

#endif
