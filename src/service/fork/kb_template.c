/*  kb_template.c - the templates new kernels are forked from: made (a
    launched kernel asked to import and freeze), watched, made again, and
    asked for kernels. Engine thread only.
*/
#include "service/fork/kb_template.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernel/kb_proctree.h"
#include "util/kb_alloc.h"
#include "util/kb_buf.h"
#include "util/kb_vec.h"

#define KB_TEMPLATE_WATCH_MS 500        /* how often a template's process is looked at */
#define KB_TEMPLATE_RETRY_MS 5000       /* from a failed template to the next attempt */
#define KB_TEMPLATE_ASK_TIMEOUT_MS 2000 /* for the frozen process to answer a pid */
#define KB_TEMPLATE_PREFIX "tp_"
#define KB_TEMPLATE_CHILD_TIMEOUT 30.0 /* seconds the frozen process gives a fork to start */

extern char **environ;

typedef enum {
    KB_TEMPLATE_WAITING,  /* none yet: made at the next watch tick */
    KB_TEMPLATE_STARTING, /* its kernel starts */
    KB_TEMPLATE_FREEZING, /* its kernel imports the modules and freezes */
    KB_TEMPLATE_READY,    /* frozen: kernels are forked from it */
} kb_template_state_t;

static const char *const s_state_names[] = { "waiting", "starting", "freezing", "ready" };

typedef struct {
    kb_templates_t *owner;
    char *language;
    char *key;       /* "template:LANG=MODS": its checkpoint's context id */
    json_t *modules; /* [names] */
    kb_kernelspec_t *spec;
    kb_template_state_t state;
    kb_kernel_t *kernel; /* the kernel being made into the template */
    char msg_id[96];
    char *cp_id, *path; /* the frozen process's checkpoint id and socket, while it has one */
    pid_t pid;
    unsigned long long pid_start;
    unsigned long forks, failures;
    int64_t retry_at_ms;
    char why[600]; /* why the last attempt failed */
} kb_template_t;

/*  A kernel forked from a template, until its start can no longer fail
    (the start timeout after it was forked). */
typedef struct {
    pid_t pid;
    unsigned long long pid_start;
    kb_template_t *item;
    pid_t template_pid; /* the template it came from */
    int64_t until_ms;
} kb_template_fork_t;

struct kb_templates {
    kb_template_env_t env;
    kb_template_t **items;
    size_t count;
    kb_vec_t starting; /* kb_template_fork_t: forks not yet past their start */
    kb_timer_t timer;
    bool stopping;
};

static void s_item_free(kb_template_t *item)
{
    free(item->language);
    free(item->key);
    json_decref(item->modules);
    kb_kernelspec_destroy(&item->spec);
    free(item->cp_id);
    free(item->path);
    free(item);
}

void kb_templates_destroy(kb_templates_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_templates_t *self = *self_p;
    *self_p = NULL;
    kb_templates_stop(self);
    for (size_t i = 0; i < self->count; i++)
        s_item_free(self->items[i]);
    free(self->items);
    kb_vec_free(&self->starting);
    free(self);
}

/* ---- the check at start ----------------------------------------------------------- */

/*  Run the kernelspec's Python on "import each module" in the kernels'
    environment; 0, or -1 with err carrying the failing module's error
    (the last line Python wrote). */
