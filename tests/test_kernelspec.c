/*  test_kernelspec.c - one kernelspec and its launch: kernel.json parsing,
    argv and environment building, and kernel quirks, against real files in
    private temp directories. Discovery and lookups: test_kernelspecs.c. */
#include "kb_testutil.h"
#include "kernel/kb_kernelspec.h"
#include "kernelspec_testlib.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

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

static void test_load_valid(void)
{
    char *tmp = kb_test_tmpdir();
    write_spec(tmp, "full",
               "{\"argv\": [\"python3\", \"-m\", \"ipykernel_launcher\", \"-f\","
               " \"{connection_file}\"], \"display_name\": \"Full\", \"language\": \"Python\","
               " \"interrupt_mode\": \"Message\", \"env\": {\"A\": \"1\", \"B\": \"$HOME\"},"
               " \"metadata\": {\"debugger\": true}, \"unknown_key\": 3}");
    write_spec(tmp, "plain", "{\"argv\": [\"k\"], \"display_name\": \"\", \"language\": \"x\"}");
    kb_error_t err = { 0 };
    char *dir = join(tmp, "kernels/full");
    kb_kernelspec_t *spec = kb_kernelspec_load(dir, "full", &err);
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
    spec = kb_kernelspec_load("kernels/plain/", "plain", &err);
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
        kb_error_t err = { 0 };
        kb_kernelspec_t *spec = kb_kernelspec_load(dir, "broken", &err);
        CHECK(spec == NULL);
        CHECK(strstr(err.message, file) == err.message);
        CHECK(strstr(err.message, cases[i].problem) != NULL);
        if (!strstr(err.message, cases[i].problem))
            fprintf(stderr, "   case %zu: err \"%s\", expected \"%s\"\n", i, err.message,
                    cases[i].problem);
        kb_kernelspec_destroy(&spec);
    }
    /* a missing file, and a NULL err */
    kb_error_t err = { 0 };
    char *missing = join(tmp, "kernels/none");
    CHECK(kb_kernelspec_load(missing, "none", &err) == NULL);
    CHECK(strstr(err.message, "kernels/none/kernel.json") && strstr(err.message, "No such file"));
    CHECK(kb_kernelspec_load(missing, "none", NULL) == NULL);
    free(missing);
    free(dir);
    free(file);
    kb_test_rmtree(tmp);
    free(tmp);
}

