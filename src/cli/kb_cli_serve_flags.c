/*  kb_cli_serve_flags.c - the table of `kernelbridge serve`'s flags and what
    reads it: defaults, the KB_* environment, argv (getopt_long) and --help.
    A flag is added here and nowhere else; docs/reference/configuration.md
    is what --flags-markdown prints (tests/cli/test_serve_flags.py). Not for
    what the daemon does with the values (kb_cli_serve.c). */
#include "cli/kb_cli_serve_flags.h"

#include <assert.h>
#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/kb_cli_serve_values.h"

typedef enum {
    FLAG_SWITCH,  /* bool; its variable says 1 or true */
    FLAG_STRING,  /* const char *, borrowed */
    FLAG_LIST,    /* kb_strv_t; repeatable, its variable comma-separated */
    FLAG_SECONDS, /* double, within [min, max] when range says so */
    FLAG_MILLIS,  /* seconds stored as unsigned milliseconds, at least 1 */
    FLAG_COUNT,   /* integer, stored in the field's width, within [min, max] */
    FLAG_BYTES,   /* integer with a K, M or G suffix, likewise */
    FLAG_CUSTOM,  /* parse() */
} flag_type_t;

typedef struct flag flag_t;
struct flag {
    const char *name; /* --name */
    const char *arg;  /* its value's placeholder; NULL for a switch */
    const char *env;  /* KB_* */
    flag_type_t type;
    size_t offset;     /* the target field of kb_serve_opts_t */
    size_t width;      /* its size */
    const char *value; /* default, parsed as if given, before the environment */
    const char *shown; /* default as --help shows it when no value applies */
    const char *help;
    double min, max;   /* bounds, checked when range is not NULL; max 0: none */
    const char *range; /* the bounds in words, for the message */
    int (*parse)(kb_serve_opts_t *o, const char *what, const char *value);
    char sep; /* a list's separator in its variable; 0: ',' */
};

#define FIELD(f) offsetof(kb_serve_opts_t, f), sizeof(((kb_serve_opts_t *)0)->f)
#define PARSER(fn) FLAG_CUSTOM, 0, 0, .parse = fn

/* ---- Values that need more than a type ------------------------------------- */

static int parse_listen(kb_serve_opts_t *o, const char *what, const char *value)
{
    return kb_serve_parse_listen(what, value, &o->listen);
}

static int parse_e2b_listen(kb_serve_opts_t *o, const char *what, const char *value)
{
    return kb_serve_parse_listen(what, value, &o->e2b_listen);
}

static int parse_metrics_listen(kb_serve_opts_t *o, const char *what, const char *value)
{
    return kb_serve_parse_listen(what, value, &o->metrics_listen);
}

static int parse_kernel_user(kb_serve_opts_t *o, const char *what, const char *value)
{
    if (!*value || strlen(value) > 32)
        return kb_serve_bad_value(what, value, "a user name");
    o->service.kernel_user = value;
    return 0;
}

static int parse_uid_range(kb_serve_opts_t *o, const char *what, const char *value)
{
    (void)what;
    static const kb_serve_range_t uids
        = { "--kernel-uid-range",
            1,
            4294967294ULL,
            1,
            65536,
            "A-B: uids from 1 to 4294967294, A <= B, at most 65536 of them" };
    return kb_serve_parse_range(&uids, value, &o->service.kernel_uid_min,
                                &o->service.kernel_uid_max);
}

static int parse_port_range(kb_serve_opts_t *o, const char *what, const char *value)
{
    (void)what;
    static const kb_serve_range_t ports = {
        "--kernel-ports", 1024, 65535, 5, 65535, "A-B: ports from 1024 to 65535, at least 5 of them"
    };
    return kb_serve_parse_range(&ports, value, &o->service.kernel_port_min,
                                &o->service.kernel_port_max);
}

/*  0 says never: the service takes a negative value for that (its 0 is
    the default). */
static int parse_hog_after(kb_serve_opts_t *o, const char *what, const char *value)
{
    double s;
    if (kb_serve_parse_seconds(what, value, &s) < 0)
        return -1;
    if (s > 86400)
        return kb_serve_bad_value(what, value, "0 to 86400 seconds");
    o->service.hog_after = s > 0 ? s : -1;
    return 0;
}

