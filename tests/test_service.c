/*  test_service.c - the service end to end on real kernels (ipykernel and
    xeus-python): results, streams, rich outputs, errors, state, timeouts,
    kernel death, and clean-up after many contexts. */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kb_testutil.h"
#include "kernelbridge.h"
#include "service/output/kb_stream.h"
#include <czmq.h>

static kb_service_t *service;
static char *state_dir;
static char *kernel_dir; /* <state_dir>/kernels: connection files and kernel logs */

typedef struct {
    char order[64]; /* o / e per stream event, in arrival order */
    size_t len;
    double first_stdout_at;
} kb_events_seen_t;

static void s_on_event(const kb_event_t *event, void *arg)
{
    kb_events_seen_t *seen = arg;
    if (!seen)
        return;
    if ((event->type == KB_EVENT_STDOUT || event->type == KB_EVENT_STDERR)
        && seen->len < sizeof seen->order - 1) {
        seen->order[seen->len++] = event->type == KB_EVENT_STDOUT ? 'o' : 'e';
        if (event->type == KB_EVENT_STDOUT && seen->first_stdout_at == 0)
            seen->first_stdout_at = kb_test_now();
    }
}

/*  Run code on a context (NULL: the default python context); never NULL. */
static kb_result_t *s_run_full(const char *context, const char *kernel, const char *code,
                               double timeout, kb_events_seen_t *seen)
{
    kb_run_opts_t opts
        = { .code = code, .context_id = context, .kernel_name = kernel, .timeout = timeout };
    kb_error_t err;
    kb_result_t *result = kb_service_run(service, &opts, s_on_event, seen, &err);
    if (!result) {
        fprintf(stderr, "run failed: %s %s\n", kb_code_name(err.code), err.message);
        abort();
    }
    return result;
}

static kb_result_t *s_run(const char *context, const char *code)
{
    return s_run_full(context, NULL, code, 0, NULL);
}

static const char *s_text(const kb_result_t *result, size_t i)
{
    if (i >= result->outputs_len)
        return NULL;
    return json_string_value(json_object_get(result->outputs[i].data, "text/plain"));
}

static char *s_create(const char *id, const char *language, const char *kernel)
{
    kb_context_opts_t opts = { .language = language, .kernel_name = kernel, .context_id = id };
    kb_error_t err;
    json_t *ctx = kb_service_context_create(service, &opts, &err);
    if (!ctx) {
        fprintf(stderr, "create failed: %s\n", err.message);
        abort();
    }
    char *ctx_id = strdup(json_string_value(json_object_get(ctx, "context_id")));
    json_decref(ctx);
    return ctx_id;
}

static pid_t s_pid(const char *context)
{
    kb_error_t err;
    json_t *ctx = kb_service_context_get(service, context, &err);
    pid_t pid = ctx ? (pid_t)json_integer_value(json_object_get(ctx, "pid")) : -1;
    json_decref(ctx);
    return pid;
}

static void test_main_result(void)
{
    kb_result_t *r = s_run(NULL, "1+1");
    CHECK(r->reason == KB_REASON_EXITED);
    CHECK(r->has_exit_code && r->exit_code == 0);
    CHECK(r->outputs_len == 1);
    CHECK_STR(s_text(r, 0), "2");
    CHECK(r->outputs_len == 1 && r->outputs[0].is_main_result);
    CHECK(r->error == NULL);
    CHECK(r->execution_count >= 1);
    CHECK_STR(r->context_id, "default-python");
    json_t *json = kb_result_to_json(r);
    json_t *first = json_array_get(json_object_get(json, "results"), 0);
    CHECK_STR(json_string_value(json_object_get(first, "text")), "2");
    CHECK_STR(json_string_value(json_object_get(json_object_get(json, "process"), "reason")),
              "exited");
    json_decref(json);
    kb_result_destroy(&r);
}

