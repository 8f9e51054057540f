/*  kb_execution.c - the fold of one run: Jupyter iopub and shell messages
    (messaging spec 5.3) in, one kb_result_t and a stream of events out.
    See kb_execution.h for the rules. Pure code: no I/O, no clock. */
#include "service/run/kb_execution.h"
#include "service/run/kb_result_internal.h"
#include "util/kb_alloc.h"
#include "util/kb_utf8.h"
#include "wire/kb_scan.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KB_EXECUTION_DEFAULT_MAX_OUTPUT ((size_t)64 * 1024 * 1024)

struct kb_execution {
    char *msg_id; /* header.msg_id of the execute_request */
    size_t max_output_bytes;
    bool strip_ansi;
    kb_execution_emit_fn *emit;
    void *emit_arg;
    kb_runlog_t *log; /* where text is kept, or NULL: the result's logs */
    size_t dropped_bytes;

    kb_result_t *result; /* being built; NULL once finished */
    size_t kept_bytes;   /* logs + output bundles kept now */
    long long execution_count;
    bool has_reply;
    bool has_idle;
    bool clear_pending;          /* clear_output wait=true seen, not applied yet */
    bool iopub_error;            /* an iopub error message was folded */
    bool error_seen;             /* any error, folded or set */
    bool drop_noticed;           /* the SYSTEM line about dropped output went out */
    kb_run_error_t *reply_error; /* from execute_reply, held until idle */
    json_t *pages;               /* the MIME bundles of execute_reply's page payloads, held
                                    until idle: they follow the run's other entries */
};

/*  Hand one event to the follower; takes ownership of data (NULL, when an
    allocation failed, is no event). */
static void emit(kb_execution_t *self, kb_event_type_t type, json_t *data)
{
    if (!data)
        return;
    if (self->emit)
        self->emit(type, data, -1, self->emit_arg);
    else
        json_decref(data);
}

/*  Keep text[0..len) of a stream (or system text): in the log, or in the
    result's logs; emits its event. Returns the bytes kept. */
static size_t keep_text(kb_execution_t *self, kb_log_channel_t channel, const char *text,
                        size_t len, const char *date)
{
    static const kb_event_type_t types[3] = { KB_EVENT_STDOUT, KB_EVENT_STDERR, KB_EVENT_SYSTEM };
    if (self->log) {
        long long cursor = -1;
        size_t kept = kb_runlog_append(self->log, channel, text, len, date, &cursor);
        if (kept > 0 && self->emit)
            self->emit(types[channel], NULL, cursor, self->emit_arg);
        return kept;
    }
    if (channel != KB_LOG_SYSTEM
        && kb_result_append_log(self->result, channel == KB_LOG_STDERR, text, len) != 0)
        return 0;
    json_t *data = json_pack("{s:o}", "text", json_stringn_nocheck(text, len));
    if (data && date)
        json_object_set_new(data, "timestamp", json_string(date));
    emit(self, types[channel], data);
    return len;
}

kb_execution_t *kb_execution_new(const char *msg_id, const kb_execution_opts_t *opts,
                                 kb_execution_emit_fn *emit_fn, void *arg)
{
    assert(msg_id);
    kb_execution_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->msg_id = strdup(msg_id);
    self->result = kb_result_new();
    if (!self->msg_id || !self->result)
        goto fail;
    self->max_output_bytes
        = opts && opts->max_output_bytes ? opts->max_output_bytes : KB_EXECUTION_DEFAULT_MAX_OUTPUT;
    self->strip_ansi = opts && opts->strip_ansi;
    self->emit = emit_fn;
    self->emit_arg = arg;
    self->log = opts ? opts->log : NULL;
    self->execution_count = -1;
    return self;
fail:
    kb_execution_destroy(&self);
    return NULL;
}

void kb_execution_destroy(kb_execution_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_execution_t *self = *self_p;
    free(self->msg_id);
    kb_result_destroy(&self->result);
    kb_run_error_destroy(&self->reply_error);
    json_decref(self->pages);
    free(self);
    *self_p = NULL;
}

