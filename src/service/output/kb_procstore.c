/*  kb_procstore.c - process records: ids, log frames with cursors,
    followers and waiters, retention of finished records, and the calls
    clients make on them. Engine thread only.
*/
#include "service/output/kb_procstore.h"

#include <assert.h>
#include <czmq.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "util/kb_alloc.h"
#include "util/kb_clock.h"
#include "util/kb_vec.h"

/*  From a client's first delete to the heap's trim: the deletes of a purge
    that come meanwhile are trimmed together. */
#define KB_PROCSTORE_TRIM_MS 250
/*  The budget's spare (kb_runlog.c) goes when no large run took it for
    this long; looked at once a second, with the kernels' coarse ticks,
    while a run goes (its log may grow large), or there is a spare or a
    large log that may leave one: a run's start starts the tick, which stops
    itself when none of these is left. */
#define KB_PROCSTORE_SPARE_MS 2000
#define KB_PROCSTORE_SPARE_TICK_MS 1000

struct kb_proc {
    kb_procstore_t *store;
    char *id;
    char *context_id;
    char *language;
    bool running;
    void *owner;
    double submitted_at, ended_at;

    json_t *result; /* the InterpreterResult, once ended */
    kb_reason_t reason;
    int exit_code;
    const char *signal;
    char *raw_reason;

    kb_runlog_t *log; /* its text output and log frames */
    size_t bytes;     /* what it counts in finished_bytes, once ended */

    zlistx_t *followers; /* kb_stream_t * following the logs */
    zlistx_t *waiters;   /* kb_call_t * waiting for the end */

    /* the state database */
    long long seq;          /* order of creation */
    bool dirty;             /* in the store's dirty list */
    bool row_dirty;         /* the row itself changed (not only its frames) */
    bool stored;            /* a row was written */
    long long stored_until; /* frames before this cursor are written */
};

struct kb_procstore {
    kb_loop_t *loop;
    size_t max_records;
    size_t max_bytes;
    zhashx_t *procs;    /* id -> kb_proc_t * */
    zlistx_t *finished; /* kb_proc_t * finished, oldest first */
    size_t finished_bytes;
    kb_budget_t budget;    /* all output held in memory */
    kb_persist_t *persist; /* or NULL: nothing is kept across restarts */
    zlistx_t *dirty;       /* kb_proc_t * with writes to queue */
    long long next_seq;
    size_t running;         /* records of runs not ended: their logs may grow */
    kb_timer_t trim_timer;  /* records were deleted: the heap is trimmed soon */
    kb_timer_t spare_timer; /* the budget's spare goes when unused */
};

static void s_on_spare_tick(kb_timer_t *timer, void *arg);

/*  One run more (+1) or less (-1) going; with one going, the spare's tick
    runs (its log may grow large). */
static void s_running(kb_procstore_t *self, int delta)
{
    assert(delta > 0 || self->running > 0);
    self->running += (size_t)(long)delta;
    if (delta > 0 && !kb_timer_active(&self->spare_timer))
        kb_timer_start_coarse(self->loop, &self->spare_timer, KB_PROCSTORE_SPARE_TICK_MS,
                              s_on_spare_tick, self);
}

static void s_make_room(void *arg, size_t need, kb_runlog_t *asking);
static void s_answer_json(kb_call_t *call, json_t *json);

kb_procstore_t *kb_procstore_new(kb_loop_t *loop, size_t max_records, size_t max_bytes,
                                 size_t max_memory)
{
    kb_procstore_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->loop = loop;
    self->max_records = max_records;
    self->max_bytes = max_bytes;
    self->budget.limit = max_memory;
    atomic_init(&self->budget.used, 0);
    atomic_init(&self->budget.peak, 0);
    atomic_init(&self->budget.big, 0);
    self->budget.make_room = s_make_room;
    self->budget.arg = self;
    kb_timer_init(&self->trim_timer);
    kb_timer_init(&self->spare_timer);
    kb_timer_start_coarse(loop, &self->spare_timer, KB_PROCSTORE_SPARE_TICK_MS, s_on_spare_tick,
                          self);
    self->procs = zhashx_new();
    self->finished = zlistx_new();
    self->dirty = zlistx_new();
    KB_NOT_NULL(self->procs);
    KB_NOT_NULL(self->finished);
    KB_NOT_NULL(self->dirty);
    return self;
}

