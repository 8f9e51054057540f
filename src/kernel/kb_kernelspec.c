/*  kb_kernelspec.c - one kernelspec: kernel.json read and checked
    (jupyter_client's rules), copied and freed, and the habits of the kernel
    it launches (kb_kernelspec_quirks).

    Not for finding kernelspecs (kb_kernelspecs.c), for the argv and
    environment of a launch (kb_kernelspec_launch.c), or for launching. */
#include "kernel/kb_kernelspec.h"

#include "util/kb_buf.h"

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/*  A kernel.json is a few hundred bytes; anything this large is not one. */
#define KB_KERNEL_JSON_MAX (1024 * 1024)

/*  dir as an absolute path without trailing slashes. Caller owns the
    result. */
static char *absolute_dir(const char *dir)
{
    char *result = dir[0] == '/' ? strdup(dir) : realpath(dir, NULL);
    if (!result && dir[0] != '/') {
        char *cwd = getcwd(NULL, 0);
        if (cwd)
            result = kb_buf_sprintf("%s/%s", cwd, dir);
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
static json_t *load_json_file(const char *path, kb_error_t *err)
{
    json_t *root = NULL;
    char *text = NULL;
    FILE *file = fopen(path, "re");
    if (!file) {
        kb_error_set(err, KB_ERR_INTERNAL, "%s: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fileno(file), &st) < 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        kb_error_set(err, KB_ERR_INTERNAL, "%s: not a regular file", path);
        goto fail;
    }
    if (st.st_size > KB_KERNEL_JSON_MAX) {
        kb_error_set(err, KB_ERR_INTERNAL, "%s: larger than %d bytes", path, KB_KERNEL_JSON_MAX);
        goto fail;
    }
    text = malloc((size_t)st.st_size + 1);
    if (!text) {
        kb_error_set(err, KB_ERR_INTERNAL, "%s: out of memory", path);
        goto fail;
    }
    size_t length = fread(text, 1, (size_t)st.st_size, file);
    if (ferror(file)) {
        kb_error_set(err, KB_ERR_INTERNAL, "%s: read error", path);
        goto fail;
    }
    json_error_t jerr;
    root = json_loadb(text, length, 0, &jerr);
    if (!root) {
        kb_error_set(err, KB_ERR_INTERNAL, "%s: invalid JSON at line %d, column %d: %s", path,
                     jerr.line, jerr.column, jerr.text);
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

const char *kb_kernelspec_env_problem(const json_t *env, const char *what, char *buf, size_t buflen)
{
    const char *key;
    json_t *value;
    if (!json_is_object(env)) {
        snprintf(buf, buflen, "%s is not an object", what);
        return buf;
    }
    json_object_foreach((json_t *)env, key, value)
    {
        if (!*key || strchr(key, '=')) {
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
        problem = kb_kernelspec_env_problem(env, "env", buf, buflen);
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

kb_kernelspec_t *kb_kernelspec_load(const char *dir, const char *name, kb_error_t *err)
{
    assert(dir && name);
    json_t *root = NULL;
    char *path = NULL;
    char problem_buf[256];
    const char *problem = NULL;
    kb_kernelspec_t *self = calloc(1, sizeof *self);
    if (!self || !(path = kb_buf_sprintf("%s/kernel.json", dir))) {
        kb_error_set(err, KB_ERR_INTERNAL, "%s/kernel.json: out of memory", dir);
        goto fail;
    }
    root = load_json_file(path, err);
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
        kb_error_set(err, KB_ERR_INTERNAL, "%s: %s", path, problem);
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

kb_kernelspec_t *kb_kernelspec_with_arg(const kb_kernelspec_t *self, const char *arg)
{
    assert(self && arg);
    kb_kernelspec_t *copy = kb_kernelspec_dup(self);
    char **argv = copy ? realloc(copy->argv, (copy->argc + 2) * sizeof *argv) : NULL;
    if (!argv) {
        kb_kernelspec_destroy(&copy);
        return NULL;
    }
    copy->argv = argv;
    if (!(argv[copy->argc] = strdup(arg))) {
        kb_kernelspec_destroy(&copy);
        return NULL;
    }
    argv[++copy->argc] = NULL;
    return copy;
}

/*  IPython's kernel: `python -m ipykernel_launcher` (or `-m ipykernel`),
    or a path to ipykernel_launcher.py. */
static bool is_ipykernel(const kb_kernelspec_t *self)
{
    for (size_t i = 1; i < self->argc; i++) {
        const char *arg = self->argv[i];
        if (strcmp(self->argv[i - 1], "-m") == 0
            && (strcmp(arg, "ipykernel_launcher") == 0 || strcmp(arg, "ipykernel") == 0))
            return true;
        size_t len = strlen(arg);
        const char *script = "ipykernel_launcher.py";
        if (len >= strlen(script) && strcmp(arg + len - strlen(script), script) == 0
            && (len == strlen(script) || arg[len - strlen(script) - 1] == '/'))
            return true;
    }
    return false;
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

bool kb_kernelspec_forkable(const kb_kernelspec_t *self, const char **why)
{
    const char *unused;
    why = why ? why : &unused;
    json_t *given = self->metadata ? json_object_get(self->metadata, "kernelbridge") : NULL;
    json_t *fork = json_is_object(given) ? json_object_get(given, "fork") : NULL;
    if (json_is_boolean(fork)) {
        *why = "its kernelspec says metadata.kernelbridge.fork: false";
        return json_is_true(fork);
    }
    if (kb_kernelspec_quirks(self).ipykernel)
        return true;
    *why = "only ipykernel's kernels can be forked (its argv does not run -m ipykernel_launcher)";
    return false;
}

kb_kernelspec_quirks_t kb_kernelspec_quirks(const kb_kernelspec_t *self)
{
    assert(self && self->argv && self->argc > 0);
    kb_kernelspec_quirks_t quirks = { NULL, 0, false, false, is_ipykernel(self) };
    if (is_deno_kernel(self)) {
        quirks.transport = "tcp";
        quirks.late_output = KB_DENO_LATE_OUTPUT;
        quirks.no_color = true;
        quirks.no_rlimit_data = true;
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
    json_t *rlimit = json_object_get(given, "rlimit_data");
    if (json_is_boolean(rlimit))
        quirks.no_rlimit_data = !json_is_true(rlimit);
    json_t *ipykernel = json_object_get(given, "ipykernel");
    if (json_is_boolean(ipykernel))
        quirks.ipykernel = json_is_true(ipykernel);
    return quirks;
}
