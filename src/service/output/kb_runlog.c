/*  kb_runlog.c - the text output of one run, kept once, under the
    daemon-wide budget. See kb_runlog.h. */
#include "service/output/kb_runlog.h"

#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/kb_buf.h"
#include "util/kb_utf8.h"
#include "wire/kb_scan.h"
#include "util/kb_clock.h"
#include "util/kb_vec.h"

#define KB_RUNLOG_TRIM_BYTES ((size_t)1 << 20)
#define KB_RUNLOG_RESERVE ((size_t)64 << 10)
/*  A log whose stdout allocation is this large leaves it as the budget's
    spare; a log takes the spare when its stdout grows past
    KB_BUF_AHEAD_FROM (a big buffer, kb_buf.h); a finished log keeps at most
    KB_RUNLOG_FIT_SLACK beyond its stdout. */
#define KB_RUNLOG_SPARE_MIN ((size_t)16 << 20)
#define KB_RUNLOG_FIT_SLACK ((size_t)2 << 20)

/*  One log frame: a piece of one channel's text. */
typedef struct {
    size_t offset, len;
    double timestamp; /* when the daemon kept it */
    kb_log_channel_t channel;
    char date[36]; /* the kernel message's date, "" when none */
} kb_frame_rec_t;

struct kb_runlog {
    pthread_mutex_t lock;
    atomic_int refs;
    kb_budget_t *budget;
    kb_buf_t text[3]; /* stdout, stderr, system */
    size_t view[2];   /* where the result's stdout and stderr start */
    kb_vec_t frames;  /* kb_frame_rec_t; frame i has cursor i */
    size_t charged;   /* bytes counted in the budget */
    atomic_bool stopped;
    bool spare_taken; /* stdout's allocation is the budget's spare, written before */
    bool big;         /* counted in budget->big */
};

static size_t s_frame_cost(void)
{
    return sizeof(kb_frame_rec_t);
}

static void s_charge(kb_runlog_t *self, size_t bytes)
{
    self->charged += bytes;
    if (!self->budget)
        return;
    size_t used = atomic_fetch_add(&self->budget->used, bytes) + bytes;
    size_t peak = atomic_load(&self->budget->peak);
    while (used > peak && !atomic_compare_exchange_weak(&self->budget->peak, &peak, used))
        ;
}

kb_runlog_t *kb_runlog_new(kb_budget_t *budget)
{
    kb_runlog_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    pthread_mutex_init(&self->lock, NULL);
    atomic_init(&self->refs, 1);
    atomic_init(&self->stopped, false);
    self->budget = budget;
    kb_vec_init(&self->frames, sizeof(kb_frame_rec_t), 0);
    s_charge(self, sizeof *self);
    return self;
}

kb_runlog_t *kb_runlog_ref(kb_runlog_t *self)
{
    atomic_fetch_add(&self->refs, 1);
    return self;
}

/* ---- the budget's spare ------------------------------------------------------------ */

/*  The spare: a kb_buf_t's allocation and how much of it was written. */
typedef struct {
    kb_buf_t buf;
    size_t written;
} kb_spare_t;

static long long s_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void s_spare_free(kb_budget_t *budget, kb_spare_t *spare)
{
    atomic_fetch_sub(&budget->spare_bytes, spare->written);
    kb_buf_free(&spare->buf);
    free(spare);
}

/*  Keep buf's allocation (a large stdout's, its log gone) as the spare,
    unless there is one; buf is left empty either way. */
static void s_spare_keep(kb_budget_t *budget, kb_buf_t *buf)
{
    kb_spare_t *spare = malloc(sizeof *spare);
    if (!spare)
        return;
    spare->buf = *buf;
    spare->written = kb_buf_written(buf);
    *buf = (kb_buf_t)KB_BUF_INIT;
    void *none = NULL;
    atomic_fetch_add(&budget->spare_bytes, spare->written);
    atomic_store(&budget->spare_at_ms, (uint_least64_t)s_ms());
    if (!atomic_compare_exchange_strong(&budget->spare, &none, spare))
        s_spare_free(budget, spare);
}

/*  Let the spare go; true when there was one. */
static bool s_spare_drop(kb_budget_t *budget)
{
    kb_spare_t *spare = atomic_exchange(&budget->spare, NULL);
    if (spare)
        s_spare_free(budget, spare);
    return spare != NULL;
}

bool kb_runlog_spare_possible(kb_budget_t *budget)
{
    /*  big first: a log's last unref keeps its spare before it leaves big,
        so with big seen at 0 the spare it may have left is seen too. */
    return atomic_load(&budget->big) > 0 || atomic_load(&budget->spare) != NULL;
}

