/*  kb_cli_http.c - the CLI's HTTP client (`contexts`, `ps`, `logs`, `fork`,
    `checkpoint`, `restore`): the smallest that does. GET, and POST or
    DELETE with a JSON body, one request per connection (Connection:
    close), plain TCP with a bounded connect (no TLS, no redirects), bodies
    with a Content-Length, chunked or read to the close; JSON answers and
    Server-Sent Events. Not a general client, and not used by the daemon. */
#include "cli/kb_cli_http.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kernelbridge.h"
#include "util/kb_alloc.h"

/*  The most of a JSON answer kept, and of one line of a head. */
#define KB_CLI_MAX_BODY (256u << 20)
#define KB_CLI_LINE 16384

/*  One response being read. */
typedef struct kb_cli_reply {
    int fd;
    int timeout_ms; /* per read; -1: none */
    char in[KB_CLI_LINE];
    size_t at, len; /* unread bytes are in[at..len) */
    int status;
    bool chunked;
    long long left;   /* body bytes left (Content-Length), or of the chunk; -1: until close */
    bool chunk_open;  /* a chunk's data was read: its CRLF comes next */
    bool done;        /* the body has ended */
    kb_buf_t headers; /* the head's fields: name, NUL, value, NUL, ... */
    kb_error_t err;
} kb_reply_t;

/* ---- the connection --------------------------------------------------------- */

/*  host and port of an http:// URL (the scheme may be left out; IPv6 in
    brackets; port 80 when none). 0 or -1 (err says why). */
int kb_cli_daemon_init(kb_cli_daemon_t *self, const char *url, kb_error_t *err)
{
    *self = (kb_cli_daemon_t){ .url = url };
    const char *p = url;
    if (strncasecmp(p, "https://", 8) == 0) {
        kb_error_set(err, KB_ERR_INTERNAL,
                     "%s: https is not supported (the daemon speaks plain HTTP)", p);
        return -1;
    }
    if (strncasecmp(p, "http://", 7) == 0)
        p += 7;
    size_t host_len;
    const char *after;
    if (*p == '[') {
        const char *close = strchr(p, ']');
        if (!close)
            goto bad;
        p++;
        host_len = (size_t)(close - p);
        after = close + 1;
    } else {
        host_len = strcspn(p, ":/");
        after = p + host_len;
    }
    if (host_len == 0 || host_len >= sizeof self->host)
        goto bad;
    memcpy(self->host, p, host_len);
    self->host[host_len] = 0;
    snprintf(self->port, sizeof self->port, "80");
    if (*after == ':') {
        size_t port_len = strspn(after + 1, "0123456789");
        if (port_len == 0 || port_len >= sizeof self->port
            || (after[1 + port_len] && after[1 + port_len] != '/'))
            goto bad;
        memcpy(self->port, after + 1, port_len);
        self->port[port_len] = 0;
    } else if (*after && *after != '/')
        goto bad;
    return 0;
bad:
    kb_error_set(err, KB_ERR_INTERNAL, "not a daemon URL: '%s' (want http://HOST:PORT)", self->url);
    return -1;
}

/*  A non-blocking connect bounded by KB_CLI_CONNECT_MS. The socket
    (blocking again), or -1 with err. */
static int s_connect_one(const struct addrinfo *ai, kb_error_t *err)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "%s", strerror(errno));
        return -1;
    }
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc < 0 && errno == EINPROGRESS) {
        struct pollfd pfd = { .fd = fd, .events = POLLOUT };
        int ready = poll(&pfd, 1, KB_CLI_CONNECT_MS);
        int soerr = 0;
        socklen_t len = sizeof soerr;
        if (ready == 0)
            soerr = ETIMEDOUT;
        else if (ready < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
            soerr = errno;
        rc = soerr ? -1 : 0;
        errno = soerr;
    }
    if (rc < 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "%s", strerror(errno));
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

/*  A connected socket to the daemon, or -1 with err. */
static int s_connect(const kb_cli_daemon_t *self, kb_error_t *err)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *list;
    int gai = getaddrinfo(self->host, self->port, &hints, &list);
    if (gai != 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot reach the daemon at %s: %s", self->url,
                     gai_strerror(gai));
        return -1;
    }
    kb_error_t why = { KB_ERR_INTERNAL, "no address" };
    int fd = -1;
    for (struct addrinfo *ai = list; ai && fd < 0; ai = ai->ai_next)
        fd = s_connect_one(ai, &why);
    freeaddrinfo(list);
    if (fd < 0)
        kb_error_set(err, KB_ERR_INTERNAL,
                     "cannot reach the daemon at %s: %s (is `kernelbridge serve` running?)",
                     self->url, why.message);
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

