/*  test_kernelspec.c - kernelspec discovery, kernel.json parsing, language
    lookup, and launch argv/env building, against real files in private temp
    directories and the kernelspecs installed on this machine. */
#include "kb_testutil.h"
#include "kernel/kb_kernelspec.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/*  mkdir -p */
static void make_dirs(const char *path)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(buf, 0700);
            *p = '/';
        }
    mkdir(buf, 0700);
}

static void write_file(const char *path, const char *text)
{
    FILE *file = fopen(path, "w");
    CHECK(file != NULL);
    if (!file)
        return;
    fputs(text, file);
    fclose(file);
}

/*  Write <root>/kernels/<name>/kernel.json holding text. */
static void write_spec(const char *root, const char *name, const char *text)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/kernels/%s", root, name);
    make_dirs(path);
    strncat(path, "/kernel.json", sizeof path - strlen(path) - 1);
    write_file(path, text);
}

/*  A minimal valid kernel.json. */
static void write_simple_spec(const char *root, const char *name, const char *display_name,
                              const char *language)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"argv\": [\"/bin/true\", \"-f\", \"{connection_file}\"],"
             " \"display_name\": \"%s\", \"language\": \"%s\"}",
             display_name, language);
    write_spec(root, name, text);
}

static char *join(const char *a, const char *b)
{
    char *out = NULL;
    if (asprintf(&out, "%s/%s", a, b) < 0)
        return NULL;
    return out;
}

static void set_or_unset(const char *name, const char *value)
{
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

/*  Point jupyter's search variables somewhere (NULL unsets). */
static void set_search_env(const char *jupyter_path, const char *data_dir, const char *xdg,
                           const char *home)
{
    set_or_unset("JUPYTER_PATH", jupyter_path);
    set_or_unset("JUPYTER_DATA_DIR", data_dir);
    set_or_unset("XDG_DATA_HOME", xdg);
    set_or_unset("HOME", home);
}

typedef struct {
    char *messages[32];
    int count;
} warnings_t;

static void collect_warning(const char *message, void *arg)
{
    warnings_t *warnings = arg;
    fprintf(stderr, "   warning: %s\n", message);
    if (warnings->count < 32)
        warnings->messages[warnings->count++] = strdup(message);
}

static void warnings_clear(warnings_t *warnings)
{
    for (int i = 0; i < warnings->count; i++)
        free(warnings->messages[i]);
    warnings->count = 0;
}

/*  The number of warnings that contain both a and b. */
static int warnings_matching(const warnings_t *warnings, const char *a, const char *b)
{
    int count = 0;
    for (int i = 0; i < warnings->count; i++)
        if (strstr(warnings->messages[i], a) && (!b || strstr(warnings->messages[i], b)))
            count++;
    return count;
}

static const char *strv_get(char **strv, const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; strv && strv[i]; i++)
        if (strncmp(strv[i], name, len) == 0 && strv[i][len] == '=')
            return strv[i] + len + 1;
    return NULL;
}

static int strv_count_prefix(char **strv, const char *prefix)
{
    int count = 0;
    for (size_t i = 0; strv && strv[i]; i++)
        if (strncmp(strv[i], prefix, strlen(prefix)) == 0)
            count++;
    return count;
}

/*  Index of the kernelspec called name in discovery order, or -1. */
static long index_of(const kb_kernelspecs_t *specs, const char *name)
{
    for (size_t i = 0; i < kb_kernelspecs_size(specs); i++)
        if (strcmp(kb_kernelspecs_at(specs, i)->name, name) == 0)
            return (long)i;
    return -1;
}

static void test_load_valid(void)
{
    char *tmp = kb_test_tmpdir();
    write_spec(tmp, "full",
               "{\"argv\": [\"python3\", \"-m\", \"ipykernel_launcher\", \"-f\","
               " \"{connection_file}\"], \"display_name\": \"Full\", \"language\": \"Python\","
               " \"interrupt_mode\": \"Message\", \"env\": {\"A\": \"1\", \"B\": \"$HOME\"},"
               " \"metadata\": {\"debugger\": true}, \"unknown_key\": 3}");
    write_spec(tmp, "plain", "{\"argv\": [\"k\"], \"display_name\": \"\", \"language\": \"x\"}");
    char err[512] = "";
    char *dir = join(tmp, "kernels/full");
    kb_kernelspec_t *spec = kb_kernelspec_load(dir, "full", err, sizeof err);
    CHECK(spec != NULL);
    if (spec) {
        CHECK_STR(spec->name, "full");
        CHECK_STR(spec->display_name, "Full");
        CHECK_STR(spec->language, "Python");
        CHECK_STR(spec->interrupt_mode, "message");
        CHECK_STR(spec->resource_dir, dir);
        CHECK(spec->argc == 5);
        CHECK_STR(spec->argv[0], "python3");
        CHECK_STR(spec->argv[4], "{connection_file}");
        CHECK(spec->argv[5] == NULL);
        CHECK(json_is_object(spec->env) && json_object_size(spec->env) == 2);
        CHECK_STR(json_string_value(json_object_get(spec->env, "B")), "$HOME");
        CHECK(json_is_true(json_object_get(spec->metadata, "debugger")));

        kb_kernelspec_t *copy = kb_kernelspec_dup(spec);
        CHECK(copy != NULL && copy != spec);
        if (copy) {
            CHECK(copy->argv != spec->argv && copy->env != spec->env);
            CHECK_STR(copy->argv[4], "{connection_file}");
            CHECK(copy->argc == 5 && copy->argv[5] == NULL);
            CHECK(json_equal(copy->env, spec->env) && json_equal(copy->metadata, spec->metadata));
            CHECK_STR(copy->interrupt_mode, "message");
            CHECK_STR(copy->resource_dir, dir);
        }
        kb_kernelspec_destroy(&copy);
        CHECK(copy == NULL);
    }
    kb_kernelspec_destroy(&spec);
    CHECK(spec == NULL);
    kb_kernelspec_destroy(&spec); /* safe on NULL */

    /* defaults; a relative directory gives an absolute resource_dir */
    char cwd[PATH_MAX];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK(chdir(tmp) == 0);
    spec = kb_kernelspec_load("kernels/plain/", "plain", err, sizeof err);
    CHECK(chdir(cwd) == 0);
    CHECK(spec != NULL);
    if (spec) {
        char *expected = join(tmp, "kernels/plain");
        char *real_expected = realpath(expected, NULL);
        CHECK_STR(spec->resource_dir, real_expected);
        CHECK(spec->resource_dir[0] == '/');
        CHECK_STR(spec->interrupt_mode, "signal");
        CHECK(spec->env == NULL && spec->metadata == NULL);
        CHECK_STR(spec->display_name, "");
        free(expected);
        free(real_expected);
    }
    kb_kernelspec_destroy(&spec);
    free(dir);
    kb_test_rmtree(tmp);
    free(tmp);
}

