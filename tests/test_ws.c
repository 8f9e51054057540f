/*  test_ws.c - kb_ws against a client written here: a raw TCP socket, the
    handshake by hand, and wslay in client mode (masked frames) for the
    framing. The server is a libmicrohttpd daemon on 127.0.0.1 with an
    ephemeral port and kb_server's flags, whose /echo echoes messages. */
#include "server/kb_ws.h"
#include "kb_testutil.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <wslay/wslay.h>

#define RFC_KEY "dGhlIHNhbXBsZSBub25jZQ=="
/*  RFC 6455 section 1.3 (and base64(SHA-1(key GUID)) by any other tool). */
#define RFC_ACCEPT "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
#define JUPYTER_V1 "v1.kernel.websocket.jupyter.org"

/* ---- Server ---------------------------------------------------------------- */

typedef struct {
    struct MHD_Daemon *daemon;
    int port;
    kb_ws_group_t *group;
    kb_ws_config_t config;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int opens, closes;
    unsigned last_code;
    char last_reason[128];
    char protocol[128]; /* kb_ws_protocol at open, "" for none */
    kb_ws_t *last;      /* a reference to the newest websocket */
} server_t;

typedef struct {
    kb_ws_t *ws;
} request_t;

static void on_open(kb_ws_t *ws, void *arg)
{
    server_t *s = arg;
    pthread_mutex_lock(&s->lock);
    s->opens++;
    const char *protocol = kb_ws_protocol(ws);
    snprintf(s->protocol, sizeof s->protocol, "%s", protocol ? protocol : "");
    kb_ws_unref(&s->last);
    s->last = kb_ws_ref(ws);
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
}

static void on_message(kb_ws_t *ws, bool binary, const uint8_t *data, size_t len, void *arg)
{
    kb_ws_send(ws, binary, data, len);
}

static void on_close(kb_ws_t *ws, unsigned code, const char *reason, void *arg)
{
    server_t *s = arg;
    pthread_mutex_lock(&s->lock);
    s->closes++;
    s->last_code = code;
    snprintf(s->last_reason, sizeof s->last_reason, "%s", reason ? reason : "");
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
}

static const kb_ws_handler_t echo_handler = { on_open, on_message, on_close };

static enum MHD_Result on_access(void *cls, struct MHD_Connection *connection, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **con_cls)
{
    server_t *s = cls;
    if (*con_cls) { /* a body: dropped, the answer is queued */
        *upload_data_size = 0;
        return MHD_YES;
    }
    request_t *req = calloc(1, sizeof *req);
    if (!req)
        return MHD_NO;
    *con_cls = req;
    if (strcmp(url, "/echo") != 0) {
        struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        enum MHD_Result rc = MHD_queue_response(connection, 404, r);
        MHD_destroy_response(r);
        return rc;
    }
    unsigned status = 0;
    req->ws = kb_ws_accept(connection, method, &s->config, s->group, &echo_handler, s, &status);
    return status ? MHD_YES : MHD_NO;
}

static void on_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    request_t *req = *con_cls;
    if (!req)
        return;
    kb_ws_request_done(&req->ws);
    free(req);
    *con_cls = NULL;
}

static server_t *server_start(const kb_ws_config_t *config)
{
    server_t *s = calloc(1, sizeof *s);
    s->config = *config;
    s->group = kb_ws_group_new();
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->changed, NULL);
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = 0 };
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL
                     | MHD_USE_ITC | MHD_USE_ERROR_LOG | MHD_ALLOW_UPGRADE;
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_access, s, MHD_OPTION_SOCK_ADDR,
                                 (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    CHECK(s->daemon != NULL);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : 0;
    return s;
}

/*  The daemon's stop order: websockets first (1001), then libmicrohttpd. */
static void server_stop(server_t *s)
{
    kb_ws_group_destroy(&s->group);
    MHD_stop_daemon(s->daemon);
    kb_ws_unref(&s->last);
    pthread_cond_destroy(&s->changed);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/*  Wait until *counter reaches target, at most ms. */
static bool server_wait(server_t *s, int *counter, int target, int ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += ms / 1000;
    deadline.tv_nsec += (long)(ms % 1000) * 1000000;
    if (deadline.tv_nsec >= 1000000000) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&s->lock);
    while (*counter < target)
        if (pthread_cond_timedwait(&s->changed, &s->lock, &deadline) == ETIMEDOUT)
            break;
    bool reached = *counter >= target;
    pthread_mutex_unlock(&s->lock);
    return reached;
}