/* ---- the state database ------------------------------------------------------------ */

/*  Mark proc for the end of the turn; row: its row changed, not only its
    frames. */
static void s_mark(kb_proc_t *proc, bool row)
{
    kb_procstore_t *self = proc->store;
    if (!self->persist)
        return;
    proc->row_dirty = proc->row_dirty || row;
    if (!proc->dirty) {
        zlistx_add_end(self->dirty, proc);
        proc->dirty = true;
    }
    kb_persist_touch(self->persist);
}

/*  The record goes: no more writes, and its row is deleted. */
static void s_unstore(kb_proc_t *proc)
{
    kb_procstore_t *self = proc->store;
    if (proc->dirty) {
        zlistx_detach(self->dirty, zlistx_find(self->dirty, proc));
        proc->dirty = false;
    }
    if (self->persist && proc->stored)
        kb_persist_record_delete(self->persist, proc->id);
}

static void s_put_row(kb_procstore_t *self, kb_proc_t *proc)
{
    char *result = proc->result ? json_dumps(proc->result, JSON_COMPACT) : NULL;
    if (proc->result && !result) {
        /* a row without its result would be dropped on restore: keep the old one */
        zsys_warning("record %s: out of memory, its row is not stored", proc->id);
        return;
    }
    kb_db_record_t row = {
        .id = proc->id,
        .context_id = proc->context_id,
        .language = proc->language,
        .running = proc->running,
        .submitted_at = proc->submitted_at,
        .ended_at = proc->ended_at,
        .result = result,
        .reason = proc->running ? NULL : kb_reason_name(proc->reason),
        .exit_code = proc->exit_code,
        .signal = proc->signal,
        .raw_reason = proc->raw_reason,
        .view_stdout = proc->log ? (long long)kb_runlog_view_start(proc->log, KB_LOG_STDOUT) : 0,
        .view_stderr = proc->log ? (long long)kb_runlog_view_start(proc->log, KB_LOG_STDERR) : 0,
        .seq = proc->seq,
    };
    kb_persist_record_put(self->persist, &row);
    free(result);
    proc->stored = true;
}

/*  The end of a turn: the rows and new frames of what changed, when the
    batch goes to the writer; till then they wait (KB_PERSIST_HOLD_MS at
    most): a short run's start and end are one row, back-to-back runs share
    a transaction, and a row changed in several turns is copied once. A
    crash loses what the last 20 ms ended (SPEC section 8: records are kept
    up to the last batch). */
static void s_collect(kb_persist_t *persist, void *arg)
{
    kb_procstore_t *self = arg;
    if (kb_persist_may_wait(persist, zlistx_size(self->dirty) > 0))
        return;
    kb_proc_t *proc;
    while ((proc = zlistx_detach(self->dirty, NULL))) {
        proc->dirty = false;
        if (proc->row_dirty || !proc->stored)
            s_put_row(self, proc);
        proc->row_dirty = false;
        long long next = proc->log ? kb_runlog_next_cursor(proc->log) : 0;
        kb_persist_frames(persist, proc->id, proc->log, proc->stored_until, next);
        proc->stored_until = next;
    }
}

void kb_procstore_set_persist(kb_procstore_t *self, kb_persist_t *persist)
{
    self->persist = persist;
    kb_persist_add_collector(persist, s_collect, self);
}

static size_t s_proc_bytes(const kb_proc_t *proc);
static void s_enforce_retention(kb_procstore_t *self);

