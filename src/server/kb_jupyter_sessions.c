/*  kb_jupyter_sessions.c - /api/sessions, as JupyterLab opens notebooks
    through it: a session {id, path, name, type, kernel} names one kernel
    (a context) for a document. Kept in memory under a mutex, as Jupyter
    Server keeps its own: a daemon restart forgets the sessions, not their
    kernels. A session whose kernel is gone is dropped when next seen.
    Service calls are made without the lock held. */
#include "server/kb_jupyter.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/kb_alloc.h"
#include "util/kb_clock.h"
#include "util/kb_vec.h"

/*  Sessions at most: each names a document, and there are no more
    documents open than kernels to run them, short of a client gone wrong. */
#define KB_SESSIONS_MAX 4096

typedef struct {
    char id[KB_UUID_LEN + 1];
    char kernel_id[KB_HTTP_ID_MAX + 1];
    char *path, *name, *type;
} kb_session_t;

struct kb_jupyter_sessions {
    pthread_mutex_t lock;
    kb_vec_t items; /* kb_session_t */
};

kb_jupyter_sessions_t *kb_jupyter_sessions_new(void)
{
    kb_jupyter_sessions_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    pthread_mutex_init(&self->lock, NULL);
    kb_vec_init(&self->items, sizeof(kb_session_t), KB_SESSIONS_MAX);
    return self;
}

static void s_session_free(kb_session_t *session)
{
    free(session->path);
    free(session->name);
    free(session->type);
}