/*  Send method path (already escaped), with the header lines headers
    (each "Name: value\r\n"; NULL: none) and body (len bytes of JSON text;
    NULL: none). 0 or -1 with reply->err. */
static int s_send(const kb_cli_daemon_t *self, kb_reply_t *reply, const char *method,
                  const char *path, const char *accept, const char *headers, const char *body,
                  size_t len)
{
    kb_buf_t request = KB_BUF_INIT;
    bool v6 = strchr(self->host, ':') != NULL;
    kb_buf_printf(&request,
                  "%s %s HTTP/1.1\r\nHost: %s%s%s:%s\r\nUser-Agent: kernelbridge/%s\r\n"
                  "Accept: %s\r\nConnection: close\r\n",
                  method, path, v6 ? "[" : "", self->host, v6 ? "]" : "", self->port, KB_VERSION,
                  accept);
    if (self->token)
        kb_buf_printf(&request, "Authorization: Bearer %s\r\n", self->token);
    if (headers)
        kb_buf_puts(&request, headers);
    if (body)
        kb_buf_printf(&request, "Content-Type: application/json\r\nContent-Length: %zu\r\n", len);
    kb_buf_puts(&request, "\r\n");
    if (body)
        kb_buf_append(&request, body, len);
    int rc = kb_buf_status(&request) == KB_BUF_OK ? s_send_all(reply->fd, request.data, request.len)
                                                  : -1;
    if (rc < 0)
        kb_error_set(&reply->err, KB_ERR_INTERNAL, "cannot send the request to %s: %s", self->url,
                     strerror(errno));
    kb_buf_free(&request);
    return rc;
}

/* ---- the response ----------------------------------------------------------- */

/*  Read more bytes into reply->in. >0, 0 at the end of the connection, or
    -1 with reply->err. */
static ssize_t s_fill(kb_reply_t *reply)
{
    if (reply->at > 0) {
        memmove(reply->in, reply->in + reply->at, reply->len - reply->at);
        reply->len -= reply->at;
        reply->at = 0;
    }
    if (reply->len == sizeof reply->in) {
        kb_error_set(&reply->err, KB_ERR_INTERNAL, "a line of the daemon's answer is too long");
        return -1;
    }
    struct pollfd pfd = { .fd = reply->fd, .events = POLLIN };
    int ready;
    while ((ready = poll(&pfd, 1, reply->timeout_ms)) < 0 && errno == EINTR)
        ;
    if (ready == 0) {
        kb_error_set(&reply->err, KB_ERR_INTERNAL, "the daemon did not answer within %d s",
                     reply->timeout_ms / 1000);
        return -1;
    }
    ssize_t n;
    while ((n = recv(reply->fd, reply->in + reply->len, sizeof reply->in - reply->len, 0)) < 0
           && errno == EINTR)
        ;
    if (n < 0)
        kb_error_set(&reply->err, KB_ERR_INTERNAL, "reading the daemon's answer: %s",
                     strerror(errno));
    else
        reply->len += (size_t)n;
    return n;
}

/*  The next CRLF- (or LF-) ended line of the head or of a chunk size,
    NUL-terminated in place; NULL with reply->err. */
static char *s_line(kb_reply_t *reply)
{
    for (;;) {
        char *start = reply->in + reply->at;
        char *nl = memchr(start, '\n', reply->len - reply->at);
        if (nl) {
            reply->at = (size_t)(nl - reply->in) + 1;
            if (nl > start && nl[-1] == '\r')
                nl--;
            *nl = 0;
            return start;
        }
        ssize_t n = s_fill(reply);
        if (n == 0)
            kb_error_set(&reply->err, KB_ERR_INTERNAL, "the daemon closed the connection");
        if (n <= 0)
            return NULL;
    }
}

/*  The status line and headers. 0 or -1 with reply->err. */
static int s_read_head(kb_reply_t *reply)
{
    char *line = s_line(reply);
    if (!line)
        return -1;
    if (sscanf(line, "HTTP/1.%*d %d", &reply->status) != 1) {
        kb_error_set(&reply->err, KB_ERR_INTERNAL, "not an HTTP answer: '%.80s'", line);
        return -1;
    }
    reply->left = -1;
    while ((line = s_line(reply)) && *line) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        *colon = 0;
        const char *value = colon + 1 + strspn(colon + 1, " \t");
        kb_buf_append(&reply->headers, line, strlen(line) + 1);
        kb_buf_append(&reply->headers, value, strlen(value) + 1);
        if (strcasecmp(line, "Content-Length") == 0)
            reply->left = strtoll(value, NULL, 10);
        else if (strcasecmp(line, "Transfer-Encoding") == 0 && strcasestr(value, "chunked"))
            reply->chunked = true;
    }
    if (!line)
        return -1;
    if (reply->chunked)
        reply->left = 0;
    reply->done = !reply->chunked && reply->left == 0;
    return 0;
}

