/*  kb_cli_client.h - what the commands that ask a running daemon share
    (kb_cli_client.c): where the daemon is, its token, and the flags every
    such command takes (--url, --token-file, --help). */
#ifndef KB_CLI_CLIENT_H_INCLUDED
#define KB_CLI_CLIENT_H_INCLUDED

#include <getopt.h>
#include <stdio.h>

#include "cli/kb_cli_http.h"

enum { KB_EXIT_OK = 0, KB_EXIT_FAILED = 1, KB_EXIT_USAGE = 2 };

/*  A command's daemon, with what it was given. */
typedef struct {
    const char *prog; /* "kernelbridge ps", for messages; static */
    const char *url;  /* --url, or NULL; borrowed */
    kb_cli_daemon_t daemon;
    char *token; /* owned, or NULL */
} kb_client_t;

/*  A command's own flags: short letters (getopt's optstring, "h" added)
    and long names, in one table; what they set is the command's. */
typedef struct {
    const char *shortopts;
    const struct option *options; /* ends with a zeroed entry */
    void (*usage)(FILE *out);
    int args; /* positional arguments it takes */
} kb_command_t;

/*  Print the help of the options every command takes. */
void kb_cli_client_help(FILE *out);

/*  Parse argv for command: --url, --token-file and --help here, every other
    flag to on_flag (with its value, or NULL), then set the client up.
    -1 when the command goes on; else the exit status to return. The
    caller frees client->token. */
int kb_cli_client_parse(kb_client_t *client, const kb_command_t *command, int argc, char **argv,
                        void (*on_flag)(int flag, const char *value, void *arg), void *arg);

#endif
