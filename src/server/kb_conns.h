/*  kb_conns.h - private to src/server: who may hold a connection, and for
    how long (SPEC section 6), so that silent or trickling clients cannot
    take every slot of libmicrohttpd's thread-per-connection limit.

    Rules:   a whole request head within header_timeout; at most
             per_address connections per address; at a limit the
             connection waiting longest for a head gives way; past the
             limit a reserve serves only GET /health and /metrics.
    Threads: one lock; admit/opened on the listening thread, busy/idle on
             the connection's, closed on the cleaner's, and a watchdog that
             shuts down (shutdown(2), under the lock) late connections.
    Not for: the idle limit between bytes (libmicrohttpd's) and the size
             limits of a head (kb_server.c, named in kb_http.h). */
#ifndef KB_CONNS_H_INCLUDED
#define KB_CONNS_H_INCLUDED

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct kb_conns kb_conns_t;

/*  One connection's entry; embedded in its owner (the request record of
    src/server/kb_http.h), which lives from kb_conns_opened to
    kb_conns_closed. Fields are the table's, under its lock. */
typedef struct kb_conn {
    struct kb_conn *prev, *next;
    int fd;
    unsigned char addr[16]; /* the client's IP (IPv4 as v4-mapped IPv6) */
    int64_t since_ms;       /* waiting for a request head since; 0: in a request */
    bool evicted;           /* shut down by the table; not counted */
    bool reserved;          /* admitted into the reserve */
} kb_conn_t;

typedef struct {
    unsigned max_connections; /* admitted freely up to this */
    unsigned reserve;         /* more, for /health and /metrics only */
    unsigned per_address;     /* per client address; 0: max_connections */
    unsigned header_ms;       /* the header deadline */
} kb_conns_config_t;

/*  Counters for /health (connections) and /metrics. */
typedef struct {
    unsigned open;            /* admitted and not evicted */
    unsigned waiting;         /* of which waiting for a request head */
    unsigned reserved;        /* of which admitted into the reserve */
    uint64_t refused;         /* no slot and none could give way */
    uint64_t evicted;         /* gave way to a newcomer */
    uint64_t header_timeouts; /* closed at the header deadline */
} kb_conns_stats_t;

/*  A table with its watchdog thread started. NULL when out of memory or
    threads. Caller owns the result. */
kb_conns_t *kb_conns_new(const kb_conns_config_t *config);

/*  Stops the watchdog. Call after libmicrohttpd stopped (every connection
    closed). Safe on NULL; sets *self_p to NULL. */
void kb_conns_destroy(kb_conns_t **self_p);

/*  The limit libmicrohttpd should enforce: above the table's own, with room
    for connections that were shut down and are still being cleaned up. */
unsigned kb_conns_hard_limit(const kb_conns_config_t *config);

/*  libmicrohttpd's accept policy callback (cls: the table): may a
    connection from addr come in? Makes room by closing another when it
    must; MHD_NO when no connection can give way. */
enum MHD_Result kb_conns_admit(void *cls, const struct sockaddr *addr, socklen_t addrlen);

/*  A connection was admitted; conn (owned by the caller) is added, waiting
    for its first request head. */
void kb_conns_opened(kb_conns_t *self, kb_conn_t *conn, int fd, const struct sockaddr *addr);

/*  The connection is closing; conn leaves the table. */
void kb_conns_closed(kb_conns_t *self, kb_conn_t *conn);

/*  A request head arrived: no deadline until its response is done. */
void kb_conns_busy(kb_conns_t *self, kb_conn_t *conn);

/*  Its response is done: the header deadline runs again. */
void kb_conns_idle(kb_conns_t *self, kb_conn_t *conn);

/*  True when the connection was admitted into the reserve. */
bool kb_conns_reserved(kb_conns_t *self, kb_conn_t *conn);

void kb_conns_stats(kb_conns_t *self, kb_conns_stats_t *out);

#endif
