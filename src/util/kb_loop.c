/*  kb_loop.c - one epoll set, one timer heap, one list of deferred calls.

    Not for: sockets, protocols or any policy; owners decide what a watch
    or a timer means. See kb_loop.h for the rules of ownership.
*/
#include "util/kb_loop.h"
#include "util/kb_alloc.h"
#include "util/kb_vec.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define KB_LOOP_EVENTS 64 /* descriptors taken from epoll per wait */

typedef struct {
    kb_defer_fn *fn;
    void *arg;
} kb_deferred_t;

struct kb_loop {
    int epfd;
    bool stopped;
    int64_t now_ms;
    uint64_t next_seq;
    size_t io_count;

    /* the events of the current turn, so that a stopped watch's are dropped */
    struct epoll_event events[KB_LOOP_EVENTS];
    int nevents;

    kb_io_t *poked;  /* watches to call next turn, newest first */
    kb_io_t *firing; /* poked watches being called in this turn */

    kb_timer_t **heap; /* min-heap on (due_ms, seq): heap_vec's items */
    size_t heap_len;
    kb_vec_t heap_vec;

    kb_vec_t deferred; /* kb_deferred_t, in order */
};

static int64_t s_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

kb_loop_t *kb_loop_new(void)
{
    kb_loop_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (self->epfd < 0) {
        free(self);
        return NULL;
    }
    self->now_ms = s_mono_ms();
    kb_vec_init(&self->heap_vec, sizeof(kb_timer_t *), 0);
    kb_vec_init(&self->deferred, sizeof(kb_deferred_t), 0);
    return self;
}

void kb_loop_destroy(kb_loop_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_loop_t *self = *self_p;
    *self_p = NULL;
    assert(self->heap_len == 0);
    assert(self->io_count == 0);
    close(self->epfd);
    kb_vec_free(&self->heap_vec);
    kb_vec_free(&self->deferred);
    free(self);
}

int64_t kb_loop_now_ms(kb_loop_t *self)
{
    return self->now_ms;
}

void kb_loop_stop(kb_loop_t *self)
{
    self->stopped = true;
}

size_t kb_loop_timer_count(const kb_loop_t *self)
{
    return self->heap_len;
}

size_t kb_loop_io_count(const kb_loop_t *self)
{
    return self->io_count;
}

size_t kb_loop_delay_ms(double seconds)
{
    if (!(seconds > 0) || seconds > 30 * 86400.0)
        return 0;
    double ms = seconds * 1000;
    return ms < 1 ? 1 : (size_t)ms;
}

/* ---- deferred calls --------------------------------------------------------- */

int kb_loop_defer(kb_loop_t *self, kb_defer_fn *fn, void *arg)
{
    kb_deferred_t call = { fn, arg };
    return kb_vec_push(&self->deferred, &call) == KB_BUF_OK ? 0 : -1;
}

/*  In order; calls deferred meanwhile run in this turn too. */
static void s_run_deferred(kb_loop_t *self)
{
    for (size_t i = 0; i < self->deferred.len; i++) {
        kb_deferred_t call = *(kb_deferred_t *)kb_vec_at(&self->deferred, i);
        call.fn(call.arg);
    }
    self->deferred.len = 0;
}

void kb_loop_flush(kb_loop_t *self)
{
    s_run_deferred(self);
}

/* ---- watches ------------------------------------------------------------------- */

static int s_io_add(kb_loop_t *self, kb_io_t *io, int fd, void *socket, uint32_t events,
                    kb_io_fn *fn, void *arg)
{
    assert(!io->active);
    *io = (kb_io_t){ .loop = self, .fd = fd, .zmq_socket = socket, .fn = fn, .arg = arg };
    struct epoll_event event = { .events = events, .data.ptr = io };
    if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, fd, &event) != 0)
        return -1;
    io->active = true;
    self->io_count++;
    return 0;
}

int kb_io_start(kb_loop_t *self, kb_io_t *io, int fd, kb_io_fn *fn, void *arg)
{
    return s_io_add(self, io, fd, NULL, EPOLLIN, fn, arg);
}