/* ---- Helpers -------------------------------------------------------------- */

#define KB_MAIN_RESULT_RESERVE (64 << 10) /* an execute_result kept past the cap */

/*  Output went over the cap: say so once, and on the result. */
static void note_dropped(kb_execution_t *self)
{
    self->result->truncated = true;
    if (self->drop_noticed)
        return;
    self->drop_noticed = true;
    char line[128];
    snprintf(line, sizeof line, "output beyond %zu bytes was dropped", self->max_output_bytes);
    kb_execution_system(self, line);
}

void kb_execution_dropped(kb_execution_t *self)
{
    self->result->truncated = true;
}

/*  What one output entry counts against the cap: its bundle and its
    metadata (an absent one is kept as {}). */
static size_t bundle_bytes(const json_t *data, const json_t *metadata)
{
    return kb_json_payload_bytes(data) + (metadata ? kb_json_payload_bytes(metadata) : 2);
}

static size_t room_left(const kb_execution_t *self)
{
    return self->kept_bytes < self->max_output_bytes ? self->max_output_bytes - self->kept_bytes
                                                     : 0;
}

/*  Room for an output bundle of want bytes: the cap's and the budget's. */
static size_t bundle_room(const kb_execution_t *self, size_t want)
{
    size_t room = room_left(self);
    if (self->log && want <= room) {
        size_t budget = kb_runlog_room(self->log, want);
        room = budget < room ? budget : room;
    }
    return room;
}

static void clear_gathered(kb_execution_t *self)
{
    kb_result_clear_outputs(self->result);
    if (self->log)
        kb_runlog_clear_view(self->log);
    self->kept_bytes = 0;
    self->clear_pending = false;
}

/*  A clear_output(wait=true) takes effect just before the next output. */
static void apply_pending_clear(kb_execution_t *self)
{
    if (self->clear_pending)
        clear_gathered(self);
}

/*  Remove ANSI escape sequences (CSI, OSC/DCS/APC/PM/SOS strings, and the
    two-byte and nF forms) from text[0..len). Only ASCII bytes are removed,
    so valid UTF-8 stays valid. Returns a new string; *out_len its length. */
static char *strip_ansi(const char *text, size_t len, size_t *out_len)
{
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    size_t at = 0, i = 0;
    while (i < len) {
        unsigned char c = (unsigned char)text[i];
        if (c != 0x1B) {
            out[at++] = (char)c;
            i++;
            continue;
        }
        i++; /* ESC */
        if (i >= len)
            break;
        unsigned char kind = (unsigned char)text[i];
        if (kind == '[') { /* CSI: parameters, intermediates, one final byte */
            i++;
            while (i < len && (unsigned char)text[i] >= 0x20 && (unsigned char)text[i] <= 0x3F)
                i++;
            if (i < len && (unsigned char)text[i] >= 0x40 && (unsigned char)text[i] <= 0x7E)
                i++;
        } else if (kind == ']' || kind == 'P' || kind == '_' || kind == '^' || kind == 'X') {
            /* A string, ended by BEL or ST (ESC \). */
            i++;
            while (i < len) {
                if (text[i] == '\a') {
                    i++;
                    break;
                }
                if (text[i] == 0x1B && i + 1 < len && text[i + 1] == '\\') {
                    i += 2;
                    break;
                }
                i++;
            }
        } else if (kind >= 0x20 && kind <= 0x2F) { /* nF: ESC ( B and the like */
            while (i < len && (unsigned char)text[i] >= 0x20 && (unsigned char)text[i] <= 0x2F)
                i++;
            if (i < len && (unsigned char)text[i] >= 0x30 && (unsigned char)text[i] <= 0x7E)
                i++;
        } else if (kind >= 0x30 && kind <= 0x7E) /* Fp, Fe, Fs: one byte */
            i++;
    }
    out[at] = '\0';
    *out_len = at;
    return out;
}

/*  A traceback as the run keeps it: lines as sent, or with ANSI escapes
    removed. Non-string lines make the traceback malformed. Returns a new
    array (NULL for a malformed one or out of memory). */