static void test_load_broken(void)
{
    static const struct {
        const char *text;
        const char *problem;
    } cases[] = {
        { "{\"argv\": [\"k\"], \"display_name\": \"x\",", "invalid JSON" },
        { "[1, 2]", "not a JSON object" },
        { "{\"display_name\": \"x\", \"language\": \"x\"}", "argv is missing" },
        { "{\"argv\": \"k\", \"display_name\": \"x\", \"language\": \"x\"}", "argv is not a list" },
        { "{\"argv\": [], \"display_name\": \"x\", \"language\": \"x\"}", "argv is empty" },
        { "{\"argv\": [\"k\", 3], \"display_name\": \"x\", \"language\": \"x\"}",
          "argv[1] is not a string" },
        { "{\"argv\": [\"\"], \"display_name\": \"x\", \"language\": \"x\"}", "argv[0] is empty" },
        { "{\"argv\": [\"k\"], \"language\": \"x\"}", "display_name is missing" },
        { "{\"argv\": [\"k\"], \"display_name\": 1, \"language\": \"x\"}",
          "display_name is not a string" },
        { "{\"argv\": [\"k\"], \"display_name\": \"x\"}", "language is missing" },
        { "{\"argv\": [\"k\"], \"display_name\": \"x\", \"language\": \"x\", \"interrupt_mode\":"
          " \"kill\"}",
          "interrupt_mode \"kill\"" },
        { "{\"argv\": [\"k\"], \"display_name\": \"x\", \"language\": \"x\", \"env\": [1]}",
          "env is not an object" },
        { "{\"argv\": [\"k\"], \"display_name\": \"x\", \"language\": \"x\", \"env\": {\"A\": 1}}",
          "env[\"A\"] is not a string" },
        { "{\"argv\": [\"k\"], \"display_name\": \"x\", \"language\": \"x\", \"env\": {\"A=B\":"
          " \"1\"}}",
          "env name \"A=B\"" },
        { "{\"argv\": [\"k\"], \"display_name\": \"x\", \"language\": \"x\", \"metadata\": 2}",
          "metadata is not an object" },
    };
    char *tmp = kb_test_tmpdir();
    char *dir = join(tmp, "kernels/broken");
    char *file = join(dir, "kernel.json");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_spec(tmp, "broken", cases[i].text);
        char err[512] = "";
        kb_kernelspec_t *spec = kb_kernelspec_load(dir, "broken", err, sizeof err);
        CHECK(spec == NULL);
        CHECK(strstr(err, file) == err);
        CHECK(strstr(err, cases[i].problem) != NULL);
        if (!strstr(err, cases[i].problem))
            fprintf(stderr, "   case %zu: err \"%s\", expected \"%s\"\n", i, err, cases[i].problem);
        kb_kernelspec_destroy(&spec);
    }
    /* a missing file, and a NULL err buffer */
    char err[512] = "";
    char *missing = join(tmp, "kernels/none");
    CHECK(kb_kernelspec_load(missing, "none", err, sizeof err) == NULL);
    CHECK(strstr(err, "kernels/none/kernel.json") && strstr(err, "No such file"));
    CHECK(kb_kernelspec_load(missing, "none", NULL, 0) == NULL);
    free(missing);
    free(dir);
    free(file);
    kb_test_rmtree(tmp);
    free(tmp);
}

static void test_search_order(void)
{
    char *tmp = kb_test_tmpdir();
    char *a = join(tmp, "a"), *b = join(tmp, "b"), *data = join(tmp, "data");
    char *xdg = join(tmp, "xdg"), *home = join(tmp, "home");
    write_simple_spec(a, "ks-one", "A one", "one");
    write_simple_spec(a, "KS-Upper", "A upper", "up");
    write_simple_spec(b, "ks-one", "B one", "one");
    write_simple_spec(b, "ks-two", "B two", "two");
    write_simple_spec(b, "ks-upper", "B upper", "up");
    write_simple_spec(data, "ks-two", "D two", "two");
    write_simple_spec(data, "ks-three", "D three", "three");
    write_simple_spec(data, "python3", "D python", "python");
    write_simple_spec(xdg, "jupyter/ks-xdg", "X", "x"); /* never read: JUPYTER_DATA_DIR is set */
    char jupyter_path[3 * PATH_MAX];
    snprintf(jupyter_path, sizeof jupyter_path, ":%s::%s/:", a, b); /* empty entries skipped */
    set_search_env(jupyter_path, data, xdg, home);

    warnings_t warnings = { 0 };
    kb_kernelspecs_t *specs = kb_kernelspecs_discover(collect_warning, &warnings);
    CHECK(specs != NULL);
    CHECK(warnings.count == 0);
    const kb_kernelspec_t *spec = kb_kernelspecs_find(specs, "ks-one");
    CHECK(spec && strcmp(spec->display_name, "A one") == 0);
    spec = kb_kernelspecs_find(specs, "ks-two");
    CHECK(spec && strcmp(spec->display_name, "B two") == 0);
    spec = kb_kernelspecs_find(specs, "ks-three");
    CHECK(spec && strcmp(spec->display_name, "D three") == 0);
    char *expected_dir = join(data, "kernels/ks-three");
    CHECK(spec && strcmp(spec->resource_dir, expected_dir) == 0);
    free(expected_dir);
    /* the data dir comes before the system's own python3 */
    spec = kb_kernelspecs_find(specs, "python3");
    CHECK(spec && strcmp(spec->display_name, "D python") == 0);
    CHECK(kb_kernelspecs_find(specs, "ks-xdg") == NULL);
    /* names in lower case as jupyter_client keeps them; lookups ignore case */
    spec = kb_kernelspecs_find(specs, "KS-UPPER");
    CHECK(spec && strcmp(spec->name, "ks-upper") == 0);
    CHECK(spec && strcmp(spec->display_name, "A upper") == 0);
    CHECK(spec && strstr(spec->resource_dir, "/a/kernels/KS-Upper") != NULL);
    CHECK(kb_kernelspecs_find(specs, "nope") == NULL);

    /* discovery order: a's, then b's new ones, then the data dir's, then the system's */
    CHECK(index_of(specs, "ks-one") == 0);
    CHECK(index_of(specs, "ks-upper") == 1);
    CHECK(index_of(specs, "ks-two") == 2);
    CHECK(index_of(specs, "ks-three") == 3);
    CHECK(index_of(specs, "python3") == 4);
    CHECK(index_of(specs, "xpython") > 4);
    /* each name once */
    int python3_count = 0;
    for (size_t i = 0; i < kb_kernelspecs_size(specs); i++)
        python3_count += strcmp(kb_kernelspecs_at(specs, i)->name, "python3") == 0;
    CHECK(python3_count == 1);
    char *names = kb_kernelspecs_names(specs);
    CHECK(names && strncmp(names, "ks-one, ks-upper, ks-two, ks-three, python3, ", 45) == 0);
    free(names);
    kb_kernelspecs_destroy(&specs);
    CHECK(specs == NULL);
    kb_kernelspecs_destroy(&specs);
    warnings_clear(&warnings);

    free(a);
    free(b);
    free(data);
    free(xdg);
    free(home);
    kb_test_rmtree(tmp);
    free(tmp);
}

