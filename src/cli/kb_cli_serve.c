/*  kb_cli_serve.c - `kernelbridge serve`: the daemon's main, thin in the
    manner of malamute's: read flags and KB_* variables, build the service,
    start the HTTP server, wait for SIGTERM or SIGINT, tear down in reverse.
    Every behaviour lives in the service (src/service) and the server
    (src/server); this file only wires them together. */
#include "cli/kb_cli.h"

#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernelbridge.h"
#include "server/kb_e2b.h"
#include "server/kb_server.h"
#include "state/kb_statedir.h"
#include "util/kb_vec.h"

#define KB_DEFAULT_PORT 8899

static const char usage[]
    = "usage: kernelbridge serve [options]\n"
      "\n"
      "Serve stateful code execution on Jupyter kernels over HTTP (SPEC section 5).\n"
      "Every option has an environment equivalent, in brackets; options win.\n"
      "\n"
      "  --listen HOST:PORT        address to listen on; port 0 picks a free one\n"
      "                            [KB_LISTEN, default 127.0.0.1:8899; IPv6 as [::1]:PORT]\n"
      "  --e2b-listen HOST:PORT    also serve E2B's code-interpreter API there (for E2B's SDKs;\n"
      "                            127.0.0.1:49999 is E2B's address); off unless given\n"
      "                            [KB_E2B_LISTEN]\n"
      "  --e2b-port-file FILE      write the E2B listener's bound port there [KB_E2B_PORT_FILE]\n"
      "  --metrics-listen HOST:PORT  also serve GET /metrics (same token) and GET /health alone\n"
      "                            there, for a scraper; off unless given [KB_METRICS_LISTEN]\n"
      "  --metrics-port-file FILE  write its bound port there [KB_METRICS_PORT_FILE]\n"
      "  --token-file FILE         require Authorization: Bearer <the file's first line>\n"
      "                            [KB_TOKEN_FILE, or the token itself in KB_TOKEN]\n"
      "  --insecure                allow a non-loopback address without a token [KB_INSECURE=1]\n"
      "  --state-dir DIR           private 0700 dir of the daemon's state: contexts, run\n"
      "                            records and logs (state.db), kernels' files, the sandbox\n"
      "                            id; one daemon at a time [KB_STATE_DIR, default\n"
      "                            /var/lib/kernelbridge for root, else\n"
      "                            $XDG_STATE_HOME/kernelbridge or ~/.local/state/kernelbridge]\n"
      "  --ephemeral               a fresh state dir removed at exit instead: nothing\n"
      "                            survives the daemon [KB_EPHEMERAL=1]\n"
      "  --no-adopt                kill the kernels a killed daemon left in the state dir\n"
      "                            instead of adopting them as the same contexts\n"
      "                            [KB_NO_ADOPT=1]\n"
      "  --keep-kernels            at stop, leave kernels running for the next daemon on the\n"
      "                            state dir (an upgrade) instead of shutting them down\n"
      "                            [KB_KEEP_KERNELS=1]\n"
      "  --kernel-user USER        run kernels as USER (unprivileged; the daemon must be root),\n"
      "                            each in a private dir of its own: kernels cannot read the\n"
      "                            token, the state dir or the daemon [KB_KERNEL_USER]\n"
      "  --kernel-uid-range A-B    run each kernel as a uid of its own from A..B (gid the same\n"
      "                            number; the daemon must be root): contexts cannot read or\n"
      "                            signal each other either [KB_KERNEL_UID_RANGE]\n"
      "  --sandbox-id ID           name of this daemon [KB_SANDBOX_ID, default: kept in DIR]\n"
      "  --kernel LANG=KERNELSPEC  run LANG on KERNELSPEC; repeatable\n"
      "                            [KB_KERNELS=\"python=xpython,r=ir\"]\n"
      "  --preload LANG            start LANG's default context before serving; repeatable\n"
      "                            [KB_PRELOAD=\"python,r\"]\n"
      "  --pool LANG=N             keep N kernels of LANG started and ready for new contexts\n"
      "                            and isolated runs; repeatable; N=0 for none\n"
      "                            [KB_POOL=\"python=2,r=1\", default python=1]\n"
      "  --transport ipc|tcp       how kernels are reached [KB_TRANSPORT, default ipc]\n"
      "  --default-timeout S       timeout of runs that give none [KB_DEFAULT_TIMEOUT, 0: none]\n"
      "  --interrupt-grace S       from interrupt to kill at timeout [KB_INTERRUPT_GRACE, 2]\n"
      "  --start-timeout S         for a kernel to become ready [KB_START_TIMEOUT, 60]\n"
      "  --cull-idle-timeout S     delete a context (a kernel) idle this long: no run, no\n"
      "                            websocket cell, no websocket connected; later calls naming\n"
      "                            it say it was culled [KB_CULL_IDLE_TIMEOUT, 0: never]\n"
      "  --max-contexts N          [KB_MAX_CONTEXTS, default 64]\n"
      "  --max-body BYTES          request body limit [KB_MAX_BODY, default 16M]\n"
      "  --max-output BYTES        output kept per run [KB_MAX_OUTPUT, default 64M]\n"
      "  --max-processes N         finished run records kept [KB_MAX_PROCESSES, default 1000]\n"
      "  --max-process-bytes BYTES their logs kept [KB_MAX_PROCESS_BYTES, default 256M]\n"
      "  --max-output-memory BYTES all output held in memory, running and finished\n"
      "                            [KB_MAX_OUTPUT_MEMORY, default 256M]\n"
      "  --memory-limit BYTES      resident memory of each context's kernel and its\n"
      "                            processes, for contexts and isolated runs that give\n"
      "                            none; at least 256M [KB_MEMORY_LIMIT, default none]\n"
      "  --pids-limit N            processes of each context's kernel tree, likewise; at\n"
      "                            least 8 [KB_PIDS_LIMIT, default none]\n"
      "  --max-connections N       concurrent HTTP connections [KB_MAX_CONNECTIONS, 256]\n"
      "  --connection-timeout S    close connections idle this long [KB_CONNECTION_TIMEOUT, 60]\n"
      "  --header-timeout S        close a connection that has not sent a whole request head\n"
      "                            S s after opening or after its last response\n"
      "                            [KB_HEADER_TIMEOUT, 10]\n"
      "  --max-connections-per-address N\n"
      "                            connections of one client address\n"
      "                            [KB_MAX_CONNECTIONS_PER_ADDRESS, half of --max-connections]\n"
      "  --connection-reserve N    connections past the limit kept for GET /health and\n"
      "                            /metrics [KB_CONNECTION_RESERVE, 16]\n"
      "  --sse-keepalive S         comment line on idle event streams, at most half the\n"
      "                            connection timeout [KB_SSE_KEEPALIVE, 15]\n"
      "  --log-format text|json    request log on stderr [KB_LOG_FORMAT, default text]\n"
      "  --port-file FILE          write the bound port there once listening, remove it at\n"
      "                            exit [KB_PORT_FILE]\n"
      "  -h, --help                this text\n"
      "\n"
      "BYTES take a K, M or G suffix (powers of 1024). Once listening, the daemon\n"
      "prints \"listening on http://HOST:PORT\" on stdout. SIGTERM or SIGINT stop it:\n"
      "runs still going end as sandbox_stopped, kernels are shut down, exit status 0.\n"
      "Exit status 2: bad usage or a refused configuration; 1: failure to start.\n";

