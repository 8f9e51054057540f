/*  kb_persist.c - the state database's writer: a batch of copied rows per
    loop turn, handed to a thread that writes each batch (or all the
    batches waiting) in one transaction. See kb_persist.h.
*/
#include "service/durable/kb_persist.h"

#include <czmq.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "util/kb_buf.h"

#define KB_PERSIST_COLLECTORS 4

typedef enum {
    KB_OP_META,
    KB_OP_CONTEXT_PUT,
    KB_OP_CONTEXT_DELETE,
    KB_OP_RECORD_PUT,
    KB_OP_RECORD_DELETE,
    KB_OP_FRAMES,
} kb_op_kind_t;

/*  One queued write; its strings are its own. */
typedef struct kb_op {
    struct kb_op *next;
    kb_op_kind_t kind;
    char *key, *value; /* meta; the id of a delete or of frames */
    kb_db_context_t context;
    kb_db_record_t record;
    kb_runlog_t *log;
    long long from, to;
} kb_op_t;

typedef struct {
    kb_op_t *head, *tail;
} kb_batch_t;

struct kb_persist {
    kb_db_t *db;
    kb_loop_t *loop;
    bool scheduled;  /* the end-of-turn call is deferred */
    bool collecting; /* the collectors run: what they queue goes in this batch */
    bool flushing;   /* ... and the batch goes to the writer now: nothing may wait */
    bool held;       /* the collector running holds writes back (kb_persist_may_wait) */
    bool waiting;    /* a collector holds writes back for the next batch */
    bool urgent;     /* something queued was not held: hand over at the turn's end */
    size_t queued;   /* ops queued so far (to see which collector queued) */
    kb_timer_t hold; /* the end of a hold: the turns held go to the writer */
    struct {
        kb_persist_collect_fn *fn;
        void *arg;
    } collectors[KB_PERSIST_COLLECTORS];
    int ncollectors;
    kb_batch_t turn; /* this turn's writes (engine thread) */

    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* the writer: work, or stop */
    pthread_cond_t done; /* the engine: a batch was written */
    kb_batch_t pending;  /* handed over, not written yet */
    kb_batch_t writing;  /* being written; its ops' logs are touched under lock */
    unsigned long long handed, written;
    bool stopping;

    /* counters (under lock) */
    unsigned long long batches, rows, failed;
    char last_error[256];
};

/* ---- ops ------------------------------------------------------------------------ */

static char *s_dup(const char *text)
{
    return text ? strdup(text) : NULL;
}

static void s_op_free(kb_op_t *op)
{
    free(op->key);
    free(op->value);
    kb_db_context_t *c = &op->context;
    free((char *)c->id);
    free((char *)c->kind);
    free((char *)c->language);
    free((char *)c->kernel_name);
    free((char *)c->cwd);
    free((char *)c->env_names);
    free((char *)c->connection);
    free((char *)c->connection_file);
    free((char *)c->log_file);
    free((char *)c->extra);
    kb_db_record_t *r = &op->record;
    free((char *)r->id);
    free((char *)r->context_id);
    free((char *)r->language);
    free((char *)r->result);
    free((char *)r->reason);
    free((char *)r->signal);
    free((char *)r->raw_reason);
    kb_runlog_unref(&op->log);
    free(op);
}

static void s_batch_free(kb_batch_t *batch)
{
    kb_op_t *op = batch->head;
    while (op) {
        kb_op_t *next = op->next;
        s_op_free(op);
        op = next;
    }
    batch->head = batch->tail = NULL;
}

static void s_batch_add(kb_batch_t *batch, kb_op_t *op)
{
    if (batch->tail)
        batch->tail->next = op;
    else
        batch->head = op;
    batch->tail = op;
}

static void s_count_failure(kb_persist_t *self, const char *what, const char *why)
{
    pthread_mutex_lock(&self->lock);
    self->failed++;
    snprintf(self->last_error, sizeof self->last_error, "%s: %s", what, why);
    pthread_mutex_unlock(&self->lock);
}

/*  A new op of kind for this turn, or NULL (out of memory: counted). */
static kb_op_t *s_op(kb_persist_t *self, kb_op_kind_t kind)
{
    kb_op_t *op = calloc(1, sizeof *op);
    if (!op) {
        s_count_failure(self, "queueing a write", "out of memory");
        return NULL;
    }
    op->kind = kind;
    kb_persist_touch(self);
    return op;
}

/*  Queue op, unless a copy of one of its strings failed. Queued by the
    service itself (not a collector) it goes at the end of the turn, unless
    it may wait for the next batch. */
