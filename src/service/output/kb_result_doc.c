/*  kb_result_doc.c - a result rendered as JSON text on demand: the head's
    members dumped one by one, and the logs escaped straight from the kept
    output into the reader's buffer. */
#include "service/output/kb_result_doc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/kb_buf.h"

typedef enum {
    KB_DOC_PREFIX, /* "{...,\"logs\":{\"stdout\":\"" */
    KB_DOC_STDOUT,
    KB_DOC_MIDDLE, /* "\",\"stderr\":\"" */
    KB_DOC_STDERR,
    KB_DOC_SUFFIX, /* "\"},...}" */
    KB_DOC_DONE,
} kb_doc_phase_t;

struct kb_result_doc {
    json_t *head;
    kb_runlog_t *log;
    kb_doc_phase_t phase;
    kb_buf_t piece; /* the text of the current PREFIX, MIDDLE or SUFFIX */
    size_t sent;    /* bytes of piece handed out, or of the log escaped */
};

kb_result_doc_t *kb_result_doc_new(json_t *head, kb_runlog_t *log)
{
    kb_result_doc_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->head = json_incref(head);
    self->log = kb_runlog_ref(log);
    return self;
}

void kb_result_doc_destroy(kb_result_doc_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_result_doc_t *self = *self_p;
    *self_p = NULL;
    json_decref(self->head);
    kb_runlog_unref(&self->log);
    kb_buf_free(&self->piece);
    free(self);
}

/*  The members of head before "logs" (before = true) or after it, each as
    "key":value, separated and ended as the piece needs. */
static kb_buf_status_t s_members(const kb_result_doc_t *self, kb_buf_t *buf, bool before)
{
    bool in_range = before;
    bool first = true;
    const char *key;
    json_t *value;
    json_object_foreach(self->head, key, value)
    {
        if (strcmp(key, "logs") == 0) {
            if (before)
                break;
            in_range = true;
            continue;
        }
        if (!in_range)
            continue;
        if (!before || !first)
            kb_buf_putc(buf, ',');
        first = false;
        json_t *name = json_string(key);
        kb_buf_append_json(buf, name, JSON_COMPACT);
        json_decref(name);
        kb_buf_putc(buf, ':');
        kb_buf_append_json(buf, value, JSON_COMPACT);
    }
    if (before && !first)
        kb_buf_putc(buf, ',');
    return kb_buf_status(buf);
}

/*  Make the piece of the phase just entered. */
static kb_buf_status_t s_piece(kb_result_doc_t *self)
{
    kb_buf_reset(&self->piece);
    self->sent = 0;
    switch (self->phase) {
        case KB_DOC_PREFIX:
            kb_buf_putc(&self->piece, '{');
            s_members(self, &self->piece, true);
            return kb_buf_puts(&self->piece, "\"logs\":{\"stdout\":\"");
        case KB_DOC_MIDDLE:
            return kb_buf_puts(&self->piece, "\",\"stderr\":\"");
        case KB_DOC_SUFFIX:
            kb_buf_puts(&self->piece, "\"}");
            s_members(self, &self->piece, false);
            return kb_buf_putc(&self->piece, '}');
        default:
            return KB_BUF_OK;
    }
}

size_t kb_result_doc_read(kb_result_doc_t *self, char *buf, size_t cap)
{
    if (self->phase == KB_DOC_PREFIX && self->sent == 0 && self->piece.len == 0
        && s_piece(self) != KB_BUF_OK)
        return (size_t)-1;
    size_t written = 0;
    while (written < cap && self->phase != KB_DOC_DONE) {
        size_t n;
        if (self->phase == KB_DOC_STDOUT || self->phase == KB_DOC_STDERR) {
            n = kb_runlog_view_escape(self->log,
                                      self->phase == KB_DOC_STDOUT ? KB_LOG_STDOUT : KB_LOG_STDERR,
                                      &self->sent, buf + written, cap - written);
            if (n == 0 && cap - written >= 6) {
                /* The end of the log (an escape needs at most 6 bytes). */
                self->phase++;
                if (s_piece(self) != KB_BUF_OK)
                    return (size_t)-1;
            } else if (n == 0)
                break;
        } else {
            n = self->piece.len - self->sent;
            if (n > cap - written)
                n = cap - written;
            memcpy(buf + written, self->piece.data + self->sent, n);
            self->sent += n;
            if (self->sent == self->piece.len) {
                self->phase++;
                if (s_piece(self) != KB_BUF_OK)
                    return (size_t)-1;
            }
        }
        written += n;
    }
    return written;
}

json_t *kb_result_doc_json(const kb_result_doc_t *self)
{
    json_t *copy = json_deep_copy(self->head);
    json_t *logs = json_object();
    if (!copy || !logs)
        goto fail;
    static const kb_log_channel_t channels[2] = { KB_LOG_STDOUT, KB_LOG_STDERR };
    static const char *const names[2] = { "stdout", "stderr" };
    for (int i = 0; i < 2; i++) {
        size_t len = 0;
        char *text = kb_runlog_view_copy(self->log, channels[i], &len);
        if (!text || json_object_set_new(logs, names[i], json_stringn_nocheck(text, len)) != 0) {
            free(text);
            goto fail;
        }
        free(text);
    }
    if (json_object_set_new(copy, "logs", logs) != 0)
        goto fail_copy;
    return copy;
fail:
    json_decref(logs);
fail_copy:
    json_decref(copy);
    return NULL;
}
