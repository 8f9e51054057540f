/*  test_db.c - src/state with real files: state.db's rows (every field,
    NULLs, frames with NUL bytes, a large frame), replace and delete, the
    order of walks and their stops, transactions; large frames' text in a
    file per record (written, read back, removed with the record's commit
    and kept by a rollback, a write that fails, a file cut short, files no
    row points to swept at open); the file's mode; the
    schema (a version-1 file migrated, a newer, a foreign and a garbage
    file refused and left unchanged); the state dir (its default, making it
    private, refusing what is not a private dir) and its lock. */
#include "kb_testutil.h"
#include "state/kb_db.h"
#include "state/kb_statedir.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "state/kb_frames.h"

static char *tmp;

static char *s_path(const char *name)
{
    size_t len = strlen(tmp) + strlen(name) + 2;
    char *path = malloc(len);
    snprintf(path, len, "%s/%s", tmp, name);
    return path;
}

static kb_db_t *s_open(const char *name)
{
    char *path = s_path(name);
    kb_error_t err = { 0 };
    kb_db_t *db = kb_db_open(path, &err);
    if (!db)
        fprintf(stderr, "open %s: %s\n", path, err.message);
    free(path);
    return db;
}

/* ---- the walks collect what they see -------------------------------------------- */

typedef struct {
    int count, stop_at;
    char ids[16][64];
    kb_db_context_t first;
    char first_strings[9][256];
    bool first_nulls[9];
} s_contexts_seen_t;

static int s_on_context(const kb_db_context_t *row, void *arg)
{
    s_contexts_seen_t *seen = arg;
    if (seen->count < 16)
        snprintf(seen->ids[seen->count], sizeof seen->ids[0], "%s", row->id);
    if (seen->count == 0) {
        seen->first = *row;
        const char *strings[]
            = { row->id,        row->kind,       row->language, row->kernel_name, row->cwd,
                row->env_names, row->connection, row->log_file, row->extra };
        for (int i = 0; i < 9; i++) {
            seen->first_nulls[i] = strings[i] == NULL;
            snprintf(seen->first_strings[i], sizeof seen->first_strings[0], "%s",
                     strings[i] ? strings[i] : "");
        }
    }
    seen->count++;
    return seen->stop_at && seen->count == seen->stop_at ? 7 : 0;
}

static void test_contexts(void)
{
    kb_db_t *db = s_open("contexts.db");
    CHECK(db != NULL);
    if (!db)
        return;
    CHECK_STR(kb_db_error(db), "");
    CHECK(kb_db_schema_version(db) == KB_DB_SCHEMA_VERSION);
    kb_db_context_t row = { .id = "ctx_b",
                            .kind = "context",
                            .language = "python",
                            .kernel_name = "python3",
                            .cwd = "/tmp/work dir",
                            .env_names = "[\"A\",\"B\"]",
                            .connection = "{\"key\":\"k\"}",
                            .connection_file = "/s/k-1.json",
                            .log_file = "/s/k-1.log",
                            .pid = 4242,
                            .pid_start = 18446744073709551000ULL,
                            .pgid = 4242,
                            .execution_count = 7,
                            .generation = 3,
                            .created_at = 20.5,
                            .last_activity_at = 30.25,
                            .extra = "{\"x\":1}" };
    CHECK(kb_db_context_put(db, &row) == 0);
    kb_db_context_t sparse = { .id = "ctx_a", .kind = "attached", .created_at = 10.0 };
    CHECK(kb_db_context_put(db, &sparse) == 0);
    kb_db_context_t bad = { .id = NULL, .kind = "context" };
    CHECK(kb_db_context_put(db, &bad) == -1);
    CHECK(strstr(kb_db_error(db), "id") != NULL);

    s_contexts_seen_t seen = { 0 };
    CHECK(kb_db_context_each(db, s_on_context, &seen) == 0);
    CHECK(seen.count == 2);
    CHECK_STR(seen.ids[0], "ctx_a"); /* ordered by created_at */
    CHECK_STR(seen.ids[1], "ctx_b");
    CHECK(seen.first_nulls[2] && seen.first_nulls[4] && seen.first_nulls[8]); /* NULL stays NULL */
    CHECK(seen.first.pid == 0 && seen.first.generation == 0);

    /* replace: every field of the row of the same id */
    row.execution_count = 8;
    row.cwd = NULL;
    row.created_at = 1.0;
    CHECK(kb_db_context_put(db, &row) == 0);
    memset(&seen, 0, sizeof seen);
    CHECK(kb_db_context_each(db, s_on_context, &seen) == 0);
    CHECK(seen.count == 2);
    CHECK_STR(seen.ids[0], "ctx_b");
    CHECK(seen.first.execution_count == 8 && seen.first.pid_start == 18446744073709551000ULL);
    CHECK(seen.first.pgid == 4242 && seen.first.generation == 3);
    CHECK(seen.first.last_activity_at == 30.25);
    CHECK(seen.first_nulls[4]);
    CHECK_STR(seen.first_strings[1], "context");
    CHECK_STR(seen.first_strings[5], "[\"A\",\"B\"]");
    CHECK_STR(seen.first_strings[6], "{\"key\":\"k\"}");
    CHECK_STR(seen.first_strings[7], "/s/k-1.log");
    CHECK_STR(seen.first_strings[8], "{\"x\":1}");

    /* a stop */
    memset(&seen, 0, sizeof seen);
    seen.stop_at = 1;
    CHECK(kb_db_context_each(db, s_on_context, &seen) == 7);
    CHECK(seen.count == 1);

    CHECK(kb_db_context_delete(db, "ctx_b") == 0);
    CHECK(kb_db_context_delete(db, "ctx_none") == 0);
    memset(&seen, 0, sizeof seen);
    CHECK(kb_db_context_each(db, s_on_context, &seen) == 0);
    CHECK(seen.count == 1);
    CHECK_STR(seen.ids[0], "ctx_a");
    kb_db_close(&db);
    CHECK(db == NULL);
    kb_db_close(&db);
    kb_db_close(NULL);
}

