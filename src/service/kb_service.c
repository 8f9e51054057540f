/*  kb_service.c - the public C API: hands each call to the engine thread
    and waits for its answer.

    The engine is a czmq actor running a zloop. Calls from any thread are
    queued in a mailbox (a locked list) and an eventfd wakes the loop; the
    caller then waits on the request's own condition variable. No caller
    ever touches engine state; the only shared objects are the mailbox,
    the requests (while their caller waits) and event streams.
*/
#include "service/kb_engine.h"
#include "service/kb_request.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

struct kb_service {
    kb_engine_t *engine; /* handed to the actor; touched only there after start */
    zactor_t *actor;
    char *sandbox_id; /* copy for kb_service_sandbox_id */
    int eventfd;
    pthread_mutex_t mailbox_lock;
    kb_request_t *head, *tail;
    bool closed; /* no more requests accepted */
};

/* ---- time and ids --------------------------------------------------------- */

double kb_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

void kb_iso_time(double t, char *buf, size_t size)
{
    time_t secs = (time_t)t;
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, size - n, ".%03dZ", (int)((t - (double)secs) * 1000));
}

char *kb_random_id(const char *prefix)
{
    unsigned char raw[8];
    char hex[17];
    if (RAND_bytes(raw, sizeof raw) != 1)
        return NULL;
    for (int i = 0; i < 8; i++)
        sprintf(hex + 2 * i, "%02x", raw[i]);
    return zsys_sprintf("%s%s", prefix, hex);
}

/* ---- requests ------------------------------------------------------------- */

void kb_request_answer(kb_request_t *request)
{
    pthread_mutex_lock(&request->lock);
    request->done = true;
    pthread_cond_signal(&request->cond);
    pthread_mutex_unlock(&request->lock);
}

void kb_request_fail(kb_request_t *request, kb_code_t code, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    request->err.code = code;
    vsnprintf(request->err.message, sizeof request->err.message, fmt, args);
    va_end(args);
    request->rc = -1;
    json_decref(request->result);
    request->result = NULL;
    kb_request_answer(request);
}

static void s_request_init(kb_request_t *request, kb_request_type_t type)
{
    memset(request, 0, sizeof *request);
    request->type = type;
    request->timer = -1;
    request->cursor = -1;
    pthread_mutex_init(&request->lock, NULL);
    pthread_cond_init(&request->cond, NULL);
}

/*  Post a request and wait for its answer. Returns request->rc. */
static int s_call(kb_service_t *self, kb_request_t *request, kb_error_t *err)
{
    pthread_mutex_lock(&self->mailbox_lock);
    bool closed = self->closed;
    if (!closed) {
        if (self->tail)
            self->tail->next = request;
        else
            self->head = request;
        self->tail = request;
    }
    pthread_mutex_unlock(&self->mailbox_lock);
    if (closed) {
        request->rc = -1;
        request->err.code = KB_ERR_UNAVAILABLE;
        snprintf(request->err.message, sizeof request->err.message, "the service is stopping");
    } else {
        uint64_t one = 1;
        if (write(self->eventfd, &one, sizeof one) < 0 && errno != EAGAIN)
            abort(); /* an eventfd write cannot fail otherwise */
        pthread_mutex_lock(&request->lock);
        while (!request->done)
            pthread_cond_wait(&request->cond, &request->lock);
        pthread_mutex_unlock(&request->lock);
    }
    pthread_mutex_destroy(&request->lock);
    pthread_cond_destroy(&request->cond);
    if (err) {
        if (request->rc == 0)
            kb_error_clear(err);
        else
            *err = request->err;
    }
    return request->rc;
}

/* ---- the engine actor ------------------------------------------------------ */

static int s_on_mailbox(zloop_t *loop, zmq_pollitem_t *item, void *arg)
{
    kb_service_t *self = arg;
    uint64_t count;
    if (read(self->eventfd, &count, sizeof count) < 0 && errno != EAGAIN)
        return 0;
    pthread_mutex_lock(&self->mailbox_lock);
    kb_request_t *request = self->head;
    self->head = self->tail = NULL;
    pthread_mutex_unlock(&self->mailbox_lock);
    while (request) {
        kb_request_t *next = request->next; /* the answer may free it */
        request->next = NULL;
        if (self->engine->stopping)
            kb_request_fail(request, KB_ERR_UNAVAILABLE, "the service is stopping");
        else
            kb_engine_handle(self->engine, request);
        request = next;
    }
    return 0;
}

