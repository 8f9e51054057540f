/*  kb_engine.c - the engine's making and unmaking: its settings, state dir
    and sandbox id; the launcher of kernels for contexts and the pool; the
    kernels being shut down and those freed at the end of a loop turn;
    contexts in and out of its tables; the durable state dir opened,
    restored and written through kb_restore.c; stopping. The one writer of
    struct kb_engine. What each call does is in kb_dispatch.c, which calls
    here and never the reverse. Engine thread only, but for kb_engine_new
    and kb_engine_destroy.
*/
#include "service/engine/kb_engine.h"

#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "service/engine/kb_engine_dirs.h"
#include "service/engine/kb_request.h"
#include "service/fork/kb_checkpoints.h"
#include "service/fork/kb_template.h"
#include "util/kb_alloc.h"
#include "util/kb_clock.h"

#define KB_ADOPT_DEADLINE_MS 3000 /* the whole adoption, however many kernels */

extern char **environ;

/* ---- kernels: the launcher -------------------------------------------------- */

/*  End of the loop turn: free the kernels that left this turn. */
static void s_reap(void *arg)
{
    kb_engine_t *self = arg;
    kb_kernel_t *kernel;
    while ((kernel = zlistx_detach(self->reap, NULL)))
        kb_kernel_destroy(&kernel);
    self->reap_scheduled = false;
}

static const kb_kernel_callbacks_t s_no_callbacks = { 0 };

/*  Free a kernel at the end of this loop turn, never inside its own
    callbacks; it calls back no more. */
static void s_reap_kernel(kb_engine_t *self, kb_kernel_t *kernel)
{
    kb_kernel_set_callbacks(kernel, &s_no_callbacks, NULL);
    zlistx_add_end(self->reap, kernel);
    if (!self->reap_scheduled && kb_loop_defer(self->loop, s_reap, self) == 0)
        self->reap_scheduled = true;
}

static void s_on_dying_exited(kb_kernel_t *kernel, void *arg)
{
    kb_engine_t *self = arg;
    void *handle = zlistx_find(self->dying, kernel);
    if (handle)
        zlistx_detach(self->dying, handle);
    s_reap_kernel(self, kernel);
}

static void s_on_dying_start_failed(kb_kernel_t *kernel, const char *why, void *arg)
{
    /* killed while starting; its exit is reported through `exited` next */
}

static const kb_kernel_callbacks_t s_dying_callbacks = {
    .start_failed = s_on_dying_start_failed,
    .exited = s_on_dying_exited,
};

/*  Take a kernel back: shut down (or killed), freed once its process has
    gone. */
static void s_retire(void *impl, kb_kernel_t *kernel, bool kill_now)
{
    kb_engine_t *self = impl;
    if (kb_kernel_state(kernel) == KB_KERNEL_DEAD) {
        s_reap_kernel(self, kernel);
        return;
    }
    kb_kernel_set_callbacks(kernel, &s_dying_callbacks, self);
    zlistx_add_end(self->dying, kernel);
    if (kill_now) {
        kb_kernel_apply(kernel, KB_KEV_SHUTDOWN);
        kb_kernel_signal(kernel, SIGKILL);
    } else
        kb_kernel_shutdown(kernel, 1.0);
}

/*  Kernelspecs as discovered at most 2 s ago: a context create should not
    pay for a directory scan, and a kernel installed now shows up soon. */
const kb_kernelspecs_t *kb_engine_specs(kb_engine_t *self, bool fresh)
{
    int64_t now = zclock_mono();
    if (fresh || !self->specs || now - self->specs_at_ms > 2000) {
        kb_kernelspecs_destroy(&self->specs);
        self->specs = kb_kernelspecs_discover(NULL, NULL);
        self->specs_at_ms = now;
    }
    return self->specs;
}

static kb_kernelspec_t *s_find_spec(void *impl, const char *language, const char *kernel_name,
                                    kb_error_t *err)
{
    kb_engine_t *self = impl;
    const kb_kernelspecs_t *specs = kb_engine_specs(self, false);
    const kb_kernelspec_t *spec
        = kernel_name
              ? kb_kernelspecs_find(specs, kernel_name)
              : kb_kernelspecs_for_language(specs, language, (const char *const *)self->kernel_map);
    kb_kernelspec_t *copy = spec ? kb_kernelspec_dup(spec) : NULL;
    if (!copy) {
        char *names = kb_kernelspecs_names(specs);
        kb_error_set(err, KB_ERR_LANGUAGE_NOT_SUPPORTED, "no kernelspec for %s %s; installed: %s",
                     kernel_name ? "kernel" : "language", kernel_name ? kernel_name : language,
                     names && *names ? names : "none");
        free(names);
    }
    return copy;
}

