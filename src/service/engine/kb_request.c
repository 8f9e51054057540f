/*  kb_request.c - the front ends' requests (see kb_request.h): one parser
    from a JSON body to run or context options, driven by a table of field
    names per front end, the bodies of the other routes that take one (a
    signal, Jupyter's kernels and sessions), and the value checks of those
    options. Pure code: no I/O, no service state. */
#include "service/engine/kb_request.h"
#include "kernel/kb_kernel.h"
#include "util/kb_alloc.h"
#include "util/kb_utf8.h"

#include <assert.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/*  The id E2B's SDKs use for the default Python context. */
#define KB_E2B_DEFAULT_ALIAS "default"
#define KB_E2B_DEFAULT_PYTHON "default-python"
/*  How much of a bad id an error message shows. */
#define KB_REQUEST_SHOWN_MAX 80

/* ---- Front ends: which field is called what ------------------------------ */

typedef enum {
    KB_FIELD_CODE,
    KB_FIELD_LANGUAGE,
    KB_FIELD_KERNEL_NAME,
    KB_FIELD_CONTEXT_ID,
    KB_FIELD_ISOLATED,
    KB_FIELD_TIMEOUT,
    KB_FIELD_CWD,
    KB_FIELD_ENV,
    KB_FIELD_CONNECTION_INFO,
    KB_FIELD_STRIP_ANSI,
    KB_FIELD_MEMORY_LIMIT,
    KB_FIELD_PIDS_LIMIT,
    KB_FIELD_FORK_FROM,
    KB_FIELD_ROLLBACK,
} kb_field_id_t;

typedef struct {
    const char *name; /* in the body */
    kb_field_id_t id;
} kb_field_t;

typedef struct {
    const kb_field_t *run; /* in the order they are checked */
    size_t run_len;
    const kb_field_t *context;
    size_t context_len;
    bool language_aliases;   /* E2B's language names; none is python */
    bool context_aliases;    /* kb_request_e2b_context_id */
    bool exclusive_target;   /* a run names a context_id or a language, not both */
    bool empty_context_body; /* POST /contexts may come without a body */
    bool empty_cwd_is_none;  /* "" as a context's cwd is the daemon's */
} kb_front_spec_t;

static const kb_field_t s_native_run[] = {
    { "code", KB_FIELD_CODE },
    { "language", KB_FIELD_LANGUAGE },
    { "kernel_name", KB_FIELD_KERNEL_NAME },
    { "context_id", KB_FIELD_CONTEXT_ID },
    { "isolated", KB_FIELD_ISOLATED },
    { "timeout", KB_FIELD_TIMEOUT },
    { "cwd", KB_FIELD_CWD },
    { "env", KB_FIELD_ENV },
    { "strip_ansi", KB_FIELD_STRIP_ANSI },
    { "memory_limit", KB_FIELD_MEMORY_LIMIT },
    { "pids_limit", KB_FIELD_PIDS_LIMIT },
    { "rollback", KB_FIELD_ROLLBACK },
};

static const kb_field_t s_native_context[] = {
    { "language", KB_FIELD_LANGUAGE },
    { "kernel_name", KB_FIELD_KERNEL_NAME },
    { "context_id", KB_FIELD_CONTEXT_ID },
    { "cwd", KB_FIELD_CWD },
    { "env", KB_FIELD_ENV },
    { "connection_info", KB_FIELD_CONNECTION_INFO },
    { "memory_limit", KB_FIELD_MEMORY_LIMIT },
    { "pids_limit", KB_FIELD_PIDS_LIMIT },
    { "fork_from", KB_FIELD_FORK_FROM },
};

/*  MCP's run_code and create_context (SPEC section 14): the native names,
    fewer of them (strip_ansi is the MCP layer's, always on). */
static const kb_field_t s_mcp_run[] = {
    { "code", KB_FIELD_CODE },
    { "language", KB_FIELD_LANGUAGE },
    { "context_id", KB_FIELD_CONTEXT_ID },
    { "timeout", KB_FIELD_TIMEOUT },
    { "cwd", KB_FIELD_CWD },
    { "env", KB_FIELD_ENV },
    { "rollback", KB_FIELD_ROLLBACK },
};

