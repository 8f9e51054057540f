/*  kb_checkpoints.c - the store of checkpoints: frozen forks waiting on
    their sockets, and the requests for kernels sent to them. Engine
    thread only.
*/
#include "service/fork/kb_checkpoints.h"

#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "kernel/kb_launch.h"
#include "service/durable/kb_persist.h"
#include "kernel/kb_proctree.h"
#include "util/kb_alloc.h"
#include "util/kb_buf.h"
#include "util/kb_clock.h"

#define KB_ANSWER_MAX 4096 /* a frozen process answers one short JSON line */

typedef struct {
    char *id, *context_id, *path;
    pid_t pid;
    unsigned long long pid_start;
    long long execution_count;
    double created_at;
} kb_checkpoint_t;

typedef struct {
    kb_checkpoints_t *store;
    int fd;
    kb_io_t io;
    char answer[KB_ANSWER_MAX];
    size_t len;
    kb_checkpoint_done_fn *done;
    void *arg;
} kb_cp_request_t;

struct kb_checkpoints {
    kb_loop_t *loop;
    kb_persist_t *persist; /* state.db's writer: checkpoints are recorded; or NULL */
    zlistx_t *items;       /* kb_checkpoint_t *, oldest first */
    zlistx_t *requests;    /* kb_cp_request_t * in flight */
};

kb_checkpoints_t *kb_checkpoints_new(kb_loop_t *loop)
{
    kb_checkpoints_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->loop = loop;
    self->items = zlistx_new();
    self->requests = zlistx_new();
    if (!self->items || !self->requests)
        kb_checkpoints_destroy(&self, false);
    return self;
}

/*  SIGTERM to the frozen process, when it is still the one recorded (it
    removes its socket and exits); the socket removed here too. */
static void s_end(kb_checkpoint_t *item)
{
    if (item->pid > 0 && kb_proc_start_time(item->pid) == item->pid_start)
        kill(item->pid, SIGTERM);
    if (item->path)
        unlink(item->path);
}

/*  Its row in state.db (kind "checkpoint"), so that a next daemon takes it
    back; or the row deleted. */
static void s_record(kb_checkpoints_t *self, const kb_checkpoint_t *item, bool present)
{
    if (!self->persist)
        return;
    if (!present) {
        kb_persist_context_delete(self->persist, item->id);
        return;
    }
    json_t *extra = json_pack("{s:s, s:s}", "context_id", item->context_id, "path", item->path);
    char *text = extra ? json_dumps(extra, JSON_COMPACT) : NULL;
    json_decref(extra);
    kb_db_context_t row = { .id = item->id,
                            .kind = "checkpoint",
                            .extra = text,
                            .pid = item->pid,
                            .pid_start = item->pid_start,
                            .execution_count = item->execution_count,
                            .created_at = item->created_at,
                            .last_activity_at = item->created_at };
    if (text)
        kb_persist_context_put(self->persist, &row);
    free(text);
}

void kb_checkpoints_set_persist(kb_checkpoints_t *self, kb_persist_t *persist)
{
    self->persist = persist;
    for (kb_checkpoint_t *item = zlistx_first(self->items); item; item = zlistx_next(self->items))
        s_record(self, item, true);
}

static void s_free(kb_checkpoint_t *item)
{
    free(item->id);
    free(item->context_id);
    free(item->path);
    free(item);
}

static void s_request_end(kb_cp_request_t *request, pid_t pid, const char *why)
{
    kb_checkpoints_t *self = request->store;
    void *handle = zlistx_find(self->requests, request);
    if (handle)
        zlistx_detach(self->requests, handle);
    kb_io_stop(&request->io);
    close(request->fd);
    if (request->done)
        request->done(request->arg, pid, why);
    free(request);
}

void kb_checkpoints_destroy(kb_checkpoints_t **self_p, bool end)
{
    if (!self_p || !*self_p)
        return;
    kb_checkpoints_t *self = *self_p;
    *self_p = NULL;
    kb_cp_request_t *request;
    while (self->requests && (request = zlistx_first(self->requests)))
        s_request_end(request, 0, "the service is stopping");
    kb_checkpoint_t *item;
    while (self->items && (item = zlistx_detach(self->items, NULL))) {
        if (end) {
            s_end(item);
            s_record(self, item, false);
        }
        s_free(item);
    }
    zlistx_destroy(&self->items);
    zlistx_destroy(&self->requests);
    free(self);
}

int kb_checkpoints_name(const char *dir, const char *prefix, char **id, char **path,
                        kb_error_t *err)
{
    char *fresh = kb_random_id(prefix);
    *id = fresh;
    *path = fresh ? kb_buf_sprintf("%s/cp-%s.sock", dir, fresh + 3) : NULL;
    if (!*id || !*path) {
        free(*id);
        free(*path);
        *id = *path = NULL;
        return kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
    }
    if (strlen(*path) >= sizeof((struct sockaddr_un *)0)->sun_path) {
        kb_error_set(err, KB_ERR_INTERNAL,
                     "%s: too long for a unix socket (use a shorter --state-dir)", *path);
        free(*id);
        free(*path);
        *id = *path = NULL;
        return -1;
    }
    return 0;
}