/*  A nested walk of the same rows fails cleanly; the outer one goes on. */
typedef struct {
    kb_db_t *db;
    int outer, inner_rc;
} s_nested_t;

static int s_count_row(const kb_db_context_t *row, void *arg)
{
    (*(int *)arg)++;
    return 0;
}

static int s_nested(const kb_db_context_t *row, void *arg)
{
    s_nested_t *nested = arg;
    int inner = 0;
    nested->outer++;
    nested->inner_rc = kb_db_context_each(nested->db, s_count_row, &inner);
    /* writing during a walk is allowed */
    kb_db_meta_set(nested->db, "seen", row->id);
    return 0;
}

static void test_nested_walk(void)
{
    kb_db_t *db = s_open("nested.db");
    CHECK(db != NULL);
    if (!db)
        return;
    for (int i = 0; i < 3; i++) {
        char id[16];
        snprintf(id, sizeof id, "c%d", i);
        kb_db_context_t row = { .id = id, .kind = "context", .created_at = i };
        CHECK(kb_db_context_put(db, &row) == 0);
    }
    s_nested_t nested = { .db = db };
    CHECK(kb_db_context_each(db, s_nested, &nested) == 0);
    CHECK(nested.outer == 3);
    CHECK(nested.inner_rc == -1);
    CHECK(strstr(kb_db_error(db), "under way") != NULL);
    char *seen = kb_db_meta_get(db, "seen");
    CHECK_STR(seen, "c2");
    free(seen);
    int count = 0;
    CHECK(kb_db_context_each(db, s_count_row, &count) == 0); /* usable again */
    CHECK(count == 3);
    kb_db_close(&db);
}

/* ---- records and frames ------------------------------------------------------------ */

typedef struct {
    int count;
    char ids[16][64];
    kb_db_record_t last;
    char result[256];
    bool result_null, signal_null;
} s_records_seen_t;

static int s_on_record(const kb_db_record_t *row, void *arg)
{
    s_records_seen_t *seen = arg;
    snprintf(seen->ids[seen->count % 16], sizeof seen->ids[0], "%s", row->id);
    seen->last = *row;
    seen->result_null = row->result == NULL;
    seen->signal_null = row->signal == NULL;
    snprintf(seen->result, sizeof seen->result, "%s", row->result ? row->result : "");
    seen->last.id = seen->last.context_id = seen->last.language = seen->last.result = NULL;
    seen->last.reason = seen->last.signal = seen->last.raw_reason = NULL;
    seen->count++;
    return 0;
}