static const kb_field_t s_mcp_context[] = {
    { "language", KB_FIELD_LANGUAGE },
    { "kernel_name", KB_FIELD_KERNEL_NAME },
    { "context_id", KB_FIELD_CONTEXT_ID },
    { "cwd", KB_FIELD_CWD },
    { "env", KB_FIELD_ENV },
};

static const kb_field_t s_e2b_run[] = {
    { "code", KB_FIELD_CODE },
    { "context_id", KB_FIELD_CONTEXT_ID },
    { "language", KB_FIELD_LANGUAGE },
    { "env_vars", KB_FIELD_ENV },
};

static const kb_field_t s_e2b_context[] = {
    { "language", KB_FIELD_LANGUAGE },
    { "cwd", KB_FIELD_CWD },
};

#define KB_COUNT(array) (sizeof(array) / sizeof(array)[0])

static const kb_front_spec_t s_fronts[] = {
    [KB_FRONT_NATIVE] = { s_native_run, KB_COUNT(s_native_run), s_native_context,
                          KB_COUNT(s_native_context), false, false, false, false, false },
    [KB_FRONT_E2B] = { s_e2b_run, KB_COUNT(s_e2b_run), s_e2b_context, KB_COUNT(s_e2b_context), true,
                       true, true, true, true },
    [KB_FRONT_MCP] = { s_mcp_run, KB_COUNT(s_mcp_run), s_mcp_context, KB_COUNT(s_mcp_context),
                       false, false, false, false, false },
};

static const kb_front_spec_t *s_front(kb_front_t front)
{
    assert(front == KB_FRONT_NATIVE || front == KB_FRONT_E2B || front == KB_FRONT_MCP);
    return &s_fronts[front];
}

/* ---- Fields ---------------------------------------------------------------- */

json_t *kb_request_body(const char *data, size_t len, bool empty_ok, kb_error_t *err)
{
    if (len == 0) {
        if (empty_ok)
            return json_object();
        kb_error_set(err, KB_ERR_INVALID_REQUEST_BODY,
                     "the request body is empty; a JSON object is expected");
        return NULL;
    }
    assert(data);
    json_error_t jerr;
    /* NUL is allowed through the parser so that a string holding one is
       refused by name, as BAD_REQUEST, not as malformed JSON. */
    json_t *body = json_loadb(data, len, JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
    if (!body) {
        kb_error_set(err, KB_ERR_INVALID_REQUEST_BODY, "malformed JSON at line %d, column %d: %s",
                     jerr.line, jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(body)) {
        json_decref(body);
        kb_error_set(err, KB_ERR_BAD_REQUEST, "the request body must be a JSON object");
        return NULL;
    }
    return body;
}

/*  The field, or NULL when absent or null (both mean "not given"). */
static json_t *s_given(const json_t *body, const char *key)
{
    json_t *value = json_object_get(body, key);
    return value && !json_is_null(value) ? value : NULL;
}

int kb_request_string(const json_t *body, const char *key, const char **out, kb_error_t *err)
{
    json_t *value = s_given(body, key);
    if (!value)
        return 0;
    if (!json_is_string(value))
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "field %s must be a string", key);
    if (strlen(json_string_value(value)) != json_string_length(value))
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "field %s must not contain NUL characters",
                            key);
    *out = json_string_value(value);
    return 1;
}

static int s_bool(const json_t *body, const char *key, bool *out, kb_error_t *err)
{
    json_t *value = s_given(body, key);
    if (!value)
        return 0;
    if (!json_is_boolean(value))
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "field %s must be true or false", key);
    *out = json_is_true(value);
    return 1;
}

static int s_seconds(const json_t *body, const char *key, double *out, kb_error_t *err)
{
    json_t *value = s_given(body, key);
    if (!value)
        return 0;
    if (!json_is_number(value))
        return kb_error_set(err, KB_ERR_BAD_REQUEST,
                            "field %s must be a non-negative number of seconds", key);
    *out = json_number_value(value);
    return 1;
}

/*  A count (bytes, processes): an integer; its range is the validation's
    to check. */
