/*  kb_hub.c - Jupyter's kernel channels for websocket clients: the
    hub of a context's attached clients, the routing of what they send and
    of what the kernel answers, and the client executes that take their
    turn in the context's queue. See kb_hub.h. Engine thread only.
*/
#include "service/jupyter/kb_hub.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/kb_buf.h"
#include "util/kb_clock.h"
#include "wire/kb_wsmsg.h"

struct kb_channels {
    kb_channels_opts_t opts; /* the strings are the copies below */
    char *kernel_id, *session_id;
    void *context; /* while attached; NULL once it is gone */
    bool ended;    /* end was called */
    kb_buf_t out;  /* the payload being written, reused */
};

/*  A client execute waiting for its turn. */
typedef struct {
    kb_channels_t *client;
    kb_msg_t *msg;
    const void *after; /* the run queued last when it came: it goes after that one */
} kb_waiting_t;

struct kb_hub {
    zlistx_t *clients; /* kb_channels_t *, attached */
    zhashx_t *pending; /* a client request's msg_id -> the kb_channels_t * that sent it */
    zlistx_t *waiting; /* kb_waiting_t *, oldest first */
    char out_id[96];   /* the client execute out now, or "" */
    bool out_replied, out_idle;
};

/* ---- clients --------------------------------------------------------------- */

kb_channels_t *kb_channels_new(const kb_channels_opts_t *opts)
{
    kb_channels_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->opts = *opts;
    self->kernel_id = strdup(opts->kernel_id ? opts->kernel_id : "");
    self->session_id = strdup(opts->session_id ? opts->session_id : "");
    kb_buf_init(&self->out, 0);
    if (!self->kernel_id || !self->session_id) {
        kb_channels_destroy(&self);
        return NULL;
    }
    self->opts.kernel_id = self->kernel_id;
    self->opts.session_id = self->session_id;
    return self;
}

void kb_channels_destroy(kb_channels_t **self_p)
{
    kb_channels_t *self = *self_p;
    if (!self)
        return;
    free(self->kernel_id);
    free(self->session_id);
    kb_buf_free(&self->out);
    free(self);
    *self_p = NULL;
}

bool kb_channels_v1(const kb_channels_t *self)
{
    return self->opts.v1;
}

void *kb_channels_context(const kb_channels_t *self)
{
    return self->context;
}

static void s_send(kb_channels_t *client, kb_wsmsg_channel_t channel, const kb_msg_t *msg)
{
    bool binary = false;
    kb_error_t err;
    kb_wsmsg_protocol_t protocol = client->opts.v1 ? KB_WSMSG_V1 : KB_WSMSG_LEGACY;
    if (kb_wsmsg_encode(protocol, channel, msg, &client->out, &binary, &err) != KB_WSMSG_OK) {
        zsys_warning("kernel %s: a %s message for a websocket client was dropped: %s",
                     client->kernel_id, msg->msg_type, err.message);
        return;
    }
    client->opts.send(client->opts.arg, binary, client->out.data, client->out.len);
}

/* ---- the hub --------------------------------------------------------------- */

kb_hub_t *kb_hub_new(void)
{
    kb_hub_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->clients = zlistx_new();
    self->pending = zhashx_new();
    self->waiting = zlistx_new();
    if (!self->clients || !self->pending || !self->waiting) {
        zlistx_destroy(&self->clients);
        zhashx_destroy(&self->pending);
        zlistx_destroy(&self->waiting);
        free(self);
        return NULL;
    }
    return self;
}

static void s_waiting_free(kb_waiting_t *waiting)
{
    kb_msg_destroy(&waiting->msg);
    free(waiting);
}