static int s_check_imports(const kb_template_env_t *env, kb_template_t *item, kb_error_t *err)
{
    if (json_array_size(item->modules) == 0)
        return 0;
    char **argv = kb_kernelspec_build_argv(item->spec, NULL, env->system_python);
    const char *drop[] = { "KB_", NULL };
    char **envp = kb_kernelspec_build_env(item->spec, environ, drop, NULL);
    size_t n = json_array_size(item->modules);
    const char **args = kb_xcalloc(n + 4, sizeof *args);
    args[0] = argv ? argv[0] : "python3";
    args[1] = "-c";
    args[2] = "import importlib, sys\nfor name in sys.argv[1:]: importlib.import_module(name)";
    for (size_t i = 0; i < n; i++)
        args[3 + i] = json_string_value(json_array_get(item->modules, i));
    int out[2] = { -1, -1 };
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    pid_t pid = -1;
    int rc = -1;
    if (argv && envp && pipe(out) == 0) {
        posix_spawn_file_actions_adddup2(&actions, out[1], 2);
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", 0, 0);
        posix_spawn_file_actions_addclose(&actions, out[0]);
        rc = posix_spawnp(&pid, args[0], &actions, NULL, (char *const *)args, envp);
        close(out[1]);
    }
    kb_buf_t text = KB_BUF_INIT;
    char chunk[4096];
    ssize_t got;
    while (rc == 0 && (got = read(out[0], chunk, sizeof chunk)) != 0)
        if (got > 0 && text.len < 65536)
            kb_buf_append(&text, chunk, (size_t)got);
    int status = 0;
    if (rc == 0)
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    if (out[0] >= 0)
        close(out[0]);
    posix_spawn_file_actions_destroy(&actions);
    free(args);
    kb_strv_free(argv);
    kb_strv_free(envp);
    char *last = text.data ? text.data : "";
    while (text.len && (last[text.len - 1] == '\n' || last[text.len - 1] == ' '))
        last[--text.len] = 0;
    char *line = strrchr(last, '\n');
    if (rc != 0)
        kb_error_set(err, KB_ERR_BAD_REQUEST, "--fork-template %s: cannot run %s: %s",
                     item->language, item->spec->argv[0], strerror(rc > 0 ? rc : errno));
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        kb_error_set(err, KB_ERR_BAD_REQUEST, "--fork-template %s: a module cannot be imported: %s",
                     item->language,
                     line    ? line + 1
                     : *last ? last
                             : "(no message)");
    kb_buf_free(&text);
    return rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/*  One entry, "LANG" or "LANG=MOD,MOD": its item, or NULL with err. */
static kb_template_t *s_parse(const kb_template_env_t *env, const char *entry, kb_error_t *err)
{
    kb_template_t *item = kb_xcalloc(1, sizeof *item);
    const char *eq = strchr(entry, '=');
    item->language = eq ? kb_buf_sprintf("%.*s", (int)(eq - entry), entry) : kb_xstrdup(entry);
    item->key = kb_buf_sprintf("template:%s", entry);
    item->modules = json_array();
    for (const char *p = eq ? eq + 1 : NULL; p && *p;) {
        size_t len = strcspn(p, ",");
        char *name = kb_buf_sprintf("%.*s", (int)len, p);
        bool ok = len > 0
                  && strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                  "0123456789_.")
                         == len;
        if (ok)
            json_array_append_new(item->modules, json_string(name));
        free(name);
        if (!ok) {
            kb_error_set(err, KB_ERR_BAD_REQUEST,
                         "--fork-template %s: a module is a dotted Python name", entry);
            s_item_free(item);
            return NULL;
        }
        p += len + (p[len] == ',');
    }
    const char *why = NULL;
    if (!*item->language)
        kb_error_set(err, KB_ERR_BAD_REQUEST, "--fork-template %s: LANG[=MODULE,...]", entry);
    else if (!(item->spec = env->plain->find_spec(env->plain->impl, item->language, NULL, err)))
        ;
    else if (!kb_kernelspec_forkable(item->spec, &why) || env->other_users)
        kb_error_set(err, KB_ERR_UNSUPPORTED_OPTION,
                     "--fork-template %s: kernel %s cannot fork: %s", entry, item->spec->name,
                     why ? why : "kernels run as other users (--kernel-user, --kernel-uid-range)");
    else if (s_check_imports(env, item, err) == 0)
        return item;
    s_item_free(item);
    return NULL;
}

int kb_templates_new(const kb_template_env_t *env, const char *const *entries, kb_templates_t **out,
                     kb_error_t *err)
{
    *out = NULL;
    size_t n = 0;
    while (entries && entries[n])
        n++;
    if (n == 0)
        return 0;
    kb_templates_t *self = kb_xcalloc(1, sizeof *self);
    self->env = *env;
    self->items = kb_xcalloc(n, sizeof *self->items);
    kb_vec_init(&self->starting, sizeof(kb_template_fork_t), 0);
    kb_timer_init(&self->timer);
    for (size_t i = 0; i < n; i++) {
        kb_template_t *item = s_parse(env, entries[i], err);
        if (!item) {
            kb_templates_destroy(&self);
            return -1;
        }
        for (size_t j = 0; j < self->count; j++)
            if (strcmp(self->items[j]->spec->name, item->spec->name) == 0) {
                kb_error_set(err, KB_ERR_BAD_REQUEST, "--fork-template: %s is given twice",
                             item->language);
                s_item_free(item);
                kb_templates_destroy(&self);
                return -1;
            }
        item->owner = self;
        self->items[self->count++] = item;
    }
    *out = self;
    return 0;
}