/*  A kernel forked from the language's template when there is one ready,
    else launched. */
static kb_kernel_t *s_launch(void *impl, const kb_kernelspec_t *spec, const char *cwd,
                             const json_t *env, uint64_t data_limit,
                             const kb_kernel_callbacks_t *callbacks, void *arg, kb_error_t *err)
{
    kb_engine_t *self = impl;
    kb_kernel_t *forked
        = kb_templates_launch(self->templates, spec, cwd, env, data_limit, callbacks, arg);
    return forked ? forked
                  : kb_engine_launch(self, spec, cwd, env, data_limit, callbacks, arg, err);
}

static bool s_fork_failed(void *impl, kb_kernel_t *kernel, const char *why)
{
    kb_engine_t *self = impl;
    return kb_templates_fork_failed(self->templates, kernel, why);
}

/*  A pool kernel's row: so that a next daemon finds it (and kills it)
    when this one is killed. */
static void s_pool_row(kb_engine_t *self, kb_kernel_t *kernel, bool present)
{
    kb_persist_t *persist = kb_restore_persist(self->durable);
    if (!persist)
        return;
    char id[40];
    snprintf(id, sizeof id, "pool-%d", (int)kb_kernel_pid(kernel));
    if (!present) {
        kb_persist_context_delete(persist, id);
        return;
    }
    const kb_kernelspec_t *spec = kb_kernel_spec(kernel);
    char *connection = json_dumps(kb_kernel_connection_info(kernel), JSON_COMPACT);
    if (!connection) {
        zsys_error("out of memory: the row of pool kernel %s is not written", id);
        return;
    }
    kb_db_context_t row = { .id = id,
                            .kind = "pool",
                            .language = spec->language,
                            .kernel_name = spec->name,
                            .connection = connection,
                            .connection_file = kb_kernel_connection_file(kernel),
                            .log_file = kb_kernel_log_file(kernel),
                            .pid = kb_kernel_pid(kernel),
                            .pid_start = kb_kernel_pid_start(kernel),
                            .pgid = kb_kernel_pgid(kernel),
                            .created_at = kb_now(),
                            .last_activity_at = kb_now() };
    kb_persist_context_put(persist, &row);
    free(connection);
}

/*  The RLIMIT_DATA a pooled kernel of spec starts with: none when the
    daemon can lower it when the kernel is taken (the kernel is of its own
    uid), else the service's default memory limit, which a kernel of
    another uid cannot be given afterwards. */
static uint64_t s_pool_data_limit(const kb_engine_t *self, const kb_kernelspec_t *spec)
{
    if (!self->users || kb_kernelspec_quirks(spec).no_rlimit_data)
        return 0;
    return self->config.memory_limit > 0 ? (uint64_t)self->config.memory_limit : 0;
}

static kb_kernel_t *s_pool_launch(void *impl, const kb_kernelspec_t *spec, const char *cwd,
                                  const json_t *env, uint64_t data_limit,
                                  const kb_kernel_callbacks_t *callbacks, void *arg,
                                  kb_error_t *err)
{
    (void)data_limit;
    kb_kernel_t *kernel
        = s_launch(impl, spec, cwd, env, s_pool_data_limit(impl, spec), callbacks, arg, err);
    if (kernel)
        s_pool_row(impl, kernel, true);
    return kernel;
}

static void s_pool_retire(void *impl, kb_kernel_t *kernel, bool kill_now)
{
    s_pool_row(impl, kernel, false);
    s_retire(impl, kernel, kill_now);
}

static kb_kernel_t *s_take_pooled(void *impl, const char *spec_name, uint64_t data_limit)
{
    kb_engine_t *self = impl;
    const kb_kernelspec_t *spec = kb_kernelspecs_find(kb_engine_specs(self, false), spec_name);
    if (self->users && data_limit && (!spec || data_limit != s_pool_data_limit(self, spec)))
        return NULL; /* its limit could not be set: start one cold */
    kb_kernel_t *kernel = kb_pool_take(self->pool, spec_name);
    if (kernel)
        s_pool_row(self, kernel, false); /* the context's row follows */
    return kernel;
}