static int parse_transport(kb_serve_opts_t *o, const char *what, const char *value)
{
    if (strcmp(value, "ipc") != 0 && strcmp(value, "tcp") != 0)
        return kb_serve_bad_value(what, value, "ipc or tcp");
    o->service.transport = value;
    return 0;
}

static int parse_log_format(kb_serve_opts_t *o, const char *what, const char *value)
{
    if (strcmp(value, "text") != 0 && strcmp(value, "json") != 0)
        return kb_serve_bad_value(what, value, "text or json");
    o->server.log_format = strcmp(value, "json") == 0 ? KB_LOG_JSON : KB_LOG_TEXT;
    return 0;
}

/* ---- The table ------------------------------------------------------------- */

static const flag_t flags[] = {
    { "listen", "HOST:PORT", "KB_LISTEN", PARSER(parse_listen), .value = "127.0.0.1:8899",
      .help = "address to listen on; port 0 picks a free one; IPv6 as [::1]:PORT" },
    { "e2b-listen", "HOST:PORT", "KB_E2B_LISTEN", PARSER(parse_e2b_listen), .shown = "off",
      .help = "also serve E2B's code-interpreter API there (for E2B's SDKs; 127.0.0.1:49999 "
              "is E2B's address)" },
    { "e2b-port-file", "FILE", "KB_E2B_PORT_FILE", FLAG_STRING, FIELD(e2b_port_file),
      .help = "write the E2B listener's bound port there" },
    { "metrics-listen", "HOST:PORT", "KB_METRICS_LISTEN", PARSER(parse_metrics_listen),
      .shown = "off",
      .help = "also serve GET /metrics (same token) and GET /health alone there, for a "
              "scraper" },
    { "metrics-port-file", "FILE", "KB_METRICS_PORT_FILE", FLAG_STRING, FIELD(metrics_port_file),
      .help = "write its bound port there" },
    { "token-file", "FILE", "KB_TOKEN_FILE", FLAG_STRING, FIELD(token_file),
      .help = "require Authorization: Bearer <the file's first line>; without it, the token "
              "itself in KB_TOKEN" },
    { "insecure", NULL, "KB_INSECURE", FLAG_SWITCH, FIELD(insecure),
      .help = "allow a non-loopback address without a token" },
    { "state-dir", "DIR", "KB_STATE_DIR", FLAG_STRING, FIELD(service.state_dir),
      .shown = "/var/lib/kernelbridge for root, else $XDG_STATE_HOME/kernelbridge or "
               "~/.local/state/kernelbridge",
      .help = "private 0700 dir of the daemon's state: contexts, run records and logs "
              "(state.db), kernels' files, the sandbox id; one daemon at a time" },
    { "ephemeral", NULL, "KB_EPHEMERAL", FLAG_SWITCH, FIELD(ephemeral),
      .help = "a fresh state dir removed at exit instead: nothing survives the daemon" },
    { "no-adopt", NULL, "KB_NO_ADOPT", FLAG_SWITCH, FIELD(service.no_adopt),
      .help = "kill the kernels a killed daemon left in the state dir instead of adopting "
              "them as the same contexts" },
    { "keep-kernels", NULL, "KB_KEEP_KERNELS", FLAG_SWITCH, FIELD(service.keep_kernels),
      .help = "at stop, leave kernels running for the next daemon on the state dir (an "
              "upgrade) instead of shutting them down" },
    { "supervise", NULL, "KB_SUPERVISE", FLAG_SWITCH, FIELD(supervise),
      .help = "run under a small parent (a container's first process) that reaps zombies, "
              "forwards SIGTERM and SIGINT, and starts the daemon again on the same state dir "
              "when it dies by a signal: its kernels stay and are adopted" },
    { "kernel-user", "USER", "KB_KERNEL_USER", PARSER(parse_kernel_user),
      .help = "run kernels as USER (unprivileged; the daemon must be root), each in a private "
              "dir of its own: kernels cannot read the token, the state dir or the daemon" },
    { "kernel-uid-range", "A-B", "KB_KERNEL_UID_RANGE", PARSER(parse_uid_range),
      .help = "run each kernel as a uid of its own from A..B (gid the same number; the daemon "
              "must be root): contexts cannot read or signal each other either" },
    { "kernel-ports", "A-B", "KB_KERNEL_PORTS", PARSER(parse_port_range),
      .shown = "any the system hands out",
      .help = "kernels reached over tcp (--transport tcp, and Deno's) listen on ports from "
              "A..B, five each; reserve the range in net.ipv4.ip_local_reserved_ports, so that "
              "no connection takes one as its source port before its kernel binds it" },
    { "no-display-ext", NULL, "KB_NO_DISPLAY_EXT", FLAG_SWITCH, FIELD(service.no_display_ext),
      .help = "start Python contexts (ipykernel) without the IPython extension "
              "kernelbridge_display: no charts and tables as data (docs/charts.md)" },
    { "sandbox-id", "ID", "KB_SANDBOX_ID", FLAG_STRING, FIELD(service.sandbox_id),
      .shown = "kept in the state dir", .help = "name of this daemon" },
    { "kernel", "LANG=KERNELSPEC", "KB_KERNELS", FLAG_LIST, FIELD(kernels),
      .help = "run LANG on KERNELSPEC; repeatable (KB_KERNELS=\"python=xpython,r=ir\")" },
    { "preload", "LANG", "KB_PRELOAD", FLAG_LIST, FIELD(preload),
      .help = "start LANG's default context before serving; repeatable "
              "(KB_PRELOAD=\"python,r\")" },
    { "pool", "LANG=N", "KB_POOL", FLAG_LIST, FIELD(pool), .value = "python=1",
      .help = "keep N kernels of LANG started and ready for new contexts and isolated runs; "
              "repeatable (KB_POOL=\"python=2,r=1\"); N=0 for none" },
    { "transport", "ipc|tcp", "KB_TRANSPORT", PARSER(parse_transport), .value = "ipc",
      .help = "how kernels are reached" },
    { "default-timeout", "S", "KB_DEFAULT_TIMEOUT", FLAG_SECONDS, FIELD(service.default_timeout),
      .value = "0", .help = "timeout of runs that give none; 0: none" },
    { "interrupt-grace", "S", "KB_INTERRUPT_GRACE", FLAG_SECONDS, FIELD(service.interrupt_grace),
      .value = "2", .help = "from interrupt to kill at timeout" },
    { "hog-after", "S", "KB_HOG_AFTER", PARSER(parse_hog_after), .value = "1",
      .help = "a run busy this long drops below the daemon's and other kernels' CPU priority "
              "(nice 19 on every thread of its kernel's processes) until it ends; 0: never" },
    { "start-timeout", "S", "KB_START_TIMEOUT", FLAG_SECONDS, FIELD(service.start_timeout),
      .value = "60", .help = "for a kernel to become ready" },
    { "cull-idle-timeout", "S", "KB_CULL_IDLE_TIMEOUT", FLAG_SECONDS,
      FIELD(service.cull_idle_timeout), .value = "0",
      .help = "delete a context (a kernel) idle this long: no run, no websocket cell, no "
              "websocket connected; later calls naming it say it was culled; 0: never" },
    { "max-contexts", "N", "KB_MAX_CONTEXTS", FLAG_COUNT, FIELD(service.max_contexts),
      .value = "64", .help = "contexts (kernels) at once" },
    { "fork-template", "LANG[=MODULE,...]", "KB_FORK_TEMPLATE", FLAG_LIST, FIELD(fork_templates),
      .sep = ';',
      .help = "make new kernels of LANG (contexts, isolated runs, the pool) by forking a frozen "
              "template kernel with MODULEs imported; repeatable "
              "(KB_FORK_TEMPLATE=\"python=numpy,pandas;...\"); a module that fails to import "
              "stops the daemon" },
    { "max-checkpoints", "N", "KB_MAX_CHECKPOINTS", FLAG_COUNT, FIELD(service.max_checkpoints),
      .value = "8", .help = "checkpoints of one context (SPEC section 13)" },
    { "max-body", "BYTES", "KB_MAX_BODY", FLAG_BYTES, FIELD(server.max_body), .value = "16M",
      .help = "request body limit" },
    { "max-output", "BYTES", "KB_MAX_OUTPUT", FLAG_BYTES, FIELD(service.max_output_bytes),
      .value = "64M", .help = "output kept per run" },
    { "max-processes", "N", "KB_MAX_PROCESSES", FLAG_COUNT, FIELD(service.max_processes),
      .value = "1000", .help = "finished run records kept" },
    { "max-process-bytes", "BYTES", "KB_MAX_PROCESS_BYTES", FLAG_BYTES,
      FIELD(service.max_process_bytes), .value = "256M", .help = "their logs kept" },
    { "max-output-memory", "BYTES", "KB_MAX_OUTPUT_MEMORY", FLAG_BYTES,
      FIELD(service.max_output_memory), .value = "256M",
      .help = "all output held in memory, running and finished" },
    { "max-message-size", "BYTES", "KB_MAX_MESSAGE_SIZE", FLAG_BYTES,
      FIELD(service.max_message_bytes), .value = "128M",
      .help = "largest kernel message taken; a larger one is not sent by an IPython kernel, or "
              "is refused at the socket, and its run ends with an error saying so; at least 64K",
      .min = 64 << 10, .range = "at least 64K" },
    { "memory-limit", "BYTES", "KB_MEMORY_LIMIT", FLAG_BYTES, FIELD(service.memory_limit),
      .shown = "none",
      .help = "resident memory of each context's kernel and its processes, for contexts and "
              "isolated runs that give none; at least 256M" },
    { "pids-limit", "N", "KB_PIDS_LIMIT", FLAG_COUNT, FIELD(service.pids_limit), .shown = "none",
      .help = "processes of each context's kernel tree, likewise; at least 8" },
    { "max-connections", "N", "KB_MAX_CONNECTIONS", FLAG_COUNT, FIELD(server.max_connections),
      .value = "256", .help = "concurrent HTTP connections", .min = 0, .max = 65536,
      .range = "at most 65536" },
    { "connection-timeout", "S", "KB_CONNECTION_TIMEOUT", FLAG_COUNT,
      FIELD(server.connection_timeout), .value = "60", .help = "close connections idle this long",
      .min = 1, .max = 86400, .range = "1 to 86400 seconds" },
    { "header-timeout", "S", "KB_HEADER_TIMEOUT", FLAG_SECONDS, FIELD(server.header_timeout),
      .value = "10",
      .help = "close a connection that has not sent a whole request head S s after opening or "
              "after its last response",
      .min = 0.1, .max = 3600, .range = "0.1 to 3600 seconds" },
    { "max-connections-per-address", "N", "KB_MAX_CONNECTIONS_PER_ADDRESS", FLAG_COUNT,
      FIELD(server.max_per_address), .shown = "half of --max-connections",
      .help = "connections of one client address", .min = 1, .max = 65536, .range = "1 to 65536" },
    { "connection-reserve", "N", "KB_CONNECTION_RESERVE", FLAG_COUNT, FIELD(server.reserve),
      .value = "16", .help = "connections past the limit kept for GET /health and /metrics",
      .min = 1, .max = 1024, .range = "1 to 1024" },
    { "sse-keepalive", "S", "KB_SSE_KEEPALIVE", FLAG_MILLIS, FIELD(server.sse_keepalive_ms),
      .value = "15",
      .help = "comment line on idle event streams, at most half the connection timeout", .min = 0,
      .max = 3600, .range = "at most 3600 seconds" },
    { "log-format", "text|json", "KB_LOG_FORMAT", PARSER(parse_log_format), .value = "text",
      .help = "request log on stderr" },
    { "port-file", "FILE", "KB_PORT_FILE", FLAG_STRING, FIELD(port_file),
      .help = "write the bound port there once listening, remove it at exit" },
    { "mcp-allow-origin", "ORIGIN", "KB_MCP_ALLOW_ORIGINS", FLAG_LIST, FIELD(mcp_origins),
      .shown = "loopback origins",
      .help = "also let this Origin call /mcp (MCP over HTTP; requests with other origins are "
              "refused against DNS rebinding); repeatable; * for any" },
    { "mcp-max-text", "BYTES", "KB_MCP_MAX_TEXT", FLAG_BYTES, FIELD(server.mcp_max_text),
      .value = "1M",
      .help = "text of an MCP tool call's result; past it output is cut with a note naming "
              "get_process_logs" },
};

