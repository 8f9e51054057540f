/*  kb_run_view.c - what a run shows, without changing it. Reads struct
    kb_run (kb_run_impl.h); kb_run.c is the one file that writes it.
    Engine thread only. */
#include <string.h>

#include "service/run/kb_run.h"
#include "service/run/kb_run_impl.h"

kb_run_state_t kb_run_state(const kb_run_t *self)
{
    return self->state;
}

kb_proc_t *kb_run_proc(const kb_run_t *self)
{
    return self->proc;
}

bool kb_run_owns_message(const kb_run_t *self, const kb_msg_t *msg)
{
    return self->msg_id[0] && strcmp(msg->parent_msg_id, self->msg_id) == 0;
}

bool kb_run_wants_rollback(const kb_run_t *self)
{
    return self->wants_rollback;
}

const char *kb_run_rollback(const kb_run_t *self, bool *rolled_back)
{
    *rolled_back = self->rolled_back;
    return self->rollback;
}