static int s_on_stop_tick(zloop_t *loop, int timer_id, void *arg)
{
    kb_engine_t *engine = arg;
    if (zlistx_size(engine->dying) == 0 || zclock_mono() >= engine->stop_deadline_ms)
        return -1; /* ends the loop; the rest is killed on the way out */
    return 0;
}

void kb_engine_stop_begin(kb_engine_t *self);

static int s_on_pipe(zloop_t *loop, zsock_t *pipe, void *arg)
{
    kb_service_t *self = arg;
    char *command = zstr_recv(pipe);
    if (!command)
        return -1;
    bool term = strcmp(command, "$TERM") == 0;
    zstr_free(&command);
    if (!term)
        return 0;
    pthread_mutex_lock(&self->mailbox_lock);
    self->closed = true;
    pthread_mutex_unlock(&self->mailbox_lock);
    s_on_mailbox(loop, NULL, self); /* answer whatever is still queued */
    kb_engine_stop_begin(self->engine);
    self->engine->stop_deadline_ms = zclock_mono() + 5000;
    if (zlistx_size(self->engine->dying) == 0)
        return -1;
    self->engine->stop_timer = zloop_timer(loop, 20, 0, s_on_stop_tick, self->engine);
    return 0;
}

void kb_engine_destroy_all(kb_engine_t *self);

static void s_engine_actor(zsock_t *pipe, void *arg)
{
    kb_service_t *self = arg;
    kb_engine_t *engine = self->engine;
    engine->loop = zloop_new();
    zloop_set_nonstop(engine->loop, true); /* the daemon handles signals itself */
    zmq_pollitem_t mailbox = { NULL, self->eventfd, ZMQ_POLLIN, 0 };
    zloop_poller(engine->loop, &mailbox, s_on_mailbox, self);
    zloop_reader(engine->loop, pipe, s_on_pipe, self);
    zsock_signal(pipe, 0);
    kb_pool_start(engine);
    zloop_start(engine->loop);
    kb_engine_destroy_all(engine);
    zloop_destroy(&engine->loop);
    OPENSSL_thread_stop(); /* this thread's random-generator state */
}

/* ---- service lifecycle ------------------------------------------------------ */

static char *s_make_state_dir(const char *given, bool *own, kb_error_t *err)
{
    if (given) {
        if (mkdir(given, 0700) != 0 && errno != EEXIST) {
            kb_error_set(err, KB_ERR_BAD_REQUEST, "cannot create state dir %s: %s", given,
                         strerror(errno));
            return NULL;
        }
        chmod(given, 0700);
        *own = false;
        return strdup(given);
    }
    const char *base = getenv("XDG_RUNTIME_DIR");
    if (!base || access(base, W_OK) != 0)
        base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    char *path = zsys_sprintf("%s/kernelbridge-XXXXXX", base);
    if (!mkdtemp(path)) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot create a state dir under %s: %s", base,
                     strerror(errno));
        free(path);
        return NULL;
    }
    *own = true;
    return path;
}

/*  sandbox id: configured, else KB_SANDBOX_ID, else kept in the state dir. */
static char *s_sandbox_id(const char *configured, const char *state_dir, bool own)
{
    if (configured && *configured)
        return strdup(configured);
    const char *env = getenv("KB_SANDBOX_ID");
    if (env && *env)
        return strdup(env);
    char *path = zsys_sprintf("%s/sandbox_id", state_dir);
    char line[128] = "";
    FILE *file = own ? NULL : fopen(path, "r");
    if (file) {
        if (!fgets(line, sizeof line, file))
            line[0] = 0;
        fclose(file);
        line[strcspn(line, "\r\n")] = 0;
    }
    char *id = line[0] ? strdup(line) : kb_random_id("sb_");
    if (!line[0] && !own && (file = fopen(path, "w"))) {
        fprintf(file, "%s\n", id);
        fclose(file);
    }
    free(path);
    return id;
}