static kb_reason_t s_reason_of(const char *name)
{
    for (kb_reason_t r = KB_REASON_EXITED; r <= KB_REASON_LAST; r++)
        if (name && strcmp(kb_reason_name(r), name) == 0)
            return r;
    return KB_REASON_FAILED;
}

static const char *s_static_signal(const char *name)
{
    static const char *names[]
        = { "SIGINT",  "SIGTERM", "SIGKILL", "SIGHUP",  "SIGQUIT", "SIGABRT",
            "SIGSEGV", "SIGBUS",  "SIGFPE",  "SIGILL",  "SIGPIPE", "SIGALRM",
            "SIGUSR1", "SIGUSR2", "SIGXCPU", "SIGXFSZ", "SIGSYS",  "SIGTRAP" };
    for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(names[i], name) == 0)
            return names[i];
    return NULL;
}

static void s_proc_free(kb_proc_t *proc)
{
    s_unstore(proc);
    kb_runlog_unref(&proc->log);
    kb_stream_t *stream;
    while ((stream = zlistx_detach(proc->followers, NULL)))
        kb_stream_unref(&stream);
    zlistx_destroy(&proc->followers);
    zlistx_destroy(&proc->waiters);
    json_decref(proc->result);
    free(proc->id);
    free(proc->context_id);
    free(proc->language);
    free(proc->raw_reason);
    free(proc);
}

void kb_procstore_destroy(kb_procstore_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_procstore_t *self = *self_p;
    *self_p = NULL;
    self->persist = NULL; /* the records stay in the database */
    kb_timer_stop(&self->trim_timer);
    kb_timer_stop(&self->spare_timer);
    zlistx_t *all = zhashx_values(self->procs);
    for (kb_proc_t *proc = zlistx_first(all); proc; proc = zlistx_next(all)) {
        assert(!proc->running);
        s_proc_free(proc);
    }
    zlistx_destroy(&all);
    kb_runlog_spare_expire(&self->budget, 0);
    zhashx_destroy(&self->procs);
    zlistx_destroy(&self->finished);
    zlistx_destroy(&self->dirty);
    free(self);
}

kb_proc_t *kb_procstore_add(kb_procstore_t *self, const char *context_id, const char *language)
{
    kb_proc_t *proc = kb_xcalloc(1, sizeof *proc);
    proc->store = self;
    proc->id = kb_random_id("prc_");
    KB_NOT_NULL(proc->id);
    proc->context_id = kb_xstrdup(context_id);
    proc->language = kb_xstrdup(language);
    proc->running = true;
    proc->submitted_at = kb_now();
    proc->exit_code = -1;
    proc->log = kb_runlog_new(&self->budget);
    proc->followers = zlistx_new();
    proc->waiters = zlistx_new();
    KB_NOT_NULL(proc->log);
    KB_NOT_NULL(proc->followers);
    KB_NOT_NULL(proc->waiters);
    proc->seq = ++self->next_seq;
    zhashx_insert(self->procs, proc->id, proc);
    s_mark(proc, true);
    s_running(self, +1);
    return proc;
}

kb_proc_t *kb_procstore_restore(kb_procstore_t *self, const kb_db_record_t *row)
{
    json_t *result = row->result ? json_loads(row->result, 0, NULL) : NULL;
    if (!row->running && !result)
        return NULL; /* a terminal record without its result: nothing to show */
    kb_proc_t *proc = calloc(1, sizeof *proc);
    if (!proc) {
        json_decref(result);
        return NULL;
    }
    proc->store = self;
    proc->id = strdup(row->id);
    proc->context_id = strdup(row->context_id ? row->context_id : "");
    proc->language = strdup(row->language ? row->language : "");
    proc->running = row->running;
    proc->submitted_at = row->submitted_at;
    proc->ended_at = row->ended_at;
    proc->result = result;
    proc->reason = row->running ? KB_REASON_NONE : s_reason_of(row->reason);
    proc->exit_code = row->exit_code;
    proc->signal = s_static_signal(row->signal);
    proc->raw_reason = kb_xstrdup(row->raw_reason);
    proc->log = kb_runlog_new(&self->budget);
    proc->followers = zlistx_new();
    proc->waiters = zlistx_new();
    proc->seq = row->seq;
    proc->stored = true;
    if (row->seq > self->next_seq)
        self->next_seq = row->seq;
    if (!proc->id || !proc->context_id || !proc->language || !proc->log || !proc->followers
        || !proc->waiters) {
        proc->stored = false;
        s_proc_free(proc);
        return NULL;
    }
    zhashx_insert(self->procs, proc->id, proc);
    if (proc->running)
        s_running(self, +1);
    return proc;
}