static void test_streams(void)
{
    kb_result_t *r = s_run(NULL, "print('hello')");
    CHECK_STR(r->stdout_text, "hello\n");
    CHECK_STR(r->stderr_text, "");
    CHECK(r->outputs_len == 0);
    kb_result_destroy(&r);

    r = s_run(NULL, "import sys; print('oops', file=sys.stderr)");
    CHECK_STR(r->stderr_text, "oops\n");
    CHECK_STR(r->stdout_text, "");
    kb_result_destroy(&r);

    kb_events_seen_t seen = { 0 };
    r = s_run_full(NULL, NULL,
                   "import sys\n"
                   "for i in range(3):\n"
                   "    print('o%d' % i, flush=True); sys.stdout.flush()\n"
                   "    print('e%d' % i, file=sys.stderr, flush=True); sys.stderr.flush()\n",
                   0, &seen);
    seen.order[seen.len] = 0;
    CHECK_STR(seen.order, "oeoeoe");
    CHECK_STR(r->stdout_text, "o0\no1\no2\n");
    CHECK_STR(r->stderr_text, "e0\ne1\ne2\n");
    kb_result_destroy(&r);
}

/*  The result alone, as JSON: the same logs and results, and its record
    keeps the log frames that no event carried. */
static void test_result_json(void)
{
    kb_run_opts_t opts = { .code = "print('a'); print('b'); 6*7" };
    kb_error_t err;
    json_t *json = kb_service_run_json(service, &opts, &err);
    CHECK(json != NULL);
    json_t *logs = json_object_get(json, "logs");
    CHECK_STR(json_string_value(json_object_get(logs, "stdout")), "a\nb\n");
    json_t *first = json_array_get(json_object_get(json, "results"), 0);
    CHECK_STR(json_string_value(json_object_get(first, "text")), "42");
    const char *id
        = json_string_value(json_object_get(json_object_get(json, "process"), "process_id"));
    json_t *frames = kb_service_process_logs(service, id, -1, 0, &err);
    CHECK(json_array_size(json_object_get(frames, "frames")) >= 1);
    json_decref(frames);
    json_decref(json);
    opts.context_id = "no-such-context";
    CHECK(kb_service_run_json(service, &opts, &err) == NULL);
    CHECK(err.code == KB_ERR_SESSION_NOT_FOUND);
}

static void test_error(void)
{
    kb_result_t *r = s_run(NULL, "x = 1\n1/0");
    CHECK(r->reason == KB_REASON_EXITED);
    CHECK(r->has_exit_code && r->exit_code == 1);
    CHECK(r->error != NULL);
    if (r->error) {
        CHECK_STR(r->error->name, "ZeroDivisionError");
        CHECK_STR(r->error->value, "division by zero");
        CHECK(r->error->traceback_len > 0);
        bool has_ansi = false;
        for (size_t i = 0; i < r->error->traceback_len; i++)
            has_ansi |= strchr(r->error->traceback[i], '\x1b') != NULL;
        CHECK(has_ansi); /* kept as the kernel sent it */
    }
    kb_result_destroy(&r);

    kb_run_opts_t opts = { .code = "1/0", .strip_ansi = true };
    kb_error_t err;
    r = kb_service_run(service, &opts, NULL, NULL, &err);
    CHECK(r && r->error && r->error->traceback_len > 0);
    for (size_t i = 0; r && r->error && i < r->error->traceback_len; i++)
        CHECK(strchr(r->error->traceback[i], '\x1b') == NULL);
    kb_result_destroy(&r);

    /*  A run right after a failed one runs (ipykernel's stop_on_error window
        aborts such requests; the bridge sends them again). */
    for (int i = 0; i < 20; i++) {
        r = s_run(NULL, i % 2 ? "1/0" : "'ran'");
        if (i % 2)
            CHECK(r->error && strcmp(r->error->name, "ZeroDivisionError") == 0);
        else
            CHECK(!r->error && r->outputs_len == 1);
        kb_result_destroy(&r);
    }
}

