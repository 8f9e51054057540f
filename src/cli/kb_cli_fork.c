/*  kb_cli_fork.c - `kernelbridge fork`, `checkpoint` and `restore`: a person
    at a terminal forks, checkpoints and restores a context of a running
    daemon over its native HTTP API (SPEC section 13). What they print is
    made for scripts (one id a line) or a person (the checkpoint table), or
    is the daemon's JSON as it came (--json).

    Not for the flags every client command shares, nor the listings
    (kb_cli_client.c), nor HTTP itself (kb_cli_http.c). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/kb_cli.h"
#include "cli/kb_cli_client.h"
#include "cli/kb_cli_serve_values.h"
#include "kernelbridge.h"
#include "util/kb_buf.h"

/*  The most forks one request makes (SPEC section 13), so the most --id. */
#define KB_CLI_MAX_FORKS 64

/*  "/contexts/<context escaped><after><item escaped>" (item may be NULL).
    Caller owns the result; NULL without memory. */
static char *s_context_path(const char *context, const char *after, const char *item)
{
    kb_buf_t path = KB_BUF_INIT;
    kb_buf_puts(&path, "/contexts/");
    kb_cli_url_escape(&path, context);
    kb_buf_puts(&path, after);
    if (item)
        kb_cli_url_escape(&path, item);
    return kb_buf_take(&path, NULL);
}

/*  method /contexts/<context><after><item> with body (stolen; NULL: none),
    as the client: the answer (caller owns it; json_null() for a 204), or
    NULL after printing why. Frees the client's token. */
static json_t *s_ask(kb_client_t *client, const char *method, const char *context,
                     const char *after, const char *item, json_t *body)
{
    kb_error_t err;
    char *path = s_context_path(context, after, item);
    json_t *answer = path ? kb_cli_request_json(&client->daemon, method, path, body, &err) : NULL;
    if (!answer)
        fprintf(stderr, "%s: %s\n", client->prog, path ? err.message : "out of memory");
    free(path);
    json_decref(body);
    free(client->token);
    client->token = NULL;
    return answer;
}

static const char *s_str(json_t *object, const char *key)
{
    const char *value = json_string_value(json_object_get(object, key));
    return value ? value : "-";
}

static void s_print_json(json_t *json)
{
    json_dumpf(json, stdout, JSON_INDENT(2));
    fputc('\n', stdout);
}

/* ---- kernelbridge fork ------------------------------------------------------------- */

static void s_fork_usage(FILE *out)
{
    fprintf(out,
            "usage: kernelbridge fork CONTEXT [--count N] [--id ID]... [--memory-limit SIZE]\n"
            "                         [--pids-limit N] [--json] [--url URL] [--token-file FILE]\n"
            "\n"
            "Fork a context of a running daemon: N new contexts (1 to 64) holding what\n"
            "the context's namespace holds now; the context itself is not disturbed.\n"
            "Prints the new contexts' ids, one a line.\n"
            "\n"
            "  -n, --count N      how many forks (default 1, or one per --id)\n"
            "  -i, --id ID        a fork's context id (repeat for several; default ctx_...)\n"
            "  --memory-limit SIZE\n"
            "                     each fork's memory limit in bytes (K, M, G allowed;\n"
            "                     default the context's)\n"
            "  --pids-limit N     each fork's process limit (default the context's)\n"
            "  -j, --json         the daemon's JSON ({\"contexts\": [...]})\n");
    kb_cli_client_help(out);
}

enum { OPT_MEMORY_LIMIT = 0x200, OPT_PIDS_LIMIT };

typedef struct {
    const char *count, *memory_limit, *pids_limit;
    const char *ids[KB_CLI_MAX_FORKS];
    size_t n_ids;
    bool too_many_ids, json;
} kb_fork_flags_t;

static void s_fork_flag(int flag, const char *value, void *arg)
{
    kb_fork_flags_t *f = arg;
    if (flag == 'n')
        f->count = value;
    else if (flag == 'i' && f->n_ids < KB_CLI_MAX_FORKS)
        f->ids[f->n_ids++] = value;
    else if (flag == 'i')
        f->too_many_ids = true;
    else if (flag == OPT_MEMORY_LIMIT)
        f->memory_limit = value;
    else if (flag == OPT_PIDS_LIMIT)
        f->pids_limit = value;
    else if (flag == 'j')
        f->json = true;
}

/*  Put flag's value (parse: a count, or bytes) under key in body. 0, or -1
    after a message. */