typedef struct {
    int count;
    long long cursors[32];
    char records[32][32];
    int channels[32];
    size_t lens[32];
    bool nul_kept, big_kept, date_kept;
} s_frames_seen_t;

static int s_on_frame(const kb_db_frame_t *row, void *arg)
{
    s_frames_seen_t *seen = arg;
    if (seen->count < 32) {
        seen->cursors[seen->count] = row->cursor;
        seen->channels[seen->count] = row->channel;
        seen->lens[seen->count] = row->len;
        snprintf(seen->records[seen->count], sizeof seen->records[0], "%s", row->record_id);
    }
    if (row->len == 5 && memcmp(row->text, "a\0b\0c", 5) == 0)
        seen->nul_kept = true;
    if (row->len == (1 << 20) && ((const char *)row->text)[(1 << 20) - 1] == 'z')
        seen->big_kept = true;
    if (strcmp(row->date, "2026-12-04T00:00:00Z") == 0 && row->timestamp == 12.5)
        seen->date_kept = true;
    seen->count++;
    return 0;
}

static void test_records_and_frames(void)
{
    kb_db_t *db = s_open("records.db");
    CHECK(db != NULL);
    if (!db)
        return;
    kb_db_record_t running = { .id = "prc_2",
                               .context_id = "ctx_a",
                               .language = "python",
                               .running = true,
                               .submitted_at = 5.0,
                               .exit_code = -1,
                               .seq = 2 };
    kb_db_record_t done = { .id = "prc_1",
                            .context_id = "ctx_a",
                            .language = "python",
                            .submitted_at = 1.0,
                            .ended_at = 2.0,
                            .result = "{\"error\":null}",
                            .reason = "exited",
                            .exit_code = 0,
                            .raw_reason = "raw",
                            .view_stdout = 3,
                            .view_stderr = 4,
                            .seq = 1 };
    CHECK(kb_db_record_put(db, &running) == 0);
    CHECK(kb_db_record_put(db, &done) == 0);
    s_records_seen_t seen = { 0 };
    CHECK(kb_db_record_each(db, s_on_record, &seen) == 0);
    CHECK(seen.count == 2);
    CHECK_STR(seen.ids[0], "prc_1"); /* by seq */
    CHECK_STR(seen.ids[1], "prc_2");
    CHECK(seen.last.running && seen.result_null && seen.signal_null && seen.last.exit_code == -1);

    /* the running one ends: replaced, its frames kept */
    running.running = false;
    running.result = "{\"r\":2}";
    running.reason = "signaled";
    running.signal = "SIGKILL";
    running.exit_code = 137;
    running.ended_at = 9.0;
    running.view_stdout = 1;
    CHECK(kb_db_record_put(db, &running) == 0);

    char *big = malloc(1 << 20);
    memset(big, 'y', 1 << 20);
    big[(1 << 20) - 1] = 'z';
    kb_db_frame_t frames[] = {
        { .record_id = "prc_2", .cursor = 1, .channel = 1, .text = "a\0b\0c", .len = 5 },
        { .record_id = "prc_2",
          .cursor = 0,
          .channel = 0,
          .timestamp = 12.5,
          .date = "2026-12-04T00:00:00Z",
          .text = "out\n",
          .len = 4 },
        { .record_id = "prc_2", .cursor = 2, .channel = 2, .text = big, .len = 1 << 20 },
        { .record_id = "prc_1", .cursor = 0, .channel = 0, .date = NULL, .text = "", .len = 0 },
    };
    CHECK(kb_db_begin(db) == 0);
    CHECK(kb_db_in_transaction(db));
    for (size_t i = 0; i < sizeof frames / sizeof frames[0]; i++)
        CHECK(kb_db_frame_put(db, &frames[i]) == 0);
    CHECK(kb_db_commit(db) == 0);
    CHECK(!kb_db_in_transaction(db));
    free(big);

    s_frames_seen_t fs = { 0 };
    CHECK(kb_db_frame_each(db, "prc_2", s_on_frame, &fs) == 0);
    CHECK(fs.count == 3);
    CHECK(fs.cursors[0] == 0 && fs.cursors[1] == 1 && fs.cursors[2] == 2);
    CHECK(fs.channels[0] == 0 && fs.channels[1] == 1 && fs.channels[2] == 2);
    CHECK(fs.nul_kept && fs.big_kept && fs.date_kept);

    memset(&fs, 0, sizeof fs);
    CHECK(kb_db_frames_for_each_record(db, s_on_frame, &fs) == 0);
    CHECK(fs.count == 4);
    CHECK_STR(fs.records[0], "prc_1"); /* by record, then cursor */
    CHECK(fs.lens[0] == 0);
    CHECK_STR(fs.records[1], "prc_2");

    memset(&seen, 0, sizeof seen);
    CHECK(kb_db_record_each(db, s_on_record, &seen) == 0);
    CHECK(seen.count == 2);
    CHECK(!seen.last.running && seen.last.exit_code == 137 && seen.last.view_stdout == 1);
    CHECK_STR(seen.result, "{\"r\":2}");

    /* a record goes with its frames */
    CHECK(kb_db_record_delete(db, "prc_2") == 0);
    memset(&fs, 0, sizeof fs);
    CHECK(kb_db_frames_for_each_record(db, s_on_frame, &fs) == 0);
    CHECK(fs.count == 1);
    memset(&seen, 0, sizeof seen);
    CHECK(kb_db_record_each(db, s_on_record, &seen) == 0);
    CHECK(seen.count == 1);
    CHECK(kb_db_record_delete(db, "prc_none") == 0);
    kb_db_close(&db);
}