/*  Everything the command line and environment say. Strings are borrowed
    from argv / environ except the lists, whose arrays are owned. */
typedef struct {
    const char *listen;
    const char *e2b_listen;
    const char *e2b_port_file;
    const char *token_file;
    const char *port_file;
    const char *log_format;
    bool insecure;
    bool ephemeral;
    kb_strv_t kernels; /* --kernel entries, NULL-terminated */
    kb_strv_t pool;    /* --pool entries */
    kb_strv_t preload; /* --preload entries */
    kb_service_config_t service;
    kb_server_config_t server;
    const char *e2b_host; /* from --e2b-listen */
    unsigned e2b_port;
    const char *metrics_listen, *metrics_port_file, *metrics_host; /* --metrics-listen */
    unsigned metrics_port;
} serve_opts_t;

/* ---- Value parsers (0 ok, -1 with a message on stderr) -------------------- */

static int bad_value(const char *what, const char *value, const char *expected)
{
    fprintf(stderr, "kernelbridge serve: %s: bad value '%s' (%s)\n", what, value, expected);
    return -1;
}

static int parse_seconds(const char *what, const char *value, double *out)
{
    char *end;
    errno = 0;
    double n = strtod(value, &end);
    if (!*value || *end || errno || !isfinite(n) || n < 0)
        return bad_value(what, value, "a non-negative number of seconds");
    *out = n;
    return 0;
}

static int parse_count(const char *what, const char *value, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long n = strtoull(value, &end, 10);
    if (!*value || *end || errno || value[0] == '-')
        return bad_value(what, value, "a non-negative integer");
    *out = (size_t)n;
    return 0;
}

static int parse_bytes(const char *what, const char *value, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long n = strtoull(value, &end, 10);
    if (!*value || errno || value[0] == '-' || end == value)
        return bad_value(what, value, "a size in bytes, with an optional K, M or G");
    unsigned shift = 0;
    if (*end) {
        switch (*end | 0x20) {
            case 'k':
                shift = 10;
                break;
            case 'm':
                shift = 20;
                break;
            case 'g':
                shift = 30;
                break;
            default:
                return bad_value(what, value, "a size in bytes, with an optional K, M or G");
        }
        end++;
        if (strcasecmp(end, "") != 0 && strcasecmp(end, "b") != 0 && strcasecmp(end, "ib") != 0)
            return bad_value(what, value, "a size in bytes, with an optional K, M or G");
    }
    if (n > (SIZE_MAX >> shift))
        return bad_value(what, value, "too large");
    *out = (size_t)(n << shift);
    return 0;
}

