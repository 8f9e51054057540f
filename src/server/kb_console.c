/*  kb_console.c - the web console of SPEC section 11: GET / is its page,
    GET /console/<file> its scripts, style and the frame that kernel HTML
    renders in, all from the bytes cmake/embed.cmake compiled in. Each
    response is built once, over the embedded bytes, and carries a strict
    Content-Security-Policy. Not for the API the page calls: that is
    kb_routes.c, behind the token like any client's call. */
#include "server/kb_console.h"
#include "server/kb_router.h"

#include <pthread.h>
#include <string.h>

/*  The console itself: its own scripts and styles only (no inline code, no
    eval, Trusted Types with no policy, so that no string ever becomes
    markup), images from data: URLs (PNG and SVG outputs), fetch to the
    daemon only, frames from the daemon only (frame.html), never framed
    itself. */
#define KB_CONSOLE_CSP                                                                             \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src data:; "                     \
    "connect-src 'self'; frame-src 'self'; base-uri 'none'; form-action 'none'; "                  \
    "frame-ancestors 'none'; require-trusted-types-for 'script'; trusted-types 'none'"

/*  frame.html, where one kernel text/html output is written: its scripts
    run (inline, as kernel HTML has them) but in an opaque origin (the
    `sandbox` directive, besides the iframe's sandbox attribute without
    allow-same-origin), so it reads neither the console's storage nor its
    DOM; it may fetch nothing (connect-src 'none'), load nothing but data:
    and blob: images and media, submit no form, and be framed only by the
    console. */
#define KB_FRAME_CSP                                                                               \
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "                  \
    "img-src data: blob:; media-src data: blob:; font-src data:; connect-src 'none'; "             \
    "base-uri 'none'; form-action 'none'; frame-ancestors 'self'; sandbox allow-scripts"

#define KB_CONSOLE_FRAME "frame.html"
#define KB_CONSOLE_INDEX "index.html"
/*  More files than web/console will ever hold; embed.cmake writes the table. */
#define KB_CONSOLE_MAX_FILES 64

/*  One response per file, made on first use and kept as long as the
    process: the embedded bytes live as long, and every server (a test may
    run several) shares them. MHD counts a response's users, so one object
    can be queued on many connections at once. */
static struct MHD_Response *s_responses[KB_CONSOLE_MAX_FILES];
static pthread_mutex_t s_responses_lock = PTHREAD_MUTEX_INITIALIZER;

static struct MHD_Response *s_response_new(const kb_console_file_t *file)
{
    bool frame = strcmp(file->name, KB_CONSOLE_FRAME) == 0;
    const char *headers[][2] = {
        { MHD_HTTP_HEADER_CONTENT_TYPE, file->content_type },
        { "Content-Security-Policy", frame ? KB_FRAME_CSP : KB_CONSOLE_CSP },
        { "X-Content-Type-Options", "nosniff" },
        { "Referrer-Policy", "no-referrer" },
        { MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache" },
        { "Cross-Origin-Resource-Policy", "same-origin" },
        { "X-Frame-Options", frame ? "SAMEORIGIN" : "DENY" },
        /* The frame is never a window of its own; the page is one. */
        { "Cross-Origin-Opener-Policy", frame ? NULL : "same-origin" },
    };
    struct MHD_Response *response
        = MHD_create_response_from_buffer(file->size, (void *)file->data, MHD_RESPMEM_PERSISTENT);
    if (!response)
        return NULL;
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
        if (headers[i][1]
            && MHD_add_response_header(response, headers[i][0], headers[i][1]) != MHD_YES) {
            MHD_destroy_response(response);
            return NULL;
        }
    }
    return response;
}

/*  The response of file index (borrowed), or NULL when it cannot be made
    (no memory; the next request tries again). */
static struct MHD_Response *s_response(int index)
{
    pthread_mutex_lock(&s_responses_lock);
    if (!s_responses[index])
        s_responses[index] = s_response_new(&kb_console_files[index]);
    struct MHD_Response *response = s_responses[index];
    pthread_mutex_unlock(&s_responses_lock);
    return response;
}

/*  The index of name in the table, or -1. */
static int s_file_index(const char *name)
{
    for (int i = 0; i < KB_CONSOLE_MAX_FILES && kb_console_files[i].name; i++)
        if (strcmp(kb_console_files[i].name, name) == 0)
            return i;
    return -1;
}

/*  The file a console path names ("/" is the page), or NULL. */
static const char *s_file_name(const char *path)
{
    if (strcmp(path, "/") == 0)
        return KB_CONSOLE_INDEX;
    if (strncmp(path, "/console/", 9) == 0 && path[9] && !strchr(path + 9, '/'))
        return path + 9;
    return NULL;
}

static void s_route_file(kb_http_req_t *req)
{
    const char *name = s_file_name(req->path);
    int index = name ? s_file_index(name) : -1;
    if (index < 0) {
        kb_http_reply_errorf(req, KB_ERR_NOT_FOUND, "no console file %s", req->path);
        return;
    }
    struct MHD_Response *response = s_response(index);
    if (!response) {
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "cannot build the response for %s",
                             kb_console_files[index].name);
        return;
    }
    kb_http_reply_response(req, MHD_HTTP_OK, response);
}

/*  "/" and everything under /console, GET and HEAD, open (the page holds
    no secret; each API call it makes sends the token). A path that names
    no file is answered by the handler, with our JSON 404. */
static const kb_route_t s_routes[] = {
    { "GET", "/", s_route_file, KB_ROUTE_OPEN },
    { "HEAD", "/", s_route_file, KB_ROUTE_OPEN },
    { "GET", "/console", s_route_file, KB_ROUTE_OPEN },
    { "HEAD", "/console", s_route_file, KB_ROUTE_OPEN },
    { "GET", "/console/{file*}", s_route_file, KB_ROUTE_OPEN },
    { "HEAD", "/console/{file*}", s_route_file, KB_ROUTE_OPEN },
};

static const char *const s_claims[] = { "/", "/console", "/console/*", NULL };

const kb_route_table_t kb_console_routes = {
    .name = "console",
    .claims = s_claims,
    .routes = s_routes,
    .count = sizeof s_routes / sizeof s_routes[0],
};
