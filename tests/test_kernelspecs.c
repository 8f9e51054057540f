/*  test_kernelspecs.c - kernelspec discovery and language lookup, against
    real files in private temp directories and the kernelspecs installed on
    this machine. One kernelspec and its launch: test_kernelspec.c. */
#include "kb_testutil.h"
#include "kernel/kb_kernelspec.h"
#include "kernelspec_testlib.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

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

/*  Index of the kernelspec called name in discovery order, or -1. */
static long index_of(const kb_kernelspecs_t *specs, const char *name)
{
    for (size_t i = 0; i < kb_kernelspecs_size(specs); i++)
        if (strcmp(kb_kernelspecs_at(specs, i)->name, name) == 0)
            return (long)i;
    return -1;
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

    /* sh and shell: a bash kernelspec (this one, or one the system has,
       named bash, which wins by its name) */
    write_simple_spec(a, "ks-bash", "Bash", "bash");
    specs = kb_kernelspecs_discover(NULL, NULL);
    CHECK(specs != NULL);
    const char *shells[] = { "sh", "shell", "SH" };
    for (size_t i = 0; specs && i < sizeof shells / sizeof *shells; i++) {
        spec = kb_kernelspecs_for_language(specs, shells[i], NULL);
        CHECK(spec && strcmp(spec->language, "bash") == 0);
    }
    const char *map_sh[] = { "sh=ks-bash", NULL };
    spec = specs ? kb_kernelspecs_for_language(specs, "sh", map_sh) : NULL;
    CHECK(spec && strcmp(spec->name, "ks-bash") == 0);
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
               " \"interrupt_mode\": \"message\", \"env\": {\"X\": \"1\"},"
               " \"metadata\": {\"debugger\": true}}");
    write_spec(a, "ks-json-plain",
               "{\"argv\": [\"p\", \"{connection_file}\"], \"display_name\": \"P\","
               " \"language\": \"p\"}");
    set_search_env(a, empty, NULL, empty);
    kb_kernelspecs_t *specs = kb_kernelspecs_discover(NULL, NULL);
    json_t *json = specs ? kb_kernelspecs_to_json(specs) : NULL;
    CHECK(json != NULL);
    json_t *list = json_object_get(json, "kernelspecs");
    CHECK(json_is_array(list) && json_array_size(list) == kb_kernelspecs_size(specs));
    CHECK(json_object_size(json) == 1);
    CHECK(json_array_size(list) >= 2);
    json_t *first = json_array_get(list, 0);
    /* Jupyter's kernelspec fields beside ours: argv, env and metadata as
       kernel.json has them (null when absent), for /api/kernelspecs; and
       whether it can be forked (SPEC section 13: not an ipykernel) */
    CHECK(json_object_size(first) == 9);
    CHECK(json_is_false(json_object_get(first, "fork")));
    CHECK_STR(json_string_value(json_object_get(first, "name")), "ks-json");
    CHECK_STR(json_string_value(json_object_get(first, "display_name")), "JSON \"one\"");
    CHECK_STR(json_string_value(json_object_get(first, "language")), "Jl");
    CHECK_STR(json_string_value(json_object_get(first, "interrupt_mode")), "message");
    char *dir = join(a, "kernels/ks-json");
    CHECK_STR(json_string_value(json_object_get(first, "resource_dir")), dir);
    free(dir);
    json_t *argv = json_object_get(first, "argv");
    CHECK(json_is_array(argv) && json_array_size(argv) == 1);
    CHECK_STR(json_string_value(json_array_get(argv, 0)), "k");
    json_t *env = json_object_get(first, "env");
    CHECK(json_is_object(env) && json_object_size(env) == 1);
    CHECK_STR(json_string_value(json_object_get(env, "X")), "1");
    json_t *metadata = json_object_get(first, "metadata");
    CHECK(json_is_object(metadata) && json_object_size(metadata) == 1);
    CHECK(json_is_true(json_object_get(metadata, "debugger")));

    json_t *plain = json_array_get(list, 1);
    CHECK(json_object_size(plain) == 9);
    CHECK_STR(json_string_value(json_object_get(plain, "name")), "ks-json-plain");
    CHECK_STR(json_string_value(json_object_get(plain, "interrupt_mode")), "signal");
    argv = json_object_get(plain, "argv");
    CHECK(json_is_array(argv) && json_array_size(argv) == 2);
    CHECK_STR(json_string_value(json_array_get(argv, 1)), "{connection_file}"); /* unexpanded */
    CHECK(json_is_null(json_object_get(plain, "env")));
    CHECK(json_is_null(json_object_get(plain, "metadata")));
    dir = join(a, "kernels/ks-json-plain");
    CHECK_STR(json_string_value(json_object_get(plain, "resource_dir")), dir);
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
    kb_error_t err = { 0 };
    const char *good[] = { "python=xpython", "R=ir", NULL };
    CHECK(kb_kernel_map_validate(good, &err) == 0);
    CHECK(kb_kernel_map_validate(NULL, &err) == 0);
    const char *no_eq[] = { "python=xpython", "python", NULL };
    CHECK(kb_kernel_map_validate(no_eq, &err) == -1);
    CHECK(strstr(err.message, "\"python\"") != NULL);
    const char *no_lang[] = { "=xpython", NULL };
    CHECK(kb_kernel_map_validate(no_lang, &err) == -1);
    CHECK(strstr(err.message, "=xpython") != NULL);
    const char *no_spec[] = { "python=", NULL };
    CHECK(kb_kernel_map_validate(no_spec, &err) == -1);
    CHECK(strstr(err.message, "python=") != NULL);
    CHECK(kb_kernel_map_validate(no_spec, NULL) == -1);
}

int main(void)
{
    RUN_TEST(test_search_order);
    RUN_TEST(test_sorted_within_dir);
    RUN_TEST(test_data_dir_fallbacks);
    RUN_TEST(test_broken_skipped_with_warning);
    RUN_TEST(test_language);
    RUN_TEST(test_language_alias);
    RUN_TEST(test_system_kernelspecs);
    RUN_TEST(test_to_json);
    RUN_TEST(test_kernel_map_validate);
    return kb_test_summary();
}