void kb_engine_context_add(kb_engine_t *self, kb_context_t *ctx)
{
    zhashx_insert(self->contexts, kb_context_id(ctx), ctx);
    zhashx_insert(self->kernel_ids, kb_context_kernel_id(ctx), ctx);
}

void kb_engine_context_remove(kb_engine_t *self, kb_context_t *ctx)
{
    if (zhashx_lookup(self->contexts, kb_context_id(ctx)) == ctx)
        zhashx_delete(self->contexts, kb_context_id(ctx));
    if (zhashx_lookup(self->kernel_ids, kb_context_kernel_id(ctx)) == ctx)
        zhashx_delete(self->kernel_ids, kb_context_kernel_id(ctx));
}

kb_context_t *kb_engine_context_find(kb_engine_t *self, const char *id)
{
    kb_context_t *ctx = zhashx_lookup(self->contexts, id);
    return ctx ? ctx : zhashx_lookup(self->kernel_ids, id);
}

size_t kb_engine_kernel_count(kb_engine_t *self)
{
    return zhashx_size(self->contexts) + kb_pool_size(self->pool);
}

static bool s_has_room(void *impl)
{
    kb_engine_t *self = impl;
    return kb_engine_kernel_count(self) < self->config.max_contexts;
}

size_t kb_engine_dying(const kb_engine_t *self)
{
    return zlistx_size(self->dying);
}

/* ---- making and unmaking --------------------------------------------------------- */

static void s_context_changed(kb_context_t *ctx, bool at_once, void *arg)
{
    kb_engine_t *self = arg;
    kb_restore_mark(self->durable, ctx, at_once);
}

/*  ctx's row is deleted; a default context's generation is kept. */
static void s_forget_row(kb_engine_t *self, kb_context_t *ctx)
{
    kb_restore_forget(self->durable, ctx);
    if (kb_context_is_default(ctx))
        kb_restore_generations(self->durable, self->default_generations);
}

static void s_free_gone(void *arg)
{
    kb_engine_t *self = arg;
    kb_context_t *ctx;
    while ((ctx = zlistx_detach(self->gone, NULL)))
        kb_context_destroy(&ctx);
}

void kb_engine_context_gone(kb_context_t *ctx, const char *why, bool vanished, void *arg)
{
    kb_engine_t *self = arg;
    if (vanished && !kb_context_isolated(ctx)
        && kb_vanished_remember(self->vanished, kb_context_id(ctx), why) != 0)
        zsys_error("out of memory: context %s vanished: %s", kb_context_id(ctx), why);
    if (kb_context_is_default(ctx)) {
        zhashx_update(self->default_generations, kb_context_id(ctx),
                      (void *)(intptr_t)kb_context_generation(ctx));
    }
    s_forget_row(self, ctx);
    kb_engine_context_remove(self, ctx);
    kb_checkpoints_drop_context(self->checkpoints, kb_context_id(ctx));
    if (zlistx_size(self->gone) == 0)
        kb_loop_defer(self->loop, s_free_gone, self);
    zlistx_add_end(self->gone, ctx);
    kb_pool_poke(self->pool);
}

intptr_t kb_engine_next_generation(kb_engine_t *self, const char *id)
{
    return (intptr_t)zhashx_lookup(self->default_generations, id) + 1;
}

/*  Kernels as other users: who they run as, and their way to their own
    files. The dirs on the way (the state dir, kernels/, the ipc dir,
    work/) become 0711, traversable but not listable, and hold nothing
    the kernels may read but what is named from random bytes and given to
    their uid; state.db, the lock and the kernels' logs stay 0600. In the
    default mode the dirs are 0700. 0, or -1 with err (BAD_REQUEST). */
