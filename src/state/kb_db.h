/*  kb_db.h - the daemon's durable store, state.db: one SQLite connection,
    synchronous, in WAL mode, holding the contexts (and pooled kernels),
    the process records and their log frames, and a few meta values.

    What it is for: writing rows and reading them all back at start. It
    knows nothing of the service's types: rows are plain structs of
    borrowed strings and numbers, and whatever is structured (results,
    connection files, extra fields) is JSON text that it stores as it is.
    What it is not for: queries by anything but id, deciding what to keep,
    or being shared: a kb_db_t is used by one thread at a time (not always
    the thread that opened it), and one daemon uses one state dir at a time
    (kb_statedir_lock).

    Every call returns 0 / -1 (or NULL) and keeps the reason in
    kb_db_error; none aborts, out of memory included. Writes may be made
    inside a transaction (kb_db_begin ... kb_db_commit), which is how a
    batch costs one commit, or outside one, each then its own transaction.
    Text fields that are NULL are stored as SQL NULL and come back NULL.

    The schema is versioned with PRAGMA user_version: opening a file of an
    older version applies the missing migration steps (kb_db.c), each in
    its own transaction; a newer version is refused without writing.
*/
#ifndef KB_DB_H_INCLUDED
#define KB_DB_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

#include "kernelbridge/kb_error.h"

/*  The schema version this build writes (the number of migration steps). */
#define KB_DB_SCHEMA_VERSION 4

typedef struct kb_db kb_db_t;

/*  Open or create the state database at path (the service's
    <state dir>/state.db; created 0600, and an existing file is made 0600
    once it proved usable), in WAL mode with synchronous=NORMAL, then bring
    its schema to KB_DB_SCHEMA_VERSION. Refused, with the path and the
    reason in err and the file neither modified nor removed: a file that
    is not a SQLite database or is damaged, a SQLite database of something
    else (tables but no schema version), and a schema version newer than
    this build's. Caller owns the result (kb_db_close); NULL with err.
    Files of <path>-frames/ that no frame's row points to (a crash between
    the two) are removed. */
kb_db_t *kb_db_open(const char *path, kb_error_t *err);

/*  Finalize the statements and close the connection (which checkpoints
    the WAL). Safe on NULL; sets *db_p NULL. A transaction still open is
    rolled back. */
void kb_db_close(kb_db_t **db_p);

/*  The reason of the last failure ("" before any). Borrowed; valid until
    the next call on db. */
const char *kb_db_error(kb_db_t *db);

/*  The path db was opened with. Borrowed. */
const char *kb_db_path(kb_db_t *db);

/*  BEGIN IMMEDIATE: a write transaction, taken now. -1 when one is open. */
int kb_db_begin(kb_db_t *db);

/*  COMMIT. On failure the transaction may still be open: roll it back. */
int kb_db_commit(kb_db_t *db);

/*  ROLLBACK; 0 and nothing done when no transaction is open, so that a
    clean-up path may call it whatever happened before. */
int kb_db_rollback(kb_db_t *db);

/*  True while a transaction is open. */
bool kb_db_in_transaction(kb_db_t *db);

/*  The schema version of the file (KB_DB_SCHEMA_VERSION once open), or -1. */
int kb_db_schema_version(kb_db_t *db);

/* ---- meta: small named values (versions, ids of the daemon) ---------------- */

/*  Set key to value (both borrowed, copied); a NULL value deletes key. */
int kb_db_meta_set(kb_db_t *db, const char *key, const char *value);

/*  The value of key; caller owns the result. NULL when key is absent, and
    also on failure (then kb_db_error says why; kb_db_meta_read tells the
    two apart). */
char *kb_db_meta_get(kb_db_t *db, const char *key);

/*  The value of key into *value_out (caller owns it; NULL when absent).
    0, or -1 on failure. */
int kb_db_meta_read(kb_db_t *db, const char *key, char **value_out);

/* ---- contexts, and pooled kernels: one row per kernel the daemon drives ---- */