static void test_rich_outputs(void)
{
    kb_result_t *r = s_run(NULL, "from IPython.display import HTML, SVG, JSON, display\n"
                                 "display(HTML('<b>bold</b>'))\n"
                                 "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\" "
                                 "width=\"4\" height=\"4\"></svg>'))\n"
                                 "display(JSON({'a': [1, 2]}))\n");
    CHECK(r->outputs_len == 3);
    if (r->outputs_len == 3) {
        json_t *json = kb_result_to_json(r);
        json_t *results = json_object_get(json, "results");
        json_t *html = json_array_get(results, 0);
        CHECK_STR(json_string_value(json_object_get(html, "html")), "<b>bold</b>");
        CHECK(json_object_get(json_object_get(html, "data"), "text/plain") != NULL);
        CHECK(json_is_false(json_object_get(html, "is_main_result")));
        json_t *svg = json_array_get(results, 1);
        const char *svg_text = json_string_value(json_object_get(svg, "svg"));
        CHECK(svg_text && strstr(svg_text, "<svg") != NULL);
        json_t *js = json_object_get(json_array_get(results, 2), "json");
        CHECK(json_is_object(js));
        CHECK(json_integer_value(json_array_get(json_object_get(js, "a"), 1)) == 2);
        json_decref(json);
    }
    kb_result_destroy(&r);

    r = s_run(NULL, "import matplotlib.pyplot as plt\n"
                    "plt.plot([1, 2, 3], [1, 4, 9])\n"
                    "plt.show()\n");
    CHECK(r->error == NULL);
    bool found_png = false;
    for (size_t i = 0; i < r->outputs_len; i++) {
        const char *png = json_string_value(json_object_get(r->outputs[i].data, "image/png"));
        if (png) {
            found_png = strncmp(png, "iVBORw0KGgo", 11) == 0; /* base64 of the PNG magic */
            json_t *entry = kb_result_to_json(r);
            json_t *item = json_array_get(json_object_get(entry, "results"), i);
            CHECK_STR(json_string_value(json_object_get(item, "png")), png);
            json_decref(entry);
        }
    }
    CHECK(found_png);
    kb_result_destroy(&r);
}

static void test_display_update_and_clear(void)
{
    kb_result_t *r = s_run(NULL, "from IPython.display import display\n"
                                 "h = display('first', display_id=True)\n"
                                 "display('other')\n"
                                 "h.update('second')\n");
    CHECK(r->outputs_len == 2);
    CHECK_STR(s_text(r, 0), "'second'");
    CHECK_STR(s_text(r, 1), "'other'");
    CHECK(r->outputs_len > 0 && r->outputs[0].display_id != NULL);
    kb_result_destroy(&r);

    r = s_run(NULL, "from IPython.display import display, clear_output\n"
                    "print('before'); display('gone')\n"
                    "clear_output()\n"
                    "print('after')\n");
    CHECK_STR(r->stdout_text, "after\n");
    CHECK(r->outputs_len == 0);
    kb_result_destroy(&r);

    r = s_run(NULL, "from IPython.display import display, clear_output\n"
                    "display('one')\n"
                    "clear_output(wait=True)\n"
                    "display('two')\n");
    CHECK(r->outputs_len == 1);
    CHECK_STR(s_text(r, 0), "'two'");
    kb_result_destroy(&r);
}

static void test_input_errors(void)
{
    double start = kb_test_now();
    kb_result_t *r = s_run_full(NULL, NULL, "input('name? ')", 20, NULL);
    CHECK(r->error != NULL);
    CHECK(r->reason == KB_REASON_EXITED);
    CHECK(kb_test_now() - start < 10);
    if (r->error)
        CHECK(strstr(r->error->name, "Stdin") != NULL);
    kb_result_destroy(&r);
}