static void test_sorted_within_dir(void)
{
    char *tmp = kb_test_tmpdir();
    char *a = join(tmp, "a"), *empty = join(tmp, "empty");
    const char *created[] = { "zeta", "alpha", "Mid", "beta-2", "beta" };
    for (size_t i = 0; i < 5; i++)
        write_simple_spec(a, created[i], created[i], "sortlang");
    set_search_env(a, empty, NULL, empty);
    kb_kernelspecs_t *specs = kb_kernelspecs_discover(NULL, NULL);
    CHECK(specs && kb_kernelspecs_size(specs) >= 5);
    const char *expected[] = { "alpha", "beta", "beta-2", "mid", "zeta" };
    for (size_t i = 0; specs && i < 5 && i < kb_kernelspecs_size(specs); i++)
        CHECK_STR(kb_kernelspecs_at(specs, i)->name, expected[i]);
    kb_kernelspecs_destroy(&specs);
    free(a);
    free(empty);
    kb_test_rmtree(tmp);
    free(tmp);
}

static void test_data_dir_fallbacks(void)
{
    char *tmp = kb_test_tmpdir();
    char *empty = join(tmp, "empty"), *xdg = join(tmp, "xdg"), *home = join(tmp, "home");
    char *data = join(tmp, "data");
    char *xdg_root = join(xdg, "jupyter"), *home_root = join(home, ".local/share/jupyter");
    write_simple_spec(data, "ks-data", "data", "d");
    write_simple_spec(xdg_root, "ks-xdg", "xdg", "x");
    write_simple_spec(home_root, "ks-home", "home", "h");

    set_search_env(empty, data, xdg, home);
    kb_kernelspecs_t *specs = kb_kernelspecs_discover(NULL, NULL);
    CHECK(kb_kernelspecs_find(specs, "ks-data") != NULL);
    CHECK(kb_kernelspecs_find(specs, "ks-xdg") == NULL);
    CHECK(kb_kernelspecs_find(specs, "ks-home") == NULL);
    kb_kernelspecs_destroy(&specs);

    /* JUPYTER_DATA_DIR unset (or empty): $XDG_DATA_HOME/jupyter */
    set_search_env(empty, "", xdg, home);
    specs = kb_kernelspecs_discover(NULL, NULL);
    CHECK(kb_kernelspecs_find(specs, "ks-data") == NULL);
    CHECK(kb_kernelspecs_find(specs, "ks-xdg") != NULL);
    CHECK(kb_kernelspecs_find(specs, "ks-home") == NULL);
    kb_kernelspecs_destroy(&specs);

    /* both unset: $HOME/.local/share/jupyter */
    set_search_env(empty, NULL, NULL, home);
    specs = kb_kernelspecs_discover(NULL, NULL);
    CHECK(kb_kernelspecs_find(specs, "ks-data") == NULL);
    CHECK(kb_kernelspecs_find(specs, "ks-xdg") == NULL);
    const kb_kernelspec_t *spec = kb_kernelspecs_find(specs, "ks-home");
    CHECK(spec && strstr(spec->resource_dir, "/home/.local/share/jupyter/kernels/ks-home"));
    kb_kernelspecs_destroy(&specs);

    free(empty);
    free(xdg);
    free(home);
    free(data);
    free(xdg_root);
    free(home_root);
    kb_test_rmtree(tmp);
    free(tmp);
}

static void test_broken_skipped_with_warning(void)
{
    char *tmp = kb_test_tmpdir();
    char *a = join(tmp, "a"), *b = join(tmp, "b"), *empty = join(tmp, "empty");
    write_simple_spec(a, "ks-good", "good", "g");
    write_spec(a, "ks-badjson", "{\"argv\": [\"k\"], ");
    write_spec(a, "ks-noargv", "{\"display_name\": \"x\", \"language\": \"x\"}");
    write_spec(a, "ks-argvint", "{\"argv\": [1], \"display_name\": \"x\", \"language\": \"x\"}");
    write_spec(a, "ks-envint",
               "{\"argv\": [\"k\"], \"display_name\": \"x\", \"language\": \"x\","
               " \"env\": {\"N\": 5}}");
    write_simple_spec(a, "ks-zgood", "zgood", "g");
    write_simple_spec(b, "ks-noargv", "B noargv", "x"); /* the broken one does not shadow it */
    /* not kernelspecs, silently ignored: a directory without kernel.json, a plain file,
       a kernel.json that is a directory */
    char *path = join(a, "kernels/ks-nojson");
    make_dirs(path);
    free(path);
    path = join(a, "kernels/ks-file");
    write_file(path, "{}");
    free(path);
    path = join(a, "kernels/ks-dirjson/kernel.json");
    make_dirs(path);
    free(path);

    char jupyter_path[2 * PATH_MAX + 2];
    snprintf(jupyter_path, sizeof jupyter_path, "%s:%s", a, b);
    set_search_env(jupyter_path, empty, NULL, empty);
    warnings_t warnings = { 0 };
    kb_kernelspecs_t *specs = kb_kernelspecs_discover(collect_warning, &warnings);
    CHECK(specs != NULL);
    CHECK(warnings.count == 4);
    char *file = join(a, "kernels/ks-badjson/kernel.json");
    CHECK(warnings_matching(&warnings, file, "invalid JSON") == 1);
    free(file);
    file = join(a, "kernels/ks-noargv/kernel.json");
    CHECK(warnings_matching(&warnings, file, "argv is missing") == 1);
    free(file);
    file = join(a, "kernels/ks-argvint/kernel.json");
    CHECK(warnings_matching(&warnings, file, "argv[0] is not a string") == 1);
    free(file);
    file = join(a, "kernels/ks-envint/kernel.json");
    CHECK(warnings_matching(&warnings, file, "env[\"N\"] is not a string") == 1);
    free(file);

    CHECK(kb_kernelspecs_find(specs, "ks-good") != NULL);
    CHECK(kb_kernelspecs_find(specs, "ks-zgood") != NULL);
    CHECK(kb_kernelspecs_find(specs, "ks-badjson") == NULL);
    CHECK(kb_kernelspecs_find(specs, "ks-argvint") == NULL);
    CHECK(kb_kernelspecs_find(specs, "ks-envint") == NULL);
    CHECK(kb_kernelspecs_find(specs, "ks-nojson") == NULL);
    CHECK(kb_kernelspecs_find(specs, "ks-file") == NULL);
    CHECK(kb_kernelspecs_find(specs, "ks-dirjson") == NULL);
    const kb_kernelspec_t *spec = kb_kernelspecs_find(specs, "ks-noargv");
    CHECK(spec && strcmp(spec->display_name, "B noargv") == 0);
    CHECK(kb_kernelspecs_find(specs, "python3") != NULL);
    kb_kernelspecs_destroy(&specs);
    warnings_clear(&warnings);

    /* discovery without a warn callback survives the same files */
    specs = kb_kernelspecs_discover(NULL, NULL);
    CHECK(specs && kb_kernelspecs_find(specs, "ks-good") != NULL);
    kb_kernelspecs_destroy(&specs);

    /* a directory named twice, or reached through a symlink, is read once: one warning */
    char *link = join(tmp, "a-link");
    CHECK(symlink(a, link) == 0);
    snprintf(jupyter_path, sizeof jupyter_path, "%s:%s/:%s", a, a, link);
    set_search_env(jupyter_path, a, NULL, empty);
    specs = kb_kernelspecs_discover(collect_warning, &warnings);
    CHECK(warnings_matching(&warnings, "ks-badjson", NULL) == 1);
    CHECK(warnings.count == 4);
    kb_kernelspecs_destroy(&specs);
    warnings_clear(&warnings);

    /* an invalid directory name is used, with a warning */
    write_simple_spec(b, "ks bad name", "spaced", "s");
    snprintf(jupyter_path, sizeof jupyter_path, "%s", b);
    set_search_env(jupyter_path, empty, NULL, empty);
    specs = kb_kernelspecs_discover(collect_warning, &warnings);
    CHECK(kb_kernelspecs_find(specs, "ks bad name") != NULL);
    CHECK(warnings_matching(&warnings, "ks bad name", "not valid") == 1);
    kb_kernelspecs_destroy(&specs);
    warnings_clear(&warnings);

    free(link);
    free(a);
    free(b);
    free(empty);
    kb_test_rmtree(tmp);
    free(tmp);
}

