/*  kb_template.h - contexts forked from a warm template (SPEC section 13,
    `--fork-template LANG[=MODULE,...]`): one frozen kernel per language,
    with the modules imported, from which every new kernel of that
    language (contexts, default contexts, isolated runs, the pool) is
    forked instead of started.

    A template is an ordinary kernel of the language's kernelspec,
    launched by the engine, asked once (a silent execute_request) to
    import the modules and freeze itself on a unix socket
    (kernelbridge_fork.template); the frozen process is recorded as a
    checkpoint of no context (state.db, so a next daemon takes it back),
    and the kernel it came from is shut down. A new kernel is one request
    on that socket (the new context's connection, cwd and env), answered
    with the pid as soon as the process exists; the kernel is then
    adopted and becomes ready as any other. When the template is gone or
    does not answer, kernels are started the ordinary way and a new
    template is made. Not for: the kernel side (python/kernelbridge_fork),
    checkpoints of contexts (kb_checkpoints.h). Engine thread only.
*/
#ifndef KB_TEMPLATE_H_INCLUDED
#define KB_TEMPLATE_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernel/kb_kernel.h"
#include "kernel/kb_kernelspec.h"
#include "kernelbridge/kb_error.h"
#include "service/engine/kb_kernel_source.h"
#include "service/fork/kb_checkpoints.h"

typedef struct kb_templates kb_templates_t;

/*  What the engine lends the templates (borrowed; they outlive them). */
typedef struct {
    kb_loop_t *loop;
    kb_checkpoints_t *checkpoints;   /* the frozen processes are recorded there */
    const kb_kernel_source_t *plain; /* launches never from a template; retires; finds specs */
    void (*kernel_opts)(void *impl, const kb_kernelspec_t *spec, kb_kernel_opts_t *out);
    const char *state_dir, *system_python;
    bool other_users;     /* kernels run as other users: templates are refused */
    double start_timeout; /* for a forked kernel to answer kernel_info */
    kb_kernel_observer_t *observer;
} kb_template_env_t;

/*  The templates of entries ("LANG" or "LANG=MOD,MOD", NULL-terminated;
    NULL or empty: none, *out NULL). Each is checked now: a language with
    a kernelspec that can fork, modules that import (run by the
    kernelspec's Python: a module that fails is refused with its error).
    0, or -1 with err (BAD_REQUEST, LANGUAGE_NOT_SUPPORTED,
    UNSUPPORTED_OPTION). Nothing is started before kb_templates_start. */
int kb_templates_new(const kb_template_env_t *env, const char *const *entries, kb_templates_t **out,
                     kb_error_t *err);

/*  Forget them; the frozen processes are left to the checkpoint store
    (which ends them, or keeps them for the next daemon). Safe on NULL. */
void kb_templates_destroy(kb_templates_t **self_p);

/*  A frozen process an earlier daemon recorded (a checkpoint row whose
    context_id is a template's, "template:LANG=MODS"): true when it is
    one; it is taken as that template's when the modules are the same
    and the process is still the one recorded, else ended. */
bool kb_templates_adopt(kb_templates_t *self, const json_t *row);

/*  Make the templates not taken back, and watch them (a template that is
    gone is made again). Safe on NULL. */
void kb_templates_start(kb_templates_t *self);

/*  No more templates are made (the daemon is stopping). Safe on NULL. */
void kb_templates_stop(kb_templates_t *self);

/*  A kernel of spec forked from its language's template, in cwd (NULL:
    the daemon's) with env added, RLIMIT_DATA data_limit (0: none),
    reporting to callbacks as a launched kernel would; or NULL when there
    is no ready template for spec or it did not answer (then the caller
    starts one the ordinary way). */
kb_kernel_t *kb_templates_launch(kb_templates_t *self, const kb_kernelspec_t *spec, const char *cwd,
                                 const json_t *env, uint64_t data_limit,
                                 const kb_kernel_callbacks_t *callbacks, void *arg);

/*  A kernel kb_templates_launch gave whose start then failed (it died,
    or did not answer kernel_info: why): true when it is one of those,
    and its template, if still the one it came from, is marked failed
    (ended, made again after a delay): the next launch of that language
    is an ordinary one. False for any other kernel. */
bool kb_templates_fork_failed(kb_templates_t *self, const kb_kernel_t *kernel, const char *why);

/*  The pids of the templates' processes: each frozen template's, and
    each kernel being made into one; a JSON array (caller owns; NULL: out
    of memory). Empty when there are none. */
json_t *kb_templates_pids(const kb_templates_t *self);

/*  [{language, kernel_name, state, pid, modules, forks, failures, why}],
    or NULL when there are none. Caller owns. */
json_t *kb_templates_json(const kb_templates_t *self);

#endif