void kb_procstore_restored(kb_proc_t *proc, long long view_stdout, long long view_stderr)
{
    kb_procstore_t *self = proc->store;
    kb_runlog_set_view(proc->log, (size_t)view_stdout, (size_t)view_stderr);
    proc->stored_until = kb_runlog_next_cursor(proc->log);
    if (proc->running)
        return; /* its end, which the caller makes, is written as any other */
    zlistx_add_end(self->finished, proc);
    proc->bytes = s_proc_bytes(proc);
    self->finished_bytes += proc->bytes;
    s_enforce_retention(self);
}

void kb_proc_forget(kb_proc_t *proc)
{
    assert(zlistx_size(proc->waiters) == 0);
    if (proc->running)
        s_running(proc->store, -1);
    proc->running = false;
    zhashx_delete(proc->store->procs, proc->id);
    s_proc_free(proc);
}

kb_proc_t *kb_procstore_find(kb_procstore_t *self, const char *id)
{
    return id ? zhashx_lookup(self->procs, id) : NULL;
}

const char *kb_proc_id(const kb_proc_t *proc)
{
    return proc->id;
}

bool kb_proc_running(const kb_proc_t *proc)
{
    return proc->running;
}

void *kb_proc_owner(const kb_proc_t *proc)
{
    return proc->owner;
}

void kb_proc_set_owner(kb_proc_t *proc, void *owner)
{
    proc->owner = owner;
}

/* ---- logs -------------------------------------------------------------------- */

kb_runlog_t *kb_proc_outlog(const kb_proc_t *proc)
{
    return proc->log;
}

void kb_proc_logged(kb_proc_t *proc, long long cursor)
{
    s_mark(proc, false);
    for (kb_stream_t *follower = zlistx_first(proc->followers); follower;
         follower = zlistx_next(proc->followers))
        kb_stream_push_text(follower, KB_EVENT_LOG, proc->log, cursor);
}

void kb_proc_log(kb_proc_t *proc, kb_log_channel_t channel, const char *text)
{
    long long cursor;
    if (proc->log && kb_runlog_append(proc->log, channel, text, strlen(text), NULL, &cursor))
        kb_proc_logged(proc, cursor); /* marks it */
}

const kb_budget_t *kb_procstore_budget(const kb_procstore_t *self)
{
    return &self->budget;
}

json_t *kb_procstore_budget_json(kb_procstore_t *self)
{
    return json_pack("{s:I, s:I, s:I, s:I}", "limit", (json_int_t)self->budget.limit, "used",
                     (json_int_t)atomic_load(&self->budget.used), "peak",
                     (json_int_t)atomic_load(&self->budget.peak), "spare",
                     (json_int_t)atomic_load(&self->budget.spare_bytes));
}

/* ---- records ------------------------------------------------------------------ */