static void test_state(void)
{
    char *a = s_create(NULL, "python", NULL);
    char *b = s_create("ctx-b", "python", NULL);
    CHECK_STR(b, "ctx-b");
    kb_result_destroy((kb_result_t *[]){ s_run(a, "secret = 41") });
    kb_result_t *r = s_run(a, "secret + 1");
    CHECK_STR(s_text(r, 0), "42");
    kb_result_destroy(&r);
    r = s_run(b, "secret");
    CHECK(r->error && strcmp(r->error->name, "NameError") == 0);
    kb_result_destroy(&r);

    kb_error_t err;
    kb_context_opts_t dup = { .language = "python", .context_id = "ctx-b" };
    CHECK(kb_service_context_create(service, &dup, &err) == NULL);
    CHECK(err.code == KB_ERR_CONTEXT_EXISTS);
    kb_context_opts_t bad = { .language = "python", .context_id = "bad id!" };
    CHECK(kb_service_context_create(service, &bad, &err) == NULL);
    CHECK(err.code == KB_ERR_BAD_REQUEST);
    kb_context_opts_t unknown = { .language = "cobol" };
    CHECK(kb_service_context_create(service, &unknown, &err) == NULL);
    CHECK(err.code == KB_ERR_LANGUAGE_NOT_SUPPORTED);
    CHECK(strstr(err.message, "python3") != NULL);

    json_t *list = kb_service_context_list(service, false, &err);
    CHECK(json_array_size(json_object_get(list, "contexts")) == 2);
    json_decref(list);
    list = kb_service_context_list(service, true, &err);
    CHECK(json_array_size(json_object_get(list, "contexts")) == 3); /* + default-python */
    json_decref(list);
    CHECK(kb_service_context_delete(service, "default-python", &err) == -1);
    CHECK(err.code == KB_ERR_PROTECTED_CONTEXT);

    CHECK(kb_service_context_delete(service, a, &err) == 0);
    CHECK(kb_service_context_delete(service, b, &err) == 0);
    CHECK(kb_service_context_get(service, b, &err) == NULL);
    CHECK(err.code == KB_ERR_SESSION_NOT_FOUND);
    CHECK(strstr(err.message, "deleted") != NULL);
    kb_run_opts_t opts = { .code = "1", .context_id = a };
    CHECK(kb_service_run_start(service, &opts, &err) == NULL);
    CHECK(err.code == KB_ERR_SESSION_NOT_FOUND);
    free(a);
    free(b);
}

static void test_isolated(void)
{
    kb_result_t *r = s_run(NULL, "kept_here = 1");
    kb_result_destroy(&r);
    kb_run_opts_t opts
        = { .code = "import os\nprint(os.getcwd())\nkept_here", .isolated = true, .cwd = "/tmp" };
    kb_error_t err;
    r = kb_service_run(service, &opts, NULL, NULL, &err);
    CHECK(r && r->error && strcmp(r->error->name, "NameError") == 0);
    CHECK(r && strcmp(r->stdout_text, "/tmp\n") == 0);
    kb_result_destroy(&r);
    kb_run_opts_t both = { .code = "1", .isolated = true, .context_id = "default-python" };
    CHECK(kb_service_run_start(service, &both, &err) == NULL);
    CHECK(err.code == KB_ERR_BAD_REQUEST);
}

static void test_per_run_cwd_env(void)
{
    char *ctx = s_create(NULL, "python", NULL);
    char *dir = kb_test_tmpdir();
    json_t *env = json_pack("{s:s}", "RUN_ONLY_VALUE", "per-run");
    kb_run_opts_t opts
        = { .code = "import os\nprint(os.getcwd(), os.environ.get('RUN_ONLY_VALUE'))",
            .context_id = ctx,
            .cwd = dir,
            .env = env };
    kb_error_t err;
    kb_result_t *r = kb_service_run(service, &opts, NULL, NULL, &err);
    char expected[600];
    snprintf(expected, sizeof expected, "%s per-run\n", dir);
    CHECK(r && strcmp(r->stdout_text, expected) == 0);
    kb_result_destroy(&r);
    char check[700];
    snprintf(check, sizeof check,
             "import os\nprint(os.getcwd() != '%s', os.environ.get('RUN_ONLY_VALUE'))", dir);
    r = s_run(ctx, check);
    CHECK_STR(r->stdout_text, "True None\n");
    kb_test_rmtree(dir);
    free(dir);
    kb_result_destroy(&r);

    kb_run_opts_t missing = { .code = "print('never')", .context_id = ctx, .cwd = "/no/such/dir" };
    r = kb_service_run(service, &missing, NULL, NULL, &err);
    CHECK(r && r->error && strcmp(r->error->name, "FileNotFoundError") == 0);
    CHECK(r && strcmp(r->stdout_text, "") == 0);
    kb_result_destroy(&r);
    r = s_run(ctx, "print('fine')");
    CHECK_STR(r->stdout_text, "fine\n");
    kb_result_destroy(&r);
    json_decref(env);
    kb_service_context_delete(service, ctx, &err);
    free(ctx);
}