static kb_kernelspec_t *load_text(const char *tmp, const char *name, const char *text)
{
    write_spec(tmp, name, text);
    char *dir = join(tmp, "kernels");
    char *spec_dir = join(dir, name);
    char err[512] = "";
    kb_kernelspec_t *spec = kb_kernelspec_load(spec_dir, name, err, sizeof err);
    if (!spec)
        fprintf(stderr, "   load %s: %s\n", name, err);
    free(dir);
    free(spec_dir);
    return spec;
}

/*  argv[0] of the kernel.json {"argv": [arg0, "x"]} after build_argv. */
static char *argv0_after(const char *tmp, const char *arg0, const char *system_python)
{
    char text[512];
    snprintf(text, sizeof text,
             "{\"argv\": [\"%s\", \"x\"], \"display_name\": \"p\", \"language\": \"python\"}",
             arg0);
    kb_kernelspec_t *spec = load_text(tmp, "argv0", text);
    char **argv = spec ? kb_kernelspec_build_argv(spec, "/c.json", system_python) : NULL;
    char *result = argv ? strdup(argv[0]) : NULL;
    CHECK(argv && argv[1] && strcmp(argv[1], "x") == 0 && argv[2] == NULL);
    kb_strv_free(argv);
    kb_kernelspec_destroy(&spec);
    return result;
}

static void test_build_argv(void)
{
    char *tmp = kb_test_tmpdir();
    kb_kernelspec_t *spec = load_text(
        tmp, "subst",
        "{\"argv\": [\"/usr/bin/k\", \"-f\", \"{connection_file}\", \"--res={resource_dir}/x\","
        " \"{prefix}/share\", \"{unknown}\", \"{{connection_file}}\", \"{connection_file\","
        " \"{}\", \"{resource_dir}{resource_dir}\"],"
        " \"display_name\": \"s\", \"language\": \"s\"}");
    CHECK(spec != NULL);
    if (spec) {
        char **argv = kb_kernelspec_build_argv(spec, "/run/kb/kernel-1.json", NULL);
        CHECK(argv != NULL);
        char expected[2 * PATH_MAX];
        if (argv) {
            CHECK_STR(argv[0], "/usr/bin/k");
            CHECK_STR(argv[1], "-f");
            CHECK_STR(argv[2], "/run/kb/kernel-1.json");
            snprintf(expected, sizeof expected, "--res=%s/x", spec->resource_dir);
            CHECK_STR(argv[3], expected);
            CHECK_STR(argv[4], "/usr/share");
            CHECK_STR(argv[5], "{unknown}");
            CHECK_STR(argv[6], "{/run/kb/kernel-1.json}");
            CHECK_STR(argv[7], "{connection_file");
            CHECK_STR(argv[8], "{}");
            snprintf(expected, sizeof expected, "%s%s", spec->resource_dir, spec->resource_dir);
            CHECK_STR(argv[9], expected);
            CHECK(argv[10] == NULL);
        }
        kb_strv_free(argv);
        /* the kernelspec itself is untouched */
        CHECK_STR(spec->argv[2], "{connection_file}");
        /* no connection file yet: left as written */
        argv = kb_kernelspec_build_argv(spec, NULL, NULL);
        CHECK(argv && strcmp(argv[2], "{connection_file}") == 0);
        kb_strv_free(argv);
    }
    kb_kernelspec_destroy(&spec);

    /* python, python3 and python3.<system minor> are the system Python */
    char *s = argv0_after(tmp, "python", NULL);
    CHECK_STR(s, "/usr/bin/python3");
    free(s);
    s = argv0_after(tmp, "python3", "/opt/py/bin/python3");
    CHECK_STR(s, "/opt/py/bin/python3");
    free(s);
    char *real_python = realpath("/usr/bin/python3", NULL); /* e.g. /usr/bin/python3.11 */
    const char *base = real_python ? strrchr(real_python, '/') + 1 : "python3";
    CHECK(strncmp(base, "python3.", 8) == 0);
    s = argv0_after(tmp, base, NULL);
    CHECK_STR(s, "/usr/bin/python3");
    free(s);
    free(real_python);
    /* another minor is another Python: left for PATH to resolve, as jupyter_client does */
    s = argv0_after(tmp, "python3.1", NULL);
    CHECK_STR(s, "python3.1");
    free(s);
    s = argv0_after(tmp, "python2", NULL);
    CHECK_STR(s, "python2");
    free(s);
    s = argv0_after(tmp, "/opt/x/python", NULL);
    CHECK_STR(s, "/opt/x/python");
    free(s);
    s = argv0_after(tmp, "python3x", NULL);
    CHECK_STR(s, "python3x");
    free(s);
    s = argv0_after(tmp, "ipython", NULL);
    CHECK_STR(s, "ipython");
    free(s);
    kb_test_rmtree(tmp);
    free(tmp);
}

