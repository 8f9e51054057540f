/*  kb_vanished.c - the ids of vanished contexts, kept in the order they
    vanished, with the kernel_id of each (under which Jupyter's API looks
    them up). Engine thread only.
*/
#include "service/engine/kb_vanished.h"

#include <czmq.h>
#include <stdlib.h>
#include <string.h>

#include "service/run/kb_context.h"
#include "util/kb_clock.h"

#define KB_VANISHED_KEPT 1000

struct kb_vanished {
    char *sandbox_id;
    zhashx_t *messages; /* context id -> message */
    zlistx_t *order;    /* context ids, oldest first */
    zhashx_t *kernels;  /* kernel_id -> context id, of those in messages */
};

kb_vanished_t *kb_vanished_new(const char *sandbox_id)
{
    kb_vanished_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->sandbox_id = strdup(sandbox_id ? sandbox_id : "");
    self->messages = zhashx_new();
    self->order = zlistx_new();
    self->kernels = zhashx_new();
    if (!self->sandbox_id || !self->messages || !self->order || !self->kernels) {
        kb_vanished_destroy(&self);
        return NULL;
    }
    zhashx_set_destructor(self->messages, (zhashx_destructor_fn *)zstr_free);
    zhashx_set_duplicator(self->messages, (zhashx_duplicator_fn *)strdup);
    zhashx_set_destructor(self->kernels, (zhashx_destructor_fn *)zstr_free);
    zhashx_set_duplicator(self->kernels, (zhashx_duplicator_fn *)strdup);
    zlistx_set_destructor(self->order, (zlistx_destructor_fn *)zstr_free);
    zlistx_set_duplicator(self->order, (zlistx_duplicator_fn *)strdup);
    zlistx_set_comparator(self->order, (zlistx_comparator_fn *)strcmp); /* find by text */
    return self;
}

void kb_vanished_destroy(kb_vanished_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_vanished_t *self = *self_p;
    *self_p = NULL;
    zhashx_destroy(&self->messages);
    zlistx_destroy(&self->order);
    zhashx_destroy(&self->kernels);
    free(self->sandbox_id);
    free(self);
}

int kb_vanished_remember(kb_vanished_t *self, const char *id, const char *why)
{
    char when[40], kernel_id[KB_UUID_LEN + 1];
    kb_iso_time(kb_now(), when, sizeof when);
    char *message = zsys_sprintf("context %s vanished at %s: %s", id, when, why);
    if (!message)
        return -1;
    if (!zhashx_lookup(self->messages, id))
        zlistx_add_end(self->order, (void *)id);
    zhashx_update(self->messages, id, message);
    zstr_free(&message);
    kb_context_kernel_id_of(self->sandbox_id, id, kernel_id);
    if (kernel_id[0])
        zhashx_update(self->kernels, kernel_id, (void *)id);
    while (zlistx_size(self->order) > KB_VANISHED_KEPT) {
        char *oldest = zlistx_first(self->order);
        kb_context_kernel_id_of(self->sandbox_id, oldest, kernel_id);
        zhashx_delete(self->kernels, kernel_id);
        zhashx_delete(self->messages, oldest);
        zlistx_delete(self->order, zlistx_cursor(self->order));
    }
    return 0;
}

void kb_vanished_forget(kb_vanished_t *self, const char *id)
{
    if (!zhashx_lookup(self->messages, id))
        return;
    char kernel_id[KB_UUID_LEN + 1];
    kb_context_kernel_id_of(self->sandbox_id, id, kernel_id);
    zhashx_delete(self->kernels, kernel_id);
    zhashx_delete(self->messages, id);
    void *handle = zlistx_find(self->order, (void *)id);
    if (handle)
        zlistx_delete(self->order, handle);
}

const char *kb_vanished_why(const kb_vanished_t *self, const char *id)
{
    const char *message = zhashx_lookup(self->messages, id);
    const char *context_id = message ? NULL : zhashx_lookup(self->kernels, id);
    return context_id ? zhashx_lookup(self->messages, context_id) : message;
}