static int s_count(const json_t *body, const char *key, long long *out, kb_error_t *err)
{
    json_t *value = s_given(body, key);
    if (!value)
        return 0;
    if (!json_is_integer(value))
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "field %s must be an integer", key);
    *out = json_integer_value(value);
    return 1;
}

/*  An object (borrowed); what it holds is the validation's to check. */
static int s_object(const json_t *body, const char *key, json_t **out, kb_error_t *err)
{
    json_t *value = s_given(body, key);
    if (!value)
        return 0;
    if (!json_is_object(value))
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "field %s must be an object of strings", key);
    *out = value;
    return 1;
}

/*  E2B's language names, lower-cased and trimmed into buf: none is python,
    js, ts and typescript are javascript (TypeScript runs on the JavaScript
    kernel). NULL with BAD_REQUEST when the name does not fit buf. */
static const char *s_e2b_language(const char *language, char *buf, size_t size, kb_error_t *err)
{
    if (!language)
        return "python";
    while (isspace((unsigned char)*language))
        language++;
    size_t len = strlen(language);
    while (len > 0 && isspace((unsigned char)language[len - 1]))
        len--;
    if (len == 0)
        return "python";
    if (len >= size) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "language is longer than %zu characters", size - 1);
        return NULL;
    }
    for (size_t i = 0; i < len; i++)
        buf[i] = (char)tolower((unsigned char)language[i]);
    buf[len] = '\0';
    if (strcmp(buf, "js") == 0 || strcmp(buf, "ts") == 0 || strcmp(buf, "typescript") == 0)
        return "javascript";
    return buf;
}

/*  Copy text (at most size - 1 bytes, cut at a character boundary) into
    dst with control characters and spaces as '?', for a message. */
static void s_shown(char *dst, size_t size, const char *text)
{
    size_t len = strlen(text);
    if (len >= size) {
        len = size - 1;
        while (len > 0 && ((unsigned char)text[len] & 0xC0) == 0x80)
            len--;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        dst[i] = c <= 0x20 || c == 0x7f ? '?' : (char)c;
    }
    dst[len] = '\0';
}

const char *kb_request_e2b_context_id(const char *id, kb_error_t *err)
{
    assert(id);
    if (strcmp(id, KB_E2B_DEFAULT_ALIAS) == 0)
        return KB_E2B_DEFAULT_PYTHON;
    if (kb_context_id_valid(id))
        return id;
    char shown[KB_REQUEST_SHOWN_MAX];
    s_shown(shown, sizeof shown, id);
    kb_error_set(err, KB_ERR_SESSION_NOT_FOUND, "Context %s not found", shown);
    return NULL;
}

/* ---- The fields of a body ------------------------------------------------------ */

/*  Where each field read goes; NULL for a field the table cannot hold. */
typedef struct {
    const char **code, **language, **kernel_name, **context_id, **cwd, **fork_from, **rollback;
    bool *isolated, *strip_ansi;
    double *timeout;
    json_t **env, **connection_info;
    long long *memory_limit, *pids_limit;
} kb_field_dest_t;

/*  Read the fields of a front end's table from body into dest, in the
    table's order: the first bad one fails, by name. 0 / -1 with err. */
