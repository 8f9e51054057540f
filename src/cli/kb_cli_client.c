/*  kb_cli_client.c - `kernelbridge contexts`, `ps` and `logs`: a person at a
    terminal asks a running daemon over its native HTTP API (SPEC section 5)
    what it has: its contexts, its process records, a run's output (live,
    over the logs endpoint's Server-Sent Events, with --follow). Tables for
    a person, or the daemon's JSON as it came.

    Also the flags every command that asks a daemon shares (--url,
    --token-file, --help; kb_cli_client.h), which kb_cli_fork.c uses too.
    Not for driving runs (`kernelbridge run` is in-process, kb_cli_run.c),
    nor HTTP itself (kb_cli_http.c). */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/kb_cli.h"
#include "cli/kb_cli_client.h"
#include "cli/kb_cli_http.h"
#include "kernelbridge.h"
#include "util/kb_buf.h"

#define KB_CLIENT_DEFAULT_URL "http://127.0.0.1:8899"

/* ---- options shared by the commands ------------------------------------------------ */

enum { OPT_URL = 0x100, OPT_TOKEN_FILE };

void kb_cli_client_help(FILE *out)
{
    fputs("  --url URL          the daemon [KB_URL, default " KB_CLIENT_DEFAULT_URL "]\n"
          "  --token-file FILE  send the file's first line as the Bearer token\n"
          "                     [KB_TOKEN_FILE, or the token itself in KB_TOKEN]\n"
          "  -h, --help         this help\n"
          "\n"
          "exit status: 0 ok, 1 the daemon is unreachable or refused, 2 usage\n",
          out);
}

/*  The first line of path. Caller owns the result; NULL after printing why. */
static char *s_read_token(const char *prog, const char *path)
{
    FILE *in = fopen(path, "r");
    char line[4096] = "";
    if (!in || !fgets(line, sizeof line, in)) {
        fprintf(stderr, "%s: cannot read the token file %s: %s\n", prog, path,
                in ? "it is empty" : strerror(errno));
        if (in)
            fclose(in);
        return NULL;
    }
    fclose(in);
    line[strcspn(line, "\r\n")] = 0;
    char *token = strdup(line);
    if (!token)
        fprintf(stderr, "%s: out of memory\n", prog);
    return token;
}

/*  Where and how to reach the daemon, from the flags and environment.
    0, or -1 after printing why. */
static int s_client_setup(kb_client_t *self, const char *token_file)
{
    kb_error_t err;
    const char *url = self->url;
    if (!url)
        url = getenv("KB_URL") && *getenv("KB_URL") ? getenv("KB_URL") : KB_CLIENT_DEFAULT_URL;
    if (kb_cli_daemon_init(&self->daemon, url, &err) < 0) {
        fprintf(stderr, "%s: %s\n", self->prog, err.message);
        return -1;
    }
    if (!token_file && getenv("KB_TOKEN_FILE") && *getenv("KB_TOKEN_FILE"))
        token_file = getenv("KB_TOKEN_FILE");
    if (token_file && !(self->token = s_read_token(self->prog, token_file)))
        return -1;
    if (!token_file && getenv("KB_TOKEN") && *getenv("KB_TOKEN")
        && !(self->token = strdup(getenv("KB_TOKEN")))) {
        fprintf(stderr, "%s: out of memory\n", self->prog);
        return -1;
    }
    self->daemon.token = self->token;
    return 0;
}

