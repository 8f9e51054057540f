/*  kb_mcp_stream.h - the resumable SSE streams of /mcp (Streamable HTTP's
    "resumability and redelivery"): each stream of a session (a GET
    stream, or the stream that answers a tools/call) numbers its events;
    an event's id is "<stream>-<seq>", unique in the server; the last
    events of a stream are held (a bounded buffer), so that a client that
    lost its connection sends GET /mcp with Last-Event-ID and gets the
    events after that id, then the stream's new ones. The stream of a call
    lives on without a reader (its run goes on, its messages are held).

    What it is not for: HTTP (kb_mcp_http.c writes the bytes, answers the
    statuses) and what a message says (kb_mcp.c). Thread-safe: writers are
    the calls' worker threads, readers the connections' threads. */
#ifndef KB_MCP_STREAM_H_INCLUDED
#define KB_MCP_STREAM_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/kb_buf.h"

/*  Events a stream holds, and their bytes (the newest event is held
    whatever its size: a call's response is never dropped). */
#define KB_MCP_STREAM_EVENTS 256
#define KB_MCP_STREAM_BYTES (1u << 20)
/*  Streams with no reader and nothing more to come (a call answered, a
    GET stream whose client went away) held per session, and how long. */
#define KB_MCP_STREAMS_IDLE_KEPT 16
#define KB_MCP_STREAMS_IDLE_ALL 256 /* in all sessions: the held bytes stay bounded */
#define KB_MCP_STREAM_IDLE_SECONDS 300

typedef struct kb_mcp_streams kb_mcp_streams_t;
typedef struct kb_mcp_stream kb_mcp_stream_t;

/*  What a Last-Event-ID finds (kb_mcp_streams_resume). */
typedef enum {
    KB_MCP_RESUME_OK,      /* the stream, from the event after the id */
    KB_MCP_RESUME_UNKNOWN, /* no id this server gave the session */
    KB_MCP_RESUME_GONE,    /* the stream, or events after the id, no longer held */
} kb_mcp_resume_t;

/*  The streams of every session. Caller owns the result. */
kb_mcp_streams_t *kb_mcp_streams_new(void);

/*  Free the registry and the streams no one holds. Safe on NULL. */
void kb_mcp_streams_destroy(kb_mcp_streams_t **self_p);

/*  A new stream of session_id (borrowed), registered, with the caller's
    reference. standalone: a GET stream (no writer, nothing ends it but
    its session); else a call's stream, ended by kb_mcp_stream_end. When
    prime is set the first event is an id with empty data (2025-11-25: the
    client may reconnect from it). */
kb_mcp_stream_t *kb_mcp_streams_open(kb_mcp_streams_t *self, const char *session_id,
                                     bool standalone, bool prime);

/*  The stream last_event_id (a Last-Event-ID header's value) names in
    session_id, with a reference for the caller in *stream, to be read
    from the event after the id on; the reader it had (if any) is
    detached. */
kb_mcp_resume_t kb_mcp_streams_resume(kb_mcp_streams_t *self, const char *session_id,
                                      const char *last_event_id, kb_mcp_stream_t **stream);

/*  Forget the streams of an ended session (their holders keep them). */
void kb_mcp_streams_forget_session(kb_mcp_streams_t *self, const char *session_id);

/*  Another reference to stream (the caller's). */
kb_mcp_stream_t *kb_mcp_stream_hold(kb_mcp_streams_t *self, kb_mcp_stream_t *stream);

/*  Drop a reference. Safe on NULL; sets *stream_p to NULL. */
void kb_mcp_stream_release(kb_mcp_streams_t *self, kb_mcp_stream_t **stream_p);

/*  Append message (stolen) as the stream's next event, waking its reader. */
void kb_mcp_stream_push(kb_mcp_streams_t *self, kb_mcp_stream_t *stream, json_t *message);

/*  No more events will come (the call's response is in). */
void kb_mcp_stream_end(kb_mcp_streams_t *self, kb_mcp_stream_t *stream);

/*  What a reader's wait gave. */
typedef enum {
    KB_MCP_READ_EVENTS,   /* events appended to out */
    KB_MCP_READ_IDLE,     /* nothing within the wait */
    KB_MCP_READ_FINISHED, /* the last event was read: end the response */
    KB_MCP_READ_LOST,     /* another reader took the stream, or events were
                             dropped unread: end the connection */
} kb_mcp_read_t;

/*  Become the stream's reader (the one whose reads succeed); returns the
    reader's ticket for kb_mcp_stream_read. */
unsigned kb_mcp_stream_attach(kb_mcp_streams_t *self, kb_mcp_stream_t *stream);

/*  Leave the stream (the connection ended); it stays held for a resume. */
void kb_mcp_stream_detach(kb_mcp_streams_t *self, kb_mcp_stream_t *stream, unsigned ticket);

/*  Wait up to wait_ms for events after the reader's cursor and render
    them as SSE text into out. */
kb_mcp_read_t kb_mcp_stream_read(kb_mcp_streams_t *self, kb_mcp_stream_t *stream, unsigned ticket,
                                 unsigned wait_ms, kb_buf_t *out);

/*  True for a GET stream (nothing ends it but its session). */
bool kb_mcp_stream_standalone(const kb_mcp_stream_t *stream);

/*  The stream's number (the first part of its events' ids). */
uint64_t kb_mcp_stream_number(const kb_mcp_stream_t *stream);

#endif
