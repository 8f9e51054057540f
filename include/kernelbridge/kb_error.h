/*  kb_error.h - typed errors of kernelbridge, one code per error of the
    contract (SPEC section 5), each with its HTTP status and a message. */
#ifndef KB_ERROR_H_INCLUDED
#define KB_ERROR_H_INCLUDED

#include <stddef.h>

#include "kb_export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    KB_OK = 0,
    KB_ERR_BAD_REQUEST,            /* 400 */
    KB_ERR_INVALID_REQUEST_BODY,   /* 400 */
    KB_ERR_UNAUTHORIZED,           /* 401 */
    KB_ERR_SESSION_NOT_FOUND,      /* 404 */
    KB_ERR_PROCESS_NOT_FOUND,      /* 404 */
    KB_ERR_LANGUAGE_NOT_SUPPORTED, /* 404 */
    KB_ERR_NOT_FOUND,              /* 404, unknown route */
    KB_ERR_METHOD_NOT_ALLOWED,     /* 405 */
    KB_ERR_CONTEXT_EXISTS,         /* 409 */
    KB_ERR_PROTECTED_CONTEXT,      /* 400 */
    KB_ERR_UNSUPPORTED_OPTION,     /* 400 */
    KB_ERR_PROCESS_RUNNING,        /* 409 */
    KB_ERR_KERNEL_START_FAILED,    /* 503 */
    KB_ERR_PAYLOAD_TOO_LARGE,      /* 413 */
    KB_ERR_TOO_MANY_CONTEXTS,      /* 429 */
    KB_ERR_UNAVAILABLE,            /* 503, shutting down */
    KB_ERR_INTERNAL,               /* 500, never for bad input */
    KB_ERR_URI_TOO_LONG,           /* 414 */
    KB_ERR_HEADERS_TOO_LARGE,      /* 431 */
    KB_ERR_LIMIT_EXCEEDED,         /* 409, a per-context count (--max-checkpoints) */
    KB_ERR_CHECKPOINT_NOT_FOUND,   /* 404 */
} kb_code_t;

typedef struct {
    kb_code_t code;
    char message[1024];
} kb_error_t;

/*  "BAD_REQUEST", ... ("OK" for KB_OK). Static string. */
KB_EXPORT const char *kb_code_name(kb_code_t code);

/*  The HTTP status of a code (200 for KB_OK). */
KB_EXPORT int kb_code_http_status(kb_code_t code);

/*  Set err (if not NULL) to code and a printf-style message. Returns -1 so
    that callers can `return kb_error_set(...)`. */
KB_EXPORT int kb_error_set(kb_error_t *err, kb_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*  Clear err to KB_OK and an empty message. Safe on NULL. */
KB_EXPORT void kb_error_clear(kb_error_t *err);

#ifdef __cplusplus
}
#endif

#endif
