/*  kb_error.c - names, HTTP statuses and setters of the typed errors of
    kb_error.h. Pure code: no I/O, no allocation. */
#include "kernelbridge/kb_error.h"

#include <stdarg.h>
#include <stdio.h>

const char *kb_code_name(kb_code_t code)
{
    switch (code) {
        case KB_OK:
            return "OK";
        case KB_ERR_BAD_REQUEST:
            return "BAD_REQUEST";
        case KB_ERR_INVALID_REQUEST_BODY:
            return "INVALID_REQUEST_BODY";
        case KB_ERR_UNAUTHORIZED:
            return "UNAUTHORIZED";
        case KB_ERR_SESSION_NOT_FOUND:
            return "SESSION_NOT_FOUND";
        case KB_ERR_PROCESS_NOT_FOUND:
            return "PROCESS_NOT_FOUND";
        case KB_ERR_LANGUAGE_NOT_SUPPORTED:
            return "LANGUAGE_NOT_SUPPORTED";
        case KB_ERR_NOT_FOUND:
            return "NOT_FOUND";
        case KB_ERR_METHOD_NOT_ALLOWED:
            return "METHOD_NOT_ALLOWED";
        case KB_ERR_CONTEXT_EXISTS:
            return "CONTEXT_EXISTS";
        case KB_ERR_PROTECTED_CONTEXT:
            return "PROTECTED_CONTEXT";
        case KB_ERR_UNSUPPORTED_OPTION:
            return "UNSUPPORTED_OPTION";
        case KB_ERR_PROCESS_RUNNING:
            return "PROCESS_RUNNING";
        case KB_ERR_KERNEL_START_FAILED:
            return "KERNEL_START_FAILED";
        case KB_ERR_PAYLOAD_TOO_LARGE:
            return "PAYLOAD_TOO_LARGE";
        case KB_ERR_TOO_MANY_CONTEXTS:
            return "TOO_MANY_CONTEXTS";
        case KB_ERR_UNAVAILABLE:
            return "UNAVAILABLE";
        case KB_ERR_INTERNAL:
            /* SPEC section 5 spells this code INTERNAL_ERROR, unlike the enum. */
            return "INTERNAL_ERROR";
        case KB_ERR_URI_TOO_LONG:
            return "URI_TOO_LONG";
        case KB_ERR_HEADERS_TOO_LARGE:
            return "HEADERS_TOO_LARGE";
        case KB_ERR_LIMIT_EXCEEDED:
            return "LIMIT_EXCEEDED";
        case KB_ERR_CHECKPOINT_NOT_FOUND:
            return "CHECKPOINT_NOT_FOUND";
    }
    /* A value outside the enum is a bug of the caller; render it as an
       internal error rather than crash the HTTP layer that shows it. */
    return "INTERNAL_ERROR";
}

int kb_code_http_status(kb_code_t code)
{
    switch (code) {
        case KB_OK:
            return 200;
        case KB_ERR_BAD_REQUEST:
        case KB_ERR_INVALID_REQUEST_BODY:
        case KB_ERR_PROTECTED_CONTEXT:
        case KB_ERR_UNSUPPORTED_OPTION:
            return 400;
        case KB_ERR_UNAUTHORIZED:
            return 401;
        case KB_ERR_SESSION_NOT_FOUND:
        case KB_ERR_PROCESS_NOT_FOUND:
        case KB_ERR_LANGUAGE_NOT_SUPPORTED:
        case KB_ERR_NOT_FOUND:
        case KB_ERR_CHECKPOINT_NOT_FOUND:
            return 404;
        case KB_ERR_METHOD_NOT_ALLOWED:
            return 405;
        case KB_ERR_CONTEXT_EXISTS:
        case KB_ERR_PROCESS_RUNNING:
        case KB_ERR_LIMIT_EXCEEDED:
            return 409;
        case KB_ERR_PAYLOAD_TOO_LARGE:
            return 413;
        case KB_ERR_TOO_MANY_CONTEXTS:
            return 429;
        case KB_ERR_KERNEL_START_FAILED:
        case KB_ERR_UNAVAILABLE:
            return 503;
        case KB_ERR_INTERNAL:
            return 500;
        case KB_ERR_URI_TOO_LONG:
            return 414;
        case KB_ERR_HEADERS_TOO_LARGE:
            return 431;
    }
    return 500;
}

int kb_error_set(kb_error_t *err, kb_code_t code, const char *fmt, ...)
{
    if (!err)
        return -1;
    err->code = code;
    err->message[0] = '\0';
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void kb_error_clear(kb_error_t *err)
{
    if (!err)
        return;
    err->code = KB_OK;
    err->message[0] = '\0';
}
