/*  kb_kernelspec.c - kernelspec discovery (jupyter_core's search path,
    jupyter_client's naming rules), kernel.json parsing, language lookup, and
    the argv and environment of a kernel launch.

    Not for launching kernels or writing connection files: see the launcher. */
#include "kb_kernelspec.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef KB_SYSTEM_PYTHON
#define KB_SYSTEM_PYTHON "/usr/bin/python3"
#endif

/*  sys.prefix of the system Python: {prefix} in argv, {prefix}/share/jupyter
    in the search path. */
#define KB_KERNELSPEC_PREFIX "/usr"

/*  A kernel.json is a few hundred bytes; anything this large is not one. */
#define KB_KERNEL_JSON_MAX (1024 * 1024)

struct kb_kernelspecs {
    kb_kernelspec_t **items;
    size_t size;
    size_t cap;
};

/*  A growable NULL-terminated string vector; items is NULL until the first
    push. */
typedef struct {
    char **items;
    size_t size;
    size_t cap;
} strv_t;

/*  A growable string; failed is sticky, so callers check once at the end. */
typedef struct {
    char *data;
    size_t len;
    size_t cap;
    bool failed;
} strbuf_t;

static void set_err(char *err, size_t errlen, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *format, ...)
{
    if (!err || errlen == 0)
        return;
    va_list args;
    va_start(args, format);
    vsnprintf(err, errlen, format, args);
    va_end(args);
}

static void warnf(kb_kernelspec_warn_fn *warn, void *arg, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static void warnf(kb_kernelspec_warn_fn *warn, void *arg, const char *format, ...)
{
    if (!warn)
        return;
    char message[PATH_MAX + 512];
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof message, format, args);
    va_end(args);
    warn(message, arg);
}

static char *format_string(const char *format, ...) __attribute__((format(printf, 1, 2)));

/*  asprintf that returns NULL on failure. Caller owns the result. */
static char *format_string(const char *format, ...)
{
    char *result = NULL;
    va_list args;
    va_start(args, format);
    if (vasprintf(&result, format, args) < 0)
        result = NULL;
    va_end(args);
    return result;
}

/*  Append s (takes ownership, even on failure). 0 or -1. */
static int strv_push(strv_t *v, char *s)
{
    if (!s)
        return -1;
    if (v->size + 2 > v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        char **items = realloc(v->items, cap * sizeof *items);
        if (!items) {
            free(s);
            return -1;
        }
        v->items = items;
        v->cap = cap;
    }
    v->items[v->size++] = s;
    v->items[v->size] = NULL;
    return 0;
}

void kb_strv_free(char **strv)
{
    if (!strv)
        return;
    for (char **s = strv; *s; s++)
        free(*s);
    free(strv);
}

static void sb_append(strbuf_t *sb, const char *s, size_t n)
{
    if (sb->failed)
        return;
    if (sb->len + n + 1 > sb->cap) {
        size_t cap = sb->cap ? sb->cap : 64;
        while (sb->len + n + 1 > cap)
            cap *= 2;
        char *data = realloc(sb->data, cap);
        if (!data) {
            sb->failed = true;
            return;
        }
        sb->data = data;
        sb->cap = cap;
    }
    memcpy(sb->data + sb->len, s, n);
    sb->len += n;
    sb->data[sb->len] = 0;
}

static void sb_append_str(strbuf_t *sb, const char *s)
{
    sb_append(sb, s, strlen(s));
}

/*  The built string ("" when nothing was appended), or NULL when an append
    failed. Caller owns the result. */
static char *sb_take(strbuf_t *sb)
{
    if (!sb->failed && !sb->data)
        sb_append(sb, "", 0);
    if (sb->failed) {
        free(sb->data);
        sb->data = NULL;
    }
    char *data = sb->data;
    *sb = (strbuf_t){ 0 };
    return data;
}

static void ascii_lower(char *s)
{
    for (; *s; s++)
        if (*s >= 'A' && *s <= 'Z')
            *s = (char)(*s - 'A' + 'a');
}