/* ---- large frames in files ------------------------------------------------------ */

typedef struct {
    int count;
    size_t lens[8], lost[8];
    bool same[8];
    const char *want[8];
} s_texts_seen_t;

static int s_on_text(const kb_db_frame_t *row, void *arg)
{
    s_texts_seen_t *seen = arg;
    int i = seen->count++;
    if (i < 8) {
        seen->lens[i] = row->len;
        seen->lost[i] = row->lost;
        seen->same[i] = seen->want[i] && memcmp(row->text, seen->want[i], row->len) == 0;
    }
    return 0;
}

static long long s_size(const char *name)
{
    char *path = s_path(name);
    struct stat st;
    long long size = stat(path, &st) == 0 ? (long long)st.st_size : -1;
    free(path);
    return size;
}

static char *s_text_of(size_t len, char seed)
{
    char *text = malloc(len);
    for (size_t i = 0; i < len; i++)
        text[i] = (char)(seed + (char)(i % 251)); /* NULs among them */
    return text;
}

static void test_large_frames_in_files(void)
{
    kb_db_t *db = s_open("files.db");
    CHECK(db != NULL);
    if (!db)
        return;
    const size_t big = 3 * KB_FRAMES_MIN + 7;
    char *a = s_text_of(big, 'a'), *b = s_text_of(KB_FRAMES_MIN, 'b');
    kb_db_frame_t rows[] = {
        { .record_id = "prc_f", .cursor = 0, .channel = 0, .text = a, .len = big },
        { .record_id = "prc_f", .cursor = 1, .channel = 1, .text = "small", .len = 5 },
        { .record_id = "prc_f", .cursor = 2, .channel = 0, .text = b, .len = KB_FRAMES_MIN },
        { .record_id = "prc/x", .cursor = 0, .channel = 0, .text = b, .len = KB_FRAMES_MIN },
    };
    int fds = kb_test_count_fds();
    CHECK(kb_db_begin(db) == 0);
    for (size_t i = 0; i < 4; i++)
        CHECK(kb_db_frame_put(db, &rows[i]) == 0);
    CHECK(kb_test_count_fds() == fds + 1); /* the file appended to, while the batch lasts */
    CHECK(kb_db_commit(db) == 0);
    CHECK(kb_test_count_fds() == fds); /* none held between transactions */
    /* the two large ones of prc_f in its file, one after the other; the
       small one in its row; an id that is not a file name keeps its text
       in the row */
    CHECK(s_size("files.db-frames/prc_f") == (long long)(big + KB_FRAMES_MIN));
    CHECK(s_size("files.db") < (long long)KB_FRAMES_MIN + 64 * 1024);
    s_texts_seen_t seen = { .want = { a, "small", b } };
    CHECK(kb_db_frame_each(db, "prc_f", s_on_text, &seen) == 0);
    CHECK(seen.count == 3 && seen.lens[0] == big && seen.lens[1] == 5);
    CHECK(seen.lens[2] == KB_FRAMES_MIN && seen.same[0] && seen.same[1] && seen.same[2]);
    CHECK(seen.lost[0] == 0 && seen.lost[2] == 0);
    memset(&seen, 0, sizeof seen);
    seen.want[0] = b;
    CHECK(kb_db_frame_each(db, "prc/x", s_on_text, &seen) == 0);
    CHECK(seen.count == 1 && seen.lens[0] == KB_FRAMES_MIN && seen.same[0]);

    /* a write that fails (over RLIMIT_FSIZE: what a full disk does to a
       write) fails the put, names the file, and leaves the file as it was */
    struct rlimit was;
    getrlimit(RLIMIT_FSIZE, &was);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit small
        = { .rlim_cur = (rlim_t)(big + KB_FRAMES_MIN + 1000), .rlim_max = was.rlim_max };
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    CHECK(kb_db_begin(db) == 0);
    kb_db_frame_t more = { .record_id = "prc_f", .cursor = 3, .text = a, .len = big };
    CHECK(kb_db_frame_put(db, &more) == -1);
    CHECK(strstr(kb_db_error(db), "files.db-frames/prc_f") != NULL);
    CHECK(strstr(kb_db_error(db), "too large") != NULL);
    CHECK(kb_db_rollback(db) == 0);
    CHECK(setrlimit(RLIMIT_FSIZE, &was) == 0);
    signal(SIGXFSZ, SIG_DFL);
    CHECK(s_size("files.db-frames/prc_f") == (long long)(big + KB_FRAMES_MIN));

    /* a delete rolled back keeps the file; committed, the file goes */
    CHECK(kb_db_begin(db) == 0);
    CHECK(kb_db_record_delete(db, "prc_f") == 0);
    CHECK(s_size("files.db-frames/prc_f") > 0); /* not before the commit */
    CHECK(kb_db_rollback(db) == 0);
    memset(&seen, 0, sizeof seen);
    CHECK(kb_db_frame_each(db, "prc_f", s_on_text, &seen) == 0 && seen.count == 3);
    CHECK(s_size("files.db-frames/prc_f") == (long long)(big + KB_FRAMES_MIN));

    /* a file cut short (its end lost with the machine): what it has, and
       how much it lacks */
    char *path = s_path("files.db-frames/prc_f");
    CHECK(truncate(path, (off_t)(big - 100)) == 0);
    memset(&seen, 0, sizeof seen);
    seen.want[0] = a;
    CHECK(kb_db_frame_each(db, "prc_f", s_on_text, &seen) == 0 && seen.count == 3);
    CHECK(seen.lens[0] == big - 100 && seen.lost[0] == 100 && seen.same[0]);
    CHECK(seen.lens[2] == 0 && seen.lost[2] == KB_FRAMES_MIN);
    CHECK(kb_db_record_delete(db, "prc_f") == 0); /* outside a transaction: at once */
    CHECK(access(path, F_OK) == -1 && errno == ENOENT);

    /* files no row points to (a crash between a frame's text and its row)
       go at the next open; a file a row points to stays */
    kb_db_frame_t kept = { .record_id = "prc_k", .cursor = 0, .text = b, .len = KB_FRAMES_MIN };
    CHECK(kb_db_frame_put(db, &kept) == 0);
    kb_db_close(&db);
    char *orphan = s_path("files.db-frames/prc_orphan");
    int fd = open(orphan, O_WRONLY | O_CREAT, 0600);
    CHECK(fd >= 0 && write(fd, "x", 1) == 1);
    close(fd);
    db = s_open("files.db");
    CHECK(db != NULL);
    CHECK(access(orphan, F_OK) == -1 && errno == ENOENT);
    CHECK(s_size("files.db-frames/prc_k") == (long long)KB_FRAMES_MIN);
    struct stat st;
    char *dir = s_path("files.db-frames");
    CHECK(stat(dir, &st) == 0 && (st.st_mode & 0777) == 0700);
    char *kept_path = s_path("files.db-frames/prc_k");
    CHECK(stat(kept_path, &st) == 0 && (st.st_mode & 0777) == 0600);
    free(kept_path);
    kb_db_close(&db);
    free(dir);
    free(orphan);
    free(path);
    free(a);
    free(b);
}