void kb_hub_destroy(kb_hub_t **self_p, const char *why)
{
    kb_hub_t *self = *self_p;
    if (!self)
        return;
    kb_channels_t *client;
    while ((client = zlistx_detach(self->clients, NULL))) {
        client->context = NULL;
        if (!client->ended && client->opts.end) {
            client->ended = true;
            client->opts.end(client->opts.arg, why);
        }
    }
    kb_waiting_t *waiting;
    while ((waiting = zlistx_detach(self->waiting, NULL)))
        s_waiting_free(waiting);
    zlistx_destroy(&self->clients);
    zhashx_destroy(&self->pending);
    zlistx_destroy(&self->waiting);
    free(self);
    *self_p = NULL;
}

void kb_hub_attach(kb_hub_t *self, kb_channels_t *client, void *context, kb_kernel_t *kernel)
{
    client->context = context;
    zlistx_add_end(self->clients, client);
    if (kernel)
        kb_kernel_open_stdin(kernel);
}

void kb_hub_detach(kb_hub_t *self, kb_channels_t *client)
{
    void *handle = zlistx_find(self->clients, client);
    if (handle)
        zlistx_detach(self->clients, handle);
    client->context = NULL;
    /*  Its pending requests: their replies go nowhere now. */
    zlistx_t *ids = zhashx_keys(self->pending);
    for (const char *id = ids ? zlistx_first(ids) : NULL; id; id = zlistx_next(ids))
        if (zhashx_lookup(self->pending, id) == client)
            zhashx_delete(self->pending, id);
    zlistx_destroy(&ids);
    for (kb_waiting_t *waiting = zlistx_first(self->waiting); waiting;) {
        kb_waiting_t *next = zlistx_next(self->waiting);
        if (waiting->client == client) {
            zlistx_detach(self->waiting, zlistx_find(self->waiting, waiting));
            s_waiting_free(waiting);
        }
        waiting = next;
    }
}

size_t kb_hub_count(const kb_hub_t *self)
{
    return zlistx_size(self->clients);
}

bool kb_hub_busy(const kb_hub_t *self)
{
    return self->out_id[0] != 0;
}

/*  Sign msg with the kernel's key and send it on channel. */
static int s_forward(kb_kernel_t *kernel, kb_channel_t channel, const kb_msg_t *msg,
                     kb_error_t *err)
{
    kb_frame_t *frames = NULL;
    size_t count = 0;
    if (!kernel || kb_wire_encode_msg(kb_kernel_wire(kernel), msg, &frames, &count) != 0)
        return kb_error_set(err, KB_ERR_SESSION_NOT_FOUND, "the kernel cannot take messages now");
    /*  From "<IDS|MSG>" on: a DEALER has no identities to send. */
    int rc = kb_kernel_send_frames(kernel, channel, frames, count);
    kb_frames_free(frames, count);
    if (rc != 0)
        return kb_error_set(err, KB_ERR_SESSION_NOT_FOUND, "the kernel is not there to take a %s",
                            msg->msg_type);
    return 0;
}

int kb_hub_input(kb_hub_t *self, kb_channels_t *client, kb_kernel_t *kernel, kb_channel_t channel,
                 kb_msg_t *msg, const void *queue_tail, kb_error_t *err)
{
    if (channel == KB_CHANNEL_SHELL && strcmp(msg->msg_type, "execute_request") == 0) {
        kb_waiting_t *waiting = calloc(1, sizeof *waiting);
        if (!waiting || !zlistx_add_end(self->waiting, waiting)) {
            free(waiting);
            kb_msg_destroy(&msg);
            return kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        }
        *waiting = (kb_waiting_t){ .client = client, .msg = msg, .after = queue_tail };
        return 0;
    }
    if (channel != KB_CHANNEL_STDIN)
        zhashx_update(self->pending, msg->msg_id, client);
    int rc = s_forward(kernel, channel, msg, err);
    if (rc != 0)
        zhashx_delete(self->pending, msg->msg_id);
    kb_msg_destroy(&msg);
    return rc;
}

