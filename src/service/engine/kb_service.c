/*  kb_service.c - the public C API: hands each call to the engine thread
    and waits for its answer.

    The engine is a czmq actor running a kb_loop. Calls from any thread are
    queued in a mailbox (a locked list) and an eventfd wakes the loop; the
    caller then waits on the request's own condition variable. No caller
    ever touches engine state; the only shared objects are the mailbox,
    the requests (while their caller waits) and event streams.
*/
#include "service/jupyter/kb_hub.h"
#include "service/engine/kb_dispatch.h"
#include "service/engine/kb_engine.h"
#include "service/engine/kb_engine_orphans.h"
#include "service/engine/kb_request.h"
#include "wire/kb_wsmsg.h"

#define KB_STDIN_CONNECT_MS                                                                        \
    1000 /* at most, for a websocket client's stdin (kb_service_channels_open) */

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <pthread.h>
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
    kb_io_t mailbox_io; /* engine thread: the eventfd's watch */
    zsock_t *pipe;      /* engine thread: the actor's pipe, and its watch */
    kb_io_t pipe_io;
    pthread_mutex_t mailbox_lock;
    kb_call_t *head, *tail;
    bool closed;       /* no more requests accepted */
    bool start_failed; /* the engine thread could not watch its mailbox */
};

/*  Post a request and wait for its answer. Returns request->rc. */
static int s_call(kb_service_t *self, kb_call_t *request, kb_error_t *err)
{
    pthread_mutex_lock(&self->mailbox_lock);
    bool closed = self->closed;
    if (!closed) {
        if (self->tail)
            kb_call_set_next(self->tail, request);
        else
            self->head = request;
        self->tail = request;
    }
    pthread_mutex_unlock(&self->mailbox_lock);
    if (closed) {
        kb_call_refuse(request, KB_ERR_UNAVAILABLE, "the service is stopping");
    } else {
        uint64_t one = 1;
        if (write(self->eventfd, &one, sizeof one) < 0 && errno != EAGAIN)
            abort(); /* an eventfd write cannot fail otherwise */
        kb_call_wait(request);
    }
    if (err) {
        if (request->rc == 0)
            kb_error_clear(err);
        else
            *err = request->err;
    }
    return request->rc;
}

/* ---- the engine actor ------------------------------------------------------ */

static void s_on_mailbox(kb_io_t *io, void *arg)
{
    kb_service_t *self = arg;
    uint64_t count;
    if (read(self->eventfd, &count, sizeof count) < 0 && errno != EAGAIN)
        return;
    pthread_mutex_lock(&self->mailbox_lock);
    kb_call_t *request = self->head;
    self->head = self->tail = NULL;
    pthread_mutex_unlock(&self->mailbox_lock);
    while (request) {
        kb_call_t *next = request->next; /* the answer may free it */
        kb_call_set_next(request, NULL);
        if (self->engine->stopping)
            kb_call_fail(request, KB_ERR_UNAVAILABLE, "the service is stopping");
        else
            kb_dispatch_handle(self->engine, request);
        request = next;
    }
}

/*  $TERM from the actor's owner: answer what is queued, end every run,
    shut the kernels down, and end the loop once they are gone (5 s at
    most). */
static void s_on_pipe(kb_io_t *io, void *arg)
{
    kb_service_t *self = arg;
    kb_engine_t *engine = self->engine;
    char *command;
    bool term = false;
    while ((command = zstr_recv_nowait(self->pipe))) {
        term = term || strcmp(command, "$TERM") == 0;
        zstr_free(&command);
    }
    if (!term || engine->stopping)
        return;
    pthread_mutex_lock(&self->mailbox_lock);
    self->closed = true;
    pthread_mutex_unlock(&self->mailbox_lock);
    s_on_mailbox(&self->mailbox_io, self); /* answer whatever is still queued */
    kb_engine_stop(engine);
}