/* ---- making a template ------------------------------------------------------------ */

static void s_failed(kb_template_t *item, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*  The frozen process is no more (or never was): forget it (its
    checkpoint ended); the kernel being made, if any, is retired. */
static void s_drop(kb_template_t *item)
{
    const kb_template_env_t *env = &item->owner->env;
    if (item->cp_id)
        kb_checkpoints_drop_context(env->checkpoints, item->key);
    free(item->cp_id);
    free(item->path);
    item->cp_id = item->path = NULL;
    item->pid = 0;
    item->pid_start = 0;
    if (item->kernel)
        env->plain->retire(env->plain->impl, item->kernel, true);
    item->kernel = NULL;
    item->state = KB_TEMPLATE_WAITING;
}

static void s_failed(kb_template_t *item, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(item->why, sizeof item->why, fmt, ap);
    va_end(ap);
    item->failures++;
    zsys_warning("template %s: %s; kernels of %s start the ordinary way meanwhile", item->language,
                 item->why, item->language);
    s_drop(item);
    item->retry_at_ms = zclock_mono() + KB_TEMPLATE_RETRY_MS;
}

/*  The silent request that makes the kernel the template:
    kernelbridge_fork.template({path, modules}) (the package's dir is on
    the kernel's PYTHONPATH since its launch), its answer (the frozen pid)
    in a user expression. 0 / -1. */
static int s_send(kb_kernel_t *kernel, const json_t *arg, char *msg_id)
{
    char *arg_text = json_dumps(arg, JSON_COMPACT);
    char *code = arg_text
                     ? kb_buf_sprintf("__import__('kernelbridge_fork').template(%s)\n", arg_text)
                     : NULL;
    free(arg_text);
    json_t *content
        = code ? json_pack("{s:s, s:b, s:b, s:b, s:b, s:{s:s}}", "code", code, "silent", 1,
                           "store_history", 0, "allow_stdin", 0, "stop_on_error", 0,
                           "user_expressions", "template", "__import__('kernelbridge_fork').last")
               : NULL;
    free(code);
    return content
               ? kb_kernel_send(kernel, KB_CHANNEL_SHELL, "execute_request", content, msg_id, 96)
               : -1;
}

/*  The frozen process's pid from the reply, or 0 with err (the kernel's
    error: a module that no longer imports, say). */
static pid_t s_reply_pid(const kb_msg_t *msg, kb_error_t *err)
{
    const json_t *content = msg->content;
    const char *status = json_string_value(json_object_get(content, "status"));
    json_t *result = json_object_get(json_object_get(content, "user_expressions"), "template");
    json_t *pid = json_object_get(
        json_object_get(json_object_get(result, "data"), "application/json"), "pid");
    if (status && strcmp(status, "ok") == 0 && json_is_integer(pid) && json_integer_value(pid) > 0)
        return (pid_t)json_integer_value(pid);
    const char *name = json_string_value(json_object_get(content, "ename"));
    const char *value = json_string_value(json_object_get(content, "evalue"));
    kb_error_set(err, KB_ERR_KERNEL_START_FAILED, "the kernel did not freeze: %s: %s",
                 name ? name : "no answer", value ? value : "");
    return 0;
}

static void s_on_ready(kb_kernel_t *kernel, void *arg)
{
    kb_template_t *item = arg;
    const kb_template_env_t *env = &item->owner->env;
    kb_error_t err;
    if (kb_checkpoints_name(env->state_dir, KB_TEMPLATE_PREFIX, &item->cp_id, &item->path, &err)
        != 0) {
        s_failed(item, "%s", err.message);
        return;
    }
    json_t *arg_json = json_pack("{s:s, s:O}", "path", item->path, "modules", item->modules);
    int rc = arg_json ? s_send(kernel, arg_json, item->msg_id) : -1;
    json_decref(arg_json);
    if (rc != 0)
        s_failed(item, "cannot send the template request to its kernel");
    else
        item->state = KB_TEMPLATE_FREEZING;
}

static void s_on_start_failed(kb_kernel_t *kernel, const char *why, void *arg)
{
    (void)kernel;
    s_failed(arg, "its kernel did not start: %s", why);
}

static void s_on_message(kb_kernel_t *kernel, kb_channel_t channel, const kb_msg_t *msg, void *arg)
{
    (void)kernel;
    kb_template_t *item = arg;
    const kb_template_env_t *env = &item->owner->env;
    if (channel != KB_CHANNEL_SHELL || item->state != KB_TEMPLATE_FREEZING
        || strcmp(msg->parent_msg_id, item->msg_id) != 0)
        return;
    kb_error_t err;
    pid_t pid = s_reply_pid(msg, &err);
    if (pid <= 0
        || kb_checkpoints_add(env->checkpoints, item->cp_id, item->key, item->path, pid, 0, &err)
               != 0) {
        free(item->cp_id); /* not the store's: nothing to drop there */
        item->cp_id = NULL;
        s_failed(item, "%s", err.message);
        return;
    }
    item->pid = pid;
    item->pid_start = kb_proc_start_time(pid);
    item->state = KB_TEMPLATE_READY;
    item->why[0] = 0;
    env->plain->retire(env->plain->impl, item->kernel, false); /* the frozen copy is the one */
    item->kernel = NULL;
    zsys_info("template %s ready: pid %d, modules %d", item->language, (int)pid,
              (int)json_array_size(item->modules));
}

static void s_on_exited(kb_kernel_t *kernel, void *arg)
{
    (void)kernel;
    s_failed(arg, "its kernel exited before it was frozen");
}

static const kb_kernel_callbacks_t s_callbacks = {
    .ready = s_on_ready,
    .start_failed = s_on_start_failed,
    .message = s_on_message,
    .exited = s_on_exited,
};

static void s_make(kb_template_t *item)
{
    const kb_template_env_t *env = &item->owner->env;
    kb_error_t err;
    item->state = KB_TEMPLATE_STARTING;
    item->kernel
        = env->plain->launch(env->plain->impl, item->spec, NULL, NULL, 0, &s_callbacks, item, &err);
    if (!item->kernel)
        s_failed(item, "%s", err.message);
}

/*  Every tick: a frozen process that is gone is dropped; a template that
    is missing is made (after the retry delay once one failed). */
static void s_on_watch(kb_timer_t *timer, void *arg)
{
    (void)timer;
    kb_templates_t *self = arg;
    for (size_t i = 0; i < self->count && !self->stopping; i++) {
        kb_template_t *item = self->items[i];
        if (item->state == KB_TEMPLATE_READY && kb_proc_start_time(item->pid) != item->pid_start)
            s_failed(item, "its process %d is gone", (int)item->pid);
        if (item->state == KB_TEMPLATE_WAITING && zclock_mono() >= item->retry_at_ms
            && self->env.plain->has_room(self->env.plain->impl))
            s_make(item);
    }
}

void kb_templates_start(kb_templates_t *self)
{
    if (!self)
        return;
    for (size_t i = 0; i < self->count; i++)
        if (self->items[i]->state == KB_TEMPLATE_WAITING)
            s_make(self->items[i]);
    kb_timer_start(self->env.loop, &self->timer, KB_TEMPLATE_WATCH_MS, KB_TEMPLATE_WATCH_MS,
                   s_on_watch, self);
}

void kb_templates_stop(kb_templates_t *self)
{
    if (!self)
        return;
    self->stopping = true;
    kb_timer_stop(&self->timer);
    for (size_t i = 0; i < self->count; i++) {
        kb_template_t *item = self->items[i];
        if (item->kernel)
            self->env.plain->retire(self->env.plain->impl, item->kernel, true);
        item->kernel = NULL;
        if (item->state != KB_TEMPLATE_READY)
            item->state = KB_TEMPLATE_WAITING;
    }
}

bool kb_templates_adopt(kb_templates_t *self, const json_t *row)
{
    const char *of = json_string_value(json_object_get(row, "context_id"));
    if (!of || strncmp(of, "template:", 9) != 0)
        return false;
    const kb_template_env_t *env = self ? &self->env : NULL;
    kb_template_t *item = NULL;
    for (size_t i = 0; self && i < self->count && !item; i++)
        if (strcmp(self->items[i]->key, of) == 0 && self->items[i]->state == KB_TEMPLATE_WAITING)
            item = self->items[i];
    if (!env)
        return false; /* no templates now: an ordinary checkpoint of no context, ended */
    const char *id = json_string_value(json_object_get(row, "id"));
    kb_checkpoints_adopt(env->checkpoints, row, item != NULL);
    if (item && id && kb_checkpoints_alive(env->checkpoints, of, id)) {
        item->cp_id = kb_xstrdup(id);
        item->path = kb_xstrdup(json_string_value(json_object_get(row, "path")));
        item->pid = (pid_t)json_integer_value(json_object_get(row, "pid"));
        item->pid_start = kb_proc_start_time(item->pid);
        item->state = KB_TEMPLATE_READY;
        zsys_info("template %s taken back: pid %d", item->language, (int)item->pid);
    }
    return true;
}

/* ---- asking for a kernel ---------------------------------------------------------- */

/*  One line out, one line back on the template's socket, blocking (the
    frozen process answers as soon as the new process exists). The pid, or
    0 with err. */
static pid_t s_ask(const kb_template_t *item, const char *line, kb_error_t *err)
{
    char why[600];
    size_t size = sizeof why;
    struct sockaddr_un address = { .sun_family = AF_UNIX };
    snprintf(address.sun_path, sizeof address.sun_path, "%s", item->path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval limit = { .tv_sec = KB_TEMPLATE_ASK_TIMEOUT_MS / 1000,
                             .tv_usec = (KB_TEMPLATE_ASK_TIMEOUT_MS % 1000) * 1000 };
    char answer[1024];
    size_t len = 0;
    bool sent = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit) == 0
                && setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit) == 0
                && connect(fd, (struct sockaddr *)&address, sizeof address) == 0
                && write(fd, line, strlen(line)) == (ssize_t)strlen(line);
    snprintf(why, size, "%s", sent ? "no answer" : strerror(errno));
    while (sent && len < sizeof answer - 1 && !memchr(answer, '\n', len)) {
        ssize_t got = read(fd, answer + len, sizeof answer - 1 - len);
        if (got <= 0) {
            snprintf(why, size, "%s", got == 0 ? "it closed the socket" : strerror(errno));
            break;
        }
        len += (size_t)got;
    }
    if (fd >= 0)
        close(fd);
    answer[len] = 0;
    json_t *reply = json_loads(answer, JSON_DISABLE_EOF_CHECK, NULL);
    json_t *pid = json_object_get(reply, "pid");
    const char *error = json_string_value(json_object_get(reply, "error"));
    if (error)
        snprintf(why, size, "%s", error);
    pid_t result
        = json_is_integer(pid) && json_integer_value(pid) > 0 ? (pid_t)json_integer_value(pid) : 0;
    json_decref(reply);
    return result;
}