/*  Record a frozen process (its start time recorded, or read now: 0). */
static int s_insert(kb_checkpoints_t *self, const char *id, const char *context_id,
                    const char *path, pid_t pid, unsigned long long recorded,
                    long long execution_count, double created_at, kb_error_t *err)
{
    unsigned long long start = kb_proc_start_time(pid);
    if (recorded && start != recorded)
        start = 0; /* another process now */
    kb_checkpoint_t *item = calloc(1, sizeof *item);
    if (item)
        *item = (kb_checkpoint_t){ .id = kb_xstrdup(id),
                                   .context_id = kb_xstrdup(context_id),
                                   .path = kb_xstrdup(path),
                                   .pid = pid,
                                   .pid_start = start,
                                   .execution_count = execution_count,
                                   .created_at = created_at };
    if (!item || start == 0 || !zlistx_add_end(self->items, item)) {
        kb_error_set(err, start == 0 ? KB_ERR_KERNEL_START_FAILED : KB_ERR_INTERNAL,
                     start == 0 ? "the checkpoint's process %d is gone" : "out of memory",
                     (int)pid);
        if (item) {
            s_end(item);
            s_record(self, item, false);
            s_free(item);
        }
        return -1;
    }
    s_record(self, item, true);
    return 0;
}

int kb_checkpoints_add(kb_checkpoints_t *self, const char *id, const char *context_id,
                       const char *path, pid_t pid, long long execution_count, kb_error_t *err)
{
    return s_insert(self, id, context_id, path, pid, 0, execution_count, kb_now(), err);
}

void kb_checkpoints_adopt(kb_checkpoints_t *self, const json_t *row, bool context_came)
{
    const char *id = json_string_value(json_object_get(row, "id"));
    const char *context_id = json_string_value(json_object_get(row, "context_id"));
    const char *path = json_string_value(json_object_get(row, "path"));
    pid_t pid = (pid_t)json_integer_value(json_object_get(row, "pid"));
    unsigned long long start
        = (unsigned long long)json_integer_value(json_object_get(row, "pid_start"));
    kb_checkpoint_t gone
        = { .id = (char *)id, .path = (char *)path, .pid = pid, .pid_start = start };
    if (!id || !context_id || !path || !start || !context_came
        || s_insert(self, id, context_id, path, pid, start,
                    json_integer_value(json_object_get(row, "execution_count")),
                    json_number_value(json_object_get(row, "created_at")), NULL)
               != 0) {
        if (id && path && start) /* its context did not come back: it goes too */
            s_end(&gone);
        if (id)
            s_record(self, &gone, false);
    }
}

static kb_checkpoint_t *s_find(const kb_checkpoints_t *self, const char *context_id, const char *id)
{
    for (kb_checkpoint_t *item = zlistx_first(self->items); item; item = zlistx_next(self->items))
        if (strcmp(item->id, id) == 0 && (!context_id || strcmp(item->context_id, context_id) == 0))
            return item;
    return NULL;
}

/*  A client's checkpoint, not one taken for a rollback. */
static bool s_listed(const kb_checkpoint_t *item)
{
    return strncmp(item->id, KB_CHECKPOINT_PREFIX, strlen(KB_CHECKPOINT_PREFIX)) == 0;
}

size_t kb_checkpoints_count(const kb_checkpoints_t *self, const char *context_id)
{
    size_t count = 0;
    for (kb_checkpoint_t *item = zlistx_first(self->items); item; item = zlistx_next(self->items))
        count += strcmp(item->context_id, context_id) == 0 && s_listed(item);
    return count;
}

static json_t *s_json(const kb_checkpoint_t *item)
{
    char created[40];
    kb_iso_time(item->created_at, created, sizeof created);
    uint64_t uss = 0;
    bool alive = kb_proc_start_time(item->pid) == item->pid_start
                 && kb_proc_memory(item->pid, &uss, NULL) == 0;
    return json_pack("{s:s, s:s, s:I, s:s, s:o}", "checkpoint_id", item->id, "context_id",
                     item->context_id, "execution_count", (json_int_t)item->execution_count,
                     "created_at", created, "memory_bytes",
                     alive ? json_integer((json_int_t)uss) : json_null());
}

json_t *kb_checkpoints_json(const kb_checkpoints_t *self, const char *context_id, const char *id)
{
    kb_checkpoint_t *item = s_find(self, context_id, id);
    return item ? s_json(item) : NULL;
}

json_t *kb_checkpoints_list(const kb_checkpoints_t *self, const char *context_id)
{
    json_t *list = json_array();
    for (kb_checkpoint_t *item = zlistx_first(self->items); list && item;
         item = zlistx_next(self->items))
        if (strcmp(item->context_id, context_id) == 0 && s_listed(item))
            json_array_append_new(list, s_json(item));
    return list ? json_pack("{s:o}", "checkpoints", list) : NULL;
}

bool kb_checkpoints_alive(const kb_checkpoints_t *self, const char *context_id, const char *id)
{
    kb_checkpoint_t *item = s_find(self, context_id, id);
    return item && kb_proc_start_time(item->pid) == item->pid_start;
}