static int s_read_fields(const json_t *body, const kb_field_t *fields, size_t count,
                         const kb_field_dest_t *dest, kb_error_t *err)
{
    for (size_t i = 0; i < count; i++) {
        const char *name = fields[i].name;
        int rc = 0;
        switch (fields[i].id) {
            case KB_FIELD_CODE:
                assert(dest->code);
                rc = kb_request_string(body, name, dest->code, err);
                break;
            case KB_FIELD_LANGUAGE:
                assert(dest->language);
                rc = kb_request_string(body, name, dest->language, err);
                break;
            case KB_FIELD_KERNEL_NAME:
                assert(dest->kernel_name);
                rc = kb_request_string(body, name, dest->kernel_name, err);
                break;
            case KB_FIELD_CONTEXT_ID:
                assert(dest->context_id);
                rc = kb_request_string(body, name, dest->context_id, err);
                break;
            case KB_FIELD_ISOLATED:
                assert(dest->isolated);
                rc = s_bool(body, name, dest->isolated, err);
                break;
            case KB_FIELD_TIMEOUT:
                assert(dest->timeout);
                rc = s_seconds(body, name, dest->timeout, err);
                break;
            case KB_FIELD_CWD:
                assert(dest->cwd);
                rc = kb_request_string(body, name, dest->cwd, err);
                break;
            case KB_FIELD_ENV:
                assert(dest->env);
                rc = s_object(body, name, dest->env, err);
                break;
            case KB_FIELD_CONNECTION_INFO:
                assert(dest->connection_info);
                rc = s_object(body, name, dest->connection_info, err);
                break;
            case KB_FIELD_STRIP_ANSI:
                assert(dest->strip_ansi);
                rc = s_bool(body, name, dest->strip_ansi, err);
                break;
            case KB_FIELD_MEMORY_LIMIT:
                assert(dest->memory_limit);
                rc = s_count(body, name, dest->memory_limit, err);
                break;
            case KB_FIELD_PIDS_LIMIT:
                assert(dest->pids_limit);
                rc = s_count(body, name, dest->pids_limit, err);
                break;
            case KB_FIELD_FORK_FROM:
                assert(dest->fork_from);
                rc = kb_request_string(body, name, dest->fork_from, err);
                break;
            case KB_FIELD_ROLLBACK:
                assert(dest->rollback);
                rc = kb_request_string(body, name, dest->rollback, err);
                break;
        }
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* ---- Runs ------------------------------------------------------------------ */

int kb_run_request_parse(kb_run_request_t *self, kb_front_t front, const char *data, size_t len,
                         kb_error_t *err)
{
    assert(self);
    memset(self, 0, sizeof *self);
    json_t *body = kb_request_body(data, len, false, err);
    return body ? kb_run_request_read(self, front, body, err) : -1;
}

int kb_run_request_read(kb_run_request_t *self, kb_front_t front, json_t *body, kb_error_t *err)
{
    assert(self && json_is_object(body));
    const kb_front_spec_t *spec = s_front(front);
    memset(self, 0, sizeof *self);
    self->body = body;
    kb_run_opts_t *opts = &self->opts;
    const char *language = NULL, *context_id = NULL;
    kb_field_dest_t dest = { .code = &opts->code,
                             .language = &language,
                             .kernel_name = &opts->kernel_name,
                             .context_id = &context_id,
                             .isolated = &opts->isolated,
                             .timeout = &opts->timeout,
                             .cwd = &opts->cwd,
                             .env = &opts->env,
                             .strip_ansi = &opts->strip_ansi,
                             .memory_limit = &opts->memory_limit,
                             .pids_limit = &opts->pids_limit,
                             .rollback = &opts->rollback };
    if (s_read_fields(self->body, spec->run, spec->run_len, &dest, err) != 0)
        goto fail;
    if (spec->exclusive_target && context_id && language) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "Only one of context_id or language can be provided");
        goto fail;
    }
    if (context_id && spec->context_aliases
        && !(context_id = kb_request_e2b_context_id(context_id, err)))
        goto fail;
    opts->context_id = context_id;
    opts->language = language;
    if (spec->language_aliases && !context_id
        && !(opts->language = s_e2b_language(language, self->language, sizeof self->language, err)))
        goto fail;
    return 0;
fail:
    kb_run_request_clear(self);
    return -1;
}

void kb_run_request_clear(kb_run_request_t *self)
{
    if (!self)
        return;
    json_decref(self->body);
    memset(self, 0, sizeof *self);
}

/* ---- Contexts ---------------------------------------------------------------- */

int kb_context_request_parse(kb_context_request_t *self, kb_front_t front, const char *data,
                             size_t len, kb_error_t *err)
{
    assert(self);
    memset(self, 0, sizeof *self);
    json_t *body = kb_request_body(data, len, s_front(front)->empty_context_body, err);
    return body ? kb_context_request_read(self, front, body, err) : -1;
}

