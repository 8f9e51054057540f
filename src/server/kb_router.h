/*  kb_router.h - private to src/server: the one route table type of every
    front end (native API, Jupyter's API, the console, E2B's API, the
    metrics listener) and the one function that matches a request against
    a listener's tables and sets the request's routing fields. A front end
    only declares its table; no other file sets handler, allow or open. */
#ifndef KB_ROUTER_H_INCLUDED
#define KB_ROUTER_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

#include "server/kb_http.h"

/*  Who may call a route, and what it reads. */
enum {
    KB_ROUTE_TOKEN = 0,         /* the token, when one is configured */
    KB_ROUTE_OPEN = 1u << 0,    /* no token: the probes, the console */
    KB_ROUTE_RESERVE = 1u << 1, /* also served on a connection of the reserve */
    KB_ROUTE_BODY = 1u << 2,    /* the handler reads a body (it is kept, up to max_body) */
};

/*  One route: a method and a path pattern. The pattern is '/'-separated
    segments, each a literal or a {name} of one non-empty segment; a last
    {name*} takes the rest of the path (empty, or holding '/'). The first
    {name} is also copied into req->id. "/" is the root alone. */
typedef struct kb_route {
    const char *method;
    const char *pattern;
    kb_route_fn *handler;
    unsigned flags;
} kb_route_t;

/*  A front end's routes, and the paths it answers for. */
typedef struct {
    const char *name;
    /*  The paths this table answers for, exact or, ending in '*', by
        prefix; NULL: every path. A path it claims but no route fits is
        this table's 404, never the next table's. */
    const char *const *claims;
    const kb_route_t *routes;
    size_t count;
    bool trailing_slash; /* "/a/b/" is "/a/b" (Jupyter Server allows it) */
    bool jupyter;        /* errors are Jupyter Server's {message, reason} */
    bool long_id_404;    /* an id over KB_HTTP_ID_MAX is 404 even when the method fits */
} kb_route_table_t;

/*  The tables of each front end (kb_routes.c, kb_jupyter.c, kb_console.c,
    kb_e2b.c, kb_metrics_http.c, kb_mcp_http.c). */
extern const kb_route_table_t kb_native_routes;
extern const kb_route_table_t kb_jupyter_routes;
extern const kb_route_table_t kb_console_routes;
extern const kb_route_table_t kb_e2b_routes;
extern const kb_route_table_t kb_metrics_routes;
extern const kb_route_table_t kb_mcp_routes;

/*  A listener's tables, in the order they are tried, NULL-terminated:
    native (the console, Jupyter's API, MCP, the native API), E2B, metrics. */
const kb_route_table_t *const *kb_router_tables(kb_server_api_t api);

/*  Route req (its method and path, borrowed) through tables: the first
    table that claims the path decides. Sets handler, route, open,
    reserve, wants_body, jupyter, id, id_too_long and params; allow on a
    405. KB_OK, KB_ERR_NOT_FOUND (no route fits the path) or
    KB_ERR_METHOD_NOT_ALLOWED (routes fit the path, none has the method;
    allow names theirs, in table order). */
kb_code_t kb_router_match(kb_http_req_t *req, const kb_route_table_t *const *tables);

/*  No route yet: every routing field cleared (a kept-alive connection's
    request struct is reused). */
void kb_router_reset(kb_http_req_t *req);

/*  The request is refused (401, 503, 413) before its handler: no route
    is served and no body kept; the rest (jupyter, id) stays, for the
    error's form. */
void kb_router_refuse(kb_http_req_t *req);

/*  The path parameter called name of the matched route (borrowed from the
    path, len bytes, not NUL-terminated), or NULL. */
const char *kb_router_param(const kb_http_req_t *req, const char *name, size_t *len);

#endif
