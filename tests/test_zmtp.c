/*  test_zmtp.c - the loop's own ZMTP socket (src/wire/kb_zmtp.c) against
    real libzmq peers, on one loop: a DEALER to a ROUTER both ways, with a
    routing id, frames short, long and empty, and messages of 20 MiB; sent
    before the peer binds, and after it went and came back; a SUB to a PUB;
    a frame over the limit and a message of too many frames; reading
    stopped and resumed, and drained only when all was read; destroyed
    from its own callback; a Unix socket; a
    peer that is not ZeroMQ, and one of a socket type that does not go;
    endpoints it cannot read. No descriptor is left. */
#include <czmq.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kb_testutil.h"
#include "util/kb_loop.h"
#include "wire/kb_zmtp.h"

#define T_MAX_GOT 8

typedef struct t_case t_case_t;
struct t_case {
    kb_loop_t *loop;
    kb_zmtp_t *zmtp;
    zsock_t *peer;
    kb_io_t peer_io;
    zmsg_t *got[T_MAX_GOT]; /* messages the zmtp socket read, in order */
    size_t ngot;
    zmsg_t *peer_got[T_MAX_GOT];
    size_t npeer;
    int opened, too_many, drained;
    int drained_at_message; /* drained as the last message was given */
    int drops[3];           /* by kb_zmtp_drop_t */
    bool destroy_on_message;
    bool (*done)(t_case_t *c);
    void (*tick)(t_case_t *c); /* called every 5 ms while waiting, or NULL */
    kb_timer_t timer;
    int64_t deadline_ms;
    int listen_fd; /* a peer that is not libzmq */
    const char *listen_reply;
    size_t listen_reply_len;
    kb_io_t listen_io;
    int accepted_fd;
};

static void s_on_message(kb_zmtp_t *zmtp, const kb_frame_t *frames, size_t count, void *arg)
{
    t_case_t *c = arg;
    zmsg_t *msg = zmsg_new();
    for (size_t i = 0; i < count; i++)
        zmsg_addmem(msg, frames[i].data, frames[i].size);
    c->drained_at_message = c->drained;
    if (c->ngot < T_MAX_GOT)
        c->got[c->ngot++] = msg;
    else
        zmsg_destroy(&msg);
    if (c->destroy_on_message) {
        kb_zmtp_destroy(&c->zmtp);
        CHECK(c->zmtp == NULL);
        (void)zmtp;
    }
}

static void s_on_too_many(kb_zmtp_t *zmtp, void *arg)
{
    (void)zmtp;
    ((t_case_t *)arg)->too_many++;
}

static void s_on_dropped(kb_zmtp_t *zmtp, kb_zmtp_drop_t why, void *arg)
{
    (void)zmtp;
    ((t_case_t *)arg)->drops[why]++;
}

static void s_on_opened(kb_zmtp_t *zmtp, void *arg)
{
    (void)zmtp;
    ((t_case_t *)arg)->opened++;
}

static void s_on_drained(kb_zmtp_t *zmtp, void *arg)
{
    (void)zmtp;
    ((t_case_t *)arg)->drained++;
}

static const kb_zmtp_callbacks_t s_callbacks = { .message = s_on_message,
                                                 .too_many = s_on_too_many,
                                                 .dropped = s_on_dropped,
                                                 .opened = s_on_opened,
                                                 .drained = s_on_drained };

static void s_on_peer(kb_io_t *io, void *arg)
{
    (void)io;
    t_case_t *c = arg;
    while (zsock_events(c->peer) & ZMQ_POLLIN) {
        zmsg_t *msg = zmsg_recv(c->peer);
        if (!msg)
            break;
        if (c->npeer < T_MAX_GOT)
            c->peer_got[c->npeer++] = msg;
        else
            zmsg_destroy(&msg);
    }
}

