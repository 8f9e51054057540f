/*  kb_stream.c - a locked event queue between the engine and one reader. */
#include "service/output/kb_stream.h"
#include "util/kb_alloc.h"
#include "util/kb_clock.h"
#include "service/run/kb_result_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

typedef struct kb_event_node {
    kb_event_t event;
    /* A text event queued as a frame of a kept log: its JSON is made when
       the reader takes it, so that a queue holds cursors, not copies. */
    kb_runlog_t *log;
    long long cursor;
    bool as_frame;
    struct kb_event_node *next;
} kb_event_node_t;

struct kb_stream {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int refs;
    bool detached;   /* the reader destroyed its handle */
    bool closed;     /* the last event was pushed */
    bool drained;    /* the reader took the last event */
    bool final_only; /* only RESULT and END are queued */
    kb_event_node_t *head, *tail;
    kb_result_t *result;
    kb_runlog_t *result_log; /* where result's logs are copied from when taken */
};

static const char *s_event_names[]
    = { "start",  "stdout", "stderr", "display", "display_update", "clear_output", "error",
        "system", "result", "log",    "eof",     "input" };

const char *kb_event_type_name(kb_event_type_t type)
{
    return s_event_names[type];
}

void kb_event_destroy(kb_event_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    json_decref((*self_p)->data);
    kb_result_doc_destroy(&(*self_p)->doc);
    free(*self_p); /* the event is the first member of its node */
    *self_p = NULL;
}

kb_stream_t *kb_stream_new(void)
{
    kb_stream_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    pthread_mutex_init(&self->lock, NULL);
    kb_cond_init_monotonic(&self->cond);
    self->refs = 1;
    return self;
}

kb_stream_t *kb_stream_ref(kb_stream_t *self)
{
    pthread_mutex_lock(&self->lock);
    self->refs++;
    pthread_mutex_unlock(&self->lock);
    return self;
}

static void s_release(kb_stream_t *self)
{
    pthread_mutex_lock(&self->lock);
    bool last = --self->refs == 0;
    pthread_mutex_unlock(&self->lock);
    if (!last)
        return;
    kb_event_node_t *node = self->head;
    while (node) {
        kb_event_node_t *next = node->next;
        json_decref(node->event.data);
        kb_result_doc_destroy(&node->event.doc);
        kb_runlog_unref(&node->log);
        free(node);
        node = next;
    }
    kb_result_destroy(&self->result);
    kb_runlog_unref(&self->result_log);
    pthread_cond_destroy(&self->cond);
    pthread_mutex_destroy(&self->lock);
    free(self);
}

void kb_stream_unref(kb_stream_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    s_release(*self_p);
    *self_p = NULL;
}

void kb_stream_destroy(kb_stream_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_stream_t *self = *self_p;
    pthread_mutex_lock(&self->lock);
    self->detached = true;
    pthread_mutex_unlock(&self->lock);
    s_release(self);
    *self_p = NULL;
}

void kb_stream_keep_final_only(kb_stream_t *self)
{
    self->final_only = true;
}

bool kb_stream_final_only(const kb_stream_t *self)
{
    return self->final_only;
}

/*  Queue node (taking it over); false when it was dropped. */
static bool s_enqueue(kb_stream_t *self, kb_event_node_t *node)
{
    pthread_mutex_lock(&self->lock);
    if (self->detached || self->closed) {
        pthread_mutex_unlock(&self->lock);
        return false;
    }
    node->next = NULL;
    if (self->tail)
        self->tail->next = node;
    else
        self->head = node;
    self->tail = node;
    if (node->event.type == KB_EVENT_RESULT || node->event.type == KB_EVENT_END)
        self->closed = true;
    pthread_cond_signal(&self->cond);
    pthread_mutex_unlock(&self->lock);
    return true;
}

static bool s_wanted(const kb_stream_t *self, kb_event_type_t type)
{
    /* final_only is set before sharing: read without the lock */
    return !self->final_only || type == KB_EVENT_RESULT || type == KB_EVENT_END;
}