int kb_context_request_read(kb_context_request_t *self, kb_front_t front, json_t *body,
                            kb_error_t *err)
{
    assert(self && json_is_object(body));
    const kb_front_spec_t *spec = s_front(front);
    memset(self, 0, sizeof *self);
    self->body = body;
    kb_context_opts_t *opts = &self->opts;
    const char *language = NULL;
    kb_field_dest_t dest = { .language = &language,
                             .kernel_name = &opts->kernel_name,
                             .context_id = &opts->context_id,
                             .cwd = &opts->cwd,
                             .env = &opts->env,
                             .connection_info = &opts->connection_info,
                             .memory_limit = &opts->memory_limit,
                             .pids_limit = &opts->pids_limit,
                             .fork_from = &opts->fork_from };
    if (s_read_fields(self->body, spec->context, spec->context_len, &dest, err) != 0)
        goto fail;
    opts->language = language;
    if (spec->language_aliases
        && !(opts->language = s_e2b_language(language, self->language, sizeof self->language, err)))
        goto fail;
    if (spec->empty_cwd_is_none && opts->cwd && !*opts->cwd)
        opts->cwd = NULL;
    if (kb_context_opts_validate(opts, err) != 0)
        goto fail;
    return 0;
fail:
    kb_context_request_clear(self);
    return -1;
}

void kb_context_request_clear(kb_context_request_t *self)
{
    if (!self)
        return;
    json_decref(self->body);
    memset(self, 0, sizeof *self);
}

/* ---- Signals (native POST /processes/{id}/signals) ------------------------- */

const char *kb_signal_request_parse(const char *data, size_t len, kb_error_t *err)
{
    static const char *const names[] = { "SIGINT", "SIGTERM", "SIGKILL" };
    json_t *body = kb_request_body(data, len, false, err);
    if (!body)
        return NULL;
    const char *given = NULL, *signal = NULL;
    int has = kb_request_string(body, "signal", &given, err);
    for (size_t i = 0; has > 0 && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(given, names[i]) == 0)
            signal = names[i];
    json_decref(body);
    if (!signal && has >= 0)
        kb_error_set(err, KB_ERR_BAD_REQUEST,
                     "field signal is required: one of SIGINT, SIGTERM, SIGKILL");
    return signal;
}

/* ---- Jupyter's kernels and sessions ------------------------------------------ */

/*  Whether a variable a Jupyter client sends goes to the kernel: KERNEL_*
    and JPY_* only, as Jupyter's kernel gateways take them. Jupyter
    Server 1.x sends its whole environment for a session's kernel (PATH,
    HOME, its own tokens), which is not the kernel's to have. */
static bool s_kernel_variable(const char *name)
{
    return strncmp(name, "KERNEL_", 7) == 0 || strncmp(name, "JPY_", 4) == 0;
}

int kb_kernel_request_read(kb_kernel_request_t *self, const json_t *object, kb_error_t *err)
{
    assert(self);
    memset(self, 0, sizeof *self);
    if (kb_request_string(object, "name", &self->name, err) < 0
        || kb_request_string(object, "path", &self->path, err) < 0)
        return -1;
    json_t *given = json_object_get(object, "env");
    if (given && !json_is_null(given) && !json_is_object(given))
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "field env must be an object of strings");
    const char *key;
    json_t *value;
    json_object_foreach(json_is_object(given) ? given : NULL, key, value)
    {
        if (!s_kernel_variable(key))
            continue;
        if (!self->env && !(self->env = json_object()))
            return kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        if (json_object_set(self->env, key, value) != 0) {
            kb_kernel_request_clear(self);
            return kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        }
    }
    return 0;
}

int kb_kernel_request_parse(kb_kernel_request_t *self, const char *data, size_t len,
                            kb_error_t *err)
{
    json_t *body = kb_request_body(data, len, true, err);
    if (!body) {
        memset(self, 0, sizeof *self);
        return -1;
    }
    if (kb_kernel_request_read(self, body, err) != 0) {
        json_decref(body);
        return -1;
    }
    self->body = body;
    return 0;
}

void kb_kernel_request_clear(kb_kernel_request_t *self)
{
    if (!self)
        return;
    json_decref(self->env);
    json_decref(self->body);
    memset(self, 0, sizeof *self);
}