static json_t *traceback_lines(const kb_execution_t *self, json_t *traceback)
{
    if (!traceback || json_is_null(traceback))
        return json_array();
    if (!json_is_array(traceback))
        return NULL;
    json_t *lines = json_array();
    if (!lines)
        return NULL;
    size_t i;
    json_t *line;
    json_array_foreach(traceback, i, line)
    {
        if (!json_is_string(line))
            goto fail;
        json_t *kept;
        if (self->strip_ansi) {
            size_t n;
            char *plain = strip_ansi(json_string_value(line), json_string_length(line), &n);
            if (!plain)
                goto fail;
            kept = json_stringn_nocheck(plain, n);
            free(plain);
        } else
            kept = json_incref(line);
        if (json_array_append_new(lines, kept))
            goto fail;
    }
    return lines;
fail:
    json_decref(lines);
    return NULL;
}

/*  An optional string field: 0 with *out NULL when absent or null, -1 when
    present with another type. */
static int optional_string(json_t *content, const char *key, const char **out)
{
    json_t *value = json_object_get(content, key);
    *out = NULL;
    if (!value || json_is_null(value))
        return 0;
    if (!json_is_string(value))
        return -1;
    *out = json_string_value(value);
    return 0;
}

/*  Build a run error from error-shaped content ({ename, evalue, traceback}),
    as iopub error and execute_reply status error carry it. NULL when
    malformed or out of memory. */
static kb_run_error_t *error_from_content(const kb_execution_t *self, json_t *content)
{
    const char *ename, *evalue;
    if (optional_string(content, "ename", &ename) || optional_string(content, "evalue", &evalue))
        return NULL;
    json_t *lines = traceback_lines(self, json_object_get(content, "traceback"));
    if (!lines)
        return NULL;
    /* Some kernels (metakernel-based ones) leave ename empty; xeus-python
       sends the class's repr, "<class 'ValueError'>": both become a name. */
    char name[256];
    const char *quote = ename ? strchr(ename, '\'') : NULL;
    size_t len = quote ? strcspn(quote + 1, "'") : 0;
    if (ename && strncmp(ename, "<class '", 8) == 0 && len > 0 && len < sizeof name
        && strcmp(quote + 1 + len, "'>") == 0) {
        memcpy(name, quote + 1, len);
        name[len] = 0;
        ename = name;
    }
    kb_run_error_t *error = kb_run_error_new(ename && *ename ? ename : "Error", evalue, lines);
    json_decref(lines);
    return error;
}

/*  True when content carried a count. */
static bool take_execution_count(kb_execution_t *self, json_t *content)
{
    json_t *count = json_object_get(content, "execution_count");
    if (!json_is_integer(count) || json_integer_value(count) < 0)
        return false;
    self->execution_count = json_integer_value(count);
    return true;
}

/*  Make err the run's error (takes ownership) and emit it. */
static void install_error(kb_execution_t *self, kb_run_error_t *err)
{
    kb_run_error_destroy(&self->result->error);
    self->result->error = err;
    self->error_seen = true;
    emit(self, KB_EVENT_ERROR, kb_run_error_to_json(err));
}

/*  The held-back reply error becomes the run's error, unless an iopub error
    came meanwhile. */
static void settle_reply_error(kb_execution_t *self)
{
    if (!self->reply_error)
        return;
    if (self->result->error) {
        kb_run_error_destroy(&self->reply_error);
        return;
    }
    kb_run_error_t *err = self->reply_error;
    self->reply_error = NULL;
    install_error(self, err);
}

/* ---- Iopub ---------------------------------------------------------------- */

/*  stream: STDOUT/STDERR {text, timestamp}, the timestamp being the date
    of the message's header when the kernel gave one. */