#define N_FLAGS (sizeof flags / sizeof flags[0])

/* ---- Applying one value ---------------------------------------------------- */

static void *target(kb_serve_opts_t *o, const flag_t *flag)
{
    return (char *)o + flag->offset;
}

/*  An integer into a field of 4 or 8 bytes (unsigned, size_t, long long). */
static void store_integer(void *field, size_t width, size_t n)
{
    if (width == sizeof(unsigned)) {
        unsigned u = (unsigned)n;
        memcpy(field, &u, sizeof u);
    } else {
        uint64_t w = (uint64_t)n;
        memcpy(field, &w, sizeof w);
    }
}

static bool out_of_bounds(const flag_t *flag, double x)
{
    return flag->range && (x < flag->min || (flag->max > 0 && x > flag->max));
}

static int apply_number(kb_serve_opts_t *o, const flag_t *flag, const char *what, const char *value)
{
    size_t n;
    double s;
    switch (flag->type) {
        case FLAG_SECONDS:
        case FLAG_MILLIS:
            if (kb_serve_parse_seconds(what, value, &s) < 0 || out_of_bounds(flag, s))
                return flag->range ? kb_serve_bad_value(what, value, flag->range) : -1;
            if (flag->type == FLAG_SECONDS) {
                *(double *)target(o, flag) = s;
                return 0;
            }
            n = (size_t)(s * 1000.0);
            store_integer(target(o, flag), flag->width, n ? n : 1);
            return 0;
        case FLAG_COUNT:
            if (kb_serve_parse_count(what, value, &n) < 0 || out_of_bounds(flag, (double)n))
                return flag->range ? kb_serve_bad_value(what, value, flag->range) : -1;
            store_integer(target(o, flag), flag->width, n);
            return 0;
        case FLAG_BYTES:
            if (kb_serve_parse_bytes(what, value, &n) < 0)
                return -1;
            if (out_of_bounds(flag, (double)n))
                return kb_serve_bad_value(what, value, flag->range);
            store_integer(target(o, flag), flag->width, n);
            return 0;
        default:
            return -1;
    }
}

