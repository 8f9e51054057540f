/*  kb_stream.h - the engine's side of kb_stream_t: a queue of events from
    the engine thread to one reader thread. The only object that both sides
    touch, so it carries its own lock; the engine never waits on a reader.
    Shared by reference count: the engine and the reader each hold one. */
#ifndef KB_STREAM_INTERNAL_H_INCLUDED
#define KB_STREAM_INTERNAL_H_INCLUDED

#include "kernelbridge/kb_service.h"
#include "service/output/kb_runlog.h"
#include "service/output/kb_result_doc.h"

/*  A new stream with one reference, the caller's. */
kb_stream_t *kb_stream_new(void);

/*  Deliver only the last event (RESULT or END): a reader that wants the
    result alone wakes once. Call before the stream is shared. */
void kb_stream_keep_final_only(kb_stream_t *self);

/*  Whether only RESULT and END are queued (its reader waits for the end).
    Fixed before the stream is shared: any thread. */
bool kb_stream_final_only(const kb_stream_t *self);

/*  Take one more reference (the engine's). Returns self. */
kb_stream_t *kb_stream_ref(kb_stream_t *self);

/*  Drop the engine's reference. */
void kb_stream_unref(kb_stream_t **self_p);

/*  Queue an event; data is stolen. Dropped when the reader has gone. RESULT
    and END events end the stream: later pushes are dropped. */
void kb_stream_push(kb_stream_t *self, kb_event_type_t type, json_t *data);

/*  Queue frame cursor of log (a reference is taken) as a text event:
    STDOUT, STDERR, SYSTEM as {text, timestamp?}, LOG as a log frame. Its
    JSON is made when the reader takes it. */
void kb_stream_push_text(kb_stream_t *self, kb_event_type_t type, kb_runlog_t *log,
                         long long cursor);

/*  Queue the RESULT event: head (the result without its logs' text) and
    doc, both stolen. */
void kb_stream_push_result(kb_stream_t *self, json_t *head, kb_result_doc_t *doc);

/*  Hand over the result struct of a run with the RESULT event (stolen),
    without its logs: kb_stream_take_result copies them from log (a
    reference is taken; NULL: the struct has its logs). */
void kb_stream_set_result(kb_stream_t *self, kb_result_t *result, kb_runlog_t *log);
kb_result_t *kb_stream_take_result(kb_stream_t *self);

/*  True once the reader has destroyed its handle. */
bool kb_stream_detached(kb_stream_t *self);

#endif