static int s_session_fields(kb_session_request_t *self, kb_error_t *err)
{
    json_t *body = self->body;
    if (kb_request_string(body, "path", &self->path, err) < 0
        || kb_request_string(body, "name", &self->name, err) < 0
        || kb_request_string(body, "type", &self->type, err) < 0)
        return -1;
    json_t *kernel = json_object_get(body, "kernel");
    if (kernel && !json_is_null(kernel)) {
        if (!json_is_object(kernel))
            return kb_error_set(err, KB_ERR_BAD_REQUEST, "field kernel must be an object");
        if (kb_request_string(kernel, "id", &self->kernel_id, err) < 0)
            return -1;
        self->kernel = kernel;
    }
    if (!self->path) { /* older clients send {notebook: {path, name}} */
        json_t *notebook = json_object_get(body, "notebook");
        if (json_is_object(notebook) && kb_request_string(notebook, "path", &self->path, err) < 0)
            return -1;
    }
    return 0;
}

int kb_session_request_parse(kb_session_request_t *self, const char *data, size_t len,
                             kb_error_t *err)
{
    assert(self);
    memset(self, 0, sizeof *self);
    self->body = kb_request_body(data, len, false, err);
    if (!self->body)
        return -1;
    if (s_session_fields(self, err) != 0) {
        kb_session_request_clear(self);
        return -1;
    }
    return 0;
}

void kb_session_request_clear(kb_session_request_t *self)
{
    if (!self)
        return;
    json_decref(self->body);
    memset(self, 0, sizeof *self);
}

/* ---- Values ------------------------------------------------------------------- */

bool kb_context_id_valid(const char *id)
{
    static const char allowed[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                  "0123456789._-";
    size_t len = strlen(id);
    return len > 0 && len <= KB_CONTEXT_ID_MAX && strspn(id, allowed) == len;
}

/*  env: NULL, or an object whose names are non-empty without '=' or NUL
    and whose values are strings without NUL. */
static int s_env_validate(const json_t *env, const char *key, kb_error_t *err)
{
    if (!env)
        return 0;
    if (!json_is_object(env))
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "field %s must be an object of strings", key);
    /* The iterator is read-only here; jansson's API wants a non-const object. */
    json_t *object = (json_t *)env;
    for (void *it = json_object_iter(object); it; it = json_object_iter_next(object, it)) {
        const char *name = json_object_iter_key(it);
        size_t name_len = json_object_iter_key_len(it);
        json_t *value = json_object_iter_value(it);
        if (name_len == 0 || strlen(name) != name_len || strchr(name, '='))
            return kb_error_set(err, KB_ERR_BAD_REQUEST,
                                "field %s: variable names must be non-empty, without '=' or NUL",
                                key);
        if (!json_is_string(value) || strlen(json_string_value(value)) != json_string_length(value))
            return kb_error_set(err, KB_ERR_BAD_REQUEST,
                                "field %s: the value of %.100s must be a string without NUL", key,
                                name);
    }
    return 0;
}

static int s_context_id_validate(const char *id, kb_error_t *err)
{
    if (!id || kb_context_id_valid(id))
        return 0;
    return kb_error_set(err, KB_ERR_BAD_REQUEST,
                        "context_id must be 1-%d characters of A-Z a-z 0-9 . _ -",
                        KB_CONTEXT_ID_MAX);
}

int kb_limits_validate(long long memory_limit, long long pids_limit, kb_error_t *err)
{
    if (memory_limit < 0 || pids_limit < 0)
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "field %s must not be negative",
                            memory_limit < 0 ? "memory_limit" : "pids_limit");
    if (memory_limit && (memory_limit < KB_MEMORY_LIMIT_MIN || memory_limit > KB_MEMORY_LIMIT_MAX))
        return kb_error_set(err, KB_ERR_BAD_REQUEST,
                            "field memory_limit must be %lld to %lld bytes: a kernel needs %d MiB "
                            "to start (%lld given)",
                            KB_MEMORY_LIMIT_MIN, KB_MEMORY_LIMIT_MAX,
                            (int)(KB_MEMORY_LIMIT_MIN >> 20), memory_limit);
    if (pids_limit && (pids_limit < KB_PIDS_LIMIT_MIN || pids_limit > KB_PIDS_LIMIT_MAX))
        return kb_error_set(err, KB_ERR_BAD_REQUEST,
                            "field pids_limit must be %d to %d processes: a kernel and its "
                            "helpers need %d (%lld given)",
                            KB_PIDS_LIMIT_MIN, KB_PIDS_LIMIT_MAX, KB_PIDS_LIMIT_MIN, pids_limit);
    return 0;
}

