/*  kb_cli_serve.c - `kernelbridge serve`: the daemon's main, thin in the
    manner of malamute's: read flags and KB_* variables (kb_cli_serve_flags.c),
    build the service, start the HTTP server, wait for SIGTERM or SIGINT, tear
    down in reverse. Every behaviour lives in the service (src/service) and
    the server (src/server); this file only wires them together. */
#include "cli/kb_cli.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/kb_cli_serve_flags.h"
#include "cli/kb_cli_supervise.h"
#include "kernelbridge.h"
#include "server/kb_e2b.h"
#include "server/kb_server.h"
#include "state/kb_statedir.h"

/*  The running daemon: its options, the service, its listeners, and what to
    undo at exit. */
typedef struct {
    kb_serve_opts_t o;
    char *token;             /* owned, wiped when freed */
    char *default_state_dir; /* owned, when no --state-dir was given */
    kb_server_config_t e2b_config, metrics_config;
    kb_service_t *service;
    kb_server_t *server, *e2b, *metrics;
    bool wrote_port_file, wrote_e2b_port_file, wrote_metrics_port_file;
} daemon_t;

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

/*  Output comes in large pieces: with a fixed threshold every block of 128
    KiB or more is a mapping of its own, grown in place (mremap) and given
    back when freed, instead of glibc raising its threshold after the first
    large free and keeping freed output in the heap. /proc/<pid>/environ,
    mem, fd/ and the like become root's only, even to processes of the
    daemon's own uid (and a ptrace needs root). */
static void harden_process(void)
{
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    if (prctl(PR_SET_DUMPABLE, 0) != 0)
        fprintf(stderr, "kernelbridge serve: warning: cannot make the daemon non-dumpable: %s\n",
                strerror(errno));
}

/*  What the flags cannot say one by one: exclusive options, the default
    state dir, root for kernels of other users. 0, or -1 after a message. */
static int check_options(daemon_t *d)
{
    kb_service_config_t *service = &d->o.service;
    if (d->o.ephemeral && service->state_dir) {
        fprintf(stderr, "kernelbridge serve: --ephemeral and --state-dir exclude each other\n");
        return -1;
    }
    if (d->o.ephemeral && d->o.supervise) {
        fprintf(stderr, "kernelbridge serve: --ephemeral and --supervise exclude each other (a "
                        "restarted daemon needs the same state dir)\n");
        return -1;
    }
    if (!d->o.ephemeral && !service->state_dir) {
        d->default_state_dir = kb_statedir_default();
        if (!d->default_state_dir) {
            fprintf(stderr, "kernelbridge serve: no default state dir (no home directory is "
                            "known): give --state-dir or --ephemeral\n");
            return -1;
        }
        service->state_dir = d->default_state_dir;
    }
    if (service->kernel_user && service->kernel_uid_min) {
        fprintf(stderr, "kernelbridge serve: --kernel-user and --kernel-uid-range exclude each "
                        "other\n");
        return -1;
    }
    if ((service->kernel_user || service->kernel_uid_min) && geteuid() != 0) {
        fprintf(stderr,
                "kernelbridge serve: --kernel-user and --kernel-uid-range need the daemon to run "
                "as root (it runs as uid %u)\n",
                (unsigned)geteuid());
        return -1;
    }
    return 0;
}

/*  The token, then the three listeners' configurations, checked before
    anything starts. 0, or -1 after a message. */
static int configure_listeners(daemon_t *d)
{
    bool token_failed;
    d->token = read_token(d->o.token_file, &token_failed);
    if (token_failed)
        return -1;
    /* The token is the daemon's secret: kernels must not inherit it. */
    unsetenv("KB_TOKEN");
    kb_server_config_t *server = &d->o.server;
    server->token = d->token;
    server->insecure = d->o.insecure;
    kb_error_t err = { KB_OK, "" };
    if (kb_server_check_config(server, &err) < 0) {
        fprintf(stderr, "kernelbridge serve: %s\n", err.message);
        return -1;
    }
    /* The E2B listener: same token, limits and log as the native one. */
    d->e2b_config = *server;
    d->e2b_config.host = d->o.e2b_listen.host;
    d->e2b_config.port = d->o.e2b_listen.port;
    d->e2b_config.sse_keepalive_ms = 0;
    d->e2b_config.api = KB_API_E2B;
    if (d->o.e2b_listen.value && kb_server_check_config(&d->e2b_config, &err) < 0) {
        fprintf(stderr, "kernelbridge serve: --e2b-listen: %s\n", err.message);
        return -1;
    }
    /* The metrics listener: likewise, with /metrics and /health alone. */
    d->metrics_config = *server;
    d->metrics_config.host = d->o.metrics_listen.host;
    d->metrics_config.port = d->o.metrics_listen.port;
    d->metrics_config.api = KB_API_METRICS;
    if (d->o.metrics_listen.value && kb_server_check_config(&d->metrics_config, &err) < 0) {
        fprintf(stderr, "kernelbridge serve: --metrics-listen: %s\n", err.message);
        return -1;
    }
    return 0;
}

