/*  kb_loop.h - the engine's event loop: one epoll set over descriptors and
    ZeroMQ sockets, timers in one binary heap, and calls deferred to the end
    of the loop turn.

    A turn waits for what is ready (epoll), runs the callbacks of the ready
    descriptors, then the due timers, then the deferred calls. Its cost is
    O(ready + due), not O(registered): an idle kernel costs nothing.

    Watches (kb_io_t) and timers (kb_timer_t) are embedded in their owner's
    struct, as libuv's handles are; the loop never allocates them. An owner
    stops them before it frees itself, and an owner is never freed inside a
    callback of its own (it defers that to the end of the turn with
    kb_loop_defer). Stopping a watch whose event is still pending in the
    current turn is safe: the event is dropped.

    ZeroMQ sockets are watched through ZMQ_FD, which is edge-triggered: the
    callback must read until the socket has nothing left (or poke the watch
    to be called again next turn), and after a send on the socket the owner
    pokes the watch, since a send may consume the descriptor's signal while
    messages wait. Not thread-safe: one thread runs a loop and calls these.
*/
#ifndef KB_LOOP_H_INCLUDED
#define KB_LOOP_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kb_loop kb_loop_t;
typedef struct kb_io kb_io_t;
typedef struct kb_timer kb_timer_t;

/*  A watch fired. For a ZeroMQ watch, drain the socket. */
typedef void(kb_io_fn)(kb_io_t *io, void *arg);
/*  A timer fired; it is already stopped unless it repeats. */
typedef void(kb_timer_fn)(kb_timer_t *timer, void *arg);
typedef void(kb_defer_fn)(void *arg);

struct kb_io {
    /* private to kb_loop.c */
    kb_loop_t *loop;
    int fd;
    void *zmq_socket; /* raw libzmq socket, or NULL for a plain descriptor */
    kb_io_fn *fn;
    void *arg;
    bool active;
    bool poked;
    kb_io_t *poke_next;
};

struct kb_timer {
    /* private to kb_loop.c */
    kb_loop_t *loop;
    int64_t due_ms;
    uint64_t seq; /* orders timers due in the same millisecond */
    size_t repeat_ms;
    bool coarse; /* due on the grid of repeat_ms (kb_timer_start_coarse) */
    size_t slot; /* index in the heap, or SIZE_MAX when stopped */
    kb_timer_fn *fn;
    void *arg;
};

/*  A new loop, or NULL when epoll cannot be had. Caller owns it. */
kb_loop_t *kb_loop_new(void);

/*  Safe on NULL; sets *self_p NULL. Every watch and timer must be stopped. */
void kb_loop_destroy(kb_loop_t **self_p);

/*  Run turns until kb_loop_stop. Returns 0, or -1 when epoll failed. */
int kb_loop_run(kb_loop_t *self);

/*  Make kb_loop_run return at the end of this turn. */
void kb_loop_stop(kb_loop_t *self);

/*  The loop's monotonic clock in milliseconds (read at the start of the
    turn and after waiting). */
int64_t kb_loop_now_ms(kb_loop_t *self);

/*  Seconds to a timer delay in milliseconds (at least 1); 0 when there
    is no deadline to keep: not positive, or over 30 days (a budget that no
    one waits for, not a timer). */
size_t kb_loop_delay_ms(double seconds);

/*  Call fn(arg) at the end of this turn, after every callback of the turn
    (in the order deferred). 0 / -1 (out of memory). */
int kb_loop_defer(kb_loop_t *self, kb_defer_fn *fn, void *arg);

/*  Run the calls deferred so far, now (when the loop will not run again,
    as on the way out). */
void kb_loop_flush(kb_loop_t *self);

/*  Watch a descriptor for input (level-triggered). io is borrowed and must
    stay valid until kb_io_stop. 0 / -1 with errno. */
int kb_io_start(kb_loop_t *self, kb_io_t *io, int fd, kb_io_fn *fn, void *arg);

/*  Watch a libzmq socket (the raw void *, e.g. zsock_resolve) for input.
    The callback is also called on the first turn, for messages that came
    before the watch. 0 / -1 with errno. */
int kb_io_start_zmq(kb_loop_t *self, kb_io_t *io, void *socket, kb_io_fn *fn, void *arg);

/*  What a descriptor's watch (kb_io_start) waits for: input, output (the
    descriptor became writable: a send's rest waits for it) or both; with
    neither it stays registered and is never called. Level-triggered, as
    kb_io_start. 0 / -1 with errno. */
int kb_io_set_events(kb_io_t *io, bool in, bool out);

/*  Stop watching. Safe on a watch that was never started or is stopped. */
void kb_io_stop(kb_io_t *io);

/*  Call the watch's callback in the next turn whatever epoll says: after a
    send on a ZeroMQ socket, or when a drain stopped at its batch limit. */
void kb_io_poke(kb_io_t *io);

bool kb_io_active(const kb_io_t *io);

/*  A stopped timer (what zero-filled memory also is not: call this). */
void kb_timer_init(kb_timer_t *timer);

/*  Start (or restart) a timer due in delay_ms, then every repeat_ms when
    repeat_ms > 0. timer is borrowed and must stay valid until it is stopped
    or has fired without repeat. */
void kb_timer_start(kb_loop_t *self, kb_timer_t *timer, size_t delay_ms, size_t repeat_ms,
                    kb_timer_fn *fn, void *arg);

/*  Start (or restart) a timer due every period_ms on a grid of the loop's
    clock: at the multiples of period_ms, the first within period_ms. Every
    such timer of one period is due in the same turn, so a hundred of them
    (one per kernel) wake the loop once per period, not a hundred times.
    For checks whose phase does not matter: a kernel's log size, its
    heartbeat. period_ms > 0. */
void kb_timer_start_coarse(kb_loop_t *self, kb_timer_t *timer, size_t period_ms, kb_timer_fn *fn,
                           void *arg);

/*  Stop a timer. Safe on a stopped one. */
void kb_timer_stop(kb_timer_t *timer);

bool kb_timer_active(const kb_timer_t *timer);

/*  How many timers and watches are active (diagnostics and tests). */
size_t kb_loop_timer_count(const kb_loop_t *self);
size_t kb_loop_io_count(const kb_loop_t *self);

#endif