/*  Apply one value of flag (given, from the environment or the default). */
static int apply(kb_serve_opts_t *o, const flag_t *flag, const char *value)
{
    /* a table entry whose field does not fit its type is a bug of the table */
    assert(flag->type != FLAG_SWITCH || flag->width == sizeof(bool));
    assert(flag->type != FLAG_STRING || flag->width == sizeof(const char *));
    assert(flag->type != FLAG_LIST || flag->width == sizeof(kb_strv_t));
    assert(flag->type != FLAG_SECONDS || flag->width == sizeof(double));
    assert(flag->type < FLAG_MILLIS || flag->type > FLAG_BYTES || flag->width == sizeof(unsigned)
           || flag->width == sizeof(uint64_t));
    assert(flag->type != FLAG_CUSTOM || flag->parse);
    char what[64];
    snprintf(what, sizeof what, "--%s", flag->name);
    switch (flag->type) {
        case FLAG_SWITCH:
            *(bool *)target(o, flag) = true;
            return 0;
        case FLAG_STRING:
            *(const char **)target(o, flag) = value;
            return 0;
        case FLAG_LIST:
            return kb_strv_pushn(target(o, flag), value, strlen(value)) == KB_BUF_OK ? 0 : -1;
        case FLAG_CUSTOM:
            return flag->parse(o, what, value);
        default:
            return apply_number(o, flag, what, value);
    }
}

