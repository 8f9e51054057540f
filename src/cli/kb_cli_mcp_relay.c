/*  kb_cli_mcp_relay.c - `kernelbridge mcp --url URL`: stdio's lines relayed
    to a running daemon's /mcp (Streamable HTTP), each message one POST
    (HTTP/1.0: the daemon closes after the answer), its answer (JSON, or
    an SSE stream written out event by event) back on stdout. Requests go
    on threads of their own, so that a notifications/cancelled reaches
    the daemon while its call runs. The session id and revision the
    daemon gave at initialize go with every later POST; at the end of
    stdin the session is deleted. */
#include "cli/kb_cli.h"
#include "cli/kb_cli_http.h"
#include "cli/kb_cli_mcp.h"
#include "server/kb_mcp.h"
#include "util/kb_alloc.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

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

static int s_connect(const kb_cli_daemon_t *daemon)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *found;
    if (getaddrinfo(daemon->host, daemon->port, &hints, &found) != 0)
        return -1;
    int fd = -1;
    for (struct addrinfo *a = found; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(found);
    return fd;
}

static int s_send_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/*  Send method /mcp with body (may be NULL). The socket, or -1. */
static int s_request(s_relay_t *r, const char *method, const char *body, size_t len)
{
    kb_buf_t head = KB_BUF_INIT;
    pthread_mutex_lock(&r->lock);
    kb_buf_printf(&head,
                  "%s /mcp HTTP/1.0\r\nHost: %s:%s\r\nAccept: application/json, "
                  "text/event-stream\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n",
                  method, r->daemon.host, r->daemon.port, len);
    if (r->session[0])
        kb_buf_printf(&head, "Mcp-Session-Id: %s\r\nMCP-Protocol-Version: %s\r\n", r->session,
                      r->version);
    pthread_mutex_unlock(&r->lock);
    if (r->token)
        kb_buf_printf(&head, "Authorization: Bearer %s\r\n", r->token);
    kb_buf_puts(&head, "\r\n");
    int fd = kb_buf_status(&head) == KB_BUF_OK ? s_connect(&r->daemon) : -1;
    if (fd >= 0
        && (s_send_all(fd, head.data, head.len) < 0 || (body && s_send_all(fd, body, len) < 0))) {
        close(fd);
        fd = -1;
    }
    kb_buf_free(&head);
    return fd;
}

/*  Read the answer's head: its status, Content-Type and Mcp-Session-Id.
    What came after the head stays in rest. -1 when there is none. */
static int s_read_head(int fd, kb_buf_t *rest, int *status, char *type, size_t type_size,
                       char *session, size_t session_size, long long *length)
{
    char chunk[4096];
    char *end = NULL;
    while (!(end = rest->len ? strstr(rest->data, "\r\n\r\n") : NULL)) {
        ssize_t n = recv(fd, chunk, sizeof chunk, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || kb_buf_append(rest, chunk, (size_t)n) != KB_BUF_OK || rest->len > 65536)
            return -1;
    }
    *end = '\0';
    if (sscanf(rest->data, "HTTP/%*s %d", status) != 1)
        return -1;
    for (char *line = strstr(rest->data, "\r\n"); line; line = strstr(line + 2, "\r\n")) {
        char *value = strchr(line + 2, ':');
        if (!value)
            continue;
        size_t len = strcspn(value + 1 + strspn(value + 1, " "), "\r");
        const char *v = value + 1 + strspn(value + 1, " ");
        if (strncasecmp(line + 2, "Content-Type:", 13) == 0)
            snprintf(type, type_size, "%.*s", (int)len, v);
        else if (strncasecmp(line + 2, "Mcp-Session-Id:", 15) == 0)
            snprintf(session, session_size, "%.*s", (int)len, v);
        else if (strncasecmp(line + 2, "Content-Length:", 15) == 0)
            *length = strtoll(v, NULL, 10);
    }
    size_t head = (size_t)(end - rest->data) + 4;
    memmove(rest->data, rest->data + head, rest->len - head);
    kb_buf_truncate(rest, rest->len - head);
    return 0;
}

/*  Write each complete event's data in buf as a line; keep the rest. */
static void s_write_events(kb_buf_t *buf)
{
    char *end;
    while (buf->len && (end = strstr(buf->data, "\n\n"))) {
        *end = '\0';
        for (char *line = buf->data; line && *line;) {
            char *next = strchr(line, '\n');
            if (next)
                *next++ = '\0';
            if (strncmp(line, "data: ", 6) == 0)
                kb_cli_mcp_write(NULL, json_loads(line + 6, 0, NULL));
            line = next;
        }
        size_t used = (size_t)(end - buf->data) + 2;
        memmove(buf->data, buf->data + used, buf->len - used);
        kb_buf_truncate(buf, buf->len - used);
    }
}

/*  A refusal the daemon answered (400, 401, 404, 413...) as the JSON-RPC
    error of the request id (borrowed; NULL: what is no request, such as a
    line that is not JSON, whose JSON-RPC error has a null id). */
static void s_write_refusal(const json_t *id, int status, const kb_buf_t *body)
{
    json_t *answer = json_loads(body->len ? body->data : "", 0, NULL);
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
    int fd = s_request(r, "POST", line->data, line->len);
    kb_buf_t body = KB_BUF_INIT;
    char type[128] = "", session[KB_MCP_SESSION_ID_MAX + 1] = "";
    int status = 0;
    long long length = -1; /* a refusal may come before the daemon read our body: it keeps
                              the connection, so its length, not the close, ends it */
    if (fd < 0
        || s_read_head(fd, &body, &status, type, sizeof type, session, sizeof session, &length)
               < 0) {
        fprintf(stderr, "kernelbridge mcp: the daemon at %s did not answer\n", r->daemon.url);
        if (id)
            kb_cli_mcp_write(NULL, kb_mcp_error(id, KB_RPC_INTERNAL_ERROR, KB_ERR_UNAVAILABLE, NULL,
                                                "the daemon did not answer"));
        goto done;
    }
    bool sse = strncasecmp(type, "text/event-stream", 17) == 0;
    char chunk[65536];
    while (length < 0 || (long long)body.len < length) {
        if (sse)
            s_write_events(&body);
        ssize_t n = recv(fd, chunk, sizeof chunk, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || kb_buf_append(&body, chunk, (size_t)n) != KB_BUF_OK)
            break;
    }
    if (sse)
        s_write_events(&body);
    else if (status == 200 && body.len)
        kb_cli_mcp_write(NULL, json_loads(body.data, 0, NULL));
    else if (status != 202)
        s_write_refusal(id, status, &body);
    json_t *answer = session[0] && body.len ? json_loads(body.data, 0, NULL) : NULL;
    const char *version
        = json_string_value(json_object_get(json_object_get(answer, "result"), "protocolVersion"));
    if (session[0] && version) {
        pthread_mutex_lock(&r->lock);
        snprintf(r->session, sizeof r->session, "%s", session);
        snprintf(r->version, sizeof r->version, "%s", version);
        pthread_mutex_unlock(&r->lock);
    }
    json_decref(answer);
done:
    if (fd >= 0)
        close(fd);
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
        int fd = s_request(&r, "DELETE", NULL, 0);
        char drain[512];
        while (fd >= 0 && recv(fd, drain, sizeof drain, 0) > 0)
            ;
        if (fd >= 0)
            close(fd);
    }
    if (out > 0)
        return 0; /* the process ends; threads still out hold r until then */
    free(r.token);
    pthread_cond_destroy(&r.calls_done);
    pthread_mutex_destroy(&r.calls_lock);
    pthread_mutex_destroy(&r.lock);
    return 0;
}