/*  The same per-run cwd/env through the R and Octave adapters. */
static void s_check_adapter(const char *kernel, const char *show, const char *show_after)
{
    char *ctx = s_create(NULL, NULL, kernel);
    char *dir = kb_test_tmpdir();
    json_t *env = json_pack("{s:s, s:s}", "RUN_ONLY_VALUE", "per run", "QUOTED", "a\"b'c");
    kb_run_opts_t opts = { .code = show, .context_id = ctx, .cwd = dir, .env = env };
    kb_error_t err;
    kb_result_t *r = kb_service_run(service, &opts, NULL, NULL, &err);
    char expected[700];
    snprintf(expected, sizeof expected, "%s|per run|a\"b'c", dir);
    CHECK(r && strstr(r->stdout_text, expected) != NULL);
    if (r && !strstr(r->stdout_text, expected))
        fprintf(stderr, "%s: got [%s]\n", kernel, r->stdout_text);
    kb_result_destroy(&r);
    r = s_run(ctx, show_after);
    snprintf(expected, sizeof expected, "%s|<>|", dir);
    CHECK(strstr(r->stdout_text, "|<>|") != NULL && strstr(r->stdout_text, expected) == NULL);
    if (!strstr(r->stdout_text, "|<>|"))
        fprintf(stderr, "%s after: got [%s]\n", kernel, r->stdout_text);
    kb_result_destroy(&r);
    json_decref(env);
    kb_test_rmtree(dir);
    free(dir);
    kb_service_context_delete(service, ctx, &err);
    free(ctx);
}

static void test_adapters_r_octave(void)
{
    s_check_adapter(
        "ir",
        "cat(paste(getwd(), Sys.getenv('RUN_ONLY_VALUE'), Sys.getenv('QUOTED'), sep = '|'), "
        "'\\n')",
        "cat(paste(getwd(), '<>', Sys.getenv('RUN_ONLY_VALUE'), sep = '|'), '\\n')");
    s_check_adapter("octave",
                    "printf('%s|%s|%s\\n', pwd(), getenv('RUN_ONLY_VALUE'), getenv('QUOTED'))",
                    "printf('%s|<>|%s\\n', pwd(), getenv('RUN_ONLY_VALUE'))");
}

static void test_timeout_interrupts(void)
{
    char *ctx = s_create(NULL, "python", NULL);
    kb_result_destroy((kb_result_t *[]){ s_run(ctx, "kept = 5") });
    double start = kb_test_now();
    kb_result_t *r = s_run_full(ctx, NULL, "import time\ntime.sleep(30)", 1.0, NULL);
    double took = kb_test_now() - start;
    CHECK(r->reason == KB_REASON_TIMED_OUT);
    CHECK_STR(r->signal, "SIGINT");
    CHECK(!r->has_exit_code);
    CHECK(r->error && strcmp(r->error->name, "TimeoutError") == 0);
    CHECK(took < 3.0);
    kb_result_destroy(&r);
    r = s_run(ctx, "kept");
    CHECK_STR(s_text(r, 0), "5");
    kb_result_destroy(&r);
    kb_error_t err;
    kb_service_context_delete(service, ctx, &err);
    free(ctx);
}

static void test_timeout_kills(void)
{
    char *ctx = s_create(NULL, "python", NULL);
    double start = kb_test_now();
    kb_result_t *r = s_run_full(ctx, NULL,
                                "import signal, time\n"
                                "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                "time.sleep(60)",
                                1.0, NULL);
    double took = kb_test_now() - start;
    CHECK(r->reason == KB_REASON_TIMED_OUT);
    CHECK_STR(r->signal, "SIGKILL");
    CHECK(r->error && strcmp(r->error->name, "TimeoutError") == 0);
    CHECK(r->raw_reason && strstr(r->raw_reason, "killed") != NULL);
    CHECK(took < 6.0);
    kb_result_destroy(&r);
    kb_error_t err;
    CHECK(kb_service_context_get(service, ctx, &err) == NULL);
    CHECK(err.code == KB_ERR_SESSION_NOT_FOUND);
    CHECK(strstr(err.message, "vanished") != NULL);
    free(ctx);
}

