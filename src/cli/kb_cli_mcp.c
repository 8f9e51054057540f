/*  kb_cli_mcp.c - `kernelbridge mcp`: MCP over stdio (SPEC section 14).
    One JSON-RPC message (or batch) per line on stdin, one per line on
    stdout, logs on stderr only. In-process (the default), the service runs
    here on a state dir of its own (a fresh one removed at exit, or
    --state-dir) and kb_mcp.c answers; a tools/call runs on a thread of its
    own so that a notifications/cancelled can reach it. With --url the
    lines are relayed to a running daemon's /mcp (kb_cli_mcp_relay.c). */
#include "cli/kb_cli.h"
#include "cli/kb_cli_mcp.h"
#include "server/kb_mcp.h"
#include "util/kb_alloc.h"
#include "util/kb_buf.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*  A line longer than this is refused (as a body over --max-body is). */
#define KB_MCP_LINE_MAX (16u << 20)

/* ---- Output ------------------------------------------------------------------ */

static pthread_mutex_t s_out_lock = PTHREAD_MUTEX_INITIALIZER;

void kb_cli_mcp_write(void *arg, json_t *message)
{
    (void)arg;
    if (!message)
        return;
    char *text = json_dumps(message, JSON_COMPACT);
    json_decref(message);
    if (!text)
        return;
    pthread_mutex_lock(&s_out_lock);
    fputs(text, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(&s_out_lock);
    free(text);
}

int kb_cli_mcp_in_init(kb_cli_mcp_in_t *in)
{
    *in = (kb_cli_mcp_in_t){ .buf = KB_BUF_INIT, .sfd = -1 };
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0)
        return -1;
    in->sfd = signalfd(-1, &set, SFD_CLOEXEC);
    return in->sfd >= 0 ? 0 : -1;
}

void kb_cli_mcp_in_clear(kb_cli_mcp_in_t *in)
{
    kb_buf_free(&in->buf);
    if (in->sfd >= 0)
        close(in->sfd);
    in->sfd = -1;
}

bool kb_cli_mcp_signalled(kb_cli_mcp_in_t *in, int ms)
{
    struct pollfd p = { .fd = in->sfd, .events = POLLIN };
    return poll(&p, 1, ms) > 0;
}

/*  A whole line in buf: into line (or dropped), 1; else 0. */
static int s_take_line(kb_cli_mcp_in_t *in, kb_buf_t *line, bool *too_long)
{
    char *nl = in->buf.len ? memchr(in->buf.data, '\n', in->buf.len) : NULL;
    if (!nl && !(in->eof && in->buf.len))
        return 0;
    size_t len = nl ? (size_t)(nl - in->buf.data) : in->buf.len;
    *too_long = in->skipping;
    in->skipping = false;
    if (!*too_long && kb_buf_append(line, in->buf.data, len) != KB_BUF_OK) {
        *too_long = true;
        kb_buf_reset(line);
    }
    size_t used = nl ? len + 1 : len;
    memmove(in->buf.data, in->buf.data + used, in->buf.len - used);
    kb_buf_truncate(&in->buf, in->buf.len - used);
    return 1;
}

int kb_cli_mcp_next_line(kb_cli_mcp_in_t *in, kb_buf_t *line, bool *too_long)
{
    kb_buf_reset(line);
    for (;;) {
        if (s_take_line(in, line, too_long))
            return 1;
        if (in->eof)
            return 0;
        if (in->buf.len > KB_MCP_LINE_MAX) {
            in->skipping = true; /* the rest of this line is dropped */
            kb_buf_reset(&in->buf);
        }
        struct pollfd p[2]
            = { { .fd = STDIN_FILENO, .events = POLLIN }, { .fd = in->sfd, .events = POLLIN } };
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            return -1;
        if (p[1].revents)
            return -1;
        if (!p[0].revents)
            continue;
        char chunk[65536];
        ssize_t n = read(STDIN_FILENO, chunk, sizeof chunk);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            in->eof = true;
        else if (kb_buf_append(&in->buf, chunk, (size_t)n) != KB_BUF_OK)
            return -1;
    }
}

/* ---- In-process ---------------------------------------------------------------- */

typedef struct {
    kb_mcp_t *mcp;
    kb_mcp_session_t *session; /* the client's, borrowed from the table */
    json_t *message;
} s_call_t;

static void *s_call_thread(void *arg)
{
    s_call_t *call = arg;
    kb_mcp_session_t *session = call->session;
    kb_cli_mcp_write(NULL,
                     kb_mcp_handle(call->mcp, &session, call->message, kb_cli_mcp_write, NULL));
    kb_mcp_t *mcp = call->mcp;
    json_decref(call->message);
    free(call);
    kb_mcp_worker_end(mcp);
    return NULL;
}

/*  A tools/call on a thread of its own; inline when none can start. */
static void s_call_async(kb_mcp_t *mcp, kb_mcp_session_t **session, json_t *message)
{
    s_call_t *call = kb_xcalloc(1, sizeof *call);
    *call = (s_call_t){ mcp, *session, json_incref(message) };
    kb_mcp_worker_begin(mcp);
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&thread, &attr, s_call_thread, call) != 0)
        s_call_thread(call);
    pthread_attr_destroy(&attr);
}