bool kb_hub_pump(kb_hub_t *self, kb_kernel_t *kernel, bool (*in_queue)(const void *run, void *arg),
                 void *arg)
{
    while (!self->out_id[0]) {
        kb_waiting_t *head = zlistx_first(self->waiting);
        if (!head || (head->after && in_queue(head->after, arg)))
            return false;
        zlistx_detach(self->waiting, NULL);
        kb_error_t err = { KB_OK, "" };
        zhashx_update(self->pending, head->msg->msg_id, head->client);
        if (s_forward(kernel, KB_CHANNEL_SHELL, head->msg, &err) == 0) {
            snprintf(self->out_id, sizeof self->out_id, "%s", head->msg->msg_id);
            self->out_replied = self->out_idle = false;
        } else {
            zhashx_delete(self->pending, head->msg->msg_id);
        }
        s_waiting_free(head);
    }
    return true;
}

static kb_wsmsg_channel_t s_ws_channel(kb_channel_t channel)
{
    switch (channel) {
        case KB_CHANNEL_SHELL:
            return KB_WSMSG_SHELL;
        case KB_CHANNEL_CONTROL:
            return KB_WSMSG_CONTROL;
        case KB_CHANNEL_STDIN:
            return KB_WSMSG_STDIN;
        default:
            return KB_WSMSG_IOPUB;
    }
}

static bool s_is_reply(const char *msg_type)
{
    size_t len = strlen(msg_type);
    return len > 6 && strcmp(msg_type + len - 6, "_reply") == 0;
}

bool kb_hub_message(kb_hub_t *self, kb_channel_t channel, const kb_msg_t *msg)
{
    const char *parent = msg->parent_msg_id;
    if (channel == KB_CHANNEL_IOPUB) {
        for (kb_channels_t *client = zlistx_first(self->clients); client;
             client = zlistx_next(self->clients))
            s_send(client, KB_WSMSG_IOPUB, msg);
    } else {
        kb_channels_t *client = parent[0] ? zhashx_lookup(self->pending, parent) : NULL;
        if (client)
            s_send(client, s_ws_channel(channel), msg);
        if (client && channel != KB_CHANNEL_STDIN && s_is_reply(msg->msg_type))
            zhashx_delete(self->pending, parent);
    }
    if (!self->out_id[0] || strcmp(parent, self->out_id) != 0)
        return false;
    if (channel == KB_CHANNEL_SHELL && s_is_reply(msg->msg_type))
        self->out_replied = true;
    if (channel == KB_CHANNEL_IOPUB && strcmp(msg->msg_type, "status") == 0) {
        const char *state = json_string_value(json_object_get(msg->content, "execution_state"));
        if (state && strcmp(state, "idle") == 0)
            self->out_idle = true;
    }
    if (!self->out_replied || !self->out_idle)
        return false;
    self->out_id[0] = 0;
    return true;
}

void kb_hub_kernel_gone(kb_hub_t *self, const char *execution_state)
{
    self->out_id[0] = 0;
    zhashx_purge(self->pending);
    if (!execution_state)
        return;
    char date[40], msg_id[KB_UUID_LEN + 1];
    kb_iso_now_us(date, sizeof date);
    for (kb_channels_t *client = zlistx_first(self->clients); client;
         client = zlistx_next(self->clients)) {
        char *seed = kb_random_id("status/");
        if (!seed)
            continue;
        kb_uuid_from(seed, msg_id);
        free(seed);
        kb_msg_t *status = kb_wsmsg_status_new(client->session_id[0] ? client->session_id : msg_id,
                                               msg_id, date, NULL, execution_state, NULL);
        if (status)
            s_send(client, KB_WSMSG_IOPUB, status);
        kb_msg_destroy(&status);
    }
}

void kb_hub_kernel_new(kb_hub_t *self, kb_kernel_t *kernel)
{
    if (kernel && zlistx_size(self->clients) > 0)
        kb_kernel_open_stdin(kernel);
}