/*  Open the next chunk: its size line (after the CRLF that ends the one
    before), or the last chunk and its trailer. 0 or -1. */
static int s_next_chunk(kb_reply_t *reply)
{
    char *line;
    if (reply->chunk_open && (!(line = s_line(reply)) || *line))
        goto bad;
    reply->chunk_open = false;
    if (!(line = s_line(reply)))
        return -1;
    char *end;
    long long size = strtoll(line, &end, 16);
    if (end == line || size < 0)
        goto bad;
    if (size == 0) {
        while ((line = s_line(reply)) && *line)
            ; /* trailer fields */
        reply->done = true;
        return line ? 0 : -1;
    }
    reply->left = size;
    reply->chunk_open = true;
    return 0;
bad:
    if (!reply->err.message[0])
        kb_error_set(&reply->err, KB_ERR_INTERNAL, "malformed chunked answer from the daemon");
    return -1;
}

/*  Up to cap bytes of the body into out: >0, 0 at its end, -1 with err. */
static ssize_t s_read_body(kb_reply_t *reply, char *out, size_t cap)
{
    if (!reply->done && reply->chunked && reply->left == 0 && s_next_chunk(reply) < 0)
        return -1;
    if (reply->done)
        return 0;
    if (reply->at == reply->len) {
        ssize_t n = s_fill(reply);
        if (n == 0 && reply->left < 0 && !reply->chunked) {
            reply->done = true; /* read to close */
            return 0;
        }
        if (n == 0)
            kb_error_set(&reply->err, KB_ERR_INTERNAL,
                         "the daemon closed the connection mid-answer");
        if (n <= 0)
            return -1;
    }
    size_t n = reply->len - reply->at;
    if (n > cap)
        n = cap;
    if (reply->left >= 0 && (long long)n > reply->left)
        n = (size_t)reply->left;
    memcpy(out, reply->in + reply->at, n);
    reply->at += n;
    if (reply->left >= 0) {
        reply->left -= (long long)n;
        if (reply->left == 0 && !reply->chunked)
            reply->done = true;
    }
    return (ssize_t)n;
}

/*  Connect, send method path (with headers and body, as s_send's) and
    read the head within head_ms; then each read waits timeout_ms (-1:
    no bound). 0 or -1 with reply->err. */
static int s_exchange(const kb_cli_daemon_t *self, kb_reply_t *reply, const char *method,
                      const char *path, const char *accept, const char *headers, const char *body,
                      size_t len, int head_ms, int timeout_ms)
{
    *reply = (kb_reply_t){ .fd = -1, .timeout_ms = head_ms, .headers = KB_BUF_INIT };
    reply->fd = s_connect(self, &reply->err);
    if (reply->fd < 0)
        return -1;
    if (s_send(self, reply, method, path, accept, headers, body, len) < 0 || s_read_head(reply) < 0)
        return -1;
    reply->timeout_ms = timeout_ms;
    return 0;
}

/*  s_exchange with a JSON body text (or NULL), the head within
    KB_CLI_ANSWER_MS: it comes at once, also for a stream. */
static int s_open(const kb_cli_daemon_t *self, kb_reply_t *reply, const char *method,
                  const char *path, const char *body, const char *accept, int timeout_ms)
{
    return s_exchange(self, reply, method, path, accept, NULL, body, body ? strlen(body) : 0,
                      KB_CLI_ANSWER_MS, timeout_ms);
}

/*  The whole body as JSON. Caller owns the result; NULL with reply->err. */
static json_t *s_read_json(kb_reply_t *reply)
{
    kb_buf_t body = KB_BUF_INIT;
    kb_buf_init(&body, KB_CLI_MAX_BODY);
    char chunk[16384];
    ssize_t n;
    while ((n = s_read_body(reply, chunk, sizeof chunk)) > 0)
        if (kb_buf_append(&body, chunk, (size_t)n) != KB_BUF_OK) {
            kb_error_set(&reply->err, KB_ERR_INTERNAL, "the daemon's answer is too large");
            n = -1;
            break;
        }
    json_t *json = NULL;
    if (n == 0) {
        json_error_t jerr;
        json = json_loadb(body.data ? body.data : "", body.len, 0, &jerr);
        if (!json)
            kb_error_set(&reply->err, KB_ERR_INTERNAL,
                         "the daemon's answer (HTTP %d) is not JSON: %s", reply->status, jerr.text);
    }
    kb_buf_free(&body);
    return json;
}

