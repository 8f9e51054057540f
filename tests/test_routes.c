/*  test_routes.c - the route tables of every listener through the one
    matcher (src/server/kb_router.c): for each front end, paths that fit
    (with their params), wrong methods (405 and the Allow list), unknown
    paths, trailing slashes, ids too long, and paths as libmicrohttpd
    hands them over (already percent-decoded: "%2F" is a '/'). Then every
    table against itself: each route fits its own pattern, no two routes
    share a method and pattern, and the routes of one path agree on
    whether it needs the token. Pure: no server, no service. */
#include "kb_testutil.h"
#include "server/kb_router.h"

#include <stdio.h>
#include <string.h>

#define LONG_ID                                                                                    \
    "0123456789012345678901234567890123456789012345678901234567890123"                             \
    "01234567890123456789012345678901234567890123456789012345678901234"

/*  A request on api; the outcome is checked against the fields given
    (NULL strings: not checked, except pattern, which NULL says no route). */
typedef struct {
    kb_server_api_t api;
    const char *method;
    const char *path;
    kb_code_t code;
    const char *pattern; /* the matched route's, NULL when none */
    const char *id;      /* req->id */
    const char *allow;   /* Allow on a 405 */
    unsigned flags;      /* KB_ROUTE_OPEN, _RESERVE and _BODY expected */
    bool jupyter;
} route_case_t;

#define OPEN KB_ROUTE_OPEN
#define RESERVE KB_ROUTE_RESERVE
#define BODY KB_ROUTE_BODY
#define NATIVE KB_API_NATIVE
#define E2B KB_API_E2B
#define METRICS KB_API_METRICS
#define OK KB_OK
#define E404 KB_ERR_NOT_FOUND
#define E405 KB_ERR_METHOD_NOT_ALLOWED

