/*  kb_engine_launch.c - how the engine launches a kernel (the display
    extension for IPython's, the kernels' dirs and options), and what it
    lends the templates new kernels are forked from. Engine thread only.
*/
#include <stdio.h>
#include <stdlib.h>

#include "service/engine/kb_engine.h"
#include "service/fork/kb_template.h"

extern char **environ;

/*  Each kernel's files are named by a serial number (with the pid and a
    random part): counted for the whole process, engine threads alike. */
static _Atomic unsigned long s_kernel_serial;

void kb_engine_kernel_opts(kb_engine_t *self, const kb_kernelspec_t *spec, kb_kernel_opts_t *out)
{
    /* Deno's kernel, for one, cannot use ipc endpoints */
    kb_kernelspec_quirks_t quirks = kb_kernelspec_quirks(spec);
    *out = (kb_kernel_opts_t){
        .runtime_dir = kb_restore_kernel_dir(self->durable) ? kb_restore_kernel_dir(self->durable)
                                                            : self->state_dir,
        .ipc_dir = self->ipc_dir,
        .serial = ++s_kernel_serial,
        .transport = quirks.transport ? quirks.transport : self->config.transport,
        .max_message = self->config.max_message_bytes,
        .port_min = self->config.kernel_port_min,
        .port_max = self->config.kernel_port_max,
    };
}

/*  A kernel that can fork has the kernel-side packages' dir (python_dir)
    last on PYTHONPATH, given once at launch: the fork requests import
    kernelbridge_fork from it, and a fork inherits it. IPython's kernels
    load the extension kernelbridge_display (in that dir) at start
    (`--ext`): a pool kernel has it ready, and a fork inherits it. The
    extension keeps the kernel's published messages within the max message
    size, given in KERNELBRIDGE_MAX_MESSAGE_SIZE (so that one too large is
    replaced by a note, rather than refused at the socket with what follows
    it), and makes its iopub wait for the daemon instead of dropping
    (KERNELBRIDGE_IOPUB_NODROP: the daemon bounds its queue of that
    kernel's output by bytes, kb_kernel_io.c). *spec_p and *envp_p are
    replaced by the copies that say so (*owned: the spec to free). 0, or
    -1 when out of memory. */
static int s_with_display(kb_engine_t *self, const kb_kernelspec_t **spec_p, char ***envp_p,
                          kb_kernelspec_t **owned)
{
    *owned = NULL;
    bool display = self->display_dir && kb_kernelspec_quirks(*spec_p).ipykernel;
    if (!display && !kb_kernelspec_forkable(*spec_p, NULL))
        return 0;
    char **envp = kb_kernelspec_env_add_path(*envp_p, "PYTHONPATH", self->python_dir);
    if (envp && display && self->config.max_message_bytes > 0) {
        char limit[32];
        snprintf(limit, sizeof limit, "%llu", (unsigned long long)self->config.max_message_bytes);
        char **with_limit = kb_kernelspec_env_set(envp, "KERNELBRIDGE_MAX_MESSAGE_SIZE", limit);
        kb_strv_free(envp);
        envp = with_limit;
    }
    if (envp && display) {
        char **with_nodrop = kb_kernelspec_env_set(envp, "KERNELBRIDGE_IOPUB_NODROP", "1");
        kb_strv_free(envp);
        envp = with_nodrop;
    }
    *owned = display ? kb_kernelspec_with_arg(*spec_p, "--ext=kernelbridge_display")
                     : kb_kernelspec_dup(*spec_p);
    if (!envp || !*owned) {
        kb_strv_free(envp);
        kb_kernelspec_destroy(owned);
        return -1;
    }
    kb_strv_free(*envp_p);
    *envp_p = envp;
    *spec_p = *owned;
    return 0;
}

kb_kernel_t *kb_engine_launch(kb_engine_t *self, const kb_kernelspec_t *spec, const char *cwd,
                              const json_t *env, uint64_t data_limit,
                              const kb_kernel_callbacks_t *callbacks, void *arg, kb_error_t *err)
{
    const char *drop[] = { "KB_", NULL };
    char **envp = kb_kernelspec_build_env(spec, environ, drop, env);
    kb_kernelspec_t *with_display = NULL;
    if (envp && s_with_display(self, &spec, &envp, &with_display) < 0) {
        kb_strv_free(envp);
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return NULL;
    }
    kb_kernel_opts_t opts;
    kb_engine_kernel_opts(self, spec, &opts);
    opts.cwd = cwd;
    opts.envp = envp;
    opts.system_python = self->system_python;
    opts.start_timeout = self->config.start_timeout;
    opts.users = self->users;
    opts.work_root = self->work_root;
    opts.data_limit = data_limit;
    kb_error_t problem;
    kb_kernel_t *kernel = kb_kernel_new(self->loop, spec, &opts, callbacks, arg, &problem);
    kb_strv_free(envp);
    if (kernel)
        kb_kernel_set_observer(kernel, kb_metrics_observer(self->metrics));
    else {
        kb_metrics_start_failed(self->metrics, spec->name);
        kb_error_set(err, KB_ERR_KERNEL_START_FAILED, "%s", problem.message);
    }
    kb_kernelspec_destroy(&with_display); /* spec may be it */
    return kernel;
}

kb_kernel_t *kb_engine_plain_launch(void *impl, const kb_kernelspec_t *spec, const char *cwd,
                                    const json_t *env, uint64_t data_limit,
                                    const kb_kernel_callbacks_t *callbacks, void *arg,
                                    kb_error_t *err)
{
    return kb_engine_launch(impl, spec, cwd, env, data_limit, callbacks, arg, err);
}

static void s_kernel_opts(void *impl, const kb_kernelspec_t *spec, kb_kernel_opts_t *out)
{
    kb_engine_kernel_opts(impl, spec, out);
}

void kb_engine_template_env(kb_engine_t *self, kb_template_env_t *out)
{
    *out = (kb_template_env_t){ .loop = self->loop,
                                .checkpoints = self->checkpoints,
                                .plain = &self->plain_launcher,
                                .kernel_opts = s_kernel_opts,
                                .state_dir = self->state_dir,
                                .system_python = self->system_python,
                                .other_users = self->users != NULL,
                                .start_timeout = self->config.start_timeout,
                                .observer = kb_metrics_observer(self->metrics) };
}