static int fold_stream(kb_execution_t *self, json_t *content, const char *date)
{
    const char *name = json_string_value(json_object_get(content, "name"));
    bool is_stderr;
    if (name && strcmp(name, "stdout") == 0)
        is_stderr = false;
    else if (name && strcmp(name, "stderr") == 0)
        is_stderr = true;
    else
        return -1;
    /* A list of strings is joined, as nbformat stores streams. */
    json_t *text = kb_json_text(json_object_get(content, "text"));
    if (!text)
        return -1;
    apply_pending_clear(self);
    const char *bytes = json_string_value(text);
    size_t len = json_string_length(text);
    kb_runlog_count_sent(self->log, is_stderr ? KB_OUTPUT_STDERR : KB_OUTPUT_STDOUT, len);
    size_t keep = kb_utf8_prefix(bytes, len, room_left(self));
    size_t kept
        = keep > 0 ? keep_text(self, is_stderr ? KB_LOG_STDERR : KB_LOG_STDOUT, bytes, keep, date)
                   : 0;
    self->kept_bytes += kept;
    if (kept < len) {
        self->dropped_bytes += len - kept;
        note_dropped(self);
    }
    json_decref(text);
    return 1;
}

/*  stream, its content left unparsed by the wire (kb_msg_t.raw_content):
    one pass counts the text and finds its channel; the kept part is then
    decoded straight into the log. Output past the cap is counted, never
    stored. */
static int fold_stream_raw(kb_execution_t *self, const kb_msg_t *msg)
{
    const char *json = (const char *)msg->raw_content.data;
    size_t size = msg->raw_content.size;
    kb_scan_stream_t scan;
    size_t kept;
    kb_log_channel_t channel;
    if (self->log) {
        apply_pending_clear(self);
        long long cursor = -1;
        kept = kb_runlog_append_scan(self->log, json, size, room_left(self), msg->date, &scan,
                                     &cursor);
        if (kept == (size_t)-1)
            return -1;
        channel = strcmp(scan.name, "stderr") == 0 ? KB_LOG_STDERR : KB_LOG_STDOUT;
        if (kept > 0 && self->emit)
            self->emit(channel == KB_LOG_STDOUT ? KB_EVENT_STDOUT : KB_EVENT_STDERR, NULL, cursor,
                       self->emit_arg);
    } else {
        /* No log: the text goes through keep_text into the result. */
        kb_buf_t text = KB_BUF_INIT;
        int rc = kb_scan_stream(json, size, room_left(self), &text, &scan, NULL);
        bool known = strcmp(scan.name, "stdout") == 0 || strcmp(scan.name, "stderr") == 0;
        if (rc != 0 || !scan.text_present || !known) {
            kb_buf_free(&text);
            return -1;
        }
        channel = strcmp(scan.name, "stderr") == 0 ? KB_LOG_STDERR : KB_LOG_STDOUT;
        apply_pending_clear(self);
        kept = text.len ? keep_text(self, channel, kb_buf_cstr(&text), text.len, msg->date) : 0;
        kb_buf_free(&text);
    }
    kb_runlog_count_sent(self->log, channel == KB_LOG_STDERR ? KB_OUTPUT_STDERR : KB_OUTPUT_STDOUT,
                         scan.text_bytes);
    self->kept_bytes += kept;
    if (kept < scan.text_bytes) {
        self->dropped_bytes += scan.text_bytes - kept;
        note_dropped(self);
    }
    return 1;
}

static void keep_output(kb_execution_t *self, json_t *data, json_t *metadata,
                        const char *display_id, bool is_main_result);

/*  display_data and execute_result. */
static int fold_output(kb_execution_t *self, json_t *content, bool is_main_result)
{
    json_t *data = json_object_get(content, "data");
    json_t *metadata = json_object_get(content, "metadata");
    if (!json_is_object(data))
        return -1;
    if (!json_is_object(metadata))
        metadata = NULL; /* absent or not an object: {} */
    const char *display_id = NULL;
    json_t *transient = json_object_get(content, "transient");
    if (json_is_object(transient))
        display_id = json_string_value(json_object_get(transient, "display_id"));
    if (is_main_result)
        take_execution_count(self, content);
    keep_output(self, data, metadata, display_id, is_main_result);
    return 1;
}