static const route_case_t s_cases[] = {
    /* MCP's Streamable HTTP endpoint (SPEC section 14). */
    { NATIVE, "POST", "/mcp", OK, "/mcp", "", NULL, BODY, false },
    { NATIVE, "GET", "/mcp", OK, "/mcp", "", NULL, 0, false },
    { NATIVE, "DELETE", "/mcp", OK, "/mcp", "", NULL, 0, false },
    { NATIVE, "PUT", "/mcp", E405, NULL, NULL, "POST, GET, DELETE", 0, false },
    { NATIVE, "GET", "/mcp/", E404, NULL, NULL, NULL, 0, false },
    /* The native API (SPEC section 5). */
    { NATIVE, "GET", "/health", OK, "/health", "", NULL, OPEN | RESERVE, false },
    { NATIVE, "POST", "/health", E405, NULL, NULL, "GET", OPEN, false },
    { NATIVE, "GET", "/health/", E404, NULL, NULL, NULL, 0, false },
    { NATIVE, "GET", "/metrics", OK, "/metrics", "", NULL, RESERVE, false },
    { NATIVE, "GET", "/kernelspecs", OK, "/kernelspecs", "", NULL, 0, false },
    { NATIVE, "GET", "/contexts", OK, "/contexts", "", NULL, 0, false },
    { NATIVE, "POST", "/contexts", OK, "/contexts", "", NULL, BODY, false },
    { NATIVE, "DELETE", "/contexts", E405, NULL, NULL, "GET, POST", 0, false },
    { NATIVE, "GET", "/contexts/", E404, NULL, NULL, NULL, 0, false },
    { NATIVE, "GET", "/contexts/ctx_1", OK, "/contexts/{id}", "ctx_1", NULL, 0, false },
    { NATIVE, "DELETE", "/contexts/ctx_1", OK, "/contexts/{id}", "ctx_1", NULL, 0, false },
    { NATIVE, "POST", "/contexts/ctx_1", E405, NULL, "ctx_1", "GET, DELETE", 0, false },
    { NATIVE, "POST", "/contexts/a/restart", OK, "/contexts/{id}/restart", "a", NULL, 0, false },
    { NATIVE, "POST", "/contexts/a/interrupt", OK, "/contexts/{id}/interrupt", "a", NULL, 0,
      false },
    { NATIVE, "GET", "/contexts/a/restart", E405, NULL, "a", "POST", 0, false },
    { NATIVE, "GET", "/contexts/a/b/c", E404, NULL, NULL, NULL, 0, false },
    { NATIVE, "GET", "/contexts//restart", E404, NULL, NULL, NULL, 0, false },
    { NATIVE, "POST", "/contexts/a/restart/", E404, NULL, NULL, NULL, 0, false },
    /* "%2F" arrives decoded: /contexts/a%2Fb is /contexts/a/b. */
    { NATIVE, "GET", "/contexts/a/b", E404, NULL, NULL, NULL, 0, false },
    { NATIVE, "GET", "/contexts/a b", OK, "/contexts/{id}", "a b", NULL, 0, false },
    { NATIVE, "POST", "/run", OK, "/run", "", NULL, BODY, false },
    { NATIVE, "GET", "/run", E405, NULL, NULL, "POST", 0, false },
    { NATIVE, "PUT", "/run", E405, NULL, NULL, "POST", 0, false },
    { NATIVE, "GET", "/run/x", E404, NULL, NULL, NULL, 0, false },
    { NATIVE, "GET", "/processes", OK, "/processes", "", NULL, 0, false },
    { NATIVE, "GET", "/processes/p1", OK, "/processes/{id}", "p1", NULL, 0, false },
    { NATIVE, "POST", "/processes/p1", E405, NULL, NULL, "GET, DELETE", 0, false },
    { NATIVE, "GET", "/processes/p1/result", OK, "/processes/{id}/result", "p1", NULL, 0, false },
    { NATIVE, "GET", "/processes/p1/logs", OK, "/processes/{id}/logs", "p1", NULL, 0, false },
    { NATIVE, "GET", "/processes/p1/wait", OK, "/processes/{id}/wait", "p1", NULL, 0, false },
    { NATIVE, "POST", "/processes/p1/signals", OK, "/processes/{id}/signals", "p1", NULL, BODY,
      false },
    { NATIVE, "GET", "/processes/p1/signals", E405, NULL, NULL, "POST", 0, false },
    { NATIVE, "GET", "/processes/p1/nope", E404, NULL, NULL, NULL, 0, false },
    { NATIVE, "GET", "/nope", E404, NULL, NULL, NULL, 0, false },
    { NATIVE, "GET", "/consoles", E404, NULL, NULL, NULL, 0, false },
    { NATIVE, "GET", "", E404, NULL, NULL, NULL, 0, false },
    { NATIVE, "OPTIONS", "*", E404, NULL, NULL, NULL, 0, false },
    /* A long id reaches the native route, which answers its own 404. */
    { NATIVE, "GET", "/processes/" LONG_ID, OK, "/processes/{id}", NULL, NULL, 0, false },
    /* The console: "/" and everything under /console, GET and HEAD, open. */
    { NATIVE, "GET", "/", OK, "/", "", NULL, OPEN, false },
    { NATIVE, "HEAD", "/", OK, "/", "", NULL, OPEN, false },
    { NATIVE, "POST", "/", E405, NULL, NULL, "GET, HEAD", OPEN, false },
    { NATIVE, "GET", "/console", OK, "/console", "", NULL, OPEN, false },
    { NATIVE, "GET", "/console/", OK, "/console/{file*}", "", NULL, OPEN, false },
    { NATIVE, "GET", "/console/app.js", OK, "/console/{file*}", "app.js", NULL, OPEN, false },
    { NATIVE, "GET", "/console/a/b", OK, "/console/{file*}", "a/b", NULL, OPEN, false },
    { NATIVE, "DELETE", "/console/app.js", E405, NULL, NULL, "GET, HEAD", OPEN, false },
    /* Jupyter's API: a trailing '/' allowed, errors Jupyter's. */
    { NATIVE, "GET", "/api", OK, "/api", "", NULL, 0, true },
    { NATIVE, "GET", "/api/", OK, "/api", "", NULL, 0, true },
    { NATIVE, "POST", "/api", E405, NULL, NULL, "GET", 0, true },
    { NATIVE, "GET", "/api/nope", E404, NULL, NULL, NULL, 0, true },
    { NATIVE, "GET", "/api//kernels", E404, NULL, NULL, NULL, 0, true },
    { NATIVE, "GET", "/api/kernelspecs", OK, "/api/kernelspecs", "", NULL, 0, true },
    { NATIVE, "GET", "/api/kernelspecs/python3", OK, "/api/kernelspecs/{name}", "python3", NULL, 0,
      true },
    { NATIVE, "GET", "/kernelspecs/python3/logo-64x64.png", OK, "/kernelspecs/{name}/{file}",
      "python3", NULL, 0, true },
    { NATIVE, "GET", "/kernelspecs/python3/", E404, NULL, NULL, NULL, 0, true },
    { NATIVE, "GET", "/kernelspecs/python3/a/b", E404, NULL, NULL, NULL, 0, true },
    { NATIVE, "GET", "/api/kernels", OK, "/api/kernels", "", NULL, 0, true },
    { NATIVE, "GET", "/api/kernels/", OK, "/api/kernels", "", NULL, 0, true },
    { NATIVE, "POST", "/api/kernels", OK, "/api/kernels", "", NULL, BODY, true },
    { NATIVE, "PUT", "/api/kernels", E405, NULL, NULL, "GET, POST", 0, true },
    { NATIVE, "GET", "/api/kernels/k1", OK, "/api/kernels/{id}", "k1", NULL, 0, true },
    { NATIVE, "DELETE", "/api/kernels/k1/", OK, "/api/kernels/{id}", "k1", NULL, 0, true },
    { NATIVE, "POST", "/api/kernels/k1", E405, NULL, NULL, "GET, DELETE", 0, true },
    { NATIVE, "POST", "/api/kernels/k1/interrupt", OK, "/api/kernels/{id}/interrupt", "k1", NULL, 0,
      true },
    { NATIVE, "POST", "/api/kernels/k1/restart", OK, "/api/kernels/{id}/restart", "k1", NULL, 0,
      true },
    { NATIVE, "GET", "/api/kernels/k1/restart", E405, NULL, NULL, "POST", 0, true },
    { NATIVE, "GET", "/api/kernels/k1/channels", OK, "/api/kernels/{id}/channels", "k1", NULL, 0,
      true },
    { NATIVE, "GET", "/api/kernels/k1/channels//", E404, NULL, NULL, NULL, 0, true },
    { NATIVE, "GET", "/api/sessions", OK, "/api/sessions", "", NULL, 0, true },
    { NATIVE, "POST", "/api/sessions", OK, "/api/sessions", "", NULL, BODY, true },
    { NATIVE, "GET", "/api/sessions/s1", OK, "/api/sessions/{id}", "s1", NULL, 0, true },
    { NATIVE, "PATCH", "/api/sessions/s1", OK, "/api/sessions/{id}", "s1", NULL, BODY, true },
    { NATIVE, "DELETE", "/api/sessions/s1", OK, "/api/sessions/{id}", "s1", NULL, 0, true },
    { NATIVE, "PUT", "/api/sessions/s1", E405, NULL, NULL, "GET, PATCH, DELETE", 0, true },
    /* Jupyter: an id longer than any we hand out is not found. */
    { NATIVE, "GET", "/api/kernels/" LONG_ID, E404, NULL, NULL, NULL, 0, true },
    { NATIVE, "PUT", "/api/kernels/" LONG_ID, E405, NULL, NULL, "GET, DELETE", 0, true },
    /* E2B's code-interpreter server: no trailing '/'. */
    { E2B, "GET", "/health", OK, "/health", "", NULL, OPEN | RESERVE, false },
    { E2B, "POST", "/health", E405, NULL, NULL, "GET", OPEN, false },
    { E2B, "POST", "/execute", OK, "/execute", "", NULL, BODY, false },
    { E2B, "GET", "/execute", E405, NULL, NULL, "POST", 0, false },
    { E2B, "GET", "/contexts", OK, "/contexts", "", NULL, 0, false },
    { E2B, "POST", "/contexts", OK, "/contexts", "", NULL, BODY, false },
    { E2B, "PUT", "/contexts", E405, NULL, NULL, "GET, POST", 0, false },
    { E2B, "DELETE", "/contexts/default", OK, "/contexts/{id}", "default", NULL, 0, false },
    { E2B, "GET", "/contexts/default", E405, NULL, NULL, "DELETE", 0, false },
    { E2B, "POST", "/contexts/default/restart", OK, "/contexts/{id}/restart", "default", NULL, 0,
      false },
    { E2B, "GET", "/contexts/default/restart", E405, NULL, NULL, "POST", 0, false },
    { E2B, "POST", "/contexts/default/restart/", E404, NULL, NULL, NULL, 0, false },
    { E2B, "DELETE", "/contexts/", E404, NULL, NULL, NULL, 0, false },
    { E2B, "DELETE", "/contexts/a/b", E404, NULL, NULL, NULL, 0, false },
    { E2B, "GET", "/metrics", E404, NULL, NULL, NULL, 0, false },
    { E2B, "GET", "/", E404, NULL, NULL, NULL, 0, false },
    { E2B, "GET", "/api/kernels", E404, NULL, NULL, NULL, 0, false },
    /* A long id reaches E2B's route, which finds no such context. */
    { E2B, "DELETE", "/contexts/" LONG_ID, OK, "/contexts/{id}", NULL, NULL, 0, false },
    /* A --metrics-listen server. */
    { METRICS, "GET", "/metrics", OK, "/metrics", "", NULL, RESERVE, false },
    { METRICS, "POST", "/metrics", E405, NULL, NULL, "GET", 0, false },
    { METRICS, "GET", "/health", OK, "/health", "", NULL, OPEN | RESERVE, false },
    { METRICS, "DELETE", "/health", E405, NULL, NULL, "GET", OPEN, false },
    { METRICS, "GET", "/metrics/", E404, NULL, NULL, NULL, 0, false },
    { METRICS, "GET", "/contexts", E404, NULL, NULL, NULL, 0, false },
    { METRICS, "GET", "/", E404, NULL, NULL, NULL, 0, false },
};