/*  The index-th fork is past its start, or failed: forgotten. */
static void s_forget(kb_templates_t *self, size_t index)
{
    kb_vec_t *v = &self->starting;
    if (index + 1 < v->len)
        memcpy(kb_vec_at(v, index), kb_vec_at(v, v->len - 1), v->size);
    v->len--;
}

/*  A fork is remembered until its start can no longer fail, so that a
    failure is the template's (kb_templates_fork_failed); older ones are
    forgotten now. Out of memory: not remembered (its failure is then
    reported as a start's). */
static void s_remember(kb_templates_t *self, kb_template_t *item, pid_t pid,
                       unsigned long long start)
{
    int64_t now = zclock_mono();
    for (size_t i = self->starting.len; i-- > 0;)
        if (((kb_template_fork_t *)kb_vec_at(&self->starting, i))->until_ms < now)
            s_forget(self, i);
    kb_template_fork_t fork
        = { .pid = pid,
            .pid_start = start,
            .item = item,
            .template_pid = item->pid,
            .until_ms = now + (int64_t)(self->env.start_timeout * 1000) + 5000 };
    if (kb_vec_push(&self->starting, &fork) != KB_BUF_OK)
        zsys_warning("template %s: out of memory: fork %d is not followed", item->language,
                     (int)pid);
}