static bool is_ident_start(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static bool is_ident_char(char c)
{
    return is_ident_start(c) || (c >= '0' && c <= '9');
}

/*  jupyter_client's rule for kernel names: ASCII letters, digits, - . _ */
static bool is_valid_kernel_name(const char *name)
{
    if (!*name)
        return false;
    for (const char *p = name; *p; p++)
        if (!is_ident_char(*p) && *p != '-' && *p != '.')
            return false;
    return true;
}

static bool is_valid_env_name(const char *name)
{
    return *name && !strchr(name, '=');
}

/*  dir as an absolute path without trailing slashes. Caller owns the
    result. */
static char *absolute_dir(const char *dir)
{
    char *result = dir[0] == '/' ? strdup(dir) : realpath(dir, NULL);
    if (!result && dir[0] != '/') {
        char *cwd = getcwd(NULL, 0);
        if (cwd)
            result = format_string("%s/%s", cwd, dir);
        free(cwd);
    }
    if (!result)
        return NULL;
    size_t len = strlen(result);
    while (len > 1 && result[len - 1] == '/')
        result[--len] = 0;
    return result;
}

/*  Read and parse a kernel.json of bounded size. Caller owns the result;
    NULL with "<path>: <problem>" in err. */
static json_t *load_json_file(const char *path, char *err, size_t errlen)
{
    json_t *root = NULL;
    char *text = NULL;
    FILE *file = fopen(path, "re");
    if (!file) {
        set_err(err, errlen, "%s: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fileno(file), &st) < 0) {
        set_err(err, errlen, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s: not a regular file", path);
        goto fail;
    }
    if (st.st_size > KB_KERNEL_JSON_MAX) {
        set_err(err, errlen, "%s: larger than %d bytes", path, KB_KERNEL_JSON_MAX);
        goto fail;
    }
    text = malloc((size_t)st.st_size + 1);
    if (!text) {
        set_err(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    size_t length = fread(text, 1, (size_t)st.st_size, file);
    if (ferror(file)) {
        set_err(err, errlen, "%s: read error", path);
        goto fail;
    }
    json_error_t jerr;
    root = json_loadb(text, length, 0, &jerr);
    if (!root) {
        set_err(err, errlen, "%s: invalid JSON at line %d, column %d: %s", path, jerr.line,
                jerr.column, jerr.text);
        goto fail;
    }
    free(text);
    fclose(file);
    return root;
fail:
    free(text);
    if (file)
        fclose(file);
    return NULL;
}

/*  Copy a required string member into *out. NULL, or the problem in buf. */
static const char *take_string(json_t *root, const char *key, char **out, char *buf, size_t buflen)
{
    json_t *value = json_object_get(root, key);
    if (!value) {
        snprintf(buf, buflen, "%s is missing", key);
        return buf;
    }
    if (!json_is_string(value)) {
        snprintf(buf, buflen, "%s is not a string", key);
        return buf;
    }
    *out = strdup(json_string_value(value));
    return *out ? NULL : "out of memory";
}

/*  An env object is valid when every name is non-empty without '=' and every
    value a string without NUL. NULL, or the problem in buf. */
static const char *check_env_object(const json_t *env, const char *what, char *buf, size_t buflen)
{
    const char *key;
    json_t *value;
    if (!json_is_object(env)) {
        snprintf(buf, buflen, "%s is not an object", what);
        return buf;
    }
    json_object_foreach((json_t *)env, key, value)
    {
        if (!is_valid_env_name(key)) {
            snprintf(buf, buflen, "%s name \"%.64s\" is not a valid variable name", what, key);
            return buf;
        }
        if (!json_is_string(value)) {
            snprintf(buf, buflen, "%s[\"%.64s\"] is not a string", what, key);
            return buf;
        }
        if (strlen(json_string_value(value)) != json_string_length(value)) {
            snprintf(buf, buflen, "%s[\"%.64s\"] contains a NUL character", what, key);
            return buf;
        }
    }
    return NULL;
}

/*  Fill self from a parsed kernel.json. NULL, or the problem (in buf or
    static). */
static const char *parse_spec(kb_kernelspec_t *self, json_t *root, char *buf, size_t buflen)
{
    if (!json_is_object(root))
        return "not a JSON object";

    json_t *argv = json_object_get(root, "argv");
    if (!argv)
        return "argv is missing";
    if (!json_is_array(argv))
        return "argv is not a list";
    size_t argc = json_array_size(argv);
    if (argc == 0)
        return "argv is empty";
    self->argv = calloc(argc + 1, sizeof *self->argv);
    if (!self->argv)
        return "out of memory";
    for (size_t i = 0; i < argc; i++) {
        json_t *item = json_array_get(argv, i);
        if (!json_is_string(item)) {
            snprintf(buf, buflen, "argv[%zu] is not a string", i);
            return buf;
        }
        self->argv[i] = strdup(json_string_value(item));
        if (!self->argv[i])
            return "out of memory";
    }
    self->argc = argc;
    if (!self->argv[0][0])
        return "argv[0] is empty";

    const char *problem = take_string(root, "display_name", &self->display_name, buf, buflen);
    if (!problem)
        problem = take_string(root, "language", &self->language, buf, buflen);
    if (problem)
        return problem;

    /* jupyter_client's CaselessStrEnum: any case, kept in lower case */
    json_t *mode = json_object_get(root, "interrupt_mode");
    const char *mode_name = "signal";
    if (mode && !json_is_string(mode))
        return "interrupt_mode is not a string";
    if (mode && strcasecmp(json_string_value(mode), "signal") == 0)
        mode_name = "signal";
    else if (mode && strcasecmp(json_string_value(mode), "message") == 0)
        mode_name = "message";
    else if (mode) {
        snprintf(buf, buflen, "interrupt_mode \"%.64s\" is not \"signal\" or \"message\"",
                 json_string_value(mode));
        return buf;
    }
    self->interrupt_mode = strdup(mode_name);
    if (!self->interrupt_mode)
        return "out of memory";

    json_t *env = json_object_get(root, "env");
    if (env) {
        problem = check_env_object(env, "env", buf, buflen);
        if (problem)
            return problem;
        self->env = json_incref(env);
    }
    json_t *metadata = json_object_get(root, "metadata");
    if (metadata) {
        if (!json_is_object(metadata))
            return "metadata is not an object";
        self->metadata = json_incref(metadata);
    }
    return NULL;
}

kb_kernelspec_t *kb_kernelspec_load(const char *dir, const char *name, char *err, size_t errlen)
{
    assert(dir && name);
    json_t *root = NULL;
    char *path = NULL;
    char problem_buf[256];
    const char *problem = NULL;
    kb_kernelspec_t *self = calloc(1, sizeof *self);
    if (!self || !(path = format_string("%s/kernel.json", dir))) {
        set_err(err, errlen, "%s/kernel.json: out of memory", dir);
        goto fail;
    }
    root = load_json_file(path, err, errlen);
    if (!root)
        goto fail;
    problem = parse_spec(self, root, problem_buf, sizeof problem_buf);
    if (problem)
        goto fail;
    self->name = strdup(name);
    self->resource_dir = absolute_dir(dir);
    if (!self->name || !self->resource_dir) {
        problem = "out of memory";
        goto fail;
    }
    json_decref(root);
    free(path);
    return self;
fail:
    if (problem)
        set_err(err, errlen, "%s: %s", path, problem);
    json_decref(root);
    free(path);
    kb_kernelspec_destroy(&self);
    return NULL;
}

void kb_kernelspec_destroy(kb_kernelspec_t **self_p)
{
    assert(self_p);
    kb_kernelspec_t *self = *self_p;
    if (!self)
        return;
    free(self->name);
    free(self->display_name);
    free(self->language);
    free(self->resource_dir);
    free(self->interrupt_mode);
    kb_strv_free(self->argv);
    json_decref(self->env);
    json_decref(self->metadata);
    free(self);
    *self_p = NULL;
}

kb_kernelspec_t *kb_kernelspec_dup(const kb_kernelspec_t *self)
{
    assert(self && self->argv);
    kb_kernelspec_t *copy = calloc(1, sizeof *copy);
    if (!copy)
        goto fail;
    copy->name = strdup(self->name);
    copy->display_name = strdup(self->display_name);
    copy->language = strdup(self->language);
    copy->resource_dir = strdup(self->resource_dir);
    copy->interrupt_mode = strdup(self->interrupt_mode);
    copy->argv = calloc(self->argc + 1, sizeof *copy->argv);
    if (!copy->name || !copy->display_name || !copy->language || !copy->resource_dir
        || !copy->interrupt_mode || !copy->argv)
        goto fail;
    for (size_t i = 0; i < self->argc; i++)
        if (!(copy->argv[i] = strdup(self->argv[i])))
            goto fail;
    copy->argc = self->argc;
    if (self->env && !(copy->env = json_deep_copy(self->env)))
        goto fail;
    if (self->metadata && !(copy->metadata = json_deep_copy(self->metadata)))
        goto fail;
    return copy;
fail:
    kb_kernelspec_destroy(&copy);
    return NULL;
}

/*  "python3.<digits>" */
static bool is_python3_minor(const char *name)
{
    if (strncmp(name, "python3.", strlen("python3.")) != 0)
        return false;
    const char *digits = name + strlen("python3.");
    return *digits && strspn(digits, "0123456789") == strlen(digits);
}

/*  The minor version of the Python at path ("11" for python3.11), from its
    name or the name of the file it links to; false when neither says. */
static bool python_minor_of(const char *path, char *minor, size_t minorlen)
{
    char *resolved = realpath(path, NULL);
    const char *candidates[2] = { path, resolved };
    bool found = false;
    for (int i = 0; i < 2 && !found; i++) {
        if (!candidates[i])
            continue;
        const char *slash = strrchr(candidates[i], '/');
        const char *base = slash ? slash + 1 : candidates[i];
        if (is_python3_minor(base) && strlen(base + strlen("python3.")) < minorlen) {
            strcpy(minor, base + strlen("python3."));
            found = true;
        }
    }
    free(resolved);
    return found;
}

/*  jupyter_client swaps argv[0] for sys.executable when it is "python",
    "python3" or "python3.<its own minor>"; the system Python plays
    sys.executable here. */
static bool is_generic_python(const char *arg0, const char *system_python)
{
    if (strcmp(arg0, "python") == 0 || strcmp(arg0, "python3") == 0)
        return true;
    if (!is_python3_minor(arg0))
        return false;
    char minor[16];
    return python_minor_of(system_python, minor, sizeof minor)
           && strcmp(minor, arg0 + strlen("python3.")) == 0;
}

/*  Replace {name} with its value like jupyter_client's format_kernel_cmd
    (pattern \{([A-Za-z0-9_]+)\}); unknown names stay as written. Caller
    owns the result. */
static char *expand_braces(const char *arg, const char *connection_file, const char *resource_dir)
{
    strbuf_t sb = { 0 };
    const char *p = arg;
    while (*p) {
        if (*p == '{') {
            size_t n = 0;
            while (is_ident_char(p[1 + n]))
                n++;
            const char *value = NULL;
            if (n > 0 && p[1 + n] == '}') {
                if (n == strlen("connection_file") && !strncmp(p + 1, "connection_file", n))
                    value = connection_file;
                else if (n == strlen("resource_dir") && !strncmp(p + 1, "resource_dir", n))
                    value = resource_dir;
                else if (n == strlen("prefix") && !strncmp(p + 1, "prefix", n))
                    value = KB_KERNELSPEC_PREFIX;
            }
            if (value) {
                sb_append_str(&sb, value);
                p += n + 2;
                continue;
            }
        }
        sb_append(&sb, p, 1);
        p++;
    }
    return sb_take(&sb);
}

char **kb_kernelspec_build_argv(const kb_kernelspec_t *self, const char *connection_file,
                                const char *system_python)
{
    assert(self && self->argv && self->argc > 0);
    if (!system_python)
        system_python = KB_SYSTEM_PYTHON;
    strv_t out = { 0 };
    for (size_t i = 0; i < self->argc; i++) {
        char *arg = i == 0 && is_generic_python(self->argv[0], system_python)
                        ? strdup(system_python)
                        : expand_braces(self->argv[i], connection_file, self->resource_dir);
        if (strv_push(&out, arg) < 0)
            goto fail;
    }
    return out.items;
fail:
    kb_strv_free(out.items);
    return NULL;
}

/*  Deno's own kernel: `deno jupyter --kernel ...` */
static bool is_deno_kernel(const kb_kernelspec_t *self)
{
    const char *slash = strrchr(self->argv[0], '/');
    const char *base = slash ? slash + 1 : self->argv[0];
    if (strcmp(base, "deno") != 0 && strcmp(base, "deno.exe") != 0)
        return false;
    for (size_t i = 1; i < self->argc; i++)
        if (strcmp(self->argv[i], "jupyter") == 0)
            return true;
    return false;
}

kb_kernelspec_quirks_t kb_kernelspec_quirks(const kb_kernelspec_t *self)
{
    assert(self && self->argv && self->argc > 0);
    kb_kernelspec_quirks_t quirks = { NULL, 0, false };
    if (is_deno_kernel(self)) {
        quirks.transport = "tcp";
        quirks.late_output = KB_DENO_LATE_OUTPUT;
        quirks.no_color = true;
    }
    json_t *given = self->metadata ? json_object_get(self->metadata, "kernelbridge") : NULL;
    if (!json_is_object(given))
        return quirks;
    const char *transport = json_string_value(json_object_get(given, "transport"));
    if (transport && strcmp(transport, "tcp") == 0)
        quirks.transport = "tcp";
    else if (transport && strcmp(transport, "ipc") == 0)
        quirks.transport = "ipc";
    json_t *late = json_object_get(given, "late_output");
    if (json_is_number(late) && json_number_value(late) >= 0 && json_number_value(late) <= 10)
        quirks.late_output = json_number_value(late);
    json_t *no_color = json_object_get(given, "no_color");
    if (json_is_boolean(no_color))
        quirks.no_color = json_is_true(no_color);
    return quirks;
}

/*  Index in v of the "K=V" entry whose name is name[0..namelen), or -1. */
static ssize_t env_index(char *const *entries, size_t count, const char *name, size_t namelen)
{
    for (size_t i = 0; i < count; i++)
        if (strncmp(entries[i], name, namelen) == 0 && entries[i][namelen] == '=')
            return (ssize_t)i;
    return -1;
}

/*  Set name=value in v, replacing an entry of that name. 0 or -1. */
static int env_set(strv_t *v, const char *name, const char *value)
{
    char *entry = format_string("%s=%s", name, value);
    if (!entry)
        return -1;
    ssize_t index = env_index(v->items, v->size, name, strlen(name));
    if (index < 0)
        return strv_push(v, entry);
    free(v->items[index]);
    v->items[index] = entry;
    return 0;
}

static bool has_dropped_prefix(const char *entry, size_t namelen, const char *const *prefixes)
{
    for (size_t i = 0; prefixes && prefixes[i]; i++) {
        size_t len = strlen(prefixes[i]);
        if (len <= namelen && strncmp(entry, prefixes[i], len) == 0)
            return true;
    }
    return false;
}

static void append_variable(strbuf_t *sb, const char *const *source, size_t count, const char *name,
                            size_t namelen, const char *as_written, size_t written_len)
{
    ssize_t index = env_index((char *const *)source, count, name, namelen);
    if (index >= 0)
        sb_append_str(sb, source[index] + namelen + 1);
    else
        sb_append(sb, as_written, written_len);
}

/*  Python's string.Template(text).safe_substitute(source): $$ -> $, $name
    and ${name} (name: [_A-Za-z][_A-Za-z0-9]*) from source, anything else
    as written. Caller owns the result. */
static char *template_substitute(const char *text, const char *const *source, size_t count)
{
    strbuf_t sb = { 0 };
    const char *p = text;
    while (*p) {
        if (p[0] == '$' && p[1] == '$') {
            sb_append(&sb, "$", 1);
            p += 2;
            continue;
        }
        if (p[0] == '$' && is_ident_start(p[1])) {
            size_t n = 1;
            while (is_ident_char(p[1 + n]))
                n++;
            append_variable(&sb, source, count, p + 1, n, p, n + 1);
            p += n + 1;
            continue;
        }
        if (p[0] == '$' && p[1] == '{' && is_ident_start(p[2])) {
            size_t n = 1;
            while (is_ident_char(p[2 + n]))
                n++;
            if (p[2 + n] == '}') {
                append_variable(&sb, source, count, p + 2, n, p, n + 3);
                p += n + 3;
                continue;
            }
        }
        sb_append(&sb, p, 1);
        p++;
    }
    return sb_take(&sb);
}

char **kb_kernelspec_build_env(const kb_kernelspec_t *self, char *const *base_env,
                               const char *const *drop_prefixes, const json_t *extra_env)
{
    assert(self);
    strv_t out = { 0 };
    /* The kernelspec env is expanded from the filtered base alone, as
       jupyter_client expands it from the environment before updating it. */
    const char **source = NULL;
    size_t count = 0, base_len = 0;
    char problem[128];
    const char *key;
    json_t *value;

    while (base_env && base_env[base_len])
        base_len++;
    source = calloc(base_len + 1, sizeof *source);
    if (!source)
        goto fail;
    for (size_t i = 0; i < base_len; i++) {
        const char *eq = strchr(base_env[i], '=');
        if (!eq || eq == base_env[i])
            continue;
        size_t namelen = (size_t)(eq - base_env[i]);
        if (has_dropped_prefix(base_env[i], namelen, drop_prefixes)
            || env_index((char *const *)source, count, base_env[i], namelen) >= 0)
            continue;
        source[count++] = base_env[i];
        if (strv_push(&out, strdup(base_env[i])) < 0)
            goto fail;
    }
    /* Defaults of a kernel launch, before the kernelspec's and the caller's
       own values; not in source: $TERM in the kernelspec env is the
       daemon's. */
    if (env_set(&out, "TERM", KB_KERNEL_TERM) < 0)
        goto fail;
    if (kb_kernelspec_quirks(self).no_color && env_set(&out, "NO_COLOR", "1") < 0)
        goto fail;
    if (self->env) {
        if (check_env_object(self->env, "env", problem, sizeof problem))
            goto fail;
        json_object_foreach(self->env, key, value)
        {
            char *expanded = template_substitute(json_string_value(value), source, count);
            int rc = expanded ? env_set(&out, key, expanded) : -1;
            free(expanded);
            if (rc < 0)
                goto fail;
        }
    }
    if (extra_env) {
        if (check_env_object(extra_env, "extra_env", problem, sizeof problem))
            goto fail;
        json_object_foreach((json_t *)extra_env, key,
                            value) if (env_set(&out, key, json_string_value(value)) < 0) goto fail;
    }
    free(source);
    return out.items;
fail:
    free(source);
    kb_strv_free(out.items);
    return NULL;
}

/*  jupyter_core's data path on Linux, each without its kernels/ suffix. 0 or
    -1 (out of memory). */
static int search_roots(strv_t *roots)
{
    const char *value = getenv("JUPYTER_PATH");
    for (const char *p = value; p && *p;) {
        size_t len = strcspn(p, ":");
        size_t keep = len;
        while (keep > 1 && p[keep - 1] == '/')
            keep--;
        if (len > 0 && strv_push(roots, strndup(p, keep)) < 0)
            return -1;
        p += len;
        if (*p == ':')
            p++;
    }

    char *data_dir = NULL;
    if ((value = getenv("JUPYTER_DATA_DIR")) && *value)
        data_dir = strdup(value);
    else if ((value = getenv("XDG_DATA_HOME")) && *value)
        data_dir = format_string("%s/jupyter", value);
    else {
        const char *home = getenv("HOME");
        char buf[4096];
        struct passwd pw, *found = NULL;
        if ((!home || !*home) && getpwuid_r(getuid(), &pw, buf, sizeof buf, &found) == 0 && found)
            home = found->pw_dir;
        if (home && *home)
            data_dir = format_string("%s/.local/share/jupyter", home);
        else
            data_dir = strdup("/.local/share/jupyter");
    }
    if (strv_push(roots, data_dir) < 0)
        return -1;

    const char *system_roots[] = { KB_KERNELSPEC_PREFIX "/share/jupyter",
                                   "/usr/local/share/jupyter", "/usr/share/jupyter" };
    for (size_t i = 0; i < sizeof system_roots / sizeof *system_roots; i++)
        if (strv_push(roots, strdup(system_roots[i])) < 0)
            return -1;
    return 0;
}

static int compare_names(const void *a, const void *b)
{
    const char *left = *(const char *const *)a, *right = *(const char *const *)b;
    int order = strcasecmp(left, right);
    return order ? order : strcmp(left, right);
}

static int specs_push(kb_kernelspecs_t *self, kb_kernelspec_t *spec)
{
    if (self->size == self->cap) {
        size_t cap = self->cap ? self->cap * 2 : 8;
        kb_kernelspec_t **items = realloc(self->items, cap * sizeof *items);
        if (!items) {
            kb_kernelspec_destroy(&spec);
            return -1;
        }
        self->items = items;
        self->cap = cap;
    }
    self->items[self->size++] = spec;
    return 0;
}

typedef struct {
    dev_t dev;
    ino_t ino;
} dir_id_t;

/*  Add the kernelspecs of one kernels/ directory, unless it was read
    before. 0, or -1 when out of memory. */
static int scan_kernels_dir(kb_kernelspecs_t *self, const char *kernels_dir, dir_id_t **seen,
                            size_t *nseen, kb_kernelspec_warn_fn *warn, void *arg)
{
    strv_t names = { 0 };
    char *spec_dir = NULL;
    char err[PATH_MAX + 256];
    int rc = -1;
    DIR *dir = opendir(kernels_dir);
    if (!dir) {
        if (errno != ENOENT && errno != ENOTDIR)
            warnf(warn, arg, "cannot read kernelspec directory %s: %s", kernels_dir,
                  strerror(errno));
        return 0;
    }
    struct stat st;
    if (fstat(dirfd(dir), &st) < 0) {
        warnf(warn, arg, "cannot read kernelspec directory %s: %s", kernels_dir, strerror(errno));
        rc = 0;
        goto done;
    }
    for (size_t i = 0; i < *nseen; i++)
        if ((*seen)[i].dev == st.st_dev && (*seen)[i].ino == st.st_ino) {
            rc = 0;
            goto done;
        }
    dir_id_t *grown = realloc(*seen, (*nseen + 1) * sizeof *grown);
    if (!grown)
        goto done;
    *seen = grown;
    (*seen)[(*nseen)++] = (dir_id_t){ st.st_dev, st.st_ino };

    struct dirent *entry;
    while ((entry = readdir(dir)))
        if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0)
            if (strv_push(&names, strdup(entry->d_name)) < 0)
                goto done;
    if (names.size > 1)
        qsort(names.items, names.size, sizeof *names.items, compare_names);

    for (size_t i = 0; i < names.size; i++) {
        free(spec_dir);
        spec_dir = format_string("%s/%s", kernels_dir, names.items[i]);
        char *json_path = spec_dir ? format_string("%s/kernel.json", spec_dir) : NULL;
        if (!json_path)
            goto done;
        /* like jupyter_client's _is_kernel_dir: a directory with a kernel.json file */
        bool is_spec = stat(json_path, &st) == 0 && S_ISREG(st.st_mode);
        free(json_path);
        ascii_lower(names.items[i]);
        if (!is_spec || kb_kernelspecs_find(self, names.items[i]))
            continue;
        if (!is_valid_kernel_name(names.items[i]))
            warnf(warn, arg,
                  "kernelspec %s: name \"%s\" is not valid (ASCII letters, digits, "
                  "'-', '.' and '_' only); using it anyway",
                  spec_dir, names.items[i]);
        kb_kernelspec_t *spec = kb_kernelspec_load(spec_dir, names.items[i], err, sizeof err);
        if (!spec) {
            warnf(warn, arg, "skipping broken kernelspec %s", err);
            continue;
        }
        if (specs_push(self, spec) < 0)
            goto done;
    }
    rc = 0;
done:
    free(spec_dir);
    kb_strv_free(names.items);
    closedir(dir);
    return rc;
}

kb_kernelspecs_t *kb_kernelspecs_discover(kb_kernelspec_warn_fn *warn, void *arg)
{
    strv_t roots = { 0 };
    dir_id_t *seen = NULL;
    size_t nseen = 0;
    kb_kernelspecs_t *self = calloc(1, sizeof *self);
    if (!self || search_roots(&roots) < 0)
        goto fail;
    for (size_t i = 0; i < roots.size; i++) {
        char *kernels_dir = format_string("%s/kernels", roots.items[i]);
        int rc = kernels_dir ? scan_kernels_dir(self, kernels_dir, &seen, &nseen, warn, arg) : -1;
        free(kernels_dir);
        if (rc < 0)
            goto fail;
    }
    free(seen);
    kb_strv_free(roots.items);
    return self;
fail:
    free(seen);
    kb_strv_free(roots.items);
    kb_kernelspecs_destroy(&self);
    return NULL;
}

void kb_kernelspecs_destroy(kb_kernelspecs_t **self_p)
{
    assert(self_p);
    kb_kernelspecs_t *self = *self_p;
    if (!self)
        return;
    for (size_t i = 0; i < self->size; i++)
        kb_kernelspec_destroy(&self->items[i]);
    free(self->items);
    free(self);
    *self_p = NULL;
}

size_t kb_kernelspecs_size(const kb_kernelspecs_t *self)
{
    assert(self);
    return self->size;
}

const kb_kernelspec_t *kb_kernelspecs_at(const kb_kernelspecs_t *self, size_t index)
{
    assert(self && index < self->size);
    return self->items[index];
}

const kb_kernelspec_t *kb_kernelspecs_find(const kb_kernelspecs_t *self, const char *name)
{
    assert(self && name);
    for (size_t i = 0; i < self->size; i++)
        if (strcasecmp(self->items[i]->name, name) == 0)
            return self->items[i];
    return NULL;
}

/*  A language with no kernelspec of its own is served by the kernelspec of
    its alias. The alias has none itself, so lookups end. */
static const struct {
    const char *language;
    const char *alias;
} s_language_aliases[] = {
    { "javascript", "typescript" },
};

const kb_kernelspec_t *kb_kernelspecs_for_language(const kb_kernelspecs_t *self,
                                                   const char *language,
                                                   const char *const *kernel_map)
{
    assert(self && language);
    const char *mapped = NULL;
    size_t langlen = strlen(language);
    for (size_t i = 0; kernel_map && kernel_map[i]; i++) {
        const char *eq = strchr(kernel_map[i], '=');
        if (eq && (size_t)(eq - kernel_map[i]) == langlen
            && strncasecmp(kernel_map[i], language, langlen) == 0)
            mapped = eq + 1;
    }
    if (mapped)
        return kb_kernelspecs_find(self, mapped);

    const kb_kernelspec_t *named = kb_kernelspecs_find(self, language);
    if (named)
        return named;
    for (size_t i = 0; i < self->size; i++)
        if (strcasecmp(self->items[i]->language, language) == 0)
            return self->items[i];
    for (size_t i = 0; i < sizeof s_language_aliases / sizeof *s_language_aliases; i++)
        if (strcasecmp(s_language_aliases[i].language, language) == 0)
            return kb_kernelspecs_for_language(self, s_language_aliases[i].alias, kernel_map);
    return NULL;
}

char *kb_kernelspecs_names(const kb_kernelspecs_t *self)
{
    assert(self);
    strbuf_t sb = { 0 };
    for (size_t i = 0; i < self->size; i++) {
        if (i > 0)
            sb_append_str(&sb, ", ");
        sb_append_str(&sb, self->items[i]->name);
    }
    return sb_take(&sb);
}

json_t *kb_kernelspecs_to_json(const kb_kernelspecs_t *self)
{
    assert(self);
    json_t *list = json_array();
    if (!list)
        goto fail;
    for (size_t i = 0; i < self->size; i++) {
        const kb_kernelspec_t *spec = self->items[i];
        if (json_array_append_new(
                list, json_pack("{s:s, s:s, s:s, s:s, s:s}", "name", spec->name, "display_name",
                                spec->display_name, "language", spec->language, "interrupt_mode",
                                spec->interrupt_mode, "resource_dir", spec->resource_dir))
            < 0)
            goto fail;
    }
    /* "o" steals list, also when packing fails */
    return json_pack("{s:o}", "kernelspecs", list);
fail:
    json_decref(list);
    return NULL;
}

int kb_kernel_map_validate(const char *const *kernel_map, char *err, size_t errlen)
{
    for (size_t i = 0; kernel_map && kernel_map[i]; i++) {
        const char *eq = strchr(kernel_map[i], '=');
        if (!eq || eq == kernel_map[i] || !eq[1]) {
            set_err(err, errlen, "kernel map entry \"%s\" is not language=kernelspec",
                    kernel_map[i]);
            return -1;
        }
    }
    return 0;
}