kb_service_t *kb_service_new(const kb_service_config_t *config, kb_error_t *err)
{
    kb_service_config_t defaults = { 0 };
    if (!config)
        config = &defaults;
    kb_error_clear(err);
    char problem[256];
    if (kb_kernel_map_validate(config->kernel_map, problem, sizeof problem) != 0) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "%s", problem);
        return NULL;
    }
    if (config->transport && strcmp(config->transport, "ipc") != 0
        && strcmp(config->transport, "tcp") != 0) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "transport must be ipc or tcp, not %s",
                     config->transport);
        return NULL;
    }
    /*  The daemon handles its own signals; czmq must not install handlers
        that would stop the engine's loop on SIGINT. */
    zsys_handler_set(NULL);
    zsys_init();

    kb_service_t *self = calloc(1, sizeof *self);
    kb_engine_t *engine = calloc(1, sizeof *engine);
    if (!self || !engine) {
        free(self);
        free(engine);
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return NULL;
    }
    self->engine = engine;
    self->eventfd = -1;
    pthread_mutex_init(&self->mailbox_lock, NULL);
    engine->config = *config;
    kb_service_config_t *c = &engine->config;
    c->state_dir = c->sandbox_id = c->transport = c->system_python = NULL;
    c->kernel_map = c->pool = NULL;
    if (c->interrupt_grace <= 0)
        c->interrupt_grace = 2.0;
    if (c->start_timeout <= 0)
        c->start_timeout = 60;
    if (c->completion_grace <= 0)
        c->completion_grace = 3.0;
    if (!c->max_contexts)
        c->max_contexts = 64;
    if (!c->max_code_bytes)
        c->max_code_bytes = 8 << 20;
    if (!c->max_output_bytes)
        c->max_output_bytes = 64 << 20;
    if (!c->max_processes)
        c->max_processes = 1000;
    if (!c->max_process_bytes)
        c->max_process_bytes = (size_t)256 << 20;
    c->transport = config->transport && strcmp(config->transport, "tcp") == 0 ? "tcp" : "ipc";
    engine->system_python
        = strdup(config->system_python ? config->system_python : KB_SYSTEM_PYTHON);
    size_t maps = 0;
    while (config->kernel_map && config->kernel_map[maps])
        maps++;
    engine->kernel_map = calloc(maps + 1, sizeof(char *));
    for (size_t i = 0; i < maps; i++)
        engine->kernel_map[i] = strdup(config->kernel_map[i]);

    engine->state_dir = s_make_state_dir(config->state_dir, &engine->own_state_dir, err);
    if (!engine->state_dir)
        goto fail;
    if (strcmp(c->transport, "ipc") == 0) {
        /*  Short on purpose: xeus-based kernels refuse ipc endpoints longer
            than 31 characters, and a state dir can be any length. */
        engine->ipc_dir = strdup("/tmp/kbXXXXXX");
        if (!mkdtemp(engine->ipc_dir)) {
            kb_error_set(err, KB_ERR_INTERNAL, "cannot create a socket dir in /tmp: %s",
                         strerror(errno));
            goto fail;
        }
    }
    engine->sandbox_id = s_sandbox_id(config->sandbox_id, engine->state_dir, engine->own_state_dir);
    self->sandbox_id = strdup(engine->sandbox_id);
    engine->started_at = kb_now();
    engine->contexts = zhashx_new();
    engine->procs = zhashx_new();
    engine->finished = zlistx_new();
    engine->vanished = zhashx_new();
    zhashx_set_destructor(engine->vanished, (zhashx_destructor_fn *)zstr_free);
    zhashx_set_duplicator(engine->vanished, (zhashx_duplicator_fn *)strdup);
    engine->vanished_order = zlistx_new();
    zlistx_set_destructor(engine->vanished_order, (zlistx_destructor_fn *)zstr_free);
    zlistx_set_duplicator(engine->vanished_order, (zlistx_duplicator_fn *)strdup);
    engine->dying = zlistx_new();
    engine->stop_timer = -1;

    if (kb_pool_configure(engine, config->pool, err) != 0)
        goto fail;
    self->eventfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (self->eventfd < 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "eventfd: %s", strerror(errno));
        goto fail;
    }
    self->actor = zactor_new(s_engine_actor, self);
    if (!self->actor) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot start the engine thread");
        goto fail;
    }
    return self;
