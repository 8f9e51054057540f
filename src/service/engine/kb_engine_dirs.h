/*  kb_engine_dirs.h - the engine's settings and places, before it has any
    state (kb_engine_dirs.c). Called by kb_engine.c only.
*/
#ifndef KB_ENGINE_DIRS_H_INCLUDED
#define KB_ENGINE_DIRS_H_INCLUDED

#include <stdbool.h>

#include "kernelbridge/kb_error.h"
#include "kernelbridge/kb_service.h"

/*  The given state dir (copied; *own false: made private and locked by
    kb_restore_open), else a fresh private one under $XDG_RUNTIME_DIR,
    $TMPDIR or /tmp (*own true). NULL with err. */
char *kb_engine_make_state_dir(const char *given, bool *own, kb_error_t *err);

/*  The sandbox id: configured, else $KB_SANDBOX_ID, else the one kept in
    a state dir that is not own (written there when new), else a random
    one. NULL when out of memory. Caller owns it. */
char *kb_engine_sandbox_id(const char *configured, const char *state_dir, bool own);

/*  Whether every dir above path lets others through (o+x): a kernel of
    another uid must reach its connection file and its dir. 0, or -1
    with err (BAD_REQUEST) naming the first that does not. */
int kb_engine_check_reachable(const char *path, kb_error_t *err);

/*  Defaults in c for what it leaves 0; its pointers cleared (an engine
    keeps none of the caller's). */
void kb_engine_default_config(kb_service_config_t *c);

/*  A fresh private dir in /tmp for ipc sockets. Short on purpose:
    xeus-based kernels refuse ipc endpoints longer than 31 characters, and
    a state dir can be any length. NULL with err. Caller owns it. */
char *kb_engine_make_ipc_dir(kb_error_t *err);

/*  The dir of the kernel-side packages (python/: kernelbridge_display,
    kernelbridge_fork): config->python_dir, else the installed dir, or the
    source tree's python/ when the running executable lies in the build
    tree. Borrowed (config's or static). */
const char *kb_engine_python_dir(const kb_service_config_t *config);

/*  The dir that Python contexts get on PYTHONPATH for the IPython
    extension kernelbridge_display: NULL when config says no_display_ext,
    else config->python_dir, else the installed dir, or the source tree's
    python/ when the running executable lies in the build tree; NULL (with
    a warning) when it holds no kernelbridge_display. Caller frees. */
char *kb_engine_display_dir(const kb_service_config_t *config);

#endif
