/*  kb_conns.c - the admission table of kb_conns.h: per-address and total
    limits with eviction of the longest-waiting connection, the reserve,
    and the watchdog thread of the header deadline. */
#include "server/kb_conns.h"
#include "util/kb_clock.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*  The watchdog looks again at most this often, and at least once per
    this many ms when nothing is due. */
#define KB_CONNS_TICK_MS 100
#define KB_CONNS_IDLE_TICK_MS 1000
#define KB_CONNS_QUIET_MS ((int64_t)3600 * 1000)
/*  Room above the table's limit for connections shut down and not yet
    cleaned up by libmicrohttpd. */
#define KB_CONNS_SLACK 64

struct kb_conns {
    kb_conns_config_t config;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t watchdog;
    bool stop;
    int64_t wakes_at; /* when the watchdog wakes next (ms, monotonic) */
    kb_conn_t *head;  /* every entry, evicted ones too, until closed */
    kb_conns_stats_t stats;
};

static int64_t s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*  The IP of addr as 16 bytes, IPv4 as v4-mapped IPv6; all zero for
    anything else (one key for every non-IP client). */
static void s_key(const struct sockaddr *addr, unsigned char key[16])
{
    memset(key, 0, 16);
    if (addr && addr->sa_family == AF_INET) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)addr)->sin_addr, 4);
    } else if (addr && addr->sa_family == AF_INET6)
        memcpy(key, &((const struct sockaddr_in6 *)addr)->sin6_addr, 16);
}

/*  Shut the connection down: its thread sees the end of its socket and
    libmicrohttpd closes it. Under the lock. */
static void s_evict(kb_conns_t *self, kb_conn_t *conn)
{
    conn->evicted = true;
    self->stats.open--;
    if (conn->since_ms)
        self->stats.waiting--;
    if (conn->reserved)
        self->stats.reserved--;
    shutdown(conn->fd, SHUT_RDWR);
}

/*  The connection that has waited longest for a request head, of key
    when key is given; NULL when every one is in a request. */
static kb_conn_t *s_longest_waiting(kb_conns_t *self, const unsigned char *key)
{
    kb_conn_t *found = NULL;
    for (kb_conn_t *c = self->head; c; c = c->next) {
        if (c->evicted || !c->since_ms || (key && memcmp(c->addr, key, 16) != 0))
            continue;
        if (!found || c->since_ms < found->since_ms)
            found = c;
    }
    return found;
}

static unsigned s_count_address(kb_conns_t *self, const unsigned char *key)
{
    unsigned n = 0;
    for (kb_conn_t *c = self->head; c; c = c->next)
        if (!c->evicted && memcmp(c->addr, key, 16) == 0)
            n++;
    return n;
}

enum MHD_Result kb_conns_admit(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)addrlen;
    kb_conns_t *self = cls;
    unsigned char key[16];
    s_key(addr, key);
    bool admit = true;
    pthread_mutex_lock(&self->lock);
    if (s_count_address(self, key) >= self->config.per_address) {
        kb_conn_t *victim = s_longest_waiting(self, key);
        if (victim) {
            s_evict(self, victim);
            self->stats.evicted++;
        } else
            admit = false;
    }
    if (admit && self->stats.open >= self->config.max_connections) {
        kb_conn_t *victim = s_longest_waiting(self, NULL);
        if (victim) {
            s_evict(self, victim);
            self->stats.evicted++;
        } else
            admit = self->stats.open < self->config.max_connections + self->config.reserve;
    }
    if (!admit)
        self->stats.refused++;
    pthread_mutex_unlock(&self->lock);
    return admit ? MHD_YES : MHD_NO;
}

/*  Whether the watchdog sleeps past the header deadline of a connection
    waiting since since_ms, and must be woken. Mostly it wakes sooner (its
    tick while any connection waits is shorter than the header timeout), and
    a connection going idle after each request costs it nothing; with none
    waiting it sleeps until one does. Under the lock. */
static bool s_sooner(const kb_conns_t *self, int64_t since_ms)
{
    return since_ms + (int64_t)self->config.header_ms < self->wakes_at;
}

void kb_conns_opened(kb_conns_t *self, kb_conn_t *conn, int fd, const struct sockaddr *addr)
{
    memset(conn, 0, sizeof *conn);
    conn->fd = fd;
    s_key(addr, conn->addr);
    conn->since_ms = s_now_ms();
    pthread_mutex_lock(&self->lock);
    /* admitted past the limit: nothing could give way (kb_conns_admit) */
    conn->reserved = self->stats.open >= self->config.max_connections;
    conn->next = self->head;
    if (self->head)
        self->head->prev = conn;
    self->head = conn;
    self->stats.open++;
    self->stats.waiting++;
    if (conn->reserved)
        self->stats.reserved++;
    bool sooner = s_sooner(self, conn->since_ms);
    pthread_mutex_unlock(&self->lock);
    if (sooner)
        pthread_cond_signal(&self->wake);
}

