/*  test_run.c - a run's state machine (kb_run_table, kb_run): every event
    in every state against a table written here, including the events a
    state ignores; the outcome table against SPEC section 2's rows; what a
    done step, a limit, a signal or the kernel's death leads to for every
    cause; when an interrupted request's signals go. Then real runs on a
    loop and a process store: every event given to a queued run and to an
    ended one, the held call, the timeout timer; and on ipykernel each
    step, the interrupts, HOLDING, the ends that kill or lose the kernel. */
#include "kb_testutil.h"

#include "kernel/kb_kernel.h"
#include "kernel/kb_kernelspec.h"
#include "kernel/kb_launch.h"
#include "service/output/kb_procstore.h"
#include "service/output/kb_stream.h"
#include "service/run/kb_run.h"
#include "service/run/kb_run_table.h"

#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

extern char **environ;

static const char *const s_state_names[KB_RUN_STATE_COUNT] = {
    "QUEUED", "APPLYING", "EXECUTING", "SETTLING", "RESTORING", "HOLDING", "ENDED",
};

static const char *const s_event_names[KB_RUN_EVENT_COUNT] = {
    "START",        "MESSAGE",       "TIMEOUT",       "SIGNAL",       "KERNEL_EXITED",
    "START_FAILED", "CONTEXT_GONE",  "SERVICE_STOPS", "STEP_OVERDUE", "SETTLED",
    "GRACE_OVER",   "INTERRUPT_DUE", "LIMIT",
};

/* ---- the transition table ---------------------------------------------------- */

/*  What each event does in each state, written out whole: one row per
    state, the events in kb_run_event_type_t's order. An action that ends
    the run at once names its outcome. */
typedef struct {
    kb_run_action_t action;
    kb_run_outcome_t outcome; /* for END and START_FAILED */
} want_t;

#define I                                                                                          \
    {                                                                                              \
        KB_RUN_ACT_IGNORE, 0                                                                       \
    }
#define A(name)                                                                                    \
    {                                                                                              \
        KB_RUN_ACT_##name, 0                                                                       \
    }
#define E(outcome)                                                                                 \
    {                                                                                              \
        KB_RUN_ACT_END, KB_RUN_OUT_##outcome                                                       \
    }
#define SF                                                                                         \
    {                                                                                              \
        KB_RUN_ACT_START_FAILED, KB_RUN_OUT_NOT_STARTED                                            \
    }

/* clang-format off */
static const want_t s_want[KB_RUN_STATE_COUNT][KB_RUN_EVENT_COUNT] = {
    /*             START     MESSAGE     TIMEOUT               SIGNAL              KERNEL_EXITED      START_FAILED CONTEXT_GONE     SERVICE_STOPS STEP_OVERDUE       SETTLED         GRACE_OVER       INTERRUPT_DUE        LIMIT */
    [KB_RUN_QUEUED]    = { A(START), I,          E(TIMED_OUT_QUEUED),  A(END_SIGNALLED),   I,                 SF,          E(NOT_STARTED),  E(STOPPED),   I,                 I,              I,               I,                   I },
    [KB_RUN_APPLYING]  = { I,        A(MESSAGE), A(TIMEOUT),           A(SIGNAL),          A(KERNEL_EXITED),  SF,          E(KILLED),       E(STOPPED),   A(STEP_OVERDUE),   I,              A(GRACE_OVER),   A(INTERRUPT_STEP),   A(LIMIT) },
    [KB_RUN_EXECUTING] = { I,        A(MESSAGE), A(TIMEOUT),           A(SIGNAL),          A(KERNEL_EXITED),  SF,          E(KILLED),       E(STOPPED),   A(STEP_OVERDUE),   I,              A(GRACE_OVER),   A(INTERRUPT_STEP),   A(LIMIT) },
    [KB_RUN_SETTLING]  = { I,        A(MESSAGE), A(TIMEOUT),           A(SIGNAL),          A(KERNEL_EXITED),  SF,          E(KILLED),       E(STOPPED),   A(STEP_OVERDUE),   A(STEP_DONE),   A(GRACE_OVER),   A(INTERRUPT_STEP),   A(LIMIT) },
    [KB_RUN_RESTORING] = { I,        A(MESSAGE), A(TIMEOUT),           A(SIGNAL),          A(KERNEL_EXITED),  SF,          E(KILLED),       E(STOPPED),   A(STEP_OVERDUE),   I,              A(GRACE_OVER),   A(INTERRUPT_STEP),   A(LIMIT) },
    [KB_RUN_HOLDING]   = { I,        A(MESSAGE), A(TIMEOUT),           A(SIGNAL),          A(KERNEL_EXITED),  SF,          E(KILLED),       E(STOPPED),   A(STEP_OVERDUE),   I,              A(GRACE_OVER),   A(INTERRUPT_STEP),   A(LIMIT) },
    [KB_RUN_ENDED]     = { I,        I,          I,                    I,                  I,                 I,           I,               I,            I,                 I,              I,               I,                   I },
};
/* clang-format on */

