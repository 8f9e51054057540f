/*  kb_request.h - the requests of the front ends, read in one place: a
    JSON body becomes the service's options, kb_run_opts_t for a run
    (native POST /run, also as an SSE stream, and E2B's POST /execute) and
    kb_context_opts_t for a context (POST /contexts of both), by one parser
    that a small table of field names per front end drives; the bodies of
    the other routes that take one (a native signal, Jupyter's kernels and
    sessions); and the values
    of those options are checked by one function each, kb_run_opts_validate
    (which kb_service_run_start applies to every run, whoever calls it) and
    kb_context_opts_validate.

    What it is for: the shape of a request (a JSON object, fields of the
    right types, strings without NUL) and the values the contract fixes
    (code required and within its size, a valid context id, isolated runs
    without one, a timeout of non-negative seconds, an environment of
    strings), each refused with a typed error and a precise message.

    What it is not for: HTTP (status lines, headers, query strings are
    src/server's) or anything that depends on the service's state (an
    unknown context or language, a taken id: the engine decides those).
    Pure code: no I/O, no globals but constant tables. */
#ifndef KB_REQUEST_H_INCLUDED
#define KB_REQUEST_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "kernelbridge/kb_error.h"
#include "kernelbridge/kb_service.h"

#ifdef __cplusplus
extern "C" {
#endif

/*  A context id is 1 to this many characters of [A-Za-z0-9._-] (SPEC 3). */
#define KB_CONTEXT_ID_MAX 64
/*  Longest language name an E2B request may give. */
#define KB_REQUEST_LANGUAGE_MAX 64

/*  Whose field names and rules a body follows. */
typedef enum {
    KB_FRONT_NATIVE, /* SPEC section 5; the names of kb_run_opts_t's fields */
    KB_FRONT_E2B,    /* E2B's code-interpreter server: code, context_id, language, env_vars */
    KB_FRONT_MCP,    /* MCP's tools (SPEC 14): native names, run_code's and create_context's */
} kb_front_t;

/*  A run read from a body. opts borrows its strings from body and from
    language (E2B's names normalised), so it is valid until the request is
    cleared. */
typedef struct {
    kb_run_opts_t opts;
    json_t *body; /* owned */
    char language[KB_REQUEST_LANGUAGE_MAX + 1];
} kb_run_request_t;

/*  A context to create, read from a body; borrows like kb_run_request_t. */
typedef struct {
    kb_context_opts_t opts;
    json_t *body; /* owned */
    char language[KB_REQUEST_LANGUAGE_MAX + 1];
} kb_context_request_t;

/*  The body data[0..len) (borrowed; need not be NUL-terminated) as a JSON
    object; an empty body is {} when empty_ok. NULL with err set:
    INVALID_REQUEST_BODY when it is empty or not JSON, BAD_REQUEST when it
    is JSON but not an object. Strings may hold NUL (so that one is refused
    by name, as BAD_REQUEST). Caller owns the result. */
json_t *kb_request_body(const char *data, size_t len, bool empty_ok, kb_error_t *err);

/*  The string field key of body: 1 present (*out borrowed from body), 0
    absent or null, -1 with BAD_REQUEST in err when it is not a string or
    holds a NUL. */
int kb_request_string(const json_t *body, const char *key, const char **out, kb_error_t *err);

/*  Read a run from a body with front's field names and rules. E2B's: its
    language names (trimmed, any case; none is python, js, ts and
    typescript are javascript), context_id and language exclusive, and its
    context ids (kb_request_e2b_context_id). Values are left to
    kb_run_opts_validate, which the service applies. 0, or -1 with err set
    and self holding nothing. Clear self after a success. */
int kb_run_request_parse(kb_run_request_t *self, kb_front_t front, const char *data, size_t len,
                         kb_error_t *err);

/*  The same from a JSON object already read (an MCP tool's arguments):
    takes ownership of body, even when it fails. */
int kb_run_request_read(kb_run_request_t *self, kb_front_t front, json_t *body, kb_error_t *err);

/*  Read a context to create from a body with front's field names (E2B's:
    language and cwd only, an empty body allowed, an empty cwd is the
    daemon's), then check it with kb_context_opts_validate. 0, or -1 with
    err set and self holding nothing. Clear self after a success. */
int kb_context_request_parse(kb_context_request_t *self, kb_front_t front, const char *data,
                             size_t len, kb_error_t *err);

/*  The same from a JSON object already read; takes ownership of body,
    even when it fails. */
int kb_context_request_read(kb_context_request_t *self, kb_front_t front, json_t *body,
                            kb_error_t *err);

/*  Release what a parsed request holds. Safe on a zeroed or cleared one. */
void kb_run_request_clear(kb_run_request_t *self);
void kb_context_request_clear(kb_context_request_t *self);

/*  A POST /contexts/{id}/fork body {count?, context_ids?, memory_limit?,
    pids_limit?} (empty: one fork), checked with kb_fork_opts_validate.
    0, or -1 with err (BAD_REQUEST naming the field) and self holding
    nothing. Clear self after a success. */
typedef struct {
    kb_fork_opts_t opts; /* its strings borrowed from body */
    const char **ids;    /* NULL-terminated, or NULL */
    json_t *body;        /* owned */
} kb_fork_request_t;
int kb_fork_request_parse(kb_fork_request_t *self, const char *data, size_t len, kb_error_t *err);
void kb_fork_request_clear(kb_fork_request_t *self);

/*  The checkpoint_id of a POST /contexts/{id}/restore body, borrowed from
 *body (the caller's to free), or NULL with err (and *body NULL). */
const char *kb_restore_request_parse(json_t **body, const char *data, size_t len, kb_error_t *err);

/*  The signal of a native POST /processes/{id}/signals body {signal}: one
    of SIGINT, SIGTERM, SIGKILL (a constant string), or NULL with err set:
    the body's errors (kb_request_body), BAD_REQUEST when signal is not a
    string or not one of those. */
const char *kb_signal_request_parse(const char *data, size_t len, kb_error_t *err);

/*  A kernel to start, as Jupyter's POST /api/kernels body {name?, path?,
    env?} gives it, or a session's kernel object. name and path borrow
    from the object read. */
typedef struct {
    const char *name; /* NULL or "": the default kernelspec */
    const char *path; /* the notebook's path, as given; NULL when absent */
    json_t *env;      /* owned: the KERNEL_* and JPY_* variables given, NULL when none */
    json_t *body;     /* owned when parsed from bytes, else NULL */
} kb_kernel_request_t;

/*  Read a kernel from object (borrowed, may be NULL: nothing given; self
    borrows from it). Variables other than KERNEL_* and JPY_* are dropped
    (Jupyter Server 1.x sends its whole environment); their values are
    left to kb_context_opts_validate. 0, or -1 with BAD_REQUEST in err (a
    field of the wrong type) and self holding nothing. */
int kb_kernel_request_read(kb_kernel_request_t *self, const json_t *object, kb_error_t *err);

/*  The same from a body (data[0..len), borrowed; empty is {}); also
    kb_request_body's errors. Clear self after a success. */
int kb_kernel_request_parse(kb_kernel_request_t *self, const char *data, size_t len,
                            kb_error_t *err);
void kb_kernel_request_clear(kb_kernel_request_t *self);

/*  A Jupyter session body {path?, name?, type?, kernel?: {id?, name?,
    env?, path?}} (older clients: {notebook: {path}}). The strings borrow
    from body; kernel is the kernel object to start one from (read it with
    kb_kernel_request_read) unless kernel_id names one. */
typedef struct {
    const char *path, *name, *type; /* NULL when absent */
    const json_t *kernel;           /* borrowed from body; NULL when none */
    const char *kernel_id;          /* kernel.id; NULL when absent */
    json_t *body;                   /* owned */
} kb_session_request_t;

/*  Read a session body: kb_request_body's errors (an empty body is one),
    BAD_REQUEST for a field of the wrong type. 0, or -1 with err set and
    self holding nothing. Clear self after a success. */
int kb_session_request_parse(kb_session_request_t *self, const char *data, size_t len,
                             kb_error_t *err);
void kb_session_request_clear(kb_session_request_t *self);

/*  Check the values of a run's options (opts borrowed, may be NULL): code
    required, valid UTF-8 and at most max_code_bytes (PAYLOAD_TOO_LARGE
    beyond), a valid context_id, not together with isolated, a finite
    non-negative timeout, env NULL or an object of string values without
    NUL whose names are non-empty without '=' or NUL. 0, or -1 with err
    set (BAD_REQUEST, PAYLOAD_TOO_LARGE). */
/*  The range of a context's limits (0: none). */
#define KB_MEMORY_LIMIT_MIN (256LL << 20) /* ipykernel alone maps ~140 MiB of data */
#define KB_MEMORY_LIMIT_MAX (1LL << 50)
#define KB_PIDS_LIMIT_MIN 8 /* octave_kernel: python, octave-cli and their helpers */
#define KB_PIDS_LIMIT_MAX 4194304

/*  memory_limit and pids_limit: 0 (none), or within the range above.
    0, or -1 with BAD_REQUEST naming the field. */
int kb_limits_validate(long long memory_limit, long long pids_limit, kb_error_t *err);

int kb_run_opts_validate(const kb_run_opts_t *opts, size_t max_code_bytes, kb_error_t *err);

/*  Check a context's options: language or kernel_name given, a valid
    context_id when one is given, env as for a run. 0, or -1 with
    BAD_REQUEST in err. */
int kb_context_opts_validate(const kb_context_opts_t *opts, kb_error_t *err);

/*  True when id is 1 to KB_CONTEXT_ID_MAX characters of [A-Za-z0-9._-]. */
bool kb_context_id_valid(const char *id);

/*  The service's id for a context id as E2B's SDKs send it (in a body or
    a path): "default" is the Python default context (default-python);
    others are themselves (borrowed). NULL with SESSION_NOT_FOUND ("Context
    <id> not found") when id cannot name a context. */
const char *kb_request_e2b_context_id(const char *id, kb_error_t *err);

#ifdef __cplusplus
}
#endif

#endif
