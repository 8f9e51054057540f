/*  kb_jupyter.c - Jupyter Server's REST API on the native listener (SPEC
    section 10), the one that Jupyter Server's GatewayClient (its
    --gateway-url), @jupyterlab/services and VS Code speak: /api,
    /api/kernelspecs, /api/kernels and the kernelspecs' resource files.
    Sessions are kb_jupyter_sessions.c's, the kernel websocket
    kb_jupyter_ws.c's.

    Every Jupyter kernel is a context: /api/kernels lists all contexts
    (default ones too), a kernel's id is its context's kernel_id (a UUID),
    and what a kernel does is what the context's service call does. Errors
    are Jupyter's JSON {message, reason} (kb_http_reply_error, for a request
    that kb_jupyter_routes claimed). Nothing here keeps state between requests
    but the sessions. */
#include "server/kb_http.h"
#include "server/kb_jupyter.h"
#include "server/kb_router.h"
#include "service/engine/kb_request.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- Models ---------------------------------------------------------------- */

/*  "2026-12-03T13:02:28.123Z" (kb_iso_time) as Jupyter writes times,
    "%Y-%m-%dT%H:%M:%S.%fZ": microseconds. */
static json_t *s_jupyter_time(const char *iso)
{
    char buf[48];
    size_t len = iso ? strlen(iso) : 0;
    if (len < 2 || len + 4 > sizeof buf || iso[len - 1] != 'Z' || !strchr(iso, '.'))
        return json_string(iso ? iso : "");
    memcpy(buf, iso, len - 1);
    memcpy(buf + len - 1, "000Z", 5);
    return json_string(buf);
}

json_t *kb_jupyter_kernel_model(const json_t *context)
{
    const char *state = json_string_value(json_object_get(context, "state"));
    json_t *connections = json_object_get(context, "connections");
    return json_pack(
        "{s:O, s:O, s:o, s:s, s:I}", "id", json_object_get(context, "kernel_id"), "name",
        json_object_get(context, "kernel_name"), "last_activity",
        s_jupyter_time(json_string_value(json_object_get(context, "last_activity_at"))),
        "execution_state", state ? state : "dead", "connections",
        (json_int_t)(json_is_integer(connections) ? json_integer_value(connections) : 0));
}

/*  The kernelspec's resource files that Jupyter's clients look for, as
    {"logo-64x64": "/kernelspecs/<name>/logo-64x64.png", ...}. */
static json_t *s_resources(const char *name, const char *dir)
{
    json_t *resources = json_object();
    DIR *d = dir ? opendir(dir) : NULL;
    struct dirent *entry;
    while (d && resources && (entry = readdir(d))) {
        const char *file = entry->d_name, *dot = strrchr(file, '.');
        if (file[0] == '.' || !dot || strcmp(file, "kernel.json") == 0)
            continue;
        bool logo = strncmp(file, "logo-", 5) == 0;
        if (!logo && strcmp(file, "kernel.js") != 0 && strcmp(file, "kernel.css") != 0)
            continue;
        char key[256], url[600];
        snprintf(key, sizeof key, "%.*s", logo ? (int)(dot - file) : (int)strlen(file), file);
        snprintf(url, sizeof url, "/kernelspecs/%s/%s", name, file);
        json_object_set_new(resources, key, json_string(url));
    }
    if (d)
        closedir(d);
    return resources;
}

static json_t *s_spec_model(const json_t *spec)
{
    const char *name = json_string_value(json_object_get(spec, "name"));
    json_t *env = json_object_get(spec, "env"), *metadata = json_object_get(spec, "metadata");
    json_t *inner = json_pack(
        "{s:O, s:O, s:O, s:O, s:o, s:o}", "argv", json_object_get(spec, "argv"), "display_name",
        json_object_get(spec, "display_name"), "language", json_object_get(spec, "language"),
        "interrupt_mode", json_object_get(spec, "interrupt_mode"), "env",
        json_is_object(env) ? json_incref(env) : json_object(), "metadata",
        json_is_object(metadata) ? json_incref(metadata) : json_object());
    return json_pack("{s:s, s:o, s:o}", "name", name ? name : "", "spec", inner, "resources",
                     s_resources(name, json_string_value(json_object_get(spec, "resource_dir"))));
}

/*  The native kernelspec entry called name in specs, or NULL. */
static json_t *s_find_spec(json_t *specs, const char *name)
{
    size_t i;
    json_t *spec;
    json_array_foreach(json_object_get(specs, "kernelspecs"), i, spec)
    {
        const char *have = json_string_value(json_object_get(spec, "name"));
        if (have && strcmp(have, name) == 0)
            return spec;
    }
    return NULL;
}

/* ---- Replies --------------------------------------------------------------- */

/*  A service error for a kernel id: Jupyter Server's words for one that is
    not there, and, for one that was, the service's why (culled, died,
    deleted). */