static void s_peer(t_case_t *c, zsock_t *peer)
{
    if (c->peer) {
        kb_io_stop(&c->peer_io);
        zsock_destroy(&c->peer);
    }
    c->peer = peer;
    if (peer)
        CHECK(kb_io_start_zmq(c->loop, &c->peer_io, zsock_resolve(peer), s_on_peer, c) == 0);
}

static void s_on_tick(kb_timer_t *timer, void *arg)
{
    t_case_t *c = arg;
    if ((c->done && c->done(c)) || kb_loop_now_ms(c->loop) >= c->deadline_ms) {
        kb_timer_stop(timer);
        kb_loop_stop(c->loop);
        return;
    }
    if (c->tick)
        c->tick(c);
}

/*  Run the loop until done(c) or ms passed; whether done. */
static bool s_run(t_case_t *c, bool (*done)(t_case_t *), int ms)
{
    c->done = done;
    c->deadline_ms = kb_loop_now_ms(c->loop) + ms;
    kb_timer_start(c->loop, &c->timer, 1, 5, s_on_tick, c);
    kb_loop_run(c->loop);
    kb_timer_stop(&c->timer);
    c->tick = NULL;
    return done ? done(c) : true;
}

static bool s_opened(t_case_t *c)
{
    return c->opened > c->drops[0] + c->drops[1] + c->drops[2];
}

static bool s_opened_once(t_case_t *c)
{
    return c->opened >= 1;
}

static bool s_peer_got_one(t_case_t *c)
{
    return c->npeer >= 1;
}

static bool s_got_one(t_case_t *c)
{
    return c->ngot >= 1;
}

static bool s_got_three(t_case_t *c)
{
    return c->ngot >= 3;
}

static bool s_dropped(t_case_t *c)
{
    return c->drops[0] + c->drops[1] + c->drops[2] > 0;
}

static void s_case_init(t_case_t *c)
{
    *c = (t_case_t){ .loop = kb_loop_new(), .listen_fd = -1, .accepted_fd = -1 };
    kb_timer_init(&c->timer);
}

static void s_case_free(t_case_t *c)
{

    kb_zmtp_destroy(&c->zmtp);
    s_peer(c, NULL);
    for (size_t i = 0; i < c->ngot; i++)
        zmsg_destroy(&c->got[i]);
    for (size_t i = 0; i < c->npeer; i++)
        zmsg_destroy(&c->peer_got[i]);
    kb_io_stop(&c->listen_io);
    if (c->listen_fd >= 0)
        close(c->listen_fd);
    if (c->accepted_fd >= 0)
        close(c->accepted_fd);
    kb_loop_flush(c->loop);
    kb_loop_destroy(&c->loop);
}

static void s_forget_got(t_case_t *c)
{
    for (size_t i = 0; i < c->ngot; i++)
        zmsg_destroy(&c->got[i]);
    c->ngot = 0;
    for (size_t i = 0; i < c->npeer; i++)
        zmsg_destroy(&c->peer_got[i]);
    c->npeer = 0;
}

/*  The count of open descriptors once libzmq's reaper thread has closed
    what its destroyed sockets had (it does so a little later). */
static int s_fds(void)
{
    int last = kb_test_count_fds(), same = 0;
    for (int i = 0; i < 200 && same < 5; i++) {
        usleep(10 * 1000);
        int now = kb_test_count_fds();
        same = now == last ? same + 1 : 0;
        last = now;
    }
    return last;
}

static bool s_frame_is(zframe_t *frame, const void *data, size_t size)
{
    return frame && zframe_size(frame) == size && memcmp(zframe_data(frame), data, size) == 0;
}

static kb_zmtp_t *s_dealer(t_case_t *c, const char *endpoint, uint64_t max_frame)
{
    kb_zmtp_opts_t opts
        = { .type = KB_ZMTP_DEALER, .identity = "kernelbridge-7", .max_frame = max_frame };
    return kb_zmtp_new(c->loop, endpoint, &opts, &s_callbacks, c);
}

static char *s_endpoint(zsock_t *sock)
{
    return zsock_last_endpoint(sock);
}

