/*  kb_mcp_stream.c - the resumable SSE streams of /mcp (kb_mcp_stream.h):
    a registry of streams under one lock, each stream a ring of its last
    events rendered as SSE text, a cursor for its one reader, and the
    rules for what a Last-Event-ID finds. Not for HTTP (kb_mcp_http.c). */
#include "server/kb_mcp_stream.h"
#include "util/kb_alloc.h"

#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/kb_mcp.h"

typedef struct {
    uint64_t seq;
    char *text; /* "id: ...\nevent: message\ndata: ...\n\n" */
    size_t len;
} kb_mcp_event_t;

struct kb_mcp_stream {
    kb_mcp_stream_t *next; /* in the registry, while registered */
    char session_id[KB_MCP_SESSION_ID_MAX + 1];
    uint64_t number;
    unsigned refs; /* the registry's, while registered, and each holder's */
    bool registered;
    bool standalone;
    bool ended;        /* a call's: the last event is in */
    uint64_t next_seq; /* of the next event */
    uint64_t cursor;   /* the last seq the reader has */
    uint64_t dropped;  /* the last seq dropped from the ring (0: none) */
    unsigned ticket;   /* the reader's; 0: none */
    unsigned tickets;  /* handed out */
    time_t idle_since; /* no reader and nothing to come since; 0: busy */
    kb_mcp_event_t ring[KB_MCP_STREAM_EVENTS];
    size_t head, count, bytes;
};

struct kb_mcp_streams {
    pthread_mutex_t lock; /* guards the list and every stream */
    pthread_cond_t cond;  /* a stream got events or changed hands */
    kb_mcp_stream_t *list;
    uint64_t numbers; /* handed out */
};

kb_mcp_streams_t *kb_mcp_streams_new(void)
{
    kb_mcp_streams_t *self = kb_xcalloc(1, sizeof *self);
    pthread_mutex_init(&self->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&self->cond, &attr);
    pthread_condattr_destroy(&attr);
    return self;
}

static void s_free(kb_mcp_stream_t *stream)
{
    for (size_t i = 0; i < stream->count; i++)
        free(stream->ring[(stream->head + i) % KB_MCP_STREAM_EVENTS].text);
    free(stream);
}

/*  Drop one reference (lock held). */
static void s_unref(kb_mcp_stream_t *stream)
{
    assert(stream->refs > 0);
    if (--stream->refs == 0)
        s_free(stream);
}