int kb_cli_client_parse(kb_client_t *client, const kb_command_t *command, int argc, char **argv,
                        void (*on_flag)(int flag, const char *value, void *arg), void *arg)
{
    struct option options[16];
    static const struct option shared[]
        = { { "url", required_argument, NULL, OPT_URL },
            { "token-file", required_argument, NULL, OPT_TOKEN_FILE },
            { "help", no_argument, NULL, 'h' } };
    size_t n = 0;
    for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++)
        options[n++] = shared[i];
    for (const struct option *o = command->options; o->name && n + 1 < 16; o++)
        options[n++] = *o;
    options[n] = (struct option){ 0 };
    char shortopts[32];
    snprintf(shortopts, sizeof shortopts, "%sh", command->shortopts);
    const char *token_file = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, shortopts, options, NULL)) != -1) {
        if (c == OPT_URL)
            client->url = optarg;
        else if (c == OPT_TOKEN_FILE)
            token_file = optarg;
        else if (c == 'h' || c == '?') {
            command->usage(c == 'h' ? stdout : stderr);
            return c == 'h' ? KB_EXIT_OK : KB_EXIT_USAGE;
        } else
            on_flag(c, optarg, arg);
    }
    if (argc - optind != command->args || (command->args && !*argv[optind])) {
        command->usage(stderr);
        return KB_EXIT_USAGE;
    }
    return s_client_setup(client, token_file) < 0 ? KB_EXIT_USAGE : -1;
}

/*  GET path as JSON: the answer (caller owns it), or NULL after printing
    why. */
static json_t *s_get(const kb_client_t *self, const char *path)
{
    kb_error_t err;
    json_t *answer = path ? kb_cli_get_json(&self->daemon, path, &err) : NULL;
    if (!answer)
        fprintf(stderr, "%s: %s\n", self->prog, path ? err.message : "out of memory");
    return answer;
}

/*  "/processes/<id escaped><after>". Caller owns the result; NULL without
    memory. */
static char *s_process_path(const char *id, const char *after)
{
    kb_buf_t path = KB_BUF_INIT;
    kb_buf_puts(&path, "/processes/");
    kb_cli_url_escape(&path, id);
    kb_buf_puts(&path, after);
    return kb_buf_take(&path, NULL);
}

static void s_print_json(json_t *json)
{
    json_dumpf(json, stdout, JSON_INDENT(2));
    fputc('\n', stdout);
}

/*  GET path and print it: the daemon's JSON (json_out), else the table
    that print makes of the answer's array under key. Frees the client's
    token. The exit status. */
static int s_show(kb_client_t *client, const char *path, bool json_out, const char *key,
                  void (*print)(json_t *array))
{
    json_t *answer = s_get(client, path);
    free(client->token);
    client->token = NULL;
    if (!answer)
        return KB_EXIT_FAILED;
    if (json_out)
        s_print_json(answer);
    else
        print(json_object_get(answer, key));
    json_decref(answer);
    return KB_EXIT_OK;
}

/* ---- what a person reads ------------------------------------------------------------ */

/*  An ISO 8601 UTC time of the daemon ("2026-01-02T03:04:05.678Z") as
    seconds since the epoch; -1 when it is not one. */
static double s_parse_time(const char *iso)
{
    struct tm tm = { 0 };
    int ms = 0;
    if (!iso
        || sscanf(iso, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms)
               < 6)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (double)timegm(&tm) + ms / 1000.0;
}

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/*  A span of seconds for a person: "0.42s", "12s", "3m05s", "2h10m", "4d3h". */
static const char *s_span(double s, char *out, size_t len)
{
    long long whole = (long long)s;
    if (s < 0)
        snprintf(out, len, "-");
    else if (s < 10)
        snprintf(out, len, "%.2fs", s);
    else if (whole < 60)
        snprintf(out, len, "%llds", whole);
    else if (whole < 3600)
        snprintf(out, len, "%lldm%02llds", whole / 60, whole % 60);
    else if (whole < 86400)
        snprintf(out, len, "%lldh%02lldm", whole / 3600, whole % 3600 / 60);
    else
        snprintf(out, len, "%lldd%lldh", whole / 86400, whole % 86400 / 3600);
    return out;
}