/*  A ROUTER bound on loopback and a DEALER connected to it, whose first
    message ("hello") the ROUTER has read: it knows the routing id. */
static void s_connected_dealer(t_case_t *c, uint64_t max_frame)
{
    s_peer(c, zsock_new(ZMQ_ROUTER));
    CHECK(zsock_bind(c->peer, "tcp://127.0.0.1:*") > 0);
    char *endpoint = s_endpoint(c->peer);
    c->zmtp = s_dealer(c, endpoint, max_frame);
    freen(endpoint);
    kb_frame_t hello = { (unsigned char *)"hello", 5 };
    CHECK(kb_zmtp_send(c->zmtp, &hello, 1) == 0);
    CHECK(s_run(c, s_peer_got_one, 5000));
}

/*  A free loopback port: bound by a socket that is then closed (a plain
    one: libzmq closes its own later, on its reaper thread). */
static int s_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof addr;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0
        && getsockname(fd, (struct sockaddr *)&addr, &len) == 0)
        port = ntohs(addr.sin_port);
    close(fd);
    return port;
}

static void test_dealer_and_router_both_ways(void)
{
    int fds = s_fds();
    t_case_t c;
    s_case_init(&c);
    s_peer(&c, zsock_new(ZMQ_ROUTER));
    CHECK(zsock_bind(c.peer, "tcp://127.0.0.1:*") > 0);
    char *endpoint = s_endpoint(c.peer);
    c.zmtp = s_dealer(&c, endpoint, 0);
    freen(endpoint);
    CHECK(c.zmtp != NULL);
    char long_frame[300];
    memset(long_frame, 'b', sizeof long_frame);
    kb_frame_t frames[] = { { (unsigned char *)"a", 1 },
                            { (unsigned char *)long_frame, sizeof long_frame },
                            { (unsigned char *)"", 0 } };
    CHECK(kb_zmtp_send(c.zmtp, frames, 3) == 0); /* queued until open */
    CHECK(s_run(&c, s_peer_got_one, 5000));
    CHECK(c.opened == 1 && kb_zmtp_open(c.zmtp) && kb_zmtp_opens(c.zmtp) == 1);
    if (c.npeer == 1) {
        zmsg_t *msg = c.peer_got[0];
        CHECK(zmsg_size(msg) == 4);
        CHECK(s_frame_is(zmsg_first(msg), "kernelbridge-7", 14));
        CHECK(s_frame_is(zmsg_next(msg), "a", 1));
        CHECK(s_frame_is(zmsg_next(msg), long_frame, sizeof long_frame));
        CHECK(s_frame_is(zmsg_next(msg), "", 0));
    }
    /* the peer answers: 70,000 bytes and 256 (the first long size) */
    size_t big = 70000;
    char *data = malloc(big);
    for (size_t i = 0; i < big; i++)
        data[i] = (char)(i * 7);
    zmsg_t *reply = zmsg_new();
    zmsg_addstr(reply, "kernelbridge-7");
    zmsg_addstr(reply, "x");
    zmsg_addmem(reply, data, big);
    zmsg_addmem(reply, data, 256);
    CHECK(zmsg_send(&reply, c.peer) == 0);
    CHECK(s_run(&c, s_got_one, 5000));
    if (c.ngot == 1) {
        zmsg_t *msg = c.got[0];
        CHECK(zmsg_size(msg) == 3);
        CHECK(s_frame_is(zmsg_first(msg), "x", 1));
        CHECK(s_frame_is(zmsg_next(msg), data, big));
        CHECK(s_frame_is(zmsg_next(msg), data, 256));
    }
    /* 20 MiB each way: reads over many turns, buffers grown and given back */
    free(data);
    big = 20u << 20;
    data = malloc(big);
    for (size_t i = 0; i < big; i++)
        data[i] = (char)(i * 13 + (i >> 16));
    s_forget_got(&c);
    kb_frame_t one = { (unsigned char *)data, big };
    CHECK(kb_zmtp_send(c.zmtp, &one, 1) == 0);
    CHECK(s_run(&c, s_peer_got_one, 10000));
    if (c.npeer == 1) {
        zframe_t *id = zmsg_pop(c.peer_got[0]);
        CHECK(s_frame_is(zmsg_first(c.peer_got[0]), data, big));
        reply = zmsg_new();
        zmsg_append(reply, &id);
        zmsg_addmem(reply, data, big);
        CHECK(zmsg_send(&reply, c.peer) == 0);
    }
    CHECK(s_run(&c, s_got_one, 10000));
    CHECK(c.ngot == 1 && s_frame_is(zmsg_first(c.got[0]), data, big));
    CHECK(kb_zmtp_unread(c.zmtp) == 0);
    CHECK(c.drops[0] + c.drops[1] + c.drops[2] == 0);
    /* 20 MiB took turns of KB_ZMTP_READ_BUDGET: drained only when all was read */
    CHECK(c.drained > 0);
    /*  A message of exactly one turn's budget (frame head included): when
        one turn reads all of it, the connection is found drained the next */
    s_forget_got(&c);
    if (c.npeer == 0 && c.ngot == 0) {
        reply = zmsg_new();
        zmsg_addstr(reply, "kernelbridge-7");
        zmsg_addmem(reply, data, KB_ZMTP_READ_BUDGET - 9);
        CHECK(zmsg_send(&reply, c.peer) == 0);
        CHECK(s_run(&c, s_got_one, 10000));
        s_run(&c, NULL, 100);
        CHECK(c.ngot == 1 && c.drained > c.drained_at_message && kb_zmtp_unread(c.zmtp) == 0);
    }
    free(data);
    s_case_free(&c);
    CHECK(s_fds() == fds);
}

