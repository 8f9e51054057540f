/*  kb_jupyter.h - private to src/server: Jupyter Server's REST API on the
    native listener (kb_jupyter.c: kernelspecs, kernels; and
    kb_jupyter_sessions.c: sessions), what the two files share. */
#ifndef KB_JUPYTER_H_INCLUDED
#define KB_JUPYTER_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>

#include "server/kb_http.h"
#include "service/engine/kb_request.h"

/*  Jupyter's kernel model {id, name, last_activity, execution_state,
    connections} of a context's JSON (borrowed). Caller owns; NULL when
    out of memory. */
json_t *kb_jupyter_kernel_model(const json_t *context);

/*  Reply to a service error about kernel id: SESSION_NOT_FOUND as Jupyter
    Server's 404 "Kernel does not exist", with why a kernel that was there
    went (culled, died, deleted); any other error as it is. */
void kb_jupyter_reply_kernel_error(kb_http_req_t *req, const char *id, const kb_error_t *err);

/*  Start a kernel as kernel (borrowed; kb_request.h) asks: a new context
    of kernelspec name (absent: the default one). Its context JSON (caller
    owns), or NULL with the error reply queued and err set. */
json_t *kb_jupyter_start_kernel(kb_http_req_t *req, const kb_kernel_request_t *kernel,
                                kb_error_t *err);

/*  The sessions: {id, path, name, type, kernel} over kernels, kept by the
    server in memory (a daemon restart forgets them, as Jupyter Server's
    own do; their kernels stay). Thread-safe. */
typedef struct kb_jupyter_sessions kb_jupyter_sessions_t;
kb_jupyter_sessions_t *kb_jupyter_sessions_new(void);
void kb_jupyter_sessions_destroy(kb_jupyter_sessions_t **self_p);

/*  GET /api/kernels/{id}/channels: the kernel websocket (kb_jupyter_ws.c). */
void kb_jupyter_route_channels(kb_http_req_t *req);

void kb_jupyter_route_sessions_list(kb_http_req_t *req);
void kb_jupyter_route_session_create(kb_http_req_t *req);
void kb_jupyter_route_session_get(kb_http_req_t *req);
void kb_jupyter_route_session_patch(kb_http_req_t *req);
void kb_jupyter_route_session_delete(kb_http_req_t *req);

#endif