typedef struct {
    const char *id;   /* context id, or a pool kernel's own id; required */
    const char *kind; /* "context", "default", "pool", "attached"; required */
    const char *language, *kernel_name, *cwd;
    const char *env_names;                  /* JSON array text of the env var names the
                                               context set, or NULL */
    const char *connection;                 /* JSON text of the kernel's connection file
                                               (key included) */
    const char *connection_file, *log_file; /* paths, or NULL */
    long long pid;                          /* 0: none (an attached kernel) */
    unsigned long long pid_start;           /* /proc/<pid>/stat starttime */
    long long pgid;
    long long execution_count, generation;
    double created_at, last_activity_at;
    const char *extra; /* JSON object text for anything else, or NULL */
} kb_db_context_t;

/*  Insert row, or replace every field of the row of the same id. The row
    and its strings are borrowed. */
int kb_db_context_put(kb_db_t *db, const kb_db_context_t *row);

/*  Delete the row of id (0 too when there is none). */
int kb_db_context_delete(kb_db_t *db, const char *id);

/*  Called with each row; row and its strings are borrowed for the call.
    Nonzero stops the walk. */
typedef int (*kb_db_context_fn)(const kb_db_context_t *row, void *arg);

/*  Call fn with every context row, ordered by created_at, then id. Returns
    0 when every row was passed, fn's nonzero value when fn stopped the
    walk, -1 on failure. fn may write, but not start another walk of the
    contexts (that one fails). */
int kb_db_context_each(kb_db_t *db, kb_db_context_fn fn, void *arg);

/* ---- process records and their log frames ---------------------------------- */

typedef struct {
    const char *id; /* required */
    const char *context_id, *language;
    bool running;
    double submitted_at, ended_at;
    const char *result;     /* JSON text of the result without its logs, or NULL while running */
    const char *reason;     /* "completed", "failed", ... or NULL */
    int exit_code;          /* -1: null */
    const char *signal;     /* or NULL */
    const char *raw_reason; /* or NULL */
    long long view_stdout, view_stderr; /* where the result's stdout/stderr start in the
                                           record's text */
    long long seq;                      /* order of creation; records load oldest first */
} kb_db_record_t;

/*  Insert row, or replace every field of the record of the same id; its
    frames are kept. Borrowed. */
int kb_db_record_put(kb_db_t *db, const kb_db_record_t *row);

/*  Delete the record of id and all its frames, together (0 too when there
    is none). */
int kb_db_record_delete(kb_db_t *db, const char *id);

typedef int (*kb_db_record_fn)(const kb_db_record_t *row, void *arg);

/*  Call fn with every record, ordered by seq, then id; the rules of
    kb_db_context_each. */
int kb_db_record_each(kb_db_t *db, kb_db_record_fn fn, void *arg);

typedef struct {
    const char *record_id; /* required */
    long long cursor;      /* 0,1,2,... per record */
    int channel;           /* 0 stdout, 1 stderr, 2 system */
    double timestamp;
    const char *date; /* the kernel's date, or "" (NULL is stored as "") */
    const char *text; /* len bytes, which may hold NULs; not NUL-terminated necessarily */
    size_t len;
    size_t lost; /* read back: bytes of text its file did not have (lost with the
                    machine, not the daemon: kb_frames.h); 0 when written */
} kb_db_frame_t;

/*  Insert row, or replace the frame of the same (record_id, cursor).
    Borrowed. A frame of a record that is not stored is kept all the same
    (there are no foreign keys): delete frames with their record. The text
    of a frame of KB_FRAMES_MIN bytes or more is appended to the record's
    file in <path>-frames/ (kb_frames.h) and the row says where; a file
    that cannot be written (a full disk) fails the call, the file as it
    was. kb_db_record_delete removes the file once its delete is
    committed. */
int kb_db_frame_put(kb_db_t *db, const kb_db_frame_t *row);

typedef int (*kb_db_frame_fn)(const kb_db_frame_t *row, void *arg);

/*  Call fn with every frame of record_id (borrowed), ordered by cursor;
    the rules of kb_db_context_each. A frame's text kept in a file is read
    from it; what the file lacks is counted in lost. */
int kb_db_frame_each(kb_db_t *db, const char *record_id, kb_db_frame_fn fn, void *arg);

/*  Call fn with every frame of every record in one pass, ordered by
    record_id, then cursor: the fast way to load all records' frames at
    start. The rules of kb_db_context_each. */
int kb_db_frames_for_each_record(kb_db_t *db, kb_db_frame_fn fn, void *arg);

#endif
