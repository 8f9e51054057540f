/*  kb_db.c - state.db: one SQLite connection in WAL mode, a schema brought
    up to date step by step, and a prepared statement per kind of write and
    walk. See kb_db.h.
*/
#include "state/kb_db.h"

#include "state/kb_frames.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/*  The migration steps: step i takes a file from version i to i + 1. A
    step is never changed once released; a new schema is a new step. */
static const char *const s_steps[KB_DB_SCHEMA_VERSION] = {
    /* 1: the tables */
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
    "CREATE TABLE contexts (id TEXT PRIMARY KEY, kind TEXT NOT NULL, language TEXT,"
    " kernel_name TEXT, cwd TEXT, env_names TEXT, connection TEXT, connection_file TEXT,"
    " log_file TEXT, pid INTEGER, pid_start INTEGER, pgid INTEGER, execution_count INTEGER,"
    " generation INTEGER, created_at REAL, last_activity_at REAL);"
    "CREATE TABLE records (id TEXT PRIMARY KEY, context_id TEXT, language TEXT,"
    " running INTEGER, submitted_at REAL, ended_at REAL, result TEXT, reason TEXT,"
    " exit_code INTEGER, signal TEXT, raw_reason TEXT, view_stdout INTEGER,"
    " view_stderr INTEGER, seq INTEGER);"
    "CREATE TABLE frames (record_id TEXT NOT NULL, cursor INTEGER NOT NULL, channel INTEGER,"
    " timestamp REAL, date TEXT, text BLOB, PRIMARY KEY (record_id, cursor)) WITHOUT ROWID;",
    /* 2: room for fields of later versions; records load in creation order */
    "ALTER TABLE contexts ADD COLUMN extra TEXT;"
    "CREATE INDEX records_by_seq ON records (seq);",
    /* 3: frames in a rowid table, its key in an index of its own: a row of
       a WITHOUT ROWID table is a cell of its key's b-tree, and SQLite reads
       a cell that overflows whole at each comparison, so each insert read
       some large frames (a megabyte of output each) from the file again */
    "CREATE TABLE frames_v3 (record_id TEXT NOT NULL, cursor INTEGER NOT NULL,"
    " channel INTEGER, timestamp REAL, date TEXT, text BLOB, PRIMARY KEY (record_id, cursor));"
    "INSERT INTO frames_v3 SELECT record_id, cursor, channel, timestamp, date, text FROM frames;"
    "DROP TABLE frames;"
    "ALTER TABLE frames_v3 RENAME TO frames;",
    /* 4: a large frame's text in its record's file (kb_frames.h): where it
       begins there and its length; NULL for text in the row */
    "ALTER TABLE frames ADD COLUMN file_at INTEGER;"
    "ALTER TABLE frames ADD COLUMN file_len INTEGER;",
};

enum {
    ST_META_SET,
    ST_META_DELETE,
    ST_META_GET,
    ST_CONTEXT_PUT,
    ST_CONTEXT_DELETE,
    ST_CONTEXT_EACH,
    ST_RECORD_PUT,
    ST_RECORD_DELETE,
    ST_RECORD_FRAMES_DELETE,
    ST_RECORD_EACH,
    ST_FRAME_PUT,
    ST_FRAME_EACH,
    ST_FRAMES_ALL,
    ST_FRAME_FILE_USED,
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_COUNT
};