static void test_every_event_in_every_state(void)
{
    int pairs = 0;
    for (int s = 0; s < KB_RUN_STATE_COUNT; s++)
        for (int e = 0; e < KB_RUN_EVENT_COUNT; e++) {
            kb_run_next_t got = kb_run_next(s, e);
            want_t want = s_want[s][e];
            bool ends = want.action == KB_RUN_ACT_END || want.action == KB_RUN_ACT_START_FAILED;
            bool ok = got.action == want.action && (!ends || got.outcome == want.outcome);
            if (!ok)
                fprintf(stderr, "  %s in %s: action %d outcome %d, want %d %d\n", s_event_names[e],
                        s_state_names[s], got.action, got.outcome, want.action, want.outcome);
            CHECK(ok);
            pairs++;
        }
    CHECK(pairs == 7 * 13);
    /*  Every action is taken somewhere. */
    for (int a = 0; a < KB_RUN_ACTION_COUNT; a++) {
        bool used = false;
        for (int s = 0; s < KB_RUN_STATE_COUNT; s++)
            for (int e = 0; e < KB_RUN_EVENT_COUNT; e++)
                used |= kb_run_next(s, e).action == (kb_run_action_t)a;
        CHECK(used);
    }
    CHECK(kb_run_first_step(true) == KB_RUN_APPLYING);
    CHECK(kb_run_first_step(false) == KB_RUN_EXECUTING);
}

/* ---- the outcome table ------------------------------------------------------- */

#define GIVEN kb_run_signal_given

static void test_outcome_rows(void)
{
    static const struct {
        kb_run_outcome_t outcome;
        kb_reason_t reason;
        const char *signal;
        const char *error;
    } rows[] = {
        { KB_RUN_OUT_FINISHED, KB_REASON_EXITED, NULL, NULL },
        { KB_RUN_OUT_TIMED_OUT, KB_REASON_TIMED_OUT, "SIGINT", "TimeoutError" },
        { KB_RUN_OUT_TIMED_OUT_KILLED, KB_REASON_TIMED_OUT, "SIGKILL", "TimeoutError" },
        { KB_RUN_OUT_TIMED_OUT_DIED, KB_REASON_TIMED_OUT, "SIGINT", "TimeoutError" },
        { KB_RUN_OUT_TIMED_OUT_QUEUED, KB_REASON_TIMED_OUT, NULL, "TimeoutError" },
        { KB_RUN_OUT_INTERRUPTED, KB_REASON_SIGNALED, "SIGINT", NULL },
        { KB_RUN_OUT_INTERRUPTED_DIED, KB_REASON_SIGNALED, "SIGINT", "KernelDied" },
        { KB_RUN_OUT_INTERRUPTED_QUEUED, KB_REASON_SIGNALED, "SIGINT", "KeyboardInterrupt" },
        { KB_RUN_OUT_CANCELLED_QUEUED, KB_REASON_SIGNALED, GIVEN, "RunCancelled" },
        { KB_RUN_OUT_KILLED, KB_REASON_SIGNALED, GIVEN, "KernelKilled" },
        { KB_RUN_OUT_KERNEL_DIED, KB_REASON_FAILED, GIVEN, "KernelDied" },
        { KB_RUN_OUT_NOT_STARTED, KB_REASON_FAILED, NULL, "KernelDied" },
        { KB_RUN_OUT_STOPPED, KB_REASON_SANDBOX_STOPPED, NULL, "SandboxStopped" },
        { KB_RUN_OUT_MEMORY, KB_REASON_MEMORY_LIMIT, "SIGINT", "MemoryLimitExceeded" },
        { KB_RUN_OUT_MEMORY_KILLED, KB_REASON_MEMORY_LIMIT, "SIGKILL", "OutOfMemory" },
        { KB_RUN_OUT_MEMORY_DIED, KB_REASON_MEMORY_LIMIT, "SIGINT", "OutOfMemory" },
        { KB_RUN_OUT_PIDS, KB_REASON_PIDS_LIMIT, "SIGKILL", "PidsLimitExceeded" },
    };
    CHECK(sizeof rows / sizeof rows[0] == KB_RUN_OUTCOME_COUNT);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const kb_run_row_t *row = kb_run_row(rows[i].outcome);
        CHECK(row->reason == rows[i].reason);
        if (rows[i].signal == GIVEN || !rows[i].signal)
            CHECK(row->signal == rows[i].signal);
        else
            CHECK_STR(row->signal, rows[i].signal);
        if (rows[i].error)
            CHECK_STR(row->error, rows[i].error);
        else
            CHECK(row->error == NULL);
    }
}

/* ---- decisions by cause ------------------------------------------------------- */

