/*  kb_dispatch.h - what each call of the public API does, on the engine
    thread: kb_service.c hands every call it takes from the mailbox here.
    Dispatch reads the engine and changes it through kb_engine.h's
    functions; the engine never calls dispatch.
*/
#ifndef KB_DISPATCH_H_INCLUDED
#define KB_DISPATCH_H_INCLUDED

#include "service/engine/kb_call.h"
#include "service/engine/kb_engine.h"

/*  Answer one call (now, or later through the context or run that holds
    it). */
void kb_dispatch_handle(kb_engine_t *self, kb_call_t *call);

#endif