static const char *const s_sql[ST_COUNT] = {
    [ST_META_SET] = "INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)",
    [ST_META_DELETE] = "DELETE FROM meta WHERE key = ?1",
    [ST_META_GET] = "SELECT value FROM meta WHERE key = ?1",
    [ST_CONTEXT_PUT]
    = "INSERT OR REPLACE INTO contexts (id, kind, language, kernel_name, cwd, env_names,"
      " connection, connection_file, log_file, pid, pid_start, pgid, execution_count,"
      " generation, created_at, last_activity_at, extra)"
      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
    [ST_CONTEXT_DELETE] = "DELETE FROM contexts WHERE id = ?1",
    [ST_CONTEXT_EACH]
    = "SELECT id, kind, language, kernel_name, cwd, env_names, connection, connection_file,"
      " log_file, pid, pid_start, pgid, execution_count, generation, created_at,"
      " last_activity_at, extra FROM contexts ORDER BY created_at, id",
    [ST_RECORD_PUT]
    = "INSERT OR REPLACE INTO records (id, context_id, language, running, submitted_at,"
      " ended_at, result, reason, exit_code, signal, raw_reason, view_stdout, view_stderr, seq)"
      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    [ST_RECORD_DELETE] = "DELETE FROM records WHERE id = ?1",
    [ST_RECORD_FRAMES_DELETE] = "DELETE FROM frames WHERE record_id = ?1",
    [ST_RECORD_EACH]
    = "SELECT id, context_id, language, running, submitted_at, ended_at, result, reason,"
      " exit_code, signal, raw_reason, view_stdout, view_stderr, seq FROM records"
      " ORDER BY seq, id",
    [ST_FRAME_PUT] = "INSERT OR REPLACE INTO frames (record_id, cursor, channel, timestamp, date,"
                     " text, file_at, file_len) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    [ST_FRAME_EACH] = "SELECT record_id, cursor, channel, timestamp, date, text, file_at, file_len"
                      " FROM frames WHERE record_id = ?1 ORDER BY cursor",
    [ST_FRAMES_ALL] = "SELECT record_id, cursor, channel, timestamp, date, text, file_at, file_len"
                      " FROM frames ORDER BY record_id, cursor",
    [ST_FRAME_FILE_USED] = "SELECT 1 FROM frames WHERE record_id = ?1 AND file_at IS NOT NULL"
                           " LIMIT 1",
    /* prepared once, as the others: a transaction per batch of the writer,
       which sqlite3_exec would parse again each time */
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
};

struct kb_db {
    sqlite3 *conn;
    char *path;
    kb_frames_t *frames; /* the text of large frames, in <path>-frames/ */
    kb_buf_t text;       /* a frame's text read from there */
    sqlite3_stmt *st[ST_COUNT];
    bool walking[ST_COUNT];
    char error[600];
};

static int s_fail(kb_db_t *self, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(self->error, sizeof self->error, fmt, ap);
    va_end(ap);
    return -1;
}

static int s_sqlite_fail(kb_db_t *self, const char *what)
{
    return s_fail(self, "%s: %s: %s", self->path, what, sqlite3_errmsg(self->conn));
}

static int s_exec(kb_db_t *self, const char *sql, const char *what)
{
    char *message = NULL;
    if (sqlite3_exec(self->conn, sql, NULL, NULL, &message) != SQLITE_OK) {
        s_fail(self, "%s: %s: %s", self->path, what,
               message ? message : sqlite3_errmsg(self->conn));
        sqlite3_free(message);
        return -1;
    }
    return 0;
}

/*  One integer from a query; -1 on failure. */
static long long s_integer(kb_db_t *self, const char *sql, const char *what)
{
    sqlite3_stmt *stmt = NULL;
    long long value = -1;
    if (sqlite3_prepare_v2(self->conn, sql, -1, &stmt, NULL) != SQLITE_OK) {
        s_sqlite_fail(self, what);
        return -1;
    }
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW)
        value = sqlite3_column_int64(stmt, 0);
    else
        s_sqlite_fail(self, what);
    sqlite3_finalize(stmt);
    return value;
}

/*  Apply the steps from version to KB_DB_SCHEMA_VERSION, each in its own
    transaction with the version it brings. */
static int s_migrate(kb_db_t *self, int version)
{
    for (int step = version; step < KB_DB_SCHEMA_VERSION; step++) {
        char bump[64];
        snprintf(bump, sizeof bump, "PRAGMA user_version = %d;", step + 1);
        if (s_exec(self, "BEGIN IMMEDIATE", "cannot begin a migration") != 0)
            return -1;
        if (s_exec(self, s_steps[step], "cannot migrate the schema") != 0
            || s_exec(self, bump, "cannot migrate the schema") != 0
            || s_exec(self, "COMMIT", "cannot commit a migration") != 0) {
            sqlite3_exec(self->conn, "ROLLBACK", NULL, NULL, NULL);
            return -1;
        }
    }
    return 0;
}

/*  What the file is: its version, after refusing what is not ours. */
static int s_check(kb_db_t *self)
{
    long long version = s_integer(self, "PRAGMA user_version", "cannot read the file");
    if (version < 0)
        return -1; /* not a database, damaged, unreadable: the reason is SQLite's */
    long long tables
        = s_integer(self, "SELECT count(*) FROM sqlite_master", "cannot read the file");
    if (tables < 0)
        return -1;
    if (version == 0 && tables > 0)
        return s_fail(self,
                      "%s is a SQLite database of something else (tables, but no "
                      "kernelbridge schema version): move it away",
                      self->path);
    if (version > KB_DB_SCHEMA_VERSION)
        return s_fail(self,
                      "%s has schema version %lld, newer than this build's %d: use a newer "
                      "kernelbridge, or move the file away",
                      self->path, version, KB_DB_SCHEMA_VERSION);
    return (int)version;
}

