/*  kb_engine.c - contexts: creation, readiness, deletion, restart, vanishing,
    and the dispatch of every request to its handler. Runs on the engine
    thread only. Runs and process records are in kb_proc.c.
*/
#include "service/kb_engine.h"

#include <ctype.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

#define KB_VANISHED_KEPT 1000

static void s_on_ready(kb_kernel_t *kernel, void *arg);
static void s_on_start_failed(kb_kernel_t *kernel, const char *why, void *arg);
static void s_on_message(kb_kernel_t *kernel, kb_channel_t channel, const kb_msg_t *msg, void *arg);
static void s_on_exited(kb_kernel_t *kernel, void *arg);
static void s_on_setup_reply(kb_context_t *ctx, const kb_msg_t *msg);

static const kb_kernel_callbacks_t s_context_callbacks = {
    .ready = s_on_ready,
    .start_failed = s_on_start_failed,
    .message = s_on_message,
    .exited = s_on_exited,
};

/* ---- identity and JSON --------------------------------------------------- */

static bool s_valid_context_id(const char *id)
{
    size_t len = strlen(id);
    if (len < 1 || len > 64)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)id[i]) && id[i] != '.' && id[i] != '_' && id[i] != '-')
            return false;
    return true;
}

static char *s_lower(const char *text)
{
    char *copy = strdup(text);
    for (char *p = copy; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    return copy;
}

json_t *kb_context_identity(kb_context_t *ctx)
{
    return json_pack("{s:s, s:s, s:s}", "sandbox_id", ctx->engine->sandbox_id, "context_id",
                     ctx->id, "language", ctx->language);
}

static const char *s_context_state(kb_context_t *ctx)
{
    if (!ctx->kernel)
        return "dead";
    kb_kernel_state_t state = kb_kernel_state(ctx->kernel);
    if (state == KB_KERNEL_STARTING)
        return "starting";
    if (state == KB_KERNEL_DEAD || state == KB_KERNEL_DYING)
        return "dead";
    return ctx->running ? "busy" : "idle";
}

static json_t *s_context_json(kb_context_t *ctx)
{
    char created[40], active[40];
    kb_iso_time(ctx->created_at, created, sizeof created);
    kb_iso_time(ctx->last_activity_at, active, sizeof active);
    json_t *json = kb_context_identity(ctx);
    json_object_set_new(json, "kernel_name", json_string(ctx->kernel_name));
    json_object_set_new(json, "dropped_messages",
                        json_integer(ctx->kernel ? (json_int_t)kb_kernel_dropped(ctx->kernel) : 0));
    json_object_set_new(json, "cwd", ctx->cwd ? json_string(ctx->cwd) : json_null());
    json_object_set_new(json, "state", json_string(s_context_state(ctx)));
    json_object_set_new(json, "created_at", json_string(created));
    json_object_set_new(json, "last_activity_at", json_string(active));
    json_object_set_new(json, "execution_count", json_integer(ctx->execution_count));
    json_object_set_new(json, "pid",
                        ctx->kernel ? json_integer(kb_kernel_pid(ctx->kernel)) : json_null());
    json_object_set_new(json, "default", json_boolean(ctx->is_default));
    json_object_set_new(
        json, "heartbeat",
        json_string(ctx->kernel && kb_kernel_heartbeat_misses(ctx->kernel) > 1 ? "late" : "ok"));
    return json;
}

/* ---- vanished contexts ---------------------------------------------------- */

static void s_remember_vanished(kb_engine_t *self, const char *id, const char *why)
{
    char when[40];
    kb_iso_time(kb_now(), when, sizeof when);
    char *message = zsys_sprintf("context %s vanished at %s: %s", id, when, why);
    if (!zhashx_lookup(self->vanished, id))
        zlistx_add_end(self->vanished_order, (void *)id);
    zhashx_update(self->vanished, id, message);
    zstr_free(&message);
    while (zlistx_size(self->vanished_order) > KB_VANISHED_KEPT) {
        char *oldest = zlistx_first(self->vanished_order);
        zhashx_delete(self->vanished, oldest);
        zlistx_delete(self->vanished_order, zlistx_cursor(self->vanished_order));
    }
}

static void s_forget_vanished(kb_engine_t *self, const char *id)
{
    if (!zhashx_lookup(self->vanished, id))
        return;
    zhashx_delete(self->vanished, id);
    void *handle = zlistx_find(self->vanished_order, (void *)id);
    if (handle)
        zlistx_delete(self->vanished_order, handle);
}

static kb_context_t *s_lookup(kb_engine_t *self, const char *id, kb_request_t *request)
{
    kb_context_t *ctx = id ? zhashx_lookup(self->contexts, id) : NULL;
    if (ctx && !ctx->isolated)
        return ctx;
    const char *message = id ? zhashx_lookup(self->vanished, id) : NULL;
    if (message)
        kb_request_fail(request, KB_ERR_SESSION_NOT_FOUND, "%s", message);
    else
        kb_request_fail(request, KB_ERR_SESSION_NOT_FOUND, "no context %s", id ? id : "(none)");
    return NULL;
}

/* ---- kernels ---------------------------------------------------------------- */

static void s_on_dying_exited(kb_kernel_t *kernel, void *arg)
{
    kb_engine_t *self = arg;
    void *handle = zlistx_find(self->dying, kernel);
    if (handle)
        zlistx_delete(self->dying, handle);
    kb_kernel_destroy(&kernel);
}

static void s_on_dying_start_failed(kb_kernel_t *kernel, const char *why, void *arg)
{
    /* killed while starting; its exit is reported through `exited` next */
}

static const kb_kernel_callbacks_t s_dying_callbacks = {
    .start_failed = s_on_dying_start_failed,
    .exited = s_on_dying_exited,
};

/*  Hand a kernel over to the reaper: it is shut down (or killed) and
    destroyed once its process has gone. */
void kb_engine_retire_kernel(kb_engine_t *self, kb_kernel_t *kernel, bool kill_now)
{
    if (kb_kernel_state(kernel) == KB_KERNEL_DEAD) {
        kb_kernel_destroy(&kernel);
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
static const kb_kernelspecs_t *s_specs(kb_engine_t *self)
{
    int64_t now = zclock_mono();
    if (!self->specs || now - self->specs_at_ms > 2000) {
        kb_kernelspecs_destroy(&self->specs);
        self->specs = kb_kernelspecs_discover(NULL, NULL);
        self->specs_at_ms = now;
    }
    return self->specs;
}

kb_kernelspec_t *kb_engine_find_spec(kb_engine_t *self, const char *language,
                                     const char *kernel_name, kb_error_t *err)
{
    const kb_kernelspecs_t *specs = s_specs(self);
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

kb_kernel_t *kb_engine_launch(kb_engine_t *self, const kb_kernelspec_t *spec, const char *cwd,
                              const json_t *env, const kb_kernel_callbacks_t *callbacks, void *arg,
                              kb_error_t *err)
{
    const char *drop[] = { "KB_", NULL };
    char **envp = kb_kernelspec_build_env(spec, environ, drop, env);
    /* Deno's kernel, for one, cannot use ipc endpoints */
    kb_kernelspec_quirks_t quirks = kb_kernelspec_quirks(spec);
    kb_kernel_opts_t opts = {
        .runtime_dir = self->state_dir,
        .ipc_dir = self->ipc_dir,
        .serial = ++self->kernel_serial,
        .transport = quirks.transport ? quirks.transport : self->config.transport,
        .cwd = cwd,
        .envp = envp,
        .system_python = self->system_python,
        .start_timeout = self->config.start_timeout,
    };
    char problem[512];
    kb_kernel_t *kernel
        = kb_kernel_new(self->loop, spec, &opts, callbacks, arg, problem, sizeof problem);
    kb_strv_free(envp);
    if (!kernel)
        kb_error_set(err, KB_ERR_KERNEL_START_FAILED, "%s", problem);
    return kernel;
}

static int s_start_kernel(kb_context_t *ctx, const kb_kernelspec_t *spec, kb_error_t *err)
{
    ctx->ready = false;
    ctx->kernel
        = kb_engine_launch(ctx->engine, spec, ctx->cwd, ctx->env, &s_context_callbacks, ctx, err);
    return ctx->kernel ? 0 : -1;
}

/*  Take a warm kernel for a new context. Its cwd/env, when the context has
    them, are applied through the language's adapter before it counts as
    ready; a language with no adapter starts cold instead. */
static bool s_take_pooled(kb_context_t *ctx, const kb_kernelspec_t *spec)
{
    bool has_env = ctx->env && json_object_size(ctx->env) > 0;
    bool setup = ctx->cwd || has_env;
    if (setup && !kb_adapter_supported(ctx->language))
        return false;
    kb_kernel_t *kernel = kb_pool_take(ctx->engine, spec->name);
    if (!kernel)
        return false;
    kb_kernel_set_callbacks(kernel, &s_context_callbacks, ctx);
    ctx->kernel = kernel;
    if (!setup) {
        ctx->ready = true;
        return true;
    }
    char *code = kb_adapter_apply_code(ctx->language, ctx->cwd, ctx->env);
    int rc = kb_kernel_execute(kernel, code, true, ctx->setup_msg_id, sizeof ctx->setup_msg_id);
    free(code);
    kb_execution_opts_t opts = { 0 };
    ctx->setup = rc == 0 ? kb_execution_new(ctx->setup_msg_id, &opts, NULL, NULL) : NULL;
    ctx->ready = false;
    return true; /* a failed send means a dead kernel: its exit is reported */
}

size_t kb_engine_kernel_count(kb_engine_t *self)
{
    return zhashx_size(self->contexts) + kb_pool_size(self);
}

static void s_context_free(kb_context_t **ctx_p)
{
    kb_context_t *ctx = *ctx_p;
    if (!ctx)
        return;
    *ctx_p = NULL;
    assert(!ctx->kernel);
    zlistx_destroy(&ctx->queue);
    zlistx_destroy(&ctx->pending);
    kb_execution_destroy(&ctx->setup);
    json_decref(ctx->env);
    free(ctx->id);
    free(ctx->language);
    free(ctx->kernel_name);
    free(ctx->cwd);
    free(ctx);
}

/*  A new context with its kernel starting. NULL with err set. */
static kb_context_t *s_context_new(kb_engine_t *self, const char *id, const char *language,
                                   const char *kernel_name, const char *cwd, json_t *env,
                                   bool is_default, bool isolated, kb_error_t *err)
{
    kb_kernelspec_t *spec = kb_engine_find_spec(self, language, kernel_name, err);
    if (!spec)
        return NULL;
    /*  At the limit, a pooled kernel makes room: taken if it fits, else
        given up for this one. */
    if (kb_engine_kernel_count(self) >= self->config.max_contexts && !kb_pool_has(self, spec->name)
        && !kb_pool_evict(self)) {
        kb_error_set(err, KB_ERR_TOO_MANY_CONTEXTS, "%zu kernels are running, the limit",
                     kb_engine_kernel_count(self));
        kb_kernelspec_destroy(&spec);
        return NULL;
    }
    kb_context_t *ctx = calloc(1, sizeof *ctx);
    ctx->engine = self;
    ctx->id = strdup(id);
    ctx->language = s_lower(language ? language : spec->language);
    ctx->kernel_name = strdup(spec->name);
    ctx->cwd = cwd ? strdup(cwd) : NULL;
    ctx->env = env ? json_deep_copy(env) : NULL;
    ctx->is_default = is_default;
    ctx->isolated = isolated;
    ctx->created_at = ctx->last_activity_at = kb_now();
    ctx->queue = zlistx_new();
    ctx->pending = zlistx_new();
    if (!s_take_pooled(ctx, spec) && s_start_kernel(ctx, spec, err) != 0) {
        kb_kernelspec_destroy(&spec);
        s_context_free(&ctx);
        return NULL;
    }
    kb_kernelspec_destroy(&spec);
    zhashx_insert(self->contexts, ctx->id, ctx);
    s_forget_vanished(self, ctx->id);
    return ctx;
}

/*  Take the context out of the table for good; its kernel goes to the
    reaper, its queued runs end with the given reason. */
void kb_engine_remove_context(kb_engine_t *self, kb_context_t *ctx, const char *why)
{
    zhashx_delete(self->contexts, ctx->id);
    kb_request_t *request;
    while ((request = zlistx_detach(ctx->pending, NULL)))
        kb_request_fail(request, KB_ERR_KERNEL_START_FAILED, "%s", why);
    kb_proc_t *proc;
    while ((proc = zlistx_detach(ctx->queue, NULL)))
        kb_proc_end(proc, KB_REASON_FAILED, -1, NULL, "KernelDied",
                    "the context went away before the run started", why);
    if (ctx->kernel)
        kb_engine_retire_kernel(self, ctx->kernel, true);
    ctx->kernel = NULL;
    s_context_free(&ctx);
    kb_pool_poke(self);
}

void kb_context_vanish(kb_context_t *ctx, const char *why)
{
    kb_engine_t *self = ctx->engine;
    if (!ctx->isolated)
        s_remember_vanished(self, ctx->id, why);
    kb_engine_remove_context(self, ctx, why);
}

/* ---- kernel callbacks --------------------------------------------------------- */

static void s_on_ready(kb_kernel_t *kernel, void *arg)
{
    kb_context_t *ctx = arg;
    ctx->ready = true;
    kb_request_t *request;
    while ((request = zlistx_detach(ctx->pending, NULL))) {
        request->result = s_context_json(ctx);
        request->rc = 0;
        kb_request_answer(request);
    }
    for (kb_proc_t *proc = zlistx_first(ctx->queue); proc; proc = zlistx_next(ctx->queue))
        kb_proc_answer_start(proc);
    kb_context_pump(ctx);
}

static void s_on_start_failed(kb_kernel_t *kernel, const char *why, void *arg)
{
    kb_context_t *ctx = arg;
    zsys_warning("context %s: kernel %s failed to start: %s", ctx->id, kb_kernel_spec(kernel)->name,
                 why);
    kb_request_t *request;
    while ((request = zlistx_detach(ctx->pending, NULL)))
        kb_request_fail(request, KB_ERR_KERNEL_START_FAILED, "kernel %s failed to start: %s",
                        kb_kernel_spec(kernel)->name, why);
    kb_proc_t *proc;
    while ((proc = zlistx_detach(ctx->queue, NULL)))
        kb_proc_start_failed(proc, why);
    /*  Not "vanished": it never lived. The kernel is reaped later. */
    kb_engine_retire_kernel(ctx->engine, ctx->kernel, true);
    ctx->kernel = NULL;
    zhashx_delete(ctx->engine->contexts, ctx->id);
    s_context_free(&ctx);
}

/*  The reply to the cwd/env snippet sent to a kernel taken from the pool:
    the context is ready, or it failed as a start would have. */
static void s_on_setup_reply(kb_context_t *ctx, const kb_msg_t *msg)
{
    kb_execution_fold_shell(ctx->setup, msg);
    kb_result_t *applied = kb_execution_finish(ctx->setup, KB_REASON_EXITED, 0, NULL, NULL);
    kb_execution_destroy(&ctx->setup);
    if (applied->error) {
        char why[600];
        snprintf(why, sizeof why, "cannot apply the context's cwd/env: %s: %s",
                 applied->error->name, applied->error->value);
        kb_result_destroy(&applied);
        s_on_start_failed(ctx->kernel, why, ctx);
        return;
    }
    kb_result_destroy(&applied);
    s_on_ready(ctx->kernel, ctx);
}

static void s_on_message(kb_kernel_t *kernel, kb_channel_t channel, const kb_msg_t *msg, void *arg)
{
    kb_context_t *ctx = arg;
    if (ctx->setup) {
        if (channel == KB_CHANNEL_SHELL && strcmp(msg->parent_msg_id, ctx->setup_msg_id) == 0)
            s_on_setup_reply(ctx, msg);
        return;
    }
    if (ctx->running && kb_proc_owns_message(ctx->running, msg))
        kb_proc_on_message(ctx->running, channel, msg);
}

static void s_on_exited(kb_kernel_t *kernel, void *arg)
{
    kb_context_t *ctx = arg;
    char why[200];
    snprintf(why, sizeof why, "%s", kb_kernel_exit_text(kernel));
    ctx->kernel = NULL;
    kb_proc_t *running = ctx->running;
    ctx->running = NULL;
    if (running)
        kb_proc_on_kernel_exit(running, kernel);
    kb_kernel_destroy(&kernel);
    kb_context_vanish(ctx, why);
}

/* ---- the run queue ------------------------------------------------------------ */

void kb_context_pump(kb_context_t *ctx)
{
    if (!ctx->ready || ctx->running || !ctx->kernel)
        return;
    kb_proc_t *proc = zlistx_detach(ctx->queue, NULL);
    if (!proc)
        return;
    ctx->running = proc;
    ctx->last_activity_at = kb_now();
    kb_proc_start(proc);
}

/*  The context a run goes to, created when it is a default or isolated
    one; NULL after failing the request. */
/*  The default context of a language (or kernelspec), started if it is not
    there; NULL with err set. */
static kb_context_t *s_default_context(kb_engine_t *self, const char *language,
                                       const char *kernel_name, kb_error_t *err)
{
    char *lower = s_lower(kernel_name ? kernel_name : language);
    char *id = zsys_sprintf("default-%s", lower);
    kb_context_t *ctx = zhashx_lookup(self->contexts, id);
    if (!ctx)
        ctx = s_context_new(self, id, kernel_name ? NULL : lower, kernel_name, NULL, NULL, true,
                            false, err);
    free(id);
    free(lower);
    return ctx;
}

kb_context_t *kb_engine_context_for_run(kb_engine_t *self, kb_request_t *request)
{
    const kb_run_opts_t *opts = request->run_opts;
    kb_error_t err;
    if (opts->context_id)
        return s_lookup(self, opts->context_id, request);
    const char *language = opts->language ? opts->language : "python";
    if (opts->isolated) {
        char *id = kb_random_id("iso_");
        kb_context_t *ctx
            = s_context_new(self, id, opts->kernel_name ? NULL : language, opts->kernel_name,
                            opts->cwd, opts->env, false, true, &err);
        free(id);
        if (!ctx)
            kb_request_fail(request, err.code, "%s", err.message);
        return ctx;
    }
    kb_context_t *ctx
        = s_default_context(self, opts->kernel_name ? NULL : language, opts->kernel_name, &err);
    if (!ctx)
        kb_request_fail(request, err.code, "%s", err.message);
    return ctx;
}

/* ---- request handlers ------------------------------------------------------------ */

static void s_answer_json(kb_request_t *request, json_t *json)
{
    request->result = json;
    request->rc = 0;
    kb_request_answer(request);
}

static void s_handle_create(kb_engine_t *self, kb_request_t *request)
{
    const kb_context_opts_t *opts = request->context_opts;
    if (!opts || (!opts->language && !opts->kernel_name)) {
        kb_request_fail(request, KB_ERR_BAD_REQUEST, "language or kernel_name is required");
        return;
    }
    if (opts->env && !json_is_object(opts->env)) {
        kb_request_fail(request, KB_ERR_BAD_REQUEST, "env must be an object of strings");
        return;
    }
    char *id = opts->context_id ? strdup(opts->context_id) : kb_random_id("ctx_");
    if (!s_valid_context_id(id)) {
        kb_request_fail(request, KB_ERR_BAD_REQUEST,
                        "context_id must be 1-64 characters of [A-Za-z0-9._-]");
        free(id);
        return;
    }
    if (zhashx_lookup(self->contexts, id)) {
        kb_request_fail(request, KB_ERR_CONTEXT_EXISTS, "context %s already exists", id);
        free(id);
        return;
    }
    kb_error_t err;
    kb_context_t *ctx
        = s_context_new(self, id, opts->kernel_name ? NULL : opts->language, opts->kernel_name,
                        opts->cwd, opts->env, strncmp(id, "default-", 8) == 0, false, &err);
    free(id);
    if (!ctx) {
        kb_request_fail(request, err.code, "%s", err.message);
        return;
    }
    if (ctx->ready)
        s_answer_json(request, s_context_json(ctx));
    else
        zlistx_add_end(ctx->pending, request);
}

static void s_handle_list(kb_engine_t *self, kb_request_t *request)
{
    json_t *list = json_array();
    zlistx_t *all = zhashx_values(self->contexts);
    kb_context_t *ctx;
    size_t n = zlistx_size(all), i = 0;
    kb_context_t **items = calloc(n + 1, sizeof *items);
    for (ctx = zlistx_first(all); ctx; ctx = zlistx_next(all))
        if (!ctx->isolated && (!ctx->is_default || request->all))
            items[i++] = ctx;
    for (size_t a = 1; a < i; a++)
        for (size_t b = a; b > 0 && items[b - 1]->created_at > items[b]->created_at; b--) {
            kb_context_t *t = items[b];
            items[b] = items[b - 1];
            items[b - 1] = t;
        }
    for (size_t a = 0; a < i; a++)
        json_array_append_new(list, s_context_json(items[a])); /* oldest first */
    free(items);
    zlistx_destroy(&all);
    s_answer_json(request, json_pack("{s:o}", "contexts", list));
}

static void s_handle_delete(kb_engine_t *self, kb_request_t *request)
{
    kb_context_t *ctx = s_lookup(self, request->id, request);
    if (!ctx)
        return;
    if (ctx->is_default) {
        kb_request_fail(request, KB_ERR_PROTECTED_CONTEXT,
                        "%s is a default context; it can be restarted, not deleted", ctx->id);
        return;
    }
    char why[200];
    snprintf(why, sizeof why, "deleted by a client");
    kb_proc_t *running = ctx->running;
    ctx->running = NULL;
    if (running)
        kb_proc_end(running, KB_REASON_SIGNALED, -1, "SIGKILL", "KernelKilled",
                    "the context was deleted during the run", why);
    s_remember_vanished(self, ctx->id, why);
    if (ctx->kernel && ctx->ready && !running) {
        kb_engine_retire_kernel(self, ctx->kernel, false); /* graceful */
        ctx->kernel = NULL;
    }
    kb_engine_remove_context(self, ctx, why);
    s_answer_json(request, NULL);
}

static void s_handle_restart(kb_engine_t *self, kb_request_t *request)
{
    kb_context_t *ctx = s_lookup(self, request->id, request);
    if (!ctx)
        return;
    kb_kernelspec_t *spec = ctx->kernel ? kb_kernelspec_dup(kb_kernel_spec(ctx->kernel)) : NULL;
    kb_error_t err;
    if (!spec && !(spec = kb_engine_find_spec(self, NULL, ctx->kernel_name, &err))) {
        kb_request_fail(request, err.code, "%s", err.message);
        return;
    }
    kb_proc_t *running = ctx->running;
    ctx->running = NULL;
    if (running)
        kb_proc_end(running, KB_REASON_SIGNALED, -1, "SIGKILL", "KernelKilled",
                    "the context was restarted during the run", "restarted by a client");
    if (ctx->kernel)
        kb_engine_retire_kernel(self, ctx->kernel, true);
    ctx->kernel = NULL;
    ctx->execution_count = 0;
    ctx->last_activity_at = kb_now();
    if (s_start_kernel(ctx, spec, &err) != 0) {
        kb_kernelspec_destroy(&spec);
        kb_request_fail(request, err.code, "%s", err.message);
        kb_context_vanish(ctx, "its restart failed");
        return;
    }
    kb_kernelspec_destroy(&spec);
    zlistx_add_end(ctx->pending, request);
}

static void s_handle_interrupt(kb_engine_t *self, kb_request_t *request)
{
    kb_context_t *ctx = s_lookup(self, request->id, request);
    if (!ctx)
        return;
    if (ctx->kernel && ctx->ready)
        kb_kernel_interrupt(ctx->kernel);
    s_answer_json(request, NULL);
}

static void s_handle_health(kb_engine_t *self, kb_request_t *request)
{
    size_t count = 0;
    kb_context_t *ctx;
    for (ctx = zhashx_first(self->contexts); ctx; ctx = zhashx_next(self->contexts))
        if (!ctx->isolated)
            count++;
    s_answer_json(request,
                  json_pack("{s:s, s:s, s:s, s:I, s:f, s:o}", "status", "ok", "version", KB_VERSION,
                            "sandbox_id", self->sandbox_id, "contexts", (json_int_t)count,
                            "uptime_s", kb_now() - self->started_at, "pool", kb_pool_json(self)));
}

void kb_engine_handle(kb_engine_t *self, kb_request_t *request)
{
    switch (request->type) {
        case KB_REQ_HEALTH:
            s_handle_health(self, request);
            break;
        case KB_REQ_KERNELSPECS:
            self->specs_at_ms = 0; /* always as installed now */
            s_answer_json(request, kb_kernelspecs_to_json(s_specs(self)));
            break;
        case KB_REQ_CTX_CREATE:
            s_handle_create(self, request);
            break;
        case KB_REQ_CTX_DEFAULT: {
            const kb_context_opts_t *opts = request->context_opts;
            kb_error_t err;
            kb_context_t *ctx
                = opts && (opts->language || opts->kernel_name) ? s_default_context(
                      self, opts->kernel_name ? NULL : opts->language, opts->kernel_name, &err)
                                                                : NULL;
            if (!opts || (!opts->language && !opts->kernel_name))
                kb_request_fail(request, KB_ERR_BAD_REQUEST, "language or kernel_name is required");
            else if (!ctx)
                kb_request_fail(request, err.code, "%s", err.message);
            else if (ctx->ready)
                s_answer_json(request, s_context_json(ctx));
            else
                zlistx_add_end(ctx->pending, request);
            break;
        }
        case KB_REQ_CTX_GET: {
            kb_context_t *ctx = s_lookup(self, request->id, request);
            if (ctx)
                s_answer_json(request, s_context_json(ctx));
            break;
        }
        case KB_REQ_CTX_LIST:
            s_handle_list(self, request);
            break;
        case KB_REQ_CTX_DELETE:
            s_handle_delete(self, request);
            break;
        case KB_REQ_CTX_RESTART:
            s_handle_restart(self, request);
            break;
        case KB_REQ_CTX_INTERRUPT:
            s_handle_interrupt(self, request);
            break;
        default:
            kb_proc_handle(self, request);
            break;
    }
}

/* ---- stopping ------------------------------------------------------------------- */

/*  Runs end as sandbox_stopped; kernels are asked to shut down. */
void kb_engine_stop_begin(kb_engine_t *self)
{
    self->stopping = true;
    kb_pool_stop(self);
    zlistx_t *all = zhashx_values(self->contexts);
    kb_context_t *ctx;
    for (ctx = zlistx_first(all); ctx; ctx = zlistx_next(all)) {
        kb_proc_t *running = ctx->running;
        ctx->running = NULL;
        if (running)
            kb_proc_end(running, KB_REASON_SANDBOX_STOPPED, -1, NULL, "SandboxStopped",
                        "the service stopped during the run", "the service stopped");
        kb_proc_t *proc;
        while ((proc = zlistx_detach(ctx->queue, NULL)))
            kb_proc_end(proc, KB_REASON_SANDBOX_STOPPED, -1, NULL, "SandboxStopped",
                        "the service stopped before the run started", "the service stopped");
        kb_request_t *request;
        while ((request = zlistx_detach(ctx->pending, NULL)))
            kb_request_fail(request, KB_ERR_UNAVAILABLE, "the service is stopping");
        if (ctx->kernel) {
            kb_engine_retire_kernel(self, ctx->kernel, !ctx->ready);
            ctx->kernel = NULL;
        }
        zhashx_delete(self->contexts, ctx->id);
        s_context_free(&ctx);
    }
    zlistx_destroy(&all);
}

/*  On the way out of the loop: kill and reap whatever is left. */
void kb_engine_destroy_all(kb_engine_t *self)
{
    if (!self->stopping)
        kb_engine_stop_begin(self);
    kb_kernel_t *kernel;
    while ((kernel = zlistx_detach(self->dying, NULL)))
        kb_kernel_destroy(&kernel);
    kb_proc_destroy_all(self);
    kb_kernelspecs_destroy(&self->specs);
}