/*  The counters once every websocket has ended (on_close comes before
    its websocket leaves the group). */
static void ended_stats(server_t *s, kb_ws_stats_t *stats)
{
    CHECK(kb_ws_group_wait(s->group, 5000));
    kb_ws_group_stats(s->group, stats);
}

static kb_ws_t *server_last(server_t *s)
{
    pthread_mutex_lock(&s->lock);
    kb_ws_t *ws = s->last ? kb_ws_ref(s->last) : NULL;
    pthread_mutex_unlock(&s->lock);
    return ws;
}

/* ---- Client ---------------------------------------------------------------- */

typedef struct {
    int fd;
    wslay_event_context_ptr ctx;
    char head[4096]; /* the response's status line and headers */
    unsigned status;
    int messages; /* whole messages received */
    int opcode;   /* of the last one */
    uint8_t *msg; /* the last one (owned) */
    size_t len;
    bool closed; /* a close frame came */
    unsigned close_code;
    int messages_at_close; /* messages before the close frame */
    bool gone;             /* EOF or error */
    int events;
    const uint8_t *frag; /* a message sent in fragments */
    size_t frag_len, frag_off, frag_piece;
} client_t;

static int tcp_connect(int port, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/*  Send a request and read the response's head (not a byte more, so
    that frames after it stay for wslay). Returns the status, 0 on
    failure. */
static unsigned http_exchange(client_t *c, const char *request)
{
    size_t len = strlen(request);
    if (send(c->fd, request, len, MSG_NOSIGNAL) != (ssize_t)len)
        return 0;
    size_t have = 0;
    double deadline = kb_test_now() + 5;
    while (have + 1 < sizeof c->head) {
        struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
        int left = (int)((deadline - kb_test_now()) * 1000);
        if (left <= 0 || poll(&pfd, 1, left) <= 0)
            return 0;
        ssize_t n = recv(c->fd, c->head + have, 1, 0);
        if (n <= 0)
            break;
        have++;
        c->head[have] = '\0';
        if (have >= 4 && strcmp(c->head + have - 4, "\r\n\r\n") == 0)
            break;
    }
    unsigned status = 0;
    sscanf(c->head, "HTTP/1.1 %u", &status);
    c->status = status;
    return status;
}

/*  The value of a response header (case-insensitive name), copied. */
static bool head_value(client_t *c, const char *name, char *out, size_t size)
{
    size_t nlen = strlen(name);
    for (const char *line = strstr(c->head, "\r\n"); line && line[2];
         line = strstr(line + 2, "\r\n")) {
        const char *p = line + 2;
        if (strncasecmp(p, name, nlen) == 0 && p[nlen] == ':') {
            p += nlen + 1;
            while (*p == ' ')
                p++;
            const char *end = strstr(p, "\r\n");
            size_t len = (size_t)(end - p);
            snprintf(out, size, "%.*s", (int)len, p);
            return true;
        }
    }
    return false;
}

static ssize_t client_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags,
                           void *user_data)
{
    client_t *c = user_data;
    ssize_t n = recv(c->fd, buf, len, 0);
    if (n > 0)
        return n;
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
    } else {
        c->gone = true;
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
    }
    return -1;
}

static ssize_t client_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
                           void *user_data)
{
    client_t *c = user_data;
    ssize_t n = send(c->fd, data, len, MSG_NOSIGNAL);
    if (n >= 0)
        return n;
    if (errno == EAGAIN || errno == EINTR) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
    } else {
        c->gone = true;
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
    }
    return -1;
}

static int client_mask(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *user_data)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)random();
    return 0;
}