static void s_serve_line(kb_mcp_t *mcp, kb_mcp_session_t **session, const kb_buf_t *line)
{
    json_t *error = NULL;
    json_t *message = kb_mcp_parse(line->data, line->len, &error);
    if (!message) {
        kb_cli_mcp_write(NULL, error);
        return;
    }
    const char *method = kb_mcp_request_method(message);
    if (json_is_array(message))
        kb_cli_mcp_write(NULL, kb_mcp_handle_batch(mcp, session, message));
    else if (method && strcmp(method, "tools/call") == 0 && *session)
        s_call_async(mcp, session, message);
    else
        kb_cli_mcp_write(NULL, kb_mcp_handle(mcp, session, message, kb_cli_mcp_write, NULL));
    json_decref(message);
}

static int s_serve_in_process(const kb_cli_mcp_opts_t *o, kb_cli_mcp_in_t *in)
{
    kb_service_config_t config
        = { .state_dir = o->state_dir, .pool = (const char *const *)o->pool.items };
    kb_error_t err = { KB_OK, "" };
    kb_service_t *service = kb_service_new(&config, &err);
    if (!service) {
        fprintf(stderr, "kernelbridge mcp: %s\n", err.message);
        return 1;
    }
    kb_mcp_config_t mcp_config = { .max_text = o->max_text };
    kb_mcp_t *mcp = kb_mcp_new(service, &mcp_config);
    kb_mcp_session_t *session = NULL;
    kb_buf_t line = KB_BUF_INIT;
    bool too_long;
    int rc;
    while ((rc = kb_cli_mcp_next_line(in, &line, &too_long)) > 0) {
        if (too_long)
            kb_cli_mcp_write(NULL,
                             kb_mcp_error(NULL, KB_RPC_INVALID_REQUEST, KB_ERR_PAYLOAD_TOO_LARGE,
                                          NULL, "Invalid Request: a message over 16 MiB"));
        else if (line.len > 0)
            s_serve_line(mcp, &session, &line);
    }
    kb_buf_free(&line);
    /* stdin closed: the calls out finish first (a signal stops them: their
       runs end as sandbox_stopped); a signal stops at once. */
    if (rc < 0)
        kb_service_stop(service);
    while (kb_mcp_workers(mcp) > 0)
        if (kb_cli_mcp_signalled(in, 100))
            kb_service_stop(service);
    kb_service_stop(service);
    kb_mcp_session_release(mcp, &session);
    kb_mcp_destroy(&mcp);
    kb_service_destroy(&service);
    return 0;
}

/* ---- Options --------------------------------------------------------------------- */

static void s_usage(FILE *out)
{
    fprintf(out,
            "usage: kernelbridge mcp [--state-dir DIR] [--pool LANG=N] [--mcp-max-text BYTES]\n"
            "       kernelbridge mcp --url URL [--token-file FILE]\n"
            "\n"
            "Speak MCP (the Model Context Protocol) on stdin/stdout, for an AI agent's\n"
            "MCP client; logs go to stderr.\n"
            "\n"
            "  --state-dir DIR        keep contexts and run records there (one server at a\n"
            "                         time); default: a fresh dir removed at exit\n"
            "  --pool LANG=N          keep N kernels of LANG started and ready (repeatable);\n"
            "                         default: none, kernels start on first use\n"
            "  --mcp-max-text BYTES   text of a tool call's result (default 1M)\n"
            "  --url URL              relay to a running daemon's /mcp instead\n"
            "  --token-file FILE      its token (the file's first line); else KB_TOKEN\n");
}

static int s_parse(kb_cli_mcp_opts_t *o, int argc, char **argv)
{
    static const struct option longs[] = { { "state-dir", required_argument, NULL, 's' },
                                           { "pool", required_argument, NULL, 'p' },
                                           { "mcp-max-text", required_argument, NULL, 'm' },
                                           { "url", required_argument, NULL, 'u' },
                                           { "token-file", required_argument, NULL, 't' },
                                           { "help", no_argument, NULL, 'h' },
                                           { NULL, 0, NULL, 0 } };
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
            case 's':
                o->state_dir = optarg;
                break;
            case 'p':
                if (kb_strv_pushn(&o->pool, optarg, strlen(optarg)) != KB_BUF_OK)
                    return -1;
                break;
            case 'm':
                o->max_text = strtoull(optarg, &end, 10);
                if (end && (*end == 'K' || *end == 'k'))
                    o->max_text <<= 10, end++;
                else if (end && (*end == 'M' || *end == 'm'))
                    o->max_text <<= 20, end++;
                if (!end || *end || o->max_text == 0) {
                    fprintf(stderr, "kernelbridge mcp: --mcp-max-text: bytes, e.g. 1M\n");
                    return -1;
                }
                break;
            case 'u':
                o->url = optarg;
                break;
            case 't':
                o->token_file = optarg;
                break;
            case 'h':
                s_usage(stdout);
                return 1;
            default:
                s_usage(stderr);
                return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kernelbridge mcp: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return 0;
}

int kb_cli_mcp(int argc, char **argv)
{
    kb_cli_mcp_opts_t o = { .pool = KB_STRV_INIT };
    int rc = s_parse(&o, argc, argv);
    int status = rc > 0 ? 0 : 2;
    kb_cli_mcp_in_t in;
    if (rc == 0 && kb_cli_mcp_in_init(&in) < 0) {
        fprintf(stderr, "kernelbridge mcp: cannot watch signals\n");
        rc = -1;
    }
    if (rc == 0) {
        status = o.url ? kb_cli_mcp_relay(&o, &in) : s_serve_in_process(&o, &in);
        kb_cli_mcp_in_clear(&in);
    }
    kb_strv_clear(&o.pool);
    return status;
}
