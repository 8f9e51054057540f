/*  test_openapi.c - the OpenAPI document compiled into the daemon
    (src/server/kb_openapi.h, from api/openapi.yaml) against the route
    tables the daemon really serves on its native listener: every route
    of the native API and of /mcp is a path and method of the document,
    every path and method of the document is a route, and an operation
    needs no token (security: []) exactly when its route is open. The
    console and Jupyter's API are not the document's (it says so). Pure:
    no server, no service. */
#include "kb_testutil.h"
#include "server/kb_openapi.h"
#include "server/kb_router.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/*  The tables whose routes the document describes. */
static const kb_route_table_t *const s_described[] = { &kb_native_routes, &kb_mcp_routes };

#define DESCRIBED_COUNT (sizeof s_described / sizeof s_described[0])

static json_t *s_document(void)
{
    json_error_t jerr;
    json_t *doc = json_loadb(kb_openapi_json, kb_openapi_json_len, 0, &jerr);
    if (!doc)
        fprintf(stderr, "the compiled document is not JSON: %s (line %d)\n", jerr.text, jerr.line);
    return doc;
}

static void s_lower(const char *in, char *out, size_t len)
{
    size_t i = 0;
    for (; in[i] && i + 1 < len; i++)
        out[i] = (char)tolower((unsigned char)in[i]);
    out[i] = '\0';
}

/*  The route of method and pattern in the described tables, or NULL. */
static const kb_route_t *s_route(const char *method, const char *pattern)
{
    for (size_t t = 0; t < DESCRIBED_COUNT; t++)
        for (size_t i = 0; i < s_described[t]->count; i++) {
            const kb_route_t *route = &s_described[t]->routes[i];
            if (strcmp(route->pattern, pattern) == 0 && strcasecmp(route->method, method) == 0)
                return route;
        }
    return NULL;
}

/*  Whether the operation needs no token: its own security is []. */
static bool s_open(const json_t *operation)
{
    const json_t *security = json_object_get(operation, "security");
    return json_is_array(security) && json_array_size(security) == 0;
}

static void test_document(void)
{
    json_t *doc = s_document();
    CHECK(doc != NULL);
    CHECK_STR(json_string_value(json_object_get(doc, "openapi")), "3.1.0");
    CHECK_STR(json_string_value(json_object_get(json_object_get(doc, "info"), "version")),
              KB_VERSION);
    CHECK(json_is_object(json_object_get(doc, "paths")));
    CHECK(strlen(kb_openapi_json) == kb_openapi_json_len);
    json_decref(doc);
}

static void test_routes_documented(void)
{
    json_t *doc = s_document();
    json_t *paths = json_object_get(doc, "paths");
    CHECK(paths != NULL);
    for (size_t t = 0; t < DESCRIBED_COUNT; t++)
        for (size_t i = 0; i < s_described[t]->count; i++) {
            const kb_route_t *route = &s_described[t]->routes[i];
            char method[16];
            s_lower(route->method, method, sizeof method);
            const json_t *operation
                = json_object_get(json_object_get(paths, route->pattern), method);
            if (!operation)
                fprintf(stderr, "route %s %s is not in api/openapi.yaml\n", route->method,
                        route->pattern);
            CHECK(operation != NULL);
            if (operation && s_open(operation) != ((route->flags & KB_ROUTE_OPEN) != 0))
                fprintf(stderr, "%s %s: the document's security disagrees with the route\n",
                        route->method, route->pattern);
            CHECK(!operation || s_open(operation) == ((route->flags & KB_ROUTE_OPEN) != 0));
        }
    json_decref(doc);
}

static void test_document_routed(void)
{
    json_t *doc = s_document();
    json_t *paths = json_object_get(doc, "paths");
    const char *pattern;
    json_t *item;
    size_t operations = 0;
    json_object_foreach(paths, pattern, item)
    {
        const char *key;
        json_t *operation;
        json_object_foreach(item, key, operation)
        {
            if (strcmp(key, "parameters") == 0 || strcmp(key, "summary") == 0
                || strcmp(key, "description") == 0)
                continue;
            char method[16];
            size_t n = strlen(key) < sizeof method - 1 ? strlen(key) : sizeof method - 1;
            for (size_t i = 0; i < n; i++)
                method[i] = (char)toupper((unsigned char)key[i]);
            method[n] = '\0';
            operations++;
            if (!s_route(method, pattern))
                fprintf(stderr, "api/openapi.yaml has %s %s, which no route serves\n", method,
                        pattern);
            CHECK(s_route(method, pattern) != NULL);
        }
    }
    size_t routes = 0;
    for (size_t t = 0; t < DESCRIBED_COUNT; t++)
        routes += s_described[t]->count;
    CHECK(operations == routes);
    json_decref(doc);
}

int main(void)
{
    RUN_TEST(test_document);
    RUN_TEST(test_routes_documented);
    RUN_TEST(test_document_routed);
    return kb_test_summary();
}
