/*  test_loop.c - the engine's event loop (src/util/kb_loop.c): timers in
    order, stopped, repeated and restarted from their own callbacks; calls
    deferred to the end of the turn; coarse timers, all due in one turn;
    descriptor watches, a watch stopped
    while its event is pending; ZeroMQ sockets through ZMQ_FD, edge
    triggered, including messages that arrive while the owner sends. */
#include <czmq.h>
#include <unistd.h>

#include "kb_testutil.h"
#include "util/kb_loop.h"

typedef struct {
    kb_loop_t *loop;
    char order[64];
    size_t len;
    int fired;
    kb_timer_t timers[4];
    int stop_after;
} kb_timers_case_t;

static void s_mark(kb_timer_t *timer, void *arg)
{
    kb_timers_case_t *c = arg;
    char name = (char)('a' + (timer - c->timers));
    c->order[c->len++] = name;
    if (c->len >= (size_t)c->stop_after)
        kb_loop_stop(c->loop);
}

static void test_timers_fire_in_order_and_stop(void)
{
    kb_timers_case_t c = { .loop = kb_loop_new(), .stop_after = 3 };
    for (int i = 0; i < 4; i++)
        kb_timer_init(&c.timers[i]);
    kb_timer_start(c.loop, &c.timers[0], 30, 0, s_mark, &c);
    kb_timer_start(c.loop, &c.timers[1], 10, 0, s_mark, &c);
    kb_timer_start(c.loop, &c.timers[2], 20, 0, s_mark, &c);
    kb_timer_start(c.loop, &c.timers[3], 15, 0, s_mark, &c);
    kb_timer_stop(&c.timers[3]); /* stopped before it was due: never fires */
    kb_timer_stop(&c.timers[3]); /* and a second stop is harmless */
    CHECK(kb_loop_timer_count(c.loop) == 3);
    int64_t started = kb_loop_now_ms(c.loop);
    CHECK(kb_loop_run(c.loop) == 0);
    c.order[c.len] = 0;
    CHECK_STR(c.order, "bca");
    CHECK(kb_loop_now_ms(c.loop) - started >= 30);
    CHECK(kb_loop_timer_count(c.loop) == 0);
    CHECK(!kb_timer_active(&c.timers[0]));
    kb_loop_destroy(&c.loop);
    CHECK(c.loop == NULL);
}

static void s_count_to_five(kb_timer_t *timer, void *arg)
{
    kb_timers_case_t *c = arg;
    if (++c->fired == 5) {
        kb_timer_stop(timer); /* a repeating timer stopped from its own callback */
        kb_loop_stop(c->loop);
    }
}

static void test_repeating_timer(void)
{
    kb_timers_case_t c = { .loop = kb_loop_new() };
    kb_timer_init(&c.timers[0]);
    kb_timer_start(c.loop, &c.timers[0], 1, 2, s_count_to_five, &c);
    kb_loop_run(c.loop);
    CHECK(c.fired == 5);
    CHECK(kb_loop_timer_count(c.loop) == 0);
    kb_loop_destroy(&c.loop);
}

/*  A timer that restarts itself with no delay waits for the next turn: the
    turn still ends, so the other timer (due later) gets its turn too. */
static void s_restart_at_once(kb_timer_t *timer, void *arg)
{
    kb_timers_case_t *c = arg;
    c->fired++;
    kb_timer_start(c->loop, timer, 0, 0, s_restart_at_once, c);
}

static void s_end(kb_timer_t *timer, void *arg)
{
    kb_timers_case_t *c = arg;
    kb_timer_stop(&c->timers[0]);
    kb_loop_stop(c->loop);
}

static void test_zero_delay_restart_does_not_starve(void)
{
    kb_timers_case_t c = { .loop = kb_loop_new() };
    kb_timer_init(&c.timers[0]);
    kb_timer_init(&c.timers[1]);
    kb_timer_start(c.loop, &c.timers[0], 0, 0, s_restart_at_once, &c);
    kb_timer_start(c.loop, &c.timers[1], 20, 0, s_end, &c);
    kb_loop_run(c.loop);
    CHECK(c.fired > 1);
    CHECK(kb_loop_timer_count(c.loop) == 0);
    kb_loop_destroy(&c.loop);
}

/*  Coarse timers started at different moments are due on one grid: each
    period, all of them fire in the same turn (one wake-up of the loop).
    Twenty started 3 ms apart with a period of 50 ms fire three times each
    in a handful of turns (the grid points passed), where plain repeating
    timers would take a turn each (tested: this fails with them). */
#define KB_COARSE_N 20
#define KB_COARSE_PERIOD_MS 50

typedef struct {
    kb_loop_t *loop;
    kb_timer_t timers[KB_COARSE_N];
    int fired[KB_COARSE_N];
    int64_t turns[3 * KB_COARSE_N]; /* the loop's clock at each distinct turn that fired */
    size_t nturns;
    int total;
} kb_coarse_case_t;