static int s_kernel_users(kb_engine_t *self, const kb_service_config_t *config, kb_error_t *err)
{
    kb_error_t problem;
    bool range = config->kernel_uid_min || config->kernel_uid_max;
    const char *dirs[] = { self->state_dir, kb_restore_kernel_dir(self->durable), self->ipc_dir };
    if (config->kernel_user && range) {
        kb_error_set(err, KB_ERR_BAD_REQUEST,
                     "a kernel user and a kernel uid range exclude "
                     "each other");
        return -1;
    }
    if (!config->kernel_user && !range) {
        for (size_t i = 0; i < 3; i++)
            if (dirs[i])
                chmod(dirs[i], 0700);
        return 0;
    }
    self->users = config->kernel_user ? kb_kernel_users_new_user(config->kernel_user, &problem)
                                      : kb_kernel_users_new_range(config->kernel_uid_min,
                                                                  config->kernel_uid_max, &problem);
    if (!self->users) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "%s", problem.message);
        return -1;
    }
    if (kb_engine_check_reachable(self->state_dir, err) != 0
        || (self->ipc_dir && kb_engine_check_reachable(self->ipc_dir, err) != 0))
        return -1;
    self->work_root = zsys_sprintf("%s/work", self->state_dir);
    if (!self->work_root) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return -1;
    }
    struct stat st;
    if (mkdir(self->work_root, 0711) != 0 && errno != EEXIST) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "cannot create %s: %s", self->work_root,
                     strerror(errno));
        return -1;
    }
    if (lstat(self->work_root, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "%s is not a dir of the daemon's own",
                     self->work_root);
        return -1;
    }
    for (size_t i = 0; i < 4; i++) {
        const char *dir = i < 3 ? dirs[i] : self->work_root;
        if (dir && chmod(dir, 0711) != 0) {
            kb_error_set(err, KB_ERR_BAD_REQUEST, "cannot open %s to the kernels (0711): %s", dir,
                         strerror(errno));
            return -1;
        }
    }
    zsys_info("kernels run as %s", kb_kernel_users_describe(self->users));
    return 0;
}

/*  The state dir (locked and opened when it is durable) and the ipc dir:
    the last daemon's, when it is still ours (adopted kernels listen
    there), else a fresh one. 0, or -1 with err. */
static int s_open_dirs(kb_engine_t *self, const char *given, kb_error_t *err)
{
    self->state_dir = kb_engine_make_state_dir(given, &self->own_state_dir, err);
    if (!self->state_dir)
        return -1;
    if (!self->own_state_dir && !(self->durable = kb_restore_open(self->state_dir, err)))
        return -1;
    if (strcmp(self->config.transport, "ipc") != 0)
        return 0;
    self->ipc_dir = kb_restore_ipc_dir(self->durable);
    if (!self->ipc_dir && !(self->ipc_dir = kb_engine_make_ipc_dir(err)))
        return -1;
    kb_restore_set_ipc_dir(self->durable, self->ipc_dir);
    return 0;
}

/*  The tables and lists, empty. czmq's constructors abort inside czmq
    when memory runs out; what is ours is checked. 0, or -1 with err. */
static int s_make_tables(kb_engine_t *self, const kb_service_config_t *config, kb_error_t *err)
{
    self->system_python = strdup(config->system_python ? config->system_python : KB_SYSTEM_PYTHON);
    self->display_dir = kb_engine_display_dir(config);
    self->python_dir = kb_xstrdup(kb_engine_python_dir(config));
    size_t maps = 0;
    while (config->kernel_map && config->kernel_map[maps])
        maps++;
    self->kernel_map = calloc(maps + 1, sizeof(char *));
    for (size_t i = 0; self->kernel_map && i < maps; i++)
        if (!(self->kernel_map[i] = strdup(config->kernel_map[i])))
            goto nomem;
    self->contexts = zhashx_new();
    self->kernel_ids = zhashx_new();
    self->gone = zlistx_new();
    self->default_generations = zhashx_new();
    self->dying = zlistx_new();
    self->reap = zlistx_new();
    if (!self->system_python || !self->kernel_map || !self->contexts || !self->kernel_ids
        || !self->gone || !self->default_generations || !self->dying || !self->reap)
        goto nomem;
    self->loop = kb_loop_new();
    if (!self->loop) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot create an epoll set: %s", strerror(errno));
        return -1;
    }
    if (!(self->metrics = kb_metrics_new())
        || !(self->checkpoints = kb_checkpoints_new(self->loop)))
        goto nomem;
    return 0;
nomem:
    kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
    return -1;
}