/*  Keep one output bundle (borrowed) within the caps, and emit it. */
static void keep_output(kb_execution_t *self, json_t *data, json_t *metadata,
                        const char *display_id, bool is_main_result)
{
    apply_pending_clear(self);
    size_t bytes = bundle_bytes(data, metadata);
    kb_runlog_count_sent(self->log, KB_OUTPUT_DISPLAY, bytes);
    /*  The run's own result (execute_result) is what a caller reads first:
        a small one is kept past the cap, which it exceeds by that much. */
    bool reserved = is_main_result && bytes <= KB_MAIN_RESULT_RESERVE;
    if (bytes > bundle_room(self, bytes) && !reserved) {
        self->dropped_bytes += bytes;
        note_dropped(self);
        return;
    }
    /* The bundle is shared with the message, which the caller frees after
       this call: no copy of what may be megabytes of image. */
    kb_output_t *out = kb_result_append_output(self->result, json_incref(data),
                                               json_incref(metadata), display_id, is_main_result);
    if (!out)
        return;
    self->kept_bytes += bytes;
    if (self->log)
        kb_runlog_charge(self->log, bytes);
    emit(self, KB_EVENT_DISPLAY, kb_output_to_json(out));
}

/*  The held-back page payloads become results entries (not main), after
    every other entry of the run. */
static void settle_pages(kb_execution_t *self)
{
    size_t i;
    json_t *data;
    json_array_foreach(self->pages, i, data) keep_output(self, data, NULL, NULL, false);
    json_decref(self->pages);
    self->pages = NULL;
}

/*  IPython's pager (`obj?`, `%psource`, `%prun`, `%page`, ...) answers in
    execute_reply's payload, {source: "page", data: bundle, start}, not on
    iopub: each page's bundle is held for settle_pages. The other kinds
    (set_next_input, edit_magic, ask_exit) ask a frontend's editor or
    window for something a run has not: they are left out
    (docs/results.md). */
static void hold_pages(kb_execution_t *self, json_t *content)
{
    size_t i;
    json_t *payload;
    json_array_foreach(json_object_get(content, "payload"), i, payload)
    {
        const char *source = json_string_value(json_object_get(payload, "source"));
        json_t *data = json_object_get(payload, "data");
        if (!source || strcmp(source, "page") != 0 || !json_is_object(data))
            continue;
        if (!self->pages)
            KB_NOT_NULL(self->pages = json_array());
        json_array_append(self->pages, data);
    }
}

static int fold_update_display(kb_execution_t *self, json_t *content)
{
    json_t *data = json_object_get(content, "data");
    json_t *metadata = json_object_get(content, "metadata");
    const char *display_id
        = json_string_value(json_object_get(json_object_get(content, "transient"), "display_id"));
    if (!json_is_object(data) || !display_id)
        return -1;
    if (!json_is_object(metadata))
        metadata = NULL;

    /* Bytes freed and taken by replacing every matching entry. */
    size_t bytes = bundle_bytes(data, metadata);
    kb_runlog_count_sent(self->log, KB_OUTPUT_DISPLAY, bytes);
    size_t old_bytes = 0, matches = 0;
    for (size_t i = 0; i < self->result->outputs_len; i++) {
        const kb_output_t *out = &self->result->outputs[i];
        if (!out->display_id || strcmp(out->display_id, display_id) != 0)
            continue;
        old_bytes += bundle_bytes(out->data, out->metadata);
        matches++;
    }
    if (matches > 0) {
        size_t base = self->kept_bytes >= old_bytes ? self->kept_bytes - old_bytes : 0;
        if (bytes > (SIZE_MAX - base) / matches
            || base + bytes * matches > self->max_output_bytes) {
            self->dropped_bytes += bytes * matches;
            note_dropped(self);
            return 1;
        }
        kb_result_update_display(self->result, display_id, data, metadata);
        self->kept_bytes = base + bytes * matches;
    }
    /* Emitted also when no entry of this run matches: the display may
       belong to an earlier run that a follower still shows. */
    emit(self, KB_EVENT_DISPLAY_UPDATE,
         json_pack("{s:s, s:o}", "display_id", display_id, "data", json_deep_copy(data)));
    return 1;
}