long long kb_runlog_spare_expire(kb_budget_t *budget, long long max_ms)
{
    if (!atomic_load(&budget->spare))
        return 0;
    long long age = s_ms() - (long long)atomic_load(&budget->spare_at_ms);
    if (age < max_ms)
        return max_ms - age;
    s_spare_drop(budget);
    return 0;
}

/*  buf (a log's stdout, under its lock) is about to grow to need bytes:
    past KB_BUF_AHEAD_FROM, it takes the spare when the spare holds that. */
static bool s_spare_take(kb_budget_t *budget, kb_buf_t *buf, size_t need)
{
    if (!budget || need < KB_BUF_AHEAD_FROM || need <= buf->alloc
        || buf->alloc >= KB_RUNLOG_SPARE_MIN || !atomic_load(&budget->spare))
        return false;
    kb_spare_t *spare = atomic_exchange(&budget->spare, NULL);
    if (!spare)
        return false;
    if (spare->buf.alloc >= need && kb_buf_take_room(buf, &spare->buf)) {
        atomic_fetch_sub(&budget->spare_bytes, spare->written);
        free(spare);
        return true;
    }
    void *none = NULL; /* too small for this one: kept for another */
    if (!atomic_compare_exchange_strong(&budget->spare, &none, spare))
        s_spare_free(budget, spare);
    return false;
}

void kb_runlog_unref(kb_runlog_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_runlog_t *self = *self_p;
    *self_p = NULL;
    if (atomic_fetch_sub(&self->refs, 1) != 1)
        return;
    if (self->budget && self->text[KB_LOG_STDOUT].alloc >= KB_RUNLOG_SPARE_MIN)
        s_spare_keep(self->budget, &self->text[KB_LOG_STDOUT]);
    if (self->big) /* after the spare is kept: see kb_runlog_spare_possible */
        atomic_fetch_sub(&self->budget->big, 1);
    for (int i = 0; i < 3; i++)
        kb_buf_free(&self->text[i]);
    kb_vec_free(&self->frames);
    if (self->budget)
        atomic_fetch_sub(&self->budget->used, self->charged);
    size_t freed = self->charged;
    pthread_mutex_destroy(&self->lock);
    free(self);
    /* Large output gone: give the memory back to the system now, not
       whenever malloc's heuristics would. */
    if (freed > KB_RUNLOG_TRIM_BYTES)
        malloc_trim(0);
}

/* ---- the writer ------------------------------------------------------------------ */

/*  What the budget keeps back from stdout, stderr and rich output: room
    for the system lines that say what was dropped, and for the records'
    own parts, so that those never take the budget over its limit. */
static size_t s_reserve(const kb_budget_t *budget)
{
    size_t reserve = budget->limit / 16;
    return reserve < KB_RUNLOG_RESERVE ? reserve : KB_RUNLOG_RESERVE;
}

size_t kb_runlog_room(kb_runlog_t *self, size_t want)
{
    if (atomic_load(&self->stopped))
        return 0;
    kb_budget_t *budget = self->budget;
    if (!budget || !budget->limit)
        return SIZE_MAX;
    size_t limit = budget->limit - s_reserve(budget) - s_frame_cost();
    /* the spare counts, and goes first (an eviction may make one) */
    size_t used = atomic_load(&budget->used) + atomic_load(&budget->spare_bytes);
    if (used + want > limit && s_spare_drop(budget))
        used = atomic_load(&budget->used);
    if (used + want > limit && budget->make_room) {
        budget->make_room(budget->arg, used + want - limit, self);
        s_spare_drop(budget);
        used = atomic_load(&budget->used);
    }
    if (atomic_load(&self->stopped))
        return 0;
    /*  Short of what it wants: what it keeps stays a prefix of its output
        (a piece refused now and one kept after a record is evicted would
        leave a hole), so it keeps what fits and nothing more. */
    if (used + want > limit)
        kb_runlog_stop(self);
    return used >= limit ? 0 : limit - used;
}

/*  Make frame for the bytes appended to channel's text since old_len (under
    the lock), or undo them. Returns the bytes kept. */
