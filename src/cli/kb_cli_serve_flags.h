/*  kb_cli_serve_flags.h - the daemon's flags, from one table: each flag's
    name, KB_* variable, type, target field, default and help. The table
    parses the environment and argv and prints --help, so the three cannot
    disagree; docs/reference/configuration.md is the table as
    --flags-markdown prints it (tests/cli/test_serve_flags.py). */
#ifndef KB_CLI_SERVE_FLAGS_H_INCLUDED
#define KB_CLI_SERVE_FLAGS_H_INCLUDED

#include <stdbool.h>
#include <stdio.h>

#include "server/kb_server.h"
#include "util/kb_vec.h"

/*  A HOST:PORT as given (value borrowed from argv or environ, NULL when not
    given) and parsed: host points into buf, NULL for ":PORT". */
typedef struct {
    const char *value;
    char buf[256];
    const char *host;
    unsigned port;
} kb_listen_addr_t;

/*  Everything the command line and environment say. Strings are borrowed
    from argv / environ except the lists, whose arrays are owned. */
typedef struct {
    kb_listen_addr_t listen, e2b_listen, metrics_listen;
    const char *e2b_port_file;
    const char *metrics_port_file;
    const char *token_file;
    const char *port_file;
    bool insecure;
    bool ephemeral;
    bool supervise;
    kb_strv_t kernels;        /* --kernel entries, NULL-terminated */
    kb_strv_t pool;           /* --pool entries */
    kb_strv_t preload;        /* --preload entries */
    kb_strv_t fork_templates; /* --fork-template entries */
    kb_strv_t mcp_origins;    /* --mcp-allow-origin entries */
    kb_service_config_t service;
    kb_server_config_t server; /* host and port from listen */
} kb_serve_opts_t;

/*  Fill o from the table's defaults, then the KB_* environment, then argv
    (flags win). 0 to serve; 1 when --help (or the hidden --flags-markdown)
    was printed on stdout; -1 after
    a message on stderr (bad usage). Clear o in every case. */
int kb_serve_flags_parse(kb_serve_opts_t *o, int argc, char **argv);

/*  Free what o owns (its lists). */
void kb_serve_opts_clear(kb_serve_opts_t *o);

/*  Print `kernelbridge serve --help`, generated from the table. */
void kb_serve_flags_usage(FILE *out);

/*  Print the configuration reference (docs/reference/configuration.md) in
    Markdown, generated from the table: `kernelbridge serve --flags-markdown`. */
void kb_serve_flags_markdown(FILE *out);

#endif