static int fold_clear_output(kb_execution_t *self, json_t *content)
{
    bool wait = json_is_true(json_object_get(content, "wait"));
    if (wait)
        self->clear_pending = true;
    else
        clear_gathered(self);
    emit(self, KB_EVENT_CLEAR_OUTPUT, json_pack("{s:b}", "wait", wait));
    return 1;
}

static int fold_error(kb_execution_t *self, json_t *content)
{
    kb_run_error_t *err = error_from_content(self, content);
    if (!err)
        return -1;
    /* The error is the run's next output, as nbclient and JupyterLab take
       it: a clear_output(wait=true) before it clears what it waited on. */
    apply_pending_clear(self);
    /* The kernel's own word wins over what its reply may have said. */
    kb_run_error_destroy(&self->reply_error);
    self->iopub_error = true;
    install_error(self, err);
    return 1;
}

static int fold_status(kb_execution_t *self, json_t *content)
{
    const char *state = json_string_value(json_object_get(content, "execution_state"));
    if (!state)
        return -1;
    if (strcmp(state, "idle") == 0) {
        self->has_idle = true;
        /* Iopub is ordered: after idle no iopub error of this run can come. */
        if (self->has_reply) {
            settle_pages(self);
            settle_reply_error(self);
        }
    }
    return 1;
}

/*  A message the kernel did not publish because it was over the max
    message size (python/kernelbridge_display/guard.py sends this note in
    its place): its output is lost, and the result says so. */
static int fold_refused(kb_execution_t *self, json_t *content)
{
    const char *type = json_string_value(json_object_get(content, "msg_type"));
    json_int_t bytes = json_integer_value(json_object_get(content, "bytes"));
    json_int_t limit = json_integer_value(json_object_get(content, "limit"));
    if (!type || bytes <= 0 || limit <= 0)
        return -1;
    char note[240], value[200];
    snprintf(note, sizeof note,
             "a %.40s message of %lld bytes, over the max message size of %lld bytes, was not "
             "sent by the kernel (--max-message-size); its output is lost",
             type, (long long)bytes, (long long)limit);
    snprintf(value, sizeof value,
             "the kernel had a %.40s message of %lld bytes, over the max message size of %lld "
             "bytes; it was refused and its output is lost",
             type, (long long)bytes, (long long)limit);
    self->result->truncated = true;
    kb_execution_system(self, note);
    if (!self->result->error) {
        kb_run_error_t *err = kb_run_error_new("MessageTooLarge", value, NULL);
        if (err)
            install_error(self, err);
    }
    return 1;
}

int kb_execution_fold_iopub(kb_execution_t *self, const kb_msg_t *msg)
{
    assert(self);
    assert(msg);
    if (!self->result || !msg->parent_msg_id || strcmp(msg->parent_msg_id, self->msg_id) != 0)
        return 0;
    const char *type = msg->msg_type;
    json_t *content = msg->content;
    if (!type || !json_is_object(content))
        return -1;
    if (strcmp(type, "stream") == 0)
        return msg->raw_content.data ? fold_stream_raw(self, msg)
                                     : fold_stream(self, content, msg->date);
    if (strcmp(type, "display_data") == 0)
        return fold_output(self, content, false);
    if (strcmp(type, "execute_result") == 0)
        return fold_output(self, content, true);
    if (strcmp(type, "update_display_data") == 0)
        return fold_update_display(self, content);
    if (strcmp(type, "clear_output") == 0)
        return fold_clear_output(self, content);
    if (strcmp(type, "error") == 0)
        return fold_error(self, content);
    if (strcmp(type, "status") == 0)
        return fold_status(self, content);
    if (strcmp(type, "kernelbridge_refused") == 0)
        return fold_refused(self, content);
    if (strcmp(type, "execute_input") == 0) {
        if (take_execution_count(self, content))
            emit(self, KB_EVENT_INPUT,
                 json_pack("{s:I}", "execution_count", (json_int_t)self->execution_count));
        return 1;
    }
    return 1; /* comm_*, debug_event, ...: nothing for the result */
}