void kb_jupyter_reply_kernel_error(kb_http_req_t *req, const char *id, const kb_error_t *err)
{
    if (err->code != KB_ERR_SESSION_NOT_FOUND)
        kb_http_reply_error(req, err);
    else if (strstr(err->message, " vanished at "))
        kb_http_reply_errorf(req, KB_ERR_NOT_FOUND, "Kernel does not exist: %s (%s)", id,
                             err->message);
    else
        kb_http_reply_errorf(req, KB_ERR_NOT_FOUND, "Kernel does not exist: %s", id);
}

static void s_reply_model(kb_http_req_t *req, unsigned status, json_t *context,
                          const kb_error_t *err)
{
    if (!context) {
        kb_jupyter_reply_kernel_error(req, req->id, err);
        return;
    }
    json_t *model = kb_jupyter_kernel_model(context);
    json_decref(context);
    if (model)
        kb_http_reply_json(req, status, model);
    else
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "out of memory");
}

/* ---- Routes ---------------------------------------------------------------- */

static void route_api(kb_http_req_t *req)
{
    kb_http_reply_json(req, MHD_HTTP_OK, json_pack("{s:s}", "version", KB_VERSION));
}

static void route_kernelspecs(kb_http_req_t *req)
{
    json_t *specs = kb_service_kernelspecs(req->server->service);
    if (!specs) {
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "kernelspecs unavailable");
        return;
    }
    json_t *all = json_object();
    size_t i;
    json_t *spec;
    json_array_foreach(json_object_get(specs, "kernelspecs"), i, spec)
    {
        const char *name = json_string_value(json_object_get(spec, "name"));
        if (name && json_object_set_new(all, name, s_spec_model(spec)) != 0) {
            json_decref(all);
            all = NULL; /* out of memory: the pack below fails, the reply is a 500 */
            break;
        }
    }
    json_t *def = json_object_get(specs, "default");
    kb_http_reply_json(
        req, MHD_HTTP_OK,
        json_pack("{s:O, s:o}", "default", def ? def : json_null(), "kernelspecs", all));
    json_decref(specs);
}

static void route_kernelspec(kb_http_req_t *req)
{
    json_t *specs = kb_service_kernelspecs(req->server->service);
    json_t *spec = specs ? s_find_spec(specs, req->id) : NULL;
    if (spec)
        kb_http_reply_json(req, MHD_HTTP_OK, s_spec_model(spec));
    else
        kb_http_reply_errorf(req, KB_ERR_NOT_FOUND, "Kernel spec %s not found", req->id);
    json_decref(specs);
}

static const char *s_content_type(const char *file)
{
    const char *dot = strrchr(file, '.');
    if (dot && strcmp(dot, ".png") == 0)
        return "image/png";
    if (dot && strcmp(dot, ".svg") == 0)
        return "image/svg+xml";
    if (dot && strcmp(dot, ".js") == 0)
        return "text/javascript";
    if (dot && strcmp(dot, ".css") == 0)
        return "text/css";
    return "application/octet-stream";
}

/*  GET /kernelspecs/{name}/{file}: a regular file directly in the
    kernelspec's dir, opened without following a link; anything else is
    not found. */
static void route_kernelspec_file(kb_http_req_t *req)
{
    size_t len;
    const char *file = kb_router_param(req, "file", &len); /* to the path's end */
    json_t *specs = kb_service_kernelspecs(req->server->service);
    json_t *spec = specs ? s_find_spec(specs, req->id) : NULL;
    const char *dir = json_string_value(json_object_get(spec, "resource_dir"));
    int dir_fd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    /* "logo.png/" (a trailing '/') names no file. */
    int fd = dir_fd >= 0 && file[0] != '.' && file[len] == '\0'
                 ? openat(dir_fd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
                 : -1;
    struct stat st;
    if (dir_fd >= 0)
        close(dir_fd);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        kb_http_reply_errorf(req, KB_ERR_NOT_FOUND, "no file %s in kernelspec %s", file, req->id);
        json_decref(specs);
        return;
    }
    struct MHD_Response *response = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
    if (!response) {
        close(fd);
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "out of memory");
    } else {
        MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, s_content_type(file));
        kb_http_reply_response(req, MHD_HTTP_OK, response);
        MHD_destroy_response(response);
    }
    json_decref(specs);
}

static void route_kernels_list(kb_http_req_t *req)
{
    kb_error_t err = { KB_OK, "" };
    json_t *contexts = kb_service_context_list(req->server->service, true, &err);
    if (!contexts) {
        kb_http_reply_error(req, &err);
        return;
    }
    json_t *list = json_array();
    size_t i;
    json_t *context;
    json_array_foreach(json_object_get(contexts, "contexts"), i, context)
    {
        if (json_array_append_new(list, kb_jupyter_kernel_model(context)) != 0) {
            json_decref(list);
            list = NULL; /* out of memory: kb_http_reply_json answers 500 */
            break;
        }
    }
    json_decref(contexts);
    kb_http_reply_json(req, MHD_HTTP_OK, list);
}