static void test_finish_by_cause(void)
{
    static const kb_run_outcome_t want[KB_RUN_CAUSE_COUNT] = {
        [KB_RUN_CAUSE_NONE] = KB_RUN_OUT_FINISHED,
        [KB_RUN_CAUSE_TIMEOUT] = KB_RUN_OUT_TIMED_OUT,
        [KB_RUN_CAUSE_TIMEOUT_KILL] = KB_RUN_OUT_FINISHED, /* its kill's exit not come yet */
        [KB_RUN_CAUSE_SIGINT] = KB_RUN_OUT_INTERRUPTED,
        [KB_RUN_CAUSE_SIGTERM] = KB_RUN_OUT_FINISHED,
        [KB_RUN_CAUSE_SIGKILL] = KB_RUN_OUT_FINISHED,
        [KB_RUN_CAUSE_MEMORY] = KB_RUN_OUT_MEMORY,
        [KB_RUN_CAUSE_MEMORY_KILL] = KB_RUN_OUT_MEMORY_KILLED,
        [KB_RUN_CAUSE_PIDS] = KB_RUN_OUT_PIDS,
    };
    for (int c = 0; c < KB_RUN_CAUSE_COUNT; c++)
        for (int over = 0; over < 2; over++) {
            kb_run_outcome_t outcome = KB_RUN_OUTCOME_COUNT;
            kb_run_state_t state = kb_run_finish(c, over, &outcome);
            if (c == KB_RUN_CAUSE_MEMORY && over) {
                CHECK(state == KB_RUN_HOLDING); /* until the tree is under, or killed */
                CHECK(outcome == KB_RUN_OUTCOME_COUNT);
            } else {
                CHECK(state == KB_RUN_ENDED);
                CHECK(outcome == want[c]);
            }
        }
}

static void test_exit_by_cause(void)
{
    static const kb_run_outcome_t want[KB_RUN_CAUSE_COUNT] = {
        [KB_RUN_CAUSE_NONE] = KB_RUN_OUT_KERNEL_DIED,
        [KB_RUN_CAUSE_TIMEOUT] = KB_RUN_OUT_TIMED_OUT_DIED,
        [KB_RUN_CAUSE_TIMEOUT_KILL] = KB_RUN_OUT_TIMED_OUT_KILLED,
        [KB_RUN_CAUSE_SIGINT] = KB_RUN_OUT_INTERRUPTED_DIED,
        [KB_RUN_CAUSE_SIGTERM] = KB_RUN_OUT_KILLED,
        [KB_RUN_CAUSE_SIGKILL] = KB_RUN_OUT_KILLED,
        [KB_RUN_CAUSE_MEMORY] = KB_RUN_OUT_MEMORY_DIED,
        [KB_RUN_CAUSE_MEMORY_KILL] = KB_RUN_OUT_MEMORY_KILLED,
        [KB_RUN_CAUSE_PIDS] = KB_RUN_OUT_PIDS,
    };
    for (int c = 0; c < KB_RUN_CAUSE_COUNT; c++)
        CHECK(kb_run_exit_outcome(c) == want[c]);
}

static void test_signals(void)
{
    CHECK(kb_run_signal_cause(SIGINT) == KB_RUN_CAUSE_SIGINT);
    CHECK(kb_run_signal_cause(SIGTERM) == KB_RUN_CAUSE_SIGTERM);
    CHECK(kb_run_signal_cause(SIGKILL) == KB_RUN_CAUSE_SIGKILL);
    CHECK(kb_run_queued_signal_outcome(SIGINT) == KB_RUN_OUT_INTERRUPTED_QUEUED);
    CHECK(kb_run_queued_signal_outcome(SIGTERM) == KB_RUN_OUT_CANCELLED_QUEUED);
    CHECK(kb_run_queued_signal_outcome(SIGKILL) == KB_RUN_OUT_CANCELLED_QUEUED);
}

/*  Every limit for every cause: UNDER changes nothing; a run stopping
    already (SIGTERM, SIGKILL, MEMORY_KILL) stays so; MEMORY_KILL
    overrides any other cause; an interrupt over a limit is not repeated. */
static void test_limit_by_cause(void)
{
    static const kb_run_limit_t limits[]
        = { KB_RUN_LIMIT_MEMORY, KB_RUN_LIMIT_MEMORY_KILL, KB_RUN_LIMIT_PIDS, KB_RUN_LIMIT_UNDER };
    static const kb_run_cause_t by_limit[]
        = { KB_RUN_CAUSE_MEMORY, KB_RUN_CAUSE_MEMORY_KILL, KB_RUN_CAUSE_PIDS, KB_RUN_CAUSE_NONE };
    for (int c = 0; c < KB_RUN_CAUSE_COUNT; c++)
        for (size_t l = 0; l < 4; l++) {
            kb_run_cause_t want = by_limit[l];
            bool stopping = c == KB_RUN_CAUSE_SIGTERM || c == KB_RUN_CAUSE_SIGKILL
                            || c == KB_RUN_CAUSE_MEMORY_KILL;
            bool by_a_limit = c == KB_RUN_CAUSE_MEMORY || c == KB_RUN_CAUSE_PIDS;
            if (limits[l] == KB_RUN_LIMIT_UNDER || stopping
                || (by_a_limit && limits[l] != KB_RUN_LIMIT_MEMORY_KILL))
                want = c;
            kb_run_cause_t got = kb_run_limit_cause(c, limits[l]);
            if (got != want)
                fprintf(stderr, "  limit %zu on cause %d: %d, want %d\n", l, c, got, want);
            CHECK(got == want);
        }
    CHECK(kb_run_limit_cause(KB_RUN_CAUSE_TIMEOUT, KB_RUN_LIMIT_MEMORY) == KB_RUN_CAUSE_MEMORY);
    CHECK(kb_run_limit_cause(KB_RUN_CAUSE_MEMORY, KB_RUN_LIMIT_MEMORY_KILL)
          == KB_RUN_CAUSE_MEMORY_KILL);
    CHECK(kb_run_limit_cause(KB_RUN_CAUSE_SIGKILL, KB_RUN_LIMIT_MEMORY_KILL)
          == KB_RUN_CAUSE_SIGKILL);
}