static json_t *s_proc_json(const kb_proc_t *proc)
{
    char started[40], ended[40];
    kb_iso_time(proc->submitted_at, started, sizeof started);
    kb_iso_time(proc->ended_at, ended, sizeof ended);
    json_t *resources = proc->result ? json_object_get(proc->result, "resources") : NULL;
    json_t *rolled_back = proc->result ? json_object_get(proc->result, "rolled_back") : NULL;
    json_t *json = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:O}", "process_id", proc->id,
        "kind", "code", "state", proc->running ? "running" : "terminal", "context_id",
        proc->context_id, "language", proc->language, "started_at", started, "ended_at",
        proc->running ? json_null() : json_string(ended), "exit_code",
        proc->running || proc->exit_code < 0 ? json_null() : json_integer(proc->exit_code),
        "signal", proc->signal ? json_string(proc->signal) : json_null(), "reason",
        proc->running ? json_null() : json_string(kb_reason_name(proc->reason)), "raw_reason",
        proc->raw_reason ? json_string(proc->raw_reason) : json_null(), "resources",
        resources ? resources : json_null());
    if (json && rolled_back) /* a run that asked for a rollback (SPEC section 13) */
        json_object_set(json, "rolled_back", rolled_back);
    return json;
}

json_t *kb_procstore_record_json(const kb_proc_t *proc)
{
    return s_proc_json(proc);
}

static json_t *s_wait_json(const kb_proc_t *proc)
{
    json_t *json = s_proc_json(proc);
    json_t *wait = json_pack(
        "{s:O, s:O, s:O, s:O, s:O}", "state", json_object_get(json, "state"), "exit_code",
        json_object_get(json, "exit_code"), "signal", json_object_get(json, "signal"), "reason",
        json_object_get(json, "reason"), "raw_reason", json_object_get(json, "raw_reason"));
    json_decref(json);
    return wait;
}

/*  What a finished record costs: its kept output (counted once) and its
    fixed parts. */
static size_t s_proc_bytes(const kb_proc_t *proc)
{
    return (proc->log ? kb_runlog_bytes(proc->log) : 0) + 1024;
}

static void s_evict_oldest(kb_procstore_t *self)
{
    kb_proc_t *oldest = zlistx_detach(self->finished, NULL);
    self->finished_bytes -= oldest->bytes;
    zhashx_delete(self->procs, oldest->id);
    s_proc_free(oldest);
}

/*  Keep finished records within the configured count and bytes. */
static void s_enforce_retention(kb_procstore_t *self)
{
    while (zlistx_size(self->finished) > self->max_records
           || (self->finished_bytes > self->max_bytes && zlistx_size(self->finished) > 1))
        s_evict_oldest(self);
}

/*  The budget is short of need bytes: finished records go, oldest first;
    if that is not enough, the largest running run keeps nothing more (its
    result says truncated). A record whose output a reader still holds
    frees its memory only when the reader lets go. */
static void s_make_room(void *arg, size_t need, kb_runlog_t *asking)
{
    kb_procstore_t *self = arg;
    size_t used = atomic_load(&self->budget.used);
    size_t goal = used > need ? used - need : 0;
    while (atomic_load(&self->budget.used) > goal && zlistx_size(self->finished) > 0)
        s_evict_oldest(self);
    if (atomic_load(&self->budget.used) <= goal)
        return;
    kb_runlog_t *largest = asking;
    for (kb_proc_t *proc = zhashx_first(self->procs); proc; proc = zhashx_next(self->procs))
        if (proc->running && proc->log && !kb_runlog_stopped(proc->log)
            && kb_runlog_bytes(proc->log) > kb_runlog_bytes(largest))
            largest = proc->log;
    kb_runlog_stop(largest);
}