static void client_on_msg(wslay_event_context_ptr ctx,
                          const struct wslay_event_on_msg_recv_arg *arg, void *user_data)
{
    client_t *c = user_data;
    if (arg->opcode == WSLAY_CONNECTION_CLOSE) {
        c->closed = true;
        c->close_code = arg->status_code;
        c->messages_at_close = c->messages;
        c->events++;
        return;
    }
    if (arg->opcode != WSLAY_TEXT_FRAME && arg->opcode != WSLAY_BINARY_FRAME)
        return;
    free(c->msg);
    c->msg = malloc(arg->msg_length + 1);
    if (arg->msg_length)
        memcpy(c->msg, arg->msg, arg->msg_length);
    c->len = arg->msg_length;
    c->opcode = arg->opcode;
    c->messages++;
}

/*  Open a websocket on /echo; protocols: a Sec-WebSocket-Protocol value or
    NULL. The client's state is valid when it returns 101. */
static unsigned client_open(client_t *c, int port, const char *protocols, int rcvbuf)
{
    memset(c, 0, sizeof *c);
    c->fd = tcp_connect(port, rcvbuf);
    if (c->fd < 0)
        return 0;
    char request[1024];
    snprintf(request, sizeof request,
             "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
             "Connection: keep-alive, Upgrade\r\nSec-WebSocket-Key: " RFC_KEY "\r\n"
             "Sec-WebSocket-Version: 13\r\n%s%s%s\r\n",
             protocols ? "Sec-WebSocket-Protocol: " : "", protocols ? protocols : "",
             protocols ? "\r\n" : "");
    unsigned status = http_exchange(c, request);
    if (status != 101)
        return status;
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
    struct wslay_event_callbacks callbacks = {
        .recv_callback = client_recv,
        .send_callback = client_send,
        .genmask_callback = client_mask,
        .on_msg_recv_callback = client_on_msg,
    };
    wslay_event_context_client_init(&c->ctx, &callbacks, c);
    return status;
}

static void client_free(client_t *c)
{
    if (c->ctx)
        wslay_event_context_free(c->ctx);
    if (c->fd >= 0)
        close(c->fd);
    free(c->msg);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

/*  Read and write for at most ms, until *counter reaches target (NULL:
    the whole time). */
static bool client_pump(client_t *c, int ms, int *counter, int target)
{
    double deadline = kb_test_now() + ms / 1000.0;
    while (!counter || *counter < target) {
        int left = (int)((deadline - kb_test_now()) * 1000);
        if (left <= 0 || c->gone)
            break;
        short events = (short)((wslay_event_want_read(c->ctx) ? POLLIN : 0)
                               | (wslay_event_want_write(c->ctx) ? POLLOUT : 0));
        if (!events)
            events = POLLIN; /* to see the EOF */
        struct pollfd pfd = { .fd = c->fd, .events = events };
        if (poll(&pfd, 1, left) <= 0)
            continue;
        if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
            if (wslay_event_want_read(c->ctx)) {
                if (wslay_event_recv(c->ctx) < 0)
                    c->gone = true;
            } else {
                char sink[4096];
                ssize_t n = recv(c->fd, sink, sizeof sink, 0);
                if (n == 0 || (n < 0 && errno != EAGAIN))
                    c->gone = true;
            }
        }
        if (wslay_event_want_write(c->ctx) && wslay_event_send(c->ctx) < 0)
            c->gone = true;
        if (c->gone)
            c->events++;
    }
    return !counter || *counter >= target;
}

static void client_queue(client_t *c, int opcode, const void *data, size_t len)
{
    struct wslay_event_msg msg = { (uint8_t)opcode, data, len };
    CHECK(wslay_event_queue_msg(c->ctx, &msg) == 0);
}

static ssize_t client_read_piece(wslay_event_context_ptr ctx, uint8_t *buf, size_t len,
                                 const union wslay_event_msg_source *source, int *eof,
                                 void *user_data)
{
    client_t *c = user_data;
    size_t n = c->frag_len - c->frag_off;
    n = n < c->frag_piece ? n : c->frag_piece;
    n = n < len ? n : len;
    memcpy(buf, c->frag + c->frag_off, n);
    c->frag_off += n;
    if (c->frag_off == c->frag_len)
        *eof = 1;
    return (ssize_t)n;
}

