/*  kb_result_doc.h - the engine's side of kb_result_doc_t: a finished run's
    result JSON without its logs' text, and the kept output (kb_runlog.h)
    that the text is rendered from. */
#ifndef KB_RESULT_DOC_H_INCLUDED
#define KB_RESULT_DOC_H_INCLUDED

#include "kernelbridge/kb_service.h"
#include "service/output/kb_runlog.h"

/*  A document of head (the result with empty logs; a reference is taken;
    never changed afterwards) and log (a reference is taken). NULL when out
    of memory. Caller owns. */
kb_result_doc_t *kb_result_doc_new(json_t *head, kb_runlog_t *log);

#endif