static void test_transactions_and_meta(void)
{
    kb_db_t *db = s_open("tx.db");
    CHECK(db != NULL);
    if (!db)
        return;
    CHECK(kb_db_rollback(db) == 0); /* nothing open: nothing done */
    CHECK(kb_db_begin(db) == 0);
    CHECK(kb_db_begin(db) == -1);
    CHECK(strstr(kb_db_error(db), "open already") != NULL);
    CHECK(kb_db_meta_set(db, "k", "discarded") == 0);
    CHECK(kb_db_rollback(db) == 0);
    char *value = (char *)"unset";
    CHECK(kb_db_meta_read(db, "k", &value) == 0);
    CHECK(value == NULL);
    CHECK(kb_db_meta_get(db, "k") == NULL);

    CHECK(kb_db_begin(db) == 0);
    CHECK(kb_db_meta_set(db, "k", "kept") == 0);
    CHECK(kb_db_meta_set(db, "other", "1") == 0);
    CHECK(kb_db_commit(db) == 0);
    value = kb_db_meta_get(db, "k");
    CHECK_STR(value, "kept");
    free(value);
    CHECK(kb_db_meta_set(db, "k", "replaced") == 0);
    value = kb_db_meta_get(db, "k");
    CHECK_STR(value, "replaced");
    free(value);
    CHECK(kb_db_meta_set(db, "k", NULL) == 0); /* deletes */
    CHECK(kb_db_meta_get(db, "k") == NULL);
    kb_db_close(&db);

    /* what was committed is there after a reopen; the file is 0600 */
    db = s_open("tx.db");
    CHECK(db != NULL);
    value = db ? kb_db_meta_get(db, "other") : NULL;
    CHECK_STR(value, "1");
    free(value);
    char *path = s_path("tx.db");
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK_STR(db ? kb_db_path(db) : NULL, path);
    free(path);
    kb_db_close(&db);

    /* an existing file of a looser mode is made 0600 once it proved usable */
    path = s_path("tx.db");
    chmod(path, 0644);
    db = s_open("tx.db");
    CHECK(db != NULL);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    kb_db_close(&db);
    free(path);
}