fail:
    kb_service_destroy(&self);
    return NULL;
}

static void s_engine_free(kb_engine_t *engine)
{
    if (!engine)
        return;
    zhashx_destroy(&engine->contexts);
    zhashx_destroy(&engine->procs);
    zlistx_destroy(&engine->finished);
    zhashx_destroy(&engine->vanished);
    zlistx_destroy(&engine->vanished_order);
    zlistx_destroy(&engine->dying);
    kb_pool_destroy(engine);
    if (engine->own_state_dir && engine->state_dir)
        rmdir(engine->state_dir);
    if (engine->ipc_dir)
        rmdir(engine->ipc_dir);
    free(engine->ipc_dir);
    free(engine->state_dir);
    free(engine->sandbox_id);
    free(engine->system_python);
    kb_strv_free(engine->kernel_map);
    free(engine);
}

void kb_service_stop(kb_service_t *self)
{
    zactor_destroy(&self->actor); /* $TERM: runs end, kernels stop, loop returns */
}

void kb_service_destroy(kb_service_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_service_t *self = *self_p;
    *self_p = NULL;
    kb_service_stop(self);
    s_engine_free(self->engine);
    if (self->eventfd >= 0)
        close(self->eventfd);
    pthread_mutex_destroy(&self->mailbox_lock);
    free(self->sandbox_id);
    free(self);
}

const char *kb_service_sandbox_id(kb_service_t *self)
{
    return self->sandbox_id;
}

/* ---- calls ------------------------------------------------------------------- */

static json_t *s_call_json(kb_service_t *self, kb_request_t *request, kb_error_t *err)
{
    if (s_call(self, request, err) != 0) {
        json_decref(request->result);
        return NULL;
    }
    return request->result;
}

json_t *kb_service_health(kb_service_t *self)
{
    kb_request_t request;
    s_request_init(&request, KB_REQ_HEALTH);
    return s_call_json(self, &request, NULL);
}

json_t *kb_service_kernelspecs(kb_service_t *self)
{
    kb_request_t request;
    s_request_init(&request, KB_REQ_KERNELSPECS);
    return s_call_json(self, &request, NULL);
}

json_t *kb_service_context_create(kb_service_t *self, const kb_context_opts_t *opts,
                                  kb_error_t *err)
{
    kb_request_t request;
    s_request_init(&request, KB_REQ_CTX_CREATE);
    request.context_opts = opts;
    return s_call_json(self, &request, err);
}

static json_t *s_call_id(kb_service_t *self, kb_request_type_t type, const char *id,
                         kb_error_t *err)
{
    kb_request_t request;
    s_request_init(&request, type);
    request.id = id;
    return s_call_json(self, &request, err);
}

static int s_call_id_rc(kb_service_t *self, kb_request_type_t type, const char *id, kb_error_t *err)
{
    kb_request_t request;
    s_request_init(&request, type);
    request.id = id;
    int rc = s_call(self, &request, err);
    json_decref(request.result);
    return rc;
}

json_t *kb_service_context_default(kb_service_t *self, const kb_context_opts_t *opts,
                                   kb_error_t *err)
{
    kb_request_t request;
    s_request_init(&request, KB_REQ_CTX_DEFAULT);
    request.context_opts = opts;
    return s_call_json(self, &request, err);
}

json_t *kb_service_context_get(kb_service_t *self, const char *context_id, kb_error_t *err)
{
    return s_call_id(self, KB_REQ_CTX_GET, context_id, err);
}

json_t *kb_service_context_list(kb_service_t *self, bool all, kb_error_t *err)
{
    kb_request_t request;
    s_request_init(&request, KB_REQ_CTX_LIST);
    request.all = all;
    return s_call_json(self, &request, err);
}

int kb_service_context_delete(kb_service_t *self, const char *context_id, kb_error_t *err)
{
    return s_call_id_rc(self, KB_REQ_CTX_DELETE, context_id, err);
}

json_t *kb_service_context_restart(kb_service_t *self, const char *context_id, kb_error_t *err)
{
    return s_call_id(self, KB_REQ_CTX_RESTART, context_id, err);
}