static void test_kernel_death(void)
{
    char *ctx = s_create(NULL, "python", NULL);
    double start = kb_test_now();
    kb_result_t *r = s_run(ctx, "import os\nos._exit(3)");
    double took = kb_test_now() - start;
    CHECK(r->reason == KB_REASON_FAILED);
    CHECK(r->has_exit_code && r->exit_code == 3);
    CHECK(r->error && strcmp(r->error->name, "KernelDied") == 0);
    CHECK(took < 1.0);
    kb_result_destroy(&r);
    kb_error_t err;
    CHECK(kb_service_context_get(service, ctx, &err) == NULL);
    CHECK(err.code == KB_ERR_SESSION_NOT_FOUND && strstr(err.message, "status 3"));
    free(ctx);

    /*  Killed from outside during a run. */
    ctx = s_create(NULL, "python", NULL);
    pid_t pid = s_pid(ctx);
    kb_run_opts_t opts = { .code = "import time\nprint('started', flush=True)\ntime.sleep(30)",
                           .context_id = ctx };
    kb_stream_t *stream = kb_service_run_start(service, &opts, &err);
    CHECK(stream != NULL);
    kb_event_t *event;
    double killed_at = 0;
    while (stream && (event = kb_stream_next(stream, 10000))) {
        if (event->type == KB_EVENT_STDOUT && !killed_at) {
            kill(pid, SIGKILL);
            killed_at = kb_test_now();
        }
        kb_event_destroy(&event);
    }
    CHECK(stream && kb_stream_ended(stream));
    CHECK(killed_at > 0 && kb_test_now() - killed_at < 1.0);
    r = stream ? kb_stream_take_result(stream) : NULL;
    CHECK(r && r->reason == KB_REASON_FAILED);
    CHECK(r && r->signal && strcmp(r->signal, "SIGKILL") == 0);
    CHECK(r && !r->has_exit_code);
    kb_result_destroy(&r);
    kb_stream_destroy(&stream);
    free(ctx);
}

static void test_process_records(void)
{
    kb_error_t err;
    kb_run_opts_t opts = { .code = "for i in range(3): print(i, flush=True)" };
    kb_stream_t *stream = kb_service_run_start(service, &opts, &err);
    kb_event_t *start = kb_stream_next(stream, 5000);
    CHECK(start && start->type == KB_EVENT_START);
    char *id = strdup(json_string_value(json_object_get(start->data, "process_id")));
    kb_event_destroy(&start);
    kb_stream_destroy(&stream); /* the run goes on without its reader */
    json_t *wait = kb_service_process_wait(service, id, 10, &err);
    CHECK_STR(json_string_value(json_object_get(wait, "state")), "terminal");
    CHECK_STR(json_string_value(json_object_get(wait, "reason")), "exited");
    json_decref(wait);
    json_t *logs = kb_service_process_logs(service, id, -1, 0, &err);
    json_t *frames = json_object_get(logs, "frames");
    size_t n = json_array_size(frames);
    CHECK(n >= 1);
    CHECK(json_is_true(json_object_get(logs, "eof")));
    json_decref(logs);
    json_t *result = kb_service_process_result(service, id, &err);
    CHECK_STR(json_string_value(json_object_get(json_object_get(result, "logs"), "stdout")),
              "0\n1\n2\n");
    json_decref(result);
    kb_stream_t *follow = kb_service_process_follow(service, id, -1, &err);
    kb_event_t *event;
    size_t logs_seen = 0, ends = 0;
    while ((event = kb_stream_next(follow, 2000))) {
        logs_seen += event->type == KB_EVENT_LOG;
        ends += event->type == KB_EVENT_END;
        kb_event_destroy(&event);
    }
    CHECK(logs_seen == n && ends == 1);
    kb_stream_destroy(&follow);
    CHECK(kb_service_process_delete(service, id, &err) == 0);
    CHECK(kb_service_process_get(service, id, &err) == NULL);
    CHECK(err.code == KB_ERR_PROCESS_NOT_FOUND);
    free(id);
}

static void test_xpython(void)
{
    kb_result_t *r = s_run_full(NULL, "xpython", "print('x'); 6*7", 0, NULL);
    CHECK_STR(r->stdout_text, "x\n");
    CHECK_STR(s_text(r, 0), "42");
    CHECK_STR(r->context_id, "default-xpython");
    kb_result_destroy(&r);
    r = s_run_full(NULL, "xpython", "raise ValueError('bad value')", 0, NULL);
    CHECK(r->error && strcmp(r->error->name, "ValueError") == 0);
    CHECK(r->error && strcmp(r->error->value, "bad value") == 0);
    CHECK(r->has_exit_code && r->exit_code == 1);
    kb_result_destroy(&r);
    r = s_run_full(NULL, "xpython",
                   "from IPython.display import display, HTML\ndisplay(HTML('<i>x</i>'))", 0, NULL);
    CHECK(r->outputs_len == 1);
    CHECK(r->outputs_len == 1 && json_object_get(r->outputs[0].data, "text/html") != NULL);
    kb_result_destroy(&r);
}