static int s_put_number(json_t *body, const char *key, const char *flag, const char *value,
                        int (*parse)(const char *what, const char *value, size_t *out))
{
    size_t n;
    if (!value)
        return 0;
    if (parse(flag, value, &n) < 0)
        return -1;
    if (json_object_set_new(body, key, json_integer((json_int_t)n)) < 0) {
        fprintf(stderr, "kernelbridge fork: out of memory\n");
        return -1;
    }
    return 0;
}

/*  The body of POST /contexts/{id}/fork from the flags (caller owns it),
    or NULL after a message. The daemon checks the values' ranges. */
static json_t *s_fork_body(const kb_fork_flags_t *f)
{
    json_t *body = json_object();
    json_t *ids = f->n_ids ? json_array() : NULL;
    if (!body || (f->n_ids && !ids))
        goto oom;
    for (size_t i = 0; i < f->n_ids; i++)
        if (json_array_append_new(ids, json_string(f->ids[i])) < 0)
            goto oom;
    if (ids && json_object_set_new(body, "context_ids", ids) < 0) {
        ids = NULL;
        goto oom;
    }
    ids = NULL;
    if (s_put_number(body, "count", "--count", f->count, kb_serve_parse_count) < 0
        || s_put_number(body, "memory_limit", "--memory-limit", f->memory_limit,
                        kb_serve_parse_bytes)
               < 0
        || s_put_number(body, "pids_limit", "--pids-limit", f->pids_limit, kb_serve_parse_count)
               < 0) {
        json_decref(body);
        return NULL;
    }
    return body;
oom:
    fprintf(stderr, "kernelbridge fork: out of memory\n");
    json_decref(ids);
    json_decref(body);
    return NULL;
}

int kb_cli_fork(int argc, char **argv)
{
    static const struct option options[]
        = { { "count", required_argument, NULL, 'n' },
            { "id", required_argument, NULL, 'i' },
            { "memory-limit", required_argument, NULL, OPT_MEMORY_LIMIT },
            { "pids-limit", required_argument, NULL, OPT_PIDS_LIMIT },
            { "json", no_argument, NULL, 'j' },
            { NULL, 0, NULL, 0 } };
    static const kb_command_t command = { "n:i:j", options, s_fork_usage, 1 };
    kb_client_t client = { .prog = "kernelbridge fork" };
    kb_fork_flags_t f = { 0 };
    int rc = kb_cli_client_parse(&client, &command, argc, argv, s_fork_flag, &f);
    if (rc >= 0)
        return rc;
    const char *context = argv[optind];
    json_t *body = NULL;
    if (f.too_many_ids)
        fprintf(stderr, "kernelbridge fork: at most %d --id\n", KB_CLI_MAX_FORKS);
    if (f.too_many_ids || !(body = s_fork_body(&f))) {
        free(client.token);
        return KB_EXIT_USAGE;
    }
    json_t *answer = s_ask(&client, "POST", context, "/fork", NULL, body);
    if (!answer)
        return KB_EXIT_FAILED;
    if (f.json)
        s_print_json(answer);
    else {
        size_t i;
        json_t *ctx;
        json_array_foreach(json_object_get(answer, "contexts"), i, ctx)
            printf("%s\n", s_str(ctx, "context_id"));
    }
    json_decref(answer);
    return KB_EXIT_OK;
}

/* ---- kernelbridge checkpoint -------------------------------------------------------- */

static void s_checkpoint_usage(FILE *out)
{
    fprintf(out, "usage: kernelbridge checkpoint CONTEXT [--list | --delete CHECKPOINT] [--json]\n"
                 "                               [--url URL] [--token-file FILE]\n"
                 "\n"
                 "Checkpoint a context of a running daemon (a frozen fork of its kernel as it\n"
                 "is now, for 'kernelbridge restore') and print the checkpoint's id; or list\n"
                 "its checkpoints, oldest first; or delete one.\n"
                 "\n"
                 "  -l, --list         list the context's checkpoints: id, execution count,\n"
                 "                     memory they cost, when they were made\n"
                 "  -d, --delete CP    delete checkpoint CP of the context\n"
                 "  -j, --json         the daemon's JSON\n");
    kb_cli_client_help(out);
}

typedef struct {
    bool list, json;
    const char *delete;
} kb_checkpoint_flags_t;

static void s_checkpoint_flag(int flag, const char *value, void *arg)
{
    kb_checkpoint_flags_t *f = arg;
    if (flag == 'l')
        f->list = true;
    else if (flag == 'd')
        f->delete = value;
    else if (flag == 'j')
        f->json = true;
}

