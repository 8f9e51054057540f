/*  kb_router.c - the one matcher of every front end's routes (kb_router.h):
    a listener's tables are tried in order, the first that claims the path
    matches it, and the request's routing fields are set here and nowhere
    else. Pure: no I/O, no state; the tables are constant. */
#include "server/kb_router.h"

#include <string.h>

/* ---- Listeners ----------------------------------------------------------- */

static const kb_route_table_t *const s_native[]
    = { &kb_console_routes, &kb_jupyter_routes, &kb_mcp_routes, &kb_native_routes, NULL };
static const kb_route_table_t *const s_e2b[] = { &kb_e2b_routes, NULL };
static const kb_route_table_t *const s_metrics[] = { &kb_metrics_routes, NULL };

const kb_route_table_t *const *kb_router_tables(kb_server_api_t api)
{
    return api == KB_API_E2B ? s_e2b : api == KB_API_METRICS ? s_metrics : s_native;
}

/* ---- Patterns ------------------------------------------------------------ */

static bool s_claims(const kb_route_table_t *table, const char *path)
{
    if (!table->claims)
        return true;
    for (const char *const *claim = table->claims; *claim; claim++) {
        size_t len = strlen(*claim);
        if (len > 0 && (*claim)[len - 1] == '*' ? strncmp(path, *claim, len - 1) == 0
                                                : strcmp(path, *claim) == 0)
            return true;
    }
    return false;
}

/*  Whether path fits pattern; its {params} into params (at most
    KB_HTTP_PARAMS_MAX, *count of them). */
static bool s_fits(const char *pattern, const char *path, bool trailing_slash,
                   kb_http_param_t *params, unsigned *count)
{
    *count = 0;
    if (pattern[0] != '/' || path[0] != '/')
        return false;
    pattern++;
    path++;
    while (*pattern) {
        size_t plen = strcspn(pattern, "/"), len = strcspn(path, "/");
        if (plen >= 3 && pattern[0] == '{' && memcmp(pattern + plen - 2, "*}", 2) == 0) {
            /* {name*}, last: the rest of the path, '/' and empty included */
            if (*count < KB_HTTP_PARAMS_MAX)
                params[(*count)++] = (kb_http_param_t){ pattern + 1, plen - 3, path, strlen(path) };
            return pattern[plen] == '\0';
        }
        if (plen >= 2 && pattern[0] == '{' && pattern[plen - 1] == '}') {
            if (len == 0)
                return false;
            if (*count < KB_HTTP_PARAMS_MAX)
                params[(*count)++] = (kb_http_param_t){ pattern + 1, plen - 2, path, len };
        } else if (plen != len || memcmp(pattern, path, len) != 0) {
            return false;
        }
        pattern += plen;
        path += len;
        if (*pattern == '/') {
            if (*path != '/')
                return false;
            pattern++;
            path++;
        }
    }
    return path[0] == '\0' || (trailing_slash && path[0] == '/' && path[1] == '\0');
}

/* ---- Matching ------------------------------------------------------------ */

void kb_router_reset(kb_http_req_t *req)
{
    req->route = NULL;
    req->handler = NULL;
    req->allow = NULL;
    req->allow_buf[0] = '\0';
    req->open = false;
    req->reserve = false;
    req->wants_body = false;
    req->jupyter = false;
    req->id[0] = '\0';
    req->id_too_long = false;
    req->param_count = 0;
}

void kb_router_refuse(kb_http_req_t *req)
{
    req->route = NULL;
    req->handler = NULL;
    req->wants_body = false;
}

/*  Add method to the Allow list, once. */
static void s_allow(kb_http_req_t *req, const char *method)
{
    size_t have = strlen(req->allow_buf), len = strlen(method);
    for (const char *p = req->allow_buf; (p = strstr(p, method)); p += len)
        if ((p == req->allow_buf || p[-1] == ' ') && (p[len] == ',' || p[len] == '\0'))
            return;
    if (have + len + 3 > sizeof req->allow_buf)
        return;
    if (have > 0) {
        memcpy(req->allow_buf + have, ", ", 2);
        have += 2;
    }
    memcpy(req->allow_buf + have, method, len + 1);
}

/*  The first fit's params, and its first {param} as the id. */
static void s_take_params(kb_http_req_t *req, const kb_http_param_t *params, unsigned count)
{
    memcpy(req->params, params, count * sizeof *params);
    req->param_count = count;
    if (count == 0)
        return;
    req->id_too_long = params[0].len > KB_HTTP_ID_MAX;
    size_t n = req->id_too_long ? KB_HTTP_ID_MAX : params[0].len;
    memcpy(req->id, params[0].value, n);
    req->id[n] = '\0';
}

static kb_code_t s_match_table(kb_http_req_t *req, const kb_route_table_t *table)
{
    const kb_route_t *found = NULL;
    bool fits = false;
    for (size_t i = 0; i < table->count; i++) {
        const kb_route_t *route = &table->routes[i];
        kb_http_param_t params[KB_HTTP_PARAMS_MAX];
        unsigned count;
        if (!s_fits(route->pattern, req->path, table->trailing_slash, params, &count))
            continue;
        if (!fits)
            s_take_params(req, params, count);
        fits = true;
        /* Whether a token is needed is the path's: a wrong method on an
           open path is a 405, not a 401. */
        req->open = req->open || (route->flags & KB_ROUTE_OPEN);
        s_allow(req, route->method);
        if (!found && strcmp(req->method, route->method) == 0)
            found = route;
    }
    if (!fits)
        return KB_ERR_NOT_FOUND;
    if (!found) {
        req->allow = req->allow_buf;
        return KB_ERR_METHOD_NOT_ALLOWED;
    }
    req->route = found;
    req->open = (found->flags & KB_ROUTE_OPEN) != 0;
    req->reserve = (found->flags & KB_ROUTE_RESERVE) != 0;
    req->wants_body = (found->flags & KB_ROUTE_BODY) != 0;
    if (table->long_id_404 && req->id_too_long)
        return KB_ERR_NOT_FOUND;
    req->handler = found->handler;
    return KB_OK;
}

kb_code_t kb_router_match(kb_http_req_t *req, const kb_route_table_t *const *tables)
{
    kb_router_reset(req);
    for (; *tables; tables++) {
        if (!s_claims(*tables, req->path))
            continue;
        req->jupyter = (*tables)->jupyter;
        return s_match_table(req, *tables);
    }
    return KB_ERR_NOT_FOUND;
}

const char *kb_router_param(const kb_http_req_t *req, const char *name, size_t *len)
{
    size_t name_len = strlen(name);
    for (unsigned i = 0; i < req->param_count; i++) {
        const kb_http_param_t *param = &req->params[i];
        if (param->name_len == name_len && memcmp(param->name, name, name_len) == 0) {
            *len = param->len;
            return param->value;
        }
    }
    return NULL;
}