/* ---- steps ------------------------------------------------------------------------ */

static kb_run_state_t after(kb_run_state_t state, bool adapter, kb_run_cause_t cause, bool failed,
                            bool aborted, int attempts)
{
    kb_run_step_t step = { state, adapter, cause, failed, aborted, attempts };
    return kb_run_after_step(&step);
}

static void test_after_step(void)
{
    /*  The apply snippet: aborted is sent again (3 sends at most, and not
        once the run is being stopped); failed or stopped: restore; else the
        code. */
    CHECK(after(KB_RUN_APPLYING, true, KB_RUN_CAUSE_NONE, false, false, 1) == KB_RUN_EXECUTING);
    CHECK(after(KB_RUN_APPLYING, true, KB_RUN_CAUSE_NONE, true, false, 1) == KB_RUN_RESTORING);
    CHECK(after(KB_RUN_APPLYING, true, KB_RUN_CAUSE_NONE, true, true, 1) == KB_RUN_APPLYING);
    CHECK(after(KB_RUN_APPLYING, true, KB_RUN_CAUSE_NONE, true, true, 2) == KB_RUN_APPLYING);
    CHECK(after(KB_RUN_APPLYING, true, KB_RUN_CAUSE_NONE, true, true, 3) == KB_RUN_RESTORING);
    for (int c = 1; c < KB_RUN_CAUSE_COUNT; c++) {
        CHECK(after(KB_RUN_APPLYING, true, c, false, false, 1) == KB_RUN_RESTORING);
        CHECK(after(KB_RUN_APPLYING, true, c, true, true, 1) == KB_RUN_RESTORING);
    }
    /*  The code and its settling: restore with the adapter, else the end,
        whatever the cause. The restore and a held run: the end. */
    for (int c = 0; c < KB_RUN_CAUSE_COUNT; c++)
        for (int adapter = 0; adapter < 2; adapter++) {
            kb_run_state_t code_next = adapter ? KB_RUN_RESTORING : KB_RUN_ENDED;
            CHECK(after(KB_RUN_EXECUTING, adapter, c, false, false, 1) == code_next);
            CHECK(after(KB_RUN_SETTLING, adapter, c, false, false, 1) == code_next);
            CHECK(after(KB_RUN_RESTORING, adapter, c, false, false, 1) == KB_RUN_ENDED);
            CHECK(after(KB_RUN_HOLDING, adapter, c, false, false, 1) == KB_RUN_ENDED);
        }
}

static void test_resends_code(void)
{
    for (int s = 0; s < KB_RUN_STATE_COUNT; s++)
        for (int c = 0; c < KB_RUN_CAUSE_COUNT; c++)
            for (int attempts = 0; attempts <= 4; attempts++)
                CHECK(kb_run_resends_code(s, c, attempts)
                      == (s == KB_RUN_EXECUTING && c == KB_RUN_CAUSE_NONE && attempts < 3));
}

/*  Sent at 100 s; grace 2 s. */
static void test_signal_due(void)
{
    kb_run_signals_t sig = { .sent_at = 100, .grace = 2 };
    /*  The first: 0.1 s after the send without a busy, 0.02 s after it. */
    CHECK(kb_run_signal_due(&sig) > 100.099 && kb_run_signal_due(&sig) < 100.101);
    sig.busy_at = 100.5;
    CHECK(kb_run_signal_due(&sig) > 100.519 && kb_run_signal_due(&sig) < 100.521);
    /*  A first that went early (within 0.1 s): once more at half the grace. */
    sig.signals = 1;
    sig.first_signal_at = sig.signal_at = 100.55;
    CHECK(kb_run_signal_due(&sig) > 101.549 && kb_run_signal_due(&sig) < 101.551);
    /*  ... a first that did not go early: none more; nor after two. */
    sig.first_signal_at = sig.signal_at = 100.7;
    CHECK(kb_run_signal_due(&sig) < 0);
    sig.first_signal_at = 100.55;
    sig.signals = 2;
    CHECK(kb_run_signal_due(&sig) < 0);
}

/* ---- real runs, no kernel -------------------------------------------------------- */

typedef struct {
    kb_loop_t *loop;
    kb_procstore_t *store;
    kb_run_settings_t settings;
    int ended;
    long long count;
    bool stop;     /* stop the loop when a run ends */
    kb_run_t *run; /* the run on the kernel, until it ends */
    kb_kernel_t *kernel;
    bool ready, exited;
    kb_timer_t tick; /* run_until's */
    double deadline;
    bool (*done)(void *arg);
    void *done_arg;
} bench_t;

static void on_ended(kb_run_t *run, long long count, void *arg)
{
    (void)run;
    bench_t *b = arg;
    b->ended++;
    b->count = count;
    b->run = NULL; /* freed at the end of the turn */
    if (b->stop)
        kb_loop_stop(b->loop);
}

static void bench_init(bench_t *b)
{
    *b = (bench_t){ .loop = kb_loop_new() };
    b->store = kb_procstore_new(b->loop, 100, 1 << 20, 0);
    b->settings = (kb_run_settings_t){ b->loop, "sbx", 2.0, 3.0, 1 << 20, NULL };
}