static void s_engine_actor(zsock_t *pipe, void *arg)
{
    kb_service_t *self = arg;
    kb_engine_t *engine = self->engine;
    pthread_setname_np(pthread_self(), "kb-engine"); /* by name in top, schedstat, bench/cpu.py */
    self->pipe = pipe;
    if (kb_io_start(engine->loop, &self->mailbox_io, self->eventfd, s_on_mailbox, self) != 0
        || kb_io_start_zmq(engine->loop, &self->pipe_io, zsock_resolve(pipe), s_on_pipe, self) != 0)
        self->start_failed = true; /* no memory for the watches: kb_service_new fails */
    zsock_signal(pipe, 0);
    if (!self->start_failed) {
        kb_engine_start(engine);
        kb_loop_run(engine->loop);
    }
    kb_engine_destroy_all(engine);
    kb_io_stop(&self->mailbox_io);
    kb_io_stop(&self->pipe_io);
    OPENSSL_thread_stop(); /* this thread's random-generator state */
}

/* ---- service lifecycle ------------------------------------------------------ */

kb_service_t *kb_service_new(const kb_service_config_t *config, kb_error_t *err)
{
    kb_service_config_t defaults = { 0 };
    if (!config)
        config = &defaults;
    kb_error_clear(err);
    if (kb_kernel_map_validate(config->kernel_map, err) != 0)
        return NULL;
    if (config->transport && strcmp(config->transport, "ipc") != 0
        && strcmp(config->transport, "tcp") != 0) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "transport must be ipc or tcp, not %s",
                     config->transport);
        return NULL;
    }
    if ((config->kernel_port_min || config->kernel_port_max)
        && (config->kernel_port_min < 1024 || config->kernel_port_max > 65535
            || config->kernel_port_max < config->kernel_port_min + 4)) {
        kb_error_set(err, KB_ERR_BAD_REQUEST,
                     "kernel ports must be a range of at least 5 within 1024..65535, not %u-%u",
                     config->kernel_port_min, config->kernel_port_max);
        return NULL;
    }
    /*  The daemon handles its own signals; czmq must not install handlers
        that would stop the engine's loop on SIGINT. */
    zsys_handler_set(NULL);
    zsys_init();

    kb_service_t *self = calloc(1, sizeof *self);
    if (!self) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return NULL;
    }
    self->eventfd = -1;
    pthread_mutex_init(&self->mailbox_lock, NULL);
    self->engine = kb_engine_new(config, err);
    if (!self->engine)
        goto fail;
    kb_engine_end_orphans(self->engine); /* before anything is served */
    self->sandbox_id = strdup(self->engine->sandbox_id);
    if (!self->sandbox_id) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        goto fail;
    }
    self->eventfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (self->eventfd < 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "eventfd: %s", strerror(errno));
        goto fail;
    }
    self->actor = zactor_new(s_engine_actor, self);
    if (!self->actor || self->start_failed) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot start the engine thread: %s",
                     self->actor ? "out of memory for its watches" : "zactor_new failed");
        goto fail;
    }
    return self;
fail:
    kb_service_destroy(&self);
    return NULL;
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
    kb_engine_destroy(&self->engine);
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

static json_t *s_call_json(kb_service_t *self, kb_call_t *request, kb_error_t *err)
{
    if (s_call(self, request, err) != 0) {
        json_decref(request->result);
        return NULL;
    }
    return request->result;
}

json_t *kb_service_health(kb_service_t *self)
{
    kb_call_t request;
    kb_call_init(&request, KB_CALL_HEALTH);
    return s_call_json(self, &request, NULL);
}

char *kb_service_metrics(kb_service_t *self)
{
    kb_call_t request;
    kb_call_init(&request, KB_CALL_METRICS);
    if (s_call(self, &request, NULL) != 0) {
        free(request.text);
        return NULL;
    }
    return request.text;
}

json_t *kb_service_kernelspecs(kb_service_t *self)
{
    kb_call_t request;
    kb_call_init(&request, KB_CALL_KERNELSPECS);
    return s_call_json(self, &request, NULL);
}

/* ---- Jupyter's kernel channels ---------------------------------------------- */

