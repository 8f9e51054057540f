/*  kb_ws_impl.h - what the two halves of a websocket share: kb_ws.c (the
    accept, the group, the senders, the end) and kb_ws_loop.c (the
    websocket's own thread: wslay's callbacks and the poll loop). Private
    to src/server. */
#ifndef KB_WS_IMPL_H_INCLUDED
#define KB_WS_IMPL_H_INCLUDED

#include "server/kb_ws.h"
#include "server/kb_ws_handshake.h"
#include "util/kb_buf.h"

#include <pthread.h>
#include <stdatomic.h>
#include <wslay/wslay.h>

/*  A close frame's payload is at most 125 bytes: the code and 123 of
    reason; wslay asks for fewer than 123. */
#define KB_WS_REASON_MAX 122

/*  One outgoing message, queued by a sender, then read by wslay. */
typedef struct kb_ws_out {
    struct kb_ws_out *next;
    bool binary;
    size_t len;
    size_t sent; /* bytes handed to wslay */
    uint8_t data[];
} kb_ws_out_t;

typedef enum {
    KB_WS_PENDING = 0, /* 101 queued, not yet sent */
    KB_WS_OPEN,        /* the loop runs */
    KB_WS_ENDED,       /* on_close called or being called */
} kb_ws_state_t;

struct kb_ws_group {
    pthread_mutex_t lock; /* guards head, count, closing */
    pthread_cond_t empty;
    kb_ws_t *head;
    size_t count;
    bool closing; /* close_all was called: newcomers close at once */
    unsigned close_code;
    char close_reason[KB_WS_REASON_MAX + 1];
    atomic_uint_fast64_t opened, closed, messages_in, bytes_in, messages_out, bytes_out;
    atomic_uint_fast64_t closed_backpressure, closed_too_big, closed_unresponsive;
};

struct kb_ws {
    atomic_int refs;
    kb_ws_group_t *group; /* borrowed; valid until the end */
    kb_ws_t *prev, *next; /* in the group, under its lock */
    kb_ws_handler_t handler;
    void *arg;
    size_t max_message, max_queued;
    unsigned ping_ms, pong_ms, close_ms;
    char protocol[KB_WS_PROTOCOL_MAX];
    bool has_protocol;
    int wake_fd; /* eventfd: senders ring the loop */

    pthread_mutex_t lock; /* guards the fields down to the next blank line */
    kb_ws_state_t state;
    kb_ws_out_t *out_head, *out_tail; /* queued, not yet given to wslay */
    size_t queued;                    /* bytes of out_* and fly_* not yet handed to wslay */
    size_t peak;
    bool close_asked;
    bool overflow;
    unsigned close_code;
    char close_reason[KB_WS_REASON_MAX + 1];

    /* The websocket's own thread only. */
    MHD_socket fd;
    struct MHD_UpgradeResponseHandle *urh;
    wslay_event_context_ptr ctx;
    kb_ws_out_t *fly_head, *fly_tail; /* given to wslay, in order */
    kb_buf_t extra;                   /* bytes MHD read past the request */
    size_t extra_used;
    bool close_queued;    /* our close frame is with wslay */
    bool close_waits;     /* it waits for the messages queued before it to be written */
    unsigned our_code;    /* its code, copied from close_code */
    bool our_overflow;    /* it is for an overflow, copied from overflow */
    bool we_closed_first; /* it went before the peer's */
    bool peer_gone;       /* EOF or a socket error */
    int64_t next_ping_ms, ping_sent_ms, close_deadline_ms;
};

/*  Monotonic milliseconds. */
int64_t kb_ws_now_ms(void);
/*  reason (NULL: "") into a close reason's buffer, cut to fit. */
void kb_ws_copy_reason(char *dst, const char *reason);
/*  Ring the websocket's loop. Any thread. */
void kb_ws_wake(kb_ws_t *self);
/*  Free a list of outgoing messages. */
void kb_ws_free_list(kb_ws_out_t *out);
/*  Ask for the close under self->lock; false when one was asked already or
    the websocket has ended. */
bool kb_ws_ask_close_locked(kb_ws_t *self, unsigned code, const char *reason);
/*  The one end of a websocket: no send is taken from now on, on_close is
    called, and the group lets it go. */
void kb_ws_end(kb_ws_t *self, unsigned code, const char *reason);
/*  libmicrohttpd's upgrade handler (cls: the kb_ws_t): runs the websocket
    on its connection's thread until its end. */
void kb_ws_on_upgrade(void *cls, struct MHD_Connection *connection, void *con_cls,
                      const char *extra_in, size_t extra_in_size, MHD_socket sock,
                      struct MHD_UpgradeResponseHandle *urh);

#endif