static void bench_fini(bench_t *b)
{
    kb_loop_flush(b->loop); /* frees the ended runs */
    kb_procstore_destroy(&b->store);
    kb_loop_destroy(&b->loop);
}

/*  A run of code on context ctx-1 (with cwd: and the adapter), whose end
    b hears of. */
static kb_run_t *new_run(bench_t *b, const char *code, double timeout, const char *cwd,
                         kb_stream_t *stream, kb_proc_t **proc)
{
    kb_run_opts_t opts = { .code = code, .cwd = cwd };
    kb_proc_t *record = kb_procstore_add(b->store, "ctx-1", "python");
    json_t *identity = json_pack("{s:s, s:s, s:s, s:i}", "sandbox_id", "sbx", "context_id", "ctx-1",
                                 "language", "python", "generation", 1);
    kb_run_t *run
        = kb_run_new(&b->settings, record, &opts, timeout, "python", identity, cwd != NULL, stream);
    kb_run_set_owner(run, on_ended, b);
    if (proc)
        *proc = record;
    return run;
}

static kb_run_t *queued_run(bench_t *b, kb_stream_t *stream, double timeout, kb_proc_t **proc)
{
    return new_run(b, "print(1)", timeout, NULL, stream, proc);
}

/*  The run's result has that reason, signal (NULL: none) and error name
    (NULL: none); the stream is released. */
static kb_result_t *check_result(kb_stream_t **stream, kb_reason_t reason, const char *signal,
                                 const char *error)
{
    kb_result_t *result = kb_stream_take_result(*stream);
    kb_stream_unref(stream);
    CHECK(result != NULL);
    if (!result)
        return NULL;
    CHECK_STR(kb_reason_name(result->reason), kb_reason_name(reason));
    if (signal)
        CHECK_STR(result->signal, signal);
    else
        CHECK(result->signal == NULL);
    if (error)
        CHECK(result->error && strcmp(result->error->name, error) == 0);
    else
        CHECK(result->error == NULL);
    if (result->error && (!error || strcmp(result->error->name, error) != 0))
        fprintf(stderr, "  error %s: %s\n", result->error->name, result->error->value);
    return result;
}

static void check_end(kb_stream_t **stream, kb_reason_t reason, const char *signal,
                      const char *error)
{
    kb_result_t *result = check_result(stream, reason, signal, error);
    kb_result_destroy(&result);
}

/*  The end a queued run comes to, event by event. */
typedef struct {
    kb_run_event_type_t type;
    kb_reason_t reason;
    const char *signal, *error;
} queued_end_t;

static const queued_end_t s_queued_ends[] = {
    { KB_RUN_EV_TIMEOUT, KB_REASON_TIMED_OUT, NULL, "TimeoutError" },
    { KB_RUN_EV_SIGNAL, KB_REASON_SIGNALED, "SIGINT", "KeyboardInterrupt" },
    { KB_RUN_EV_START_FAILED, KB_REASON_FAILED, NULL, "KernelDied" },
    { KB_RUN_EV_CONTEXT_GONE, KB_REASON_FAILED, NULL, "KernelDied" },
    { KB_RUN_EV_SERVICE_STOPS, KB_REASON_SANDBOX_STOPPED, NULL, "SandboxStopped" },
};

/*  NULL: the event is ignored. */
static const queued_end_t *queued_end(kb_run_event_type_t type)
{
    for (size_t k = 0; k < sizeof s_queued_ends / sizeof s_queued_ends[0]; k++)
        if (s_queued_ends[k].type == type)
            return &s_queued_ends[k];
    return NULL;
}

static kb_run_event_t event_of(kb_run_event_type_t type)
{
    return (kb_run_event_t){ .type = type,
                             .signal = SIGINT,
                             .text = "the context was deleted",
                             .why = "deleted by a client",
                             .limit = KB_RUN_LIMIT_MEMORY };
}

/*  Every event but START (which needs a kernel) given to a queued run:
    those the table ignores leave it queued with its record running; the
    others end it, once, with the record and result of their row. Then
    every event given to the ended run changes nothing. */
static void test_queued_run_takes_every_event(void)
{
    for (int e = 0; e < KB_RUN_EVENT_COUNT; e++) {
        if (e == KB_RUN_EV_START)
            continue;
        bench_t b;
        bench_init(&b);
        kb_stream_t *stream = kb_stream_new();
        kb_proc_t *proc;
        kb_run_t *run = queued_run(&b, stream, 0, &proc);
        kb_run_event_t event = event_of(e);
        kb_run_apply(run, &event);
        const queued_end_t *end = queued_end(e);
        fprintf(stderr, "  %s: %s\n", s_event_names[e],
                end ? kb_reason_name(end->reason) : "ignored");
        if (!end) {
            CHECK(kb_run_state(run) == KB_RUN_QUEUED);
            CHECK(b.ended == 0);
            CHECK(kb_proc_running(proc));
            kb_run_apply(run, &(kb_run_event_t){ .type = KB_RUN_EV_SERVICE_STOPS });
            end = queued_end(KB_RUN_EV_SERVICE_STOPS);
        }
        CHECK(kb_run_state(run) == KB_RUN_ENDED);
        CHECK(b.ended == 1);
        CHECK(b.count == -1);
        CHECK(!kb_proc_running(proc));
        kb_result_t *result = check_result(&stream, end->reason, end->signal, end->error);
        CHECK(result && !result->has_exit_code);
        CHECK(result && result->resources.wall_time_s == 0); /* never had the kernel */
        CHECK(result && strcmp(result->context_id, "ctx-1") == 0);
        kb_result_destroy(&result);
        for (int again = 0; again < KB_RUN_EVENT_COUNT; again++) {
            kb_run_event_t late = event_of(again);
            kb_run_apply(run, &late);
            CHECK(kb_run_state(run) == KB_RUN_ENDED);
        }
        CHECK(b.ended == 1);
        CHECK(!kb_proc_running(proc));
        bench_fini(&b);
    }
}

