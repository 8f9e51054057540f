/*  kb_vanished.h - the ids of contexts that vanished, and why: what
    SESSION_NOT_FOUND says when one is asked for. The last 1000 are kept,
    oldest dropped first; each is found by its context id or by the
    kernel_id Jupyter's API knew it by. Engine thread only.
*/
#ifndef KB_VANISHED_H_INCLUDED
#define KB_VANISHED_H_INCLUDED

#include <stdbool.h>

typedef struct kb_vanished kb_vanished_t;

/*  An empty record of vanished ids for sandbox_id (copied); NULL when out
    of memory. */
kb_vanished_t *kb_vanished_new(const char *sandbox_id);

/*  Safe on NULL. */
void kb_vanished_destroy(kb_vanished_t **self_p);

/*  Context id vanished, and why (both copied). -1 when out of memory
    (nothing is remembered), else 0. */
int kb_vanished_remember(kb_vanished_t *self, const char *id, const char *why);

/*  Context id is back (created again): it has not vanished. */
void kb_vanished_forget(kb_vanished_t *self, const char *id);

/*  The message saying why context (or kernel) id vanished, or NULL.
    Borrowed until the next change. */
const char *kb_vanished_why(const kb_vanished_t *self, const char *id);

#endif