static void s_print_checkpoints(json_t *checkpoints)
{
    printf("%-24s %5s %10s %s\n", "CHECKPOINT", "EXEC", "MEMORY", "CREATED");
    size_t i;
    json_t *cp;
    json_array_foreach(checkpoints, i, cp)
    {
        double mib = (double)json_integer_value(json_object_get(cp, "memory_bytes")) / 1048576.0;
        printf("%-24s %5lld %6.1f MiB %s\n", s_str(cp, "checkpoint_id"),
               (long long)json_integer_value(json_object_get(cp, "execution_count")), mib,
               s_str(cp, "created_at"));
    }
}

int kb_cli_checkpoint(int argc, char **argv)
{
    static const struct option options[] = { { "list", no_argument, NULL, 'l' },
                                             { "delete", required_argument, NULL, 'd' },
                                             { "json", no_argument, NULL, 'j' },
                                             { NULL, 0, NULL, 0 } };
    static const kb_command_t command = { "ld:j", options, s_checkpoint_usage, 1 };
    kb_client_t client = { .prog = "kernelbridge checkpoint" };
    kb_checkpoint_flags_t f = { false, false, NULL };
    int rc = kb_cli_client_parse(&client, &command, argc, argv, s_checkpoint_flag, &f);
    if (rc >= 0)
        return rc;
    const char *context = argv[optind];
    if (f.list && f.delete) {
        free(client.token);
        fprintf(stderr, "kernelbridge checkpoint: --list or --delete, not both\n");
        return KB_EXIT_USAGE;
    }
    json_t *answer;
    if (f.list)
        answer = s_ask(&client, "GET", context, "/checkpoints", NULL, NULL);
    else if (f.delete)
        answer = s_ask(&client, "DELETE", context, "/checkpoints/", f.delete, NULL);
    else
        answer = s_ask(&client, "POST", context, "/checkpoints", NULL, json_object());
    if (!answer)
        return KB_EXIT_FAILED;
    if (f.delete) /* 204: nothing to print */
        json_decref(answer);
    else if (f.json)
        s_print_json(answer);
    else if (f.list)
        s_print_checkpoints(json_object_get(answer, "checkpoints"));
    else
        printf("%s\n", s_str(answer, "checkpoint_id"));
    if (!f.delete)
        json_decref(answer);
    return KB_EXIT_OK;
}

/* ---- kernelbridge restore ----------------------------------------------------------- */

static void s_restore_usage(FILE *out)
{
    fprintf(out, "usage: kernelbridge restore CONTEXT CHECKPOINT [--json] [--url URL]\n"
                 "                            [--token-file FILE]\n"
                 "\n"
                 "Put a context of a running daemon back to one of its checkpoints: its kernel\n"
                 "becomes a fork of the checkpoint (its generation grows by one); the\n"
                 "checkpoint stays and can be restored again. Prints the context's id and\n"
                 "new generation.\n"
                 "\n"
                 "  -j, --json         the daemon's JSON of the context\n");
    kb_cli_client_help(out);
}

static void s_restore_flag(int flag, const char *value, void *arg)
{
    (void)value;
    if (flag == 'j')
        *(bool *)arg = true;
}

int kb_cli_restore(int argc, char **argv)
{
    static const struct option options[]
        = { { "json", no_argument, NULL, 'j' }, { NULL, 0, NULL, 0 } };
    static const kb_command_t command = { "j", options, s_restore_usage, 2 };
    kb_client_t client = { .prog = "kernelbridge restore" };
    bool json = false;
    int rc = kb_cli_client_parse(&client, &command, argc, argv, s_restore_flag, &json);
    if (rc >= 0)
        return rc;
    const char *context = argv[optind], *checkpoint = argv[optind + 1];
    json_t *body = json_pack("{s:s}", "checkpoint_id", checkpoint);
    if (!body) {
        free(client.token);
        fprintf(stderr, "kernelbridge restore: out of memory\n");
        return KB_EXIT_FAILED;
    }
    json_t *answer = s_ask(&client, "POST", context, "/restore", NULL, body);
    if (!answer)
        return KB_EXIT_FAILED;
    if (json)
        s_print_json(answer);
    else
        printf("%s generation %lld\n", s_str(answer, "context_id"),
               (long long)json_integer_value(json_object_get(answer, "generation")));
    json_decref(answer);
    return KB_EXIT_OK;
}