static void test_build_env(void)
{
    char *tmp = kb_test_tmpdir();
    kb_kernelspec_t *spec = load_text(
        tmp, "envspec",
        "{\"argv\": [\"k\"], \"display_name\": \"e\", \"language\": \"e\", \"env\": {"
        "\"BRACED\": \"${HOME}/x\", \"PLAIN\": \"$HOME/y:$PATH\", \"DOLLARS\": \"cost $$5, "
        "$$HOME\","
        "\"UNKNOWN\": \"$NOPE ${NOPE} $ ${1} ${HOME $HOMEx $9\", \"SECRET\": \"$KB_TOKEN\","
        "\"LANG\": \"en_US.UTF-8\", \"HOME\": \"/new/home\", \"OLDHOME\": \"$HOME\","
        "\"OVERRIDDEN\": \"spec\"}}");
    CHECK(spec != NULL);
    char *base[]
        = { "PATH=/usr/bin", "HOME=/home/u", "KB_TOKEN=secret", "KB_SANDBOX_ID=x", "LANG=C",
            "PATH=/dup",     "NOEQUALS",     "KBX=kept",        "TERM=xterm",      NULL };
    const char *drop[] = { "KB_", NULL };
    json_t *extra
        = json_pack("{s:s, s:s, s:s}", "OVERRIDDEN", "extra", "NEW", "new", "TERM", "dumb");
    char **env = spec ? kb_kernelspec_build_env(spec, base, drop, extra) : NULL;
    CHECK(env != NULL);
    if (env) {
        CHECK(strv_count_prefix(env, "KB_") == 0);
        CHECK_STR(strv_get(env, "KBX"), "kept");
        CHECK(strv_count_prefix(env, "PATH=") == 1);
        CHECK_STR(strv_get(env, "PATH"), "/usr/bin");
        CHECK(strv_count_prefix(env, "NOEQUALS") == 0);
        CHECK_STR(strv_get(env, "BRACED"), "/home/u/x");
        CHECK_STR(strv_get(env, "PLAIN"), "/home/u/y:/usr/bin");
        CHECK_STR(strv_get(env, "DOLLARS"), "cost $5, $HOME");
        CHECK_STR(strv_get(env, "UNKNOWN"), "$NOPE ${NOPE} $ ${1} ${HOME $HOMEx $9");
        /* a dropped variable is never expanded into the kernel's environment */
        CHECK_STR(strv_get(env, "SECRET"), "$KB_TOKEN");
        CHECK_STR(strv_get(env, "LANG"), "en_US.UTF-8");
        CHECK(strv_count_prefix(env, "LANG=") == 1);
        /* values expand from the base environment, not from each other */
        CHECK_STR(strv_get(env, "HOME"), "/new/home");
        CHECK_STR(strv_get(env, "OLDHOME"), "/home/u");
        /* extra_env wins over both */
        CHECK_STR(strv_get(env, "OVERRIDDEN"), "extra");
        CHECK_STR(strv_get(env, "TERM"), "dumb");
        CHECK(strv_count_prefix(env, "TERM=") == 1);
        CHECK_STR(strv_get(env, "NEW"), "new");
    }
    kb_strv_free(env);

    /* no prefixes to drop: KB_ variables stay; no base env at all */
    env = spec ? kb_kernelspec_build_env(spec, base, NULL, NULL) : NULL;
    CHECK_STR(strv_get(env, "KB_TOKEN"), "secret");
    CHECK_STR(strv_get(env, "SECRET"), "secret");
    CHECK_STR(strv_get(env, "OVERRIDDEN"), "spec");
    kb_strv_free(env);
    env = spec ? kb_kernelspec_build_env(spec, NULL, drop, NULL) : NULL;
    CHECK_STR(strv_get(env, "BRACED"), "${HOME}/x");
    kb_strv_free(env);

    /* a kernelspec without env and nothing else: only the launch defaults */
    kb_kernelspec_t *bare = load_text(
        tmp, "bare", "{\"argv\": [\"k\"], \"display_name\": \"e\", \"language\": \"e\"}");
    env = bare ? kb_kernelspec_build_env(bare, NULL, NULL, NULL) : NULL;
    CHECK(env != NULL && env[0] && strcmp(env[0], "TERM=" KB_KERNEL_TERM) == 0 && !env[1]);
    kb_strv_free(env);

    /* kernels have no terminal: the daemon's TERM is not theirs */
    env = bare ? kb_kernelspec_build_env(bare, base, drop, NULL) : NULL;
    CHECK_STR(strv_get(env, "TERM"), "dumb");
    CHECK(strv_count_prefix(env, "TERM=") == 1);
    CHECK(strv_count_prefix(env, "NO_COLOR=") == 0);
    CHECK_STR(strv_get(env, "PATH"), "/usr/bin");
    kb_strv_free(env);
    /* ... unless the kernelspec sets it (expanding the daemon's), or the caller does */
    kb_kernelspec_t *termspec
        = load_text(tmp, "termspec",
                    "{\"argv\": [\"k\"], \"display_name\": \"t\", \"language\": \"t\","
                    " \"env\": {\"TERM\": \"$TERM-256color\"}}");
    env = termspec ? kb_kernelspec_build_env(termspec, base, drop, NULL) : NULL;
    CHECK_STR(strv_get(env, "TERM"), "xterm-256color");
    CHECK(strv_count_prefix(env, "TERM=") == 1);
    kb_strv_free(env);
    json_t *vt = json_pack("{s:s}", "TERM", "vt100");
    env = bare ? kb_kernelspec_build_env(bare, base, drop, vt) : NULL;
    CHECK_STR(strv_get(env, "TERM"), "vt100");
    CHECK(strv_count_prefix(env, "TERM=") == 1);
    kb_strv_free(env);
    json_decref(vt);
    kb_kernelspec_destroy(&termspec);

    /* Deno's kernel gets NO_COLOR=1, which its kernelspec or the caller may change */
    kb_kernelspec_t *deno = load_text(
        tmp, "denoenv",
        "{\"argv\": [\"/opt/deno/deno\", \"jupyter\", \"--kernel\", \"--conn\","
        " \"{connection_file}\"], \"display_name\": \"D\", \"language\": \"typescript\"}");
    char *colored[] = { "PATH=/usr/bin", "NO_COLOR=", NULL };
    env = deno ? kb_kernelspec_build_env(deno, colored, drop, NULL) : NULL;
    CHECK_STR(strv_get(env, "NO_COLOR"), "1");
    CHECK(strv_count_prefix(env, "NO_COLOR=") == 1);
    CHECK_STR(strv_get(env, "TERM"), "dumb");
    kb_strv_free(env);
    json_t *color = json_pack("{s:s}", "NO_COLOR", "");
    env = deno ? kb_kernelspec_build_env(deno, colored, drop, color) : NULL;
    CHECK_STR(strv_get(env, "NO_COLOR"), "");
    CHECK(strv_count_prefix(env, "NO_COLOR=") == 1);
    kb_strv_free(env);
    json_decref(color);
    kb_kernelspec_destroy(&deno);

    /* invalid extra_env is refused */
    json_t *bad = json_pack("{s:i}", "N", 1);
    CHECK(bare && kb_kernelspec_build_env(bare, base, drop, bad) == NULL);
    json_decref(bad);
    bad = json_pack("{s:s}", "A=B", "1");
    CHECK(bare && kb_kernelspec_build_env(bare, base, drop, bad) == NULL);
    json_decref(bad);
    bad = json_pack("{s:s}", "", "1");
    CHECK(bare && kb_kernelspec_build_env(bare, base, drop, bad) == NULL);
    json_decref(bad);
    bad = json_object();
    json_object_set_new(bad, "NUL", json_stringn("a\0b", 3));
    CHECK(bare && kb_kernelspec_build_env(bare, base, drop, bad) == NULL);
    json_decref(bad);

    kb_kernelspec_destroy(&bare);
    json_decref(extra);
    kb_kernelspec_destroy(&spec);
    kb_test_rmtree(tmp);
    free(tmp);
}

