/*  kb_runlog.h - the text output of one run, kept once: its stdout, stderr
    and system text and the log frames (SPEC section 4) that cut it into
    pieces. The result's logs, GET /processes/{id}/logs, log followers, the
    run's SSE stream and E2B's stream all read from here; none keeps a copy
    of its own.

    What it is for: holding the bytes, under one daemon-wide memory budget
    (kb_budget_t), and handing them to readers on any thread. What it is not
    for: deciding what a kernel message means (kb_execution.c) or which
    records are kept (kb_procstore.c).

    Threads: the engine thread is the only writer. Readers on other threads
    (HTTP connections) hold a reference and copy bytes out under the log's
    lock, so a reader that falls behind holds a cursor, not a copy. The last
    reference frees the bytes and gives them back to the budget. */
#ifndef KB_RUNLOG_H_INCLUDED
#define KB_RUNLOG_H_INCLUDED

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "util/kb_buf.h"
#include "wire/kb_scan.h"

typedef enum { KB_LOG_STDOUT, KB_LOG_STDERR, KB_LOG_SYSTEM } kb_log_channel_t;

typedef struct kb_runlog kb_runlog_t;

/*  What a kernel sends as a run's output, for the totals of /metrics. */
typedef enum {
    KB_OUTPUT_STDOUT,
    KB_OUTPUT_STDERR,
    KB_OUTPUT_DISPLAY, /* display_data, execute_result, update_display_data: data and metadata */
    KB_OUTPUT_KINDS,
} kb_output_kind_t;

/*  The daemon-wide bound on output held in memory (--max-output-memory):
    the bytes of every live log, running or finished, counted once. When an
    append would go over, make_room (engine thread) is asked to free need
    bytes (evict finished records, stop the largest running run); what still
    does not fit is not kept. */
typedef struct {
    size_t limit; /* 0: no limit */
    atomic_size_t used;
    atomic_size_t peak;
    void (*make_room)(void *arg, size_t need, kb_runlog_t *asking);
    void *arg;
    /* bytes of output kernels sent for runs since the start, kept or not,
       by kb_output_kind_t (kb_runlog_count_sent); engine thread only */
    unsigned long long sent[KB_OUTPUT_KINDS];
    /* kb_runlog.c's: the stdout allocation of the last large log let go,
       kept for the next large run's stdout (memory written before takes a
       copy many times faster than fresh memory on a virtual machine:
       docs/ARCHITECTURE.md, "Memory"); spare_bytes of it were written.
       Counted with used when room is asked for, and let go first. NULL
       (zeroed) at first. */
    _Atomic(void *) spare;
    atomic_size_t spare_bytes;
    atomic_uint_least64_t spare_at_ms; /* when it was kept, kb_now_ms() */
    atomic_size_t big;                 /* live logs whose stdout allocation may become the spare */
} kb_budget_t;

/*  A new, empty log charged to budget (borrowed, may be NULL; it must
    outlive every log). One reference, the caller's. NULL when out of
    memory. */
kb_runlog_t *kb_runlog_new(kb_budget_t *budget);

/*  Take another reference (any thread). Returns self. */
kb_runlog_t *kb_runlog_ref(kb_runlog_t *self);

/*  Drop a reference (any thread); the last one frees the bytes. Safe on
    NULL; sets *self_p to NULL. */
void kb_runlog_unref(kb_runlog_t **self_p);

/*  ---- the writer (engine thread) ------------------------------------------

    Append up to len bytes of text (borrowed, on a UTF-8 boundary at len)
    as one frame of channel; date is the kernel message's date (borrowed,
    may be NULL). Stdout and stderr are kept only as far as the budget and
    the log's own stop allow (cut on a UTF-8 boundary); system text is
    always kept. Returns the bytes kept (0: no frame was made) and the new
    frame's cursor in *cursor_out. */
size_t kb_runlog_append(kb_runlog_t *self, kb_log_channel_t channel, const char *text, size_t len,
                        const char *date, long long *cursor_out);

/*  Decode the text of a stream message's content frame json[0..len)
    (borrowed) with kb_scan_stream straight into the log, in one pass: at
    most max bytes of it (less when the budget says so) become a frame of
    the channel its "name" gives; *scan gets what the scanner found (the
    whole text's length among it). Returns the bytes kept, or (size_t)-1
    when the frame is malformed or not a stream of stdout or stderr
    (nothing is kept then). */