static void s_add(kb_persist_t *self, kb_op_t *op, bool copied, bool may_wait)
{
    if (!copied) {
        s_count_failure(self, "queueing a write", "out of memory");
        s_op_free(op);
        return;
    }
    s_batch_add(&self->turn, op);
    self->queued++;
    if (!self->collecting && !may_wait)
        self->urgent = true;
}

static void s_queue(kb_persist_t *self, kb_op_t *op, bool copied)
{
    s_add(self, op, copied, false);
}

/*  Both NULL or both set: a string was copied if it was given. */
#define KB_COPIED(copy, given) (!(given) || (copy))

void kb_persist_meta(kb_persist_t *self, const char *key, const char *value)
{
    kb_op_t *op = s_op(self, KB_OP_META);
    if (!op)
        return;
    op->key = s_dup(key);
    op->value = s_dup(value);
    s_queue(self, op, op->key && KB_COPIED(op->value, value));
}

void kb_persist_context_put(kb_persist_t *self, const kb_db_context_t *row)
{
    kb_op_t *op = s_op(self, KB_OP_CONTEXT_PUT);
    if (!op)
        return;
    kb_db_context_t *c = &op->context;
    *c = *row;
    c->id = s_dup(row->id);
    c->kind = s_dup(row->kind);
    c->language = s_dup(row->language);
    c->kernel_name = s_dup(row->kernel_name);
    c->cwd = s_dup(row->cwd);
    c->env_names = s_dup(row->env_names);
    c->connection = s_dup(row->connection);
    c->connection_file = s_dup(row->connection_file);
    c->log_file = s_dup(row->log_file);
    c->extra = s_dup(row->extra);
    bool copied = c->id && KB_COPIED(c->kind, row->kind) && KB_COPIED(c->language, row->language)
                  && KB_COPIED(c->kernel_name, row->kernel_name) && KB_COPIED(c->cwd, row->cwd)
                  && KB_COPIED(c->env_names, row->env_names)
                  && KB_COPIED(c->connection, row->connection)
                  && KB_COPIED(c->connection_file, row->connection_file)
                  && KB_COPIED(c->log_file, row->log_file) && KB_COPIED(c->extra, row->extra);
    s_queue(self, op, copied);
}

static void s_delete(kb_persist_t *self, kb_op_kind_t kind, const char *id, bool may_wait)
{
    kb_op_t *op = s_op(self, kind);
    if (!op)
        return;
    op->key = s_dup(id);
    s_add(self, op, op->key != NULL, may_wait);
}

void kb_persist_context_delete(kb_persist_t *self, const char *id)
{
    s_delete(self, KB_OP_CONTEXT_DELETE, id, false);
}

void kb_persist_record_put(kb_persist_t *self, const kb_db_record_t *row)
{
    kb_op_t *op = s_op(self, KB_OP_RECORD_PUT);
    if (!op)
        return;
    kb_db_record_t *r = &op->record;
    *r = *row;
    r->id = s_dup(row->id);
    r->context_id = s_dup(row->context_id);
    r->language = s_dup(row->language);
    r->result = s_dup(row->result);
    r->reason = s_dup(row->reason);
    r->signal = s_dup(row->signal);
    r->raw_reason = s_dup(row->raw_reason);
    bool copied = r->id && KB_COPIED(r->context_id, row->context_id)
                  && KB_COPIED(r->language, row->language) && KB_COPIED(r->result, row->result)
                  && KB_COPIED(r->reason, row->reason) && KB_COPIED(r->signal, row->signal)
                  && KB_COPIED(r->raw_reason, row->raw_reason);
    s_queue(self, op, copied);
}

/*  The frames of a record that goes need not be written: their output is
    let go now (it may be what a running run needs room for). */
static void s_drop_frames(kb_batch_t *batch, const char *id)
{
    for (kb_op_t *op = batch->head; op; op = op->next)
        if (op->kind == KB_OP_FRAMES && op->log && strcmp(op->key, id) == 0)
            kb_runlog_unref(&op->log);
}

void kb_persist_record_delete(kb_persist_t *self, const char *id)
{
    s_drop_frames(&self->turn, id);
    pthread_mutex_lock(&self->lock);
    s_drop_frames(&self->pending, id);
    s_drop_frames(&self->writing, id); /* a frame being copied holds the lock */
    pthread_mutex_unlock(&self->lock);
    /*  It waits with the records (retention deletes one after every run
        once the store is full): a crash that loses it leaves a record that
        retention takes again. */
    s_delete(self, KB_OP_RECORD_DELETE, id, true);
}

void kb_persist_frames(kb_persist_t *self, const char *id, kb_runlog_t *log, long long from,
                       long long to)
{
    if (from >= to)
        return;
    kb_op_t *op = s_op(self, KB_OP_FRAMES);
    if (!op)
        return;
    op->key = s_dup(id);
    op->log = kb_runlog_ref(log);
    op->from = from;
    op->to = to;
    s_queue(self, op, op->key != NULL);
}