static void check_case(const route_case_t *c)
{
    kb_http_req_t req;
    memset(&req, 0, sizeof req);
    req.method = c->method;
    req.path = c->path;
    kb_code_t code = kb_router_match(&req, kb_router_tables(c->api));
    int failures = kb_test_failures;
    CHECK(code == c->code);
    CHECK(req.jupyter == c->jupyter);
    CHECK(req.open == ((c->flags & OPEN) != 0));
    if (c->pattern) {
        CHECK(req.route && strcmp(req.route->pattern, c->pattern) == 0);
        CHECK(req.route && strcmp(req.route->method, c->method) == 0);
        CHECK(req.handler != NULL && req.route && req.handler == req.route->handler);
        CHECK(req.reserve == ((c->flags & RESERVE) != 0));
        CHECK(req.wants_body == ((c->flags & BODY) != 0));
        CHECK(req.allow == NULL);
    } else {
        CHECK(req.handler == NULL);
        CHECK(!req.reserve);
    }
    if (c->id)
        CHECK_STR(req.id, c->id);
    if (c->code == E405)
        CHECK_STR(req.allow, c->allow);
    else
        CHECK(req.allow == NULL);
    if (kb_test_failures != failures)
        fprintf(stderr, "   in: api %d, %s %s\n", (int)c->api, c->method, c->path);
}

