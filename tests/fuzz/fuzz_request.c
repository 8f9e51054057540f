/*  fuzz_request.c - libFuzzer target for the front ends' request parser
    (src/service/engine/kb_request.c).

    Input layout: byte 0 picks what is read, the rest is the body, in an
    allocation of its own size (no NUL after it) so that ASan sees any
    over-read.

    Mode bits of byte 0:
      0x01  E2B's field names and rules (else the native ones)
      0x02  a context to create (else a run)
      0x04  the rest is not the body but a recipe for one: fields named
            from the front ends' tables, with values of every JSON type,
            so that the value checks are reached without guessing names
      0x08  Jupyter's bodies instead: a kernel to start (else, with 0x02,
            a session; with 0x01, a native signal)

    Checks beyond "no crash, no leak": a failure always says why, with a
    code of the contract; a run that parses and validates has code within
    the limit, a valid context id never together with isolated, a finite
    non-negative timeout and an object of strings as env; under E2B's rules
    a run names a context or a language, never both; a context that parses
    names a language or a kernelspec and a valid id; parsing is a function
    of the bytes (twice gives the same answer).

    Built by CMake with -DKB_FUZZ=ON -DCMAKE_C_COMPILER=clang. */
#include "service/engine/kb_request.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MODE_E2B 0x01
#define MODE_CONTEXT 0x02
#define MODE_RECIPE 0x04
#define MODE_JUPYTER 0x08
/*  Small, so that the size check is reached with small inputs. */
#define FUZZ_MAX_CODE 256

static void check(int ok)
{
    if (!ok)
        abort();
}

static void check_failure(const kb_error_t *err)
{
    check(err->code == KB_ERR_BAD_REQUEST || err->code == KB_ERR_INVALID_REQUEST_BODY
          || err->code == KB_ERR_PAYLOAD_TOO_LARGE || err->code == KB_ERR_SESSION_NOT_FOUND);
    check(err->message[0] != '\0');
}

static void check_env(const json_t *env)
{
    if (!env)
        return;
    check(json_is_object(env));
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)env, key, value)
    {
        check(*key && !strchr(key, '='));
        check(json_is_string(value)
              && strlen(json_string_value(value)) == json_string_length(value));
    }
}

static void fuzz_run(kb_front_t front, const char *body, size_t len)
{
    kb_error_t err = { KB_OK, "" }, again = { KB_OK, "" };
    kb_run_request_t request, twice;
    int rc = kb_run_request_parse(&request, front, body, len, &err);
    int rc2 = kb_run_request_parse(&twice, front, body, len, &again);
    check(rc == rc2 && err.code == again.code && strcmp(err.message, again.message) == 0);
    kb_run_request_clear(&twice);
    if (rc != 0) {
        check_failure(&err);
        check(request.body == NULL);
        return;
    }
    const kb_run_opts_t *opts = &request.opts;
    if (front == KB_FRONT_E2B)
        check((opts->context_id == NULL) != (opts->language == NULL));
    if (kb_run_opts_validate(opts, FUZZ_MAX_CODE, &err) == 0) {
        check(opts->code && strlen(opts->code) <= FUZZ_MAX_CODE);
        check(!opts->context_id || kb_context_id_valid(opts->context_id));
        check(!(opts->isolated && opts->context_id));
        check(opts->timeout >= 0 && isfinite(opts->timeout));
        check_env(opts->env);
    } else
        check_failure(&err);
    kb_run_request_clear(&request);
}

static void fuzz_context(kb_front_t front, const char *body, size_t len)
{
    kb_error_t err = { KB_OK, "" };
    kb_context_request_t request;
    if (kb_context_request_parse(&request, front, body, len, &err) != 0) {
        check_failure(&err);
        check(request.body == NULL);
        return;
    }
    const kb_context_opts_t *opts = &request.opts;
    check(opts->language || opts->kernel_name);
    check(!opts->context_id || kb_context_id_valid(opts->context_id));
    check(!opts->cwd || front == KB_FRONT_NATIVE || *opts->cwd);
    check_env(opts->env);
    check(kb_context_opts_validate(opts, &err) == 0);
    kb_context_request_clear(&request);
}

/*  A kernel's env keeps only KERNEL_* and JPY_* names (its values are
    checked later, by kb_context_opts_validate). */