void kb_mcp_streams_destroy(kb_mcp_streams_t **self_p)
{
    kb_mcp_streams_t *self = self_p ? *self_p : NULL;
    if (!self)
        return;
    while (self->list) {
        kb_mcp_stream_t *stream = self->list;
        self->list = stream->next;
        stream->registered = false;
        s_unref(stream);
    }
    pthread_cond_destroy(&self->cond);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

/*  Unlink *link's stream from the registry (lock held). */
static void s_unlink(kb_mcp_stream_t **link)
{
    kb_mcp_stream_t *stream = *link;
    *link = stream->next;
    stream->next = NULL;
    stream->registered = false;
    s_unref(stream);
}

/*  Forget the idle streams past their time, past the number kept for
    session_id, and past the number kept in all (lock held). The list is newest first. */
static void s_forget_idle(kb_mcp_streams_t *self, const char *session_id)
{
    time_t now = time(NULL);
    unsigned kept = 0, all = 0;
    for (kb_mcp_stream_t **link = &self->list; *link;) {
        kb_mcp_stream_t *stream = *link;
        bool idle = stream->idle_since != 0;
        bool mine = strcmp(stream->session_id, session_id) == 0;
        if (idle && mine)
            kept++;
        if (idle)
            all++;
        if (idle
            && (now - stream->idle_since > KB_MCP_STREAM_IDLE_SECONDS
                || (mine && kept > KB_MCP_STREAMS_IDLE_KEPT) || all > KB_MCP_STREAMS_IDLE_ALL)) {
            s_unlink(link);
            continue;
        }
        link = &stream->next;
    }
}

/*  Idle when no reader holds it and nothing more will come; the idle
    ones past the number kept are forgotten then (lock held). */
static void s_mark_idle(kb_mcp_streams_t *self, kb_mcp_stream_t *stream)
{
    bool idle = stream->ticket == 0 && (stream->ended || stream->standalone);
    if (!idle)
        stream->idle_since = 0;
    else if (!stream->idle_since) {
        stream->idle_since = time(NULL);
        if (stream->registered)
            s_forget_idle(self, stream->session_id);
    }
}

/*  Render message as the stream's next event into its ring, dropping the
    oldest past the bounds (lock held). message NULL: the empty priming
    event. */
static void s_append(kb_mcp_stream_t *stream, const json_t *message)
{
    kb_buf_t buf = KB_BUF_INIT;
    uint64_t seq = stream->next_seq++;
    kb_buf_printf(&buf, "id: %" PRIu64 "-%" PRIu64 "\n", stream->number, seq);
    if (message) {
        kb_buf_puts(&buf, "event: message\ndata: ");
        kb_buf_append_json(&buf, message, JSON_COMPACT);
        kb_buf_puts(&buf, "\n\n");
    } else
        kb_buf_puts(&buf, "data: \n\n");
    size_t len = 0;
    char *text = kb_buf_status(&buf) == KB_BUF_OK ? kb_buf_take(&buf, &len) : NULL;
    kb_buf_free(&buf);
    if (!text) {
        /* out of memory: the event is lost, as if dropped from the ring */
        stream->dropped = seq;
        return;
    }
    while (stream->count == KB_MCP_STREAM_EVENTS
           || (stream->count > 0 && stream->bytes + len > KB_MCP_STREAM_BYTES)) {
        kb_mcp_event_t *old = &stream->ring[stream->head];
        stream->dropped = old->seq;
        stream->bytes -= old->len;
        free(old->text);
        stream->head = (stream->head + 1) % KB_MCP_STREAM_EVENTS;
        stream->count--;
    }
    size_t tail = (stream->head + stream->count) % KB_MCP_STREAM_EVENTS;
    stream->ring[tail] = (kb_mcp_event_t){ .seq = seq, .text = text, .len = len };
    stream->count++;
    stream->bytes += len;
}

kb_mcp_stream_t *kb_mcp_streams_open(kb_mcp_streams_t *self, const char *session_id,
                                     bool standalone, bool prime)
{
    kb_mcp_stream_t *stream = kb_xcalloc(1, sizeof *stream);
    snprintf(stream->session_id, sizeof stream->session_id, "%s", session_id);
    stream->standalone = standalone;
    stream->next_seq = 1;
    stream->refs = 2;
    stream->registered = true;
    pthread_mutex_lock(&self->lock);
    stream->number = ++self->numbers;
    if (prime)
        s_append(stream, NULL);
    s_forget_idle(self, session_id);
    stream->next = self->list;
    self->list = stream;
    pthread_mutex_unlock(&self->lock);
    return stream;
}

/*  "<number>-<seq>", digits only. */
static bool s_parse_id(const char *id, uint64_t *number, uint64_t *seq)
{
    char *end;
    if (!id || *id < '0' || *id > '9')
        return false;
    *number = strtoull(id, &end, 10);
    if (*end != '-' || end[1] < '0' || end[1] > '9')
        return false;
    *seq = strtoull(end + 1, &end, 10);
    return *end == '\0' && strlen(id) < 48;
}

kb_mcp_resume_t kb_mcp_streams_resume(kb_mcp_streams_t *self, const char *session_id,
                                      const char *last_event_id, kb_mcp_stream_t **stream)
{
    uint64_t number, seq;
    *stream = NULL;
    if (!s_parse_id(last_event_id, &number, &seq))
        return KB_MCP_RESUME_UNKNOWN;
    pthread_mutex_lock(&self->lock);
    kb_mcp_resume_t rc = number > self->numbers ? KB_MCP_RESUME_UNKNOWN : KB_MCP_RESUME_GONE;
    kb_mcp_stream_t *found = self->list;
    while (found && found->number != number)
        found = found->next;
    if (found && strcmp(found->session_id, session_id) != 0)
        rc = KB_MCP_RESUME_UNKNOWN; /* another session's: never ours to name */
    else if (found && seq >= found->next_seq)
        rc = KB_MCP_RESUME_UNKNOWN; /* not given yet */
    else if (found && seq >= found->dropped) {
        rc = KB_MCP_RESUME_OK;
        found->refs++;
        found->cursor = seq;
        found->ticket = 0; /* the reader it had, if any, is gone */
        found->idle_since = 0;
        *stream = found;
        pthread_cond_broadcast(&self->cond);
    }
    pthread_mutex_unlock(&self->lock);
    return rc;
}

void kb_mcp_streams_forget_session(kb_mcp_streams_t *self, const char *session_id)
{
    pthread_mutex_lock(&self->lock);
    for (kb_mcp_stream_t **link = &self->list; *link;) {
        if (strcmp((*link)->session_id, session_id) == 0)
            s_unlink(link);
        else
            link = &(*link)->next;
    }
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->lock);
}

