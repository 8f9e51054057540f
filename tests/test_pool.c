/*  test_pool.c - the warm kernel pool on real ipykernel: contexts and
    isolated runs take ready kernels, state is fresh, the pool refills after
    being drained, replaces a pooled kernel killed from outside, applies a
    context's cwd through the adapter, and leaves nothing behind. */
#include <czmq.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "kb_testutil.h"
#include "kernelbridge.h"

static kb_service_t *service;

/*  The pool's entry for python, from /health. Caller owns. */
static json_t *s_pool(void)
{
    json_t *health = kb_service_health(service);
    json_t *entry = json_incref(json_object_get(json_object_get(health, "pool"), "python"));
    json_decref(health);
    return entry;
}

static size_t s_ready(void)
{
    json_t *entry = s_pool();
    size_t ready = (size_t)json_integer_value(json_object_get(entry, "ready"));
    json_decref(entry);
    return ready;
}

/*  Wait until the pool has `ready` kernels ready; false after 60 s. */
static bool s_wait_ready(size_t ready)
{
    for (int i = 0; i < 1200; i++) {
        if (s_ready() == ready)
            return true;
        usleep(50000);
    }
    return false;
}

static bool s_pid_in_pool(json_t *entry, long long pid)
{
    size_t i;
    json_t *value;
    json_array_foreach(json_object_get(entry, "ready_pids"), i, value)
    {
        if (json_integer_value(value) == pid)
            return true;
    }
    return false;
}

static json_t *s_create(const char *cwd, kb_error_t *err)
{
    kb_context_opts_t opts = { .language = "python", .cwd = cwd };
    return kb_service_context_create(service, &opts, err);
}

static kb_result_t *s_run(const char *context, const char *code)
{
    kb_run_opts_t opts = { .code = code, .context_id = context };
    kb_error_t err;
    kb_result_t *result = kb_service_run(service, &opts, NULL, NULL, &err);
    if (!result) {
        fprintf(stderr, "run: %s\n", err.message);
        abort();
    }
    return result;
}

static void test_create_takes_a_ready_kernel(void)
{
    CHECK(s_wait_ready(2));
    json_t *before = s_pool();
    CHECK_STR(json_string_value(json_object_get(before, "kernel_name")), "python3");
    kb_error_t err;
    double start = kb_test_now();
    json_t *ctx = s_create(NULL, &err);
    double took = kb_test_now() - start;
    fprintf(stderr, "create from a warm pool: %.2f ms\n", took * 1000);
    CHECK(ctx != NULL);
    CHECK_STR(json_string_value(json_object_get(ctx, "state")), "idle");
    long long pid = json_integer_value(json_object_get(ctx, "pid"));
    CHECK(s_pid_in_pool(before, pid));
    const char *id = json_string_value(json_object_get(ctx, "context_id"));

    /*  Fresh: nothing ran there before, and state works from here on. */
    kb_result_t *r = s_run(id, "[n for n in globals() if not n.startswith('_')]");
    CHECK(r->outputs_len == 1);
    const char *names = r->outputs_len
                            ? json_string_value(json_object_get(r->outputs[0].data, "text/plain"))
                            : NULL;
    CHECK(names && strstr(names, "leftover") == NULL);
    CHECK(r->execution_count == 1);
    kb_result_destroy(&r);
    kb_result_destroy((kb_result_t *[]){ s_run(id, "leftover = 'from the first user'") });
    CHECK(kb_service_context_delete(service, id, &err) == 0);
    json_decref(ctx);

    /*  The next user of the pool gets another kernel, without that state. */
    CHECK(s_wait_ready(2));
    ctx = s_create(NULL, &err);
    CHECK(json_integer_value(json_object_get(ctx, "pid")) != pid);
    id = json_string_value(json_object_get(ctx, "context_id"));
    r = s_run(id, "leftover");
    CHECK(r->error && strcmp(r->error->name, "NameError") == 0);
    kb_result_destroy(&r);
    kb_service_context_delete(service, id, &err);
    json_decref(ctx);
    json_decref(before);
}

static void test_drain_and_refill(void)
{
    CHECK(s_wait_ready(2));
    json_t *before = s_pool();
    kb_error_t err;
    json_t *a = s_create(NULL, &err);
    json_t *b = s_create(NULL, &err);
    json_t *c = s_create(NULL, &err); /* the pool is empty: a cold start */
    CHECK(a && b && c);
    CHECK(s_pid_in_pool(before, json_integer_value(json_object_get(a, "pid"))));
    CHECK(s_pid_in_pool(before, json_integer_value(json_object_get(b, "pid"))));
    CHECK(!s_pid_in_pool(before, json_integer_value(json_object_get(c, "pid"))));
    CHECK(s_wait_ready(2));
    json_t *after = s_pool();
    CHECK(!s_pid_in_pool(after, json_integer_value(json_object_get(a, "pid"))));
    CHECK(!s_pid_in_pool(after, json_integer_value(json_object_get(b, "pid"))));
    json_t *list[] = { a, b, c };
    for (int i = 0; i < 3; i++) {
        kb_service_context_delete(service,
                                  json_string_value(json_object_get(list[i], "context_id")), &err);
        json_decref(list[i]);
    }
    json_decref(before);
    json_decref(after);
}

