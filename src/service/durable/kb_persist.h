/*  kb_persist.h - what the engine keeps in the state dir's database, and
    when: rows of contexts and kernels, process records and their log
    frames, written by a thread of their own in one transaction per loop
    turn at most: what may wait (records, their output so far, a run's
    count) waits in its collector, for the next turn with something that
    may not, or for KB_PERSIST_HOLD_MS; back-to-back short runs share a
    transaction, and a row changed in several turns is copied once.

    The engine thread queues writes (copies of the rows; for log frames, a
    reference to the record's output and a range of cursors, read by the
    writer under the output's lock). Parts of the service that have rows to
    write register a collector, called once at the end of any loop turn in
    which kb_persist_touch was called; after the collectors the turn's
    writes go to the writer as one batch. A write that fails (a full disk)
    is counted and shown in /health; the service goes on, and what was
    lost is written again with the next change of the same row.
    Not for: reading the state back at start-up (kb_restore.c reads the
    database before the writer starts). Engine thread, but for the writer.
*/
#ifndef KB_PERSIST_H_INCLUDED
#define KB_PERSIST_H_INCLUDED

#include <jansson.h>

#include "service/output/kb_runlog.h"
#include "state/kb_db.h"
#include "util/kb_loop.h"

typedef struct kb_persist kb_persist_t;

/*  Called at the end of a touched loop turn to queue what changed. */
typedef void(kb_persist_collect_fn)(kb_persist_t *persist, void *arg);

/*  A writer for db (taken: closed by kb_persist_destroy) on loop. NULL
    when out of memory or the thread cannot start (db is closed then). */
kb_persist_t *kb_persist_new(kb_db_t *db, kb_loop_t *loop);

/*  Write what is queued, wait for the writer, stop it, close the
    database. Safe on NULL; sets *self_p to NULL. */
void kb_persist_destroy(kb_persist_t **self_p);

/*  Register a collector (at most 4). */
void kb_persist_add_collector(kb_persist_t *self, kb_persist_collect_fn *fn, void *arg);

/*  Something changed: run the collectors at the end of this turn. */
void kb_persist_touch(kb_persist_t *self);

/*  A turn's batch is held at most this long (kb_persist_may_wait). */
#define KB_PERSIST_HOLD_MS 20

/*  From a collector whose writes may wait (a record, a context's count):
    true when they may, that is when the batch does not go to the writer
    after this collection; the collector then keeps them marked, queues
    nothing and returns, and has_writes (it has some) holds the batch for
    the next turn that hands one over, KB_PERSIST_HOLD_MS at most, so that
    a short run's start and end, and the runs of those 20 ms, are one
    transaction. False: the batch goes now; queue everything. A collector
    that queues writes without asking has the batch handed over at the
    turn's end. */
bool kb_persist_may_wait(kb_persist_t *self, bool has_writes);

/*  Queue writes for this turn's batch (rows copied). */
void kb_persist_meta(kb_persist_t *self, const char *key, const char *value);
void kb_persist_context_put(kb_persist_t *self, const kb_db_context_t *row);
void kb_persist_context_delete(kb_persist_t *self, const char *id);
void kb_persist_record_put(kb_persist_t *self, const kb_db_record_t *row);
void kb_persist_record_delete(kb_persist_t *self, const char *id);

/*  Frames [from, to) of log (a reference is taken until written) belong
    to record id. */
void kb_persist_frames(kb_persist_t *self, const char *id, kb_runlog_t *log, long long from,
                       long long to);

/*  Hand the queued writes to the writer now and wait until everything
    handed so far is written (at shutdown; in tests). */
void kb_persist_sync(kb_persist_t *self);

/*  {batches, rows, failed, last_error, held, behind} for /health: batches
    and rows written, batches that failed, why the last one did; held:
    writes wait on the engine's side for the next batch (KB_PERSIST_HOLD_MS
    at most); behind: batches handed to the writer and not yet written.
    Engine thread. */
json_t *kb_persist_json(kb_persist_t *self);

#endif