static void test_sent_before_the_peer_binds_and_after_it_came_back(void)
{
    t_case_t c;
    s_case_init(&c);
    int port = s_free_port();
    char endpoint[64];
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", port);
    c.zmtp = s_dealer(&c, endpoint, 0);
    kb_frame_t hello = { (unsigned char *)"hello", 5 };
    CHECK(kb_zmtp_send(c.zmtp, &hello, 1) == 0);
    s_run(&c, NULL, 300); /* refused, tried again every 100 ms */
    CHECK(!kb_zmtp_open(c.zmtp) && c.opened == 0 && !s_dropped(&c));
    s_peer(&c, zsock_new(ZMQ_ROUTER));
    CHECK(zsock_bind(c.peer, "%s", endpoint) == port);
    CHECK(s_run(&c, s_peer_got_one, 5000));
    CHECK(c.npeer == 1 && s_frame_is(zmsg_last(c.peer_got[0]), "hello", 5));
    /* the peer goes: dropped, closed; a new one on the port is found */
    s_peer(&c, NULL);
    CHECK(s_run(&c, s_dropped, 5000));
    CHECK(c.drops[KB_ZMTP_CLOSED] == 1 && !kb_zmtp_open(c.zmtp));
    s_peer(&c, zsock_new(ZMQ_ROUTER));
    CHECK(zsock_bind(c.peer, "%s", endpoint) == port);
    CHECK(s_run(&c, s_opened, 5000));
    kb_frame_t again = { (unsigned char *)"again", 5 };
    CHECK(kb_zmtp_send(c.zmtp, &again, 1) == 0);
    s_forget_got(&c);
    CHECK(s_run(&c, s_peer_got_one, 5000));
    CHECK(c.npeer == 1 && s_frame_is(zmsg_last(c.peer_got[0]), "again", 5));
    CHECK(kb_zmtp_opens(c.zmtp) == 2);
    s_case_free(&c);
}

static int s_published;

static void s_publish(t_case_t *c)
{
    zmsg_t *msg = zmsg_new();
    zmsg_addstrf(msg, "topic-%d", s_published++);
    zmsg_addstr(msg, "body");
    zmsg_send(&msg, c->peer);
}