/*  A client's SIGTERM or SIGKILL before the run started: cancelled,
    with the client's signal. */
static void test_queued_cancel_gives_the_signal(void)
{
    static const int sigs[] = { SIGTERM, SIGKILL };
    for (size_t i = 0; i < 2; i++) {
        bench_t b;
        bench_init(&b);
        kb_stream_t *stream = kb_stream_new();
        kb_proc_t *proc;
        kb_run_t *run = queued_run(&b, stream, 0, &proc);
        kb_run_apply(run, &(kb_run_event_t){ .type = KB_RUN_EV_SIGNAL, .signal = sigs[i] });
        check_end(&stream, KB_REASON_SIGNALED, kb_signal_name(sigs[i]), "RunCancelled");
        bench_fini(&b);
    }
}

/*  The kernel never started while the caller still waits: the call fails
    with KERNEL_START_FAILED and no record is kept. */
static void test_start_failed_fails_the_held_call(void)
{
    bench_t b;
    bench_init(&b);
    kb_proc_t *proc;
    kb_run_t *run = queued_run(&b, NULL, 0, &proc);
    char id[64];
    snprintf(id, sizeof id, "%s", kb_proc_id(proc));
    kb_call_t call;
    kb_call_init(&call, KB_CALL_RUN);
    kb_run_hold_call(run, &call);
    kb_run_apply(run, &(kb_run_event_t){ .type = KB_RUN_EV_START_FAILED, .why = "no python" });
    CHECK(call.done);
    CHECK(call.err.code == KB_ERR_KERNEL_START_FAILED);
    CHECK(strstr(call.err.message, "no python") != NULL);
    CHECK(kb_run_state(run) == KB_RUN_ENDED);
    CHECK(b.ended == 1);
    CHECK(kb_procstore_find(b.store, id) == NULL);
    bench_fini(&b);
}

/*  A queued run's timeout is a timer of the loop: it ends the run. */
static void test_timeout_timer_ends_a_queued_run(void)
{
    bench_t b;
    bench_init(&b);
    b.stop = true;
    kb_stream_t *stream = kb_stream_new();
    kb_proc_t *proc;
    double t0 = kb_test_now();
    kb_run_t *run = queued_run(&b, stream, 0.05, &proc);
    kb_call_t call;
    kb_call_init(&call, KB_CALL_RUN);
    kb_run_hold_call(run, &call);
    CHECK(kb_loop_run(b.loop) == 0);
    double took = kb_test_now() - t0;
    CHECK(took >= 0.04 && took < 5);
    CHECK(b.ended == 1);
    CHECK(call.done && call.rc == 0); /* answered: the run is a record */
    kb_result_t *result = check_result(&stream, KB_REASON_TIMED_OUT, NULL, "TimeoutError");
    CHECK(result && result->raw_reason && !strcmp(result->raw_reason, "timed out while queued"));
    kb_result_destroy(&result);
    bench_fini(&b);
}

/* ---- real runs on a real kernel -------------------------------------------------- */

static char *tmp, *ipc_dir;
static kb_kernelspec_t *spec;

static void k_ready(kb_kernel_t *kernel, void *arg)
{
    (void)kernel;
    ((bench_t *)arg)->ready = true;
}

static void k_start_failed(kb_kernel_t *kernel, const char *why, void *arg)
{
    (void)kernel;
    (void)arg;
    fprintf(stderr, "  kernel start failed: %s\n", why);
}

/*  As the context does: the run's messages to the run. */
static void k_message(kb_kernel_t *kernel, kb_channel_t channel, const kb_msg_t *msg, void *arg)
{
    (void)kernel;
    bench_t *b = arg;
    if (b->run && kb_run_owns_message(b->run, msg))
        kb_run_apply(
            b->run, &(kb_run_event_t){ .type = KB_RUN_EV_MESSAGE, .channel = channel, .msg = msg });
}

static void k_exited(kb_kernel_t *kernel, void *arg)
{
    bench_t *b = arg;
    b->exited = true;
    if (b->run)
        kb_run_apply(b->run,
                     &(kb_run_event_t){ .type = KB_RUN_EV_KERNEL_EXITED, .kernel = kernel });
}

static const kb_kernel_callbacks_t s_kernel_callbacks
    = { k_ready, k_start_failed, k_message, k_exited, NULL, NULL };

static void on_tick(kb_timer_t *timer, void *arg)
{
    (void)timer;
    bench_t *b = arg;
    if (b->done(b->done_arg) || kb_test_now() > b->deadline)
        kb_loop_stop(b->loop);
}