int kb_io_start_zmq(kb_loop_t *self, kb_io_t *io, void *socket, kb_io_fn *fn, void *arg)
{
    int fd = -1;
    size_t size = sizeof fd;
    if (zmq_getsockopt(socket, ZMQ_FD, &fd, &size) != 0)
        return -1;
    if (s_io_add(self, io, fd, socket, EPOLLIN | EPOLLET, fn, arg) != 0)
        return -1;
    kb_io_poke(io); /* messages may be waiting already: the edge has passed */
    return 0;
}

int kb_io_set_events(kb_io_t *io, bool in, bool out)
{
    assert(io->active && !io->zmq_socket);
    struct epoll_event event
        = { .events = (in ? EPOLLIN : 0u) | (out ? EPOLLOUT : 0u), .data.ptr = io };
    return epoll_ctl(io->loop->epfd, EPOLL_CTL_MOD, io->fd, &event);
}

bool kb_io_active(const kb_io_t *io)
{
    return io->active;
}

void kb_io_poke(kb_io_t *io)
{
    if (!io->active || io->poked)
        return;
    io->poked = true;
    io->poke_next = io->loop->poked;
    io->loop->poked = io;
}

static bool s_unlink(kb_io_t **list, kb_io_t *io)
{
    for (kb_io_t **at = list; *at; at = &(*at)->poke_next)
        if (*at == io) {
            *at = io->poke_next;
            return true;
        }
    return false;
}

void kb_io_stop(kb_io_t *io)
{
    if (!io->active)
        return;
    kb_loop_t *self = io->loop;
    epoll_ctl(self->epfd, EPOLL_CTL_DEL, io->fd, NULL);
    for (int i = 0; i < self->nevents; i++)
        if (self->events[i].data.ptr == io)
            self->events[i].data.ptr = NULL; /* pending in this turn: dropped */
    if (io->poked)
        if (!s_unlink(&self->poked, io))
            s_unlink(&self->firing, io);
    io->active = false;
    io->poked = false;
    self->io_count--;
}

/*  A ZeroMQ watch is called only when the socket has input: ZMQ_FD also
    signals when it became writable, or just processed commands. */
static void s_io_fire(kb_io_t *io)
{
    if (io->zmq_socket) {
        int events = 0;
        size_t size = sizeof events;
        if (zmq_getsockopt(io->zmq_socket, ZMQ_EVENTS, &events, &size) != 0
            || !(events & ZMQ_POLLIN))
            return;
    }
    io->fn(io, io->arg);
}

/* ---- timers --------------------------------------------------------------------- */

void kb_timer_init(kb_timer_t *timer)
{
    memset(timer, 0, sizeof *timer);
    timer->slot = SIZE_MAX;
}

bool kb_timer_active(const kb_timer_t *timer)
{
    return timer->slot != SIZE_MAX;
}

static bool s_before(const kb_timer_t *a, const kb_timer_t *b)
{
    return a->due_ms < b->due_ms || (a->due_ms == b->due_ms && a->seq < b->seq);
}

static void s_heap_set(kb_loop_t *self, size_t slot, kb_timer_t *timer)
{
    self->heap[slot] = timer;
    timer->slot = slot;
}

static void s_heap_up(kb_loop_t *self, size_t slot)
{
    kb_timer_t *timer = self->heap[slot];
    while (slot > 0) {
        size_t parent = (slot - 1) / 2;
        if (!s_before(timer, self->heap[parent]))
            break;
        s_heap_set(self, slot, self->heap[parent]);
        slot = parent;
    }
    s_heap_set(self, slot, timer);
}

static void s_heap_down(kb_loop_t *self, size_t slot)
{
    kb_timer_t *timer = self->heap[slot];
    for (;;) {
        size_t child = 2 * slot + 1;
        if (child >= self->heap_len)
            break;
        if (child + 1 < self->heap_len && s_before(self->heap[child + 1], self->heap[child]))
            child++;
        if (!s_before(self->heap[child], timer))
            break;
        s_heap_set(self, slot, self->heap[child]);
        slot = child;
    }
    s_heap_set(self, slot, timer);
}

void kb_timer_stop(kb_timer_t *timer)
{
    if (timer->slot == SIZE_MAX)
        return;
    kb_loop_t *self = timer->loop;
    size_t slot = timer->slot;
    timer->slot = SIZE_MAX;
    kb_timer_t *last = self->heap[--self->heap_len];
    if (last == timer)
        return;
    s_heap_set(self, slot, last);
    if (slot > 0 && s_before(last, self->heap[(slot - 1) / 2]))
        s_heap_up(self, slot);
    else
        s_heap_down(self, slot);
}