static void test_sub_reads_all_a_pub_sends(void)
{
    t_case_t c;
    s_case_init(&c);
    s_peer(&c, zsock_new(ZMQ_PUB));
    CHECK(zsock_bind(c.peer, "tcp://127.0.0.1:*") > 0);
    char *endpoint = s_endpoint(c.peer);
    kb_zmtp_opts_t opts = { .type = KB_ZMTP_SUB };
    c.zmtp = kb_zmtp_new(c.loop, endpoint, &opts, &s_callbacks, &c);
    freen(endpoint);
    CHECK(s_run(&c, s_opened, 5000));
    /* the subscription reaches the PUB some time after the handshake */
    c.tick = s_publish;
    CHECK(s_run(&c, s_got_three, 5000));
    for (size_t i = 0; i < c.ngot; i++) {
        CHECK(zmsg_size(c.got[i]) == 2);
        char *topic = zmsg_popstr(c.got[i]);
        CHECK(topic && strncmp(topic, "topic-", 6) == 0);
        freen(topic);
        CHECK(s_frame_is(zmsg_first(c.got[i]), "body", 4));
    }
    s_case_free(&c);
}

static void s_send_to_dealer(t_case_t *c)
{
    zmsg_t *msg = zmsg_new();
    zmsg_addstr(msg, "kernelbridge-7");
    zmsg_addstr(msg, "small");
    zmsg_send(&msg, c->peer);
}

static void test_a_frame_over_the_limit_drops_the_connection(void)
{
    t_case_t c;
    s_case_init(&c);
    s_connected_dealer(&c, 1000);
    char over[1001] = { 0 };
    zmsg_t *msg = zmsg_new();
    zmsg_addstr(msg, "kernelbridge-7");
    zmsg_addmem(msg, over, 1000); /* at the limit: read */
    CHECK(zmsg_send(&msg, c.peer) == 0);
    CHECK(s_run(&c, s_got_one, 5000));
    msg = zmsg_new();
    zmsg_addstr(msg, "kernelbridge-7");
    zmsg_addmem(msg, over, 1001);
    CHECK(zmsg_send(&msg, c.peer) == 0);
    CHECK(s_run(&c, s_dropped, 5000));
    CHECK(c.drops[KB_ZMTP_TOO_LARGE] == 1 && c.ngot == 1);
    /* it connects again by itself, and what fits goes on */
    s_forget_got(&c);
    c.tick = s_send_to_dealer; /* a ROUTER drops what it sends to a routing id it has not */
    CHECK(s_run(&c, s_got_one, 5000));
    CHECK(c.ngot >= 1 && s_frame_is(zmsg_first(c.got[0]), "small", 5));
    CHECK(kb_zmtp_opens(c.zmtp) == 2);
    s_case_free(&c);
}

static void test_a_message_of_too_many_frames_is_dropped_alone(void)
{
    t_case_t c;
    s_case_init(&c);
    s_connected_dealer(&c, 0);
    zmsg_t *msg = zmsg_new();
    zmsg_addstr(msg, "kernelbridge-7");
    for (int i = 0; i < KB_WIRE_MAX_FRAMES + 5; i++)
        zmsg_addstrf(msg, "%d", i);
    CHECK(zmsg_send(&msg, c.peer) == 0);
    s_send_to_dealer(&c);
    CHECK(s_run(&c, s_got_one, 5000));
    CHECK(c.too_many == 1 && c.ngot == 1 && !s_dropped(&c));
    CHECK(c.ngot == 1 && s_frame_is(zmsg_first(c.got[0]), "small", 5));
    s_case_free(&c);
}