bool kb_checkpoints_owns(const kb_checkpoints_t *self, pid_t pid, const char *path)
{
    for (kb_checkpoint_t *cp = zlistx_first(self->items); cp; cp = zlistx_next(self->items))
        if ((pid > 0 && cp->pid == pid) || (path && strcmp(cp->path, path) == 0))
            return true;
    return false;
}

long long kb_checkpoints_execution_count(const kb_checkpoints_t *self, const char *id)
{
    kb_checkpoint_t *item = s_find(self, NULL, id);
    return item ? item->execution_count : -1;
}

static void s_remove(kb_checkpoints_t *self, kb_checkpoint_t *item)
{
    void *handle = zlistx_find(self->items, item);
    if (handle)
        zlistx_detach(self->items, handle);
    s_end(item);
    s_record(self, item, false);
    s_free(item);
}

int kb_checkpoints_delete(kb_checkpoints_t *self, const char *context_id, const char *id,
                          kb_error_t *err)
{
    kb_checkpoint_t *item = s_find(self, context_id, id);
    if (!item)
        return kb_error_set(err, KB_ERR_CHECKPOINT_NOT_FOUND, "context %s has no checkpoint %s",
                            context_id, id);
    s_remove(self, item);
    return 0;
}

void kb_checkpoints_drop_context(kb_checkpoints_t *self, const char *context_id)
{
    kb_checkpoint_t *item = self ? zlistx_first(self->items) : NULL;
    while (item) {
        kb_checkpoint_t *next = zlistx_next(self->items);
        if (strcmp(item->context_id, context_id) == 0)
            s_remove(self, item);
        item = next;
    }
}

/* ---- requests ----------------------------------------------------------------------- */

/*  The frozen process's answer: {"pid": N} or {"error": "..."}. */
static void s_on_answer(kb_io_t *io, void *arg)
{
    kb_cp_request_t *request = arg;
    ssize_t n = read(request->fd, request->answer + request->len,
                     sizeof request->answer - 1 - request->len);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n > 0)
        request->len += (size_t)n;
    request->answer[request->len] = 0;
    char *newline = strchr(request->answer, '\n');
    if (!newline && n > 0 && request->len < sizeof request->answer - 1)
        return;
    json_t *answer = json_loads(request->answer, JSON_DISABLE_EOF_CHECK, NULL);
    json_t *pid = json_object_get(answer, "pid");
    const char *error = json_string_value(json_object_get(answer, "error"));
    char why[600];
    snprintf(why, sizeof why, "the checkpoint %s",
             error            ? error
             : answer && !pid ? "answered something else than a pid"
                              : "closed its socket without an answer");
    if (json_is_integer(pid) && json_integer_value(pid) > 0)
        s_request_end(request, (pid_t)json_integer_value(pid), NULL);
    else
        s_request_end(request, 0, why);
    json_decref(answer);
}

/*  A connected unix socket to path, non-blocking once connected, or -1. */
static int s_connect(const char *path)
{
    struct sockaddr_un address = { .sun_family = AF_UNIX };
    snprintf(address.sun_path, sizeof address.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int kb_checkpoints_request(kb_checkpoints_t *self, const char *id, const json_t *connection,
                           double timeout, kb_checkpoint_done_fn *done, void *arg, kb_error_t *err)
{
    kb_checkpoint_t *item = s_find(self, NULL, id);
    if (!item || kb_proc_start_time(item->pid) != item->pid_start)
        return kb_error_set(err, KB_ERR_CHECKPOINT_NOT_FOUND, "checkpoint %s %s", id,
                            item ? "is gone: its process ended" : "does not exist");
    json_t *line = json_pack("{s:O, s:f}", "connection", connection, "timeout", timeout);
    char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
    json_decref(line);
    char *message = text ? kb_buf_sprintf("%s\n", text) : NULL;
    free(text);
    int fd = message ? s_connect(item->path) : -1;
    /*  One short line into an empty socket buffer: written at once. */
    size_t size = message ? strlen(message) : 0;
    bool sent = fd >= 0 && write(fd, message, size) == (ssize_t)size;
    int saved = errno;
    free(message);
    kb_cp_request_t *request = sent ? calloc(1, sizeof *request) : NULL;
    if (!request) {
        if (fd >= 0)
            close(fd);
        return kb_error_set(err, KB_ERR_KERNEL_START_FAILED, "checkpoint %s: %s", id,
                            sent ? "out of memory" : strerror(saved));
    }
    *request = (kb_cp_request_t){ .store = self, .fd = fd, .done = done, .arg = arg };
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (!zlistx_add_end(self->requests, request)
        || kb_io_start(self->loop, &request->io, fd, s_on_answer, request) != 0) {
        request->done = NULL;
        s_request_end(request, 0, NULL);
        return kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
    }
    return 0;
}

void kb_checkpoints_forget_requests(kb_checkpoints_t *self, void *arg)
{
    for (kb_cp_request_t *request = zlistx_first(self->requests); request;
         request = zlistx_next(self->requests))
        if (request->arg == arg)
            request->done = NULL;
}
