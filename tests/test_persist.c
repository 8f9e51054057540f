/*  test_persist.c - the state writer (kb_persist) on a real loop, a real
    thread and a real state.db: what a collector holds waits for the hold's
    end (KB_PERSIST_HOLD_MS) and goes as one batch, written once however
    many turns changed it; a collector's write that may not wait, and a
    row the service queues itself, go at the end of their turn and take
    what is held with them; a record's delete waits with the records;
    kb_persist_sync writes what is held; /health's held and behind say
    where the writes are. */
#include "kb_testutil.h"
#include "service/durable/kb_persist.h"
#include "state/kb_db.h"

#include <time.h>
#include <unistd.h>

static char *tmp;

/*  A part of the service with rows to write: `dirty` changes, written as
    meta rows key0.. when the batch goes, or at once when at_once. */
typedef struct s_bench s_bench_t;
struct s_bench {
    kb_loop_t *loop;
    kb_persist_t *persist;
    int dirty;
    bool at_once;
    int flushes;      /* collections that queued */
    kb_timer_t act;   /* at 0 ms: what the test does in a turn */
    kb_timer_t again; /* at 2 ms: another turn's change */
    kb_timer_t look;  /* at 8 ms (before the hold's end): what is seen */
    kb_timer_t stop;  /* well after the hold's end */
    void (*action)(s_bench_t *b);
    bool change_again;
    json_t *seen; /* kb_persist_json at 8 ms */
};

static void s_collect(kb_persist_t *persist, void *arg)
{
    s_bench_t *b = arg;
    if (b->dirty == 0)
        return;
    if (!b->at_once && kb_persist_may_wait(persist, true))
        return;
    for (int i = 0; i < b->dirty; i++) {
        char key[16];
        snprintf(key, sizeof key, "key%d", i);
        kb_persist_meta(persist, key, "v");
    }
    b->dirty = 0;
    b->at_once = false;
    b->flushes++;
}

static void s_change(s_bench_t *b, bool at_once)
{
    b->dirty++;
    b->at_once = b->at_once || at_once;
    kb_persist_touch(b->persist);
}

static void s_on_act(kb_timer_t *timer, void *arg)
{
    (void)timer;
    s_bench_t *b = arg;
    b->action(b);
}

static void s_on_again(kb_timer_t *timer, void *arg)
{
    (void)timer;
    s_change(arg, false);
}

static void s_on_look(kb_timer_t *timer, void *arg)
{
    (void)timer;
    s_bench_t *b = arg;
    b->seen = kb_persist_json(b->persist);
}

static void s_on_stop(kb_timer_t *timer, void *arg)
{
    (void)timer;
    s_bench_t *b = arg;
    kb_loop_stop(b->loop);
}

static json_int_t s_int(const json_t *json, const char *key)
{
    return json_integer_value(json_object_get(json, key));
}

static bool s_held(const json_t *json)
{
    return json_is_true(json_object_get(json, "held"));
}

/*  The writer has written all it was handed (5 s at most); its counters. */
static json_t *s_settled(s_bench_t *b)
{
    for (int i = 0; i < 5000; i++) {
        json_t *json = kb_persist_json(b->persist);
        if (s_int(json, "behind") == 0)
            return json;
        json_decref(json);
        usleep(1000);
    }
    return kb_persist_json(b->persist);
}

static char *s_db_path(const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s.db", tmp, name);
    return path;
}

static void s_bench_init(s_bench_t *b, const char *name, void (*action)(s_bench_t *))
{
    *b = (s_bench_t){ .action = action };
    kb_error_t err = { 0 };
    kb_db_t *db = kb_db_open(s_db_path(name), &err);
    CHECK(db != NULL);
    b->loop = kb_loop_new();
    b->persist = kb_persist_new(db, b->loop);
    CHECK(b->persist != NULL);
    kb_persist_add_collector(b->persist, s_collect, b);
    kb_timer_init(&b->act);
    kb_timer_init(&b->again);
    kb_timer_init(&b->look);
    kb_timer_init(&b->stop);
}

/*  Run the loop: the action at 0 ms, another change at 2 ms when asked,
    a look at 8 ms, the end at 20 ms past the hold's. */
static void s_bench_run(s_bench_t *b)
{
    kb_timer_start(b->loop, &b->act, 0, 0, s_on_act, b);
    if (b->change_again)
        kb_timer_start(b->loop, &b->again, 2, 0, s_on_again, b);
    kb_timer_start(b->loop, &b->look, 8, 0, s_on_look, b);
    kb_timer_start(b->loop, &b->stop, KB_PERSIST_HOLD_MS + 20, 0, s_on_stop, b);
    CHECK(kb_loop_run(b->loop) == 0);
}

static void s_bench_fini(s_bench_t *b)
{
    kb_persist_destroy(&b->persist);
    kb_timer_stop(&b->act);
    kb_timer_stop(&b->again);
    kb_timer_stop(&b->look);
    kb_timer_stop(&b->stop);
    kb_loop_destroy(&b->loop);
    json_decref(b->seen);
}