int kb_service_context_interrupt(kb_service_t *self, const char *context_id, kb_error_t *err)
{
    return s_call_id_rc(self, KB_REQ_CTX_INTERRUPT, context_id, err);
}

/*  The largest code a run may carry: the service's config, fixed before
    the engine thread starts, so callers' threads may read it. */
static size_t s_max_code_bytes(kb_service_t *self)
{
    return self->engine->config.max_code_bytes;
}

kb_stream_t *kb_service_run_start(kb_service_t *self, const kb_run_opts_t *opts, kb_error_t *err)
{
    if (kb_run_opts_validate(opts, s_max_code_bytes(self), err) != 0)
        return NULL;
    kb_request_t request;
    s_request_init(&request, KB_REQ_RUN);
    request.run_opts = opts;
    request.stream = kb_stream_new();
    if (!request.stream) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return NULL;
    }
    if (s_call(self, &request, err) != 0) {
        json_decref(request.result);
        kb_stream_destroy(&request.stream);
        return NULL;
    }
    json_decref(request.result);
    return request.stream;
}

kb_result_t *kb_service_run(kb_service_t *self, const kb_run_opts_t *opts, kb_event_fn *on_event,
                            void *arg, kb_error_t *err)
{
    kb_stream_t *stream = kb_service_run_start(self, opts, err);
    if (!stream)
        return NULL;
    kb_event_t *event;
    while ((event = kb_stream_next(stream, -1))) {
        if (on_event)
            on_event(event, arg);
        kb_event_destroy(&event);
    }
    kb_result_t *result = kb_stream_take_result(stream);
    kb_stream_destroy(&stream);
    if (!result)
        kb_error_set(err, KB_ERR_INTERNAL, "the run ended without a result");
    return result;
}

json_t *kb_service_process_list(kb_service_t *self, const char *state, const char *context_id,
                                kb_error_t *err)
{
    kb_request_t request;
    s_request_init(&request, KB_REQ_PROC_LIST);
    request.filter_state = state;
    request.filter_context = context_id;
    return s_call_json(self, &request, err);
}

json_t *kb_service_process_get(kb_service_t *self, const char *process_id, kb_error_t *err)
{
    return s_call_id(self, KB_REQ_PROC_GET, process_id, err);
}

json_t *kb_service_process_result(kb_service_t *self, const char *process_id, kb_error_t *err)
{
    return s_call_id(self, KB_REQ_PROC_RESULT, process_id, err);
}

json_t *kb_service_process_logs(kb_service_t *self, const char *process_id, long long cursor,
                                size_t limit, kb_error_t *err)
{
    kb_request_t request;
    s_request_init(&request, KB_REQ_PROC_LOGS);
    request.id = process_id;
    request.cursor = cursor;
    request.limit = limit;
    return s_call_json(self, &request, err);
}

kb_stream_t *kb_service_process_follow(kb_service_t *self, const char *process_id, long long cursor,
                                       kb_error_t *err)
{
    kb_request_t request;
    s_request_init(&request, KB_REQ_PROC_FOLLOW);
    request.id = process_id;
    request.cursor = cursor;
    request.stream = kb_stream_new();
    if (s_call(self, &request, err) != 0) {
        kb_stream_destroy(&request.stream);
        return NULL;
    }
    return request.stream;
}

json_t *kb_service_process_wait(kb_service_t *self, const char *process_id, double timeout,
                                kb_error_t *err)
{
    kb_request_t request;
    s_request_init(&request, KB_REQ_PROC_WAIT);
    request.id = process_id;
    request.timeout = timeout;
    return s_call_json(self, &request, err);
}

int kb_service_process_signal(kb_service_t *self, const char *process_id, const char *signal,
                              kb_error_t *err)
{
    kb_request_t request;
    s_request_init(&request, KB_REQ_PROC_SIGNAL);
    request.id = process_id;
    request.signal = signal;
    int rc = s_call(self, &request, err);
    json_decref(request.result);
    return rc;
}

int kb_service_process_delete(kb_service_t *self, const char *process_id, kb_error_t *err)
{
    return s_call_id_rc(self, KB_REQ_PROC_DELETE, process_id, err);
}