/* ---- Defaults, environment, argv ------------------------------------------- */

/*  Defaults and the environment, lists aside (they come after argv, and
    only when no flag gave them). */
static int apply_defaults_and_env(kb_serve_opts_t *o)
{
    for (size_t i = 0; i < N_FLAGS; i++) {
        if (flags[i].type != FLAG_LIST && flags[i].value && apply(o, &flags[i], flags[i].value) < 0)
            return -1;
    }
    for (size_t i = 0; i < N_FLAGS; i++) {
        const flag_t *flag = &flags[i];
        const char *value = getenv(flag->env);
        if (flag->type == FLAG_LIST || !value)
            continue;
        if (flag->type == FLAG_SWITCH) {
            if (strcmp(value, "1") == 0 || strcasecmp(value, "true") == 0)
                apply(o, flag, value);
        } else if (*value && apply(o, flag, value) < 0) {
            return -1;
        }
    }
    return 0;
}

/*  A list no flag gave: its variable when set (even empty), else its
    default. */
static int apply_list_fallback(kb_serve_opts_t *o, const flag_t *flag)
{
    const char *env = getenv(flag->env);
    if (!flag->sep || !env)
        return kb_serve_parse_list(env ? env : flag->value, target(o, flag));
    for (const char *p = env; *p;) {
        size_t len = strcspn(p, (char[]){ flag->sep, 0 });
        if (len && kb_strv_pushn(target(o, flag), p, len) != KB_BUF_OK)
            return -1;
        p += len + (p[len] != 0);
    }
    return 0;
}