int kb_run_opts_validate(const kb_run_opts_t *opts, size_t max_code_bytes, kb_error_t *err)
{
    if (!opts || !opts->code)
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "field code is required");
    size_t code_len = strlen(opts->code);
    if (code_len > max_code_bytes)
        return kb_error_set(err, KB_ERR_PAYLOAD_TOO_LARGE, "code is %zu bytes, the limit is %zu",
                            code_len, max_code_bytes);
    if (!kb_utf8_valid(opts->code, code_len))
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "field code must be valid UTF-8");
    if (s_context_id_validate(opts->context_id, err) != 0)
        return -1;
    if (opts->isolated && opts->context_id)
        return kb_error_set(err, KB_ERR_BAD_REQUEST,
                            "isolated runs use a fresh kernel; they cannot name a context_id");
    if (!(opts->timeout >= 0) || isinf(opts->timeout))
        return kb_error_set(err, KB_ERR_BAD_REQUEST,
                            "field timeout must be a non-negative number of seconds");
    if ((opts->memory_limit || opts->pids_limit) && !opts->isolated)
        return kb_error_set(err, KB_ERR_BAD_REQUEST,
                            "memory_limit and pids_limit apply to isolated runs; a context's "
                            "limits are given when it is created (POST /contexts)");
    if (kb_limits_validate(opts->memory_limit, opts->pids_limit, err) != 0)
        return -1;
    if (opts->rollback && strcmp(opts->rollback, "never") != 0
        && strcmp(opts->rollback, "on_error") != 0)
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "field rollback must be never or on_error");
    if (opts->rollback && opts->isolated && strcmp(opts->rollback, "on_error") == 0)
        return kb_error_set(err, KB_ERR_BAD_REQUEST,
                            "an isolated run keeps no state: rollback applies to contexts");
    return s_env_validate(opts->env, "env", err);
}

int kb_context_opts_validate(const kb_context_opts_t *opts, kb_error_t *err)
{
    assert(opts);
    if (s_context_id_validate(opts->context_id, err) != 0
        || s_env_validate(opts->env, "env", err) != 0)
        return -1;
    if (opts->fork_from) {
        if (!kb_context_id_valid(opts->fork_from))
            return kb_error_set(err, KB_ERR_BAD_REQUEST, "fork_from must be a context id");
        if (opts->language || opts->kernel_name || opts->cwd || opts->env || opts->connection_info)
            return kb_error_set(err, KB_ERR_BAD_REQUEST,
                                "fork_from cannot be given with language, kernel_name, cwd, env or "
                                "connection_info: a fork has its parent's");
    } else if (!opts->language && !opts->kernel_name)
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "one of language or kernel_name is required");
    if (kb_limits_validate(opts->memory_limit, opts->pids_limit, err) != 0)
        return -1;
    if (opts->connection_info) {
        kb_error_t problem;
        if (opts->cwd || opts->env)
            return kb_error_set(err, KB_ERR_BAD_REQUEST,
                                "cwd and env cannot be given with connection_info: that kernel "
                                "is running already");
        if (opts->memory_limit || opts->pids_limit)
            return kb_error_set(err, KB_ERR_BAD_REQUEST,
                                "memory_limit and pids_limit cannot be given with "
                                "connection_info: that kernel was not started by this daemon");
        if (kb_connection_check(opts->connection_info, &problem) != 0)
            return kb_error_set(err, KB_ERR_BAD_REQUEST, "connection_info: %s", problem.message);
    }
    return 0;
}
