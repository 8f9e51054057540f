/*  test_error.c - the typed errors of the contract (kb_error: names, HTTP
    statuses, setters) and the names of a run's reasons (kb_result). */
#include "kb_testutil.h"

#include "kernelbridge/kb_error.h"
#include "kernelbridge/kb_result.h"

static void test_error_codes(void)
{
    CHECK_STR(kb_code_name(KB_OK), "OK");
    CHECK_STR(kb_code_name(KB_ERR_BAD_REQUEST), "BAD_REQUEST");
    CHECK_STR(kb_code_name(KB_ERR_INVALID_REQUEST_BODY), "INVALID_REQUEST_BODY");
    CHECK_STR(kb_code_name(KB_ERR_UNAUTHORIZED), "UNAUTHORIZED");
    CHECK_STR(kb_code_name(KB_ERR_SESSION_NOT_FOUND), "SESSION_NOT_FOUND");
    CHECK_STR(kb_code_name(KB_ERR_PROCESS_NOT_FOUND), "PROCESS_NOT_FOUND");
    CHECK_STR(kb_code_name(KB_ERR_LANGUAGE_NOT_SUPPORTED), "LANGUAGE_NOT_SUPPORTED");
    CHECK_STR(kb_code_name(KB_ERR_NOT_FOUND), "NOT_FOUND");
    CHECK_STR(kb_code_name(KB_ERR_METHOD_NOT_ALLOWED), "METHOD_NOT_ALLOWED");
    CHECK_STR(kb_code_name(KB_ERR_CONTEXT_EXISTS), "CONTEXT_EXISTS");
    CHECK_STR(kb_code_name(KB_ERR_PROTECTED_CONTEXT), "PROTECTED_CONTEXT");
    CHECK_STR(kb_code_name(KB_ERR_UNSUPPORTED_OPTION), "UNSUPPORTED_OPTION");
    CHECK_STR(kb_code_name(KB_ERR_PROCESS_RUNNING), "PROCESS_RUNNING");
    CHECK_STR(kb_code_name(KB_ERR_KERNEL_START_FAILED), "KERNEL_START_FAILED");
    CHECK_STR(kb_code_name(KB_ERR_PAYLOAD_TOO_LARGE), "PAYLOAD_TOO_LARGE");
    CHECK_STR(kb_code_name(KB_ERR_TOO_MANY_CONTEXTS), "TOO_MANY_CONTEXTS");
    CHECK_STR(kb_code_name(KB_ERR_UNAVAILABLE), "UNAVAILABLE");
    /* SPEC section 5 names the 500 code INTERNAL_ERROR. */
    CHECK_STR(kb_code_name(KB_ERR_INTERNAL), "INTERNAL_ERROR");
    CHECK_STR(kb_code_name(KB_ERR_URI_TOO_LONG), "URI_TOO_LONG");
    CHECK_STR(kb_code_name(KB_ERR_HEADERS_TOO_LARGE), "HEADERS_TOO_LARGE");
    CHECK_STR(kb_code_name(KB_ERR_LIMIT_EXCEEDED), "LIMIT_EXCEEDED");
    CHECK_STR(kb_code_name(KB_ERR_CHECKPOINT_NOT_FOUND), "CHECKPOINT_NOT_FOUND");

    CHECK(kb_code_http_status(KB_OK) == 200);
    CHECK(kb_code_http_status(KB_ERR_BAD_REQUEST) == 400);
    CHECK(kb_code_http_status(KB_ERR_INVALID_REQUEST_BODY) == 400);
    CHECK(kb_code_http_status(KB_ERR_UNAUTHORIZED) == 401);
    CHECK(kb_code_http_status(KB_ERR_SESSION_NOT_FOUND) == 404);
    CHECK(kb_code_http_status(KB_ERR_PROCESS_NOT_FOUND) == 404);
    CHECK(kb_code_http_status(KB_ERR_LANGUAGE_NOT_SUPPORTED) == 404);
    CHECK(kb_code_http_status(KB_ERR_NOT_FOUND) == 404);
    CHECK(kb_code_http_status(KB_ERR_METHOD_NOT_ALLOWED) == 405);
    CHECK(kb_code_http_status(KB_ERR_CONTEXT_EXISTS) == 409);
    CHECK(kb_code_http_status(KB_ERR_PROTECTED_CONTEXT) == 400);
    CHECK(kb_code_http_status(KB_ERR_UNSUPPORTED_OPTION) == 400);
    CHECK(kb_code_http_status(KB_ERR_PROCESS_RUNNING) == 409);
    CHECK(kb_code_http_status(KB_ERR_KERNEL_START_FAILED) == 503);
    CHECK(kb_code_http_status(KB_ERR_PAYLOAD_TOO_LARGE) == 413);
    CHECK(kb_code_http_status(KB_ERR_TOO_MANY_CONTEXTS) == 429);
    CHECK(kb_code_http_status(KB_ERR_UNAVAILABLE) == 503);
    CHECK(kb_code_http_status(KB_ERR_INTERNAL) == 500);
    CHECK(kb_code_http_status(KB_ERR_URI_TOO_LONG) == 414);
    CHECK(kb_code_http_status(KB_ERR_HEADERS_TOO_LARGE) == 431);
    CHECK(kb_code_http_status(KB_ERR_LIMIT_EXCEEDED) == 409);
    CHECK(kb_code_http_status(KB_ERR_CHECKPOINT_NOT_FOUND) == 404);

    kb_error_t err;
    CHECK(kb_error_set(&err, KB_ERR_SESSION_NOT_FOUND, "context %s vanished: %d", "c1", 7) == -1);
    CHECK(err.code == KB_ERR_SESSION_NOT_FOUND);
    CHECK_STR(err.message, "context c1 vanished: 7");
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CHECK(kb_error_set(&err, KB_ERR_BAD_REQUEST, "%s", big) == -1);
    CHECK(strlen(err.message) == sizeof err.message - 1);
    CHECK(kb_error_set(NULL, KB_ERR_INTERNAL, "nobody listens") == -1);
    kb_error_clear(&err);
    CHECK(err.code == KB_OK);
    CHECK_STR(err.message, "");
    kb_error_clear(NULL);

    CHECK(kb_reason_name(KB_REASON_NONE) == NULL);
    CHECK_STR(kb_reason_name(KB_REASON_EXITED), "exited");
    CHECK_STR(kb_reason_name(KB_REASON_TIMED_OUT), "timed_out");
    CHECK_STR(kb_reason_name(KB_REASON_SIGNALED), "signaled");
    CHECK_STR(kb_reason_name(KB_REASON_FAILED), "failed");
    CHECK_STR(kb_reason_name(KB_REASON_SANDBOX_STOPPED), "sandbox_stopped");
}

int main(void)
{
    RUN_TEST(test_error_codes);
    return kb_test_summary();
}