static void test_quirks(void)
{
    char *tmp = kb_test_tmpdir();
    /* Deno's kernel, by what its argv launches */
    kb_kernelspec_t *spec = load_text(
        tmp, "deno",
        "{\"argv\": [\"/x/node_modules/deno/deno\", \"jupyter\", \"--kernel\", \"--conn\","
        " \"{connection_file}\"], \"display_name\": \"Deno\", \"language\": \"typescript\"}");
    kb_kernelspec_quirks_t quirks
        = spec ? kb_kernelspec_quirks(spec) : (kb_kernelspec_quirks_t){ 0 };
    CHECK_STR(quirks.transport, "tcp");
    CHECK(quirks.late_output == KB_DENO_LATE_OUTPUT);
    CHECK(quirks.no_color);
    kb_kernelspec_destroy(&spec);
    spec = load_text(
        tmp, "deno-bare",
        "{\"argv\": [\"deno\", \"jupyter\", \"--kernel\", \"--conn\", \"{connection_file}\"],"
        " \"display_name\": \"Deno\", \"language\": \"typescript\"}");
    CHECK(spec && kb_kernelspec_quirks(spec).transport != NULL);
    kb_kernelspec_destroy(&spec);

    /* deno running something else, or a kernel that only looks like it: none */
    const char *plain[] = {
        "{\"argv\": [\"/usr/bin/deno\", \"run\", \"k.ts\", \"{connection_file}\"],"
        " \"display_name\": \"k\", \"language\": \"typescript\"}",
        "{\"argv\": [\"/usr/bin/denojupyter\", \"jupyter\"], \"display_name\": \"k\","
        " \"language\": \"typescript\"}",
        "{\"argv\": [\"/usr/bin/python3\", \"-m\", \"ipykernel_launcher\", \"-f\","
        " \"{connection_file}\"], \"display_name\": \"k\", \"language\": \"python\"}",
    };
    for (size_t i = 0; i < sizeof plain / sizeof *plain; i++) {
        spec = load_text(tmp, "plain", plain[i]);
        quirks = spec ? kb_kernelspec_quirks(spec) : (kb_kernelspec_quirks_t){ "x", 1, true };
        CHECK(quirks.transport == NULL && quirks.late_output == 0 && !quirks.no_color);
        kb_kernelspec_destroy(&spec);
    }

    /* kernel.json's metadata.kernelbridge says it, and wins */
    spec = load_text(
        tmp, "given",
        "{\"argv\": [\"k\"], \"display_name\": \"g\", \"language\": \"g\","
        " \"metadata\": {\"kernelbridge\": {\"transport\": \"tcp\", \"late_output\": 0.25,"
        " \"no_color\": true}}}");
    quirks = spec ? kb_kernelspec_quirks(spec) : (kb_kernelspec_quirks_t){ 0 };
    CHECK_STR(quirks.transport, "tcp");
    CHECK(quirks.late_output == 0.25);
    CHECK(quirks.no_color);
    kb_kernelspec_destroy(&spec);
    spec = load_text(tmp, "deno-ipc",
                     "{\"argv\": [\"deno\", \"jupyter\", \"--kernel\"], \"display_name\": \"D\","
                     " \"language\": \"typescript\", \"metadata\": {\"kernelbridge\": {"
                     "\"transport\": \"ipc\", \"late_output\": 0, \"no_color\": false}}}");
    quirks = spec ? kb_kernelspec_quirks(spec) : (kb_kernelspec_quirks_t){ 0 };
    CHECK_STR(quirks.transport, "ipc");
    CHECK(quirks.late_output == 0);
    CHECK(!quirks.no_color);
    kb_kernelspec_destroy(&spec);
    /* wrong types and out-of-range values are ignored */
    const char *ignored[] = {
        "{\"kernelbridge\": {\"transport\": \"udp\", \"late_output\": -1, \"no_color\": 1}}",
        "{\"kernelbridge\": {\"transport\": 1, \"late_output\": 11, \"no_color\": \"yes\"}}",
        "{\"kernelbridge\": {\"late_output\": \"0.5\"}}",
        "{\"kernelbridge\": [\"tcp\"]}",
        "{\"kernelbridge\": null}",
        "{}",
    };
    for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "{\"argv\": [\"k\"], \"display_name\": \"i\", \"language\": \"i\","
                 " \"metadata\": %s}",
                 ignored[i]);
        spec = load_text(tmp, "ignored", text);
        CHECK(spec != NULL);
        quirks = spec ? kb_kernelspec_quirks(spec) : (kb_kernelspec_quirks_t){ "x", 1, true };
        CHECK(quirks.transport == NULL && quirks.late_output == 0 && !quirks.no_color);
        kb_kernelspec_destroy(&spec);
    }
    /* no_color from metadata reaches the environment */
    spec = load_text(tmp, "nocolor",
                     "{\"argv\": [\"k\"], \"display_name\": \"n\", \"language\": \"n\","
                     " \"metadata\": {\"kernelbridge\": {\"no_color\": true}}}");
    char **env = spec ? kb_kernelspec_build_env(spec, NULL, NULL, NULL) : NULL;
    CHECK_STR(strv_get(env, "NO_COLOR"), "1");
    kb_strv_free(env);
    kb_kernelspec_destroy(&spec);
    kb_test_rmtree(tmp);
    free(tmp);
}