static size_t s_commit(kb_runlog_t *self, kb_frame_rec_t *frame, size_t old_len, bool ok,
                       long long *cursor_out)
{
    kb_buf_t *buf = &self->text[frame->channel];
    ok = ok && kb_vec_reserve(&self->frames, 1) == KB_BUF_OK;
    frame->offset = old_len;
    frame->len = ok ? buf->len - old_len : 0;
    if (ok && frame->len > 0) {
        kb_vec_push(&self->frames, frame); /* reserved: cannot fail */
        if (!self->big && self->budget && self->text[KB_LOG_STDOUT].alloc >= KB_RUNLOG_SPARE_MIN) {
            self->big = true;
            atomic_fetch_add(&self->budget->big, 1);
        }
    } else {
        kb_buf_truncate(buf, old_len);
        kb_buf_recover(buf);
        frame->len = 0;
    }
    long long cursor = (long long)self->frames.len - 1;
    pthread_mutex_unlock(&self->lock);
    if (frame->len == 0)
        return 0; /* out of memory: this piece is lost, the run goes on */
    s_charge(self, frame->len + s_frame_cost());
    if (cursor_out)
        *cursor_out = cursor;
    return frame->len;
}

static void s_frame_init(kb_frame_rec_t *frame, kb_log_channel_t channel, const char *date)
{
    memset(frame, 0, sizeof *frame);
    frame->timestamp = kb_now();
    frame->channel = channel;
    if (date) {
        size_t n = strnlen(date, sizeof frame->date - 1);
        memcpy(frame->date, date, n);
    }
}

/*  Append a frame of text (cut to the room left but for system frames) at
    timestamp (< 0: now). */
static size_t s_append(kb_runlog_t *self, kb_log_channel_t channel, const char *text, size_t len,
                       const char *date, double timestamp, long long *cursor_out)
{
    size_t keep = len;
    if (channel != KB_LOG_SYSTEM)
        keep = kb_utf8_prefix(text, len, kb_runlog_room(self, len));
    if (keep == 0)
        return 0;
    kb_frame_rec_t frame;
    s_frame_init(&frame, channel, date);
    if (timestamp >= 0)
        frame.timestamp = timestamp;
    pthread_mutex_lock(&self->lock);
    size_t old_len = self->text[channel].len;
    bool ok = kb_buf_append(&self->text[channel], text, keep) == KB_BUF_OK;
    return s_commit(self, &frame, old_len, ok, cursor_out);
}

size_t kb_runlog_append(kb_runlog_t *self, kb_log_channel_t channel, const char *text, size_t len,
                        const char *date, long long *cursor_out)
{
    return s_append(self, channel, text, len, date, -1, cursor_out);
}

size_t kb_runlog_append_scan(kb_runlog_t *self, const char *json, size_t len, size_t max,
                             const char *date, kb_scan_stream_t *scan, long long *cursor_out)
{
    size_t room = kb_runlog_room(self, max < len ? max : len);
    if (room < max)
        max = room;
    /* Most stream text is stdout: it is decoded there in one pass, and
       moved when the message turns out to be stderr's. */
    pthread_mutex_lock(&self->lock);
    kb_buf_t *out = &self->text[KB_LOG_STDOUT];
    size_t old_len = out->len;
    if (s_spare_take(self->budget, out, old_len + (max < len ? max : len) + 1))
        self->spare_taken = true;
    int rc = kb_scan_stream(json, len, max, out, scan, NULL);
    bool ok = kb_buf_status(out) == KB_BUF_OK;
    bool stderr_text = rc == 0 && strcmp(scan->name, "stderr") == 0;
    if (ok && (rc != 0 || !scan->text_present || (!stderr_text && strcmp(scan->name, "stdout")))) {
        kb_buf_truncate(out, old_len);
        pthread_mutex_unlock(&self->lock);
        return (size_t)-1; /* malformed, or not a stream of stdout or stderr */
    }
    kb_frame_rec_t frame;
    s_frame_init(&frame, stderr_text ? KB_LOG_STDERR : KB_LOG_STDOUT, date);
    if (!stderr_text)
        return s_commit(self, &frame, old_len, ok, cursor_out);
    kb_buf_t *err = &self->text[KB_LOG_STDERR];
    size_t err_len = err->len;
    ok = ok && kb_buf_append(err, out->data + old_len, out->len - old_len) == KB_BUF_OK;
    kb_buf_truncate(out, old_len);
    kb_buf_recover(out);
    return s_commit(self, &frame, err_len, ok, cursor_out);
}

size_t kb_runlog_restore(kb_runlog_t *self, kb_log_channel_t channel, const char *text, size_t len,
                         const char *date, double timestamp)
{
    return s_append(self, channel, text, len, date, timestamp < 0 ? 0 : timestamp, NULL);
}