/*  Run the loop until done(arg) or seconds passed; returns done(arg). */
static bool run_until(bench_t *b, bool (*done)(void *), void *arg, double seconds)
{
    b->done = done;
    b->done_arg = arg;
    b->deadline = kb_test_now() + seconds;
    kb_timer_start(b->loop, &b->tick, 10, 10, on_tick, b);
    kb_loop_run(b->loop);
    kb_timer_stop(&b->tick);
    return done(arg);
}

static bool is_true(void *arg)
{
    return *(bool *)arg;
}

static bool run_ended(void *arg)
{
    return ((bench_t *)arg)->run == NULL;
}

static bool run_holding(void *arg)
{
    bench_t *b = arg;
    return b->run && kb_run_state(b->run) == KB_RUN_HOLDING;
}

/*  A bench with a ready ipykernel; false (and a failed check) if not. */
static bool kernel_bench(bench_t *b)
{
    bench_init(b);
    kb_timer_init(&b->tick);
    kb_kernel_opts_t opts = { .runtime_dir = tmp,
                              .ipc_dir = ipc_dir,
                              .serial = 1,
                              .transport = "ipc",
                              .envp = environ,
                              .system_python = "/usr/bin/python3",
                              .start_timeout = 60 };
    kb_error_t err = { KB_OK, "" };
    b->kernel = kb_kernel_new(b->loop, spec, &opts, &s_kernel_callbacks, b, &err);
    if (!b->kernel)
        fprintf(stderr, "  launch: %s\n", err.message);
    CHECK(b->kernel != NULL);
    CHECK(b->kernel && run_until(b, is_true, &b->ready, 60));
    return b->kernel && b->ready;
}

static void kernel_bench_fini(bench_t *b)
{
    kb_kernel_destroy(&b->kernel);
    bench_fini(b);
}

/*  A run of code given its kernel (START), with its stream in *stream. */
static kb_run_t *run_on_kernel(bench_t *b, const char *code, double timeout, const char *cwd,
                               kb_stream_t **stream)
{
    *stream = kb_stream_new();
    b->run = new_run(b, code, timeout, cwd, *stream, NULL);
    kb_run_apply(b->run, &(kb_run_event_t){ .type = KB_RUN_EV_START, .kernel = b->kernel });
    return b->run;
}

/*  On one kernel: the steps with and without cwd (APPLYING, EXECUTING,
    RESTORING), events a started run ignores, a timeout, a client's SIGINT,
    the memory limit (HOLDING until the tree is under) and the pids limit:
    each interrupts, and the kernel runs the next. */
static void test_runs_on_a_kernel(void)
{
    bench_t b;
    if (!kernel_bench(&b))
        goto done;
    kb_stream_t *stream;

    kb_run_t *run = run_on_kernel(&b, "print(6 * 7)", 0, NULL, &stream);
    CHECK(kb_run_state(run) == KB_RUN_EXECUTING);
    kb_run_apply(run, &(kb_run_event_t){ .type = KB_RUN_EV_START, .kernel = b.kernel });
    kb_run_apply(run, &(kb_run_event_t){ .type = KB_RUN_EV_SETTLED });
    CHECK(kb_run_state(run) == KB_RUN_EXECUTING); /* both ignored */
    CHECK(run_until(&b, run_ended, &b, 30));
    kb_result_t *result = check_result(&stream, KB_REASON_EXITED, NULL, NULL);
    CHECK(result && result->has_exit_code && result->exit_code == 0);
    CHECK(result && strcmp(result->stdout_text, "42\n") == 0);
    CHECK(b.count > 0);
    kb_result_destroy(&result);

    run = run_on_kernel(&b, "import os; print(os.getcwd())", 0, "/", &stream);
    CHECK(kb_run_state(run) == KB_RUN_APPLYING);
    CHECK(run_until(&b, run_ended, &b, 30));
    result = check_result(&stream, KB_REASON_EXITED, NULL, NULL);
    CHECK(result && strcmp(result->stdout_text, "/\n") == 0);
    kb_result_destroy(&result);

    run = run_on_kernel(&b, "import time; time.sleep(30)", 0.5, NULL, &stream);
    CHECK(run_until(&b, run_ended, &b, 30));
    check_end(&stream, KB_REASON_TIMED_OUT, "SIGINT", "TimeoutError");

    run = run_on_kernel(&b, "import time; time.sleep(30)", 0, NULL, &stream);
    kb_run_apply(run, &(kb_run_event_t){ .type = KB_RUN_EV_SIGNAL, .signal = SIGINT });
    CHECK(run_until(&b, run_ended, &b, 30));
    check_end(&stream, KB_REASON_SIGNALED, "SIGINT", "KeyboardInterrupt");

    run = run_on_kernel(&b, "import time; time.sleep(30)", 0, NULL, &stream);
    kb_run_apply(run, &(kb_run_event_t){ .type = KB_RUN_EV_LIMIT,
                                         .limit = KB_RUN_LIMIT_MEMORY,
                                         .text = "over 1 MiB",
                                         .note = "the tree is over its memory limit" });
    CHECK(run_until(&b, run_holding, &b, 30));
    kb_run_apply(run, &(kb_run_event_t){ .type = KB_RUN_EV_START, .kernel = b.kernel });
    kb_run_apply(run, &(kb_run_event_t){ .type = KB_RUN_EV_SETTLED });
    CHECK(kb_run_state(run) == KB_RUN_HOLDING);
    kb_run_apply(run, &(kb_run_event_t){ .type = KB_RUN_EV_LIMIT, .limit = KB_RUN_LIMIT_UNDER });
    CHECK(b.run == NULL);
    result = check_result(&stream, KB_REASON_MEMORY_LIMIT, "SIGINT", "MemoryLimitExceeded");
    CHECK(result && result->error && strcmp(result->error->value, "over 1 MiB") == 0);
    kb_result_destroy(&result);

    run = run_on_kernel(&b, "import time; time.sleep(30)", 0, NULL, &stream);
    kb_run_apply(run, &(kb_run_event_t){ .type = KB_RUN_EV_LIMIT, .limit = KB_RUN_LIMIT_PIDS });
    CHECK(run_until(&b, run_ended, &b, 30));
    check_end(&stream, KB_REASON_PIDS_LIMIT, "SIGKILL", "PidsLimitExceeded");
    CHECK(!b.exited);
done:
    kernel_bench_fini(&b);
}

