/*  kb_context_jobs.c - a context's jobs: the queue, the one that has the
    kernel, the armed rollback checkpoint. Engine thread only. */
#include "service/run/kb_context_jobs.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "util/kb_alloc.h"

int kb_context_jobs_init(kb_context_jobs_t *self)
{
    *self = (kb_context_jobs_t){ .waiting = zlistx_new() };
    return self->waiting ? 0 : -1;
}

void kb_context_jobs_fini(kb_context_jobs_t *self)
{
    assert(!self->held && (!self->waiting || zlistx_size(self->waiting) == 0));
    zlistx_destroy(&self->waiting);
    kb_context_armed_free(self->armed);
    self->armed = NULL;
}

int kb_context_jobs_add(kb_context_jobs_t *self, const kb_context_job_t *ops, void *arg,
                        const void *after)
{
    kb_context_job_entry_t *entry = calloc(1, sizeof *entry);
    if (!entry || !zlistx_add_end(self->waiting, entry)) {
        free(entry);
        return -1;
    }
    *entry = (kb_context_job_entry_t){ .ops = ops, .arg = arg, .after = after };
    return 0;
}

bool kb_context_jobs_start(kb_context_jobs_t *self, zlistx_t *queue, kb_kernel_t *kernel)
{
    kb_context_job_entry_t *head;
    while (!self->held && (head = zlistx_first(self->waiting))
           && (!head->after || !zlistx_find(queue, (void *)head->after))) {
        self->held = zlistx_detach(self->waiting, NULL);
        if (head->ops->start(head->arg, kernel))
            return true;
        if (self->held == head) {
            self->held = NULL;
            free(head);
        }
    }
    return self->held != NULL;
}

bool kb_context_jobs_message(kb_context_jobs_t *self, kb_channel_t channel, const kb_msg_t *msg)
{
    kb_context_job_entry_t *entry = self->held;
    if (!entry || !entry->ops->message(entry->arg, channel, msg) || self->held != entry)
        return false;
    self->held = NULL;
    free(entry);
    return true;
}

void kb_context_jobs_cancel(kb_context_jobs_t *self, const char *why, bool all)
{
    kb_context_job_entry_t *entry = self->held;
    self->held = NULL;
    if (entry)
        entry->ops->cancel(entry->arg, why);
    free(entry);
    while (all && (entry = zlistx_detach(self->waiting, NULL))) {
        entry->ops->cancel(entry->arg, why);
        free(entry);
    }
}

bool kb_context_jobs_pending(const kb_context_jobs_t *self)
{
    return self->held || zlistx_size(self->waiting) > 0;
}

void kb_context_armed_free(kb_context_armed_t *armed)
{
    if (!armed)
        return;
    free(armed->checkpoint_id);
    free(armed->process_id);
    free(armed);
}

int kb_context_jobs_arm(kb_context_jobs_t *self, const char *checkpoint_id, const char *process_id,
                        const kb_context_rollback_t *ops, void *arg, struct kb_context *ctx)
{
    kb_context_armed_t *old = self->armed;
    self->armed = NULL;
    if (old)
        old->ops->ended(old->arg, ctx, false); /* its run ended before it started */
    kb_context_armed_free(old);
    kb_context_armed_t *armed = calloc(1, sizeof *armed);
    if (!armed)
        return -1;
    *armed = (kb_context_armed_t){ .checkpoint_id = kb_xstrdup(checkpoint_id),
                                   .process_id = kb_xstrdup(process_id),
                                   .ops = ops,
                                   .arg = arg };
    self->armed = armed;
    return 0;
}

void kb_context_jobs_disarm(kb_context_jobs_t *self, struct kb_context *ctx)
{
    kb_context_armed_t *armed = self->armed;
    self->armed = NULL;
    if (armed)
        armed->ops->ended(armed->arg, ctx, false);
    kb_context_armed_free(armed);
}

kb_context_armed_t *kb_context_jobs_take_armed(kb_context_jobs_t *self, const char *process_id)
{
    kb_context_armed_t *armed = self->armed;
    if (!armed || strcmp(armed->process_id, process_id) != 0)
        return NULL;
    self->armed = NULL;
    return armed;
}