static void check_kernel_env(const json_t *env)
{
    if (!env)
        return;
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)env, key, value)
    {
        check(strncmp(key, "KERNEL_", 7) == 0 || strncmp(key, "JPY_", 4) == 0);
    }
}

/*  Jupyter's kernel and session bodies and the native signal body: a
    failure says why with a code of the contract; a success holds only
    what the contract lets through. */
static void fuzz_jupyter(uint8_t mode, const char *body, size_t len)
{
    kb_error_t err = { KB_OK, "" };
    if (mode & MODE_E2B) {
        const char *signal = kb_signal_request_parse(body, len, &err);
        if (!signal)
            check_failure(&err);
        else
            check(strcmp(signal, "SIGINT") == 0 || strcmp(signal, "SIGTERM") == 0
                  || strcmp(signal, "SIGKILL") == 0);
    } else if (mode & MODE_CONTEXT) {
        kb_session_request_t session;
        if (kb_session_request_parse(&session, body, len, &err) != 0) {
            check_failure(&err);
            return;
        }
        kb_kernel_request_t kernel;
        if (kb_kernel_request_read(&kernel, session.kernel, &err) == 0) {
            check_kernel_env(kernel.env);
            kb_kernel_request_clear(&kernel);
        } else
            check_failure(&err);
        kb_session_request_clear(&session);
    } else {
        kb_kernel_request_t kernel;
        if (kb_kernel_request_parse(&kernel, body, len, &err) != 0) {
            check_failure(&err);
            return;
        }
        check_kernel_env(kernel.env);
        kb_kernel_request_clear(&kernel);
    }
}

/*  Reads the recipe byte by byte; 0 once it is used up. */
typedef struct {
    const uint8_t *data;
    size_t size, at;
} recipe_t;

static uint8_t next(recipe_t *r)
{
    return r->at < r->size ? r->data[r->at++] : 0;
}

static json_t *recipe_string(recipe_t *r)
{
    char text[32];
    size_t len = next(r) % sizeof text;
    for (size_t i = 0; i < len; i++)
        text[i] = (char)next(r);
    return json_stringn(text, len); /* NULL when not UTF-8 */
}

static json_t *recipe_value(recipe_t *r, int depth)
{
    switch (next(r) % 8) {
        case 0:
            return recipe_string(r);
        case 1:
            return json_integer((json_int_t)next(r) - 128);
        case 2:
            return json_real(((double)next(r) - 128) / 16.0);
        case 3:
            return json_boolean(next(r) & 1);
        case 4:
            return json_null();
        case 5: {
            json_t *object = json_object();
            for (int n = next(r) % 4; n > 0 && depth < 2; n--) {
                json_t *name = recipe_string(r);
                if (name)
                    json_object_set_new(object, json_string_value(name),
                                        recipe_value(r, depth + 1));
                json_decref(name);
            }
            return object;
        }
        case 6: {
            json_t *array = json_array();
            for (int n = next(r) % 3; n > 0 && depth < 2; n--)
                json_array_append_new(array, recipe_value(r, depth + 1));
            return array;
        }
        default:
            return json_string("default");
    }
}

/*  A body text made from the recipe; caller frees. */
static char *recipe_body(const uint8_t *data, size_t size)
{
    static const char *const names[]
        = { "code", "language", "kernel_name", "context_id", "isolated", "timeout",
            "cwd",  "env",      "strip_ansi",  "env_vars",   "other",    "name",
            "path", "kernel",   "type",        "signal",     "notebook", "id" };
    recipe_t r = { data, size, 0 };
    json_t *body = json_object();
    while (r.at < r.size) {
        const char *name = names[next(&r) % (sizeof names / sizeof names[0])];
        json_object_set_new(body, name, recipe_value(&r, 0));
    }
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t mode = data[0];
    size_t len = size - 1;
    char *body = NULL;
    if (mode & MODE_RECIPE) {
        body = recipe_body(data + 1, len);
        len = body ? strlen(body) : 0;
    } else if ((body = malloc(len ? len : 1)))
        memcpy(body, data + 1, len);
    if (!body)
        return 0;
    kb_front_t front = (mode & MODE_E2B) ? KB_FRONT_E2B : KB_FRONT_NATIVE;
    if (mode & MODE_JUPYTER)
        fuzz_jupyter(mode, body, len);
    else if (mode & MODE_CONTEXT)
        fuzz_context(front, body, len);
    else
        fuzz_run(front, body, len);
    free(body);
    return 0;
}