static void test_reading_stopped_and_resumed(void)
{
    t_case_t c;
    s_case_init(&c);
    s_connected_dealer(&c, 0);
    kb_zmtp_set_reading(c.zmtp, false);
    for (int i = 0; i < 3; i++)
        s_send_to_dealer(&c);
    int drained = c.drained;
    s_run(&c, NULL, 200);
    CHECK(c.ngot == 0 && c.drained == drained); /* not reading: never drained */
    kb_zmtp_set_reading(c.zmtp, true);
    CHECK(s_run(&c, s_got_three, 5000));
    CHECK(c.ngot == 3);
    /* stopped while messages wait whole in its buffer: they come when resumed */
    s_forget_got(&c);
    for (int i = 0; i < 3; i++)
        s_send_to_dealer(&c);
    c.destroy_on_message = false;
    CHECK(s_run(&c, s_got_one, 5000));
    kb_zmtp_set_reading(c.zmtp, false);
    s_run(&c, NULL, 100);
    size_t before = c.ngot;
    kb_zmtp_set_reading(c.zmtp, true);
    CHECK(s_run(&c, s_got_three, 5000));
    CHECK(before >= 1 && c.ngot == 3);
    s_case_free(&c);
}

static void test_destroyed_from_its_own_callback(void)
{
    t_case_t c;
    s_case_init(&c);
    s_peer(&c, zsock_new(ZMQ_ROUTER));
    CHECK(zsock_bind(c.peer, "tcp://127.0.0.1:*") > 0);
    int fds = s_fds(); /* libzmq's own made: what follows is ours */
    char *endpoint = s_endpoint(c.peer);
    c.zmtp = s_dealer(&c, endpoint, 0);
    freen(endpoint);
    kb_frame_t hello = { (unsigned char *)"hello", 5 };
    CHECK(kb_zmtp_send(c.zmtp, &hello, 1) == 0);
    CHECK(s_run(&c, s_peer_got_one, 5000));
    c.destroy_on_message = true;
    for (int i = 0; i < 3; i++) /* in one read, most likely: the rest is not given */
        s_send_to_dealer(&c);
    CHECK(s_run(&c, s_got_one, 5000));
    s_run(&c, NULL, 100);
    CHECK(c.ngot == 1 && c.zmtp == NULL);
    CHECK(s_fds() == fds);
    s_case_free(&c);
}

static void test_a_unix_socket(void)
{
    char *dir = kb_test_tmpdir();
    char endpoint[512];
    snprintf(endpoint, sizeof endpoint, "ipc://%s/shell", dir);
    t_case_t c;
    s_case_init(&c);
    s_peer(&c, zsock_new(ZMQ_ROUTER));
    CHECK(zsock_bind(c.peer, "%s", endpoint) == 0);
    c.zmtp = s_dealer(&c, endpoint, 0);
    kb_frame_t hello = { (unsigned char *)"hello", 5 };
    CHECK(kb_zmtp_send(c.zmtp, &hello, 1) == 0);
    CHECK(s_run(&c, s_peer_got_one, 5000));
    s_send_to_dealer(&c);
    CHECK(s_run(&c, s_got_one, 5000));
    CHECK(c.ngot == 1 && s_frame_is(zmsg_first(c.got[0]), "small", 5));
    s_case_free(&c);
    kb_test_rmtree(dir);
    free(dir);
}

/*  A peer that answers with c->listen_reply. */
static void s_on_listen(kb_io_t *io, void *arg)
{
    (void)io;
    t_case_t *c = arg;
    int fd = accept(c->listen_fd, NULL, NULL);
    if (fd < 0)
        return;
    CHECK(write(fd, c->listen_reply, c->listen_reply_len) == (ssize_t)c->listen_reply_len);
    if (c->accepted_fd >= 0)
        close(c->accepted_fd);
    c->accepted_fd = fd;
}

/*  A greeting of ZMTP 3.0 with NULL, and READY saying Socket-Type PUB. */
static size_t s_pub_greeting(char *out)
{
    memset(out, 0, 64);
    out[0] = (char)0xFF;
    out[9] = 0x7F;
    out[10] = 3;
    memcpy(out + 12, "NULL", 4);
    const char ready[] = "\x04\x19\x05READY\x0bSocket-Type\0\0\0\x03PUB";
    memcpy(out + 64, ready, sizeof ready - 1);
    return 64 + sizeof ready - 1;
}