kb_channels_t *kb_service_channels_open(kb_service_t *self, const kb_channels_opts_t *opts,
                                        kb_error_t *err)
{
    if (!opts || !opts->kernel_id || !opts->send) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "a kernel id and a send function are required");
        return NULL;
    }
    kb_channels_t *channels = kb_channels_new(opts);
    if (!channels) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return NULL;
    }
    kb_call_t request;
    kb_call_init(&request, KB_CALL_CHANNELS_OPEN);
    request.ask.id = opts->kernel_id;
    request.ask.channels = channels;
    if (s_call(self, &request, err) != 0) {
        kb_channels_destroy(&channels);
        return NULL;
    }
    /*  The kernel's stdin connects in the background: a client's first
        execute must not come before it, or the kernel's input_request
        would be dropped. Waited for here, on the client's own thread,
        a millisecond at a time (a loopback connection takes less). */
    for (int ms = 0; ms < KB_STDIN_CONNECT_MS; ms++) {
        kb_call_t ready;
        kb_call_init(&ready, KB_CALL_CHANNELS_READY);
        ready.ask.channels = channels;
        if (s_call(self, &ready, NULL) != 1)
            break;
        usleep(1000);
    }
    return channels;
}

int kb_service_channels_input(kb_service_t *self, kb_channels_t *channels, bool binary,
                              const void *data, size_t size, kb_error_t *err)
{
    static const kb_channel_t to_kernel[] = {
        [KB_WSMSG_SHELL] = KB_CHANNEL_SHELL,
        [KB_WSMSG_CONTROL] = KB_CHANNEL_CONTROL,
        [KB_WSMSG_STDIN] = KB_CHANNEL_STDIN,
    };
    kb_wsmsg_channel_t channel;
    kb_msg_t *msg = NULL;
    kb_error_t why;
    kb_wsmsg_status_t status
        = kb_wsmsg_parse(kb_channels_v1(channels) ? KB_WSMSG_V1 : KB_WSMSG_LEGACY, binary, data,
                         size, NULL, &channel, &msg, &why);
    if (status != KB_WSMSG_OK || channel > KB_WSMSG_STDIN) {
        kb_msg_destroy(&msg);
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "a %s message: %s",
                            kb_wsmsg_status_str(status), why.message);
    }
    kb_call_t request;
    kb_call_init(&request, KB_CALL_CHANNELS_INPUT);
    request.ask.channels = channels;
    request.ask.msg = msg;
    request.ask.channel = (int)to_kernel[channel];
    int rc = s_call(self, &request, err);
    if (!request.msg_taken)
        kb_msg_destroy(&msg); /* the engine never got it */
    return rc;
}

void kb_service_channels_close(kb_service_t *self, kb_channels_t **channels_p)
{
    if (!channels_p || !*channels_p)
        return;
    kb_call_t request;
    kb_call_init(&request, KB_CALL_CHANNELS_CLOSE);
    request.ask.channels = *channels_p;
    s_call(self, &request, NULL);
    kb_channels_destroy(channels_p);
}

json_t *kb_service_context_create(kb_service_t *self, const kb_context_opts_t *opts,
                                  kb_error_t *err)
{
    if (kb_context_opts_validate(opts, err) != 0)
        return NULL;
    kb_call_t request;
    kb_call_init(&request, KB_CALL_CTX_CREATE);
    request.ask.context_opts = opts;
    return s_call_json(self, &request, err);
}

static json_t *s_call_id(kb_service_t *self, kb_call_type_t type, const char *id, kb_error_t *err)
{
    kb_call_t request;
    kb_call_init(&request, type);
    request.ask.id = id;
    return s_call_json(self, &request, err);
}

static int s_call_id_rc(kb_service_t *self, kb_call_type_t type, const char *id, kb_error_t *err)
{
    kb_call_t request;
    kb_call_init(&request, type);
    request.ask.id = id;
    int rc = s_call(self, &request, err);
    json_decref(request.result);
    return rc;
}

json_t *kb_service_context_default(kb_service_t *self, const kb_context_opts_t *opts,
                                   kb_error_t *err)
{
    /*  Only the language or kernel name counts here. */
    kb_context_opts_t which = { .language = opts ? opts->language : NULL,
                                .kernel_name = opts ? opts->kernel_name : NULL };
    if (kb_context_opts_validate(&which, err) != 0)
        return NULL;
    kb_call_t request;
    kb_call_init(&request, KB_CALL_CTX_DEFAULT);
    request.ask.context_opts = &which;
    return s_call_json(self, &request, err);
}

json_t *kb_service_context_get(kb_service_t *self, const char *context_id, kb_error_t *err)
{
    return s_call_id(self, KB_CALL_CTX_GET, context_id, err);
}

