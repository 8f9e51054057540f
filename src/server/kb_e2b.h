/*  kb_e2b.h - a second face of the daemon: the HTTP API of E2B's
    code-interpreter server, so that E2B's SDKs (@e2b/code-interpreter,
    e2b_code_interpreter) drive kernelbridge's contexts unchanged.

    A kb_server_t started with config.api = KB_API_E2B serves these routes
    (kb_e2b.c) on the same service, contexts and token as the native API:

      GET    /health                 200 "OK" (no token)
      POST   /contexts               {language?, cwd?} -> {id, language, cwd}
      GET    /contexts               [{id, language, cwd}, ...]
      POST   /contexts/{id}/restart  200 (fresh kernel, same id)
      DELETE /contexts/{id}          200
      POST   /execute                {code, context_id?, language?, env_vars?} ->
                                     application/json, one JSON object per line:
                                     stdout, stderr, result, error (at most once),
                                     number_of_executions, keepalive (after 5 s
                                     without other lines), end_of_execution (last)

    The id "default" names the default Python context (default-python).
    Errors are plain text with the status (E2B's server answers so); the
    token is taken from X-Access-Token as well as Authorization: Bearer.
    A client that goes away during an execution interrupts the run.
*/
#ifndef KB_E2B_H_INCLUDED
#define KB_E2B_H_INCLUDED

#include "kernelbridge/kb_service.h"
#include "server/kb_server.h"

#ifdef __cplusplus
extern "C" {
#endif

/*  Start the default contexts that E2B's server has from start-up: Python
    (required: -1 when it cannot start) and JavaScript (skipped, with a log
    line, when no JavaScript kernel is installed or it cannot start). */
int kb_e2b_start_defaults(kb_service_t *service, kb_log_format_t format);

#ifdef __cplusplus
}
#endif

#endif
