/*  kb_engine_orphans.h - what a killed daemon left half-made, ended at the
    next start (kb_engine_orphans.c). Called by kb_service.c once the
    engine is made, before its thread starts.
*/
#ifndef KB_ENGINE_ORPHANS_H_INCLUDED
#define KB_ENGINE_ORPHANS_H_INCLUDED

struct kb_engine;

/*  After the restore has adopted what it could: SIGKILL every process
    that names a file in the kernels dir and is none of the engine's
    (contexts' kernels, the pool's, checkpoints; kernels it started
    itself), and remove checkpoint sockets no checkpoint has. A no-op
    without a state dir. */
void kb_engine_end_orphans(struct kb_engine *self);

#endif
