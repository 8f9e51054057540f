/*  kb_cli_mcp_relay.c - `kernelbridge mcp --url URL`: stdio's lines relayed
    to a running daemon's /mcp (Streamable HTTP), each message one POST
    (kb_cli_http.c's client), its answer (JSON, or an SSE stream written
    out event by event) back on stdout. Requests go
    on threads of their own, so that a notifications/cancelled reaches
    the daemon while its call runs. The session id and revision the
    daemon gave at initialize go with every later POST; at the end of
    stdin the session is deleted. */
#include "cli/kb_cli.h"
#include "cli/kb_cli_http.h"
#include "cli/kb_cli_mcp.h"
#include "server/kb_mcp.h"
#include "util/kb_alloc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct {
    kb_cli_daemon_t daemon;
    char *token;
    pthread_mutex_t lock; /* session, version */
    char session[KB_MCP_SESSION_ID_MAX + 1];
    char version[16];
    pthread_mutex_t calls_lock;
    pthread_cond_t calls_done;
    unsigned calls;
} s_relay_t;

/* ---- One POST ----------------------------------------------------------------- */

/*  Send method /mcp with body (may be NULL), the session's headers once
    it has one (kb_cli_http.c's sender). The answer, its head read; NULL
    with err. */
static kb_cli_reply_t *s_request(s_relay_t *r, const char *method, const char *body, size_t len,
                                 kb_error_t *err)
{
    kb_buf_t headers = KB_BUF_INIT;
    pthread_mutex_lock(&r->lock);
    if (r->session[0])
        kb_buf_printf(&headers, "Mcp-Session-Id: %s\r\nMCP-Protocol-Version: %s\r\n", r->session,
                      r->version);
    pthread_mutex_unlock(&r->lock);
    kb_cli_reply_t *reply = NULL;
    if (kb_buf_status(&headers) != KB_BUF_OK)
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
    else
        reply = kb_cli_reply_open(&r->daemon, method, "/mcp", "application/json, text/event-stream",
                                  headers.len ? kb_buf_cstr(&headers) : NULL, body, len, err);
    kb_buf_free(&headers);
    return reply;
}

/*  Each event's message as a line on stdout (kb_cli_event_fn); the
    priming event of a stream (an id, no data) is no message. */
static int s_write_event(const char *event, const char *data, void *arg, kb_error_t *err)
{
    (void)event, (void)arg, (void)err;
    if (*data)
        kb_cli_mcp_write(NULL, json_loads(data, 0, NULL));
    return 0;
}

/*  A refusal the daemon answered (400, 401, 404, 413...) as the JSON-RPC
    error of the request id (borrowed; NULL: what is no request, such as a
    line that is not JSON, whose JSON-RPC error has a null id). */
static void s_write_refusal(const json_t *id, int status, const kb_buf_t *body)
{
    json_t *answer = json_loadb(body->data ? body->data : "", body->len, 0, NULL);
    json_t *error = json_object_get(answer, "error");
    if (json_is_object(error)) {
        if (id)
            json_object_set(answer, "id", (json_t *)id);
        kb_cli_mcp_write(NULL, answer);
        return;
    }
    if (!id) {
        json_decref(answer);
        return;
    }
    const char *code = json_string_value(json_object_get(answer, "code"));
    const char *message = json_string_value(json_object_get(answer, "message"));
    char text[600];
    snprintf(text, sizeof text, "the daemon answered HTTP %d: %.500s", status,
             message ? message : "no message");
    json_t *refusal = kb_mcp_error(id, KB_RPC_INVALID_REQUEST, KB_OK, NULL, text);
    if (code)
        json_object_set_new(json_object_get(refusal, "error"), "data",
                            json_pack("{s:s}", "code", code));
    json_decref(answer);
    kb_cli_mcp_write(NULL, refusal);
}

/*  POST line (a message with id, borrowed, NULL for a notification) and
    write what comes back. */
static void s_post(s_relay_t *r, const kb_buf_t *line, const json_t *id)
{
    kb_error_t err = { KB_OK, "" };
    kb_cli_reply_t *reply = s_request(r, "POST", line->data, line->len, &err);
    kb_buf_t body = KB_BUF_INIT;
    if (!reply) {
        fprintf(stderr, "kernelbridge mcp: the daemon at %s did not answer: %s\n", r->daemon.url,
                err.message);
        if (id)
            kb_cli_mcp_write(NULL, kb_mcp_error(id, KB_RPC_INTERNAL_ERROR, KB_ERR_UNAVAILABLE, NULL,
                                                "the daemon did not answer"));
        goto done;
    }
    int status = kb_cli_reply_status(reply);
    const char *type = kb_cli_reply_header(reply, "Content-Type");
    const char *session = kb_cli_reply_header(reply, "Mcp-Session-Id");
    if (type && strncasecmp(type, "text/event-stream", 17) == 0) {
        kb_cli_reply_events(reply, s_write_event, NULL, &err);
        goto done;
    }
    kb_cli_reply_body(reply, &body, &err);
    if (status == 200 && body.len)
        kb_cli_mcp_write(NULL, json_loads(kb_buf_cstr(&body), 0, NULL));
    else if (status != 202)
        s_write_refusal(id, status, &body);
    json_t *answer = session && body.len ? json_loads(kb_buf_cstr(&body), 0, NULL) : NULL;
    const char *version
        = json_string_value(json_object_get(json_object_get(answer, "result"), "protocolVersion"));
    if (session && version) {
        pthread_mutex_lock(&r->lock);
        snprintf(r->session, sizeof r->session, "%s", session);
        snprintf(r->version, sizeof r->version, "%s", version);
        pthread_mutex_unlock(&r->lock);
    }
    json_decref(answer);
done:
    kb_cli_reply_close(&reply);
    kb_buf_free(&body);
}