static void test_killed_pooled_kernel_is_replaced(void)
{
    CHECK(s_wait_ready(2));
    json_t *before = s_pool();
    long long victim = json_integer_value(json_array_get(json_object_get(before, "ready_pids"), 0));
    CHECK(victim > 0);
    kill((pid_t)victim, SIGKILL);
    bool replaced = false;
    for (int i = 0; i < 1200 && !replaced; i++) {
        json_t *now = s_pool();
        replaced
            = json_integer_value(json_object_get(now, "ready")) == 2 && !s_pid_in_pool(now, victim);
        json_decref(now);
        if (!replaced)
            usleep(50000);
    }
    CHECK(replaced);
    /*  And a create right after still works. */
    kb_error_t err;
    json_t *ctx = s_create(NULL, &err);
    CHECK(ctx && json_integer_value(json_object_get(ctx, "pid")) != victim);
    if (ctx)
        kb_service_context_delete(service, json_string_value(json_object_get(ctx, "context_id")),
                                  &err);
    json_decref(ctx);
    json_decref(before);
}

static void test_isolated_runs_use_the_pool(void)
{
    CHECK(s_wait_ready(2));
    json_t *before = s_pool();
    kb_run_opts_t opts = { .code = "import os\nprint(os.getpid())", .isolated = true };
    kb_error_t err;
    kb_result_t *r = kb_service_run(service, &opts, NULL, NULL, &err);
    CHECK(r && r->error == NULL);
    long long pid = r ? atoll(r->stdout_text) : 0;
    CHECK(s_pid_in_pool(before, pid));
    kb_result_destroy(&r);
    /*  The isolated kernel is gone afterwards, and the pool refills. */
    CHECK(s_wait_ready(2));
    bool gone = false;
    for (int i = 0; i < 200 && !gone; i++) {
        gone = kill((pid_t)pid, 0) != 0;
        if (!gone)
            usleep(50000);
    }
    CHECK(gone);
    json_decref(before);
}

static void test_context_cwd_through_adapter(void)
{
    CHECK(s_wait_ready(2));
    json_t *before = s_pool();
    char *dir = kb_test_tmpdir();
    kb_error_t err;
    json_t *ctx = s_create(dir, &err);
    CHECK(ctx && s_pid_in_pool(before, json_integer_value(json_object_get(ctx, "pid"))));
    const char *id = ctx ? json_string_value(json_object_get(ctx, "context_id")) : "none";
    kb_result_t *r = s_run(id, "import os\nprint(os.getcwd())");
    char expected[600];
    snprintf(expected, sizeof expected, "%s\n", dir);
    CHECK_STR(r->stdout_text, expected);
    kb_result_destroy(&r);
    kb_service_context_delete(service, id, &err);
    json_decref(ctx);

    /*  A cwd that does not exist fails like a cold start would. */
    CHECK(s_wait_ready(2));
    json_t *bad = s_create("/no/such/dir", &err);
    CHECK(bad == NULL && err.code == KB_ERR_KERNEL_START_FAILED);
    CHECK(strstr(err.message, "/no/such/dir") != NULL || strstr(err.message, "No such") != NULL);
    json_decref(bad);
    kb_test_rmtree(dir);
    free(dir);
    json_decref(before);
}

typedef struct {
    const char *kernel;
    double done_at;
    int launched; /* slow kernels launched when this create returned */
    bool ok;
} kb_slow_create_t;

/*  The slow kernel appends a line here as it launches. */
static char *s_launches;

static int s_count_lines(const char *path)
{
    FILE *file = fopen(path, "r");
    int lines = 0;
    for (int c; file && (c = fgetc(file)) != EOF;)
        lines += c == '\n';
    if (file)
        fclose(file);
    return lines;
}

static void *s_create_thread(void *arg)
{
    kb_slow_create_t *job = arg;
    kb_context_opts_t opts = { .kernel_name = job->kernel };
    kb_error_t err;
    json_t *ctx = kb_service_context_create(service, &opts, &err);
    job->done_at = kb_test_now();
    job->launched = s_count_lines(s_launches);
    job->ok = ctx != NULL;
    if (!ctx)
        fprintf(stderr, "create %s: %s\n", job->kernel, err.message);
    if (ctx)
        kb_service_context_delete(service, json_string_value(json_object_get(ctx, "context_id")),
                                  &err);
    json_decref(ctx);
    return NULL;
}