void kb_stream_push(kb_stream_t *self, kb_event_type_t type, json_t *data)
{
    kb_event_node_t *node = s_wanted(self, type) ? kb_xcalloc(1, sizeof *node) : NULL;
    if (node) {
        node->event.type = type;
        node->event.data = data;
        if (s_enqueue(self, node))
            return;
        free(node);
    }
    json_decref(data);
}

void kb_stream_push_text(kb_stream_t *self, kb_event_type_t type, kb_runlog_t *log,
                         long long cursor)
{
    kb_event_node_t *node = s_wanted(self, type) ? kb_xcalloc(1, sizeof *node) : NULL;
    if (!node)
        return;
    node->event.type = type;
    node->log = kb_runlog_ref(log);
    node->cursor = cursor;
    node->as_frame = type == KB_EVENT_LOG;
    if (!s_enqueue(self, node)) {
        kb_runlog_unref(&node->log);
        free(node);
    }
}

void kb_stream_push_result(kb_stream_t *self, json_t *head, kb_result_doc_t *doc)
{
    kb_event_node_t *node = kb_xcalloc(1, sizeof *node);
    node->event.type = KB_EVENT_RESULT;
    node->event.data = head;
    node->event.doc = doc;
    if (s_enqueue(self, node))
        return;
    free(node);
    json_decref(head);
    kb_result_doc_destroy(&doc);
}

void kb_stream_set_result(kb_stream_t *self, kb_result_t *result, kb_runlog_t *log)
{
    pthread_mutex_lock(&self->lock);
    if (self->detached || self->result) {
        pthread_mutex_unlock(&self->lock);
        kb_result_destroy(&result);
        return;
    }
    self->result = result;
    self->result_log = log ? kb_runlog_ref(log) : NULL;
    pthread_mutex_unlock(&self->lock);
}

kb_result_t *kb_stream_take_result(kb_stream_t *self)
{
    pthread_mutex_lock(&self->lock);
    kb_result_t *result = self->result;
    kb_runlog_t *log = self->result_log;
    self->result = NULL;
    self->result_log = NULL;
    pthread_mutex_unlock(&self->lock);
    /* The caller wants a struct of its own: the logs are copied now. */
    for (int i = 0; result && log && i < 2; i++) {
        kb_log_channel_t channel = i == 0 ? KB_LOG_STDOUT : KB_LOG_STDERR;
        size_t len = 0;
        char *text = kb_runlog_view_copy(log, channel, &len);
        if (text)
            kb_result_append_log(result, i == 1, text, len);
        free(text);
    }
    kb_runlog_unref(&log);
    return result;
}

bool kb_stream_detached(kb_stream_t *self)
{
    pthread_mutex_lock(&self->lock);
    bool detached = self->detached;
    pthread_mutex_unlock(&self->lock);
    return detached;
}

kb_event_t *kb_stream_next(kb_stream_t *self, int timeout_ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    if (timeout_ms > 0) {
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
        if (deadline.tv_nsec >= 1000000000) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000;
        }
    }
    pthread_mutex_lock(&self->lock);
    while (!self->head && !self->drained) {
        if (timeout_ms == 0)
            break;
        if (timeout_ms < 0)
            pthread_cond_wait(&self->cond, &self->lock);
        else if (pthread_cond_timedwait(&self->cond, &self->lock, &deadline) != 0)
            break;
    }
    kb_event_node_t *node = self->head;
    if (node) {
        self->head = node->next;
        if (!self->head)
            self->tail = NULL;
        if (self->closed && !self->head)
            self->drained = true;
    }
    pthread_mutex_unlock(&self->lock);
    if (node && node->log) {
        node->event.data = node->as_frame ? kb_runlog_frame_json(node->log, node->cursor)
                                          : kb_runlog_event_json(node->log, node->cursor);
        if (!node->event.data)
            node->event.data = json_object(); /* out of memory: the event, empty */
        kb_runlog_unref(&node->log);
    }
    return node ? &node->event : NULL;
}

bool kb_stream_ended(kb_stream_t *self)
{
    pthread_mutex_lock(&self->lock);
    bool ended = self->drained;
    pthread_mutex_unlock(&self->lock);
    return ended;
}