void kb_proc_end(kb_proc_t *proc, json_t *result, kb_reason_t reason, int exit_code,
                 const char *signal, const char *raw_reason)
{
    kb_procstore_t *self = proc->store;
    assert(proc->running);
    proc->running = false;
    s_running(self, -1);
    proc->owner = NULL;
    kb_runlog_finish(proc->log);
    proc->result = result;
    proc->ended_at = kb_now();
    proc->reason = reason;
    proc->exit_code = exit_code;
    proc->signal = signal;
    proc->raw_reason = kb_xstrdup(raw_reason);
    kb_stream_t *follower;
    while ((follower = zlistx_detach(proc->followers, NULL))) {
        kb_stream_push(follower, KB_EVENT_END,
                       json_pack("{s:I}", "cursor", (json_int_t)kb_runlog_next_cursor(proc->log)));
        kb_stream_unref(&follower);
    }
    kb_call_t *waiter;
    while ((waiter = zlistx_detach(proc->waiters, NULL))) {
        kb_timer_stop(&waiter->timer);
        s_answer_json(waiter, s_wait_json(proc));
    }
    zlistx_add_end(self->finished, proc);
    proc->bytes = s_proc_bytes(proc);
    self->finished_bytes += proc->bytes;
    s_mark(proc, true);
    s_enforce_retention(self);
}

/* ---- calls ---------------------------------------------------------------------- */

/*  Answer with json built for the call; NULL (out of memory building it)
    fails the call. */
static void s_answer_json(kb_call_t *call, json_t *json)
{
    if (json)
        kb_call_answer_json(call, json);
    else
        kb_call_fail(call, KB_ERR_INTERNAL, "out of memory");
}

static kb_proc_t *s_lookup(kb_procstore_t *self, kb_call_t *call)
{
    kb_proc_t *proc = kb_procstore_find(self, call->ask.id);
    if (!proc)
        kb_call_fail(call, KB_ERR_PROCESS_NOT_FOUND, "no process %s",
                     call->ask.id ? call->ask.id : "(none)");
    return proc;
}

static void s_handle_list(kb_procstore_t *self, kb_call_t *call)
{
    json_t *list = json_array();
    for (kb_proc_t *proc = zhashx_first(self->procs); proc && list;
         proc = zhashx_next(self->procs)) {
        if (call->ask.filter_state && *call->ask.filter_state
            && strcmp(call->ask.filter_state, proc->running ? "running" : "terminal") != 0)
            continue;
        if (call->ask.filter_context && *call->ask.filter_context
            && strcmp(call->ask.filter_context, proc->context_id) != 0)
            continue;
        if (json_array_append_new(list, s_proc_json(proc)) != 0) {
            json_decref(list);
            list = NULL;
        }
    }
    s_answer_json(call, list ? json_pack("{s:o}", "processes", list) : NULL);
}

static void s_handle_logs(kb_procstore_t *self, kb_call_t *call)
{
    kb_proc_t *proc = s_lookup(self, call);
    if (!proc)
        return;
    json_t *frames = json_array();
    long long end = kb_runlog_next_cursor(proc->log);
    long long next = call->ask.cursor >= 0 ? call->ask.cursor : 0;
    for (; next < end && (!call->ask.limit || json_array_size(frames) < call->ask.limit); next++)
        json_array_append_new(frames, kb_runlog_frame_json(proc->log, next));
    s_answer_json(call, json_pack("{s:o, s:I, s:b}", "frames", frames, "next_cursor",
                                  (json_int_t)next, "eof", !proc->running && next >= end));
}

static void s_handle_follow(kb_procstore_t *self, kb_call_t *call)
{
    kb_proc_t *proc = s_lookup(self, call);
    if (!proc)
        return;
    long long end = kb_runlog_next_cursor(proc->log);
    for (long long i = call->ask.cursor >= 0 ? call->ask.cursor : 0; i < end; i++)
        kb_stream_push_text(call->ask.stream, KB_EVENT_LOG, proc->log, i);
    if (proc->running)
        zlistx_add_end(proc->followers, kb_stream_ref(call->ask.stream));
    else
        kb_stream_push(call->ask.stream, KB_EVENT_END,
                       json_pack("{s:I}", "cursor", (json_int_t)end));
    kb_call_answer_json(call, NULL);
}