/* ---- Shell ---------------------------------------------------------------- */

int kb_execution_fold_shell(kb_execution_t *self, const kb_msg_t *msg)
{
    assert(self);
    assert(msg);
    if (!self->result || !msg->parent_msg_id || strcmp(msg->parent_msg_id, self->msg_id) != 0)
        return 0;
    json_t *content = msg->content;
    if (!msg->msg_type || strcmp(msg->msg_type, "execute_reply") != 0 || !json_is_object(content)
        || self->has_reply)
        return -1;
    const char *status = json_string_value(json_object_get(content, "status"));
    if (!status)
        return -1;

    kb_run_error_t *err = NULL;
    /* "abort" is the spelling of protocol 4 kernels. */
    bool aborted = strcmp(status, "aborted") == 0 || strcmp(status, "abort") == 0;
    if (strcmp(status, "error") == 0) {
        if (!(err = error_from_content(self, content)))
            return -1;
    } else if (aborted) {
        if (!(err = kb_run_error_new("ExecutionAborted", "execution aborted by the kernel", NULL)))
            return -1;
    }
    self->has_reply = true;
    take_execution_count(self, content);
    hold_pages(self, content);
    if (self->has_idle)
        settle_pages(self);
    if (err && !self->iopub_error) {
        kb_run_error_destroy(&self->reply_error);
        self->reply_error = err;
        self->error_seen = true;
        if (self->has_idle)
            settle_reply_error(self);
    } else
        kb_run_error_destroy(&err);
    return 1;
}

/* ---- State and end of the run -------------------------------------------- */

bool kb_execution_has_reply(const kb_execution_t *self)
{
    assert(self);
    return self->has_reply;
}

bool kb_execution_has_idle(const kb_execution_t *self)
{
    assert(self);
    return self->has_idle;
}

bool kb_execution_complete(const kb_execution_t *self)
{
    assert(self);
    return self->has_reply && self->has_idle;
}

bool kb_execution_has_error(const kb_execution_t *self)
{
    assert(self);
    return self->error_seen;
}

long long kb_execution_count(const kb_execution_t *self)
{
    assert(self);
    return self->execution_count;
}

void kb_execution_system(kb_execution_t *self, const char *text)
{
    assert(self);
    assert(text);
    keep_text(self, KB_LOG_SYSTEM, text, strlen(text), NULL);
}

void kb_execution_set_error(kb_execution_t *self, const char *name, const char *value, bool force)
{
    assert(self);
    assert(self->result);
    assert(name);
    if (force)
        kb_run_error_destroy(&self->reply_error);
    else
        settle_reply_error(self); /* the run ends now: the reply's error counts */
    if (self->result->error && !force)
        return;
    kb_run_error_t *err = kb_run_error_new(name, value, NULL);
    if (err)
        install_error(self, err);
}

kb_result_t *kb_execution_finish(kb_execution_t *self, kb_reason_t reason, int exit_code,
                                 const char *signal, const char *raw_reason)
{
    assert(self);
    assert(self->result); /* finished only once */
    settle_pages(self);
    settle_reply_error(self);
    if (self->dropped_bytes > 0) {
        char line[160];
        snprintf(line, sizeof line, "%zu bytes of output were dropped (the cap is %zu bytes%s)",
                 self->dropped_bytes, self->max_output_bytes,
                 self->log && kb_runlog_stopped(self->log) ? "; the daemon's output memory is full"
                                                           : "");
        kb_execution_system(self, line);
    }
    kb_result_t *result = self->result;
    self->result = NULL;
    result->execution_count = self->execution_count;
    result->reason = reason;
    result->has_exit_code = exit_code >= 0;
    result->exit_code = exit_code >= 0 ? exit_code : 0;
    result->signal = signal;
    result->raw_reason = kb_xstrdup(raw_reason);
    return result;
}