void kb_runlog_set_view(kb_runlog_t *self, size_t stdout_start, size_t stderr_start)
{
    pthread_mutex_lock(&self->lock);
    self->view[0] = stdout_start < self->text[0].len ? stdout_start : self->text[0].len;
    self->view[1] = stderr_start < self->text[1].len ? stderr_start : self->text[1].len;
    pthread_mutex_unlock(&self->lock);
}

size_t kb_runlog_view_start(kb_runlog_t *self, kb_log_channel_t channel)
{
    pthread_mutex_lock(&self->lock);
    size_t start = channel == KB_LOG_SYSTEM ? 0 : self->view[channel];
    pthread_mutex_unlock(&self->lock);
    return start;
}

int kb_runlog_frame_copy(kb_runlog_t *self, long long cursor, kb_runlog_frame_t *frame,
                         kb_buf_t *text)
{
    int rc = -1;
    kb_buf_reset(text);
    pthread_mutex_lock(&self->lock);
    if (cursor >= 0 && (size_t)cursor < self->frames.len) {
        kb_frame_rec_t *rec = kb_vec_at(&self->frames, (size_t)cursor);
        frame->channel = rec->channel;
        frame->timestamp = rec->timestamp;
        memcpy(frame->date, rec->date, sizeof frame->date);
        rc = kb_buf_append(text, self->text[rec->channel].data + rec->offset, rec->len) == KB_BUF_OK
                 ? 0
                 : -1;
    }
    pthread_mutex_unlock(&self->lock);
    return rc;
}

void kb_runlog_charge(kb_runlog_t *self, size_t bytes)
{
    s_charge(self, bytes);
}

void kb_runlog_count_sent(kb_runlog_t *self, kb_output_kind_t kind, size_t bytes)
{
    if (self && self->budget && (unsigned)kind < KB_OUTPUT_KINDS)
        self->budget->sent[kind] += bytes;
}

void kb_runlog_clear_view(kb_runlog_t *self)
{
    pthread_mutex_lock(&self->lock);
    self->view[0] = self->text[0].len;
    self->view[1] = self->text[1].len;
    pthread_mutex_unlock(&self->lock);
}

void kb_runlog_stop(kb_runlog_t *self)
{
    atomic_store(&self->stopped, true);
}

bool kb_runlog_stopped(kb_runlog_t *self)
{
    return atomic_load(&self->stopped);
}

void kb_runlog_finish(kb_runlog_t *self)
{
    /* a spare's pages beyond the contents were written: held, they would
       cost memory no record counts (a fresh allocation's are not) */
    pthread_mutex_lock(&self->lock);
    if (self->spare_taken)
        kb_buf_fit(&self->text[KB_LOG_STDOUT], KB_RUNLOG_FIT_SLACK);
    pthread_mutex_unlock(&self->lock);
}

size_t kb_runlog_bytes(kb_runlog_t *self)
{
    return self->charged;
}

/* ---- readers ---------------------------------------------------------------------- */

long long kb_runlog_next_cursor(kb_runlog_t *self)
{
    pthread_mutex_lock(&self->lock);
    long long next = (long long)self->frames.len;
    pthread_mutex_unlock(&self->lock);
    return next;
}

static const char *s_channel_name(kb_log_channel_t channel)
{
    return channel == KB_LOG_STDOUT ? "stdout" : channel == KB_LOG_STDERR ? "stderr" : "system";
}

/*  Frame cursor's record and a string of its text, under the lock. */
static json_t *s_frame_text(kb_runlog_t *self, long long cursor, kb_frame_rec_t *frame)
{
    json_t *text = NULL;
    pthread_mutex_lock(&self->lock);
    if (cursor >= 0 && (size_t)cursor < self->frames.len) {
        *frame = *(kb_frame_rec_t *)kb_vec_at(&self->frames, (size_t)cursor);
        text = json_stringn_nocheck(self->text[frame->channel].data + frame->offset, frame->len);
    }
    pthread_mutex_unlock(&self->lock);
    return text;
}

json_t *kb_runlog_frame_json(kb_runlog_t *self, long long cursor)
{
    kb_frame_rec_t frame;
    json_t *text = s_frame_text(self, cursor, &frame);
    if (!text)
        return NULL;
    char when[40];
    kb_iso_time(frame.timestamp, when, sizeof when);
    return json_pack("{s:I, s:s, s:o, s:s}", "cursor", (json_int_t)cursor, "channel",
                     s_channel_name(frame.channel), "data", text, "timestamp", when);
}

