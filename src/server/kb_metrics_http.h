/*  kb_metrics_http.h - GET /metrics over HTTP, private to src/server: the
    route (the service's families, then the server's HTTP request counts
    and the process' own process_* families), the counting of requests,
    and the routes of a server that serves metrics alone (--metrics-listen,
    kb_metrics_routes in kb_router.h). */
#ifndef KB_METRICS_HTTP_H_INCLUDED
#define KB_METRICS_HTTP_H_INCLUDED

#include "server/kb_http.h"

/*  GET /metrics: Prometheus' text format (KB_PROM_CONTENT_TYPE); 503
    UNAVAILABLE when the service is stopping. */
void kb_metrics_route(kb_http_req_t *req);

/*  Count one answered request by method (GET, HEAD, POST, PUT, DELETE,
    PATCH, OPTIONS, else "other") and status (100-599; 0, no response, is
    not counted). For the whole process: every server of it counts here.
    Any thread; lock-free. */
void kb_metrics_count_request(const char *method, unsigned status);

#endif