/*  How long ago an ISO time was: "12s ago", or "-". */
static const char *s_ago(const char *iso, char *out, size_t len)
{
    double at = s_parse_time(iso);
    char span[32];
    if (at < 0)
        snprintf(out, len, "-");
    else
        snprintf(out, len, "%s ago", s_span(s_now() - at, span, sizeof span));
    return out;
}

/*  Bytes for a person: "512B", "70.1M". */
static const char *s_bytes(json_t *value, char *out, size_t len)
{
    static const char units[] = "BKMGT";
    if (!json_is_integer(value))
        return snprintf(out, len, "-"), out;
    double n = (double)json_integer_value(value);
    size_t unit = 0;
    while (n >= 1024 && unit + 1 < sizeof units - 1) {
        n /= 1024;
        unit++;
    }
    snprintf(out, len, unit ? "%.1f%c" : "%.0f%c", n, units[unit]);
    return out;
}

static const char *s_str(json_t *object, const char *key)
{
    const char *value = json_string_value(json_object_get(object, key));
    return value ? value : "-";
}

/* ---- kernelbridge contexts ---------------------------------------------------------- */

static void s_contexts_usage(FILE *out)
{
    fprintf(out, "usage: kernelbridge contexts [--all] [--json] [--url URL] [--token-file FILE]\n"
                 "\n"
                 "List the contexts of a running daemon: id, language, state, generation,\n"
                 "memory in use, last activity and working directory.\n"
                 "\n"
                 "  -a, --all          default contexts too (default-<language>)\n"
                 "  -j, --json         the daemon's JSON ({\"contexts\": [...]})\n");
    kb_cli_client_help(out);
}

static void s_print_contexts(json_t *contexts)
{
    printf("%-24s %-10s %-8s %4s %8s %-14s %s\n", "ID", "LANGUAGE", "STATE", "GEN", "MEMORY",
           "LAST ACTIVITY", "CWD");
    size_t i;
    json_t *ctx;
    json_array_foreach(contexts, i, ctx)
    {
        char memory[32], ago[48];
        json_t *resources = json_object_get(ctx, "resources");
        printf("%-24s %-10s %-8s %4lld %8s %-14s %s\n", s_str(ctx, "context_id"),
               s_str(ctx, "language"), s_str(ctx, "state"),
               (long long)json_integer_value(json_object_get(ctx, "generation")),
               s_bytes(json_object_get(resources, "memory_bytes"), memory, sizeof memory),
               s_ago(json_string_value(json_object_get(ctx, "last_activity_at")), ago, sizeof ago),
               s_str(ctx, "cwd"));
    }
}

typedef struct {
    bool all, json;
} kb_contexts_flags_t;

static void s_contexts_flag(int flag, const char *value, void *arg)
{
    (void)value;
    kb_contexts_flags_t *f = arg;
    if (flag == 'a')
        f->all = true;
    else if (flag == 'j')
        f->json = true;
}

int kb_cli_contexts(int argc, char **argv)
{
    static const struct option options[] = { { "all", no_argument, NULL, 'a' },
                                             { "json", no_argument, NULL, 'j' },
                                             { NULL, 0, NULL, 0 } };
    static const kb_command_t command = { "aj", options, s_contexts_usage, 0 };
    kb_client_t client = { .prog = "kernelbridge contexts" };
    kb_contexts_flags_t f = { false, false };
    int rc = kb_cli_client_parse(&client, &command, argc, argv, s_contexts_flag, &f);
    if (rc >= 0)
        return rc;
    return s_show(&client, f.all ? "/contexts?all=true" : "/contexts", f.json, "contexts",
                  s_print_contexts);
}

/* ---- kernelbridge ps ------------------------------------------------------------------ */

static void s_ps_usage(FILE *out)
{
    fprintf(out, "usage: kernelbridge ps [--context ID] [--state running|terminal] [--json]\n"
                 "                       [--url URL] [--token-file FILE]\n"
                 "\n"
                 "List the process records (runs) a running daemon keeps: id, context,\n"
                 "state (or how it ended), start and duration.\n"
                 "\n"
                 "  -c, --context ID   the runs of one context\n"
                 "  -s, --state S      running or terminal\n"
                 "  -j, --json         the daemon's JSON ({\"processes\": [...]})\n");
    kb_cli_client_help(out);
}