static bool s_file_used(const char *record_id, void *arg);

kb_db_t *kb_db_open(const char *path, kb_error_t *err)
{
    kb_db_t *self = calloc(1, sizeof *self);
    char *frames_dir = self ? kb_buf_sprintf("%s-frames", path) : NULL;
    if (!self || !(self->path = strdup(path)) || !frames_dir
        || !(self->frames = kb_frames_new(frames_dir))) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        free(frames_dir);
        kb_db_close(&self);
        return NULL;
    }
    free(frames_dir);
    /* a new file is made here, 0600, so that SQLite's -wal and -shm get its mode */
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0)
        close(fd);
    else if (errno != EEXIST) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot create %s: %s", path, strerror(errno));
        kb_db_close(&self);
        return NULL;
    }
    int rc = sqlite3_open_v2(path, &self->conn, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL);
    if (rc != SQLITE_OK) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot open %s: %s", path,
                     self->conn ? sqlite3_errmsg(self->conn) : sqlite3_errstr(rc));
        kb_db_close(&self);
        return NULL;
    }
    sqlite3_extended_result_codes(self->conn, 1);
    sqlite3_busy_timeout(self->conn, 5000);
    int version = s_check(self);
    if (version < 0 || chmod(path, 0600) != 0
        || s_exec(self, "PRAGMA journal_mode = WAL", "cannot use WAL mode") != 0
        || s_exec(self, "PRAGMA synchronous = NORMAL", "cannot set synchronous") != 0
        || s_migrate(self, version) != 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "%s", self->error[0] ? self->error : strerror(errno));
        kb_db_close(&self);
        return NULL;
    }
    for (int i = 0; i < ST_COUNT; i++) {
        if (sqlite3_prepare_v3(self->conn, s_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &self->st[i],
                               NULL)
            != SQLITE_OK) {
            s_sqlite_fail(self, "cannot prepare a statement");
            kb_error_set(err, KB_ERR_INTERNAL, "%s", self->error);
            kb_db_close(&self);
            return NULL;
        }
    }
    /* a crash between a frame's text and its row, or between a record's
       delete and its file's: files no row points to go */
    kb_frames_sweep(self->frames, s_file_used, self);
    self->error[0] = '\0';
    return self;
}

void kb_db_close(kb_db_t **db_p)
{
    if (!db_p || !*db_p)
        return;
    kb_db_t *self = *db_p;
    *db_p = NULL;
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(self->st[i]);
    if (self->conn) {
        if (!sqlite3_get_autocommit(self->conn))
            sqlite3_exec(self->conn, "ROLLBACK", NULL, NULL, NULL);
        sqlite3_close(self->conn);
    }
    kb_frames_destroy(&self->frames);
    kb_buf_free(&self->text);
    free(self->path);
    free(self);
}

const char *kb_db_error(kb_db_t *db)
{
    return db->error;
}

const char *kb_db_path(kb_db_t *db)
{
    return db->path;
}

static int s_done(kb_db_t *self, int which, const char *what);

int kb_db_begin(kb_db_t *db)
{
    if (kb_db_in_transaction(db))
        return s_fail(db, "%s: a transaction is open already", db->path);
    return s_done(db, ST_BEGIN, "cannot begin");
}

int kb_db_commit(kb_db_t *db)
{
    if (s_done(db, ST_COMMIT, "cannot commit") != 0)
        return -1;
    kb_frames_commit(db->frames);
    return 0;
}

int kb_db_rollback(kb_db_t *db)
{
    kb_frames_rollback(db->frames);
    if (!kb_db_in_transaction(db))
        return 0;
    return s_done(db, ST_ROLLBACK, "cannot roll back");
}

bool kb_db_in_transaction(kb_db_t *db)
{
    return !sqlite3_get_autocommit(db->conn);
}

int kb_db_schema_version(kb_db_t *db)
{
    return (int)s_integer(db, "PRAGMA user_version", "cannot read the schema version");
}