/* ---- the writer ------------------------------------------------------------------- */

/*  One op into the database; rows written, or -1. */
static long long s_write(kb_persist_t *self, kb_op_t *op, kb_buf_t *text)
{
    switch (op->kind) {
        case KB_OP_META:
            return kb_db_meta_set(self->db, op->key, op->value) == 0 ? 1 : -1;
        case KB_OP_CONTEXT_PUT:
            return kb_db_context_put(self->db, &op->context) == 0 ? 1 : -1;
        case KB_OP_CONTEXT_DELETE:
            return kb_db_context_delete(self->db, op->key) == 0 ? 1 : -1;
        case KB_OP_RECORD_PUT:
            return kb_db_record_put(self->db, &op->record) == 0 ? 1 : -1;
        case KB_OP_RECORD_DELETE:
            return kb_db_record_delete(self->db, op->key) == 0 ? 1 : -1;
        case KB_OP_FRAMES:
            for (long long cursor = op->from; cursor < op->to; cursor++) {
                kb_runlog_frame_t frame;
                /* one frame at a time under the lock: the engine may take the
                   output away between two (its record went, s_drop_frames) */
                pthread_mutex_lock(&self->lock);
                int copied = op->log ? kb_runlog_frame_copy(op->log, cursor, &frame, text) : 1;
                pthread_mutex_unlock(&self->lock);
                if (copied > 0)
                    break;
                if (copied != 0)
                    continue; /* dropped from the output since (over its cap): not kept */
                kb_db_frame_t row = { .record_id = op->key,
                                      .cursor = cursor,
                                      .channel = (int)frame.channel,
                                      .timestamp = frame.timestamp,
                                      .date = frame.date,
                                      .text = kb_buf_cstr(text),
                                      .len = text->len };
                if (kb_db_frame_put(self->db, &row) != 0)
                    return -1;
            }
            return op->to - op->from;
    }
    return -1;
}

/*  Write a batch in one transaction. */
static void s_write_batch(kb_persist_t *self, kb_batch_t *batch)
{
    kb_buf_t text;
    kb_buf_init(&text, 0);
    long long rows = 0;
    const char *failed = NULL;
    if (kb_db_begin(self->db) != 0)
        failed = "begin";
    for (kb_op_t *op = batch->head; op && !failed; op = op->next) {
        long long n = s_write(self, op, &text);
        pthread_mutex_lock(&self->lock);
        kb_runlog_unref(&op->log); /* let go as soon as it is copied, not with the batch */
        pthread_mutex_unlock(&self->lock);
        if (n < 0)
            failed = "write";
        else
            rows += n;
    }
    if (!failed && kb_db_commit(self->db) != 0)
        failed = "commit";
    if (failed) {
        char why[200];
        snprintf(why, sizeof why, "%s", kb_db_error(self->db));
        kb_db_rollback(self->db);
        s_count_failure(self, failed, why);
        zsys_warning("state: a batch of writes was lost (%s: %s)", failed, why);
    }
    kb_buf_free(&text);
    pthread_mutex_lock(&self->lock);
    self->batches++;
    if (!failed)
        self->rows += (unsigned long long)rows;
    pthread_mutex_unlock(&self->lock);
}