/*  "HOST:PORT", "[V6]:PORT" or ":PORT". host points into buf. */
static int parse_listen(const char *flag, const char *value, char *buf, size_t size,
                        const char **host_out, unsigned *port_out)
{
    const char *colon = strrchr(value, ':');
    if (!colon || strlen(value) >= size)
        return bad_value(flag, value, "HOST:PORT");
    size_t host_len = (size_t)(colon - value);
    memcpy(buf, value, host_len);
    buf[host_len] = '\0';
    char *host = buf;
    if (host[0] == '[') {
        if (host_len < 2 || host[host_len - 1] != ']')
            return bad_value(flag, value, "[IPv6]:PORT");
        host[host_len - 1] = '\0';
        host++;
    }
    size_t port;
    if (parse_count(flag, colon + 1, &port) < 0 || port > 65535)
        return bad_value(flag, value, "a port from 0 to 65535");
    *host_out = *host ? host : NULL;
    *port_out = (unsigned)port;
    return 0;
}

/*  A comma-separated list from the environment. */
static int list_from_env(const char *name, kb_strv_t *list)
{
    const char *value = getenv(name);
    for (const char *p = value; p && *p;) {
        size_t n = strcspn(p, ",");
        while (n > 0 && *p == ' ')
            p++, n--;
        if (n > 0 && kb_strv_pushn(list, p, n) != KB_BUF_OK)
            return -1;
        p += n;
        if (*p == ',')
            p++;
    }
    return 0;
}

/*  "A-B": uids 1..4294967294, A <= B, at most 65536 of them. */
static int parse_uid_range(const char *value, unsigned *first, unsigned *last)
{
    const char *expected = "A-B: uids from 1 to 4294967294, A <= B, at most 65536 of them";
    char *end;
    errno = 0;
    unsigned long long a = strtoull(value, &end, 10);
    if (end == value || *end != '-' || errno || value[0] == '-' || end[1] == '-')
        return bad_value("--kernel-uid-range", value, expected);
    const char *second = end + 1;
    unsigned long long b = strtoull(second, &end, 10);
    if (end == second || *end || errno || a == 0 || b < a || b >= 0xffffffffULL || b - a >= 65536)
        return bad_value("--kernel-uid-range", value, expected);
    *first = (unsigned)a;
    *last = (unsigned)b;
    return 0;
}

static int check_kernel_map(char **kernels)
{
    for (size_t i = 0; kernels && kernels[i]; i++) {
        const char *eq = strchr(kernels[i], '=');
        if (!eq || eq == kernels[i] || !eq[1])
            return bad_value("--kernel", kernels[i], "LANG=KERNELSPEC");
    }
    return 0;
}

/* ---- Options ------------------------------------------------------------- */

enum {
    OPT_LISTEN = 256,
    OPT_TOKEN_FILE,
    OPT_INSECURE,
    OPT_STATE_DIR,
    OPT_SANDBOX_ID,
    OPT_KERNEL,
    OPT_POOL,
    OPT_PRELOAD,
    OPT_TRANSPORT,
    OPT_DEFAULT_TIMEOUT,
    OPT_INTERRUPT_GRACE,
    OPT_START_TIMEOUT,
    OPT_CULL_IDLE_TIMEOUT,
    OPT_MAX_CONTEXTS,
    OPT_MAX_BODY,
    OPT_MAX_OUTPUT,
    OPT_MAX_PROCESSES,
    OPT_MAX_PROCESS_BYTES,
    OPT_MAX_OUTPUT_MEMORY,
    OPT_MAX_CONNECTIONS,
    OPT_MEMORY_LIMIT,
    OPT_PIDS_LIMIT,
    OPT_CONNECTION_TIMEOUT,
    OPT_HEADER_TIMEOUT,
    OPT_MAX_PER_ADDRESS,
    OPT_CONNECTION_RESERVE,
    OPT_SSE_KEEPALIVE,
    OPT_LOG_FORMAT,
    OPT_PORT_FILE,
    OPT_E2B_LISTEN,
    OPT_E2B_PORT_FILE,
    OPT_EPHEMERAL,
    OPT_NO_ADOPT,
    OPT_KEEP_KERNELS,
    OPT_KERNEL_USER,
    OPT_KERNEL_UID_RANGE,
    OPT_METRICS_LISTEN,
    OPT_METRICS_PORT_FILE,
};