static int check_kernel_map(char **kernels)
{
    for (size_t i = 0; kernels && kernels[i]; i++) {
        const char *eq = strchr(kernels[i], '=');
        if (!eq || eq == kernels[i] || !eq[1])
            return kb_serve_bad_value("--kernel", kernels[i], "LANG=KERNELSPEC");
    }
    return 0;
}

/*  argv; lists given are marked in given[]. 0, 1 after --help, -1 after a
    message. */
static int apply_argv(kb_serve_opts_t *o, int argc, char **argv, bool *given)
{
    struct option options[N_FLAGS + 3];
    for (size_t i = 0; i < N_FLAGS; i++)
        options[i] = (struct option){ flags[i].name, flags[i].arg ? required_argument : no_argument,
                                      NULL, 256 + (int)i };
    options[N_FLAGS] = (struct option){ "help", no_argument, NULL, 'h' };
    options[N_FLAGS + 1] = (struct option){ "flags-markdown", no_argument, NULL, 'M' };
    options[N_FLAGS + 2] = (struct option){ NULL, 0, NULL, 0 };
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        if (opt == 'h' || opt == 'M') {
            (opt == 'h' ? kb_serve_flags_usage : kb_serve_flags_markdown)(stdout);
            return 1;
        }
        const flag_t *flag = opt >= 256 && opt < 256 + (int)N_FLAGS ? &flags[opt - 256] : NULL;
        if (flag && flag->type == FLAG_LIST) {
            given[opt - 256] = true;
            if (apply(o, flag, optarg) < 0)
                return -1;
        } else if (!flag || apply(o, flag, optarg) < 0) {
            kb_serve_flags_usage(stderr);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kernelbridge serve: unexpected argument '%s'\n", argv[optind]);
        kb_serve_flags_usage(stderr);
        return -1;
    }
    return 0;
}

int kb_serve_flags_parse(kb_serve_opts_t *o, int argc, char **argv)
{
    bool given[N_FLAGS] = { false };
    if (apply_defaults_and_env(o) < 0)
        return -1;
    int rc = apply_argv(o, argc, argv, given);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < N_FLAGS; i++) {
        if (flags[i].type == FLAG_LIST && !given[i] && apply_list_fallback(o, &flags[i]) < 0)
            return -1;
    }
    if (check_kernel_map(o->kernels.items) < 0)
        return -1;
    o->server.host = o->listen.host;
    o->server.port = o->listen.port;
    o->service.kernel_map = (const char *const *)o->kernels.items;
    o->service.pool = (const char *const *)o->pool.items;
    o->service.fork_templates = (const char *const *)o->fork_templates.items;
    o->server.mcp_allow_origins = (const char *const *)o->mcp_origins.items;
    return 0;
}

void kb_serve_opts_clear(kb_serve_opts_t *o)
{
    kb_strv_clear(&o->kernels);
    kb_strv_clear(&o->preload);
    kb_strv_clear(&o->pool);
    kb_strv_clear(&o->fork_templates);
    kb_strv_clear(&o->mcp_origins);
}

/* ---- --help ------------------------------------------------------------------ */

#define HELP_INDENT 28
#define HELP_WIDTH 92

static const char usage_head[]
    = "usage: kernelbridge serve [options]\n"
      "\n"
      "Serve stateful code execution on Jupyter kernels over HTTP (SPEC section 5).\n"
      "Every option has an environment equivalent, in brackets; options win. A\n"
      "repeatable option's variable holds a comma-separated list; a switch's says 1.\n"
      "\n";

static const char usage_tail[]
    = "  -h, --help                this text\n"
      "\n"
      "BYTES take a K, M or G suffix (powers of 1024). Once listening, the daemon\n"
      "prints \"listening on http://HOST:PORT\" on stdout. SIGTERM or SIGINT stop it:\n"
      "runs still going end as sandbox_stopped, kernels are shut down, exit status 0.\n"
      "Exit status 2: bad usage or a refused configuration; 1: failure to start.\n";

/*  text's words after column *col, wrapped at HELP_WIDTH onto lines
    indented HELP_INDENT. */
static void put_words(FILE *out, const char *text, int *col)
{
    for (const char *p = text; *p;) {
        while (*p == ' ')
            p++;
        int len = (int)strcspn(p, " ");
        if (!len)
            break;
        if (*col > HELP_INDENT && *col + 1 + len > HELP_WIDTH) {
            fprintf(out, "\n%*s", HELP_INDENT, "");
            *col = HELP_INDENT;
        } else if (*col > HELP_INDENT) {
            fputc(' ', out);
            (*col)++;
        }
        fprintf(out, "%.*s", len, p);
        *col += len;
        p += len;
    }
}