static void *s_writer(void *arg)
{
    kb_persist_t *self = arg;
    prctl(PR_SET_NAME, "kb-persist"); /* apart from the engine in top, schedstat, the bench */
    pthread_mutex_lock(&self->lock);
    for (;;) {
        while (!self->pending.head && !self->stopping)
            pthread_cond_wait(&self->wake, &self->lock);
        if (!self->pending.head)
            break;                     /* stopping, and everything is written */
        self->writing = self->pending; /* still in reach of s_drop_frames */
        unsigned long long upto = self->handed;
        self->pending.head = self->pending.tail = NULL;
        pthread_mutex_unlock(&self->lock);
        s_write_batch(self, &self->writing);
        pthread_mutex_lock(&self->lock);
        kb_batch_t batch = self->writing;
        self->writing.head = self->writing.tail = NULL;
        pthread_mutex_unlock(&self->lock);
        s_batch_free(&batch);
        pthread_mutex_lock(&self->lock);
        self->written = upto;
        pthread_cond_broadcast(&self->done);
    }
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

/*  Hand this turn's batch to the writer. */
static void s_hand_over(kb_persist_t *self)
{
    if (!self->turn.head)
        return;
    pthread_mutex_lock(&self->lock);
    if (self->pending.tail)
        self->pending.tail->next = self->turn.head;
    else
        self->pending.head = self->turn.head;
    self->pending.tail = self->turn.tail;
    self->handed++;
    pthread_mutex_unlock(&self->lock);
    /*  After the unlock: signalled under the lock, the writer would wake
        into a held mutex, sleep and be woken again (two futex wakes). */
    pthread_cond_signal(&self->wake);
    self->turn.head = self->turn.tail = NULL;
    self->urgent = false;
}

/*  Run the collectors; flushing: the batch goes to the writer after them,
    and they queue all they have. */
static void s_collect(kb_persist_t *self, bool flushing)
{
    self->collecting = true;
    self->flushing = flushing;
    for (int i = 0; i < self->ncollectors; i++) {
        size_t before = self->queued;
        self->held = false;
        self->collectors[i].fn(self, self->collectors[i].arg);
        if (self->held)
            self->waiting = true;
        else if (self->queued != before)
            self->urgent = true;
    }
    self->collecting = self->flushing = false;
}

/*  Collect all that waits and hand it over. */
static void s_flush(kb_persist_t *self)
{
    s_collect(self, true);
    kb_timer_stop(&self->hold);
    s_hand_over(self);
    self->waiting = false;
}

static void s_hold_over(kb_timer_t *timer, void *arg)
{
    (void)timer;
    s_flush(arg);
}

/*  The end of a touched turn: collect; hand over if anything must go now,
    else let what is held wait for the hold's end (started by the first
    held turn, not moved by later ones: KB_PERSIST_HOLD_MS at most). */
static void s_end_of_turn(void *arg)
{
    kb_persist_t *self = arg;
    s_collect(self, false);
    self->scheduled = false;
    if (self->urgent) {
        s_flush(self);
        return;
    }
    if ((self->waiting || self->turn.head) && !kb_timer_active(&self->hold))
        kb_timer_start(self->loop, &self->hold, KB_PERSIST_HOLD_MS, 0, s_hold_over, self);
}

bool kb_persist_may_wait(kb_persist_t *self, bool has_writes)
{
    if (self->flushing)
        return false;
    if (has_writes && self->collecting)
        self->held = true;
    return true;
}

void kb_persist_touch(kb_persist_t *self)
{
    if (!self->scheduled && !self->collecting
        && kb_loop_defer(self->loop, s_end_of_turn, self) == 0)
        self->scheduled = true;
}

void kb_persist_add_collector(kb_persist_t *self, kb_persist_collect_fn *fn, void *arg)
{
    if (self->ncollectors < KB_PERSIST_COLLECTORS) {
        self->collectors[self->ncollectors].fn = fn;
        self->collectors[self->ncollectors].arg = arg;
        self->ncollectors++;
    }
}

void kb_persist_sync(kb_persist_t *self)
{
    s_flush(self);
    pthread_mutex_lock(&self->lock);
    while (self->written < self->handed)
        pthread_cond_wait(&self->done, &self->lock);
    pthread_mutex_unlock(&self->lock);
}

json_t *kb_persist_json(kb_persist_t *self)
{
    bool held = self->waiting || self->turn.head || kb_timer_active(&self->hold);
    pthread_mutex_lock(&self->lock);
    json_t *json
        = json_pack("{s:I, s:I, s:I, s:s?, s:b, s:I}", "batches", (json_int_t)self->batches, "rows",
                    (json_int_t)self->rows, "failed", (json_int_t)self->failed, "last_error",
                    self->last_error[0] ? self->last_error : NULL, "held", held, "behind",
                    (json_int_t)(self->handed - self->written));
    pthread_mutex_unlock(&self->lock);
    return json;
}

/* ---- making and unmaking ------------------------------------------------------------ */

kb_persist_t *kb_persist_new(kb_db_t *db, kb_loop_t *loop)
{
    kb_persist_t *self = calloc(1, sizeof *self);
    if (!self) {
        kb_db_close(&db);
        return NULL;
    }
    self->db = db;
    self->loop = loop;
    kb_timer_init(&self->hold);
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->wake, NULL);
    pthread_cond_init(&self->done, NULL);
    if (pthread_create(&self->thread, NULL, s_writer, self) != 0) {
        pthread_mutex_destroy(&self->lock);
        pthread_cond_destroy(&self->wake);
        pthread_cond_destroy(&self->done);
        kb_db_close(&self->db);
        free(self);
        return NULL;
    }
    return self;
}

void kb_persist_destroy(kb_persist_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_persist_t *self = *self_p;
    *self_p = NULL;
    kb_timer_stop(&self->hold);
    s_hand_over(self);
    pthread_mutex_lock(&self->lock);
    self->stopping = true;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
    pthread_join(self->thread, NULL);
    s_batch_free(&self->turn);
    kb_db_close(&self->db);
    pthread_mutex_destroy(&self->lock);
    pthread_cond_destroy(&self->wake);
    pthread_cond_destroy(&self->done);
    free(self);
}