/*  What was seen at 8 ms (held for the hold's end, or handed over at the
    turn's end), then one batch of `rows` rows once the writer settled. */
static void s_check(s_bench_t *b, bool held, json_int_t rows)
{
    CHECK(b->seen && s_held(b->seen) == held);
    if (held)
        CHECK(b->seen && s_int(b->seen, "batches") == 0 && s_int(b->seen, "behind") == 0);
    else
        CHECK(b->seen && s_int(b->seen, "batches") + s_int(b->seen, "behind") == 1);
    json_t *end = s_settled(b);
    CHECK(!s_held(end));
    CHECK(s_int(end, "batches") == 1 && s_int(end, "rows") == rows);
    json_decref(end);
}

static char *s_meta(const char *name, const char *key)
{
    kb_error_t err = { 0 };
    kb_db_t *db = kb_db_open(s_db_path(name), &err);
    char *value = db ? kb_db_meta_get(db, key) : NULL;
    kb_db_close(&db);
    return value;
}

/* ---- the tests ------------------------------------------------------------------------ */

static void s_change_held(s_bench_t *b)
{
    s_change(b, false);
}

/*  Changes of two turns that may wait are still held at 8 ms, nothing
    handed over; at the hold's end they go as one batch. */
static void test_held_changes_go_together_at_the_holds_end(void)
{
    s_bench_t b;
    s_bench_init(&b, "held", s_change_held);
    b.change_again = true;
    s_bench_run(&b);
    s_check(&b, true, 2); /* both changes, copied once, at the hold's end */
    CHECK(b.flushes == 1);
    s_bench_fini(&b);
    char *value = s_meta("held", "key1");
    CHECK_STR(value, "v");
    free(value);
}

static void s_change_at_once(s_bench_t *b)
{
    s_change(b, false);
    s_change(b, true);
}

/*  A change that may not wait goes at the end of its turn, with what the
    same collector held: handed over before 8 ms, nothing left held. */
static void test_a_change_that_may_not_wait_goes_at_the_turns_end(void)
{
    s_bench_t b;
    s_bench_init(&b, "at_once", s_change_at_once);
    s_bench_run(&b);
    s_check(&b, false, 2);
    s_bench_fini(&b);
}

static void s_delete_and_change(s_bench_t *b)
{
    kb_persist_record_delete(b->persist, "r-1");
    s_change(b, false);
}

/*  A record's delete, queued by the service itself, waits with the held
    changes; they go together at the hold's end. */
static void test_a_records_delete_waits_with_the_records(void)
{
    s_bench_t b;
    s_bench_init(&b, "delete", s_delete_and_change);
    s_bench_run(&b);
    s_check(&b, true, 2);
    s_bench_fini(&b);
}

static void s_context_and_change(s_bench_t *b)
{
    s_change(b, false);
    kb_persist_context_put(b->persist, &(kb_db_context_t){ .id = "c-1", .kind = "context" });
}

/*  A context's row queued by the service goes at the end of its turn and
    takes the collector's held change with it (kb_persist_may_wait says no). */
static void test_a_row_the_service_queues_takes_what_is_held(void)
{
    s_bench_t b;
    s_bench_init(&b, "context", s_context_and_change);
    s_bench_run(&b);
    s_check(&b, false, 2);
    CHECK(b.flushes == 1);
    s_bench_fini(&b);
}

/*  kb_persist_sync, with no turn ended (as at shutdown): what the
    collector has is collected and written, and waited for. */
static void test_sync_writes_what_is_held(void)
{
    s_bench_t b;
    s_bench_init(&b, "sync", s_change_held);
    s_change(&b, false);
    kb_persist_sync(b.persist);
    json_t *end = kb_persist_json(b.persist);
    CHECK(!s_held(end) && s_int(end, "behind") == 0);
    CHECK(s_int(end, "batches") == 1 && s_int(end, "rows") == 1);
    json_decref(end);
    kb_loop_flush(b.loop); /* the end of the turn deferred by the change: nothing left */
    s_bench_fini(&b);
    char *value = s_meta("sync", "key0");
    CHECK_STR(value, "v");
    free(value);
}

int main(void)
{
    tmp = kb_test_tmpdir();
    int fds = kb_test_count_fds();
    RUN_TEST(test_held_changes_go_together_at_the_holds_end);
    RUN_TEST(test_a_change_that_may_not_wait_goes_at_the_turns_end);
    RUN_TEST(test_a_records_delete_waits_with_the_records);
    RUN_TEST(test_a_row_the_service_queues_takes_what_is_held);
    RUN_TEST(test_sync_writes_what_is_held);
    CHECK(kb_test_count_fds() == fds); /* every database, loop and thread closed */
    kb_test_rmtree(tmp);
    free(tmp);
    return kb_test_summary();
}