/* ---- the schema -------------------------------------------------------------------- */

static char *s_read_file(const char *path, size_t *len)
{
    FILE *file = fopen(path, "rb");
    if (!file)
        return NULL;
    fseek(file, 0, SEEK_END);
    long size = ftell(file);
    fseek(file, 0, SEEK_SET);
    char *data = malloc((size_t)size + 1);
    *len = fread(data, 1, (size_t)size, file);
    fclose(file);
    return data;
}

/*  Make a file with sqlite3 itself (the last connection closed, so the
    WAL is checkpointed into it). */
static void s_make(const char *name, const char *sql)
{
    char *path = s_path(name);
    sqlite3 *conn = NULL;
    CHECK(sqlite3_open(path, &conn) == SQLITE_OK);
    char *message = NULL;
    CHECK(sqlite3_exec(conn, sql, NULL, NULL, &message) == SQLITE_OK);
    if (message)
        fprintf(stderr, "%s\n", message);
    sqlite3_free(message);
    sqlite3_close(conn);
    free(path);
}

/*  Opening name is refused with err holding every one of needles, and the
    file is byte for byte what it was. */
static void s_refused(const char *name, const char *needle1, const char *needle2)
{
    char *path = s_path(name);
    size_t before_len = 0, after_len = 0;
    char *before = s_read_file(path, &before_len);
    kb_error_t err = { 0 };
    kb_db_t *db = kb_db_open(path, &err);
    CHECK(db == NULL);
    kb_db_close(&db);
    fprintf(stderr, "refused %s: %s\n", name, err.message);
    CHECK(strstr(err.message, path) != NULL);
    CHECK(strstr(err.message, needle1) != NULL);
    CHECK(!needle2 || strstr(err.message, needle2) != NULL);
    char *after = s_read_file(path, &after_len);
    CHECK(before && after && before_len == after_len && memcmp(before, after, before_len) == 0);
    free(before);
    free(after);
    free(path);
}