static void test_a_peer_that_is_not_zeromq_or_does_not_go(void)
{
    int fds = s_fds();
    t_case_t c;
    s_case_init(&c);
    c.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof addr;
    CHECK(bind(c.listen_fd, (struct sockaddr *)&addr, sizeof addr) == 0);
    CHECK(listen(c.listen_fd, 4) == 0);
    CHECK(getsockname(c.listen_fd, (struct sockaddr *)&addr, &len) == 0);
    CHECK(kb_io_start(c.loop, &c.listen_io, c.listen_fd, s_on_listen, &c) == 0);
    char endpoint[64];
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", ntohs(addr.sin_port));
    /* 64 bytes of something else */
    char text[128];
    memset(text, 'H', 64);
    c.listen_reply = text;
    c.listen_reply_len = 64;
    c.zmtp = s_dealer(&c, endpoint, 0);
    CHECK(s_run(&c, s_dropped, 5000));
    CHECK(c.drops[KB_ZMTP_PROTOCOL] == 1 && c.opened == 0);
    kb_zmtp_destroy(&c.zmtp);
    /* ZMTP, but a PUB: it does not go with a DEALER */
    c.listen_reply_len = s_pub_greeting(text);
    c.drops[KB_ZMTP_PROTOCOL] = 0;
    c.zmtp = s_dealer(&c, endpoint, 0);
    CHECK(s_run(&c, s_dropped, 5000));
    CHECK(c.drops[KB_ZMTP_PROTOCOL] == 1 && c.opened == 0);
    /* the same to a SUB opens it */
    kb_zmtp_destroy(&c.zmtp);
    kb_zmtp_opts_t opts = { .type = KB_ZMTP_SUB };
    c.zmtp = kb_zmtp_new(c.loop, endpoint, &opts, &s_callbacks, &c);
    CHECK(s_run(&c, s_opened_once, 5000));
    CHECK(c.opened == 1 && kb_zmtp_open(c.zmtp));
    s_case_free(&c);
    CHECK(s_fds() == fds);
}

static void test_endpoints_it_cannot_read(void)
{
    kb_loop_t *loop = kb_loop_new();
    kb_zmtp_opts_t opts = { .type = KB_ZMTP_DEALER };
    const char *bad[] = { "tcp://127.0.0.1", "tcp://:5555",     "udp://127.0.0.1:5555",
                          "ipc://",          "tcp://[::1:5555", "tcp://127.0.0.1:" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        errno = 0;
        CHECK(kb_zmtp_new(loop, bad[i], &opts, &s_callbacks, NULL) == NULL && errno == EINVAL);
    }
    char long_identity[300];
    memset(long_identity, 'i', sizeof long_identity - 1);
    long_identity[sizeof long_identity - 1] = 0;
    opts.identity = long_identity;
    CHECK(kb_zmtp_new(loop, "tcp://127.0.0.1:5555", &opts, &s_callbacks, NULL) == NULL);
    kb_loop_destroy(&loop);
}

int main(void)
{
    zsys_init();
    zsys_set_linger(0);
    zsock_t *first = zsock_new(ZMQ_ROUTER); /* libzmq's own descriptors made before any count */
    zsock_destroy(&first);
    RUN_TEST(test_dealer_and_router_both_ways);
    RUN_TEST(test_sent_before_the_peer_binds_and_after_it_came_back);
    RUN_TEST(test_sub_reads_all_a_pub_sends);
    RUN_TEST(test_a_frame_over_the_limit_drops_the_connection);
    RUN_TEST(test_a_message_of_too_many_frames_is_dropped_alone);
    RUN_TEST(test_reading_stopped_and_resumed);
    RUN_TEST(test_destroyed_from_its_own_callback);
    RUN_TEST(test_a_unix_socket);
    RUN_TEST(test_a_peer_that_is_not_zeromq_or_does_not_go);
    RUN_TEST(test_endpoints_it_cannot_read);
    return kb_test_summary();
}