/*  Send a round trip and check that the echo is the same message. */
static void check_echo(client_t *c, int opcode, const void *data, size_t len)
{
    int before = c->messages;
    client_queue(c, opcode, data, len);
    CHECK(client_pump(c, 10000, &c->messages, before + 1));
    CHECK(c->opcode == opcode);
    CHECK(c->len == len);
    CHECK(c->len == len && memcmp(c->msg, data, len) == 0);
}

static kb_ws_config_t small_timeouts(void)
{
    kb_ws_config_t config
        = { .ping_interval_ms = 200, .pong_timeout_ms = 400, .close_timeout_ms = 300 };
    return config;
}

/* ---- Tests ----------------------------------------------------------------- */

static void test_handshake_and_echo(void)
{
    /* pings as in the others, but a pong may take long: the 10 MiB echo
       keeps the client from answering for a while on a loaded machine,
       and a pong timed out would end the connection this test closes */
    kb_ws_config_t config = small_timeouts();
    config.pong_timeout_ms = 10000;
    server_t *s = server_start(&config);
    client_t c;
    CHECK(client_open(&c, s->port, NULL, 0) == 101);
    char value[256] = "";
    CHECK(head_value(&c, "Sec-WebSocket-Accept", value, sizeof value));
    CHECK_STR(value, RFC_ACCEPT);
    CHECK(head_value(&c, "Upgrade", value, sizeof value) && strcasecmp(value, "websocket") == 0);
    CHECK(!head_value(&c, "Sec-WebSocket-Protocol", value, sizeof value));
    CHECK(server_wait(s, &s->opens, 1, 5000));
    CHECK_STR(s->protocol, "");

    check_echo(&c, WSLAY_TEXT_FRAME, "hello", 5);
    check_echo(&c, WSLAY_TEXT_FRAME, "", 0);
    uint8_t bytes[256];
    for (int i = 0; i < 256; i++)
        bytes[i] = (uint8_t)i;
    check_echo(&c, WSLAY_BINARY_FRAME, bytes, sizeof bytes);

    /* A text message in 1000-byte fragments comes back whole. */
    char text[3500];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = (char)('a' + i % 26);
    c.frag = (const uint8_t *)text;
    c.frag_len = sizeof text;
    c.frag_piece = 1000;
    struct wslay_event_fragmented_msg frag
        = { .opcode = WSLAY_TEXT_FRAME, .read_callback = client_read_piece };
    int before = c.messages;
    CHECK(wslay_event_queue_fragmented_msg(c.ctx, &frag) == 0);
    CHECK(client_pump(&c, 5000, &c.messages, before + 1));
    CHECK(c.opcode == WSLAY_TEXT_FRAME && c.len == sizeof text
          && memcmp(c.msg, text, sizeof text) == 0);

    /* 10 MiB, each way. */
    size_t big_len = (size_t)10 << 20;
    uint8_t *big = malloc(big_len);
    for (size_t i = 0; i < big_len; i++)
        big[i] = (uint8_t)(i * 7 + (i >> 12));
    check_echo(&c, WSLAY_BINARY_FRAME, big, big_len);
    free(big);

    /* The client closes: the server answers, on_close has its code. */
    CHECK(wslay_event_queue_close(c.ctx, 1000, (const uint8_t *)"done", 4) == 0);
    CHECK(client_pump(&c, 5000, &c.events, 1));
    CHECK(c.closed && c.close_code == 1000);
    CHECK(server_wait(s, &s->closes, 1, 5000));
    CHECK(s->last_code == 1000);
    kb_ws_stats_t stats;
    ended_stats(s, &stats);
    CHECK(stats.opened == 1 && stats.closed == 1 && stats.open == 0);
    CHECK(stats.messages_in == 5 && stats.messages_out == 5);
    CHECK(stats.bytes_in == 5 + 256 + sizeof text + big_len);
    CHECK(stats.bytes_out == stats.bytes_in);
    client_free(&c);
    server_stop(s);
}

