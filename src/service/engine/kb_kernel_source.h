/*  kb_kernel_source.h - how contexts and the pool get kernels and give them
    back, without knowing the engine: a small table of functions the
    engine fills (kb_engine.c). Engine thread only.
*/
#ifndef KB_KERNEL_SOURCE_H_INCLUDED
#define KB_KERNEL_SOURCE_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernel/kb_kernel.h"
#include "kernel/kb_kernelspec.h"
#include "kernelbridge/kb_error.h"

typedef struct {
    void *impl;
    /*  Launch a kernel of spec in cwd (NULL: the daemon's) with the
        daemon's environment, the kernelspec's and env (borrowed, may be
        NULL), its RLIMIT_DATA set to data_limit in the launch (0: none).
        NULL with err (KERNEL_START_FAILED). Caller owns it. */
    kb_kernel_t *(*launch)(void *impl, const kb_kernelspec_t *spec, const char *cwd,
                           const json_t *env, uint64_t data_limit,
                           const kb_kernel_callbacks_t *callbacks, void *arg, kb_error_t *err);
    /*  Take back a kernel: shut it down (or kill it now) and free it once
        it is gone. It calls its old owner back no more. */
    void (*retire)(void *impl, kb_kernel_t *kernel, bool kill_now);
    /*  A ready pooled kernel of that kernelspec, now the caller's; or NULL.
        With data_limit (the RLIMIT_DATA the caller will set on it: 0 for
        none) NULL too when that cannot be done afterwards: a kernel of
        another uid refuses prlimit(2) unless the daemon has
        CAP_SYS_RESOURCE. NULL for the pool's own launcher. */
    kb_kernel_t *(*take_pooled)(void *impl, const char *spec_name, uint64_t data_limit);
    /*  The kernelspec for a language or a kernelspec name (a copy; caller
        owns), or NULL with err (LANGUAGE_NOT_SUPPORTED). */
    kb_kernelspec_t *(*find_spec)(void *impl, const char *language, const char *kernel_name,
                                  kb_error_t *err);
    /*  Whether one more kernel fits under the daemon's limit. */
    bool (*has_room)(void *impl);
    /*  A kernel of this source whose start failed (start_failed, why):
        true when it was forked from a template, which is now marked
        failed: the owner retires it and launches again, and that launch
        is an ordinary one (the user sees no error because of the
        template). False, or NULL: the failure is the owner's to report. */
    bool (*fork_failed)(void *impl, kb_kernel_t *kernel, const char *why);
} kb_kernel_source_t;

#endif