void kb_conns_closed(kb_conns_t *self, kb_conn_t *conn)
{
    pthread_mutex_lock(&self->lock);
    if (!conn->evicted) {
        conn->evicted = true; /* counted out, as an eviction would */
        self->stats.open--;
        if (conn->since_ms)
            self->stats.waiting--;
        if (conn->reserved)
            self->stats.reserved--;
    }
    if (conn->prev)
        conn->prev->next = conn->next;
    else
        self->head = conn->next;
    if (conn->next)
        conn->next->prev = conn->prev;
    conn->prev = conn->next = NULL;
    pthread_mutex_unlock(&self->lock);
}

void kb_conns_busy(kb_conns_t *self, kb_conn_t *conn)
{
    pthread_mutex_lock(&self->lock);
    if (conn->since_ms && !conn->evicted)
        self->stats.waiting--;
    conn->since_ms = 0;
    pthread_mutex_unlock(&self->lock);
}

void kb_conns_idle(kb_conns_t *self, kb_conn_t *conn)
{
    int64_t now = s_now_ms();
    pthread_mutex_lock(&self->lock);
    if (!conn->since_ms && !conn->evicted)
        self->stats.waiting++;
    conn->since_ms = now;
    bool sooner = s_sooner(self, now);
    pthread_mutex_unlock(&self->lock);
    if (sooner)
        pthread_cond_signal(&self->wake);
}

bool kb_conns_reserved(kb_conns_t *self, kb_conn_t *conn)
{
    pthread_mutex_lock(&self->lock);
    bool reserved = conn->reserved;
    pthread_mutex_unlock(&self->lock);
    return reserved;
}

void kb_conns_stats(kb_conns_t *self, kb_conns_stats_t *out)
{
    pthread_mutex_lock(&self->lock);
    *out = self->stats;
    pthread_mutex_unlock(&self->lock);
}

unsigned kb_conns_hard_limit(const kb_conns_config_t *config)
{
    return config->max_connections + config->reserve + KB_CONNS_SLACK;
}

/*  Close every connection past its header deadline; the ms until the next
    deadline, or KB_CONNS_QUIET_MS with none waiting (kb_conns_opened and
    kb_conns_idle wake the watchdog, through s_sooner, when a new deadline
    comes first: an idle daemon does not wake for it). Under the lock. */
static int64_t s_expire(kb_conns_t *self, int64_t now)
{
    int64_t next = self->stats.waiting ? KB_CONNS_IDLE_TICK_MS : KB_CONNS_QUIET_MS;
    for (kb_conn_t *c = self->head; c; c = c->next) {
        if (c->evicted || !c->since_ms)
            continue;
        int64_t left = c->since_ms + self->config.header_ms - now;
        if (left <= 0) {
            s_evict(self, c);
            self->stats.header_timeouts++;
        } else if (left < next)
            next = left;
    }
    return next < KB_CONNS_TICK_MS ? KB_CONNS_TICK_MS : next;
}

static void *s_watchdog(void *arg)
{
    kb_conns_t *self = arg;
    pthread_setname_np(pthread_self(), "kb-watchdog");
    pthread_mutex_lock(&self->lock);
    while (!self->stop) {
        int64_t now = s_now_ms();
        int64_t wait_ms = s_expire(self, now);
        self->wakes_at = now + wait_ms;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += wait_ms / 1000;
        until.tv_nsec += (wait_ms % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&self->wake, &self->lock, &until);
    }
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

kb_conns_t *kb_conns_new(const kb_conns_config_t *config)
{
    kb_conns_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->config = *config;
    if (!self->config.per_address || self->config.per_address > self->config.max_connections)
        self->config.per_address = self->config.max_connections;
    pthread_mutex_init(&self->lock, NULL);
    kb_cond_init_monotonic(&self->wake);
    if (pthread_create(&self->watchdog, NULL, s_watchdog, self) != 0) {
        pthread_cond_destroy(&self->wake);
        pthread_mutex_destroy(&self->lock);
        free(self);
        return NULL;
    }
    return self;
}

void kb_conns_destroy(kb_conns_t **self_p)
{
    kb_conns_t *self = self_p ? *self_p : NULL;
    if (!self)
        return;
    pthread_mutex_lock(&self->lock);
    self->stop = true;
    pthread_mutex_unlock(&self->lock);
    pthread_cond_signal(&self->wake);
    pthread_join(self->watchdog, NULL);
    pthread_cond_destroy(&self->wake);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}