static int s_count_contexts(const kb_db_context_t *row, void *arg)
{
    (*(int *)arg)++;
    return strcmp(row->id, "old") == 0 && row->extra == NULL ? 0 : -5;
}

static void test_schema(void)
{
    /* version 1, as that step left it, with a row */
    s_make("v1.db",
           "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
           "CREATE TABLE contexts (id TEXT PRIMARY KEY, kind TEXT NOT NULL, language TEXT,"
           " kernel_name TEXT, cwd TEXT, env_names TEXT, connection TEXT, connection_file TEXT,"
           " log_file TEXT, pid INTEGER, pid_start INTEGER, pgid INTEGER, execution_count "
           "INTEGER, generation INTEGER, created_at REAL, last_activity_at REAL);"
           "CREATE TABLE records (id TEXT PRIMARY KEY, context_id TEXT, language TEXT,"
           " running INTEGER, submitted_at REAL, ended_at REAL, result TEXT, reason TEXT,"
           " exit_code INTEGER, signal TEXT, raw_reason TEXT, view_stdout INTEGER,"
           " view_stderr INTEGER, seq INTEGER);"
           "CREATE TABLE frames (record_id TEXT NOT NULL, cursor INTEGER NOT NULL, channel "
           "INTEGER, timestamp REAL, date TEXT, text BLOB, PRIMARY KEY (record_id, cursor)) "
           "WITHOUT ROWID;"
           "INSERT INTO contexts (id, kind, pid) VALUES ('old', 'context', 77);"
           "INSERT INTO frames VALUES ('prc_old', 1, 0, 1.5, '', x'6f6b0a');"
           "INSERT INTO frames VALUES ('prc_old', 0, 1, 1.0, 'd', x'');"
           "PRAGMA user_version = 1;");
    kb_db_t *db = s_open("v1.db");
    CHECK(db != NULL);
    if (db) {
        CHECK(kb_db_schema_version(db) == KB_DB_SCHEMA_VERSION);
        int count = 0;
        CHECK(kb_db_context_each(db, s_count_contexts, &count) == 0);
        CHECK(count == 1);
        kb_db_context_t row = { .id = "new", .kind = "pool", .extra = "{}" };
        CHECK(kb_db_context_put(db, &row) == 0); /* the column step 2 added */
        s_frames_seen_t fs = { 0 };              /* step 3 moved the frames */
        CHECK(kb_db_frame_each(db, "prc_old", s_on_frame, &fs) == 0);
        CHECK(fs.count == 2 && fs.cursors[0] == 0 && fs.cursors[1] == 1);
        CHECK(fs.lens[0] == 0 && fs.lens[1] == 3 && fs.channels[0] == 1);
        kb_db_frame_t again = { .record_id = "prc_old", .cursor = 1, .text = "new", .len = 3 };
        CHECK(kb_db_frame_put(db, &again) == 0); /* replaced: (record_id, cursor) stays a key */
        memset(&fs, 0, sizeof fs);
        CHECK(kb_db_frame_each(db, "prc_old", s_on_frame, &fs) == 0);
        CHECK(fs.count == 2);
        kb_db_close(&db);
    }

    s_make("newer.db", "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
                       "PRAGMA user_version = 99;");
    s_refused("newer.db", "99", "newer");
    s_make("foreign.db", "CREATE TABLE songs (title TEXT);");
    s_refused("foreign.db", "something else", NULL);

    char *path = s_path("garbage.db");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char junk[8192];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (char)(i * 131 + 7);
    CHECK(write(fd, junk, sizeof junk) == (ssize_t)sizeof junk);
    close(fd);
    free(path);
    s_refused("garbage.db", "garbage.db", NULL);

    /* a path that cannot be made */
    kb_error_t err = { 0 };
    CHECK(kb_db_open("/nonexistent-dir/state.db", &err) == NULL);
    CHECK(strstr(err.message, "/nonexistent-dir/state.db") != NULL);
}

/* ---- the state dir ---------------------------------------------------------------------- */

