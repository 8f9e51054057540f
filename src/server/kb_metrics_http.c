/*  kb_metrics_http.c - GET /metrics: the service's families (rendered on
    the engine thread by kb_service_metrics), then what only the server
    and the process know: HTTP requests by method and code, and the
    standard process_* families read from /proc/self. Also the routes of a
    --metrics-listen server: /metrics (token) and /health (open), every
    other path our JSON 404.

    The request counts are one table for the whole process, not one per
    kb_server_t: a daemon runs up to three servers (native, E2B, metrics)
    and the metrics listener must show the native one's requests. Many
    connection threads count at once: relaxed atomics, no lock.
*/
#include "server/kb_metrics_http.h"

#include <dirent.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "server/kb_router.h"
#include "util/kb_prom.h"

#define KB_CODE_FIRST 100
#define KB_CODES 500 /* 100..599 */

static const char *const s_methods[]
    = { "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "other" };
#define KB_METHODS (sizeof s_methods / sizeof s_methods[0])

static atomic_ullong s_requests[KB_METHODS][KB_CODES];

/* ---- HTTP requests ------------------------------------------------------------ */

void kb_metrics_count_request(const char *method, unsigned status)
{
    if (status < KB_CODE_FIRST || status >= KB_CODE_FIRST + KB_CODES)
        return;
    size_t m = 0;
    while (m + 1 < KB_METHODS && (!method || strcmp(method, s_methods[m]) != 0))
        m++;
    atomic_fetch_add_explicit(&s_requests[m][status - KB_CODE_FIRST], 1, memory_order_relaxed);
}

static void s_render_requests(kb_buf_t *out)
{
    kb_prom_family(out, "kernelbridge_http_requests_total", "counter",
                   "HTTP requests answered, by method and status code, on every listener.");
    for (size_t m = 0; m < KB_METHODS; m++)
        for (size_t c = 0; c < KB_CODES; c++) {
            unsigned long long n = atomic_load_explicit(&s_requests[m][c], memory_order_relaxed);
            if (n == 0)
                continue;
            char code[8];
            snprintf(code, sizeof code, "%zu", c + KB_CODE_FIRST);
            const char *labels[] = { "method", s_methods[m], "code", code, NULL };
            kb_prom_sample_u(out, "kernelbridge_http_requests_total", labels, n);
        }
}

/* ---- the process ------------------------------------------------------------------ */

typedef struct {
    double cpu_s;      /* user and system time, all threads */
    double start_s;    /* since the epoch */
    double virtual_b;  /* VmSize */
    double resident_b; /* RSS */
} kb_self_stat_t;

/*  The boot time (seconds since the epoch) from /proc/stat, or -1. */
static double s_boot_time(void)
{
    FILE *file = fopen("/proc/stat", "r");
    if (!file)
        return -1;
    char line[256];
    unsigned long long btime = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, file))
        found = sscanf(line, "btime %llu", &btime) == 1;
    fclose(file);
    return found ? (double)btime : -1;
}

/*  Fields 14, 15 (utime, stime), 22 (starttime), 23 (vsize) and 24 (rss)
    of /proc/self/stat. 0, or -1. */
static int s_self_stat(kb_self_stat_t *out)
{
    char buf[1024];
    FILE *file = fopen("/proc/self/stat", "r");
    if (!file)
        return -1;
    size_t len = fread(buf, 1, sizeof buf - 1, file);
    fclose(file);
    buf[len] = '\0';
    char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    if (!p)
        return -1;
    unsigned long long field[25] = { 0 };
    char *save = NULL;
    int i = 3;
    for (char *tok = strtok_r(p + 1, " ", &save); tok && i < 25;
         tok = strtok_r(NULL, " ", &save), i++)
        field[i] = strtoull(tok, NULL, 10);
    if (i < 25)
        return -1;
    double ticks = (double)sysconf(_SC_CLK_TCK);
    double boot = s_boot_time();
    out->cpu_s = (double)(field[14] + field[15]) / ticks;
    out->start_s = boot < 0 ? 0 : boot + (double)field[22] / ticks;
    out->virtual_b = (double)field[23];
    out->resident_b = (double)field[24] * (double)sysconf(_SC_PAGESIZE);
    return 0;
}

/*  Descriptors open now (the listing's own not counted), or -1. */
static long s_open_fds(void)
{
    DIR *dir = opendir("/proc/self/fd");
    if (!dir)
        return -1;
    long count = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)))
        if (entry->d_name[0] != '.')
            count++;
    closedir(dir);
    return count - 1;
}

static void s_gauge(kb_buf_t *out, const char *name, const char *type, const char *help,
                    double value)
{
    kb_prom_family(out, name, type, help);
    kb_prom_sample(out, name, NULL, value);
}

static void s_render_process(kb_buf_t *out)
{
    kb_self_stat_t stat;
    if (s_self_stat(&stat) == 0) {
        s_gauge(out, "process_cpu_seconds_total", "counter",
                "Total user and system CPU time spent in seconds.", stat.cpu_s);
        s_gauge(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
                stat.resident_b);
        s_gauge(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
                stat.virtual_b);
        s_gauge(out, "process_start_time_seconds", "gauge",
                "Start time of the process since unix epoch in seconds.", stat.start_s);
    }
    long fds = s_open_fds();
    if (fds >= 0)
        s_gauge(out, "process_open_fds", "gauge", "Number of open file descriptors.", (double)fds);
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
        s_gauge(out, "process_max_fds", "gauge", "Maximum number of open file descriptors.",
                (double)limit.rlim_cur);
}

/* ---- routes ------------------------------------------------------------------------- */

void kb_metrics_route(kb_http_req_t *req)
{
    char *families = kb_service_metrics(req->server->service);
    if (!families) {
        kb_http_reply_errorf(req, KB_ERR_UNAVAILABLE, "no metrics: the service is stopping");
        return;
    }
    kb_buf_t out = KB_BUF_INIT;
    kb_buf_puts(&out, families);
    free(families);
    s_render_requests(&out);
    s_render_process(&out);
    size_t len;
    char *text = kb_buf_take(&out, &len);
    struct MHD_Response *response
        = text ? MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!response) {
        free(text);
        kb_http_reply_errorf(req, KB_ERR_INTERNAL, "no memory for the metrics");
        return;
    }
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, KB_PROM_CONTENT_TYPE);
    kb_http_reply_response(req, MHD_HTTP_OK, response);
    MHD_destroy_response(response);
}

static void s_route_health(kb_http_req_t *req)
{
    json_t *health = kb_service_health(req->server->service);
    if (health)
        kb_http_reply_json(req, MHD_HTTP_OK, health);
    else
        kb_http_reply_errorf(req, KB_ERR_UNAVAILABLE, "the service is stopping");
}

/*  A --metrics-listen server: /metrics (token) and /health (open, for
    probes, as on the native listener); every other path our JSON 404. */
static const kb_route_t s_routes[] = {
    { "GET", "/metrics", kb_metrics_route, KB_ROUTE_TOKEN | KB_ROUTE_RESERVE },
    { "GET", "/health", s_route_health, KB_ROUTE_OPEN | KB_ROUTE_RESERVE },
};

const kb_route_table_t kb_metrics_routes = {
    .name = "metrics",
    .routes = s_routes,
    .count = sizeof s_routes / sizeof s_routes[0],
};