static void test_subprotocol(void)
{
    static const char *const ours[] = { JUPYTER_V1, "legacy.example", NULL };
    kb_ws_config_t config = small_timeouts();
    config.protocols = ours;
    server_t *s = server_start(&config);
    char value[256];
    client_t c;

    /* The first offered that we speak, in the client's order. */
    CHECK(client_open(&c, s->port, "foo, legacy.example, " JUPYTER_V1, 0) == 101);
    CHECK(head_value(&c, "Sec-WebSocket-Protocol", value, sizeof value));
    CHECK_STR(value, "legacy.example");
    CHECK(server_wait(s, &s->opens, 1, 5000));
    CHECK_STR(s->protocol, "legacy.example");
    client_free(&c);

    CHECK(client_open(&c, s->port, JUPYTER_V1, 0) == 101);
    CHECK(head_value(&c, "Sec-WebSocket-Protocol", value, sizeof value));
    CHECK_STR(value, JUPYTER_V1);
    CHECK(server_wait(s, &s->opens, 2, 5000));
    CHECK_STR(s->protocol, JUPYTER_V1);
    client_free(&c);

    /* None we speak, or none offered: no header, the legacy form. */
    CHECK(client_open(&c, s->port, "foo, bar", 0) == 101);
    CHECK(!head_value(&c, "Sec-WebSocket-Protocol", value, sizeof value));
    CHECK(server_wait(s, &s->opens, 3, 5000));
    CHECK_STR(s->protocol, "");
    check_echo(&c, WSLAY_TEXT_FRAME, "{}", 2);
    client_free(&c);
    CHECK(server_wait(s, &s->closes, 3, 5000));
    server_stop(s);
}

/*  A request on a fresh connection: its status and head in c. */
static unsigned plain_request(client_t *c, int port, const char *request)
{
    memset(c, 0, sizeof *c);
    c->fd = tcp_connect(port, 0);
    unsigned status = http_exchange(c, request);
    close(c->fd);
    c->fd = -1;
    return status;
}

