/*  kb_hub.h - Jupyter's kernel channels for websocket clients, on
    the engine thread: a context's hub of attached clients (kb_hub_t) and
    each client (kb_channels_t, the public handle of kb_service.h).

    What it is for: a client's requests reach the context's kernel signed
    with its key (execute_request in the context's one queue, taking its
    turn with native runs, so that their outputs never mix; everything else
    at once); every iopub message goes to every client; a reply (shell,
    control, stdin) goes to the client that asked; a restart or death is
    told as Jupyter Server tells it (status dead; nothing for a restart).

    What it is not for: the websocket itself (src/server) or the runs'
    folds (kb_run). Engine thread only.
*/
#ifndef KB_HUB_H_INCLUDED
#define KB_HUB_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <czmq.h>

#include "kernel/kb_kernel.h"
#include "kernelbridge/kb_service.h"
#include "wire/kb_wire.h"

typedef struct kb_hub kb_hub_t;

/*  A client, attached to no hub yet, from opts (copied). NULL without
    memory. */
kb_channels_t *kb_channels_new(const kb_channels_opts_t *opts);
/*  Free a client (it must be detached first). */
void kb_channels_destroy(kb_channels_t **self_p);
/*  Whether it speaks v1.kernel.websocket.jupyter.org (else legacy). */
bool kb_channels_v1(const kb_channels_t *self);
/*  The context it was attached to, or NULL once that is gone. */
void *kb_channels_context(const kb_channels_t *self);

kb_hub_t *kb_hub_new(void);
/*  Every client is told the kernel is gone for good (end, with why) and
    detached; then the hub is freed. */
void kb_hub_destroy(kb_hub_t **self_p, const char *why);

/*  Attach a client for context (an opaque owner the client remembers).
    The kernel's stdin is connected when kernel is given. */
void kb_hub_attach(kb_hub_t *self, kb_channels_t *client, void *context, kb_kernel_t *kernel);
/*  Detach a client: its pending requests are forgotten, a queued execute
    it sent is dropped. After it, no callback reaches it. */
void kb_hub_detach(kb_hub_t *self, kb_channels_t *client);
size_t kb_hub_count(const kb_hub_t *self);

/*  A client's message (stolen) for channel. An execute_request is queued
    (after the run at the tail of queue now, borrowed: compared, never
    dereferenced); anything else is signed and sent now. -1 with err when
    the kernel cannot take it (dead, or a channel it lacks). */
int kb_hub_input(kb_hub_t *self, kb_channels_t *client, kb_kernel_t *kernel, kb_channel_t channel,
                 kb_msg_t *msg, const void *queue_tail, kb_error_t *err);

/*  A kernel message: iopub to everyone, a reply to the client that asked.
    true when the client execute out now has ended (its reply and its
    idle both came): the context may pump its queue again. */
bool kb_hub_message(kb_hub_t *self, kb_channel_t channel, const kb_msg_t *msg);

/*  Start the oldest queued client execute when the queue holds no run
    that came before it (in_queue(run) says whether a run is still
    queued). true while a client execute is out (the queue waits). */
bool kb_hub_pump(kb_hub_t *self, kb_kernel_t *kernel, bool (*in_queue)(const void *run, void *arg),
                 void *arg);

/*  Whether a client execute is out now. */
bool kb_hub_busy(const kb_hub_t *self);

/*  The kernel went away (restart, death): the execute out and pending
    requests are forgotten (their replies will not come), queued executes
    stay for the next kernel, and every client gets status
    execution_state (dead) unless it is NULL (a restart asked for, which
    Jupyter Server does not announce: its `restarting` means a dead kernel
    that the server restarted by itself). */
void kb_hub_kernel_gone(kb_hub_t *self, const char *execution_state);

/*  A new kernel (restart): stdin is connected for the clients. */
void kb_hub_kernel_new(kb_hub_t *self, kb_kernel_t *kernel);

#endif