/*  "running", "exited 0", "timed_out SIGINT", ... */
static const char *s_outcome(json_t *proc, char *out, size_t len)
{
    const char *reason = json_string_value(json_object_get(proc, "reason"));
    json_t *code = json_object_get(proc, "exit_code");
    const char *signal = json_string_value(json_object_get(proc, "signal"));
    if (!reason)
        snprintf(out, len, "%s", s_str(proc, "state"));
    else if (signal)
        snprintf(out, len, "%s %s", reason, signal);
    else if (json_is_integer(code))
        snprintf(out, len, "%s %lld", reason, (long long)json_integer_value(code));
    else
        snprintf(out, len, "%s", reason);
    return out;
}

static void s_print_processes(json_t *processes)
{
    printf("%-22s %-24s %-20s %-10s %s\n", "ID", "CONTEXT", "STATE", "STARTED", "DURATION");
    size_t i;
    json_t *proc;
    json_array_foreach(processes, i, proc)
    {
        char outcome[64], ago[48], span[32];
        double started = s_parse_time(json_string_value(json_object_get(proc, "started_at")));
        double ended = s_parse_time(json_string_value(json_object_get(proc, "ended_at")));
        double until = ended >= 0 ? ended : s_now();
        printf("%-22s %-24s %-20s %-10s %s\n", s_str(proc, "process_id"), s_str(proc, "context_id"),
               s_outcome(proc, outcome, sizeof outcome),
               s_ago(json_string_value(json_object_get(proc, "started_at")), ago, sizeof ago),
               s_span(started >= 0 ? until - started : -1, span, sizeof span));
    }
}

/*  "/processes" with the query of the filters given. Caller owns the
    result; NULL without memory. */
static char *s_ps_path(const char *context, const char *state)
{
    kb_buf_t path = KB_BUF_INIT;
    kb_buf_puts(&path, "/processes");
    if (context) {
        kb_buf_puts(&path, "?context_id=");
        kb_cli_url_escape(&path, context);
    }
    if (state) {
        kb_buf_puts(&path, context ? "&state=" : "?state=");
        kb_cli_url_escape(&path, state);
    }
    return kb_buf_take(&path, NULL);
}

typedef struct {
    const char *context, *state;
    bool json;
} kb_ps_flags_t;

static void s_ps_flag(int flag, const char *value, void *arg)
{
    kb_ps_flags_t *f = arg;
    if (flag == 'c')
        f->context = value;
    else if (flag == 's')
        f->state = value;
    else if (flag == 'j')
        f->json = true;
}

int kb_cli_ps(int argc, char **argv)
{
    static const struct option options[] = { { "context", required_argument, NULL, 'c' },
                                             { "state", required_argument, NULL, 's' },
                                             { "json", no_argument, NULL, 'j' },
                                             { NULL, 0, NULL, 0 } };
    static const kb_command_t command = { "c:s:j", options, s_ps_usage, 0 };
    kb_client_t client = { .prog = "kernelbridge ps" };
    kb_ps_flags_t f = { NULL, NULL, false };
    int rc = kb_cli_client_parse(&client, &command, argc, argv, s_ps_flag, &f);
    if (rc >= 0)
        return rc;
    const char *context = f.context, *state = f.state;
    char *path = s_ps_path(context, state);
    int shown
        = path ? s_show(&client, path, f.json, "processes", s_print_processes) : KB_EXIT_FAILED;
    free(path);
    return shown;
}

/* ---- kernelbridge logs ---------------------------------------------------------------- */