/*  The kernel sources of contexts and of the pool, the run settings and
    the contexts' environment: tables of what the engine lends. */
static void s_fill_sources(kb_engine_t *self)
{
    self->launcher = (kb_kernel_source_t){ .impl = self,
                                           .launch = s_launch,
                                           .retire = s_retire,
                                           .take_pooled = s_take_pooled,
                                           .find_spec = s_find_spec,
                                           .has_room = s_has_room,
                                           .fork_failed = s_fork_failed };
    self->plain_launcher = self->launcher;
    self->plain_launcher.launch = kb_engine_plain_launch;
    self->plain_launcher.fork_failed = NULL;
    self->pool_launcher = self->launcher;
    self->pool_launcher.launch = s_pool_launch;
    self->pool_launcher.retire = s_pool_retire;
    self->pool_launcher.take_pooled = NULL;
    self->run_settings = (kb_run_settings_t){
        .loop = self->loop,
        .sandbox_id = self->sandbox_id,
        .interrupt_grace = self->config.interrupt_grace,
        .completion_grace = self->config.completion_grace,
        .max_output_bytes = self->config.max_output_bytes,
        .metrics = self->metrics,
    };
    self->context_env = (kb_context_env_t){ .launcher = &self->launcher,
                                            .run_settings = &self->run_settings,
                                            .limits = self->limits,
                                            .sandbox_id = self->sandbox_id,
                                            .gone = kb_engine_context_gone,
                                            .changed = s_context_changed,
                                            .gone_arg = self };
}

static void s_on_adopt_tick(kb_timer_t *timer, void *arg)
{
    kb_engine_t *self = arg;
    bool settled = zclock_mono() >= self->adopt_deadline_ms;
    if (!settled) {
        settled = kb_pool_starting(self->pool) == 0;
        for (kb_context_t *ctx = zhashx_first(self->contexts); ctx && settled;
             ctx = zhashx_next(self->contexts))
            settled = kb_context_settled(ctx);
    }
    if (settled) {
        kb_timer_stop(timer);
        kb_loop_stop(self->loop);
    }
}

/*  What the restore found, in the tables: the default contexts'
    generations, the ids that vanished, the adopted contexts. */
static void s_apply_found(kb_engine_t *self, const kb_restore_found_t *found)
{
    const char *id;
    json_t *value;
    json_object_foreach(found->generations, id, value)
    {
        zhashx_update(self->default_generations, id, (void *)(intptr_t)json_integer_value(value));
    }
    size_t i;
    json_array_foreach(found->vanished, i, value)
    {
        const char *why = json_string_value(json_array_get(value, 1));
        id = json_string_value(json_array_get(value, 0));
        if (id && why && kb_vanished_remember(self->vanished, id, why) != 0)
            zsys_error("out of memory: context %s vanished: %s", id, why);
    }
    for (kb_context_t *ctx = zlistx_first(found->contexts); ctx; ctx = zlistx_next(found->contexts))
        kb_engine_context_add(self, ctx);
}

/*  Bring back what state.db holds: records, then kernels, adopted on the
    loop (3 s at most) before it returns; then changes are written. 0, or
    -1 with err. */
static int s_restore(kb_engine_t *self, kb_error_t *err)
{
    kb_restore_env_t env = { .loop = self->loop,
                             .launcher = &self->launcher,
                             .context_env = &self->context_env,
                             .pool = self->pool,
                             .procs = self->procs,
                             .metrics = self->metrics,
                             .users = self->users,
                             .work_root = self->work_root,
                             .max_message = self->config.max_message_bytes,
                             .sandbox_id = self->sandbox_id,
                             .no_adopt = self->config.no_adopt };
    kb_restore_found_t found = { 0 };
    int rc = kb_restore_run(self->durable, &env, &found, err);
    if (rc == 0)
        s_apply_found(self, &found);
    json_t *checkpoints = json_incref(found.checkpoints);
    kb_restore_found_fini(&found);
    if (rc != 0) {
        json_decref(checkpoints);
        return -1;
    }
    if (zhashx_size(self->contexts) > 0 || kb_pool_starting(self->pool) > 0) {
        kb_timer_t tick;
        kb_timer_init(&tick);
        self->adopt_deadline_ms = zclock_mono() + KB_ADOPT_DEADLINE_MS;
        kb_timer_start(self->loop, &tick, 5, 5, s_on_adopt_tick, self);
        kb_loop_run(self->loop);
        kb_timer_stop(&tick);
        kb_loop_flush(self->loop);
    }
    rc = kb_restore_finish(self->durable, &env, self->contexts, self->ipc_dir, err);
    /*  Checkpoints come back with their contexts (those adopted now). */
    kb_checkpoints_set_persist(self->checkpoints, kb_restore_persist(self->durable));
    size_t i;
    json_t *row;
    json_array_foreach(checkpoints, i, row)
    {
        const char *of = json_string_value(json_object_get(row, "context_id"));
        if (!kb_templates_adopt(self->templates, row))
            kb_checkpoints_adopt(self->checkpoints, row, of && kb_engine_context_find(self, of));
    }
    json_decref(checkpoints);
    return rc;
}

