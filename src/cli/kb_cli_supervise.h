/*  kb_cli_supervise.h - `kernelbridge serve --supervise`: a parent that
    keeps one daemon running (kb_cli_supervise.c). */
#ifndef KB_CLI_SUPERVISE_H_INCLUDED
#define KB_CLI_SUPERVISE_H_INCLUDED

#include <stdbool.h>

#include "server/kb_server.h"

/*  Become the supervisor: a child subreaper that starts the daemon (a
    fork of this process), reaps every child, forwards SIGTERM and SIGINT,
    and starts another daemon when one dies by a signal. Call it before any
    thread exists. Returns twice over: in each new daemon with *is_daemon
    true and 0 (the caller goes on to serve); in the supervisor, once it is
    done, with *is_daemon false and the exit status (the daemon's own, or
    128 + the signal that ended it while stopping). */
int kb_cli_supervise(kb_log_format_t format, bool *is_daemon);

#endif