json_t *kb_service_context_list(kb_service_t *self, bool all, kb_error_t *err)
{
    kb_call_t request;
    kb_call_init(&request, KB_CALL_CTX_LIST);
    request.ask.all = all;
    return s_call_json(self, &request, err);
}

int kb_service_context_delete(kb_service_t *self, const char *context_id, kb_error_t *err)
{
    return s_call_id_rc(self, KB_CALL_CTX_DELETE, context_id, err);
}

json_t *kb_service_context_restart(kb_service_t *self, const char *context_id, kb_error_t *err)
{
    return s_call_id(self, KB_CALL_CTX_RESTART, context_id, err);
}

int kb_service_context_interrupt(kb_service_t *self, const char *context_id, kb_error_t *err)
{
    return s_call_id_rc(self, KB_CALL_CTX_INTERRUPT, context_id, err);
}

json_t *kb_service_context_fork(kb_service_t *self, const char *context_id,
                                const kb_fork_opts_t *opts, kb_error_t *err)
{
    if (kb_fork_opts_validate(opts, err) != 0)
        return NULL;
    kb_call_t request;
    kb_call_init(&request, KB_CALL_CTX_FORK);
    request.ask.id = context_id;
    request.ask.fork_opts = opts;
    return s_call_json(self, &request, err);
}

json_t *kb_service_checkpoint_create(kb_service_t *self, const char *context_id, kb_error_t *err)
{
    return s_call_id(self, KB_CALL_CHECKPOINT_CREATE, context_id, err);
}

json_t *kb_service_checkpoint_list(kb_service_t *self, const char *context_id, kb_error_t *err)
{
    return s_call_id(self, KB_CALL_CHECKPOINT_LIST, context_id, err);
}

static json_t *s_call_checkpoint(kb_service_t *self, kb_call_type_t type, const char *context_id,
                                 const char *checkpoint_id, kb_error_t *err)
{
    if (!checkpoint_id) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "a checkpoint_id is required");
        return NULL;
    }
    kb_call_t request;
    kb_call_init(&request, type);
    request.ask.id = context_id;
    request.ask.checkpoint_id = checkpoint_id;
    return s_call_json(self, &request, err);
}

int kb_service_checkpoint_delete(kb_service_t *self, const char *context_id,
                                 const char *checkpoint_id, kb_error_t *err)
{
    if (!checkpoint_id)
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "a checkpoint_id is required");
    kb_call_t request;
    kb_call_init(&request, KB_CALL_CHECKPOINT_DELETE);
    request.ask.id = context_id;
    request.ask.checkpoint_id = checkpoint_id;
    int rc = s_call(self, &request, err);
    json_decref(request.result);
    return rc;
}

json_t *kb_service_context_restore(kb_service_t *self, const char *context_id,
                                   const char *checkpoint_id, kb_error_t *err)
{
    return s_call_checkpoint(self, KB_CALL_CTX_RESTORE, context_id, checkpoint_id, err);
}

/*  The largest code a run may carry: the service's config, fixed before
    the engine thread starts, so callers' threads may read it. */
static size_t s_max_code_bytes(kb_service_t *self)
{
    return self->engine->config.max_code_bytes;
}

static kb_stream_t *s_run_start(kb_service_t *self, const kb_run_opts_t *opts, bool final_only,
                                kb_error_t *err)
{
    if (kb_run_opts_validate(opts, s_max_code_bytes(self), err) != 0)
        return NULL;
    kb_call_t request;
    kb_call_init(&request, KB_CALL_RUN);
    request.ask.run_opts = opts;
    request.ask.stream = kb_stream_new();
    if (!request.ask.stream) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return NULL;
    }
    if (final_only)
        kb_stream_keep_final_only(request.ask.stream);
    if (s_call(self, &request, err) != 0) {
        json_decref(request.result);
        kb_stream_destroy(&request.ask.stream);
        return NULL;
    }
    json_decref(request.result);
    return request.ask.stream;
}

kb_stream_t *kb_service_run_start(kb_service_t *self, const kb_run_opts_t *opts, kb_error_t *err)
{
    return s_run_start(self, opts, false, err);
}