/*  Ends that do not wait for the kernel (its context gone, the service
    stopping), then a client's SIGKILL: the kernel's exit ends the run. */
static void test_runs_that_end_the_kernel(void)
{
    bench_t b;
    if (!kernel_bench(&b))
        goto done;
    kb_stream_t *stream;
    kb_run_t *run = run_on_kernel(&b, "import time; time.sleep(0.2)", 0, NULL, &stream);
    kb_run_apply(run, &(kb_run_event_t){ .type = KB_RUN_EV_CONTEXT_GONE,
                                         .text = "the context was deleted",
                                         .why = "deleted by a client" });
    CHECK(b.run == NULL); /* at once */
    kb_result_t *result = check_result(&stream, KB_REASON_SIGNALED, "SIGKILL", "KernelKilled");
    CHECK(result && strcmp(result->error->value, "the context was deleted") == 0);
    kb_result_destroy(&result);

    run = run_on_kernel(&b, "import time; time.sleep(0.2)", 0, NULL, &stream);
    kb_run_apply(run, &(kb_run_event_t){ .type = KB_RUN_EV_SERVICE_STOPS });
    CHECK(b.run == NULL);
    check_end(&stream, KB_REASON_SANDBOX_STOPPED, NULL, "SandboxStopped");

    run = run_on_kernel(&b, "import time; time.sleep(30)", 0, NULL, &stream);
    kb_run_apply(run, &(kb_run_event_t){ .type = KB_RUN_EV_SIGNAL, .signal = SIGKILL });
    CHECK(kb_run_state(run) == KB_RUN_EXECUTING); /* until the kernel's exit */
    CHECK(run_until(&b, run_ended, &b, 30));
    CHECK(b.exited);
    check_end(&stream, KB_REASON_SIGNALED, "SIGKILL", "KernelKilled");
done:
    kernel_bench_fini(&b);
}

/*  The kernel dies on its own: failed, with its exit status. */
static void test_kernel_death_ends_the_run(void)
{
    bench_t b;
    if (!kernel_bench(&b))
        goto done;
    kb_stream_t *stream;
    run_on_kernel(&b, "import os; os._exit(3)", 0, NULL, &stream);
    CHECK(run_until(&b, run_ended, &b, 30));
    kb_result_t *result = check_result(&stream, KB_REASON_FAILED, NULL, "KernelDied");
    CHECK(result && result->has_exit_code && result->exit_code == 3);
    kb_result_destroy(&result);
done:
    kernel_bench_fini(&b);
}

int main(void)
{
    RUN_TEST(test_every_event_in_every_state);
    RUN_TEST(test_outcome_rows);
    RUN_TEST(test_finish_by_cause);
    RUN_TEST(test_exit_by_cause);
    RUN_TEST(test_signals);
    RUN_TEST(test_limit_by_cause);
    RUN_TEST(test_after_step);
    RUN_TEST(test_resends_code);
    RUN_TEST(test_signal_due);
    RUN_TEST(test_queued_run_takes_every_event);
    RUN_TEST(test_queued_cancel_gives_the_signal);
    RUN_TEST(test_start_failed_fails_the_held_call);
    RUN_TEST(test_timeout_timer_ends_a_queued_run);

    signal(SIGPIPE, SIG_IGN);
    tmp = kb_test_tmpdir();
    ipc_dir = strdup("/tmp/kbrXXXXXX");
    kb_error_t err;
    spec = kb_kernelspec_load("/usr/share/jupyter/kernels/python3", "python3", &err);
    if (!tmp || !mkdtemp(ipc_dir) || !spec) {
        fprintf(stderr, "set-up: %s\n", spec ? "temp dirs" : err.message);
        return 1;
    }
    RUN_TEST(test_runs_on_a_kernel);
    RUN_TEST(test_runs_that_end_the_kernel);
    RUN_TEST(test_kernel_death_ends_the_run);
    kb_kernelspec_destroy(&spec);
    kb_test_rmtree(tmp);
    kb_test_rmtree(ipc_dir);
    free(tmp);
    free(ipc_dir);
    return kb_test_summary();
}
