/*  api_program.c - a program that knows libkernelbridge only through its
    installed headers and kernelbridge.pc (check_install.sh builds it):
    the error codes' names and statuses, kb_error_set, the names of reasons
    and events, and a service started and stopped without a kernel, whose
    health gives the version. Usage: api_program VERSION. */
#include <kernelbridge.h>

#include <stdio.h>
#include <string.h>

static int failures;

#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                    \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static void check_errors(void)
{
    EXPECT(strcmp(kb_code_name(KB_OK), "OK") == 0);
    EXPECT(strcmp(kb_code_name(KB_ERR_PAYLOAD_TOO_LARGE), "PAYLOAD_TOO_LARGE") == 0);
    EXPECT(kb_code_http_status(KB_ERR_PAYLOAD_TOO_LARGE) == 413);
    EXPECT(kb_code_http_status(KB_ERR_SESSION_NOT_FOUND) == 404);
    kb_error_t err;
    EXPECT(kb_error_set(&err, KB_ERR_BAD_REQUEST, "field %s", "code") == -1);
    EXPECT(err.code == KB_ERR_BAD_REQUEST && strcmp(err.message, "field code") == 0);
    kb_error_clear(&err);
    EXPECT(err.code == KB_OK && err.message[0] == '\0');
    EXPECT(strcmp(kb_reason_name(KB_REASON_TIMED_OUT), "timed_out") == 0);
    EXPECT(strcmp(kb_event_type_name(KB_EVENT_RESULT), "result") == 0);
}

static void check_service(const char *version)
{
    kb_service_config_t config = { 0 };
    kb_error_t err = { 0 };
    kb_service_t *service = kb_service_new(&config, &err);
    EXPECT(service != NULL);
    if (!service) {
        fprintf(stderr, "kb_service_new: %s\n", err.message);
        return;
    }
    EXPECT(kb_service_sandbox_id(service) && *kb_service_sandbox_id(service));
    json_t *health = kb_service_health(service);
    EXPECT(health != NULL);
    const char *status = json_string_value(json_object_get(health, "status"));
    const char *got = json_string_value(json_object_get(health, "version"));
    EXPECT(status && strcmp(status, "ok") == 0);
    EXPECT(got && strcmp(got, version) == 0);
    json_decref(health);
    kb_service_destroy(&service);
    EXPECT(service == NULL);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s VERSION\n", argv[0]);
        return 2;
    }
    check_errors();
    check_service(argv[1]);
    if (failures == 0)
        printf("public API: ok\n");
    return failures == 0 ? 0 : 1;
}
