/*  kb_mhd_errors.c - our error body on the responses libmicrohttpd makes
    by itself: 400 (a malformed request line or header, no Host, a bad
    Content-Length or chunk), 413, 414 (URL), 431 (headers over the
    connection's memory), 505 and 500. libmicrohttpd 0.9 answers these
    with fixed HTML pages before any callback of ours runs, and has no
    option to change them; SPEC section 6 wants our JSON on every error.

    So this file defines MHD_create_response_from_buffer and
    MHD_queue_response, which the dynamic linker binds ahead of
    libmicrohttpd's own (the executable's symbols come first, also for
    the calls libmicrohttpd makes to its exported functions through its
    PLT). Both forward to libmicrohttpd's (dlsym RTLD_NEXT). On a
    connection of one of our daemons, when a response made from one of
    libmicrohttpd's HTML pages is queued next on the same thread, our JSON
    error (plain text on an E2B server, whose errors are text) with the
    same status is written instead and the connection closed. Everything
    else passes through untouched, for other daemons of the process
    too.

    tests/integration/test_http_edges.py sends each of these errors and
    checks its body, so a libmicrohttpd that no longer calls through its
    PLT (a static or -Bsymbolic build) fails CI rather than sending HTML
    unnoticed. */
#include "server/kb_http.h"
#include "server/kb_metrics_http.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/*  The library is built with hidden visibility: these two keep the default
    one, so that they are in the executable's dynamic symbol table, where the
    dynamic linker finds them ahead of libmicrohttpd's. */
#define KB_INTERPOSE __attribute__((visibility("default")))

typedef struct MHD_Response *(kb_create_fn)(size_t, void *, enum MHD_ResponseMemoryMode);
typedef enum MHD_Result(kb_queue_fn)(struct MHD_Connection *, unsigned int, struct MHD_Response *);

#define KB_MHD_PAGE "<html><head><title>"
#define KB_MAX_DAEMONS 8

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static kb_create_fn *s_create;
static kb_queue_fn *s_queue;
/*  The page of the response this thread made last, until it is queued. */
static __thread const char *s_page;
static __thread struct MHD_Response *s_page_response;
/*  This thread answered a page itself: libmicrohttpd's next log line says
    it failed to queue, which is how it was told to close. */
static __thread bool s_answered;

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static struct MHD_Daemon *s_daemons[KB_MAX_DAEMONS]; /* ours */

static void s_resolve(void)
{
    s_create = (kb_create_fn *)dlsym(RTLD_NEXT, "MHD_create_response_from_buffer");
    s_queue = (kb_queue_fn *)dlsym(RTLD_NEXT, "MHD_queue_response");
}

void kb_mhd_errors_register(struct MHD_Daemon *daemon, bool on)
{
    pthread_mutex_lock(&s_lock);
    for (int i = 0; i < KB_MAX_DAEMONS; i++) {
        if (on ? !s_daemons[i] : s_daemons[i] == daemon) {
            s_daemons[i] = on ? daemon : NULL;
            break;
        }
    }
    pthread_mutex_unlock(&s_lock);
}

static bool s_ours(struct MHD_Daemon *daemon)
{
    bool found = false;
    pthread_mutex_lock(&s_lock);
    for (int i = 0; i < KB_MAX_DAEMONS && !found; i++)
        found = daemon && s_daemons[i] == daemon;
    pthread_mutex_unlock(&s_lock);
    return found;
}

KB_INTERPOSE struct MHD_Response *MHD_create_response_from_buffer(size_t size, void *buffer,
                                                                  enum MHD_ResponseMemoryMode mode)
{
    pthread_once(&s_once, s_resolve);
    struct MHD_Response *response = s_create(size, buffer, mode);
    bool page = mode == MHD_RESPMEM_PERSISTENT && size > strlen(KB_MHD_PAGE)
                && memcmp(buffer, KB_MHD_PAGE, strlen(KB_MHD_PAGE)) == 0;
    s_page = page ? buffer : NULL;
    s_page_response = page ? response : NULL;
    return response;
}