/*  The daemon's error answer as "CODE: message" in reply->err. */
static void s_error_answer(kb_reply_t *reply)
{
    json_t *error = s_read_json(reply);
    const char *code = json_string_value(json_object_get(error, "code"));
    const char *message = json_string_value(json_object_get(error, "message"));
    if (code && message)
        kb_error_set(&reply->err, KB_ERR_INTERNAL, "%s: %s", code, message);
    else
        kb_error_set(&reply->err, KB_ERR_INTERNAL, "the daemon answered HTTP %d", reply->status);
    json_decref(error);
}

static void s_close(kb_reply_t *reply)
{
    if (reply->fd >= 0)
        close(reply->fd);
    reply->fd = -1;
    kb_buf_free(&reply->headers);
}

json_t *kb_cli_get_json(const kb_cli_daemon_t *daemon, const char *path, kb_error_t *err)
{
    return kb_cli_request_json(daemon, "GET", path, NULL, err);
}

json_t *kb_cli_request_json(const kb_cli_daemon_t *daemon, const char *method, const char *path,
                            json_t *body, kb_error_t *err)
{
    kb_reply_t reply = { .fd = -1 };
    json_t *json = NULL;
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body && !text)
        kb_error_set(&reply.err, KB_ERR_INTERNAL, "out of memory");
    else if (s_open(daemon, &reply, method, path, text, "application/json", KB_CLI_ANSWER_MS)
             == 0) {
        if (reply.status / 100 != 2)
            s_error_answer(&reply);
        else if (reply.status == 204 && !(json = json_null()))
            kb_error_set(&reply.err, KB_ERR_INTERNAL, "out of memory");
        else if (reply.status != 204)
            json = s_read_json(&reply);
    }
    if (!json)
        kb_error_set(err, reply.err.code, "%s", reply.err.message);
    s_close(&reply);
    free(text);
    return json;
}

/* ---- Server-Sent Events ------------------------------------------------------------- */

typedef struct {
    kb_buf_t line, event, data;
    kb_cli_event_fn *on_event;
    void *arg;
} kb_sse_reader_t;

/*  One line of the stream (without its end): a field, a comment, or the
    blank line that dispatches an event. on_event's answer, or 0. */
static int s_sse_line(kb_sse_reader_t *self, const char *line, kb_error_t *err)
{
    if (!*line) {
        int rc = 0;
        if (self->data.len || self->event.len)
            rc = self->on_event(self->event.len ? kb_buf_cstr(&self->event) : "message",
                                self->data.len ? kb_buf_cstr(&self->data) : "", self->arg, err);
        kb_buf_reset(&self->event);
        kb_buf_reset(&self->data);
        return rc;
    }
    if (*line == ':')
        return 0; /* a comment: the daemon's keep-alive */
    const char *colon = strchr(line, ':');
    size_t name_len = colon ? (size_t)(colon - line) : strlen(line);
    const char *value = colon ? colon + 1 + (colon[1] == ' ') : "";
    if (name_len == 5 && strncmp(line, "event", 5) == 0) {
        kb_buf_reset(&self->event);
        kb_buf_puts(&self->event, value);
    } else if (name_len == 4 && strncmp(line, "data", 4) == 0) {
        if (self->data.len)
            kb_buf_putc(&self->data, '\n');
        kb_buf_puts(&self->data, value);
    }
    return 0;
}

/*  Split bytes of the body into lines. on_event's 1 or -1, else 0. */
static int s_sse_feed(kb_sse_reader_t *self, const char *bytes, size_t len, kb_error_t *err)
{
    for (size_t i = 0; i < len; i++) {
        if (bytes[i] != '\n') {
            kb_buf_putc(&self->line, bytes[i]);
            continue;
        }
        kb_buf_t *line = &self->line;
        if (line->len && line->data[line->len - 1] == '\r')
            kb_buf_truncate(line, line->len - 1);
        int rc = s_sse_line(self, line->len ? kb_buf_cstr(line) : "", err);
        kb_buf_reset(line);
        if (rc != 0)
            return rc;
    }
    if (kb_buf_status(&self->line) != KB_BUF_OK || kb_buf_status(&self->data) != KB_BUF_OK) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return -1;
    }
    return 0;
}