json_t *kb_runlog_event_json(kb_runlog_t *self, long long cursor)
{
    kb_frame_rec_t frame;
    json_t *text = s_frame_text(self, cursor, &frame);
    if (!text)
        return NULL;
    json_t *event = json_pack("{s:o}", "text", text);
    if (event && frame.date[0])
        json_object_set_new(event, "timestamp", json_string(frame.date));
    return event;
}

int kb_runlog_frame_channel(kb_runlog_t *self, long long cursor)
{
    int channel = -1;
    pthread_mutex_lock(&self->lock);
    if (cursor >= 0 && (size_t)cursor < self->frames.len)
        channel = (int)((kb_frame_rec_t *)kb_vec_at(&self->frames, (size_t)cursor))->channel;
    pthread_mutex_unlock(&self->lock);
    return channel;
}

size_t kb_runlog_view_len(kb_runlog_t *self, kb_log_channel_t channel)
{
    pthread_mutex_lock(&self->lock);
    size_t len = self->text[channel].len - self->view[channel];
    pthread_mutex_unlock(&self->lock);
    return len;
}

char *kb_runlog_view_copy(kb_runlog_t *self, kb_log_channel_t channel, size_t *len_out)
{
    pthread_mutex_lock(&self->lock);
    size_t len = self->text[channel].len - self->view[channel];
    char *copy = malloc(len + 1);
    if (copy) {
        if (len)
            memcpy(copy, self->text[channel].data + self->view[channel], len);
        copy[len] = '\0';
    }
    pthread_mutex_unlock(&self->lock);
    if (len_out)
        *len_out = copy ? len : 0;
    return copy;
}

/*  How jansson escapes byte c inside a string: 0 when it goes as it is,
    else the escape's length, written to out. */
static size_t s_escape(unsigned char c, char out[6])
{
    static const char hex[] = "0123456789ABCDEF";
    static const char *const short_forms[256] = {
        ['"'] = "\\\"", ['\\'] = "\\\\", ['\b'] = "\\b", ['\f'] = "\\f",
        ['\n'] = "\\n", ['\r'] = "\\r",  ['\t'] = "\\t",
    };
    if (short_forms[c]) {
        memcpy(out, short_forms[c], 2);
        return 2;
    }
    if (c >= 0x20)
        return 0;
    memcpy(out, "\\u00", 4);
    out[4] = hex[c >> 4];
    out[5] = hex[c & 15];
    return 6;
}

/*  Whether any of the 8 bytes of w needs an escape: a byte under 0x20, '"'
    or '\\' (the classic bit tricks, exact for "any": a byte of 0x80 or more
    is never flagged, so UTF-8 goes as it is). */
static bool s_word_needs_escape(uint64_t w)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\');
    uint64_t control = (w - ones * 0x20) & ~w;
    return ((control | ((quote - ones) & ~quote) | ((backslash - ones) & ~backslash)) & highs) != 0;
}

/*  The end of the run of bytes from text[i] that go as they are, at most
    limit: eight at a time, then byte by byte where a word needs a look. */
static size_t s_plain_run(const unsigned char *text, size_t i, size_t limit)
{
    for (;;) {
        while (limit - i >= 8) {
            uint64_t w;
            memcpy(&w, text + i, 8);
            if (s_word_needs_escape(w))
                break;
            i += 8;
        }
        size_t stop = limit - i >= 8 ? i + 8 : limit;
        while (i < stop && text[i] >= 0x20 && text[i] != '"' && text[i] != '\\')
            i++;
        if (i < stop || i == limit)
            return i;
    }
}

size_t kb_runlog_view_escape(kb_runlog_t *self, kb_log_channel_t channel, size_t *pos, char *dst,
                             size_t cap)
{
    size_t written = 0;
    pthread_mutex_lock(&self->lock);
    const unsigned char *text = (const unsigned char *)self->text[channel].data;
    size_t end = self->text[channel].len;
    size_t i = self->view[channel] + *pos;
    while (i < end && written < cap) {
        /* A run of bytes that go as they are, copied at once. */
        size_t limit = end - i < cap - written ? end : i + (cap - written);
        size_t run = s_plain_run(text, i, limit);
        if (run > i) {
            memcpy(dst + written, text + i, run - i);
            written += run - i;
            i = run;
            continue;
        }
        char esc[6];
        size_t n = s_escape(text[i], esc);
        if (n > cap - written)
            break;
        memcpy(dst + written, esc, n);
        written += n;
        i++;
    }
    *pos = i - self->view[channel];
    pthread_mutex_unlock(&self->lock);
    return written;
}