static void s_coarse_fired(kb_timer_t *timer, void *arg)
{
    kb_coarse_case_t *c = arg;
    c->fired[timer - c->timers]++;
    int64_t now = kb_loop_now_ms(c->loop);
    if (!c->nturns || c->turns[c->nturns - 1] != now)
        c->turns[c->nturns++] = now;
    if (++c->total == 3 * KB_COARSE_N) {
        for (size_t k = 0; k < KB_COARSE_N; k++)
            kb_timer_stop(&c->timers[k]);
        kb_loop_stop(c->loop);
    }
}

static void s_start_coarse_later(kb_timer_t *timer, void *arg)
{
    kb_coarse_case_t *c = arg;
    size_t i = (size_t)(timer - c->timers);
    kb_timer_start_coarse(c->loop, timer, KB_COARSE_PERIOD_MS, s_coarse_fired, c);
    if (i + 1 < KB_COARSE_N) /* the next one a few milliseconds later */
        kb_timer_start(c->loop, &c->timers[i + 1], 3, 0, s_start_coarse_later, c);
}

static void test_coarse_timers_share_a_turn(void)
{
    kb_coarse_case_t c = { .loop = kb_loop_new() };
    for (size_t i = 0; i < KB_COARSE_N; i++)
        kb_timer_init(&c.timers[i]);
    kb_timer_start(c.loop, &c.timers[0], 0, 0, s_start_coarse_later, &c);
    CHECK(kb_loop_run(c.loop) == 0);
    CHECK(c.total == 3 * KB_COARSE_N);
    /*  Started over ~60 ms (longer on a loaded machine), 3 fires each: a
        handful of grid points pass (5 at most when the starts take 60 ms;
        a late turn can merge grid points, not split one). Plain timers
        would take 20 turns for their first fires alone. */
    CHECK(c.nturns < KB_COARSE_N / 2);
    for (size_t i = 0; i < KB_COARSE_N; i++)
        CHECK(c.fired[i] >= 1);
    CHECK(kb_loop_timer_count(c.loop) == 0);
    kb_loop_destroy(&c.loop);
}

/*  Many timers started and stopped at random keep the heap ordered. */
static void test_heap_under_churn(void)
{
    kb_loop_t *loop = kb_loop_new();
    enum { N = 500 };
    static kb_timer_t timers[N];
    kb_timers_case_t c = { .loop = loop };
    for (int i = 0; i < N; i++) {
        kb_timer_init(&timers[i]);
        kb_timer_start(loop, &timers[i], (size_t)(1000 + (i * 7919) % 5000), 0, s_mark, &c);
    }
    for (int i = 0; i < N; i += 3)
        kb_timer_stop(&timers[i]);
    for (int i = 0; i < N; i += 5)
        kb_timer_start(loop, &timers[i], (size_t)(2000 + (i * 104729) % 3000), 0, s_mark, &c);
    size_t active = 0;
    int64_t previous = -1;
    bool ordered = true;
    for (int i = 0; i < N; i++)
        active += kb_timer_active(&timers[i]);
    CHECK(kb_loop_timer_count(loop) == active);
    /*  Stopping the earliest each time yields the due times in order. */
    while (kb_loop_timer_count(loop)) {
        kb_timer_t *earliest = NULL;
        for (int i = 0; i < N; i++)
            if (kb_timer_active(&timers[i])
                && (!earliest || timers[i].due_ms < earliest->due_ms
                    || (timers[i].due_ms == earliest->due_ms && timers[i].seq < earliest->seq)))
                earliest = &timers[i];
        CHECK(earliest->slot == 0); /* the heap's top is the earliest */
        ordered = ordered && earliest->due_ms >= previous;
        previous = earliest->due_ms;
        kb_timer_stop(earliest);
    }
    CHECK(ordered);
    kb_loop_destroy(&loop);
}

typedef struct {
    kb_loop_t *loop;
    kb_io_t io[2];
    int fds[2][2];
    int calls[2];
    char log[32];
    size_t log_len;
} kb_io_case_t;

static void s_deferred(void *arg)
{
    kb_io_case_t *c = arg;
    c->log[c->log_len++] = 'D';
    kb_loop_stop(c->loop);
}

/*  Whichever pipe fires first stops the other's watch: the other's event,
    pending in the same turn, must not be delivered. */
static void s_on_pipe(kb_io_t *io, void *arg)
{
    kb_io_case_t *c = arg;
    int which = io == &c->io[0] ? 0 : 1;
    char byte;
    CHECK(read(c->fds[which][0], &byte, 1) == 1);
    c->calls[which]++;
    c->log[c->log_len++] = (char)('0' + which);
    kb_io_stop(&c->io[1 - which]);
    kb_loop_defer(c->loop, s_deferred, c);
}