/*  Say whether limits are enforced by the sampler alone or with cgroups. */
static void log_limits(kb_service_t *service, kb_log_format_t format)
{
    json_t *health = kb_service_health(service);
    json_t *limits = json_object_get(health, "limits");
    const char *why = json_string_value(json_object_get(limits, "why"));
    if (why)
        kb_server_log(format, "info", "limits: the sampler alone (no delegated cgroup v2: %s)",
                      why);
    else
        kb_server_log(format, "info", "limits: the sampler and a cgroup v2 per limited kernel");
    json_decref(health);
}

/*  The first line of a /proc/sys file into buf ("" when it cannot be read). */
static void read_sysctl(const char *path, char *buf, size_t size)
{
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (f && !fgets(buf, (int)size, f))
        buf[0] = 0;
    if (f)
        fclose(f);
}

/*  Whether port is in the list of ip_local_reserved_ports ("A-B,C,..."). */
static bool port_reserved(const char *list, unsigned port)
{
    for (const char *p = list; *p;) {
        char *end;
        unsigned long a = strtoul(p, &end, 10), b = a;
        if (end == p)
            return false;
        if (*end == '-')
            b = strtoul(end + 1, &end, 10);
        if (port >= a && port <= b)
            return true;
        if (*end != ',')
            return false;
        p = end + 1;
    }
    return false;
}

/*  --kernel-ports: warn when some of the range can be handed out by the
    system as well (in its ephemeral range and not reserved), since a
    connection given one of them as its source port keeps a kernel from
    binding it (docs/concepts/kernels.md). */
static void log_kernel_ports(const kb_service_config_t *service, kb_log_format_t format)
{
    if (!service->kernel_port_min)
        return;
    char range[64], reserved[4096];
    read_sysctl("/proc/sys/net/ipv4/ip_local_port_range", range, sizeof range);
    read_sysctl("/proc/sys/net/ipv4/ip_local_reserved_ports", reserved, sizeof reserved);
    unsigned lo = 0, hi = 0, exposed = 0;
    if (sscanf(range, "%u %u", &lo, &hi) != 2)
        return;
    for (unsigned port = service->kernel_port_min; port <= service->kernel_port_max; port++)
        exposed += port >= lo && port <= hi && !port_reserved(reserved, port);
    if (exposed)
        kb_server_log(format, "warn",
                      "kernel ports %u-%u: %u of them are in the system's ephemeral range %u-%u "
                      "and not reserved (sysctl net.ipv4.ip_local_reserved_ports): a connection "
                      "may be given one before its kernel binds it",
                      service->kernel_port_min, service->kernel_port_max, exposed, lo, hi);
}

/*  The service, with its preloaded contexts. 0, 1 (failure to start) or 2
    (a refused state dir: in use, unreadable, too new). */
static int start_service(daemon_t *d)
{
    kb_log_format_t format = d->o.server.log_format;
    kb_error_t err = { KB_OK, "" };
    d->service = kb_service_new(&d->o.service, &err);
    if (!d->service) {
        kb_server_log(format, "error", "cannot start the service: %s", err.message);
        return err.code == KB_ERR_BAD_REQUEST ? 2 : 1;
    }
    log_limits(d->service, format);
    log_kernel_ports(&d->o.service, format);
    for (size_t i = 0; i < d->o.preload.len; i++) {
        if (preload(d->service, d->o.preload.items[i], format) < 0)
            return 1;
    }
    return 0;
}

/*  The native HTTP API. 0, 1 or 2 (a refused configuration). */
static int start_server(daemon_t *d)
{
    kb_log_format_t format = d->o.server.log_format;
    kb_error_t err = { KB_OK, "" };
    d->server = kb_server_new(d->service, &d->o.server, &err);
    if (!d->server) {
        kb_server_log(format, "error", "%s", err.message);
        return err.code == KB_ERR_BAD_REQUEST ? 2 : 1;
    }
    const char *port_file = d->o.port_file;
    if (port_file && write_port_file(port_file, kb_server_port(d->server)) < 0) {
        kb_server_log(format, "error", "cannot write port file %s: %s", port_file, strerror(errno));
        return 1;
    }
    d->wrote_port_file = port_file != NULL;
    printf("listening on %s\n", kb_server_url(d->server));
    fflush(stdout);
    kb_server_log(format, "info", "kernelbridge %s serving sandbox %s on %s%s", KB_VERSION,
                  kb_service_sandbox_id(d->service), kb_server_url(d->server),
                  d->token ? "" : " without a token");
    return 0;
}