/*  A wait ran out before the run ended: answer "still running". */
static void s_on_wait_timeout(kb_timer_t *timer, void *arg)
{
    kb_call_t *call = arg;
    kb_proc_t *proc = call->owner;
    void *handle = zlistx_find(proc->waiters, call);
    if (handle)
        zlistx_detach(proc->waiters, handle);
    s_answer_json(call, json_pack("{s:s, s:n, s:n, s:n, s:n}", "state", "running", "exit_code",
                                  "signal", "reason", "raw_reason"));
}

static void s_handle_wait(kb_procstore_t *self, kb_call_t *call)
{
    kb_proc_t *proc = s_lookup(self, call);
    if (!proc)
        return;
    if (!proc->running || call->ask.timeout == 0) {
        s_answer_json(call, s_wait_json(proc));
        return;
    }
    zlistx_add_end(proc->waiters, call);
    kb_call_set_owner(call, proc);
    if (kb_loop_delay_ms(call->ask.timeout))
        kb_timer_start(self->loop, &call->timer, kb_loop_delay_ms(call->ask.timeout), 0,
                       s_on_wait_timeout, call);
}

/*  Records deleted by clients (a purge deletes many, one request each):
    the memory they held goes back to the system, all of it at once, a
    while after the first. Small records are freed inside the heap, where
    malloc would keep it (about 6 KiB per short run: 8 MiB held after a
    thousand were purged). Not after an eviction: its room is taken again
    by the next record. */
static void s_on_trim(kb_timer_t *timer, void *arg)
{
    (void)timer;
    (void)arg;
    malloc_trim(0);
}

static void s_on_spare_tick(kb_timer_t *timer, void *arg)
{
    (void)timer;
    kb_procstore_t *self = arg;
    kb_runlog_spare_expire(&self->budget, KB_PROCSTORE_SPARE_MS);
    if (!self->running && !kb_runlog_spare_possible(&self->budget))
        kb_timer_stop(timer); /* an idle daemon does not wake for it */
}

static void s_handle_delete(kb_procstore_t *self, kb_call_t *call)
{
    kb_proc_t *proc = s_lookup(self, call);
    if (!proc)
        return;
    if (proc->running) {
        kb_call_fail(call, KB_ERR_PROCESS_RUNNING, "process %s is still running", proc->id);
        return;
    }
    zlistx_detach(self->finished, zlistx_find(self->finished, proc));
    self->finished_bytes -= proc->bytes;
    zhashx_delete(self->procs, proc->id);
    s_proc_free(proc);
    kb_call_answer_json(call, NULL);
    if (!kb_timer_active(&self->trim_timer))
        kb_timer_start(self->loop, &self->trim_timer, KB_PROCSTORE_TRIM_MS, 0, s_on_trim, self);
}

void kb_procstore_handle(kb_procstore_t *self, kb_call_t *call)
{
    kb_proc_t *proc;
    kb_result_doc_t *doc;
    switch (call->type) {
        case KB_CALL_PROC_LIST:
            s_handle_list(self, call);
            break;
        case KB_CALL_PROC_GET:
            if ((proc = s_lookup(self, call)))
                s_answer_json(call, s_proc_json(proc));
            break;
        case KB_CALL_PROC_RESULT:
            if (!(proc = s_lookup(self, call)))
                break;
            if (proc->running)
                kb_call_fail(call, KB_ERR_PROCESS_RUNNING, "process %s is still running", proc->id);
            else if (!(doc = kb_result_doc_new(proc->result, proc->log)))
                kb_call_fail(call, KB_ERR_INTERNAL, "out of memory");
            else
                kb_call_answer_doc(call, doc);
            break;
        case KB_CALL_PROC_LOGS:
            s_handle_logs(self, call);
            break;
        case KB_CALL_PROC_FOLLOW:
            s_handle_follow(self, call);
            break;
        case KB_CALL_PROC_WAIT:
            s_handle_wait(self, call);
            break;
        case KB_CALL_PROC_DELETE:
            s_handle_delete(self, call);
            break;
        default:
            kb_call_fail(call, KB_ERR_INTERNAL, "not a call on records: %d", call->type);
            break;
    }
}
