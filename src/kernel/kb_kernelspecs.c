/*  kb_kernelspecs.c - the installed kernelspecs: discovery along
    jupyter_core's data path (jupyter_client's naming rules, a broken
    kernel.json skipped with a warning), lookups by name and by language
    (SPEC section 3, with the configured kernel map), and their listing.

    Not for reading one kernel.json (kb_kernelspec.c) or building a launch
    (kb_kernelspec_launch.c). */
#include "kernel/kb_kernelspec.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
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

struct kb_kernelspecs {
    kb_vec_t specs; /* of kb_kernelspec_t *, owned, in discovery order */
};

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

static void ascii_lower(char *s)
{
    for (; *s; s++)
        if (*s >= 'A' && *s <= 'Z')
            *s = (char)(*s - 'A' + 'a');
}

/*  jupyter_client's rule for kernel names: ASCII letters, digits, - . _ */
static bool is_valid_kernel_name(const char *name)
{
    static const char allowed[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                  "0123456789-._";
    return *name && strspn(name, allowed) == strlen(name);
}

/*  jupyter_core's data path on Linux (then this build's own data dir),
    each without its kernels/ suffix. 0 or -1 (out of memory). */
static int search_roots(kb_strv_t *roots)
{
    const char *value = getenv("JUPYTER_PATH");
    for (const char *p = value; p && *p;) {
        size_t len = strcspn(p, ":");
        size_t keep = len;
        while (keep > 1 && p[keep - 1] == '/')
            keep--;
        if (len > 0 && kb_strv_push(roots, strndup(p, keep)) != KB_BUF_OK)
            return -1;
        p += len;
        if (*p == ':')
            p++;
    }

    char *data_dir = NULL;
    if ((value = getenv("JUPYTER_DATA_DIR")) && *value)
        data_dir = strdup(value);
    else if ((value = getenv("XDG_DATA_HOME")) && *value)
        data_dir = kb_buf_sprintf("%s/jupyter", value);
    else {
        const char *home = getenv("HOME");
        char buf[4096];
        struct passwd pw, *found = NULL;
        if ((!home || !*home) && getpwuid_r(getuid(), &pw, buf, sizeof buf, &found) == 0 && found)
            home = found->pw_dir;
        if (home && *home)
            data_dir = kb_buf_sprintf("%s/.local/share/jupyter", home);
        else
            data_dir = strdup("/.local/share/jupyter");
    }
    if (kb_strv_push(roots, data_dir) != KB_BUF_OK)
        return -1;

    /*  Last, the data dir of this build's install prefix, where `cmake
        --install` puts the kernelspecs it ships (bash): found also under a
        prefix Jupyter does not search. A dir met twice is read once. */
    const char *system_roots[]
        = { KB_KERNELSPEC_PREFIX "/share/jupyter", "/usr/local/share/jupyter", "/usr/share/jupyter",
            KB_INSTALL_DATADIR "/jupyter" };
    for (size_t i = 0; i < sizeof system_roots / sizeof *system_roots; i++)
        if (kb_strv_push(roots, strdup(system_roots[i])) != KB_BUF_OK)
            return -1;
    return 0;
}

static int compare_names(const void *a, const void *b)
{
    const char *left = *(const char *const *)a, *right = *(const char *const *)b;
    int order = strcasecmp(left, right);
    return order ? order : strcmp(left, right);
}

static kb_kernelspec_t *spec_at(const kb_kernelspecs_t *self, size_t index)
{
    return *(kb_kernelspec_t **)kb_vec_at(&self->specs, index);
}

/*  Add spec (taking ownership, also on failure). 0 or -1. */
static int specs_push(kb_kernelspecs_t *self, kb_kernelspec_t *spec)
{
    if (kb_vec_push(&self->specs, &spec) == KB_BUF_OK)
        return 0;
    kb_kernelspec_destroy(&spec);
    return -1;
}

typedef struct {
    dev_t dev;
    ino_t ino;
} dir_id_t;

/*  Add the kernelspecs of one kernels/ directory, unless it was read
    before. 0, or -1 when out of memory. */
static int scan_kernels_dir(kb_kernelspecs_t *self, const char *kernels_dir, kb_vec_t *seen,
                            kb_kernelspec_warn_fn *warn, void *arg)
{
    kb_strv_t names = KB_STRV_INIT;
    char *spec_dir = NULL;
    kb_error_t err;
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
    for (size_t i = 0; i < seen->len; i++) {
        const dir_id_t *id = kb_vec_at(seen, i);
        if (id->dev == st.st_dev && id->ino == st.st_ino) {
            rc = 0;
            goto done;
        }
    }
    dir_id_t id = { st.st_dev, st.st_ino };
    if (kb_vec_push(seen, &id) != KB_BUF_OK)
        goto done;

    struct dirent *entry;
    while ((entry = readdir(dir)))
        if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0)
            if (kb_strv_push(&names, strdup(entry->d_name)) != KB_BUF_OK)
                goto done;
    if (names.len > 1)
        qsort(names.items, names.len, sizeof *names.items, compare_names);

    for (size_t i = 0; i < names.len; i++) {
        free(spec_dir);
        spec_dir = kb_buf_sprintf("%s/%s", kernels_dir, names.items[i]);
        char *json_path = spec_dir ? kb_buf_sprintf("%s/kernel.json", spec_dir) : NULL;
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
        kb_kernelspec_t *spec = kb_kernelspec_load(spec_dir, names.items[i], &err);
        if (!spec) {
            warnf(warn, arg, "skipping broken kernelspec %s", err.message);
            continue;
        }
        if (specs_push(self, spec) < 0)
            goto done;
    }
    rc = 0;
done:
    free(spec_dir);
    kb_strv_clear(&names);
    closedir(dir);
    return rc;
}