static void test_language_alias(void)
{
    char *tmp = kb_test_tmpdir();
    char *a = join(tmp, "a"), *b = join(tmp, "b"), *empty = join(tmp, "empty");
    write_simple_spec(a, "ks-deno", "Deno", "typescript");
    write_simple_spec(b, "ks-ts2", "TS", "TypeScript");
    char jupyter_path[2 * PATH_MAX + 2];
    snprintf(jupyter_path, sizeof jupyter_path, "%s:%s", a, b);
    set_search_env(jupyter_path, empty, NULL, empty);
    kb_kernelspecs_t *specs = kb_kernelspecs_discover(NULL, NULL);
    CHECK(specs != NULL);

    /* javascript with no kernelspec of its own: the typescript one */
    const kb_kernelspec_t *spec = kb_kernelspecs_for_language(specs, "javascript", NULL);
    CHECK(spec && strcmp(spec->name, "ks-deno") == 0);
    spec = kb_kernelspecs_for_language(specs, "JavaScript", NULL);
    CHECK(spec && strcmp(spec->name, "ks-deno") == 0);
    spec = kb_kernelspecs_for_language(specs, "typescript", NULL);
    CHECK(spec && strcmp(spec->name, "ks-deno") == 0);
    /* a map for typescript serves javascript too; a map for javascript wins */
    const char *map_ts[] = { "typescript=ks-ts2", NULL };
    spec = kb_kernelspecs_for_language(specs, "javascript", map_ts);
    CHECK(spec && strcmp(spec->name, "ks-ts2") == 0);
    const char *map_js[] = { "typescript=ks-ts2", "javascript=ks-deno", NULL };
    spec = kb_kernelspecs_for_language(specs, "javascript", map_js);
    CHECK(spec && strcmp(spec->name, "ks-deno") == 0);
    spec = kb_kernelspecs_for_language(specs, "typescript", map_js);
    CHECK(spec && strcmp(spec->name, "ks-ts2") == 0);
    /* the alias goes one way only */
    CHECK(kb_kernelspecs_for_language(specs, "ecmascript", NULL) == NULL);
    kb_kernelspecs_destroy(&specs);

    /* a kernelspec of the javascript language itself wins over the alias */
    write_simple_spec(b, "ks-node", "Node", "javascript");
    specs = kb_kernelspecs_discover(NULL, NULL);
    spec = specs ? kb_kernelspecs_for_language(specs, "javascript", NULL) : NULL;
    CHECK(spec && strcmp(spec->name, "ks-node") == 0);
    spec = specs ? kb_kernelspecs_for_language(specs, "typescript", NULL) : NULL;
    CHECK(spec && strcmp(spec->name, "ks-deno") == 0);
    kb_kernelspecs_destroy(&specs);

    /* and with no typescript kernel either, javascript has none */
    set_search_env(empty, empty, NULL, empty);
    specs = kb_kernelspecs_discover(NULL, NULL);
    const kb_kernelspec_t *found
        = specs ? kb_kernelspecs_for_language(specs, "javascript", NULL) : NULL;
    CHECK(specs
          && (!found || strcasecmp(found->language, "javascript") == 0
              || strcasecmp(found->language, "typescript") == 0));
    kb_kernelspecs_destroy(&specs);
    free(a);
    free(b);
    free(empty);
    kb_test_rmtree(tmp);
    free(tmp);
}

static void test_language(void)
{
    char *tmp = kb_test_tmpdir();
    char *a = join(tmp, "a"), *b = join(tmp, "b"), *empty = join(tmp, "empty");
    /* name beats language, even when the language match comes first */
    write_simple_spec(a, "ks-lang-a", "A", "Zlang");
    write_simple_spec(b, "zlang", "named", "other");
    write_simple_spec(b, "ks-lang-b", "B", "zlang");
    /* first in search-path order, even if its name sorts later */
    write_simple_spec(a, "ks-q2", "q2", "qlang");
    write_simple_spec(b, "ks-q1", "q1", "QLANG");
    /* within one directory, the first name in sorted order */
    write_simple_spec(a, "ks-r-b", "rb", "rlang");
    write_simple_spec(a, "ks-r-a", "ra", "rlang");
    char jupyter_path[2 * PATH_MAX + 2];
    snprintf(jupyter_path, sizeof jupyter_path, "%s:%s", a, b);
    set_search_env(jupyter_path, empty, NULL, empty);
    kb_kernelspecs_t *specs = kb_kernelspecs_discover(NULL, NULL);
    CHECK(specs != NULL);

    const kb_kernelspec_t *spec = kb_kernelspecs_for_language(specs, "zlang", NULL);
    CHECK(spec && strcmp(spec->name, "zlang") == 0);
    spec = kb_kernelspecs_for_language(specs, "ZLang", NULL);
    CHECK(spec && strcmp(spec->name, "zlang") == 0);
    spec = kb_kernelspecs_for_language(specs, "qlang", NULL);
    CHECK(spec && strcmp(spec->name, "ks-q2") == 0);
    spec = kb_kernelspecs_for_language(specs, "Qlang", NULL);
    CHECK(spec && strcmp(spec->name, "ks-q2") == 0);
    spec = kb_kernelspecs_for_language(specs, "rlang", NULL);
    CHECK(spec && strcmp(spec->name, "ks-r-a") == 0);
    CHECK(kb_kernelspecs_for_language(specs, "cobol", NULL) == NULL);
    CHECK(kb_kernelspecs_for_language(specs, "", NULL) == NULL);
    /* the system's python kernels: python3 is first by name in /usr/share/jupyter */
    spec = kb_kernelspecs_for_language(specs, "python", NULL);
    CHECK(spec && strcmp(spec->name, "python3") == 0);

    /* a configured map wins over both rules; the last entry for a language wins */
    const char *map[] = { "other=ks-q1", "ZLang=ks-lang-a", "python=xpython", NULL };
    spec = kb_kernelspecs_for_language(specs, "zlang", map);
    CHECK(spec && strcmp(spec->name, "ks-lang-a") == 0);
    spec = kb_kernelspecs_for_language(specs, "PYTHON", map);
    CHECK(spec && strcmp(spec->name, "xpython") == 0);
    spec = kb_kernelspecs_for_language(specs, "qlang", map); /* not in the map */
    CHECK(spec && strcmp(spec->name, "ks-q2") == 0);
    const char *map_twice[] = { "zlang=ks-lang-a", "zlang=KS-LANG-B", NULL };
    spec = kb_kernelspecs_for_language(specs, "zlang", map_twice);
    CHECK(spec && strcmp(spec->name, "ks-lang-b") == 0);
    /* a map entry naming a missing kernelspec gives NULL, not a fallback */
    const char *map_missing[] = { "zlang=not-installed", NULL };
    CHECK(kb_kernelspecs_for_language(specs, "zlang", map_missing) == NULL);
    /* a map can also give a language no kernelspec declares */
    const char *map_new[] = { "cobol=ks-r-b", NULL };
    spec = kb_kernelspecs_for_language(specs, "cobol", map_new);
    CHECK(spec && strcmp(spec->name, "ks-r-b") == 0);

    kb_kernelspecs_destroy(&specs);
    free(a);
    free(b);
    free(empty);
    kb_test_rmtree(tmp);
    free(tmp);
}