/*  The --e2b-listen server and its port file. 0, or -1 after logging why. */
static int start_e2b(daemon_t *d)
{
    kb_log_format_t format = d->o.server.log_format;
    if (kb_e2b_start_defaults(d->service, format) < 0)
        return -1;
    kb_error_t err = { KB_OK, "" };
    d->e2b = kb_server_new(d->service, &d->e2b_config, &err);
    if (!d->e2b) {
        kb_server_log(format, "error", "e2b: %s", err.message);
        return -1;
    }
    const char *port_file = d->o.e2b_port_file;
    if (port_file && write_port_file(port_file, kb_server_port(d->e2b)) < 0) {
        kb_server_log(format, "error", "cannot write port file %s: %s", port_file, strerror(errno));
        return -1;
    }
    d->wrote_e2b_port_file = port_file != NULL;
    printf("e2b listening on %s\n", kb_server_url(d->e2b));
    fflush(stdout);
    kb_server_log(format, "info", "serving E2B's code-interpreter API on %s",
                  kb_server_url(d->e2b));
    return 0;
}

/*  Everything after the checks: service, listeners. The exit status when
    start-up fails, 0 when the daemon is serving. */
static int start(daemon_t *d)
{
    int status = start_service(d);
    if (status == 0)
        status = start_server(d);
    if (status == 0 && d->o.e2b_listen.value && start_e2b(d) < 0)
        status = 1;
    if (status == 0 && d->o.metrics_listen.value) {
        d->metrics = start_metrics(d->service, &d->metrics_config, d->o.metrics_port_file,
                                   d->o.server.log_format);
        if (!d->metrics)
            status = 1;
        d->wrote_metrics_port_file = d->metrics && d->o.metrics_port_file;
    }
    return status;
}

/*  Reverse order: no new requests, then end runs (their clients still get
    the sandbox_stopped result), then close connections. */
static void stop(daemon_t *d, int signal_number)
{
    kb_log_format_t format = d->o.server.log_format;
    kb_server_log(format, "info", "stopping on SIG%s", sigabbrev_np(signal_number));
    kb_server_drain(d->server);
    if (d->e2b)
        kb_server_drain(d->e2b);
    if (d->metrics)
        kb_server_drain(d->metrics);
    kb_service_stop(d->service);
    kb_server_destroy(&d->metrics);
    kb_server_destroy(&d->e2b);
    kb_server_destroy(&d->server);
    kb_service_destroy(&d->service);
    kb_server_log(format, "info", "stopped");
}

/*  Whatever is left, on every path out: port files, listeners, service,
    the token, the options' lists. */
static void teardown(daemon_t *d)
{
    free(d->default_state_dir);
    if (d->wrote_port_file)
        unlink(d->o.port_file);
    if (d->wrote_e2b_port_file)
        unlink(d->o.e2b_port_file);
    if (d->wrote_metrics_port_file)
        unlink(d->o.metrics_port_file);
    if (d->e2b)
        kb_server_drain(d->e2b);
    kb_server_destroy(&d->metrics);
    kb_server_destroy(&d->e2b);
    kb_server_destroy(&d->server);
    kb_service_destroy(&d->service);
    if (d->token) {
        explicit_bzero(d->token, strlen(d->token));
        free(d->token);
    }
    kb_serve_opts_clear(&d->o);
}

/* ---- main ------------------------------------------------------------------ */

int kb_cli_serve(int argc, char **argv)
{
    daemon_t d = { 0 };
    harden_process();
    int status = 2;
    int parsed = kb_serve_flags_parse(&d.o, argc, argv);
    if (parsed != 0) {
        status = parsed > 0 ? 0 : 2;
        goto done;
    }
    if (check_options(&d) < 0 || configure_listeners(&d) < 0)
        goto done;
    if (d.o.supervise) {
        /* the supervisor stays here until it is done; each daemon goes on */
        bool is_daemon = false;
        status = kb_cli_supervise(d.o.server.log_format, &is_daemon);
        if (!is_daemon)
            goto done;
        status = 2;
    }
    /* Every thread (service engine, HTTP workers) inherits this mask, so
       the signals reach only the sigwait below. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    status = start(&d);
    if (status != 0)
        goto done;
    int signal_number = 0;
    while (sigwait(&stop_signals, &signal_number) != 0)
        ;
    stop(&d, signal_number);
done:
    teardown(&d);
    return status;
}