static void test_bad_handshakes(void)
{
    kb_ws_config_t config = small_timeouts();
    server_t *s = server_start(&config);
    client_t c;
    char value[64];
#define UPGRADE "Upgrade: websocket\r\nConnection: Upgrade\r\n"
    CHECK(plain_request(&c, s->port,
                        "GET /echo HTTP/1.1\r\nHost: x\r\n" UPGRADE
                        "Sec-WebSocket-Version: 13\r\n\r\n")
          == 400);
    CHECK(plain_request(&c, s->port,
                        "GET /echo HTTP/1.1\r\nHost: x\r\n" UPGRADE
                        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: c2hvcnQ=\r\n\r\n")
          == 400);
    CHECK(plain_request(&c, s->port,
                        "GET /echo HTTP/1.1\r\nHost: x\r\n" UPGRADE
                        "Sec-WebSocket-Version: 8\r\nSec-WebSocket-Key: " RFC_KEY "\r\n\r\n")
          == 426);
    CHECK(head_value(&c, "Sec-WebSocket-Version", value, sizeof value));
    CHECK_STR(value, "13");
    CHECK(plain_request(&c, s->port,
                        "POST /echo HTTP/1.1\r\nHost: x\r\n" UPGRADE
                        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " RFC_KEY
                        "\r\nContent-Length: 0\r\n\r\n")
          == 405);
    CHECK(plain_request(&c, s->port,
                        "GET /echo HTTP/1.1\r\nHost: x\r\nSec-WebSocket-Version: 13\r\n"
                        "Sec-WebSocket-Key: " RFC_KEY "\r\n\r\n")
          == 400);
#undef UPGRADE
    CHECK(s->opens == 0 && s->closes == 0);
    kb_ws_stats_t stats;
    ended_stats(s, &stats);
    CHECK(stats.open == 0 && stats.opened == 0);
    server_stop(s);
}

static void test_message_over_the_limit(void)
{
    kb_ws_config_t config = small_timeouts();
    config.max_message = 1 << 20;
    server_t *s = server_start(&config);
    client_t c;
    CHECK(client_open(&c, s->port, NULL, 0) == 101);
    size_t len = 2 << 20;
    uint8_t *big = calloc(1, len);
    client_queue(&c, WSLAY_BINARY_FRAME, big, len);
    free(big);
    CHECK(client_pump(&c, 5000, &c.events, 1));
    CHECK(c.closed && c.close_code == 1009);
    CHECK(server_wait(s, &s->closes, 1, 5000));
    CHECK(s->last_code == 1009);
    kb_ws_stats_t stats;
    ended_stats(s, &stats);
    CHECK(stats.closed_too_big == 1 && stats.messages_in == 0);
    client_free(&c);
    server_stop(s);
}

static void test_keepalive(void)
{
    kb_ws_config_t config = small_timeouts();
    server_t *s = server_start(&config);
    client_t c;
    CHECK(client_open(&c, s->port, NULL, 0) == 101);
    /* A client that answers pings (wslay does) stays, several pings long. */
    client_pump(&c, 1500, NULL, 0);
    CHECK(s->closes == 0 && !c.gone);
    check_echo(&c, WSLAY_TEXT_FRAME, "still here", 10);
    /* One that stops answering is dropped after the ping's timeout. */
    double start = kb_test_now();
    CHECK(server_wait(s, &s->closes, 1, 5000));
    double took = kb_test_now() - start;
    CHECK(took < 2.0);
    CHECK(s->last_code == KB_WS_ABNORMAL);
    kb_ws_stats_t stats;
    ended_stats(s, &stats);
    CHECK(stats.closed_unresponsive == 1);
    client_free(&c);
    server_stop(s);
}

static void test_backpressure(void)
{
    kb_ws_config_t config = small_timeouts();
    config.max_queued = 1 << 20;
    config.ping_interval_ms = 60000;
    server_t *s = server_start(&config);
    client_t c;
    CHECK(client_open(&c, s->port, NULL, 4096) == 101);
    CHECK(server_wait(s, &s->opens, 1, 5000));
    kb_ws_t *ws = server_last(s);
    CHECK(ws != NULL);
    static uint8_t chunk[64 << 10];
    kb_ws_send_status_t rc = KB_WS_SENT;
    bool bounded = true;
    /* The client reads nothing: past the kernel's buffers the queue fills
       to its cap and the sender is told. */
    for (int i = 0; i < 10000 && rc == KB_WS_SENT; i++) {
        rc = kb_ws_send(ws, true, chunk, sizeof chunk);
        if (kb_ws_queued(ws) > config.max_queued)
            bounded = false;
    }
    CHECK(rc == KB_WS_OVERFLOW);
    CHECK(bounded);
    CHECK(kb_ws_queued_peak(ws) <= config.max_queued);
    CHECK(kb_ws_send(ws, false, "x", 1) == KB_WS_CLOSED);
    CHECK(server_wait(s, &s->closes, 1, 5000));
    CHECK(s->last_code == KB_WS_POLICY);
    CHECK(kb_ws_send(ws, false, "x", 1) == KB_WS_CLOSED);
    CHECK(kb_ws_queued(ws) == 0);
    kb_ws_stats_t stats;
    ended_stats(s, &stats);
    CHECK(stats.closed_backpressure == 1 && stats.closed_unresponsive == 0);
    kb_ws_unref(&ws);
    client_free(&c);
    server_stop(s);
}

/*  What a sender queued before its close goes before it (wslay sends a
    close frame ahead of queued data, and no data after): the client of a
    kernel that is deleted gets the kernel's last status, then the close. */
static void test_messages_queued_before_a_close_go_first(void)
{
    kb_ws_config_t config = small_timeouts();
    server_t *s = server_start(&config);
    client_t c;
    CHECK(client_open(&c, s->port, NULL, 0) == 101);
    CHECK(server_wait(s, &s->opens, 1, 5000));
    kb_ws_t *ws = server_last(s);
    CHECK(ws != NULL);
    static uint8_t big[1 << 20];
    memset(big, 'b', sizeof big);
    for (int i = 0; i < 50; i++)
        CHECK(kb_ws_send(ws, false, "status", 6) == KB_WS_SENT);
    CHECK(kb_ws_send(ws, true, big, sizeof big) == KB_WS_SENT);
    CHECK(kb_ws_send(ws, false, "dead", 4) == KB_WS_SENT);
    kb_ws_close(ws, KB_WS_NORMAL, "deleted");
    CHECK(kb_ws_send(ws, false, "late", 4) == KB_WS_CLOSED);
    CHECK(client_pump(&c, 5000, &c.events, 1));
    CHECK(c.closed && c.close_code == KB_WS_NORMAL);
    CHECK(c.messages_at_close == 52);
    CHECK(c.len == 4 && c.msg && memcmp(c.msg, "dead", 4) == 0);
    client_pump(&c, 500, NULL, 0); /* our answer to the close */
    CHECK(server_wait(s, &s->closes, 1, 5000));
    CHECK(s->last_code == KB_WS_NORMAL);
    kb_ws_unref(&ws);
    client_free(&c);
    server_stop(s);
}

static void test_abrupt_disconnect(void)
{
    kb_ws_config_t config = small_timeouts();
    server_t *s = server_start(&config);
    client_t c;
    /* A reset... */
    CHECK(client_open(&c, s->port, NULL, 0) == 101);
    CHECK(server_wait(s, &s->opens, 1, 5000));
    struct linger hard = { 1, 0 };
    setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
    client_free(&c);
    CHECK(server_wait(s, &s->closes, 1, 5000));
    CHECK(s->last_code == KB_WS_ABNORMAL);
    /* ...and an EOF: one on_close each, never two. */
    CHECK(client_open(&c, s->port, NULL, 0) == 101);
    CHECK(server_wait(s, &s->opens, 2, 5000));
    client_free(&c);
    CHECK(server_wait(s, &s->closes, 2, 5000));
    usleep(300 * 1000);
    CHECK(s->closes == 2);
    CHECK(s->last_code == KB_WS_ABNORMAL);
    kb_ws_stats_t stats;
    ended_stats(s, &stats);
    CHECK(stats.opened == 2 && stats.closed == 2 && stats.open == 0);
    server_stop(s);
}

static void test_server_stop(void)
{
    kb_ws_config_t config = small_timeouts();
    server_t *s = server_start(&config);
    client_t a, b;
    CHECK(client_open(&a, s->port, NULL, 0) == 101);
    CHECK(client_open(&b, s->port, NULL, 0) == 101);
    CHECK(server_wait(s, &s->opens, 2, 5000));
    kb_ws_group_close_all(s->group, KB_WS_GOING_AWAY, "the server is stopping");
    /* a answers the close; b does not read and is dropped after the close
       timeout; either way the group is empty soon. */
    CHECK(client_pump(&a, 5000, &a.events, 1));
    CHECK(a.closed && a.close_code == KB_WS_GOING_AWAY);
    CHECK(kb_ws_group_wait(s->group, 5000));
    CHECK(s->closes == 2);
    CHECK(s->last_code == KB_WS_GOING_AWAY);
    /* b finds the close frame in its buffer. */
    CHECK(client_pump(&b, 5000, &b.events, 1));
    CHECK(b.closed && b.close_code == KB_WS_GOING_AWAY);
    client_free(&a);
    client_free(&b);

    /* Stopping with a websocket still open closes it the same way. */
    CHECK(client_open(&a, s->port, NULL, 0) == 101);
    CHECK(server_wait(s, &s->opens, 3, 5000));
    server_stop(s);
    CHECK(client_pump(&a, 5000, &a.events, 1));
    CHECK(a.closed && a.close_code == KB_WS_GOING_AWAY);
    client_free(&a);
}

static int count_threads(void)
{
    return kb_test_count_entries("/proc/self/task");
}

int main(void)
{
    alarm(180); /* never hang */
    int fds = kb_test_count_fds();
    int threads = count_threads();
    RUN_TEST(test_handshake_and_echo);
    RUN_TEST(test_subprotocol);
    RUN_TEST(test_bad_handshakes);
    RUN_TEST(test_message_over_the_limit);
    RUN_TEST(test_keepalive);
    RUN_TEST(test_backpressure);
    RUN_TEST(test_messages_queued_before_a_close_go_first);
    RUN_TEST(test_abrupt_disconnect);
    RUN_TEST(test_server_stop);
    CHECK(kb_test_count_fds() == fds);
    CHECK(count_threads() == threads);
    return kb_test_summary();
}
