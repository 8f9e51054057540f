/*  kb_cli.h - the subcommands of the kernelbridge binary. Each takes the
    arguments after its own name (argv[0] is the subcommand) and returns the
    process exit status. */
#ifndef KB_CLI_H_INCLUDED
#define KB_CLI_H_INCLUDED

/*  kernelbridge serve: the HTTP daemon (src/cli/kb_cli_serve.c). */
int kb_cli_serve(int argc, char **argv);

/*  kernelbridge run: run code in a fresh kernel in this process. */
int kb_cli_run(int argc, char **argv);

/*  kernelbridge kernelspecs: list installed kernelspecs. */
int kb_cli_kernelspecs(int argc, char **argv);

/*  kernelbridge contexts, ps and logs: a running daemon's contexts,
    process records and a run's output, over its HTTP API
    (src/cli/kb_cli_client.c). */
int kb_cli_contexts(int argc, char **argv);
int kb_cli_ps(int argc, char **argv);
int kb_cli_logs(int argc, char **argv);

/*  kernelbridge fork, checkpoint and restore: fork, checkpoint and
    restore a context of a running daemon (src/cli/kb_cli_fork.c). */
int kb_cli_fork(int argc, char **argv);
int kb_cli_checkpoint(int argc, char **argv);
int kb_cli_restore(int argc, char **argv);
/*  kernelbridge mcp: MCP on stdin/stdout, the service in-process or a
    daemon relayed (src/cli/kb_cli_mcp.c). */
int kb_cli_mcp(int argc, char **argv);

#endif