size_t kb_runlog_append_scan(kb_runlog_t *self, const char *json, size_t len, size_t max,
                             const char *date, kb_scan_stream_t *scan, long long *cursor_out);

/*  How many more bytes the budget lets this log keep now (after asking
    make_room for want bytes); SIZE_MAX without a budget. 0 once stopped. */
size_t kb_runlog_room(kb_runlog_t *self, size_t want);

/*  Append a frame read back from the state database, with the time it was
    first kept (kept as kb_runlog_append keeps text). Returns the bytes
    kept. */
size_t kb_runlog_restore(kb_runlog_t *self, kb_log_channel_t channel, const char *text, size_t len,
                         const char *date, double timestamp);

/*  Where the result's stdout and stderr start (as kb_runlog_clear_view
    left them), to store and restore. */
void kb_runlog_set_view(kb_runlog_t *self, size_t stdout_start, size_t stderr_start);
size_t kb_runlog_view_start(kb_runlog_t *self, kb_log_channel_t channel);

/*  Count bytes of output a kernel sent for the run, whether kept or not,
    in the budget's totals. Safe on NULL (nothing counted). */
void kb_runlog_count_sent(kb_runlog_t *self, kb_output_kind_t kind, size_t bytes);

/*  Charge bytes that the run keeps elsewhere (its rich outputs) to the
    budget, for as long as the log lives. */
void kb_runlog_charge(kb_runlog_t *self, size_t bytes);

/*  The result's logs start again empty (clear_output); the frames stay. */
void kb_runlog_clear_view(kb_runlog_t *self);

/*  Keep nothing more of stdout and stderr: the budget needed the room. */
void kb_runlog_stop(kb_runlog_t *self);
bool kb_runlog_stopped(kb_runlog_t *self);

/*  The run has ended: stdout's allocation beyond its contents is given
    back (it may be a spare's, written before; kept otherwise). */
void kb_runlog_finish(kb_runlog_t *self);

/*  Let budget's spare go when it was kept max_ms or more ago (0: now).
    Returns the ms until it would go, or 0 when there is none now. Any
    thread. */
long long kb_runlog_spare_expire(kb_budget_t *budget, long long max_ms);

/*  Whether budget has a spare, or a live log that may leave one: while it
    does, someone must call kb_runlog_spare_expire now and then. */
bool kb_runlog_spare_possible(kb_budget_t *budget);

/*  What the log holds, for the budget: text and frames. */
size_t kb_runlog_bytes(kb_runlog_t *self);

/*  ---- readers (any thread) --------------------------------------------- */

/*  The number of frames (the next frame's cursor). */
long long kb_runlog_next_cursor(kb_runlog_t *self);

/*  Frame cursor as a log frame {cursor, channel, data, timestamp}, or as a
    run event {text, timestamp?} (timestamp: the kernel's date, when it gave
    one). NULL when there is no such frame or out of memory. Caller owns. */
json_t *kb_runlog_frame_json(kb_runlog_t *self, long long cursor);
json_t *kb_runlog_event_json(kb_runlog_t *self, long long cursor);

/*  A frame as the state database stores it. */
typedef struct {
    kb_log_channel_t channel;
    double timestamp;
    char date[36];
} kb_runlog_frame_t;

/*  Frame cursor: its fields into *frame, its text into text (emptied
    first). 0, or -1 when there is no such frame or no memory. */
int kb_runlog_frame_copy(kb_runlog_t *self, long long cursor, kb_runlog_frame_t *frame,
                         kb_buf_t *text);

/*  The channel of frame cursor; -1 when there is none. */
int kb_runlog_frame_channel(kb_runlog_t *self, long long cursor);

/*  The result's view of stdout or stderr (since the last clear): its
    length, and a copy (NUL-terminated, caller owns; NULL when out of
    memory). */
size_t kb_runlog_view_len(kb_runlog_t *self, kb_log_channel_t channel);
char *kb_runlog_view_copy(kb_runlog_t *self, kb_log_channel_t channel, size_t *len_out);

/*  Write the result's view of channel from byte *pos on, escaped as the
    inside of a JSON string (as jansson's json_dumps escapes), into dst:
    at most cap bytes, never cutting an escape (a character may be cut: the pieces are written one
   after the other). Advances *pos past what was written; returns the bytes written (0 at the end).
 */
size_t kb_runlog_view_escape(kb_runlog_t *self, kb_log_channel_t channel, size_t *pos, char *dst,
                             size_t cap);

#endif