static kb_kernelspec_t *load_text(const char *tmp, const char *name, const char *text)
{
    write_spec(tmp, name, text);
    char *dir = join(tmp, "kernels");
    char *spec_dir = join(dir, name);
    kb_error_t err = { 0 };
    kb_kernelspec_t *spec = kb_kernelspec_load(spec_dir, name, &err);
    if (!spec)
        fprintf(stderr, "   load %s: %s\n", name, err.message);
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
    /* V8 maps ~1.2 GiB of data at start: no RLIMIT_DATA */
    CHECK(spec && kb_kernelspec_quirks(spec).no_rlimit_data);
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
        quirks = spec ? kb_kernelspec_quirks(spec)
                      : (kb_kernelspec_quirks_t){ "x", 1, true, true, false };
        CHECK(quirks.transport == NULL && quirks.late_output == 0 && !quirks.no_color
              && !quirks.no_rlimit_data);
        kb_kernelspec_destroy(&spec);
    }

    /* IPython's kernel, by what its argv runs; metadata may say otherwise */
    const char *ipykernels[][2] = {
        { "[\"python3\", \"-m\", \"ipykernel_launcher\", \"-f\", \"{connection_file}\"]", "" },
        { "[\"/usr/bin/python3\", \"-m\", \"ipykernel\", \"-f\", \"x\"]", "" },
        { "[\"python\", \"/opt/lib/ipykernel_launcher.py\", \"-f\", \"x\"]", "" },
        { "[\"python3\", \"-m\", \"xeus_python\", \"-f\", \"x\"]", "no" },
        { "[\"python3\", \"/k/my_ipykernel_launcher.py\"]", "no" },
        { "[\"python3\", \"-m\", \"ipykernel_launcher\"]", "off" },
    };
    for (size_t i = 0; i < sizeof ipykernels / sizeof *ipykernels; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "{\"argv\": %s, \"display_name\": \"p\", \"language\": \"python\"%s}",
                 ipykernels[i][0],
                 strcmp(ipykernels[i][1], "off") == 0
                     ? ", \"metadata\": {\"kernelbridge\": {\"ipykernel\": false}}"
                     : "");
        spec = load_text(tmp, "ipy", text);
        CHECK(spec && kb_kernelspec_quirks(spec).ipykernel == (*ipykernels[i][1] == '\0'));
        kb_kernelspec_destroy(&spec);
    }

    /* --ext on a copy's argv; a dir at the end of PYTHONPATH */
    spec = load_text(tmp, "ext",
                     "{\"argv\": [\"python3\", \"-m\", \"ipykernel_launcher\"],"
                     " \"display_name\": \"p\", \"language\": \"python\"}");
    kb_kernelspec_t *with = spec ? kb_kernelspec_with_arg(spec, "--ext=x") : NULL;
    CHECK(with && with->argc == 4 && strcmp(with->argv[3], "--ext=x") == 0 && !with->argv[4]);
    CHECK(spec && spec->argc == 3);
    kb_kernelspec_destroy(&with);
    kb_kernelspec_destroy(&spec);
    char *const have[] = { "A=1", "PYTHONPATH=/u", NULL };
    char *const empty[] = { "PYTHONPATH=", NULL };
    char *const none[] = { "A=1", NULL };
    char **paths = kb_kernelspec_env_add_path(have, "PYTHONPATH", "/d");
    CHECK_STR(strv_get(paths, "PYTHONPATH"), "/u:/d");
    CHECK_STR(strv_get(paths, "A"), "1");
    kb_strv_free(paths);
    paths = kb_kernelspec_env_add_path(empty, "PYTHONPATH", "/d");
    CHECK_STR(strv_get(paths, "PYTHONPATH"), "/d");
    kb_strv_free(paths);
    paths = kb_kernelspec_env_add_path(none, "PYTHONPATH", "/d");
    CHECK_STR(strv_get(paths, "PYTHONPATH"), "/d");
    kb_strv_free(paths);

    /* kernel.json's metadata.kernelbridge says it, and wins */
    spec = load_text(
        tmp, "given",
        "{\"argv\": [\"k\"], \"display_name\": \"g\", \"language\": \"g\","
        " \"metadata\": {\"kernelbridge\": {\"transport\": \"tcp\", \"late_output\": 0.25,"
        " \"no_color\": true, \"rlimit_data\": false}}}");
    quirks = spec ? kb_kernelspec_quirks(spec) : (kb_kernelspec_quirks_t){ 0 };
    CHECK_STR(quirks.transport, "tcp");
    CHECK(quirks.late_output == 0.25);
    CHECK(quirks.no_color);
    CHECK(quirks.no_rlimit_data);
    kb_kernelspec_destroy(&spec);
    spec = load_text(tmp, "deno-ipc",
                     "{\"argv\": [\"deno\", \"jupyter\", \"--kernel\"], \"display_name\": \"D\","
                     " \"language\": \"typescript\", \"metadata\": {\"kernelbridge\": {"
                     "\"transport\": \"ipc\", \"late_output\": 0, \"no_color\": false,"
                     " \"rlimit_data\": true}}}");
    quirks = spec ? kb_kernelspec_quirks(spec) : (kb_kernelspec_quirks_t){ 0 };
    CHECK_STR(quirks.transport, "ipc");
    CHECK(quirks.late_output == 0);
    CHECK(!quirks.no_color);
    CHECK(!quirks.no_rlimit_data);
    kb_kernelspec_destroy(&spec);
    /* wrong types and out-of-range values are ignored */
    const char *ignored[] = {
        "{\"kernelbridge\": {\"transport\": \"udp\", \"late_output\": -1, \"no_color\": 1}}",
        "{\"kernelbridge\": {\"transport\": 1, \"late_output\": 11, \"no_color\": \"yes\"}}",
        "{\"kernelbridge\": {\"late_output\": \"0.5\", \"rlimit_data\": 0}}",
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
        quirks = spec ? kb_kernelspec_quirks(spec)
                      : (kb_kernelspec_quirks_t){ "x", 1, true, true, false };
        CHECK(quirks.transport == NULL && quirks.late_output == 0 && !quirks.no_color
              && !quirks.no_rlimit_data);
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

int main(void)
{
    RUN_TEST(test_load_valid);
    RUN_TEST(test_load_broken);
    RUN_TEST(test_build_argv);
    RUN_TEST(test_build_env);
    RUN_TEST(test_quirks);
    return kb_test_summary();
}