kb_engine_t *kb_engine_new(const kb_service_config_t *config, kb_error_t *err)
{
    kb_engine_t *self = calloc(1, sizeof *self);
    if (!self) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return NULL;
    }
    self->config = *config;
    kb_engine_default_config(&self->config);
    self->config.transport
        = config->transport && strcmp(config->transport, "tcp") == 0 ? "tcp" : "ipc";
    kb_timer_init(&self->stop_timer);
    kb_timer_init(&self->cull_timer);
    kb_kernel_memory_init(&self->kernel_memory);
    if (s_make_tables(self, config, err) != 0 || s_open_dirs(self, config->state_dir, err) != 0
        || s_kernel_users(self, config, err) != 0)
        goto fail;
    self->sandbox_id
        = kb_engine_sandbox_id(config->sandbox_id, self->state_dir, self->own_state_dir);
    self->vanished = self->sandbox_id ? kb_vanished_new(self->sandbox_id) : NULL;
    if (!self->vanished) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        goto fail;
    }
    self->started_at = kb_now();
    if (kb_limits_validate(config->memory_limit, config->pids_limit, err) != 0)
        goto fail; /* BAD_REQUEST: a refused configuration */
    self->limits = kb_limits_new(self->loop, self->config.interrupt_grace, self->config.hog_after);
    if (!self->limits) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        goto fail;
    }
    s_fill_sources(self);
    self->procs = kb_procstore_new(self->loop, self->config.max_processes,
                                   self->config.max_process_bytes, self->config.max_output_memory);
    if (!self->procs) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        goto fail;
    }
    self->pool = kb_pool_new(config->pool, &self->pool_launcher, self->loop, err);
    kb_template_env_t templates;
    kb_engine_template_env(self, &templates);
    if (!self->pool || kb_templates_new(&templates, config->fork_templates, &self->templates, err)
        || (self->durable && s_restore(self, err) != 0))
        goto fail;
    return self;
fail:
    kb_engine_destroy(&self);
    return NULL;
}

void kb_engine_destroy(kb_engine_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_engine_t *self = *self_p;
    *self_p = NULL;
    assert(!self->contexts || zhashx_size(self->contexts) == 0);
    kb_restore_close(&self->durable);
    kb_templates_destroy(&self->templates);
    kb_checkpoints_destroy(&self->checkpoints, true);
    zhashx_destroy(&self->contexts);
    zhashx_destroy(&self->kernel_ids);
    zlistx_destroy(&self->gone);
    kb_vanished_destroy(&self->vanished);
    zhashx_destroy(&self->default_generations);
    zlistx_destroy(&self->dying);
    zlistx_destroy(&self->reap);
    kb_procstore_destroy(&self->procs);
    kb_pool_destroy(&self->pool);
    kb_limits_destroy(&self->limits);
    kb_kernel_memory_free(&self->kernel_memory);
    kb_kernelspecs_destroy(&self->specs);
    kb_loop_destroy(&self->loop);
    kb_kernel_users_destroy(&self->users);
    if (self->own_state_dir && self->work_root)
        rmdir(self->work_root);
    if (self->own_state_dir && self->state_dir)
        rmdir(self->state_dir);
    if (self->ipc_dir)
        rmdir(self->ipc_dir); /* fails, as it should, while kept kernels listen there */
    free(self->ipc_dir);
    free(self->work_root);
    free(self->state_dir);
    free(self->sandbox_id);
    free(self->system_python);
    free(self->display_dir);
    free(self->python_dir);
    kb_strv_free(self->kernel_map);
    kb_metrics_destroy(&self->metrics); /* after every kernel: they report to it */
    free(self);
}