/*  The request's line: the connection, the new kernel's cwd and env. */
static char *s_request_line(const json_t *info, const char *cwd, const json_t *env)
{
    char here[4096];
    char *dir = cwd && *cwd ? realpath(cwd, NULL) : NULL;
    if (!dir && (!cwd || !*cwd))
        dir = kb_xstrdup(getcwd(here, sizeof here) ? here : "/");
    if (!dir)
        return NULL; /* a cwd that does not resolve: the ordinary start says why */
    json_t *line = json_pack("{s:O, s:f, s:s, s:O?, s:b}", "connection", info, "timeout",
                             KB_TEMPLATE_CHILD_TIMEOUT, "cwd", dir, "env", env, "early", 1);
    free(dir);
    char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
    json_decref(line);
    char *result = text ? kb_buf_sprintf("%s\n", text) : NULL;
    free(text);
    return result;
}

kb_kernel_t *kb_templates_launch(kb_templates_t *self, const kb_kernelspec_t *spec, const char *cwd,
                                 const json_t *env, uint64_t data_limit,
                                 const kb_kernel_callbacks_t *callbacks, void *arg)
{
    kb_template_t *item = NULL;
    for (size_t i = 0; self && !self->stopping && i < self->count && !item; i++)
        if (strcmp(self->items[i]->spec->name, spec->name) == 0
            && self->items[i]->state == KB_TEMPLATE_READY)
            item = self->items[i];
    if (!item)
        return NULL;

    kb_kernel_opts_t opts;
    self->env.kernel_opts(self->env.plain->impl, spec, &opts);
    kb_connection_t conn;
    kb_error_t err, asked;
    kb_error_set(&asked, KB_ERR_INTERNAL, "out of memory");
    json_t *info = kb_kernel_spec_connection(spec, &opts, &conn, &err);
    char *line = info ? s_request_line(info, cwd, env) : NULL;
    pid_t pid = line ? s_ask(item, line, &asked) : 0;
    free(line);
    unsigned long long start = pid > 0 ? kb_proc_start_time(pid) : 0;
    kb_adopt_opts_t adopt = { .connection = info,
                              .connection_file = conn.connection_file,
                              .log_file = conn.log_file,
                              .pid = pid,
                              .pid_start = start,
                              .timeout = self->env.start_timeout };
    kb_kernel_t *kernel
        = start ? kb_kernel_adopt(self->env.loop, spec, &adopt, callbacks, arg, &err) : NULL;
    if (info)
        kb_fork_connection_end(&conn, kernel == NULL);
    json_decref(info);
    if (!kernel) {
        if (start && kb_proc_start_time(pid) == start)
            kill(-pid, SIGKILL), kill(pid, SIGKILL);
        if (pid <= 0 && info && cwd && *cwd && strstr(asked.message, "directory"))
            return NULL; /* the context's own cwd: its ordinary start says so */
        s_failed(item, "a fork from it failed: %s", pid > 0 ? err.message : asked.message);
        return NULL;
    }
    if (data_limit > 0) {
        struct rlimit limit = { .rlim_cur = data_limit, .rlim_max = data_limit };
        prlimit(pid, RLIMIT_DATA, &limit, NULL);
    }
    kb_kernel_set_observer(kernel, self->env.observer);
    item->forks++;
    s_remember(self, item, pid, start);
    return kernel;
}