static const struct option long_options[] = {
    { "listen", required_argument, NULL, OPT_LISTEN },
    { "token-file", required_argument, NULL, OPT_TOKEN_FILE },
    { "insecure", no_argument, NULL, OPT_INSECURE },
    { "state-dir", required_argument, NULL, OPT_STATE_DIR },
    { "sandbox-id", required_argument, NULL, OPT_SANDBOX_ID },
    { "kernel", required_argument, NULL, OPT_KERNEL },
    { "pool", required_argument, NULL, OPT_POOL },
    { "preload", required_argument, NULL, OPT_PRELOAD },
    { "transport", required_argument, NULL, OPT_TRANSPORT },
    { "default-timeout", required_argument, NULL, OPT_DEFAULT_TIMEOUT },
    { "interrupt-grace", required_argument, NULL, OPT_INTERRUPT_GRACE },
    { "start-timeout", required_argument, NULL, OPT_START_TIMEOUT },
    { "cull-idle-timeout", required_argument, NULL, OPT_CULL_IDLE_TIMEOUT },
    { "max-contexts", required_argument, NULL, OPT_MAX_CONTEXTS },
    { "max-body", required_argument, NULL, OPT_MAX_BODY },
    { "max-output", required_argument, NULL, OPT_MAX_OUTPUT },
    { "max-processes", required_argument, NULL, OPT_MAX_PROCESSES },
    { "max-process-bytes", required_argument, NULL, OPT_MAX_PROCESS_BYTES },
    { "max-output-memory", required_argument, NULL, OPT_MAX_OUTPUT_MEMORY },
    { "max-connections", required_argument, NULL, OPT_MAX_CONNECTIONS },
    { "memory-limit", required_argument, NULL, OPT_MEMORY_LIMIT },
    { "pids-limit", required_argument, NULL, OPT_PIDS_LIMIT },
    { "connection-timeout", required_argument, NULL, OPT_CONNECTION_TIMEOUT },
    { "header-timeout", required_argument, NULL, OPT_HEADER_TIMEOUT },
    { "max-connections-per-address", required_argument, NULL, OPT_MAX_PER_ADDRESS },
    { "connection-reserve", required_argument, NULL, OPT_CONNECTION_RESERVE },
    { "sse-keepalive", required_argument, NULL, OPT_SSE_KEEPALIVE },
    { "log-format", required_argument, NULL, OPT_LOG_FORMAT },
    { "port-file", required_argument, NULL, OPT_PORT_FILE },
    { "e2b-listen", required_argument, NULL, OPT_E2B_LISTEN },
    { "e2b-port-file", required_argument, NULL, OPT_E2B_PORT_FILE },
    { "ephemeral", no_argument, NULL, OPT_EPHEMERAL },
    { "no-adopt", no_argument, NULL, OPT_NO_ADOPT },
    { "keep-kernels", no_argument, NULL, OPT_KEEP_KERNELS },
    { "kernel-user", required_argument, NULL, OPT_KERNEL_USER },
    { "kernel-uid-range", required_argument, NULL, OPT_KERNEL_UID_RANGE },
    { "metrics-listen", required_argument, NULL, OPT_METRICS_LISTEN },
    { "metrics-port-file", required_argument, NULL, OPT_METRICS_PORT_FILE },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

/*  The environment name of each option, so that env and flags go through
    one parser: flags are applied after the environment and win. */
static const struct {
    int opt;
    const char *env;
} env_names[] = {
    { OPT_LISTEN, "KB_LISTEN" },
    { OPT_TOKEN_FILE, "KB_TOKEN_FILE" },
    { OPT_STATE_DIR, "KB_STATE_DIR" },
    { OPT_SANDBOX_ID, "KB_SANDBOX_ID" },
    { OPT_TRANSPORT, "KB_TRANSPORT" },
    { OPT_DEFAULT_TIMEOUT, "KB_DEFAULT_TIMEOUT" },
    { OPT_INTERRUPT_GRACE, "KB_INTERRUPT_GRACE" },
    { OPT_START_TIMEOUT, "KB_START_TIMEOUT" },
    { OPT_CULL_IDLE_TIMEOUT, "KB_CULL_IDLE_TIMEOUT" },
    { OPT_MAX_CONTEXTS, "KB_MAX_CONTEXTS" },
    { OPT_MAX_BODY, "KB_MAX_BODY" },
    { OPT_MAX_OUTPUT, "KB_MAX_OUTPUT" },
    { OPT_MAX_PROCESSES, "KB_MAX_PROCESSES" },
    { OPT_MAX_PROCESS_BYTES, "KB_MAX_PROCESS_BYTES" },
    { OPT_MAX_OUTPUT_MEMORY, "KB_MAX_OUTPUT_MEMORY" },
    { OPT_MAX_CONNECTIONS, "KB_MAX_CONNECTIONS" },
    { OPT_MEMORY_LIMIT, "KB_MEMORY_LIMIT" },
    { OPT_PIDS_LIMIT, "KB_PIDS_LIMIT" },
    { OPT_CONNECTION_TIMEOUT, "KB_CONNECTION_TIMEOUT" },
    { OPT_HEADER_TIMEOUT, "KB_HEADER_TIMEOUT" },
    { OPT_MAX_PER_ADDRESS, "KB_MAX_CONNECTIONS_PER_ADDRESS" },
    { OPT_CONNECTION_RESERVE, "KB_CONNECTION_RESERVE" },
    { OPT_SSE_KEEPALIVE, "KB_SSE_KEEPALIVE" },
    { OPT_LOG_FORMAT, "KB_LOG_FORMAT" },
    { OPT_PORT_FILE, "KB_PORT_FILE" },
    { OPT_E2B_LISTEN, "KB_E2B_LISTEN" },
    { OPT_E2B_PORT_FILE, "KB_E2B_PORT_FILE" },
    { OPT_KERNEL_USER, "KB_KERNEL_USER" },
    { OPT_KERNEL_UID_RANGE, "KB_KERNEL_UID_RANGE" },
    { OPT_METRICS_LISTEN, "KB_METRICS_LISTEN" },
    { OPT_METRICS_PORT_FILE, "KB_METRICS_PORT_FILE" },
};

/*  Apply one option. listen_buf holds the parsed hosts (static storage of
    the caller): a third each of --listen's, --e2b-listen's and
    --metrics-listen's. */
static int apply(serve_opts_t *o, int opt, const char *value, char *listen_buf, size_t size)
{
    size_t n;
    double s;
    size_t third = size / 3;
    switch (opt) {
        case OPT_LISTEN:
            o->listen = value;
            return parse_listen("--listen", value, listen_buf, third, &o->server.host,
                                &o->server.port);
        case OPT_E2B_LISTEN:
            o->e2b_listen = value;
            return parse_listen("--e2b-listen", value, listen_buf + third, third, &o->e2b_host,
                                &o->e2b_port);
        case OPT_METRICS_LISTEN:
            o->metrics_listen = value;
            return parse_listen("--metrics-listen", value, listen_buf + 2 * third, third,
                                &o->metrics_host, &o->metrics_port);
        case OPT_METRICS_PORT_FILE:
            o->metrics_port_file = value;
            return 0;
        case OPT_E2B_PORT_FILE:
            o->e2b_port_file = value;
            return 0;
        case OPT_TOKEN_FILE:
            o->token_file = value;
            return 0;
        case OPT_INSECURE:
            o->insecure = true;
            return 0;
        case OPT_EPHEMERAL:
            o->ephemeral = true;
            return 0;
        case OPT_NO_ADOPT:
            o->service.no_adopt = true;
            return 0;
        case OPT_KEEP_KERNELS:
            o->service.keep_kernels = true;
            return 0;
        case OPT_STATE_DIR:
            o->service.state_dir = value;
            return 0;
        case OPT_SANDBOX_ID:
            o->service.sandbox_id = value;
            return 0;
        case OPT_KERNEL_USER:
            if (!*value || strlen(value) > 32)
                return bad_value("--kernel-user", value, "a user name");
            o->service.kernel_user = value;
            return 0;
        case OPT_KERNEL_UID_RANGE:
            return parse_uid_range(value, &o->service.kernel_uid_min, &o->service.kernel_uid_max);
        case OPT_TRANSPORT:
            if (strcmp(value, "ipc") != 0 && strcmp(value, "tcp") != 0)
                return bad_value("--transport", value, "ipc or tcp");
            o->service.transport = value;
            return 0;
        case OPT_DEFAULT_TIMEOUT:
            return parse_seconds("--default-timeout", value, &o->service.default_timeout);
        case OPT_INTERRUPT_GRACE:
            return parse_seconds("--interrupt-grace", value, &o->service.interrupt_grace);
        case OPT_START_TIMEOUT:
            return parse_seconds("--start-timeout", value, &o->service.start_timeout);
        case OPT_CULL_IDLE_TIMEOUT:
            return parse_seconds("--cull-idle-timeout", value, &o->service.cull_idle_timeout);
        case OPT_MAX_CONTEXTS:
            return parse_count("--max-contexts", value, &o->service.max_contexts);
        case OPT_MAX_BODY:
            return parse_bytes("--max-body", value, &o->server.max_body);
        case OPT_MAX_OUTPUT:
            return parse_bytes("--max-output", value, &o->service.max_output_bytes);
        case OPT_MAX_PROCESSES:
            return parse_count("--max-processes", value, &o->service.max_processes);
        case OPT_MAX_PROCESS_BYTES:
            return parse_bytes("--max-process-bytes", value, &o->service.max_process_bytes);
        case OPT_MAX_OUTPUT_MEMORY:
            return parse_bytes("--max-output-memory", value, &o->service.max_output_memory);
        case OPT_MEMORY_LIMIT:
            if (parse_bytes("--memory-limit", value, &n) != 0)
                return -1;
            o->service.memory_limit = (long long)n;
            return 0;
        case OPT_PIDS_LIMIT:
            if (parse_count("--pids-limit", value, &n) != 0)
                return -1;
            o->service.pids_limit = (long long)n;
            return 0;
        case OPT_MAX_CONNECTIONS:
            if (parse_count("--max-connections", value, &n) < 0 || n > 65536)
                return bad_value("--max-connections", value, "at most 65536");
            o->server.max_connections = (unsigned)n;
            return 0;
        case OPT_CONNECTION_TIMEOUT:
            if (parse_count("--connection-timeout", value, &n) < 0 || n == 0 || n > 86400)
                return bad_value("--connection-timeout", value, "1 to 86400 seconds");
            o->server.connection_timeout = (unsigned)n;
            return 0;
        case OPT_HEADER_TIMEOUT:
            if (parse_seconds("--header-timeout", value, &s) < 0 || s < 0.1 || s > 3600)
                return bad_value("--header-timeout", value, "0.1 to 3600 seconds");
            o->server.header_timeout = s;
            return 0;
        case OPT_MAX_PER_ADDRESS:
            if (parse_count("--max-connections-per-address", value, &n) < 0 || n == 0 || n > 65536)
                return bad_value("--max-connections-per-address", value, "1 to 65536");
            o->server.max_per_address = (unsigned)n;
            return 0;
        case OPT_CONNECTION_RESERVE:
            if (parse_count("--connection-reserve", value, &n) < 0 || n == 0 || n > 1024)
                return bad_value("--connection-reserve", value, "1 to 1024");
            o->server.reserve = (unsigned)n;
            return 0;
        case OPT_SSE_KEEPALIVE:
            if (parse_seconds("--sse-keepalive", value, &s) < 0 || s > 3600)
                return bad_value("--sse-keepalive", value, "at most 3600 seconds");
            o->server.sse_keepalive_ms = (unsigned)(s * 1000.0);
            if (o->server.sse_keepalive_ms == 0)
                o->server.sse_keepalive_ms = 1;
            return 0;
        case OPT_LOG_FORMAT:
            if (strcmp(value, "text") != 0 && strcmp(value, "json") != 0)
                return bad_value("--log-format", value, "text or json");
            o->server.log_format = strcmp(value, "json") == 0 ? KB_LOG_JSON : KB_LOG_TEXT;
            return 0;
        case OPT_PORT_FILE:
            o->port_file = value;
            return 0;
        default:
            return -1;
    }
}

/* ---- Start-up steps ------------------------------------------------------ */

/*  The token: first line of the token file, else KB_TOKEN. Caller frees
    (and wipes) it; NULL and *failed false when none is configured. */
static char *read_token(const char *path, bool *failed)
{
    *failed = false;
    if (!path) {
        /*  Wiped where it is, in the environment the process started
            with, so that /proc/<pid>/environ does not show it either. */
        char *env = getenv("KB_TOKEN");
        char *token = env && *env ? strdup(env) : NULL;
        if (env)
            explicit_bzero(env, strlen(env));
        return token;
    }
    FILE *file = fopen(path, "r");
    if (!file) {
        fprintf(stderr, "kernelbridge serve: cannot read token file %s: %s\n", path,
                strerror(errno));
        *failed = true;
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(file), &st) == 0 && (st.st_mode & 0077))
        fprintf(stderr, "kernelbridge serve: warning: token file %s is readable by others\n", path);
    char line[KB_SERVER_TOKEN_MAX + 2] = { 0 };
    bool got = fgets(line, sizeof line, file) != NULL;
    fclose(file);
    size_t len = got ? strcspn(line, "\r\n") : 0;
    line[len] = '\0';
    while (len > 0 && (line[len - 1] == ' ' || line[len - 1] == '\t'))
        line[--len] = '\0';
    if (len == 0 || len > KB_SERVER_TOKEN_MAX) {
        fprintf(stderr,
                "kernelbridge serve: token file %s: the first line must hold a token "
                "of 1 to %d bytes\n",
                path, KB_SERVER_TOKEN_MAX);
        *failed = true;
        explicit_bzero(line, sizeof line);
        return NULL;
    }
    char *token = strdup(line);
    explicit_bzero(line, sizeof line);
    return token;
}