static void test_cases(void)
{
    for (size_t i = 0; i < sizeof s_cases / sizeof s_cases[0]; i++)
        check_case(&s_cases[i]);
}

static kb_http_req_t s_match(kb_server_api_t api, const char *method, const char *path,
                             kb_code_t *code)
{
    kb_http_req_t req;
    memset(&req, 0, sizeof req);
    req.method = method;
    req.path = path;
    *code = kb_router_match(&req, kb_router_tables(api));
    return req;
}

static void test_params(void)
{
    kb_code_t code;
    size_t len = 0;
    kb_http_req_t req = s_match(NATIVE, "GET", "/kernelspecs/python3/logo-64x64.png", &code);
    CHECK(code == OK);
    CHECK(req.param_count == 2);
    const char *name = kb_router_param(&req, "name", &len);
    CHECK(name && len == 7 && memcmp(name, "python3", 7) == 0);
    const char *file = kb_router_param(&req, "file", &len);
    CHECK(file && len == 14 && strcmp(file, "logo-64x64.png") == 0);
    CHECK(kb_router_param(&req, "id", &len) == NULL);

    /* Jupyter's trailing '/': the param stops before it; the path goes on. */
    req = s_match(NATIVE, "GET", "/kernelspecs/python3/logo-64x64.png/", &code);
    CHECK(code == OK);
    file = kb_router_param(&req, "file", &len);
    CHECK(file && len == 14 && file[len] == '/');

    req = s_match(NATIVE, "GET", "/console/a/b.js", &code);
    file = kb_router_param(&req, "file", &len);
    CHECK(code == OK && file && len == 6 && memcmp(file, "a/b.js", 6) == 0);

    /* An id over KB_HTTP_ID_MAX: cut to it, and said so. */
    req = s_match(NATIVE, "GET", "/contexts/" LONG_ID, &code);
    CHECK(code == OK && req.id_too_long && strlen(req.id) == KB_HTTP_ID_MAX);
    CHECK(strncmp(req.id, LONG_ID, KB_HTTP_ID_MAX) == 0);
    req = s_match(NATIVE, "GET", "/contexts/x", &code);
    CHECK(code == OK && !req.id_too_long);
}