bool kb_templates_fork_failed(kb_templates_t *self, const kb_kernel_t *kernel, const char *why)
{
    pid_t pid = kb_kernel_pid(kernel);
    unsigned long long start = kb_kernel_pid_start(kernel);
    for (size_t i = 0; self && pid > 0 && i < self->starting.len; i++) {
        kb_template_fork_t *fork = kb_vec_at(&self->starting, i);
        if (fork->pid != pid || fork->pid_start != start)
            continue;
        kb_template_t *item = fork->item;
        pid_t from = fork->template_pid;
        s_forget(self, i);
        if (item->state == KB_TEMPLATE_READY && item->pid == from)
            s_failed(item, "its fork %d did not start: %s", (int)pid, why);
        return true;
    }
    return false;
}

json_t *kb_templates_pids(const kb_templates_t *self)
{
    json_t *pids = json_array();
    for (size_t i = 0; pids && self && i < self->count; i++) {
        const kb_template_t *item = self->items[i];
        pid_t pid = item->state == KB_TEMPLATE_READY ? item->pid
                    : item->kernel                   ? kb_kernel_pid(item->kernel)
                                                     : 0;
        if (pid > 0)
            json_array_append_new(pids, json_integer(pid));
    }
    return pids;
}

json_t *kb_templates_json(const kb_templates_t *self)
{
    if (!self)
        return NULL;
    json_t *list = json_array();
    for (size_t i = 0; list && i < self->count; i++) {
        const kb_template_t *item = self->items[i];
        bool ready = item->state == KB_TEMPLATE_READY;
        json_array_append_new(
            list, json_pack("{s:s, s:s, s:s, s:o, s:O, s:I, s:I, s:s?}", "language", item->language,
                            "kernel_name", item->spec->name, "state", s_state_names[item->state],
                            "pid", ready ? json_integer(item->pid) : json_null(), "modules",
                            item->modules, "forks", (json_int_t)item->forks, "failures",
                            (json_int_t)item->failures, "why", item->why[0] ? item->why : NULL));
    }
    return list;
}