/* ---- starting and stopping ------------------------------------------------------- */

/*  Culling (Jupyter Server's cull_idle_timeout, cull_connected false):
    a context idle (kb_context_idle_for) for the timeout is deleted and
    vanishes with why. Default contexts too: they start afresh on next
    use. Looked for every tenth of the timeout (0.1 s to 10 s). */
static void s_cull(kb_timer_t *timer, void *arg)
{
    (void)timer;
    kb_engine_t *self = arg;
    double timeout = self->config.cull_idle_timeout;
    if (self->stopping || timeout <= 0)
        return;
    double now = kb_now();
    zlistx_t *all = zhashx_values(self->contexts);
    for (kb_context_t *ctx = all ? zlistx_first(all) : NULL; ctx; ctx = zlistx_next(all)) {
        if (kb_context_isolated(ctx) || kb_context_idle_for(ctx, now) < timeout)
            continue;
        char why[64];
        snprintf(why, sizeof why, "culled after %g s idle", timeout);
        zsys_info("context %s: %s", kb_context_id(ctx), why);
        kb_context_cull(ctx, why); /* out of contexts now, freed at the end of the turn */
    }
    zlistx_destroy(&all);
}

void kb_engine_start(kb_engine_t *self)
{
    kb_templates_start(self->templates);
    kb_pool_start(self->pool);
    double timeout = self->config.cull_idle_timeout;
    if (timeout > 0) {
        double every = timeout / 10 < 0.1 ? 0.1 : timeout / 10 > 10 ? 10 : timeout / 10;
        size_t ms = kb_loop_delay_ms(every);
        kb_timer_start(self->loop, &self->cull_timer, ms, ms, s_cull, self);
    }
}

void kb_engine_stop_begin(kb_engine_t *self)
{
    self->stopping = true;
    kb_templates_stop(self->templates);
    kb_timer_stop(&self->cull_timer);
    kb_pool_stop(self->pool);
    zlistx_t *all = zhashx_values(self->contexts);
    for (kb_context_t *ctx = zlistx_first(all); ctx; ctx = zlistx_next(all)) {
        /* kept kernels keep their rows, written as they are now */
        if (self->config.keep_kernels && kb_restore_persist(self->durable)
            && !kb_context_isolated(ctx)) {
            kb_restore_keep(self->durable, ctx);
            kb_context_release(ctx);
        } else {
            s_forget_row(self, ctx);
            kb_context_stop(ctx);
        }
        kb_engine_context_remove(self, ctx);
        zlistx_add_end(self->gone, ctx);
    }
    zlistx_destroy(&all);
    /*  Checkpoints end with the daemon, unless it keeps its kernels. */
    kb_checkpoints_destroy(&self->checkpoints,
                           !(self->config.keep_kernels && kb_restore_persist(self->durable)));
}

static void s_on_stop_tick(kb_timer_t *timer, void *arg)
{
    (void)timer;
    kb_engine_t *self = arg;
    if (kb_engine_dying(self) == 0 || zclock_mono() >= self->stop_deadline_ms)
        kb_loop_stop(self->loop); /* the rest is killed on the way out */
}

void kb_engine_stop(kb_engine_t *self)
{
    if (self->stopping)
        return;
    kb_engine_stop_begin(self);
    self->stop_deadline_ms = zclock_mono() + 5000;
    if (kb_engine_dying(self) == 0)
        kb_loop_stop(self->loop);
    else
        kb_timer_start(self->loop, &self->stop_timer, 20, 20, s_on_stop_tick, self);
}

void kb_engine_destroy_all(kb_engine_t *self)
{
    if (!self->stopping)
        kb_engine_stop_begin(self);
    kb_timer_stop(&self->stop_timer);
    kb_kernel_t *kernel;
    while ((kernel = zlistx_detach(self->dying, NULL)))
        kb_kernel_destroy(&kernel);
    kb_loop_flush(self->loop); /* what was deferred: freeing runs, contexts, kernels */
    s_reap(self);
    kb_context_t *ctx;
    while ((ctx = zlistx_detach(self->gone, NULL)))
        kb_context_destroy(&ctx);
}
