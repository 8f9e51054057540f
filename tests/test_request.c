/*  test_request.c - the front ends' requests (src/service/engine/kb_request.c):
    bodies to run and context options under the native and E2B field names,
    and the one validation of run and context options, with the code and
    message each refusal gives. Pure: no service, no kernel. */
#include "kb_testutil.h"
#include "service/engine/kb_request.h"

#include <math.h>

/*  Parse a run body (a C string) and return the error code (KB_OK on
    success, then *out holds the request). */
static kb_code_t run_parse(kb_front_t front, const char *body, kb_run_request_t *out,
                           kb_error_t *err)
{
    kb_error_clear(err);
    kb_run_request_t request;
    int rc = kb_run_request_parse(&request, front, body, strlen(body), err);
    if (rc != 0) {
        CHECK(err->code != KB_OK && err->message[0]);
        CHECK(request.body == NULL);
        return err->code;
    }
    if (out)
        *out = request;
    else
        kb_run_request_clear(&request);
    return KB_OK;
}

static kb_code_t run_code(kb_front_t front, const char *body)
{
    kb_error_t err;
    return run_parse(front, body, NULL, &err);
}

static kb_code_t context_code(kb_front_t front, const char *body, kb_error_t *err)
{
    kb_error_clear(err);
    kb_context_request_t request;
    if (kb_context_request_parse(&request, front, body, strlen(body), err) != 0)
        return err->code;
    kb_context_request_clear(&request);
    return KB_OK;
}

static void test_body(void)
{
    kb_error_t err;
    CHECK(kb_request_body("", 0, false, &err) == NULL && err.code == KB_ERR_INVALID_REQUEST_BODY);
    CHECK(strstr(err.message, "empty") != NULL);
    json_t *body = kb_request_body(NULL, 0, true, &err);
    CHECK(json_is_object(body) && json_object_size(body) == 0);
    json_decref(body);
    static const struct {
        const char *text;
        kb_code_t code;
    } bad[] = {
        { "{", KB_ERR_INVALID_REQUEST_BODY },
        { "{'code': '1'}", KB_ERR_INVALID_REQUEST_BODY },
        { "{\"code\": \"1\"} trailing", KB_ERR_INVALID_REQUEST_BODY },
        { "{\"code\": \"\xff\xfe\"}", KB_ERR_INVALID_REQUEST_BODY },
        { "[1, 2]", KB_ERR_BAD_REQUEST },
        { "\"1+1\"", KB_ERR_BAD_REQUEST },
        { "null", KB_ERR_BAD_REQUEST },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kb_error_clear(&err);
        CHECK(kb_request_body(bad[i].text, strlen(bad[i].text), true, &err) == NULL);
        CHECK(err.code == bad[i].code);
    }
    CHECK(kb_request_body("{\"a\": 1}", 3, false, &err) == NULL); /* only len bytes count */
    CHECK(strstr(err.message, "malformed JSON at line 1") != NULL);
    /* nesting beyond jansson's depth limit is malformed, not a crash */
    char deep[12001];
    memset(deep, '[', 6000);
    memset(deep + 6000, ']', 6000);
    deep[12000] = '\0';
    CHECK(kb_request_body(deep, strlen(deep), false, &err) == NULL
          && err.code == KB_ERR_INVALID_REQUEST_BODY);
    /* a NUL inside a string passes the parser, to be refused by name */
    body = kb_request_body("{\"s\": \"a\\u0000b\"}", 17, false, &err);
    CHECK(body != NULL);
    const char *s = NULL;
    CHECK(kb_request_string(body, "s", &s, &err) == -1 && err.code == KB_ERR_BAD_REQUEST);
    CHECK_STR(err.message, "field s must not contain NUL characters");
    CHECK(kb_request_string(body, "missing", &s, &err) == 0);
    json_decref(body);
}