typedef struct {
    int index;
    char contexts[4][80];
    int bad;
} kb_thread_job_t;

static void *s_thread_runs(void *arg)
{
    kb_thread_job_t *job = arg;
    for (int i = 0; i < 10; i++) {
        char code[160], expected[64];
        snprintf(expected, sizeof expected, "token-%d-%d\n", job->index, i);
        snprintf(code, sizeof code, "print('token-%d-%d')", job->index, i);
        kb_run_opts_t opts = { .code = code, .context_id = job->contexts[(job->index + i) % 4] };
        kb_error_t err;
        kb_result_t *r = kb_service_run(service, &opts, NULL, NULL, &err);
        if (!r || strcmp(r->stdout_text, expected) != 0)
            job->bad++;
        kb_result_destroy(&r);
    }
    return NULL;
}

/*  The API from 8 threads at once, runs spread over 4 contexts: every run
    gets its own output and nothing else. */
static void test_threads(void)
{
    kb_thread_job_t jobs[8];
    pthread_t threads[8];
    char *ids[4];
    for (int c = 0; c < 4; c++)
        ids[c] = s_create(NULL, "python", NULL);
    for (int t = 0; t < 8; t++) {
        jobs[t].index = t;
        jobs[t].bad = 0;
        for (int c = 0; c < 4; c++)
            snprintf(jobs[t].contexts[c], sizeof jobs[t].contexts[c], "%s", ids[c]);
        pthread_create(&threads[t], NULL, s_thread_runs, &jobs[t]);
    }
    int bad = 0;
    for (int t = 0; t < 8; t++) {
        pthread_join(threads[t], NULL);
        bad += jobs[t].bad;
    }
    CHECK(bad == 0);
    kb_error_t err;
    json_t *procs = kb_service_process_list(service, "terminal", ids[0], &err);
    CHECK(json_array_size(json_object_get(procs, "processes")) == 20);
    json_decref(procs);
    for (int c = 0; c < 4; c++) {
        CHECK(kb_service_context_delete(service, ids[c], &err) == 0);
        free(ids[c]);
    }
}

static const char *s_heartbeat(const char *context)
{
    static char value[16];
    kb_error_t err;
    json_t *ctx = kb_service_context_get(service, context, &err);
    snprintf(value, sizeof value, "%s",
             ctx ? json_string_value(json_object_get(ctx, "heartbeat")) : "gone");
    json_decref(ctx);
    return value;
}

/*  A kernel that stops answering its heartbeat shows as late; it recovers. */
static void test_heartbeat(void)
{
    char *ctx = s_create(NULL, "python", NULL);
    pid_t pid = s_pid(ctx);
    sleep(4);
    CHECK_STR(s_heartbeat(ctx), "ok");
    kill(pid, SIGSTOP);
    sleep(10);
    CHECK_STR(s_heartbeat(ctx), "late");
    kill(pid, SIGCONT);
    sleep(4);
    CHECK_STR(s_heartbeat(ctx), "ok");
    kb_result_t *r = s_run(ctx, "'alive'");
    CHECK_STR(s_text(r, 0), "'alive'");
    kb_result_destroy(&r);
    kb_error_t err;
    kb_service_context_delete(service, ctx, &err);
    free(ctx);
}

/*  Children of this process that are still alive (zombies included). */
static int s_count_children(void)
{
    DIR *dir = opendir("/proc");
    int count = 0;
    struct dirent *entry;
    char path[300], line[512];
    while ((entry = readdir(dir))) {
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/stat", entry->d_name);
        FILE *file = fopen(path, "r");
        if (!file)
            continue;
        if (fgets(line, sizeof line, file)) {
            char *close = strrchr(line, ')');
            int ppid = 0;
            char state;
            if (close && sscanf(close + 2, "%c %d", &state, &ppid) == 2 && ppid == getpid())
                count++;
        }
        fclose(file);
    }
    closedir(dir);
    return count;
}