/*  What went wrong, in our words, from libmicrohttpd's page and status. */
static kb_code_t s_describe(unsigned status, const char *page, char *message, size_t size)
{
    const char *what = "the HTTP request is malformed";
    kb_code_t code = KB_ERR_BAD_REQUEST;
    if (status == MHD_HTTP_URI_TOO_LONG) {
        code = KB_ERR_URI_TOO_LONG;
        what = "the request line (method and URL) is longer than the server accepts";
    } else if (status == MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE) {
        code = KB_ERR_HEADERS_TOO_LARGE;
        what = "the request's headers are larger than the server accepts";
    } else if (status == MHD_HTTP_CONTENT_TOO_LARGE) {
        code = KB_ERR_PAYLOAD_TOO_LARGE;
        what = strstr(page, "chunk") ? "a chunk of the request body is too large"
                                     : "the request's Content-Length is too large";
    } else if (status == MHD_HTTP_HTTP_VERSION_NOT_SUPPORTED) {
        code = KB_ERR_HTTP_VERSION;
        what = "the request's HTTP version is not supported (HTTP/1.0 and HTTP/1.1 are)";
    } else if (status >= 500) {
        code = KB_ERR_INTERNAL;
        what = "the server could not answer the request";
    } else if (strstr(page, "Host:")) {
        what = "an HTTP/1.1 request must carry a Host header";
    } else if (strstr(page, "Content-Length")) {
        what = "the request's Content-Length header is not a valid length";
    } else if (strstr(page, "chunked")) {
        what = "the request's chunked encoding is malformed";
    }
    snprintf(message, size, "%s", what);
    return code;
}

/*  Write our answer for libmicrohttpd's page to the connection's socket
    ourselves: status line, headers and body, then no more. True when it
    was written whole. Then libmicrohttpd is told its response could not
    be queued, and closes the connection: queued, libmicrohttpd 0.9.75
    would build the response's headers a second time after some of these
    errors (a bad Content-Length), sending them twice. */
static bool s_answer(struct MHD_Connection *connection, unsigned status, const char *page)
{
    const union MHD_ConnectionInfo *info
        = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_DAEMON);
    if (!info || !s_ours(info->daemon))
        return false;
    info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    kb_http_req_t *req = info ? info->socket_context : NULL;
    info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!info)
        return false;
    int fd = info->connect_fd;
    char message[160];
    kb_code_t code = s_describe(status, page, message, sizeof message);
    bool text = req && req->server->api == KB_API_E2B;
    kb_buf_t body = KB_BUF_INIT, out = KB_BUF_INIT;
    if (text)
        kb_buf_puts(&body, message);
    else
        kb_http_error_body(&body, code, message, NULL, NULL);
    const char *reason = MHD_get_reason_phrase_for(status);
    kb_buf_printf(&out,
                  "HTTP/1.1 %u %s\r\nConnection: close\r\nContent-Type: %s\r\n"
                  "Content-Length: %zu\r\n\r\n%s",
                  status, reason, text ? "text/plain; charset=utf-8" : "application/json", body.len,
                  body.data ? body.data : "");
    bool written = false;
    if (body.status == KB_BUF_OK && out.status == KB_BUF_OK) {
        ssize_t n = send(fd, out.data, out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
        written = n == (ssize_t)out.len;
        s_answered = written;
        if (written)
            kb_metrics_count_request(NULL, status); /* method unread: "other" */
    }
    kb_buf_free(&body);
    kb_buf_free(&out);
    return written;
}

KB_INTERPOSE enum MHD_Result MHD_queue_response(struct MHD_Connection *connection,
                                                unsigned int status_code,
                                                struct MHD_Response *response)
{
    pthread_once(&s_once, s_resolve);
    if (!s_page || response != s_page_response)
        return s_queue(connection, status_code, response);
    const char *page = s_page;
    s_page = NULL;
    s_page_response = NULL;
    if (s_answer(connection, status_code, page))
        return MHD_NO; /* answered: libmicrohttpd closes the connection */
    return s_queue(connection, status_code, response);
}

bool kb_mhd_errors_answered(void)
{
    bool answered = s_answered;
    s_answered = false;
    return answered;
}
