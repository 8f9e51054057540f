/*  kb_main.c - the kernelbridge binary: picks the subcommand, nothing more. */
#include <stdio.h>
#include <string.h>

#include "cli/kb_cli.h"

static void s_usage(FILE *out)
{
    fprintf(out, "usage: kernelbridge COMMAND [ARGS]\n"
                 "\n"
                 "Stateful code execution backed by Jupyter kernels.\n"
                 "\n"
                 "commands:\n"
                 "  serve         run the HTTP daemon\n"
                 "  run           run code in a fresh kernel and print the result\n"
                 "  kernelspecs   list the installed Jupyter kernelspecs\n"
                 "  mcp           speak MCP on stdin/stdout (for an AI agent's MCP client)\n"
                 "\n"
                 "commands that ask a running daemon (--url, default http://127.0.0.1:8899):\n"
                 "  contexts      list its contexts\n"
                 "  ps            list its process records (runs)\n"
                 "  logs          print a run's output, or follow it live (--follow)\n"
                 "  fork          fork a context into new ones holding its state\n"
                 "  checkpoint    checkpoint a context, list or delete its checkpoints\n"
                 "  restore       put a context back to one of its checkpoints\n"
                 "\n"
                 "Run 'kernelbridge COMMAND --help' for the options of one command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        s_usage(stderr);
        return 2;
    }
    const char *command = argv[1];
    if (strcmp(command, "serve") == 0)
        return kb_cli_serve(argc - 1, argv + 1);
    if (strcmp(command, "run") == 0)
        return kb_cli_run(argc - 1, argv + 1);
    if (strcmp(command, "kernelspecs") == 0)
        return kb_cli_kernelspecs(argc - 1, argv + 1);
    if (strcmp(command, "mcp") == 0)
        return kb_cli_mcp(argc - 1, argv + 1);
    if (strcmp(command, "contexts") == 0)
        return kb_cli_contexts(argc - 1, argv + 1);
    if (strcmp(command, "ps") == 0)
        return kb_cli_ps(argc - 1, argv + 1);
    if (strcmp(command, "logs") == 0)
        return kb_cli_logs(argc - 1, argv + 1);
    if (strcmp(command, "fork") == 0)
        return kb_cli_fork(argc - 1, argv + 1);
    if (strcmp(command, "checkpoint") == 0)
        return kb_cli_checkpoint(argc - 1, argv + 1);
    if (strcmp(command, "restore") == 0)
        return kb_cli_restore(argc - 1, argv + 1);
    if (strcmp(command, "--help") == 0 || strcmp(command, "-h") == 0
        || strcmp(command, "help") == 0) {
        s_usage(stdout);
        return 0;
    }
    if (strcmp(command, "--version") == 0) {
        printf("kernelbridge %s\n", KB_VERSION);
        return 0;
    }
    fprintf(stderr, "kernelbridge: unknown command '%s'\n", command);
    s_usage(stderr);
    return 2;
}
