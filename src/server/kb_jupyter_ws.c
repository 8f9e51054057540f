/*  kb_jupyter_ws.c - the kernel websocket of Jupyter's API,
    GET /api/kernels/{id}/channels?session_id=...: a kb_ws websocket
    (the handshake, framing and queue of src/server/kb_ws.c) joined to the
    service's channels of that kernel (kb_service_channels_*), which parse,
    sign and route what the client sends and write what the kernel says in
    the client's framing (v1.kernel.websocket.jupyter.org when offered,
    else the legacy one).

    Threads: the websocket's own (its connection's) reads, and calls the
    service for each message; the engine thread calls send (kb_ws_send
    queues and never waits) and end. The link below is freed on the
    websocket's thread in on_close, after kb_service_channels_close has
    returned, from which point the engine calls neither send nor end. */
#include "server/kb_jupyter.h"

#include <czmq.h>
#include <stdlib.h>
#include <string.h>

#include "wire/kb_wsmsg.h"

/*  A websocket and the channels it drives. */
typedef struct {
    kb_server_t *server;
    kb_service_t *service;
    kb_ws_t *ws; /* a reference of ours, for the engine's sends */
    kb_channels_t *channels;
    char kernel_id[KB_HTTP_ID_MAX + 1];
    char session_id[128];
    size_t dropped; /* malformed messages, never forwarded */
} kb_jupyter_link_t;

static void s_send(void *arg, bool binary, const void *data, size_t size)
{
    kb_jupyter_link_t *link = arg;
    kb_ws_send(link->ws, binary, data, size); /* over its cap the websocket closes (1008) */
}

static void s_end(void *arg, const char *why)
{
    kb_jupyter_link_t *link = arg;
    kb_ws_close(link->ws, KB_WS_NORMAL, why);
}

/*  The channels open before the 101 goes (kb_ws queues what the kernel
    says until the upgrade is done), so that a client that has its
    websocket is a client of the kernel: a restart or a delete right
    after reaches it. On failure (the kernel went away since the lookup)
    the websocket closes, with the reason, right after its upgrade. */
static void s_open_channels(kb_jupyter_link_t *link)
{
    kb_channels_opts_t opts = {
        .kernel_id = link->kernel_id,
        .session_id = link->session_id[0] ? link->session_id : NULL,
        .v1 = kb_ws_protocol(link->ws) != NULL,
        .send = s_send,
        .end = s_end,
        .arg = link,
    };
    kb_error_t err = { KB_OK, "" };
    link->channels = kb_service_channels_open(link->service, &opts, &err);
    if (!link->channels)
        kb_ws_close(link->ws, KB_WS_NORMAL, err.message);
}

static void s_on_message(kb_ws_t *ws, bool binary, const uint8_t *data, size_t len, void *arg)
{
    kb_jupyter_link_t *link = arg;
    if (!link->channels)
        return;
    kb_error_t err = { KB_OK, "" };
    if (kb_service_channels_input(link->service, link->channels, binary, data, len, &err) == 0)
        return;
    if (err.code == KB_ERR_BAD_REQUEST) {
        /*  Dropped and counted, as Jupyter Server drops what it cannot
            read; the connection goes on. */
        atomic_fetch_add(&link->server->ws_malformed, 1);
        if (link->dropped++ < 10)
            zsys_warning("kernel %s: a websocket message was dropped: %s", link->kernel_id,
                         err.message);
        return;
    }
    kb_ws_close(ws, KB_WS_NORMAL, err.message);
}

static void s_on_close(kb_ws_t *ws, unsigned code, const char *reason, void *arg)
{
    (void)ws;
    (void)code;
    (void)reason;
    kb_jupyter_link_t *link = arg;
    kb_service_channels_close(link->service, &link->channels);
    kb_ws_unref(&link->ws);
    free(link);
}

static const kb_ws_handler_t s_handler = {
    .on_message = s_on_message,
    .on_close = s_on_close,
};

void kb_jupyter_route_channels(kb_http_req_t *req)
{
    kb_service_t *service = req->server->service;
    kb_error_t err = { KB_OK, "" };
    json_t *context = kb_service_context_get(service, req->id, &err);
    if (!context) {
        kb_jupyter_reply_kernel_error(req, req->id, &err);
        return;
    }
    json_decref(context);
    kb_jupyter_link_t *link = calloc(1, sizeof *link);
    if (!link) {
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "out of memory");
        return;
    }
    link->server = req->server;
    link->service = service;
    snprintf(link->kernel_id, sizeof link->kernel_id, "%s", req->id);
    const char *session
        = MHD_lookup_connection_value(req->connection, MHD_GET_ARGUMENT_KIND, "session_id");
    if (session)
        kb_http_text(link->session_id, sizeof link->session_id, session, true);
    static const char *const protocols[] = { KB_WSMSG_V1_SUBPROTOCOL, NULL };
    kb_ws_config_t config = { .protocols = protocols };
    unsigned status = 0;
    req->ws = kb_ws_accept(req->connection, req->method, &config, req->server->websockets,
                           &s_handler, link, &status);
    if (!req->ws) {
        free(link); /* kb_ws queued the reply */
        req->status = status;
        return;
    }
    link->ws = kb_ws_ref(req->ws);
    req->status = MHD_HTTP_SWITCHING_PROTOCOLS;
    s_open_channels(link);
}