kb_mcp_stream_t *kb_mcp_stream_hold(kb_mcp_streams_t *self, kb_mcp_stream_t *stream)
{
    pthread_mutex_lock(&self->lock);
    stream->refs++;
    pthread_mutex_unlock(&self->lock);
    return stream;
}

void kb_mcp_stream_release(kb_mcp_streams_t *self, kb_mcp_stream_t **stream_p)
{
    if (!stream_p || !*stream_p)
        return;
    pthread_mutex_lock(&self->lock);
    s_unref(*stream_p);
    pthread_mutex_unlock(&self->lock);
    *stream_p = NULL;
}

void kb_mcp_stream_push(kb_mcp_streams_t *self, kb_mcp_stream_t *stream, json_t *message)
{
    pthread_mutex_lock(&self->lock);
    s_append(stream, message);
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->lock);
    json_decref(message);
}

void kb_mcp_stream_end(kb_mcp_streams_t *self, kb_mcp_stream_t *stream)
{
    pthread_mutex_lock(&self->lock);
    stream->ended = true;
    s_mark_idle(self, stream);
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->lock);
}

unsigned kb_mcp_stream_attach(kb_mcp_streams_t *self, kb_mcp_stream_t *stream)
{
    pthread_mutex_lock(&self->lock);
    stream->ticket = ++stream->tickets;
    stream->idle_since = 0;
    unsigned ticket = stream->ticket;
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->lock);
    return ticket;
}

void kb_mcp_stream_detach(kb_mcp_streams_t *self, kb_mcp_stream_t *stream, unsigned ticket)
{
    pthread_mutex_lock(&self->lock);
    if (stream->ticket == ticket) {
        stream->ticket = 0;
        s_mark_idle(self, stream);
    }
    pthread_mutex_unlock(&self->lock);
}

/*  Render the held events after the cursor into out (lock held); false
    when some were dropped before the reader had them. */
static bool s_take(kb_mcp_stream_t *stream, kb_buf_t *out)
{
    if (stream->dropped > stream->cursor)
        return false;
    for (size_t i = 0; i < stream->count; i++) {
        const kb_mcp_event_t *event = &stream->ring[(stream->head + i) % KB_MCP_STREAM_EVENTS];
        if (event->seq <= stream->cursor)
            continue;
        kb_buf_append(out, event->text, event->len);
        stream->cursor = event->seq;
    }
    return true;
}

static void s_deadline(struct timespec *at, unsigned ms)
{
    clock_gettime(CLOCK_MONOTONIC, at);
    at->tv_sec += ms / 1000;
    at->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (at->tv_nsec >= 1000000000L) {
        at->tv_sec++;
        at->tv_nsec -= 1000000000L;
    }
}

kb_mcp_read_t kb_mcp_stream_read(kb_mcp_streams_t *self, kb_mcp_stream_t *stream, unsigned ticket,
                                 unsigned wait_ms, kb_buf_t *out)
{
    struct timespec at;
    s_deadline(&at, wait_ms);
    kb_mcp_read_t rc = KB_MCP_READ_IDLE;
    pthread_mutex_lock(&self->lock);
    for (;;) {
        if (stream->ticket != ticket) {
            rc = KB_MCP_READ_LOST;
            break;
        }
        size_t before = out->len;
        if (!s_take(stream, out)) {
            rc = KB_MCP_READ_LOST;
            break;
        }
        bool all = stream->ended && stream->cursor + 1 == stream->next_seq;
        if (all) {
            /* the reader has it all: the stream is idle from now */
            rc = KB_MCP_READ_FINISHED;
            stream->ticket = 0;
            s_mark_idle(self, stream);
            break;
        }
        if (out->len > before) {
            rc = KB_MCP_READ_EVENTS;
            break;
        }
        if (pthread_cond_timedwait(&self->cond, &self->lock, &at) != 0)
            break;
    }
    pthread_mutex_unlock(&self->lock);
    return rc;
}

uint64_t kb_mcp_stream_number(const kb_mcp_stream_t *stream)
{
    return stream->number;
}

bool kb_mcp_stream_standalone(const kb_mcp_stream_t *stream)
{
    return stream->standalone;
}