/*  Two cold starts of a kernel that takes 3 s to start go on at once, and
    while they start, runs on another context go on too. */
static void test_slow_starts_block_nothing(void)
{
    kb_error_t err;
    json_t *ctx = s_create(NULL, &err);
    const char *id = json_string_value(json_object_get(ctx, "context_id"));
    double start = kb_test_now();
    kb_slow_create_t jobs[2] = { { .kernel = "slow-python" }, { .kernel = "slow-python" } };
    pthread_t threads[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&threads[i], NULL, s_create_thread, &jobs[i]);
    usleep(300000);
    int runs = 0;
    double last_run_at = 0;
    for (; runs < 5; runs++) {
        kb_result_t *r = s_run(id, "6*7");
        CHECK(r->outputs_len == 1);
        kb_result_destroy(&r);
        last_run_at = kb_test_now();
    }
    for (int i = 0; i < 2; i++)
        pthread_join(threads[i], NULL);
    CHECK(jobs[0].ok && jobs[1].ok);
    /*  The runs finished while both kernels were still starting... */
    CHECK(last_run_at < jobs[0].done_at && last_run_at < jobs[1].done_at);
    /*  ...and the two starts overlapped: both kernels had been launched when
        the first was ready (one after the other, the second launches only
        then). Counted, not timed: a loaded machine slows both alike. */
    double slowest = jobs[0].done_at > jobs[1].done_at ? jobs[0].done_at : jobs[1].done_at;
    const kb_slow_create_t *first = jobs[0].done_at < jobs[1].done_at ? &jobs[0] : &jobs[1];
    fprintf(stderr, "two 3 s starts took %.2f s together; %d launched when the first was ready\n",
            slowest - start, first->launched);
    CHECK(first->launched == 2);
    kb_service_context_delete(service, id, &err);
    json_decref(ctx);
}

/*  A kernelspec that sleeps 3 s, then starts ipykernel; a language of its
    own, so that python still means ipykernel. */
static void s_write_slow_kernelspec(const char *jupyter_dir, const char *launches)
{
    char path[600];
    snprintf(path, sizeof path, "%s/kernels/slow-python", jupyter_dir);
    char command[700];
    snprintf(command, sizeof command, "mkdir -p '%s'", path);
    CHECK(system(command) == 0);
    strncat(path, "/kernel.json", sizeof path - strlen(path) - 1);
    FILE *file = fopen(path, "w");
    fprintf(file,
            "{\"argv\": [\"/bin/sh\", \"-c\", \"echo launched >> '%s'; sleep 3; exec "
            "/usr/bin/python3 -m ipykernel_launcher -f \\\"$0\\\"\", \"{connection_file}\"], "
            "\"display_name\": \"Slow Python\", \"language\": \"slow\"}\n",
            launches);
    fclose(file);
}

int main(void)
{
    char *tmp = kb_test_tmpdir();
    char *state = zsys_sprintf("%s/state", tmp);
    char *jupyter = zsys_sprintf("%s/jupyter", tmp);
    s_launches = zsys_sprintf("%s/slow-launches", tmp);
    s_write_slow_kernelspec(jupyter, s_launches);
    setenv("JUPYTER_PATH", jupyter, 1);
    const char *pool[] = { "python=2", NULL };
    kb_service_config_t config = { .state_dir = state, .pool = pool };
    kb_error_t err;
    service = kb_service_new(&config, &err);
    if (!service) {
        fprintf(stderr, "service: %s\n", err.message);
        return 1;
    }
    RUN_TEST(test_create_takes_a_ready_kernel);
    RUN_TEST(test_drain_and_refill);
    RUN_TEST(test_killed_pooled_kernel_is_replaced);
    RUN_TEST(test_isolated_runs_use_the_pool);
    RUN_TEST(test_context_cwd_through_adapter);
    RUN_TEST(test_slow_starts_block_nothing);
    json_t *entry = s_pool();
    json_t *pids = json_deep_copy(json_object_get(entry, "ready_pids"));
    json_decref(entry);
    kb_service_destroy(&service);
    size_t i;
    json_t *value;
    json_array_foreach(pids, i, value)
    {
        CHECK(kill((pid_t)json_integer_value(value), 0) != 0); /* shut down with the service */
    }
    json_decref(pids);

    const char *bad_pool[] = { "python=lots", NULL };
    kb_service_config_t bad = { .state_dir = state, .pool = bad_pool };
    CHECK(kb_service_new(&bad, &err) == NULL && err.code == KB_ERR_BAD_REQUEST);
    kb_test_rmtree(tmp);
    free(tmp);
    zstr_free(&state);
    zstr_free(&jupyter);
    zstr_free(&s_launches);
    return kb_test_summary();
}