static void test_system_kernelspecs(void)
{
    char *tmp = kb_test_tmpdir();
    set_search_env(tmp, tmp, tmp, tmp);
    warnings_t warnings = { 0 };
    kb_kernelspecs_t *specs = kb_kernelspecs_discover(collect_warning, &warnings);
    CHECK(specs != NULL);
    CHECK(warnings.count == 0);
    const kb_kernelspec_t *python3 = kb_kernelspecs_find(specs, "python3");
    CHECK(python3 != NULL);
    if (python3) {
        CHECK_STR(python3->resource_dir, "/usr/share/jupyter/kernels/python3");
        CHECK_STR(python3->language, "python");
        CHECK_STR(python3->interrupt_mode, "signal");
        CHECK(python3->argc >= 3);
        char **argv = kb_kernelspec_build_argv(python3, "/tmp/conn.json", NULL);
        CHECK(argv && access(argv[0], X_OK) == 0);
        int has_connection_file = 0;
        for (size_t i = 0; argv && argv[i]; i++)
            has_connection_file += strcmp(argv[i], "/tmp/conn.json") == 0;
        CHECK(has_connection_file == 1);
        kb_strv_free(argv);
    }
    const kb_kernelspec_t *xpython = kb_kernelspecs_find(specs, "xpython");
    CHECK(xpython && strcmp(xpython->language, "python") == 0);
    CHECK(xpython && strcmp(xpython->resource_dir, "/usr/share/jupyter/kernels/xpython") == 0);
    CHECK(index_of(specs, "python3") >= 0
          && index_of(specs, "python3") < index_of(specs, "xpython"));
    char *names = kb_kernelspecs_names(specs);
    CHECK(names && strstr(names, "python3, xpython") != NULL);
    free(names);
    kb_kernelspecs_destroy(&specs);
    warnings_clear(&warnings);
    kb_test_rmtree(tmp);
    free(tmp);
}

static void test_to_json(void)
{
    char *tmp = kb_test_tmpdir();
    char *a = join(tmp, "a"), *empty = join(tmp, "empty");
    write_spec(a, "ks-json",
               "{\"argv\": [\"k\"], \"display_name\": \"JSON \\\"one\\\"\", \"language\": \"Jl\","
               " \"interrupt_mode\": \"message\", \"env\": {\"X\": \"1\"}}");
    set_search_env(a, empty, NULL, empty);
    kb_kernelspecs_t *specs = kb_kernelspecs_discover(NULL, NULL);
    json_t *json = specs ? kb_kernelspecs_to_json(specs) : NULL;
    CHECK(json != NULL);
    json_t *list = json_object_get(json, "kernelspecs");
    CHECK(json_is_array(list) && json_array_size(list) == kb_kernelspecs_size(specs));
    CHECK(json_object_size(json) == 1);
    json_t *first = json_array_get(list, 0);
    CHECK(json_object_size(first) == 5);
    CHECK_STR(json_string_value(json_object_get(first, "name")), "ks-json");
    CHECK_STR(json_string_value(json_object_get(first, "display_name")), "JSON \"one\"");
    CHECK_STR(json_string_value(json_object_get(first, "language")), "Jl");
    CHECK_STR(json_string_value(json_object_get(first, "interrupt_mode")), "message");
    char *dir = join(a, "kernels/ks-json");
    CHECK_STR(json_string_value(json_object_get(first, "resource_dir")), dir);
    free(dir);
    for (size_t i = 0; i < json_array_size(list); i++)
        CHECK_STR(json_string_value(json_object_get(json_array_get(list, i), "name")),
                  kb_kernelspecs_at(specs, i)->name);
    json_decref(json);
    kb_kernelspecs_destroy(&specs);
    free(a);
    free(empty);
    kb_test_rmtree(tmp);
    free(tmp);
}

static void test_kernel_map_validate(void)
{
    char err[256] = "";
    const char *good[] = { "python=xpython", "R=ir", NULL };
    CHECK(kb_kernel_map_validate(good, err, sizeof err) == 0);
    CHECK(kb_kernel_map_validate(NULL, err, sizeof err) == 0);
    const char *no_eq[] = { "python=xpython", "python", NULL };
    CHECK(kb_kernel_map_validate(no_eq, err, sizeof err) == -1);
    CHECK(strstr(err, "\"python\"") != NULL);
    const char *no_lang[] = { "=xpython", NULL };
    CHECK(kb_kernel_map_validate(no_lang, err, sizeof err) == -1);
    CHECK(strstr(err, "=xpython") != NULL);
    const char *no_spec[] = { "python=", NULL };
    CHECK(kb_kernel_map_validate(no_spec, err, sizeof err) == -1);
    CHECK(strstr(err, "python=") != NULL);
    CHECK(kb_kernel_map_validate(no_spec, NULL, 0) == -1);
}

int main(void)
{
    RUN_TEST(test_load_valid);
    RUN_TEST(test_load_broken);
    RUN_TEST(test_search_order);
    RUN_TEST(test_sorted_within_dir);
    RUN_TEST(test_data_dir_fallbacks);
    RUN_TEST(test_broken_skipped_with_warning);
    RUN_TEST(test_build_argv);
    RUN_TEST(test_build_env);
    RUN_TEST(test_quirks);
    RUN_TEST(test_language);
    RUN_TEST(test_language_alias);
    RUN_TEST(test_system_kernelspecs);
    RUN_TEST(test_to_json);
    RUN_TEST(test_kernel_map_validate);
    return kb_test_summary();
}