static void s_timer_arm(kb_loop_t *self, kb_timer_t *timer, int64_t due_ms, size_t repeat_ms,
                        bool coarse, kb_timer_fn *fn, void *arg)
{
    kb_timer_stop(timer);
    if (self->heap_len == self->heap_vec.len) {
        if (kb_vec_push(&self->heap_vec, &timer) != KB_BUF_OK)
            kb_oom(__FILE__, __LINE__); /* a timer that never fires would wedge its owner */
        self->heap = self->heap_vec.items;
    }
    timer->loop = self;
    timer->due_ms = due_ms;
    timer->seq = self->next_seq++;
    timer->repeat_ms = repeat_ms;
    timer->coarse = coarse;
    timer->fn = fn;
    timer->arg = arg;
    self->heap_len++;
    s_heap_set(self, self->heap_len - 1, timer);
    s_heap_up(self, self->heap_len - 1);
}

/*  The next multiple of period_ms after now. */
static int64_t s_next_on_grid(int64_t now, size_t period_ms)
{
    assert(period_ms > 0);
    return (now / (int64_t)period_ms + 1) * (int64_t)period_ms;
}

void kb_timer_start(kb_loop_t *self, kb_timer_t *timer, size_t delay_ms, size_t repeat_ms,
                    kb_timer_fn *fn, void *arg)
{
    s_timer_arm(self, timer, s_mono_ms() + (int64_t)delay_ms, repeat_ms, false, fn, arg);
}

void kb_timer_start_coarse(kb_loop_t *self, kb_timer_t *timer, size_t period_ms, kb_timer_fn *fn,
                           void *arg)
{
    s_timer_arm(self, timer, s_next_on_grid(s_mono_ms(), period_ms), period_ms, true, fn, arg);
}

static void s_run_timers(kb_loop_t *self)
{
    /*  Timers started by a callback are due after now: they wait for the
        next turn, so a zero-delay repeat cannot starve the descriptors. */
    int64_t now = self->now_ms;
    uint64_t started_before = self->next_seq;
    while (self->heap_len && self->heap[0]->due_ms <= now && self->heap[0]->seq < started_before) {
        kb_timer_t *timer = self->heap[0];
        kb_timer_stop(timer);
        if (timer->coarse)
            s_timer_arm(self, timer, s_next_on_grid(now, timer->repeat_ms), timer->repeat_ms, true,
                        timer->fn, timer->arg);
        else if (timer->repeat_ms)
            kb_timer_start(self, timer, timer->repeat_ms, timer->repeat_ms, timer->fn, timer->arg);
        timer->fn(timer, timer->arg);
    }
}

/* ---- the loop ------------------------------------------------------------------- */

static int s_wait_ms(kb_loop_t *self)
{
    if (self->poked || self->deferred.len)
        return 0;
    if (!self->heap_len)
        return -1;
    int64_t wait = self->heap[0]->due_ms - s_mono_ms();
    if (wait <= 0)
        return 0;
    return wait > 60000 ? 60000 : (int)wait;
}

int kb_loop_run(kb_loop_t *self)
{
    self->stopped = false;
    while (!self->stopped) {
        int n = epoll_wait(self->epfd, self->events, KB_LOOP_EVENTS, s_wait_ms(self));
        if (n < 0 && errno != EINTR)
            return -1;
        self->nevents = n > 0 ? n : 0;
        self->now_ms = s_mono_ms();
        for (int i = 0; i < self->nevents; i++) {
            kb_io_t *io = self->events[i].data.ptr;
            if (io)
                s_io_fire(io);
        }
        self->nevents = 0;
        self->firing = self->poked; /* pokes made from here on wait a turn */
        self->poked = NULL;
        kb_io_t *io;
        while ((io = self->firing)) {
            self->firing = io->poke_next;
            io->poked = false;
            io->poke_next = NULL;
            s_io_fire(io);
        }
        s_run_timers(self);
        s_run_deferred(self);
    }
    return 0;
}
