/*  kb_cli_mcp.h - private to `kernelbridge mcp` (kb_cli_mcp.c, in-process;
    kb_cli_mcp_relay.c, relayed to a daemon): its options, and the stdio
    lines both write and read. */
#ifndef KB_CLI_MCP_H_INCLUDED
#define KB_CLI_MCP_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "util/kb_buf.h"
#include "util/kb_vec.h"

typedef struct {
    const char *state_dir;  /* NULL: a fresh one, removed at exit */
    kb_strv_t pool;         /* --pool entries, NULL-terminated; owned */
    size_t max_text;        /* 0: the default */
    const char *url;        /* relay to this daemon; NULL: in-process */
    const char *token_file; /* its token; NULL: KB_TOKEN */
} kb_cli_mcp_opts_t;

/*  Write message (stolen; NULL: nothing) as one line on stdout, whole,
    whichever thread calls. arg is unused (a kb_mcp_send_fn). */
void kb_cli_mcp_write(void *arg, json_t *message);

/*  stdin, read line by line, and the signals that end the command
    (SIGTERM, SIGINT, SIGHUP: blocked in every thread, read from sfd). */
typedef struct {
    kb_buf_t buf; /* read, not yet a line */
    int sfd;      /* a signalfd */
    bool eof;
    bool skipping; /* in a line over the limit */
} kb_cli_mcp_in_t;

/*  Block the signals (before any thread starts) and open their fd. 0 or -1. */
int kb_cli_mcp_in_init(kb_cli_mcp_in_t *in);
void kb_cli_mcp_in_clear(kb_cli_mcp_in_t *in);

/*  The next line (without its newline) into line: 1; 0 at the end of
    stdin; -1 when a signal came. A line over 16 MiB is dropped:
    *too_long (line empty). */
int kb_cli_mcp_next_line(kb_cli_mcp_in_t *in, kb_buf_t *line, bool *too_long);

/*  Wait up to ms for a signal: true when one came. */
bool kb_cli_mcp_signalled(kb_cli_mcp_in_t *in, int ms);

/*  Relay stdin's lines to o->url's /mcp and its answers to stdout, until
    stdin ends (then the session is deleted). The exit status. */
int kb_cli_mcp_relay(const kb_cli_mcp_opts_t *o, kb_cli_mcp_in_t *in);

#endif