kb_result_doc_t *kb_service_run_doc(kb_service_t *self, const kb_run_opts_t *opts, kb_error_t *err)
{
    kb_stream_t *stream = s_run_start(self, opts, true, err);
    if (!stream)
        return NULL;
    kb_result_doc_t *doc = NULL;
    kb_event_t *event;
    while ((event = kb_stream_next(stream, -1))) {
        if (event->type == KB_EVENT_RESULT) {
            doc = event->doc;
            event->doc = NULL;
        }
        kb_event_destroy(&event);
    }
    kb_stream_destroy(&stream);
    if (!doc)
        kb_error_set(err, KB_ERR_INTERNAL, "the run ended without a result");
    return doc;
}

/*  A document's JSON, for the callers that want one value. */
static json_t *s_doc_json(kb_result_doc_t *doc, kb_error_t *err)
{
    if (!doc)
        return NULL;
    json_t *json = kb_result_doc_json(doc);
    kb_result_doc_destroy(&doc);
    if (!json)
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
    return json;
}

json_t *kb_service_run_json(kb_service_t *self, const kb_run_opts_t *opts, kb_error_t *err)
{
    return s_doc_json(kb_service_run_doc(self, opts, err), err);
}

kb_result_t *kb_service_run(kb_service_t *self, const kb_run_opts_t *opts, kb_event_fn *on_event,
                            void *arg, kb_error_t *err)
{
    kb_stream_t *stream = s_run_start(self, opts, !on_event, err);
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
    kb_call_t request;
    kb_call_init(&request, KB_CALL_PROC_LIST);
    request.ask.filter_state = state;
    request.ask.filter_context = context_id;
    return s_call_json(self, &request, err);
}

json_t *kb_service_process_get(kb_service_t *self, const char *process_id, kb_error_t *err)
{
    return s_call_id(self, KB_CALL_PROC_GET, process_id, err);
}

kb_result_doc_t *kb_service_process_result_doc(kb_service_t *self, const char *process_id,
                                               kb_error_t *err)
{
    kb_call_t request;
    kb_call_init(&request, KB_CALL_PROC_RESULT);
    request.ask.id = process_id;
    if (s_call(self, &request, err) != 0) {
        kb_result_doc_destroy(&request.doc);
        return NULL;
    }
    return request.doc;
}

json_t *kb_service_process_result(kb_service_t *self, const char *process_id, kb_error_t *err)
{
    return s_doc_json(kb_service_process_result_doc(self, process_id, err), err);
}

json_t *kb_service_process_logs(kb_service_t *self, const char *process_id, long long cursor,
                                size_t limit, kb_error_t *err)
{
    kb_call_t request;
    kb_call_init(&request, KB_CALL_PROC_LOGS);
    request.ask.id = process_id;
    request.ask.cursor = cursor;
    request.ask.limit = limit;
    return s_call_json(self, &request, err);
}

kb_stream_t *kb_service_process_follow(kb_service_t *self, const char *process_id, long long cursor,
                                       kb_error_t *err)
{
    kb_call_t request;
    kb_call_init(&request, KB_CALL_PROC_FOLLOW);
    request.ask.id = process_id;
    request.ask.cursor = cursor;
    request.ask.stream = kb_stream_new();
    if (s_call(self, &request, err) != 0) {
        kb_stream_destroy(&request.ask.stream);
        return NULL;
    }
    return request.ask.stream;
}

json_t *kb_service_process_wait(kb_service_t *self, const char *process_id, double timeout,
                                kb_error_t *err)
{
    kb_call_t request;
    kb_call_init(&request, KB_CALL_PROC_WAIT);
    request.ask.id = process_id;
    request.ask.timeout = timeout;
    return s_call_json(self, &request, err);
}

int kb_service_process_signal(kb_service_t *self, const char *process_id, const char *signal,
                              kb_error_t *err)
{
    kb_call_t request;
    kb_call_init(&request, KB_CALL_PROC_SIGNAL);
    request.ask.id = process_id;
    request.ask.signal = signal;
    int rc = s_call(self, &request, err);
    json_decref(request.result);
    return rc;
}

int kb_service_process_delete(kb_service_t *self, const char *process_id, kb_error_t *err)
{
    return s_call_id_rc(self, KB_CALL_PROC_DELETE, process_id, err);
}
