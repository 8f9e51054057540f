/*  kb_kernelspec_launch.c - what a kernelspec launches: the argv, with
    jupyter_client's {connection_file}/{resource_dir}/{prefix} expansion and
    its swap of a generic "python" for the system Python, and the
    environment: the daemon's minus its secrets, the launch defaults, the
    kernelspec env expanded like string.Template.safe_substitute, and the
    caller's own.

    Not for reading kernel.json (kb_kernelspec.c), finding kernelspecs
    (kb_kernelspecs.c) or spawning anything: the launcher takes the argv
    and environment built here. */
#include "kernel/kb_kernelspec.h"

#include <assert.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#ifndef KB_SYSTEM_PYTHON
#define KB_SYSTEM_PYTHON "/usr/bin/python3"
#endif

static bool is_ident_start(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static bool is_ident_char(char c)
{
    return is_ident_start(c) || (c >= '0' && c <= '9');
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
    kb_buf_t sb = KB_BUF_INIT;
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
                kb_buf_puts(&sb, value);
                p += n + 2;
                continue;
            }
        }
        kb_buf_putc(&sb, *p);
        p++;
    }
    return kb_buf_take(&sb, NULL);
}

char **kb_kernelspec_build_argv(const kb_kernelspec_t *self, const char *connection_file,
                                const char *system_python)
{
    assert(self && self->argv && self->argc > 0);
    if (!system_python)
        system_python = KB_SYSTEM_PYTHON;
    kb_strv_t out = KB_STRV_INIT;
    for (size_t i = 0; i < self->argc; i++) {
        char *arg = i == 0 && is_generic_python(self->argv[0], system_python)
                        ? strdup(system_python)
                        : expand_braces(self->argv[i], connection_file, self->resource_dir);
        if (kb_strv_push(&out, arg) != KB_BUF_OK)
            goto fail;
    }
    return kb_strv_take(&out);
fail:
    kb_strv_clear(&out);
    return NULL;
}

/*  Index in entries of the "K=V" entry whose name is name[0..namelen), or -1. */
static ssize_t env_index(char *const *entries, size_t count, const char *name, size_t namelen)
{
    for (size_t i = 0; i < count; i++)
        if (strncmp(entries[i], name, namelen) == 0 && entries[i][namelen] == '=')
            return (ssize_t)i;
    return -1;
}

/*  Set name=value in v, replacing an entry of that name. 0 or -1. */
static int env_set(kb_strv_t *v, const char *name, const char *value)
{
    char *entry = kb_buf_sprintf("%s=%s", name, value);
    if (!entry)
        return -1;
    ssize_t index = env_index(v->items, v->len, name, strlen(name));
    if (index < 0)
        return kb_strv_push(v, entry) == KB_BUF_OK ? 0 : -1;
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

static void append_variable(kb_buf_t *sb, const char *const *source, size_t count, const char *name,
                            size_t namelen, const char *as_written, size_t written_len)
{
    ssize_t index = env_index((char *const *)source, count, name, namelen);
    if (index >= 0)
        kb_buf_puts(sb, source[index] + namelen + 1);
    else
        kb_buf_append(sb, as_written, written_len);
}

/*  Python's string.Template(text).safe_substitute(source): $$ -> $, $name
    and ${name} (name: [_A-Za-z][_A-Za-z0-9]*) from source, anything else
    as written. Caller owns the result. */
static char *template_substitute(const char *text, const char *const *source, size_t count)
{
    kb_buf_t sb = KB_BUF_INIT;
    const char *p = text;
    while (*p) {
        if (p[0] == '$' && p[1] == '$') {
            kb_buf_putc(&sb, '$');
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
        kb_buf_putc(&sb, *p);
        p++;
    }
    return kb_buf_take(&sb, NULL);
}

char **kb_kernelspec_build_env(const kb_kernelspec_t *self, char *const *base_env,
                               const char *const *drop_prefixes, const json_t *extra_env)
{
    assert(self);
    kb_strv_t out = KB_STRV_INIT;
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
        if (kb_strv_push(&out, strdup(base_env[i])) != KB_BUF_OK)
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
        if (kb_kernelspec_env_problem(self->env, "env", problem, sizeof problem))
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
        if (kb_kernelspec_env_problem(extra_env, "extra_env", problem, sizeof problem))
            goto fail;
        json_object_foreach((json_t *)extra_env, key,
                            value) if (env_set(&out, key, json_string_value(value)) < 0) goto fail;
    }
    free(source);
    return kb_strv_take(&out);
fail:
    free(source);
    kb_strv_clear(&out);
    return NULL;
}

/*  envp with name set to value: appended to a non-empty value after ":"
    (append), or in its place. */
static char **s_env_with(char *const *envp, const char *name, const char *value, bool append)
{
    assert(name && value);
    kb_strv_t out = KB_STRV_INIT;
    size_t namelen = strlen(name);
    bool found = false;
    for (size_t i = 0; envp && envp[i]; i++) {
        const char *entry = envp[i];
        bool match = strncmp(entry, name, namelen) == 0 && entry[namelen] == '=';
        const char *old = entry + namelen + 1;
        char *copy = !match           ? strdup(entry)
                     : append && *old ? kb_buf_sprintf("%s:%s", entry, value)
                                      : kb_buf_sprintf("%s=%s", name, value);
        found = found || match;
        if (kb_strv_push(&out, copy) != KB_BUF_OK)
            goto fail;
    }
    if (!found && kb_strv_push(&out, kb_buf_sprintf("%s=%s", name, value)) != KB_BUF_OK)
        goto fail;
    return kb_strv_take(&out);
fail:
    kb_strv_clear(&out);
    return NULL;
}

char **kb_kernelspec_env_add_path(char *const *envp, const char *name, const char *dir)
{
    return s_env_with(envp, name, dir, true);
}

char **kb_kernelspec_env_set(char *const *envp, const char *name, const char *value)
{
    return s_env_with(envp, name, value, false);
}