void kb_jupyter_sessions_destroy(kb_jupyter_sessions_t **self_p)
{
    kb_jupyter_sessions_t *self = *self_p;
    if (!self)
        return;
    for (size_t i = 0; i < self->items.len; i++)
        s_session_free(kb_vec_at(&self->items, i));
    kb_vec_free(&self->items);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

/* ---- The table (callers hold the lock) ------------------------------------ */

static kb_session_t *s_find(kb_jupyter_sessions_t *self, const char *id, const char *path)
{
    for (size_t i = 0; i < self->items.len; i++) {
        kb_session_t *session = kb_vec_at(&self->items, i);
        if ((id && strcmp(session->id, id) == 0)
            || (path && session->path && strcmp(session->path, path) == 0))
            return session;
    }
    return NULL;
}

static void s_remove(kb_jupyter_sessions_t *self, const char *id)
{
    kb_session_t *session = s_find(self, id, NULL);
    if (!session)
        return;
    size_t i = (size_t)(session - (kb_session_t *)self->items.items);
    s_session_free(session);
    memmove(session, session + 1, (self->items.len - i - 1) * sizeof *session);
    self->items.len--;
}

/*  A copy of a session's fields, to use without the lock. */
typedef struct {
    char id[KB_UUID_LEN + 1];
    char kernel_id[KB_HTTP_ID_MAX + 1];
    json_t *fields; /* {path, name, type} */
} kb_session_copy_t;

static json_t *s_str(const char *text)
{
    return text ? json_string(text) : json_null();
}

static void s_copy(const kb_session_t *session, kb_session_copy_t *out)
{
    memcpy(out->id, session->id, sizeof out->id);
    memcpy(out->kernel_id, session->kernel_id, sizeof out->kernel_id);
    out->fields = json_pack("{s:o, s:o, s:o}", "path", s_str(session->path), "name",
                            s_str(session->name), "type", s_str(session->type));
}

static kb_jupyter_sessions_t *s_sessions(kb_http_req_t *req)
{
    return req->server->sessions;
}

/* ---- Models ---------------------------------------------------------------- */

/*  The session's model, or NULL when its kernel is gone (the session is
    then dropped); err says why for any other failure. */
static json_t *s_model(kb_http_req_t *req, kb_session_copy_t *copy, kb_error_t *err)
{
    json_t *context = kb_service_context_get(req->server->service, copy->kernel_id, err);
    if (!context) {
        if (err->code == KB_ERR_SESSION_NOT_FOUND) {
            kb_jupyter_sessions_t *sessions = s_sessions(req);
            pthread_mutex_lock(&sessions->lock);
            s_remove(sessions, copy->id);
            pthread_mutex_unlock(&sessions->lock);
        }
        return NULL;
    }
    json_t *kernel = kb_jupyter_kernel_model(context);
    json_decref(context);
    json_t *model = json_deep_copy(copy->fields);
    if (!model || !kernel) {
        json_decref(model);
        json_decref(kernel);
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return NULL;
    }
    json_object_set_new(model, "id", json_string(copy->id));
    json_object_set_new(model, "kernel", kernel);
    /* Jupyter Server 1.x still sends the notebook model of older clients */
    json_object_set_new(model, "notebook",
                        json_pack("{s:O, s:O}", "path", json_object_get(copy->fields, "path"),
                                  "name", json_object_get(copy->fields, "name")));
    return model;
}

/*  The session of req->id as a copy; false with 404 queued. */
static bool s_get_copy(kb_http_req_t *req, kb_session_copy_t *copy)
{
    kb_jupyter_sessions_t *sessions = s_sessions(req);
    pthread_mutex_lock(&sessions->lock);
    kb_session_t *session = s_find(sessions, req->id, NULL);
    if (session)
        s_copy(session, copy);
    pthread_mutex_unlock(&sessions->lock);
    if (!session)
        kb_http_reply_errorf(req, KB_ERR_NOT_FOUND, "Session not found: %s", req->id);
    return session != NULL;
}

static void s_reply_session(kb_http_req_t *req, unsigned status, kb_session_copy_t *copy)
{
    kb_error_t err = { KB_OK, "" };
    json_t *model = s_model(req, copy, &err);
    json_decref(copy->fields);
    if (model)
        kb_http_reply_json(req, status, model);
    else if (err.code == KB_ERR_SESSION_NOT_FOUND)
        kb_http_reply_errorf(req, KB_ERR_NOT_FOUND, "Session not found: %s (its kernel is gone)",
                             copy->id);
    else
        kb_http_reply_error(req, &err);
}

/* ---- Kernels ---------------------------------------------------------------- */

/*  The kernel a session body names: an existing one (its kernel_id into
    kernel_id), else a new one as its kernel object asks. false with the
    reply queued. */
static bool s_kernel_for(kb_http_req_t *req, const kb_session_request_t *body, char *kernel_id,
                         bool *started)
{
    kb_error_t err = { KB_OK, "" };
    json_t *context;
    *started = false;
    if (body->kernel_id) {
        context = kb_service_context_get(req->server->service, body->kernel_id, &err);
        if (!context) {
            kb_http_reply_errorf(req, KB_ERR_BAD_REQUEST, "Kernel does not exist: %s",
                                 body->kernel_id);
            return false;
        }
    } else {
        kb_kernel_request_t kernel;
        if (kb_kernel_request_read(&kernel, body->kernel, &err) != 0) {
            kb_http_reply_error(req, &err);
            return false;
        }
        context = kb_jupyter_start_kernel(req, &kernel, &err);
        kb_kernel_request_clear(&kernel);
        if (!context)
            return false;
        *started = true;
    }
    const char *id = json_string_value(json_object_get(context, "kernel_id"));
    snprintf(kernel_id, KB_HTTP_ID_MAX + 1, "%s", id ? id : "");
    json_decref(context);
    return true;
}

/* ---- Routes ---------------------------------------------------------------- */

void kb_jupyter_route_sessions_list(kb_http_req_t *req)
{
    kb_jupyter_sessions_t *sessions = s_sessions(req);
    kb_vec_t copies;
    kb_vec_init(&copies, sizeof(kb_session_copy_t), 0);
    pthread_mutex_lock(&sessions->lock);
    for (size_t i = 0; i < sessions->items.len; i++) {
        kb_session_copy_t copy;
        s_copy(kb_vec_at(&sessions->items, i), &copy);
        if (kb_vec_push(&copies, &copy) != KB_BUF_OK)
            json_decref(copy.fields);
    }
    pthread_mutex_unlock(&sessions->lock);
    json_t *list = json_array();
    for (size_t i = 0; i < copies.len; i++) {
        kb_session_copy_t *copy = kb_vec_at(&copies, i);
        kb_error_t err = { KB_OK, "" };
        json_t *model = s_model(req, copy, &err);
        if (model)
            json_array_append_new(list, model);
        json_decref(copy->fields);
    }
    kb_vec_free(&copies);
    kb_http_reply_json(req, MHD_HTTP_OK, list);
}

void kb_jupyter_route_session_create(kb_http_req_t *req)
{
    kb_error_t err = { KB_OK, "" };
    kb_session_request_t body;
    if (kb_session_request_parse(&body, req->body.data, req->body.len, &err) != 0) {
        kb_http_reply_error(req, &err);
        return;
    }
    if (!body.path) {
        kb_http_reply_errorf(req, KB_ERR_BAD_REQUEST, "field path is required");
        goto done;
    }
    kb_jupyter_sessions_t *sessions = s_sessions(req);
    kb_session_copy_t copy = { .fields = NULL };
    /*  A document has one session: asked again, the same one. */
    pthread_mutex_lock(&sessions->lock);
    kb_session_t *existing = s_find(sessions, NULL, body.path);
    if (existing)
        s_copy(existing, &copy);
    pthread_mutex_unlock(&sessions->lock);
    if (existing) {
        s_reply_session(req, MHD_HTTP_CREATED, &copy);
        goto done;
    }
    kb_session_t session = { .path = kb_xstrdup(body.path),
                             .name = kb_xstrdup(body.name),
                             .type = kb_xstrdup(body.type) };
    bool started;
    if (!s_kernel_for(req, &body, session.kernel_id, &started)) {
        s_session_free(&session);
        goto done;
    }
    char *seed = kb_random_id("session/");
    if (seed)
        kb_uuid_from(seed, session.id);
    free(seed);
    pthread_mutex_lock(&sessions->lock);
    kb_buf_status_t kept = seed ? kb_vec_push(&sessions->items, &session) : KB_BUF_NOMEM;
    if (kept == KB_BUF_OK)
        s_copy(&session, &copy);
    pthread_mutex_unlock(&sessions->lock);
    if (kept != KB_BUF_OK) {
        s_session_free(&session);
        if (started)
            kb_service_context_delete(req->server->service, session.kernel_id, &err);
        if (kept == KB_BUF_OVER_CAP)
            kb_http_reply_errorf(req, KB_ERR_TOO_MANY_CONTEXTS, "%d sessions are open already",
                                 KB_SESSIONS_MAX);
        else
            kb_http_reply_errorf(req, KB_ERR_INTERNAL, "out of memory for a session");
        goto done;
    }
    s_reply_session(req, MHD_HTTP_CREATED, &copy);
done:
    kb_session_request_clear(&body);
}

void kb_jupyter_route_session_get(kb_http_req_t *req)
{
    kb_session_copy_t copy;
    if (s_get_copy(req, &copy))
        s_reply_session(req, MHD_HTTP_OK, &copy);
}

/*  PATCH: a new path, name or type, or another kernel: one named by id,
    or a new one of a kernelspec (the old one is then shut down, as Jupyter
    Server does). */
void kb_jupyter_route_session_patch(kb_http_req_t *req)
{
    kb_error_t err = { KB_OK, "" };
    kb_session_request_t body;
    if (kb_session_request_parse(&body, req->body.data, req->body.len, &err) != 0) {
        kb_http_reply_error(req, &err);
        return;
    }
    kb_session_copy_t copy;
    if (!s_get_copy(req, &copy))
        goto done;
    json_decref(copy.fields);
    char kernel_id[KB_HTTP_ID_MAX + 1] = "";
    bool started = false;
    if (body.kernel && !s_kernel_for(req, &body, kernel_id, &started))
        goto done;
    kb_jupyter_sessions_t *sessions = s_sessions(req);
    pthread_mutex_lock(&sessions->lock);
    kb_session_t *session = s_find(sessions, req->id, NULL);
    char old_kernel[KB_HTTP_ID_MAX + 1] = "";
    if (session) {
        const char *fields[3] = { body.path, body.name, body.type };
        char **into[3] = { &session->path, &session->name, &session->type };
        for (int i = 0; i < 3; i++) {
            char *value = kb_xstrdup(fields[i]);
            if (value) {
                free(*into[i]);
                *into[i] = value;
            }
        }
        if (kernel_id[0]) {
            memcpy(old_kernel, session->kernel_id, sizeof old_kernel);
            memcpy(session->kernel_id, kernel_id, sizeof kernel_id);
        }
        s_copy(session, &copy);
    }
    pthread_mutex_unlock(&sessions->lock);
    if (!session) {
        kb_http_reply_errorf(req, KB_ERR_NOT_FOUND, "Session not found: %s", req->id);
        goto done;
    }
    if (started && old_kernel[0] && strcmp(old_kernel, kernel_id) != 0)
        kb_service_context_delete(req->server->service, old_kernel, &err);
    s_reply_session(req, MHD_HTTP_OK, &copy);
done:
    kb_session_request_clear(&body);
}

/*  DELETE: the session and its kernel. */
void kb_jupyter_route_session_delete(kb_http_req_t *req)
{
    kb_session_copy_t copy;
    if (!s_get_copy(req, &copy))
        return;
    json_decref(copy.fields);
    kb_error_t err = { KB_OK, "" };
    int rc = kb_service_context_delete(req->server->service, copy.kernel_id, &err);
    if (rc != 0 && err.code != KB_ERR_SESSION_NOT_FOUND) {
        kb_http_reply_error(req, &err);
        return;
    }
    kb_jupyter_sessions_t *sessions = s_sessions(req);
    pthread_mutex_lock(&sessions->lock);
    s_remove(sessions, copy.id);
    pthread_mutex_unlock(&sessions->lock);
    kb_http_reply_empty(req, MHD_HTTP_NO_CONTENT);
}