/*  A reused request struct (a kept-alive connection) keeps nothing of the
    last match. */
static void test_reuse(void)
{
    kb_code_t code;
    kb_http_req_t req = s_match(NATIVE, "PUT", "/api/kernels/k1", &code);
    CHECK(code == E405 && req.jupyter && req.allow);
    req.method = "GET";
    req.path = "/nope";
    CHECK(kb_router_match(&req, kb_router_tables(NATIVE)) == E404);
    CHECK(!req.jupyter && !req.allow && !req.handler && !req.route && req.id[0] == '\0');
    CHECK(req.param_count == 0 && !req.id_too_long && !req.open && !req.wants_body);
}

/*  A refused request (401 before its handler) serves no route and keeps no
    body, but keeps what the error's form needs: Jupyter's paths answer
    {message, reason}. */
static void test_refuse(void)
{
    kb_code_t code;
    kb_http_req_t req = s_match(NATIVE, "POST", "/api/kernels", &code);
    CHECK(code == OK && req.jupyter && req.handler && req.wants_body);
    kb_router_refuse(&req);
    CHECK(req.handler == NULL && req.route == NULL && !req.wants_body);
    CHECK(req.jupyter);
    req = s_match(NATIVE, "GET", "/contexts/c1", &code);
    kb_router_refuse(&req);
    CHECK(req.handler == NULL && !req.jupyter && strcmp(req.id, "c1") == 0);
}

/*  The path a route's pattern describes, each {param} as "x" ({rest*}: "x"). */
static void s_sample_path(const char *pattern, char *out, size_t size)
{
    size_t n = 0;
    for (const char *p = pattern; *p && n + 2 < size;) {
        if (*p == '{') {
            const char *end = strchr(p, '}');
            out[n++] = 'x';
            p = end ? end + 1 : p + strlen(p);
        } else {
            out[n++] = *p++;
        }
    }
    out[n] = '\0';
}

static void check_table(kb_server_api_t api, const kb_route_table_t *table)
{
    for (size_t i = 0; i < table->count; i++) {
        const kb_route_t *route = &table->routes[i];
        char path[256];
        s_sample_path(route->pattern, path, sizeof path);
        kb_code_t code;
        kb_http_req_t req = s_match(api, route->method, path, &code);
        CHECK(code == OK && req.route == route);
        if (code != OK || req.route != route)
            fprintf(stderr, "   table %s: %s %s\n", table->name, route->method, route->pattern);
        CHECK(route->handler != NULL);
        for (size_t j = 0; j < table->count; j++) {
            const kb_route_t *other = &table->routes[j];
            if (j == i || strcmp(other->pattern, route->pattern) != 0)
                continue;
            CHECK(strcmp(other->method, route->method) != 0);
            CHECK((other->flags & OPEN) == (route->flags & OPEN));
        }
    }
}

static void test_tables(void)
{
    const kb_server_api_t apis[] = { NATIVE, E2B, METRICS };
    size_t seen = 0;
    for (size_t a = 0; a < sizeof apis / sizeof apis[0]; a++)
        for (const kb_route_table_t *const *t = kb_router_tables(apis[a]); *t; t++, seen++)
            check_table(apis[a], *t);
    CHECK(seen == 6);
}

int main(void)
{
    RUN_TEST(test_cases);
    RUN_TEST(test_params);
    RUN_TEST(test_reuse);
    RUN_TEST(test_refuse);
    RUN_TEST(test_tables);
    return kb_test_summary();
}