/* ---- statements ------------------------------------------------------------------ */

static void s_text(sqlite3_stmt *stmt, int i, const char *text)
{
    if (text)
        sqlite3_bind_text(stmt, i, text, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(stmt, i);
}

static const char *s_column_text(sqlite3_stmt *stmt, int i)
{
    return (const char *)sqlite3_column_text(stmt, i); /* NULL for SQL NULL */
}

/*  Run a bound statement that returns no rows, then reset it. */
static int s_done(kb_db_t *self, int which, const char *what)
{
    sqlite3_stmt *stmt = self->st[which];
    int rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE)
        s_sqlite_fail(self, what);
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    return rc == SQLITE_DONE ? 0 : -1;
}

/*  Walk the rows of a bound statement: row_fn builds the row and calls fn. */
typedef int (*s_row_fn)(kb_db_t *self, sqlite3_stmt *stmt, void *fn, void *arg);

static int s_walk(kb_db_t *self, int which, s_row_fn row_fn, void *fn, void *arg, const char *what)
{
    sqlite3_stmt *stmt = self->st[which];
    if (self->walking[which]) {
        sqlite3_clear_bindings(stmt);
        return s_fail(self, "%s: %s: a walk of the same rows is under way", self->path, what);
    }
    self->walking[which] = true;
    int result = 0, rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        result = row_fn(self, stmt, fn, arg);
        if (result != 0)
            break;
    }
    if (result == 0 && rc != SQLITE_DONE)
        result = s_sqlite_fail(self, what);
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    self->walking[which] = false;
    return result;
}

/* ---- meta ------------------------------------------------------------------------- */

int kb_db_meta_set(kb_db_t *db, const char *key, const char *value)
{
    int which = value ? ST_META_SET : ST_META_DELETE;
    s_text(db->st[which], 1, key);
    if (value)
        s_text(db->st[which], 2, value);
    return s_done(db, which, "cannot write a meta value");
}

int kb_db_meta_read(kb_db_t *db, const char *key, char **value_out)
{
    *value_out = NULL;
    sqlite3_stmt *stmt = db->st[ST_META_GET];
    s_text(stmt, 1, key);
    int rc = sqlite3_step(stmt), result = 0;
    if (rc == SQLITE_ROW && s_column_text(stmt, 0)) {
        *value_out = strdup(s_column_text(stmt, 0));
        if (!*value_out)
            result = s_fail(db, "out of memory");
    } else if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        result = s_sqlite_fail(db, "cannot read a meta value");
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    return result;
}

char *kb_db_meta_get(kb_db_t *db, const char *key)
{
    char *value = NULL;
    kb_db_meta_read(db, key, &value);
    return value;
}

/* ---- contexts --------------------------------------------------------------------- */

int kb_db_context_put(kb_db_t *db, const kb_db_context_t *row)
{
    if (!row->id || !row->kind)
        return s_fail(db, "%s: a context row needs an id and a kind", db->path);
    sqlite3_stmt *stmt = db->st[ST_CONTEXT_PUT];
    const char *texts[]
        = { row->id,        row->kind,       row->language,        row->kernel_name, row->cwd,
            row->env_names, row->connection, row->connection_file, row->log_file };
    for (int i = 0; i < 9; i++)
        s_text(stmt, i + 1, texts[i]);
    sqlite3_bind_int64(stmt, 10, row->pid);
    sqlite3_bind_int64(stmt, 11, (sqlite3_int64)row->pid_start);
    sqlite3_bind_int64(stmt, 12, row->pgid);
    sqlite3_bind_int64(stmt, 13, row->execution_count);
    sqlite3_bind_int64(stmt, 14, row->generation);
    sqlite3_bind_double(stmt, 15, row->created_at);
    sqlite3_bind_double(stmt, 16, row->last_activity_at);
    s_text(stmt, 17, row->extra);
    return s_done(db, ST_CONTEXT_PUT, "cannot write a context");
}

int kb_db_context_delete(kb_db_t *db, const char *id)
{
    s_text(db->st[ST_CONTEXT_DELETE], 1, id);
    return s_done(db, ST_CONTEXT_DELETE, "cannot delete a context");
}