kb_kernelspecs_t *kb_kernelspecs_discover(kb_kernelspec_warn_fn *warn, void *arg)
{
    kb_strv_t roots = KB_STRV_INIT;
    kb_vec_t seen = KB_VEC_INIT(sizeof(dir_id_t));
    kb_kernelspecs_t *self = calloc(1, sizeof *self);
    if (!self)
        goto fail;
    kb_vec_init(&self->specs, sizeof(kb_kernelspec_t *), 0);
    if (search_roots(&roots) < 0)
        goto fail;
    for (size_t i = 0; i < roots.len; i++) {
        char *kernels_dir = kb_buf_sprintf("%s/kernels", roots.items[i]);
        int rc = kernels_dir ? scan_kernels_dir(self, kernels_dir, &seen, warn, arg) : -1;
        free(kernels_dir);
        if (rc < 0)
            goto fail;
    }
    kb_vec_free(&seen);
    kb_strv_clear(&roots);
    return self;
fail:
    kb_vec_free(&seen);
    kb_strv_clear(&roots);
    kb_kernelspecs_destroy(&self);
    return NULL;
}

void kb_kernelspecs_destroy(kb_kernelspecs_t **self_p)
{
    assert(self_p);
    kb_kernelspecs_t *self = *self_p;
    if (!self)
        return;
    for (size_t i = 0; i < self->specs.len; i++)
        kb_kernelspec_destroy((kb_kernelspec_t **)kb_vec_at(&self->specs, i));
    kb_vec_free(&self->specs);
    free(self);
    *self_p = NULL;
}

size_t kb_kernelspecs_size(const kb_kernelspecs_t *self)
{
    assert(self);
    return self->specs.len;
}

const kb_kernelspec_t *kb_kernelspecs_at(const kb_kernelspecs_t *self, size_t index)
{
    assert(self && index < self->specs.len);
    return spec_at(self, index);
}

const kb_kernelspec_t *kb_kernelspecs_find(const kb_kernelspecs_t *self, const char *name)
{
    assert(self && name);
    for (size_t i = 0; i < self->specs.len; i++)
        if (strcasecmp(spec_at(self, i)->name, name) == 0)
            return spec_at(self, i);
    return NULL;
}

/*  A language with no kernelspec of its own is served by the kernelspec of
    its alias. The alias has none itself, so lookups end. */
static const struct {
    const char *language;
    const char *alias;
} s_language_aliases[] = {
    { "javascript", "typescript" },
    { "sh", "bash" },
    { "shell", "bash" },
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
    for (size_t i = 0; i < self->specs.len; i++)
        if (strcasecmp(spec_at(self, i)->language, language) == 0)
            return spec_at(self, i);
    for (size_t i = 0; i < sizeof s_language_aliases / sizeof *s_language_aliases; i++)
        if (strcasecmp(s_language_aliases[i].language, language) == 0)
            return kb_kernelspecs_for_language(self, s_language_aliases[i].alias, kernel_map);
    return NULL;
}

char *kb_kernelspecs_names(const kb_kernelspecs_t *self)
{
    assert(self);
    kb_buf_t sb = KB_BUF_INIT;
    for (size_t i = 0; i < self->specs.len; i++) {
        if (i > 0)
            kb_buf_puts(&sb, ", ");
        kb_buf_puts(&sb, spec_at(self, i)->name);
    }
    return kb_buf_take(&sb, NULL);
}

json_t *kb_kernelspecs_to_json(const kb_kernelspecs_t *self)
{
    assert(self);
    json_t *list = json_array();
    if (!list)
        goto fail;
    for (size_t i = 0; i < self->specs.len; i++) {
        const kb_kernelspec_t *spec = spec_at(self, i);
        json_t *argv = json_array();
        for (size_t k = 0; argv && k < spec->argc; k++)
            json_array_append_new(argv, json_string(spec->argv[k]));
        if (json_array_append_new(
                list, json_pack("{s:s, s:s, s:s, s:s, s:s, s:o, s:O, s:O, s:b}", "name", spec->name,
                                "display_name", spec->display_name, "language", spec->language,
                                "interrupt_mode", spec->interrupt_mode, "resource_dir",
                                spec->resource_dir, "argv", argv, "env",
                                spec->env ? spec->env : json_null(), "metadata",
                                spec->metadata ? spec->metadata : json_null(), "fork",
                                kb_kernelspec_forkable(spec, NULL)))
            < 0)
            goto fail;
    }
    /* "o" steals list, also when packing fails */
    return json_pack("{s:o}", "kernelspecs", list);
fail:
    json_decref(list);
    return NULL;
}

int kb_kernel_map_validate(const char *const *kernel_map, kb_error_t *err)
{
    for (size_t i = 0; kernel_map && kernel_map[i]; i++) {
        const char *eq = strchr(kernel_map[i], '=');
        if (!eq || eq == kernel_map[i] || !eq[1]) {
            return kb_error_set(err, KB_ERR_BAD_REQUEST,
                                "kernel map entry \"%s\" is not language=kernelspec",
                                kernel_map[i]);
        }
    }
    return 0;
}