json_t *kb_jupyter_start_kernel(kb_http_req_t *req, const kb_kernel_request_t *kernel,
                                kb_error_t *err)
{
    kb_context_opts_t opts = { .kernel_name = kernel->name, .env = kernel->env };
    /*  A notebook's path is relative to Jupyter Server's root, which is not
        ours to know: only an absolute dir becomes the kernel's cwd, as
        path or as the gateway client's KERNEL_WORKING_DIR. */
    const char *dir = kernel->path
                          ? kernel->path
                          : json_string_value(json_object_get(kernel->env, "KERNEL_WORKING_DIR"));
    struct stat st;
    if (dir && dir[0] == '/' && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        opts.cwd = dir;
    if (!kernel->name
        || !*kernel->name) { /* the default kernelspec: Python's, after --kernel-map */
        opts.kernel_name = NULL;
        opts.language = "python";
    }
    json_t *context = kb_service_context_create(req->server->service, &opts, err);
    if (!context && err->code == KB_ERR_LANGUAGE_NOT_SUPPORTED)
        err->code = KB_ERR_NOT_FOUND;
    if (!context)
        kb_http_reply_error(req, err);
    return context;
}

static void route_kernels_start(kb_http_req_t *req)
{
    kb_error_t err = { KB_OK, "" };
    kb_kernel_request_t kernel;
    if (kb_kernel_request_parse(&kernel, req->body.data, req->body.len, &err) != 0) {
        kb_http_reply_error(req, &err);
        return;
    }
    json_t *context = kb_jupyter_start_kernel(req, &kernel, &err);
    kb_kernel_request_clear(&kernel);
    if (context)
        s_reply_model(req, MHD_HTTP_CREATED, context, &err);
}

static void route_kernel_get(kb_http_req_t *req)
{
    kb_error_t err = { KB_OK, "" };
    s_reply_model(req, MHD_HTTP_OK, kb_service_context_get(req->server->service, req->id, &err),
                  &err);
}

static void route_kernel_delete(kb_http_req_t *req)
{
    kb_error_t err = { KB_OK, "" };
    if (kb_service_context_delete(req->server->service, req->id, &err) == 0)
        kb_http_reply_empty(req, MHD_HTTP_NO_CONTENT);
    else
        kb_jupyter_reply_kernel_error(req, req->id, &err);
}

static void route_kernel_interrupt(kb_http_req_t *req)
{
    kb_error_t err = { KB_OK, "" };
    if (kb_service_context_interrupt(req->server->service, req->id, &err) == 0)
        kb_http_reply_empty(req, MHD_HTTP_NO_CONTENT);
    else
        kb_jupyter_reply_kernel_error(req, req->id, &err);
}

static void route_kernel_restart(kb_http_req_t *req)
{
    kb_error_t err = { KB_OK, "" };
    s_reply_model(req, MHD_HTTP_OK, kb_service_context_restart(req->server->service, req->id, &err),
                  &err);
}

/* ---- Routing ------------------------------------------------------------- */

static const kb_route_t s_routes[] = {
    { "GET", "/api", route_api, KB_ROUTE_TOKEN },
    { "GET", "/api/kernelspecs", route_kernelspecs, KB_ROUTE_TOKEN },
    { "GET", "/api/kernelspecs/{name}", route_kernelspec, KB_ROUTE_TOKEN },
    { "GET", "/kernelspecs/{name}/{file}", route_kernelspec_file, KB_ROUTE_TOKEN },
    { "GET", "/api/kernels", route_kernels_list, KB_ROUTE_TOKEN },
    { "POST", "/api/kernels", route_kernels_start, KB_ROUTE_BODY },
    { "GET", "/api/kernels/{id}", route_kernel_get, KB_ROUTE_TOKEN },
    { "DELETE", "/api/kernels/{id}", route_kernel_delete, KB_ROUTE_TOKEN },
    { "POST", "/api/kernels/{id}/interrupt", route_kernel_interrupt, KB_ROUTE_TOKEN },
    { "POST", "/api/kernels/{id}/restart", route_kernel_restart, KB_ROUTE_TOKEN },
    { "GET", "/api/kernels/{id}/channels", kb_jupyter_route_channels, KB_ROUTE_TOKEN },
    { "GET", "/api/sessions", kb_jupyter_route_sessions_list, KB_ROUTE_TOKEN },
    { "POST", "/api/sessions", kb_jupyter_route_session_create, KB_ROUTE_BODY },
    { "GET", "/api/sessions/{id}", kb_jupyter_route_session_get, KB_ROUTE_TOKEN },
    { "PATCH", "/api/sessions/{id}", kb_jupyter_route_session_patch, KB_ROUTE_BODY },
    { "DELETE", "/api/sessions/{id}", kb_jupyter_route_session_delete, KB_ROUTE_TOKEN },
};

static const char *const s_claims[] = { "/api", "/api/*", "/kernelspecs/*", NULL };

/*  Every path under /api and /kernelspecs/, with Jupyter Server's rules:
    a trailing '/' allowed, errors as {message, reason}, and an id longer
    than any we hand out not found. */
const kb_route_table_t kb_jupyter_routes = {
    .name = "jupyter",
    .claims = s_claims,
    .routes = s_routes,
    .count = sizeof s_routes / sizeof s_routes[0],
    .trailing_slash = true,
    .jupyter = true,
    .long_id_404 = true,
};