/*  "  --name ARG   help [KB_NAME, default X]", wrapped. */
static void put_flag(FILE *out, const flag_t *flag)
{
    int col
        = fprintf(out, "  --%s%s%s", flag->name, flag->arg ? " " : "", flag->arg ? flag->arg : "");
    if (col > HELP_INDENT - 2) { /* at least two spaces before the help */
        fprintf(out, "\n");
        col = 0;
    }
    fprintf(out, "%*s", HELP_INDENT - col, "");
    col = HELP_INDENT;
    put_words(out, flag->help, &col);
    const char *shown = flag->value ? flag->value : flag->shown;
    char bracket[256];
    snprintf(bracket, sizeof bracket, "[%s%s%s%s]", flag->env,
             flag->type == FLAG_SWITCH ? "=1" : "", shown ? ", default " : "", shown ? shown : "");
    /* the bracket whole on a line of its own when it does not fit after the help */
    int len = (int)strlen(bracket);
    if (col + 1 + len > HELP_WIDTH && HELP_INDENT + len <= HELP_WIDTH) {
        fprintf(out, "\n%*s%s\n", HELP_INDENT, "", bracket);
        return;
    }
    put_words(out, bracket, &col);
    fputc('\n', out);
}

void kb_serve_flags_usage(FILE *out)
{
    fputs(usage_head, out);
    for (size_t i = 0; i < N_FLAGS; i++)
        put_flag(out, &flags[i]);
    fputs(usage_tail, out);
}

/* ---- --flags-markdown: the configuration reference ------------------------- */

static const char markdown_head[]
    = "<!-- Generated from the daemon's flag table by `kernelbridge serve --flags-markdown`\n"
      "     (src/cli/kb_cli_serve_flags.c); tests/cli/test_serve_flags.py checks this file\n"
      "     equals that output. Change the table, then regenerate: do not edit here. -->\n"
      "# Configuration\n"
      "\n"
      "Every flag of `kernelbridge serve`, with its environment variable and its\n"
      "default, as the daemon's own flag table says (`kernelbridge serve --help`\n"
      "prints the same table). Flags win over variables. A switch's variable says\n"
      "`1` or `true`; a repeatable flag's variable holds a comma-separated list.\n"
      "BYTES take a K, M or G suffix (powers of 1024); S is seconds. A default in\n"
      "code style is a value the daemon applies; one in words is described.\n"
      "\n"
      "| Flag | Environment | Default | What it sets |\n"
      "|---|---|---|---|\n";

static const char markdown_tail[]
    = "\n"
      "Once listening, the daemon prints `listening on http://HOST:PORT` on stdout.\n"
      "SIGTERM or SIGINT stop it: runs still going end as `sandbox_stopped`,\n"
      "kernels are shut down, exit status 0. Exit status 2: bad usage or a refused\n"
      "configuration; 1: failure to start.\n";

/*  text in a table cell: | < > * escaped, so that it reads as written. */
static void put_cell(FILE *out, const char *text)
{
    for (const char *p = text; *p; p++) {
        if (*p == '|' || *p == '*' || *p == '_' || *p == '[' || *p == ']')
            fputc('\\', out);
        if (*p == '<')
            fputs("&lt;", out);
        else if (*p == '>')
            fputs("&gt;", out);
        else
            fputc(*p, out);
    }
}

void kb_serve_flags_markdown(FILE *out)
{
    fputs(markdown_head, out);
    for (size_t i = 0; i < N_FLAGS; i++) {
        const flag_t *flag = &flags[i];
        fprintf(out, "| `--%s`", flag->name);
        if (flag->arg) {
            fputc(' ', out);
            put_cell(out, flag->arg);
        }
        fprintf(out, " | `%s%s` | ", flag->env, flag->type == FLAG_SWITCH ? "=1" : "");
        if (flag->value)
            fprintf(out, "`%s`", flag->value);
        else if (flag->shown)
            put_cell(out, flag->shown);
        else
            fputc('-', out);
        fputs(" | ", out);
        put_cell(out, flag->help);
        fputs(" |\n", out);
    }
    fputs(markdown_tail, out);
}