static void test_statedir_default(void)
{
    char *dir = kb_statedir_default_for(0, "/x/state", "/root");
    CHECK_STR(dir, "/var/lib/kernelbridge");
    free(dir);
    dir = kb_statedir_default_for(1000, "/x/state", "/home/u");
    CHECK_STR(dir, "/x/state/kernelbridge");
    free(dir);
    dir = kb_statedir_default_for(1000, "relative/state", "/home/u");
    CHECK_STR(dir, "/home/u/.local/state/kernelbridge");
    free(dir);
    dir = kb_statedir_default_for(1000, "", "/home/u");
    CHECK_STR(dir, "/home/u/.local/state/kernelbridge");
    free(dir);
    /* no usable HOME: the passwd entry's (root's exists on every machine) */
    dir = kb_statedir_default_for(geteuid() == 0 ? 0 : geteuid(), NULL, "relative");
    CHECK(dir != NULL && dir[0] == '/');
    free(dir);
    dir = kb_statedir_default();
    CHECK(dir != NULL && dir[0] == '/' && strstr(dir, "kernelbridge") != NULL);
    free(dir);
}

static void test_statedir_prepare(void)
{
    kb_error_t err = { 0 };
    char *nested = s_path("a/b/c");
    CHECK(kb_statedir_prepare(nested, &err) == 0);
    struct stat st;
    CHECK(stat(nested, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0700);
    char *parent = s_path("a/b");
    CHECK(stat(parent, &st) == 0 && (st.st_mode & 0777) == 0700);
    free(parent);
    chmod(nested, 0755);
    CHECK(kb_statedir_prepare(nested, &err) == 0); /* made private again */
    CHECK(stat(nested, &st) == 0 && (st.st_mode & 07777) == 0700);

    char *link = s_path("link");
    CHECK(symlink(nested, link) == 0);
    CHECK(kb_statedir_prepare(link, &err) == -1);
    CHECK(strstr(err.message, link) != NULL && strstr(err.message, "symbolic link") != NULL);
    char *file = s_path("file");
    int fd = open(file, O_WRONLY | O_CREAT, 0600);
    close(fd);
    CHECK(kb_statedir_prepare(file, &err) == -1);
    CHECK(strstr(err.message, "not a directory") != NULL);
    char *under = s_path("file/sub");
    CHECK(kb_statedir_prepare(under, &err) == -1);
    free(under);
    free(link);
    free(file);
    free(nested);
}

static void test_statedir_lock(void)
{
    kb_error_t err = { 0 };
    char *dir = s_path("locked");
    CHECK(kb_statedir_prepare(dir, &err) == 0);
    int fd = -1, second = -1;
    CHECK(kb_statedir_lock(dir, &fd, &err) == 0);
    CHECK(fd >= 0);
    /* another open file description is another holder, in this process too */
    CHECK(kb_statedir_lock(dir, &second, &err) == -1);
    CHECK(second == -1);
    char pid[32];
    snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
    CHECK(strstr(err.message, "in use") != NULL && strstr(err.message, pid) != NULL
          && strstr(err.message, dir) != NULL);
    char *lock = s_path("locked/lock");
    size_t len = 0;
    char *text = s_read_file(lock, &len);
    CHECK(text && (size_t)atol(text) == (size_t)getpid());
    free(text);
    struct stat st;
    CHECK(stat(lock, &st) == 0 && (st.st_mode & 0777) == 0600);
    kb_statedir_unlock(&fd);
    CHECK(fd == -1);
    kb_statedir_unlock(&fd);
    CHECK(kb_statedir_lock(dir, &second, &err) == 0);
    kb_statedir_unlock(&second);
    CHECK(access(lock, F_OK) == 0); /* the file stays */
    free(lock);
    free(dir);
}

int main(void)
{
    tmp = kb_test_tmpdir();
    int fds = kb_test_count_fds();
    RUN_TEST(test_contexts);
    RUN_TEST(test_nested_walk);
    RUN_TEST(test_records_and_frames);
    RUN_TEST(test_large_frames_in_files);
    RUN_TEST(test_transactions_and_meta);
    RUN_TEST(test_schema);
    RUN_TEST(test_statedir_default);
    RUN_TEST(test_statedir_prepare);
    RUN_TEST(test_statedir_lock);
    CHECK(kb_test_count_fds() == fds); /* every database and lock closed */
    kb_test_rmtree(tmp);
    free(tmp);
    return kb_test_summary();
}