static int s_context_row(kb_db_t *self, sqlite3_stmt *stmt, void *fn, void *arg)
{
    (void)self;
    kb_db_context_t row = {
        .id = s_column_text(stmt, 0),
        .kind = s_column_text(stmt, 1),
        .language = s_column_text(stmt, 2),
        .kernel_name = s_column_text(stmt, 3),
        .cwd = s_column_text(stmt, 4),
        .env_names = s_column_text(stmt, 5),
        .connection = s_column_text(stmt, 6),
        .connection_file = s_column_text(stmt, 7),
        .log_file = s_column_text(stmt, 8),
        .pid = sqlite3_column_int64(stmt, 9),
        .pid_start = (unsigned long long)sqlite3_column_int64(stmt, 10),
        .pgid = sqlite3_column_int64(stmt, 11),
        .execution_count = sqlite3_column_int64(stmt, 12),
        .generation = sqlite3_column_int64(stmt, 13),
        .created_at = sqlite3_column_double(stmt, 14),
        .last_activity_at = sqlite3_column_double(stmt, 15),
        .extra = s_column_text(stmt, 16),
    };
    return ((kb_db_context_fn)fn)(&row, arg);
}

int kb_db_context_each(kb_db_t *db, kb_db_context_fn fn, void *arg)
{
    return s_walk(db, ST_CONTEXT_EACH, s_context_row, (void *)fn, arg, "cannot read the contexts");
}

/* ---- records and frames ------------------------------------------------------------ */

int kb_db_record_put(kb_db_t *db, const kb_db_record_t *row)
{
    if (!row->id)
        return s_fail(db, "%s: a record row needs an id", db->path);
    sqlite3_stmt *stmt = db->st[ST_RECORD_PUT];
    s_text(stmt, 1, row->id);
    s_text(stmt, 2, row->context_id);
    s_text(stmt, 3, row->language);
    sqlite3_bind_int(stmt, 4, row->running ? 1 : 0);
    sqlite3_bind_double(stmt, 5, row->submitted_at);
    sqlite3_bind_double(stmt, 6, row->ended_at);
    s_text(stmt, 7, row->result);
    s_text(stmt, 8, row->reason);
    sqlite3_bind_int(stmt, 9, row->exit_code);
    s_text(stmt, 10, row->signal);
    s_text(stmt, 11, row->raw_reason);
    sqlite3_bind_int64(stmt, 12, row->view_stdout);
    sqlite3_bind_int64(stmt, 13, row->view_stderr);
    sqlite3_bind_int64(stmt, 14, row->seq);
    return s_done(db, ST_RECORD_PUT, "cannot write a record");
}

int kb_db_record_delete(kb_db_t *db, const char *id)
{
    /* the record and its frames together: one transaction unless one is open */
    bool own = !kb_db_in_transaction(db);
    if (own && kb_db_begin(db) != 0)
        return -1;
    s_text(db->st[ST_RECORD_DELETE], 1, id);
    int rc = s_done(db, ST_RECORD_DELETE, "cannot delete a record");
    if (rc == 0) {
        s_text(db->st[ST_RECORD_FRAMES_DELETE], 1, id);
        rc = s_done(db, ST_RECORD_FRAMES_DELETE, "cannot delete a record's frames");
    }
    /* its file goes once this is committed */
    if (rc == 0 && kb_frames_forget(db->frames, id) != 0)
        rc = s_fail(db, "out of memory");
    if (own) {
        if (rc == 0)
            rc = kb_db_commit(db);
        if (rc != 0) {
            char saved[sizeof db->error];
            memcpy(saved, db->error, sizeof saved);
            kb_db_rollback(db);
            memcpy(db->error, saved, sizeof saved);
        }
    }
    return rc;
}

static int s_record_row(kb_db_t *self, sqlite3_stmt *stmt, void *fn, void *arg)
{
    (void)self;
    kb_db_record_t row = {
        .id = s_column_text(stmt, 0),
        .context_id = s_column_text(stmt, 1),
        .language = s_column_text(stmt, 2),
        .running = sqlite3_column_int(stmt, 3) != 0,
        .submitted_at = sqlite3_column_double(stmt, 4),
        .ended_at = sqlite3_column_double(stmt, 5),
        .result = s_column_text(stmt, 6),
        .reason = s_column_text(stmt, 7),
        .exit_code = sqlite3_column_int(stmt, 8),
        .signal = s_column_text(stmt, 9),
        .raw_reason = s_column_text(stmt, 10),
        .view_stdout = sqlite3_column_int64(stmt, 11),
        .view_stderr = sqlite3_column_int64(stmt, 12),
        .seq = sqlite3_column_int64(stmt, 13),
    };
    return ((kb_db_record_fn)fn)(&row, arg);
}