static void test_native_run(void)
{
    kb_error_t err;
    kb_run_request_t request;
    CHECK(run_parse(KB_FRONT_NATIVE,
                    "{\"code\": \"1+1\", \"language\": \"r\", \"kernel_name\": \"ir\","
                    " \"context_id\": \"c-1\", \"isolated\": false, \"timeout\": 2.5,"
                    " \"cwd\": \"/tmp\", \"env\": {\"A\": \"1\"}, \"strip_ansi\": true,"
                    " \"future\": [1]}",
                    &request, &err)
          == KB_OK);
    kb_run_opts_t *o = &request.opts;
    CHECK_STR(o->code, "1+1");
    CHECK_STR(o->language, "r");
    CHECK_STR(o->kernel_name, "ir");
    CHECK_STR(o->context_id, "c-1");
    CHECK(!o->isolated && o->timeout == 2.5 && o->strip_ansi);
    CHECK_STR(o->cwd, "/tmp");
    CHECK(json_is_object(o->env) && json_object_size(o->env) == 1);
    CHECK(kb_run_opts_validate(o, 100, &err) == 0);
    kb_run_request_clear(&request);
    kb_run_request_clear(&request); /* twice is fine */

    /* null is absent; nothing but the body is required of the shape */
    CHECK(run_parse(KB_FRONT_NATIVE,
                    "{\"code\": \"x\", \"context_id\": null, \"timeout\": null, \"env\": null}",
                    &request, &err)
          == KB_OK);
    CHECK(!request.opts.context_id && request.opts.timeout == 0 && !request.opts.env);
    CHECK(!request.opts.language); /* the service's default */
    kb_run_request_clear(&request);
    CHECK(run_code(KB_FRONT_NATIVE, "{}") == KB_OK); /* code required: a value check */

    static const struct {
        const char *body;
        const char *message;
    } bad[] = {
        { "{\"code\": 1}", "field code must be a string" },
        { "{\"code\": [\"1\"]}", "field code must be a string" },
        { "{\"code\": \"1\\u0000\"}", "field code must not contain NUL characters" },
        { "{\"code\": \"1\", \"timeout\": \"5\"}",
          "field timeout must be a non-negative number of seconds" },
        { "{\"code\": \"1\", \"timeout\": true}",
          "field timeout must be a non-negative number of seconds" },
        { "{\"code\": \"1\", \"isolated\": \"yes\"}", "field isolated must be true or false" },
        { "{\"code\": \"1\", \"strip_ansi\": 1}", "field strip_ansi must be true or false" },
        { "{\"code\": \"1\", \"language\": 3}", "field language must be a string" },
        { "{\"code\": \"1\", \"kernel_name\": {}}", "field kernel_name must be a string" },
        { "{\"code\": \"1\", \"cwd\": 5}", "field cwd must be a string" },
        { "{\"code\": \"1\", \"env\": \"A=1\"}", "field env must be an object of strings" },
        { "{\"code\": \"1\", \"env\": [\"A\"]}", "field env must be an object of strings" },
        { "{\"code\": \"1\", \"context_id\": 7}", "field context_id must be a string" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(run_parse(KB_FRONT_NATIVE, bad[i].body, NULL, &err) == KB_ERR_BAD_REQUEST);
        CHECK_STR(err.message, bad[i].message);
    }
    /* E2B's names mean nothing to the native front end */
    CHECK(run_parse(KB_FRONT_NATIVE, "{\"code\": \"1\", \"env_vars\": 5}", &request, &err)
          == KB_OK);
    CHECK(request.opts.env == NULL);
    kb_run_request_clear(&request);
}

static void test_e2b_run(void)
{
    kb_error_t err;
    kb_run_request_t request;
    CHECK(run_parse(KB_FRONT_E2B, "{\"code\": \"1\", \"env_vars\": {\"A\": \"x\"}}", &request, &err)
          == KB_OK);
    CHECK_STR(request.opts.language, "python"); /* none given */
    CHECK(!request.opts.context_id && json_object_size(request.opts.env) == 1);
    kb_run_request_clear(&request);

    static const struct {
        const char *given;
        const char *language;
    } names[] = {
        { "\"\"", "python" },
        { "\"  \"", "python" },
        { "\" JS \"", "javascript" },
        { "\"ts\"", "javascript" },
        { "\"TypeScript\"", "javascript" },
        { "\"R\"", "r" },
        { "\"Python\"", "python" },
        { "null", "python" },
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char body[128];
        snprintf(body, sizeof body, "{\"code\": \"1\", \"language\": %s}", names[i].given);
        CHECK(run_parse(KB_FRONT_E2B, body, &request, &err) == KB_OK);
        CHECK_STR(request.opts.language, names[i].language);
        kb_run_request_clear(&request);
    }
    char body[256];
    snprintf(body, sizeof body, "{\"code\": \"1\", \"language\": \"%065d\"}", 0);
    CHECK(run_parse(KB_FRONT_E2B, body, NULL, &err) == KB_ERR_BAD_REQUEST);
    CHECK_STR(err.message, "language is longer than 64 characters");

    CHECK(run_parse(KB_FRONT_E2B, "{\"code\": \"1\", \"context_id\": \"default\"}", &request, &err)
          == KB_OK);
    CHECK_STR(request.opts.context_id, "default-python");
    CHECK(request.opts.language == NULL); /* the context says */
    kb_run_request_clear(&request);
    CHECK(run_parse(KB_FRONT_E2B, "{\"code\": \"1\", \"context_id\": \"ctx_1\"}", &request, &err)
          == KB_OK);
    CHECK_STR(request.opts.context_id, "ctx_1");
    kb_run_request_clear(&request);

    CHECK(run_parse(KB_FRONT_E2B,
                    "{\"code\": \"1\", \"context_id\": \"default\", \"language\": \"python\"}",
                    NULL, &err)
          == KB_ERR_BAD_REQUEST);
    CHECK_STR(err.message, "Only one of context_id or language can be provided");
    /* an id that cannot exist is not found, as E2B's server says it */
    CHECK(run_parse(KB_FRONT_E2B, "{\"code\": \"1\", \"context_id\": \"a b/c\"}", NULL, &err)
          == KB_ERR_SESSION_NOT_FOUND);
    CHECK_STR(err.message, "Context a?b/c not found");
    CHECK(run_parse(KB_FRONT_E2B, "{\"code\": \"1\", \"context_id\": true}", NULL, &err)
          == KB_ERR_BAD_REQUEST);
    CHECK(run_parse(KB_FRONT_E2B, "{\"code\": \"1\", \"env_vars\": [\"A\"]}", NULL, &err)
          == KB_ERR_BAD_REQUEST);
    CHECK_STR(err.message, "field env_vars must be an object of strings");
    CHECK(run_code(KB_FRONT_E2B, "{\"code\": \"a\\u0000b\"}") == KB_ERR_BAD_REQUEST);
    /* the native names mean nothing to E2B's */
    CHECK(run_parse(KB_FRONT_E2B, "{\"code\": \"1\", \"isolated\": 3, \"timeout\": \"x\"}",
                    &request, &err)
          == KB_OK);
    CHECK(!request.opts.isolated && request.opts.timeout == 0);
    kb_run_request_clear(&request);
}

static void test_run_validate(void)
{
    kb_error_t err;
    CHECK(kb_run_opts_validate(NULL, 10, &err) == -1 && err.code == KB_ERR_BAD_REQUEST);
    kb_run_opts_t opts = { 0 };
    CHECK(kb_run_opts_validate(&opts, 10, &err) == -1);
    CHECK_STR(err.message, "field code is required");
    opts.code = "0123456789";
    CHECK(kb_run_opts_validate(&opts, 10, &err) == 0); /* exactly the limit */
    CHECK(kb_run_opts_validate(&opts, 9, &err) == -1 && err.code == KB_ERR_PAYLOAD_TOO_LARGE);
    CHECK_STR(err.message, "code is 10 bytes, the limit is 9");
    CHECK(kb_run_opts_validate(&opts, 9, NULL) == -1); /* err may be NULL */
    opts.code = "print('\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80')";
    CHECK(kb_run_opts_validate(&opts, 100, &err) == 0);
    static const char *const not_utf8[]
        = { "\xff", "a\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82" };
    for (size_t i = 0; i < sizeof not_utf8 / sizeof not_utf8[0]; i++) {
        opts.code = not_utf8[i];
        CHECK(kb_run_opts_validate(&opts, 100, &err) == -1 && err.code == KB_ERR_BAD_REQUEST);
        CHECK_STR(err.message, "field code must be valid UTF-8");
    }
    opts.code = "1";

    static const char *const bad_ids[] = { "",
                                           "a/b",
                                           "has space",
                                           "bad id!",
                                           "\xc3\xa9",
                                           "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                                           "xxxxxxxxxxx" };
    for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) {
        opts.context_id = bad_ids[i];
        CHECK(kb_run_opts_validate(&opts, 100, &err) == -1 && err.code == KB_ERR_BAD_REQUEST);
        CHECK_STR(err.message, "context_id must be 1-64 characters of A-Z a-z 0-9 . _ -");
    }
    opts.context_id = "Ab.9_-";
    CHECK(kb_run_opts_validate(&opts, 100, &err) == 0);
    opts.isolated = true;
    CHECK(kb_run_opts_validate(&opts, 100, &err) == -1 && err.code == KB_ERR_BAD_REQUEST);
    CHECK_STR(err.message, "isolated runs use a fresh kernel; they cannot name a context_id");
    opts.context_id = NULL;
    CHECK(kb_run_opts_validate(&opts, 100, &err) == 0);

    const double bad_timeouts[] = { -1, -0.001, NAN, INFINITY, -INFINITY };
    for (size_t i = 0; i < sizeof bad_timeouts / sizeof bad_timeouts[0]; i++) {
        opts.timeout = bad_timeouts[i];
        CHECK(kb_run_opts_validate(&opts, 100, &err) == -1 && err.code == KB_ERR_BAD_REQUEST);
        CHECK_STR(err.message, "field timeout must be a non-negative number of seconds");
    }
    opts.timeout = 0;
    CHECK(kb_run_opts_validate(&opts, 100, &err) == 0);
    opts.timeout = 1e12; /* a budget, however large */
    CHECK(kb_run_opts_validate(&opts, 100, &err) == 0);

    json_t *env = json_array();
    opts.env = env;
    CHECK(kb_run_opts_validate(&opts, 100, &err) == -1);
    CHECK_STR(err.message, "field env must be an object of strings");
    json_decref(env);
    static const char *const bad_envs[] = { "{\"\": \"1\"}", "{\"A=B\": \"1\"}", "{\"A\": 1}",
                                            "{\"A\": null}", "{\"A\": \"x\\u0000\"}" };
    for (size_t i = 0; i < sizeof bad_envs / sizeof bad_envs[0]; i++) {
        env = json_loads(bad_envs[i], JSON_ALLOW_NUL, NULL);
        CHECK(env != NULL);
        opts.env = env;
        CHECK(kb_run_opts_validate(&opts, 100, &err) == -1 && err.code == KB_ERR_BAD_REQUEST);
        CHECK(strncmp(err.message, "field env: ", 11) == 0);
        json_decref(env);
    }
    /* JSON text cannot give a name with a NUL (jansson refuses it); the C API can */
    env = json_object();
    json_object_setn_new(env, "A\0B", 3, json_string("1"));
    opts.env = env;
    CHECK(kb_run_opts_validate(&opts, 100, &err) == -1);
    CHECK_STR(err.message, "field env: variable names must be non-empty, without '=' or NUL");
    json_decref(env);
    env = json_pack("{s:s, s:s}", "A", "1", "PATH", "");
    opts.env = env;
    CHECK(kb_run_opts_validate(&opts, 100, &err) == 0);
    json_decref(env);
}

static void test_contexts(void)
{
    kb_error_t err;
    kb_context_request_t request;
    const char *full = "{\"language\": \"python\", \"kernel_name\": \"python3\","
                       " \"context_id\": \"my-ctx.1\", \"cwd\": \"/tmp\", \"env\": {\"A\": \"1\"}}";
    CHECK(kb_context_request_parse(&request, KB_FRONT_NATIVE, full, strlen(full), &err) == 0);
    CHECK_STR(request.opts.language, "python");
    CHECK_STR(request.opts.kernel_name, "python3");
    CHECK_STR(request.opts.context_id, "my-ctx.1");
    CHECK_STR(request.opts.cwd, "/tmp");
    CHECK(json_object_size(request.opts.env) == 1);
    kb_context_request_clear(&request);

    CHECK(context_code(KB_FRONT_NATIVE, "", &err) == KB_ERR_INVALID_REQUEST_BODY);
    CHECK(context_code(KB_FRONT_NATIVE, "nope", &err) == KB_ERR_INVALID_REQUEST_BODY);
    CHECK(context_code(KB_FRONT_NATIVE, "null", &err) == KB_ERR_BAD_REQUEST);
    CHECK(context_code(KB_FRONT_NATIVE, "{}", &err) == KB_ERR_BAD_REQUEST);
    CHECK_STR(err.message, "one of language or kernel_name is required");
    CHECK(context_code(KB_FRONT_NATIVE, "{\"kernel_name\": \"python3\"}", &err) == KB_OK);
    CHECK(context_code(KB_FRONT_NATIVE, "{\"language\": 1}", &err) == KB_ERR_BAD_REQUEST);
    CHECK(context_code(KB_FRONT_NATIVE, "{\"kernel_name\": false}", &err) == KB_ERR_BAD_REQUEST);
    CHECK(context_code(KB_FRONT_NATIVE, "{\"language\": \"python\", \"context_id\": \"bad id!\"}",
                       &err)
          == KB_ERR_BAD_REQUEST);
    CHECK_STR(err.message, "context_id must be 1-64 characters of A-Z a-z 0-9 . _ -");
    CHECK(context_code(KB_FRONT_NATIVE, "{\"language\": \"python\", \"env\": {\"X\": 2}}", &err)
          == KB_ERR_BAD_REQUEST);
    CHECK(context_code(KB_FRONT_NATIVE, "{\"language\": \"python\", \"cwd\": {}}", &err)
          == KB_ERR_BAD_REQUEST);

    /* E2B's: an empty body is Python; an empty cwd is the daemon's */
    CHECK(kb_context_request_parse(&request, KB_FRONT_E2B, "", 0, &err) == 0);
    CHECK_STR(request.opts.language, "python");
    kb_context_request_clear(&request);
    const char *e2b = "{\"language\": \" JavaScript \", \"cwd\": \"\", \"context_id\": 5}";
    CHECK(kb_context_request_parse(&request, KB_FRONT_E2B, e2b, strlen(e2b), &err) == 0);
    CHECK_STR(request.opts.language, "javascript");
    CHECK(request.opts.cwd == NULL && request.opts.context_id == NULL);
    kb_context_request_clear(&request);
    CHECK(context_code(KB_FRONT_E2B, "not json", &err) == KB_ERR_INVALID_REQUEST_BODY);
    CHECK(context_code(KB_FRONT_E2B, "{\"language\": 5}", &err) == KB_ERR_BAD_REQUEST);
    CHECK(context_code(KB_FRONT_E2B, "{\"cwd\": []}", &err) == KB_ERR_BAD_REQUEST);
    kb_context_request_clear(NULL);
    kb_run_request_clear(NULL);

    kb_context_opts_t opts = { .language = "python", .context_id = "" };
    CHECK(kb_context_opts_validate(&opts, &err) == -1 && err.code == KB_ERR_BAD_REQUEST);
    opts.context_id = NULL;
    CHECK(kb_context_opts_validate(&opts, &err) == 0);
}

static void test_ids(void)
{
    CHECK(kb_context_id_valid("a"));
    CHECK(kb_context_id_valid("default-python"));
    char id[KB_CONTEXT_ID_MAX + 2];
    memset(id, 'x', sizeof id - 1);
    id[sizeof id - 1] = '\0';
    CHECK(!kb_context_id_valid(id)); /* 65 */
    id[KB_CONTEXT_ID_MAX] = '\0';
    CHECK(kb_context_id_valid(id)); /* 64 */
    CHECK(!kb_context_id_valid(""));
    CHECK(!kb_context_id_valid("a:b"));

    kb_error_t err;
    CHECK_STR(kb_request_e2b_context_id("default", &err), "default-python");
    CHECK_STR(kb_request_e2b_context_id("Default", &err), "Default");
    CHECK(kb_request_e2b_context_id("", &err) == NULL && err.code == KB_ERR_SESSION_NOT_FOUND);
    CHECK_STR(err.message, "Context  not found");
    /* a long id is shown cut, at a character boundary */
    char long_id[200];
    memset(long_id, 'y', sizeof long_id - 1);
    memcpy(long_id + 78, "\xc3\xa9", 2); /* across the 79 bytes shown */
    long_id[sizeof long_id - 1] = '\0';
    CHECK(kb_request_e2b_context_id(long_id, &err) == NULL);
    CHECK(strlen(err.message) == strlen("Context  not found") + 78);
    CHECK(kb_request_e2b_context_id("tab\there", NULL) == NULL);
}

/* ---- Signals and Jupyter's bodies ------------------------------------------ */

static kb_code_t signal_code(const char *body, const char **signal)
{
    kb_error_t err;
    kb_error_clear(&err);
    *signal = kb_signal_request_parse(body, strlen(body), &err);
    CHECK((*signal != NULL) == (err.code == KB_OK));
    return err.code;
}

static void test_signals(void)
{
    const char *signal;
    CHECK(signal_code("{\"signal\": \"SIGTERM\"}", &signal) == KB_OK);
    CHECK_STR(signal, "SIGTERM");
    CHECK(signal_code("{\"signal\": \"SIGKILL\", \"x\": 1}", &signal) == KB_OK);
    CHECK_STR(signal, "SIGKILL");
    CHECK(signal_code("{\"signal\": \"SIGHUP\"}", &signal) == KB_ERR_BAD_REQUEST);
    CHECK(signal_code("{}", &signal) == KB_ERR_BAD_REQUEST);
    CHECK(signal_code("{\"signal\": 2}", &signal) == KB_ERR_BAD_REQUEST);
    CHECK(signal_code("{\"signal\": \"SIGINT\\u0000\"}", &signal) == KB_ERR_BAD_REQUEST);
    CHECK(signal_code("", &signal) == KB_ERR_INVALID_REQUEST_BODY);
    CHECK(signal_code("{", &signal) == KB_ERR_INVALID_REQUEST_BODY);
    CHECK(signal_code("[]", &signal) == KB_ERR_BAD_REQUEST);
}

static kb_code_t kernel_code(const char *body, kb_kernel_request_t *out)
{
    kb_error_t err;
    kb_error_clear(&err);
    kb_kernel_request_t request;
    if (kb_kernel_request_parse(&request, body, strlen(body), &err) != 0) {
        CHECK(err.code != KB_OK && err.message[0]);
        CHECK(request.body == NULL && request.env == NULL);
        return err.code;
    }
    if (out)
        *out = request;
    else
        kb_kernel_request_clear(&request);
    return KB_OK;
}

static void test_jupyter_kernels(void)
{
    kb_kernel_request_t k;
    CHECK(kernel_code("", &k) == KB_OK); /* an empty body: the default kernel */
    CHECK(k.name == NULL && k.path == NULL && k.env == NULL);
    kb_kernel_request_clear(&k);
    CHECK(kernel_code("{\"name\": \"python3\", \"path\": \"/tmp\", \"env\": {\"PATH\": \"/x\", "
                      "\"KERNEL_WORKING_DIR\": \"/w\", \"JPY_SESSION_NAME\": \"n\", \"HOME\": "
                      "\"/h\"}}",
                      &k)
          == KB_OK);
    CHECK_STR(k.name, "python3");
    CHECK_STR(k.path, "/tmp");
    /* Only KERNEL_* and JPY_* go to the kernel. */
    CHECK(json_object_size(k.env) == 2);
    CHECK_STR(json_string_value(json_object_get(k.env, "KERNEL_WORKING_DIR")), "/w");
    CHECK(json_object_get(k.env, "PATH") == NULL);
    kb_kernel_request_clear(&k);
    CHECK(kernel_code("{\"env\": {\"HOME\": \"/h\"}}", &k) == KB_OK);
    CHECK(k.env == NULL);
    kb_kernel_request_clear(&k);
    CHECK(kernel_code("{\"env\": null}", NULL) == KB_OK);
    CHECK(kernel_code("{\"env\": [1]}", NULL) == KB_ERR_BAD_REQUEST);
    CHECK(kernel_code("{\"name\": 3}", NULL) == KB_ERR_BAD_REQUEST);
    CHECK(kernel_code("{\"path\": \"a\\u0000b\"}", NULL) == KB_ERR_BAD_REQUEST);
    CHECK(kernel_code("nope", NULL) == KB_ERR_INVALID_REQUEST_BODY);
    CHECK(kernel_code("\"x\"", NULL) == KB_ERR_BAD_REQUEST);
    /* From a borrowed object, and from none. */
    kb_error_t err;
    kb_error_clear(&err);
    CHECK(kb_kernel_request_read(&k, NULL, &err) == 0 && !k.name && !k.env);
    json_t *object = json_pack("{s:s}", "name", "ir");
    CHECK(kb_kernel_request_read(&k, object, &err) == 0);
    CHECK_STR(k.name, "ir");
    CHECK(k.body == NULL);
    kb_kernel_request_clear(&k);
    json_decref(object);
}

static kb_code_t session_code(const char *body, kb_session_request_t *out)
{
    kb_error_t err;
    kb_error_clear(&err);
    kb_session_request_t request;
    if (kb_session_request_parse(&request, body, strlen(body), &err) != 0) {
        CHECK(err.code != KB_OK && err.message[0]);
        CHECK(request.body == NULL);
        return err.code;
    }
    if (out)
        *out = request;
    else
        kb_session_request_clear(&request);
    return KB_OK;
}

static void test_jupyter_sessions(void)
{
    kb_session_request_t s;
    CHECK(session_code("{\"path\": \"a.ipynb\", \"name\": \"a\", \"type\": \"notebook\", "
                       "\"kernel\": {\"name\": \"python3\"}}",
                       &s)
          == KB_OK);
    CHECK_STR(s.path, "a.ipynb");
    CHECK_STR(s.name, "a");
    CHECK_STR(s.type, "notebook");
    CHECK(s.kernel && s.kernel_id == NULL);
    CHECK_STR(json_string_value(json_object_get(s.kernel, "name")), "python3");
    kb_session_request_clear(&s);
    CHECK(
        session_code("{\"kernel\": {\"id\": \"k1\"}, \"notebook\": {\"path\": \"old.ipynb\"}}", &s)
        == KB_OK);
    CHECK_STR(s.kernel_id, "k1");
    CHECK_STR(s.path, "old.ipynb"); /* older clients */
    kb_session_request_clear(&s);
    CHECK(session_code("{\"kernel\": null}", &s) == KB_OK);
    CHECK(s.kernel == NULL && s.path == NULL);
    kb_session_request_clear(&s);
    CHECK(session_code("", NULL) == KB_ERR_INVALID_REQUEST_BODY);
    CHECK(session_code("{\"path\": 1}", NULL) == KB_ERR_BAD_REQUEST);
    CHECK(session_code("{\"kernel\": \"python3\"}", NULL) == KB_ERR_BAD_REQUEST);
    CHECK(session_code("{\"kernel\": {\"id\": 7}}", NULL) == KB_ERR_BAD_REQUEST);
    CHECK(session_code("{\"notebook\": {\"path\": []}}", NULL) == KB_ERR_BAD_REQUEST);
}

int main(void)
{
    RUN_TEST(test_body);
    RUN_TEST(test_native_run);
    RUN_TEST(test_e2b_run);
    RUN_TEST(test_run_validate);
    RUN_TEST(test_contexts);
    RUN_TEST(test_ids);
    RUN_TEST(test_signals);
    RUN_TEST(test_jupyter_kernels);
    RUN_TEST(test_jupyter_sessions);
    return kb_test_summary();
}