static void s_logs_usage(FILE *out)
{
    fprintf(out, "usage: kernelbridge logs [--follow] [--url URL] [--token-file FILE] PROCESS_ID\n"
                 "\n"
                 "Print a run's output as the daemon keeps it: stdout to stdout, stderr and\n"
                 "the daemon's own notes to stderr.\n"
                 "\n"
                 "  -f, --follow       go on printing as the run writes, until it ends\n");
    kb_cli_client_help(out);
}

/*  One log frame {channel, data} to where it belongs. */
static void s_print_frame(json_t *frame)
{
    const char *channel = json_string_value(json_object_get(frame, "channel"));
    const char *data = json_string_value(json_object_get(frame, "data"));
    if (!channel || !data)
        return;
    if (strcmp(channel, "stdout") == 0) {
        fputs(data, stdout);
        fflush(stdout);
        return;
    }
    fputs(data, stderr);
    size_t len = strlen(data);
    if (strcmp(channel, "system") == 0 && (len == 0 || data[len - 1] != '\n'))
        fputc('\n', stderr);
    fflush(stderr);
}

/*  The frames kept now, page by page. 0 or -1 (printed). */
static int s_logs_print(const kb_client_t *client, const char *id)
{
    long long cursor = -1;
    for (;;) {
        char after[64] = "/logs";
        if (cursor >= 0)
            snprintf(after, sizeof after, "/logs?cursor=%lld", cursor);
        char *path = s_process_path(id, after);
        json_t *answer = s_get(client, path);
        free(path);
        if (!answer)
            return -1;
        json_t *frames = json_object_get(answer, "frames");
        size_t i;
        json_t *frame;
        json_array_foreach(frames, i, frame) s_print_frame(frame);
        bool more = json_array_size(frames) > 0 && !json_is_true(json_object_get(answer, "eof"));
        cursor = json_integer_value(json_object_get(answer, "next_cursor"));
        json_decref(answer);
        if (!more)
            return 0;
    }
}

/*  One event of the logs stream: a frame to print, or the run's end. */
static int s_logs_event(const char *event, const char *data, void *arg, kb_error_t *err)
{
    (void)arg;
    if (strcmp(event, "eof") == 0)
        return 1;
    if (strcmp(event, "log") != 0)
        return 0;
    json_t *frame = json_loads(data, 0, NULL);
    if (!frame) {
        kb_error_set(err, KB_ERR_INTERNAL, "a log event that is not JSON: %.80s", data);
        return -1;
    }
    s_print_frame(frame);
    json_decref(frame);
    return 0;
}

/*  Follow the logs over SSE until the run has ended. 0 or -1 (printed). */
static int s_logs_follow(const kb_client_t *client, const char *id)
{
    kb_error_t err = { KB_ERR_INTERNAL, "out of memory" };
    char *path = s_process_path(id, "/logs?follow=true");
    int rc = path ? kb_cli_get_events(&client->daemon, path, s_logs_event, NULL, &err) : -1;
    if (rc < 0)
        fprintf(stderr, "%s: %s\n", client->prog, err.message);
    free(path);
    return rc;
}

static void s_logs_flag(int flag, const char *value, void *arg)
{
    (void)value;
    if (flag == 'f')
        *(bool *)arg = true;
}

int kb_cli_logs(int argc, char **argv)
{
    static const struct option options[]
        = { { "follow", no_argument, NULL, 'f' }, { NULL, 0, NULL, 0 } };
    static const kb_command_t command = { "f", options, s_logs_usage, 1 };
    kb_client_t client = { .prog = "kernelbridge logs" };
    bool follow = false;
    int parsed = kb_cli_client_parse(&client, &command, argc, argv, s_logs_flag, &follow);
    if (parsed >= 0)
        return parsed;
    int rc = follow ? s_logs_follow(&client, argv[optind]) : s_logs_print(&client, argv[optind]);
    free(client.token);
    return rc == 0 ? KB_EXIT_OK : KB_EXIT_FAILED;
}