int kb_db_record_each(kb_db_t *db, kb_db_record_fn fn, void *arg)
{
    return s_walk(db, ST_RECORD_EACH, s_record_row, (void *)fn, arg, "cannot read the records");
}

int kb_db_frame_put(kb_db_t *db, const kb_db_frame_t *row)
{
    if (!row->record_id)
        return s_fail(db, "%s: a frame needs a record id", db->path);
    sqlite3_stmt *stmt = db->st[ST_FRAME_PUT];
    s_text(stmt, 1, row->record_id);
    sqlite3_bind_int64(stmt, 2, row->cursor);
    sqlite3_bind_int(stmt, 3, row->channel);
    sqlite3_bind_double(stmt, 4, row->timestamp);
    s_text(stmt, 5, row->date ? row->date : "");
    if (kb_frames_wants(row->record_id, row->len)) {
        long long at;
        if (kb_frames_append(db->frames, row->record_id, row->text, row->len, &at) != 0) {
            int e = errno;
            sqlite3_clear_bindings(stmt);
            return s_fail(db, "%s-frames/%s: cannot write a log frame's text: %s", db->path,
                          row->record_id, strerror(e));
        }
        sqlite3_bind_blob64(stmt, 6, "", 0, SQLITE_STATIC);
        sqlite3_bind_int64(stmt, 7, at);
        sqlite3_bind_int64(stmt, 8, (sqlite3_int64)row->len);
    } else {
        /* a zero-length blob must not be NULL; file_at and file_len are */
        sqlite3_bind_blob64(stmt, 6, row->len ? row->text : "", row->len, SQLITE_STATIC);
    }
    int rc = s_done(db, ST_FRAME_PUT, "cannot write a log frame");
    if (!kb_db_in_transaction(db))
        kb_frames_commit(db->frames); /* its own transaction, ended */
    return rc;
}

static int s_frame_row(kb_db_t *self, sqlite3_stmt *stmt, void *fn, void *arg)
{
    const void *blob = sqlite3_column_blob(stmt, 5);
    kb_db_frame_t row = {
        .record_id = s_column_text(stmt, 0),
        .cursor = sqlite3_column_int64(stmt, 1),
        .channel = sqlite3_column_int(stmt, 2),
        .timestamp = sqlite3_column_double(stmt, 3),
        .date = s_column_text(stmt, 4) ? s_column_text(stmt, 4) : "",
        .text = blob ? blob : "",
        .len = (size_t)sqlite3_column_bytes(stmt, 5),
    };
    if (sqlite3_column_type(stmt, 6) != SQLITE_NULL) {
        long long len = sqlite3_column_int64(stmt, 7);
        long long got
            = len < 0 ? -1
                      : kb_frames_read(self->frames, row.record_id, sqlite3_column_int64(stmt, 6),
                                       (size_t)len, &self->text);
        if (got < 0)
            return s_fail(self, "%s-frames/%s: cannot read a log frame's text: %s", self->path,
                          row.record_id ? row.record_id : "", strerror(errno));
        row.text = got ? kb_buf_cstr(&self->text) : "";
        row.len = (size_t)got;
        row.lost = (size_t)(len - got);
    }
    return ((kb_db_frame_fn)fn)(&row, arg);
}

/*  kb_frames_sweep's question: does a row point into record_id's file? */
static bool s_file_used(const char *record_id, void *arg)
{
    kb_db_t *self = arg;
    sqlite3_stmt *stmt = self->st[ST_FRAME_FILE_USED];
    s_text(stmt, 1, record_id);
    int rc = sqlite3_step(stmt);
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    return rc != SQLITE_DONE; /* a row, or an error: kept */
}

int kb_db_frame_each(kb_db_t *db, const char *record_id, kb_db_frame_fn fn, void *arg)
{
    if (!db->walking[ST_FRAME_EACH])
        s_text(db->st[ST_FRAME_EACH], 1, record_id);
    return s_walk(db, ST_FRAME_EACH, s_frame_row, (void *)fn, arg, "cannot read log frames");
}

int kb_db_frames_for_each_record(kb_db_t *db, kb_db_frame_fn fn, void *arg)
{
    return s_walk(db, ST_FRAMES_ALL, s_frame_row, (void *)fn, arg, "cannot read log frames");
}