static int s_count_files(const char *dir_path)
{
    DIR *dir = opendir(dir_path);
    int count = 0;
    struct dirent *entry;
    while (dir && (entry = readdir(dir)))
        if (entry->d_name[0] != '.' && strcmp(entry->d_name, "sandbox_id") != 0)
            count++;
    if (dir)
        closedir(dir);
    return count;
}

static bool s_settled(int children, int fds, int files)
{
    for (int i = 0; i < 100; i++) {
        if (s_count_children() == children && kb_test_count_fds() == fds
            && s_count_files(kernel_dir) == files)
            return true;
        usleep(50000);
    }
    return false;
}

static void test_create_delete_cycles(void)
{
    kb_error_t err;
    json_t *list = kb_service_context_list(service, true, &err);
    size_t before_contexts = json_array_size(json_object_get(list, "contexts"));
    json_decref(list);
    /*  Earlier tests' deleted kernels are reaped in the background: wait
        until only the live contexts' kernels are left. */
    for (int i = 0; i < 200 && s_count_children() != (int)before_contexts; i++)
        usleep(50000);
    CHECK(s_count_children() == (int)before_contexts);
    int children = s_count_children();
    int fds = kb_test_count_fds();
    int files = s_count_files(kernel_dir);
    for (int i = 0; i < 100; i++) {
        char *ctx = s_create(NULL, "python", NULL);
        if (i % 10 == 0) {
            kb_result_t *r = s_run(ctx, "print('cycle')");
            CHECK_STR(r->stdout_text, "cycle\n");
            kb_result_destroy(&r);
        }
        CHECK(kb_service_context_delete(service, ctx, &err) == 0);
        free(ctx);
    }
    CHECK(s_settled(children, fds, files));
    fprintf(stderr, "children %d/%d fds %d/%d files %d/%d\n", s_count_children(), children,
            kb_test_count_fds(), fds, s_count_files(kernel_dir), files);
    list = kb_service_context_list(service, true, &err);
    CHECK(json_array_size(json_object_get(list, "contexts")) == before_contexts);
    json_decref(list);
}

int main(void)
{
    char *tmp = kb_test_tmpdir();
    state_dir = zsys_sprintf("%s/state", tmp);
    kernel_dir = zsys_sprintf("%s/kernels", state_dir);
    kb_service_config_t config = { .state_dir = state_dir, .interrupt_grace = 2.0 };
    kb_error_t err;
    service = kb_service_new(&config, &err);
    if (!service) {
        fprintf(stderr, "service: %s\n", err.message);
        return 1;
    }
    RUN_TEST(test_main_result);
    RUN_TEST(test_streams);
    RUN_TEST(test_result_json);
    RUN_TEST(test_error);
    RUN_TEST(test_rich_outputs);
    RUN_TEST(test_display_update_and_clear);
    RUN_TEST(test_input_errors);
    RUN_TEST(test_state);
    RUN_TEST(test_isolated);
    RUN_TEST(test_per_run_cwd_env);
    RUN_TEST(test_adapters_r_octave);
    RUN_TEST(test_timeout_interrupts);
    RUN_TEST(test_timeout_kills);
    RUN_TEST(test_kernel_death);
    RUN_TEST(test_process_records);
    RUN_TEST(test_xpython);
    RUN_TEST(test_threads);
    RUN_TEST(test_heartbeat);
    RUN_TEST(test_create_delete_cycles);
    kb_service_destroy(&service);
    CHECK(s_count_children() == 0);
    CHECK(s_count_files(kernel_dir) == 0);
    /* what stays: the lock and state.db (the records, kept across restarts) */
    char *db_path = zsys_sprintf("%s/state.db", state_dir),
         *lock_path = zsys_sprintf("%s/lock", state_dir);
    CHECK(access(db_path, F_OK) == 0 && access(lock_path, F_OK) == 0);
    zstr_free(&db_path);
    zstr_free(&lock_path);
    kb_test_rmtree(tmp);
    free(tmp);
    zstr_free(&state_dir);
    zstr_free(&kernel_dir);
    return kb_test_summary();
}