static void test_io_stop_drops_pending_event(void)
{
    kb_io_case_t c = { .loop = kb_loop_new() };
    for (int i = 0; i < 2; i++) {
        CHECK(pipe(c.fds[i]) == 0);
        CHECK(kb_io_start(c.loop, &c.io[i], c.fds[i][0], s_on_pipe, &c) == 0);
        CHECK(write(c.fds[i][1], "x", 1) == 1);
    }
    CHECK(kb_loop_io_count(c.loop) == 2);
    kb_loop_run(c.loop);
    c.log[c.log_len] = 0;
    CHECK(c.calls[0] + c.calls[1] == 1);
    CHECK(strlen(c.log) == 2 && c.log[1] == 'D'); /* deferred after the callbacks */
    for (int i = 0; i < 2; i++) {
        kb_io_stop(&c.io[i]);
        close(c.fds[i][0]);
        close(c.fds[i][1]);
    }
    CHECK(kb_loop_io_count(c.loop) == 0);
    kb_loop_destroy(&c.loop);
}

typedef struct {
    kb_loop_t *loop;
    zsock_t *server, *client;
    kb_io_t io;
    int received;
    int target;
    kb_timer_t deadline;
} kb_zmq_case_t;

/*  Edge-triggered: read everything, and answer each message on the same
    socket (a send may take the descriptor's signal while more wait). */
static void s_on_server(kb_io_t *io, void *arg)
{
    kb_zmq_case_t *c = arg;
    char *text;
    while ((text = zstr_recv_nowait(c->server))) {
        c->received++;
        zstr_free(&text);
        zstr_send(c->server, "ack");
        kb_io_poke(io);
    }
    if (c->received == c->target)
        kb_loop_stop(c->loop);
}

static void s_on_deadline(kb_timer_t *timer, void *arg)
{
    kb_zmq_case_t *c = arg;
    kb_loop_stop(c->loop);
}

static void s_send_burst(kb_timer_t *timer, void *arg)
{
    kb_zmq_case_t *c = arg;
    for (int i = 0; i < 50; i++)
        zstr_send(c->client, "ping");
}

static void test_zmq_socket_edge_triggered(void)
{
    kb_zmq_case_t c = { .loop = kb_loop_new(), .target = 100 };
    c.server = zsock_new_pair("@inproc://kb-loop-test");
    c.client = zsock_new_pair(">inproc://kb-loop-test");
    CHECK(c.server && c.client);
    for (int i = 0; i < 50; i++) /* waiting before the watch starts */
        zstr_send(c.client, "ping");
    CHECK(kb_io_start_zmq(c.loop, &c.io, zsock_resolve(c.server), s_on_server, &c) == 0);
    kb_timer_t burst;
    kb_timer_init(&burst);
    kb_timer_init(&c.deadline);
    kb_timer_start(c.loop, &burst, 20, 0, s_send_burst, &c);
    kb_timer_start(c.loop, &c.deadline, 5000, 0, s_on_deadline, &c);
    kb_loop_run(c.loop);
    CHECK(c.received == 100);
    kb_timer_stop(&c.deadline);
    kb_timer_stop(&burst);
    kb_io_stop(&c.io);
    int acks = 0;
    char *text;
    while ((text = zstr_recv_nowait(c.client))) {
        acks++;
        zstr_free(&text);
    }
    CHECK(acks == 100);
    zsock_destroy(&c.client);
    zsock_destroy(&c.server);
    kb_loop_destroy(&c.loop);
}

/*  Timeouts in seconds become delays: a tiny one still waits 1 ms, and
    none, a negative one or one beyond 30 days is no timer at all. */
static void test_delay_from_seconds(void)
{
    CHECK(kb_loop_delay_ms(0) == 0);
    CHECK(kb_loop_delay_ms(-1) == 0);
    CHECK(kb_loop_delay_ms(0.0001) == 1);
    CHECK(kb_loop_delay_ms(2.5) == 2500);
    CHECK(kb_loop_delay_ms(30 * 86400.0) == (size_t)30 * 86400 * 1000);
    CHECK(kb_loop_delay_ms(30 * 86400.0 + 1) == 0);
    CHECK(kb_loop_delay_ms(1e300) == 0);
}

int main(void)
{
    zsys_init();
    RUN_TEST(test_delay_from_seconds);
    RUN_TEST(test_timers_fire_in_order_and_stop);
    RUN_TEST(test_repeating_timer);
    RUN_TEST(test_zero_delay_restart_does_not_starve);
    RUN_TEST(test_coarse_timers_share_a_turn);
    RUN_TEST(test_heap_under_churn);
    RUN_TEST(test_io_stop_drops_pending_event);
    RUN_TEST(test_zmq_socket_edge_triggered);
    return kb_test_summary();
}
