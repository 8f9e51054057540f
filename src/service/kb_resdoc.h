/*  kb_resdoc.h - the engine's side of kb_result_doc_t: a finished run's
    result JSON without its logs' text, and the kept output (kb_outlog.h)
    that the text is rendered from. */
#ifndef KB_RESDOC_H_INCLUDED
#define KB_RESDOC_H_INCLUDED

#include "kernelbridge/kb_service.h"
#include "service/kb_outlog.h"

/*  A document of head (the result with empty logs; a reference is taken;
    never changed afterwards) and log (a reference is taken). NULL when out
    of memory. Caller owns. */
kb_result_doc_t *kb_result_doc_new(json_t *head, kb_outlog_t *log);

#endif