int kb_cli_get_events(const kb_cli_daemon_t *daemon, const char *path, kb_cli_event_fn *on_event,
                      void *arg, kb_error_t *err)
{
    kb_sse_reader_t reader = { KB_BUF_INIT, KB_BUF_INIT, KB_BUF_INIT, on_event, arg };
    kb_reply_t reply;
    int fed = 0; /* the last answer of s_sse_feed: 1 done, -1 failed (err set) */
    if (s_open(daemon, &reply, "GET", path, NULL, "text/event-stream", -1) < 0)
        goto done;
    if (reply.status / 100 != 2) {
        s_error_answer(&reply);
        goto done;
    }
    char chunk[16384];
    ssize_t n;
    while (fed == 0 && (n = s_read_body(&reply, chunk, sizeof chunk)) > 0)
        fed = s_sse_feed(&reader, chunk, (size_t)n, err);
    if (fed == 0 && !reply.err.message[0])
        kb_error_set(&reply.err, KB_ERR_INTERNAL, "the stream ended before its last event");
done:
    if (fed == 0)
        kb_error_set(err, reply.err.code, "%s", reply.err.message);
    s_close(&reply);
    kb_buf_free(&reader.line);
    kb_buf_free(&reader.event);
    kb_buf_free(&reader.data);
    return fed == 1 ? 0 : -1;
}

void kb_cli_url_escape(kb_buf_t *out, const char *text)
{
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        if (strchr("-._~", *p) || (*p >= '0' && *p <= '9')
            || ((*p | 32) >= 'a' && (*p | 32) <= 'z'))
            kb_buf_putc(out, (char)*p);
        else
            kb_buf_printf(out, "%%%02X", *p);
}

/* ---- Answers read by the caller ------------------------------------------------------ */

kb_cli_reply_t *kb_cli_reply_open(const kb_cli_daemon_t *daemon, const char *method,
                                  const char *path, const char *accept, const char *headers,
                                  const char *body, size_t len, kb_error_t *err)
{
    kb_reply_t *reply = kb_xcalloc(1, sizeof *reply);
    if (s_exchange(daemon, reply, method, path, accept, headers, body, len, -1, -1) == 0)
        return reply;
    kb_error_set(err, reply->err.code, "%s", reply->err.message);
    kb_cli_reply_close(&reply);
    return NULL;
}

int kb_cli_reply_status(const kb_cli_reply_t *reply)
{
    return reply->status;
}

const char *kb_cli_reply_header(const kb_cli_reply_t *reply, const char *name)
{
    const char *at = reply->headers.data, *end = at + reply->headers.len;
    while (at && at < end) {
        const char *value = at + strlen(at) + 1;
        if (strcasecmp(at, name) == 0)
            return value;
        at = value + strlen(value) + 1;
    }
    return NULL;
}

int kb_cli_reply_body(kb_cli_reply_t *reply, kb_buf_t *out, kb_error_t *err)
{
    char chunk[16384];
    ssize_t n;
    while ((n = s_read_body(reply, chunk, sizeof chunk)) > 0)
        if (kb_buf_append(out, chunk, (size_t)n) != KB_BUF_OK) {
            kb_error_set(err, KB_ERR_INTERNAL, "the daemon's answer is too large");
            return -1;
        }
    if (n < 0)
        kb_error_set(err, reply->err.code, "%s", reply->err.message);
    return n < 0 ? -1 : 0;
}

int kb_cli_reply_events(kb_cli_reply_t *reply, kb_cli_event_fn *on_event, void *arg,
                        kb_error_t *err)
{
    kb_sse_reader_t reader = { KB_BUF_INIT, KB_BUF_INIT, KB_BUF_INIT, on_event, arg };
    char chunk[16384];
    ssize_t n;
    int fed = 0;
    while (fed == 0 && (n = s_read_body(reply, chunk, sizeof chunk)) > 0)
        fed = s_sse_feed(&reader, chunk, (size_t)n, err);
    if (fed == 0 && n < 0) {
        kb_error_set(err, reply->err.code, "%s", reply->err.message);
        fed = -1;
    }
    kb_buf_free(&reader.line);
    kb_buf_free(&reader.event);
    kb_buf_free(&reader.data);
    return fed < 0 ? -1 : 0;
}

void kb_cli_reply_close(kb_cli_reply_t **reply_p)
{
    if (!reply_p || !*reply_p)
        return;
    s_close(*reply_p);
    free(*reply_p);
    *reply_p = NULL;
}