/*  Start the default context of language and wait until it is ready. */
static int preload(kb_service_t *service, const char *language, kb_log_format_t format)
{
    kb_error_t err = { KB_OK, "" };
    kb_context_opts_t opts = { .language = language };
    json_t *ctx = kb_service_context_default(service, &opts, &err);
    if (!ctx) {
        kb_server_log(format, "error", "cannot preload %s: %s: %s", language,
                      kb_code_name(err.code), err.message);
        return -1;
    }
    json_decref(ctx);
    kb_server_log(format, "info", "preloaded the default %s context", language);
    return 0;
}

static int write_port_file(const char *path, int port)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *file = fopen(tmp, "w");
    if (!file)
        return -1;
    fprintf(file, "%d\n", port);
    if (fclose(file) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/*  The --metrics-listen server, its port written to port_file (when not
    NULL); NULL after logging why. */
static kb_server_t *start_metrics(kb_service_t *service, const kb_server_config_t *config,
                                  const char *port_file, kb_log_format_t format)
{
    kb_error_t err = { KB_OK, "" };
    kb_server_t *metrics = kb_server_new(service, config, &err);
    if (!metrics) {
        kb_server_log(format, "error", "metrics: %s", err.message);
        return NULL;
    }
    if (port_file && write_port_file(port_file, kb_server_port(metrics)) < 0) {
        kb_server_log(format, "error", "cannot write port file %s: %s", port_file, strerror(errno));
        kb_server_destroy(&metrics);
        return NULL;
    }
    kb_server_log(format, "info", "serving GET /metrics on %s", kb_server_url(metrics));
    return metrics;
}

/* ---- main ------------------------------------------------------------------ */

int kb_cli_serve(int argc, char **argv)
{
    static char listen_buf[768];
    serve_opts_t o = { 0 };
    o.server.port = KB_DEFAULT_PORT;
    kb_service_t *service = NULL;
    kb_server_t *server = NULL;
    /* Output comes in large pieces: with a fixed threshold every block of
       128 KiB or more is a mapping of its own, grown in place (mremap) and
       given back when freed, instead of glibc raising its threshold after
       the first large free and keeping freed output in the heap. */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    /* /proc/<pid>/environ, mem, fd/ and the like become root's only, even
       to processes of the daemon's own uid (and a ptrace needs root). */
    if (prctl(PR_SET_DUMPABLE, 0) != 0)
        fprintf(stderr, "kernelbridge serve: warning: cannot make the daemon non-dumpable: %s\n",
                strerror(errno));
    kb_server_t *e2b = NULL, *metrics = NULL;
    char *token = NULL;
    char *default_state_dir = NULL;
    bool wrote_port_file = false, wrote_e2b_port_file = false, wrote_metrics_port_file = false;
    int status = 2;

    for (size_t i = 0; i < sizeof env_names / sizeof env_names[0]; i++) {
        const char *value = getenv(env_names[i].env);
        if (value && *value
            && apply(&o, env_names[i].opt, value, listen_buf, sizeof listen_buf) < 0)
            goto done;
    }
    /* switches: KB_INSECURE=1 (or true) and the like */
    static const struct {
        int opt;
        const char *env;
    } switches[] = { { OPT_INSECURE, "KB_INSECURE" },
                     { OPT_EPHEMERAL, "KB_EPHEMERAL" },
                     { OPT_NO_ADOPT, "KB_NO_ADOPT" },
                     { OPT_KEEP_KERNELS, "KB_KEEP_KERNELS" } };
    for (size_t i = 0; i < sizeof switches / sizeof switches[0]; i++) {
        const char *value = getenv(switches[i].env);
        if (value && (strcmp(value, "1") == 0 || strcasecmp(value, "true") == 0))
            apply(&o, switches[i].opt, value, listen_buf, sizeof listen_buf);
    }

    bool kernels_from_flags = false, preload_from_flags = false, pool_from_flags = false;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
        if (opt == 'h') {
            fputs(usage, stdout);
            status = 0;
            goto done;
        }
        if (opt == OPT_POOL) {
            if (!pool_from_flags)
                kb_strv_clear(&o.pool);
            pool_from_flags = true;
            if (kb_strv_pushn(&o.pool, optarg, strlen(optarg)) != KB_BUF_OK)
                goto done;
            continue;
        }
        if (opt == OPT_KERNEL || opt == OPT_PRELOAD) {
            bool kernel = opt == OPT_KERNEL;
            if (kernel && !kernels_from_flags)
                kb_strv_clear(&o.kernels);
            if (!kernel && !preload_from_flags)
                kb_strv_clear(&o.preload);
            kernels_from_flags |= kernel;
            preload_from_flags |= !kernel;
            if (kb_strv_pushn(kernel ? &o.kernels : &o.preload, optarg, strlen(optarg))
                != KB_BUF_OK)
                goto done;
            continue;
        }
        if (opt == '?' || apply(&o, opt, optarg, listen_buf, sizeof listen_buf) < 0) {
            fputs(usage, stderr);
            goto done;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kernelbridge serve: unexpected argument '%s'\n", argv[optind]);
        fputs(usage, stderr);
        goto done;
    }
    if ((!kernels_from_flags && list_from_env("KB_KERNELS", &o.kernels) < 0)
        || (!preload_from_flags && list_from_env("KB_PRELOAD", &o.preload) < 0)
        || (!pool_from_flags && list_from_env("KB_POOL", &o.pool) < 0)
        || check_kernel_map(o.kernels.items) < 0)
        goto done;
    if (!o.pool.len && !pool_from_flags && !getenv("KB_POOL")
        && kb_strv_push(&o.pool, strdup("python=1")) != KB_BUF_OK)
        goto done;
    if (o.ephemeral && o.service.state_dir) {
        fprintf(stderr, "kernelbridge serve: --ephemeral and --state-dir exclude each other\n");
        goto done;
    }
    if (!o.ephemeral && !o.service.state_dir) {
        default_state_dir = kb_statedir_default();
        if (!default_state_dir) {
            fprintf(stderr, "kernelbridge serve: no default state dir (no home directory is "
                            "known): give --state-dir or --ephemeral\n");
            goto done;
        }
        o.service.state_dir = default_state_dir;
    }
    if (o.service.kernel_user && o.service.kernel_uid_min) {
        fprintf(stderr, "kernelbridge serve: --kernel-user and --kernel-uid-range exclude each "
                        "other\n");
        goto done;
    }
    if ((o.service.kernel_user || o.service.kernel_uid_min) && geteuid() != 0) {
        fprintf(stderr,
                "kernelbridge serve: --kernel-user and --kernel-uid-range need the daemon to run "
                "as root (it runs as uid %u)\n",
                (unsigned)geteuid());
        goto done;
    }
    o.service.kernel_map = (const char *const *)o.kernels.items;
    o.service.pool = (const char *const *)o.pool.items;
    kb_log_format_t format = o.server.log_format;

    bool token_failed;
    token = read_token(o.token_file, &token_failed);
    if (token_failed)
        goto done;
    /* The token is the daemon's secret: kernels must not inherit it. */
    unsetenv("KB_TOKEN");
    o.server.token = token;
    o.server.insecure = o.insecure;
    kb_error_t err = { KB_OK, "" };
    if (kb_server_check_config(&o.server, &err) < 0) {
        fprintf(stderr, "kernelbridge serve: %s\n", err.message);
        goto done;
    }
    /* The E2B listener: same token, limits and log as the native one. */
    kb_server_config_t e2b_config = o.server;
    e2b_config.host = o.e2b_host;
    e2b_config.port = o.e2b_port;
    e2b_config.sse_keepalive_ms = 0;
    e2b_config.api = KB_API_E2B;
    if (o.e2b_listen && kb_server_check_config(&e2b_config, &err) < 0) {
        fprintf(stderr, "kernelbridge serve: --e2b-listen: %s\n", err.message);
        goto done;
    }
    /* The metrics listener: likewise, with /metrics and /health alone. */
    kb_server_config_t metrics_config = o.server;
    metrics_config.host = o.metrics_host;
    metrics_config.port = o.metrics_port;
    metrics_config.api = KB_API_METRICS;
    if (o.metrics_listen && kb_server_check_config(&metrics_config, &err) < 0) {
        fprintf(stderr, "kernelbridge serve: --metrics-listen: %s\n", err.message);
        goto done;
    }

    /* Every thread (service engine, HTTP workers) inherits this mask, so
       the signals reach only the sigwait below. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);

    status = 1;
    service = kb_service_new(&o.service, &err);
    if (!service) {
        kb_server_log(format, "error", "cannot start the service: %s", err.message);
        if (err.code == KB_ERR_BAD_REQUEST)
            status = 2; /* a refused state dir: in use, unreadable, too new */
        goto done;
    }
    json_t *health = kb_service_health(service);
    json_t *limits = json_object_get(health, "limits");
    const char *why = json_string_value(json_object_get(limits, "why"));
    if (why)
        kb_server_log(format, "info", "limits: the sampler alone (no delegated cgroup v2: %s)",
                      why);
    else
        kb_server_log(format, "info", "limits: the sampler and a cgroup v2 per limited kernel");
    json_decref(health);
    for (size_t i = 0; i < o.preload.len; i++) {
        if (preload(service, o.preload.items[i], format) < 0)
            goto done;
    }
    server = kb_server_new(service, &o.server, &err);
    if (!server) {
        kb_server_log(format, "error", "%s", err.message);
        if (err.code == KB_ERR_BAD_REQUEST)
            status = 2;
        goto done;
    }
    if (o.port_file && write_port_file(o.port_file, kb_server_port(server)) < 0) {
        kb_server_log(format, "error", "cannot write port file %s: %s", o.port_file,
                      strerror(errno));
        goto done;
    }
    wrote_port_file = o.port_file != NULL;
    printf("listening on %s\n", kb_server_url(server));
    fflush(stdout);
    kb_server_log(format, "info", "kernelbridge %s serving sandbox %s on %s%s", KB_VERSION,
                  kb_service_sandbox_id(service), kb_server_url(server),
                  token ? "" : " without a token");
    if (o.e2b_listen) {
        if (kb_e2b_start_defaults(service, format) < 0)
            goto done;
        e2b = kb_server_new(service, &e2b_config, &err);
        if (!e2b) {
            kb_server_log(format, "error", "e2b: %s", err.message);
            goto done;
        }
        if (o.e2b_port_file && write_port_file(o.e2b_port_file, kb_server_port(e2b)) < 0) {
            kb_server_log(format, "error", "cannot write port file %s: %s", o.e2b_port_file,
                          strerror(errno));
            goto done;
        }
        wrote_e2b_port_file = o.e2b_port_file != NULL;
        printf("e2b listening on %s\n", kb_server_url(e2b));
        fflush(stdout);
        kb_server_log(format, "info", "serving E2B's code-interpreter API on %s",
                      kb_server_url(e2b));
    }
    if (o.metrics_listen) {
        if (!(metrics = start_metrics(service, &metrics_config, o.metrics_port_file, format)))
            goto done;
        wrote_metrics_port_file = o.metrics_port_file != NULL;
    }

    int signal_number = 0;
    while (sigwait(&stop_signals, &signal_number) != 0)
        ;
    kb_server_log(format, "info", "stopping on SIG%s", sigabbrev_np(signal_number));
    /* Reverse order: no new requests, then end runs (their clients still
       get the sandbox_stopped result), then close connections. */
    kb_server_drain(server);
    if (e2b)
        kb_server_drain(e2b);
    if (metrics)
        kb_server_drain(metrics);
    kb_service_stop(service);
    kb_server_destroy(&metrics);
    kb_server_destroy(&e2b);
    kb_server_destroy(&server);
    kb_service_destroy(&service);
    kb_server_log(format, "info", "stopped");
    status = 0;
done:
    free(default_state_dir);
    if (wrote_port_file)
        unlink(o.port_file);
    if (wrote_e2b_port_file)
        unlink(o.e2b_port_file);
    if (wrote_metrics_port_file)
        unlink(o.metrics_port_file);
    if (e2b)
        kb_server_drain(e2b);
    kb_server_destroy(&metrics);
    kb_server_destroy(&e2b);
    kb_server_destroy(&server);
    kb_service_destroy(&service);
    if (token) {
        explicit_bzero(token, strlen(token));
        free(token);
    }
    kb_strv_clear(&o.kernels);
    kb_strv_clear(&o.preload);
    kb_strv_clear(&o.pool);
    return status;
}