/* ---- The loop ------------------------------------------------------------------ */

typedef struct {
    s_relay_t *relay;
    kb_buf_t line;
    json_t *id;
} s_job_t;

static void *s_job_thread(void *arg)
{
    s_job_t *job = arg;
    s_relay_t *r = job->relay;
    s_post(r, &job->line, job->id);
    kb_buf_free(&job->line);
    json_decref(job->id);
    free(job);
    pthread_mutex_lock(&r->calls_lock);
    if (--r->calls == 0)
        pthread_cond_broadcast(&r->calls_done);
    pthread_mutex_unlock(&r->calls_lock);
    return NULL;
}

/*  A request (but initialize, which later ones need answered first) on a
    thread of its own. */
static void s_relay_line(s_relay_t *r, const kb_buf_t *line)
{
    json_t *error = NULL;
    json_t *message = kb_mcp_parse(line->data, line->len, &error);
    const char *method = message ? kb_mcp_request_method(message) : NULL;
    json_t *id = method ? json_object_get(message, "id") : NULL;
    if (!method || strcmp(method, "initialize") == 0) {
        s_post(r, line, id);
    } else {
        s_job_t *job = kb_xcalloc(1, sizeof *job);
        job->relay = r;
        job->line = (kb_buf_t)KB_BUF_INIT;
        job->id = json_incref(id);
        pthread_mutex_lock(&r->calls_lock);
        r->calls++;
        pthread_mutex_unlock(&r->calls_lock);
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (kb_buf_append(&job->line, line->data, line->len) != KB_BUF_OK
            || pthread_create(&thread, &attr, s_job_thread, job) != 0)
            s_job_thread(job);
        pthread_attr_destroy(&attr);
    }
    json_decref(message);
    json_decref(error);
}

static char *s_token(const char *path)
{
    if (!path) {
        const char *env = getenv("KB_TOKEN");
        return env && *env ? kb_xstrdup(env) : NULL;
    }
    FILE *in = fopen(path, "r");
    char line[4096] = "";
    if (!in || !fgets(line, sizeof line, in)) {
        fprintf(stderr, "kernelbridge mcp: cannot read the token file %s\n", path);
        if (in)
            fclose(in);
        return NULL;
    }
    fclose(in);
    line[strcspn(line, "\r\n")] = '\0';
    return kb_xstrdup(line);
}

int kb_cli_mcp_relay(const kb_cli_mcp_opts_t *o, kb_cli_mcp_in_t *in)
{
    s_relay_t r = { .token = NULL };
    kb_error_t err = { KB_OK, "" };
    if (kb_cli_daemon_init(&r.daemon, o->url, &err) < 0) {
        fprintf(stderr, "kernelbridge mcp: %s\n", err.message);
        return 2;
    }
    r.token = s_token(o->token_file);
    if (o->token_file && !r.token)
        return 2;
    r.daemon.token = r.token;
    pthread_mutex_init(&r.lock, NULL);
    pthread_mutex_init(&r.calls_lock, NULL);
    pthread_cond_init(&r.calls_done, NULL);
    kb_buf_t line = KB_BUF_INIT;
    bool too_long;
    int rc;
    while ((rc = kb_cli_mcp_next_line(in, &line, &too_long)) > 0)
        if (!too_long && line.len > 0)
            s_relay_line(&r, &line);
    kb_buf_free(&line);
    /* stdin closed: the calls still out finish (a signal does not wait;
       their runs go on in the daemon), then the session ends */
    unsigned out;
    for (;;) {
        pthread_mutex_lock(&r.calls_lock);
        out = r.calls;
        pthread_mutex_unlock(&r.calls_lock);
        if (out == 0 || rc < 0 || kb_cli_mcp_signalled(in, 100))
            break;
    }
    if (r.session[0]) {
        kb_cli_reply_t *reply = s_request(&r, "DELETE", NULL, 0, &err);
        kb_cli_reply_close(&reply);
    }
    if (out > 0)
        return 0; /* the process ends; threads still out hold r until then */
    free(r.token);
    pthread_cond_destroy(&r.calls_done);
    pthread_mutex_destroy(&r.calls_lock);
    pthread_mutex_destroy(&r.lock);
    return 0;
}
