/*  kb_procstore.h - process records (SPEC section 4): one per run, with
    its log frames, its followers and waiters, and the retention of
    finished records (count and bytes, oldest evicted first).

    The store is the only writer of a record. A run writes to its record
    through the functions below (logs, the end); calls from clients
    (list, get, result, logs, follow, wait, delete) are answered here.
    Not for: running code (kb_run.c) or deciding how a run ended.
    Engine thread only.
*/
#ifndef KB_PROCSTORE_H_INCLUDED
#define KB_PROCSTORE_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "kernelbridge/kb_result.h"
#include "service/engine/kb_call.h"
#include "service/output/kb_runlog.h"
#include "service/durable/kb_persist.h"
#include "state/kb_db.h"
#include "util/kb_loop.h"

typedef struct kb_procstore kb_procstore_t;
typedef struct kb_proc kb_proc_t;

/*  A store keeping at most max_records finished records holding at most
    max_bytes of output (the newest is kept whatever its size), with all
    output of running and finished records within max_memory bytes (0: no
    bound; see kb_budget_t). Timers of waits run on loop. Caller owns it. */
kb_procstore_t *kb_procstore_new(kb_loop_t *loop, size_t max_records, size_t max_bytes,
                                 size_t max_memory);

/*  {limit, used, peak} of the output memory budget, for /health. */
json_t *kb_procstore_budget_json(kb_procstore_t *self);

/*  The output memory budget itself, with the totals of output sent (for
    /metrics). Borrowed; engine thread. */
const kb_budget_t *kb_procstore_budget(const kb_procstore_t *self);

/*  Keep the records in the state database from now on: each change (a
    new record, its frames, its end, its eviction) is written at the end
    of its loop turn. persist is borrowed and outlives the store. */
void kb_procstore_set_persist(kb_procstore_t *self, kb_persist_t *persist);

/*  A record read back from the database (copied; its result parsed), with
    an empty output for the caller to fill with kb_runlog_restore; then
    kb_procstore_restored. A record that was running when the daemon went
    comes back running, with no owner: the caller ends it (kb_proc_end).
    NULL when the row is unusable or out of memory. */
kb_proc_t *kb_procstore_restore(kb_procstore_t *self, const kb_db_record_t *row);

/*  Its output is back: the result's view is set, and a terminal record
    joins the finished ones (retention applies). */
void kb_procstore_restored(kb_proc_t *proc, long long view_stdout, long long view_stderr);

/*  Frees every record; none may be running. Safe on NULL. */
void kb_procstore_destroy(kb_procstore_t **self_p);

/*  A new running record of a run on that context (strings copied). The
    store owns it; it stays valid until kb_proc_forget or until it has
    ended and been evicted. */
kb_proc_t *kb_procstore_add(kb_procstore_t *self, const char *context_id, const char *language);

/*  Drop a record whose run never started (its kernel did not): no trace
    is kept. */
void kb_proc_forget(kb_proc_t *proc);

kb_proc_t *kb_procstore_find(kb_procstore_t *self, const char *id);

/*  The record's id ("prc_..."), borrowed. */
const char *kb_proc_id(const kb_proc_t *proc);

/*  The record as GET /processes/{id} shows it (no logs). Caller owns it. */
json_t *kb_procstore_record_json(const kb_proc_t *proc);
bool kb_proc_running(const kb_proc_t *proc);

/*  What runs the record (a kb_run_t of kb_run.c) while it runs, or NULL.
    The store keeps it for the engine and never looks inside. */
void *kb_proc_owner(const kb_proc_t *proc);
void kb_proc_set_owner(kb_proc_t *proc, void *owner);

/*  The record's kept output, which its run writes (borrowed). */
kb_runlog_t *kb_proc_outlog(const kb_proc_t *proc);

/*  Frame cursor was added to the record's output: send it to the
    followers. */
void kb_proc_logged(kb_proc_t *proc, long long cursor);

/*  Append a log frame (text borrowed) and send it to the followers. */
void kb_proc_log(kb_proc_t *proc, kb_log_channel_t channel, const char *text);

/*  The run ended: the record becomes terminal with the result (stolen) and
    its process fields (signal static or NULL, raw_reason copied); its
    followers get END, its waiters their answer, and old records may be
    evicted (never this one). */
void kb_proc_end(kb_proc_t *proc, json_t *result, kb_reason_t reason, int exit_code,
                 const char *signal, const char *raw_reason);

/*  Calls on records: PROC_LIST, PROC_GET, PROC_RESULT, PROC_LOGS,
    PROC_FOLLOW, PROC_WAIT, PROC_DELETE. Answers the call. */
void kb_procstore_handle(kb_procstore_t *self, kb_call_t *call);

#endif
