/*  kb_restore.c - the engine and its state dir: the lock, state.db, and
    what a daemon finds there when it starts. Process records come back
    with their logs (those that were running end as sandbox_stopped);
    recorded kernels are adopted as the same contexts, or killed and their
    contexts vanish with why; stale files are swept. Then every change is
    written back through kb_persist. Runs in kb_engine_new, before the
    engine's thread starts, on the engine's loop; the collector on the
    engine thread. What it finds goes back to the engine as data
    (kb_restore_found_t); it calls nothing of the engine's.
*/
#include "service/durable/kb_restore.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernel/kb_launch.h"
#include "state/kb_db.h"
#include "state/kb_statedir.h"
#include "util/kb_alloc.h"
#include "util/kb_clock.h"

struct kb_restore {
    int lock_fd;                 /* holds <state_dir>/lock */
    kb_db_t *db;                 /* state.db while restoring; then the writer's */
    kb_persist_t *persist;       /* the writer, from kb_restore_finish */
    char *kernel_dir;            /* <state_dir>/kernels: connection files, kernel logs */
    zhashx_t *dirty_contexts;    /* id -> kb_context_t * whose row changed since the batch */
    bool contexts_at_once;       /* one of them must be written at the end of the turn */
    const kb_restore_env_t *env; /* during kb_restore_run */
    kb_restore_found_t *found;   /* idem */
};

/* ---- the state dir ------------------------------------------------------------------ */

char *kb_restore_ipc_dir(kb_restore_t *self)
{
    if (!self)
        return NULL;
    char *recorded = kb_db_meta_get(self->db, "ipc_dir");
    struct stat st;
    if (recorded && strncmp(recorded, "/tmp/kb", 7) == 0 && lstat(recorded, &st) == 0
        && S_ISDIR(st.st_mode) && st.st_uid == geteuid()
        && ((st.st_mode & 0777) == 0700 || (st.st_mode & 0777) == 0711))
        return recorded;
    free(recorded);
    return NULL;
}

void kb_restore_set_ipc_dir(kb_restore_t *self, const char *ipc_dir)
{
    if (self && self->db)
        kb_db_meta_set(self->db, "ipc_dir", ipc_dir);
}

const char *kb_restore_kernel_dir(const kb_restore_t *self)
{
    return self ? self->kernel_dir : NULL;
}

kb_persist_t *kb_restore_persist(const kb_restore_t *self)
{
    return self ? self->persist : NULL;
}

kb_restore_t *kb_restore_open(const char *state_dir, kb_error_t *err)
{
    kb_error_t problem;
    kb_restore_t *self = calloc(1, sizeof *self);
    if (!self || !(self->dirty_contexts = zhashx_new())) {
        free(self);
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return NULL;
    }
    self->lock_fd = -1;
    if (kb_statedir_prepare(state_dir, &problem) != 0
        || kb_statedir_lock(state_dir, &self->lock_fd, &problem) != 0) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "%s", problem.message);
        goto fail;
    }
    self->kernel_dir = zsys_sprintf("%s/kernels", state_dir);
    char *path = zsys_sprintf("%s/state.db", state_dir);
    if (!self->kernel_dir || !path) {
        free(path);
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        goto fail;
    }
    if (mkdir(self->kernel_dir, 0700) != 0 && errno != EEXIST) {
        free(path);
        kb_error_set(err, KB_ERR_BAD_REQUEST, "cannot create %s: %s", self->kernel_dir,
                     strerror(errno));
        goto fail;
    }
    self->db = kb_db_open(path, &problem);
    free(path);
    if (!self->db) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "%s", problem.message);
        goto fail;
    }
    return self;
fail:
    kb_restore_close(&self);
    return NULL;
}

/* ---- process records ------------------------------------------------------------- */

typedef struct {
    kb_procstore_t *store;
    zhashx_t *procs;   /* id -> kb_proc_t * restored */
    zlistx_t *views;   /* kb_proc_t *, in order, with their views below */
    zhashx_t *view_of; /* id -> long long[2] */
    kb_proc_t *last;   /* the record of the frame before */
    const char *last_id;
} kb_records_load_t;

static int s_on_record(const kb_db_record_t *row, void *arg)
{
    kb_records_load_t *load = arg;
    kb_proc_t *proc = kb_procstore_restore(load->store, row);
    if (!proc)
        return 0; /* unusable: it stays out, and goes with the next write of its id */
    long long *view = malloc(2 * sizeof *view);
    if (view) {
        view[0] = row->view_stdout;
        view[1] = row->view_stderr;
        zhashx_insert(load->view_of, kb_proc_id(proc), view);
    }
    zhashx_insert(load->procs, kb_proc_id(proc), proc);
    zlistx_add_end(load->views, proc);
    return 0;
}

static int s_on_frame(const kb_db_frame_t *row, void *arg)
{
    kb_records_load_t *load = arg;
    if (!load->last || strcmp(load->last_id, row->record_id) != 0) {
        load->last = zhashx_lookup(load->procs, row->record_id);
        load->last_id = load->last ? kb_proc_id(load->last) : NULL;
    }
    if (!load->last || row->channel < KB_LOG_STDOUT || row->channel > KB_LOG_SYSTEM)
        return 0;
    kb_runlog_t *log = kb_proc_outlog(load->last);
    kb_runlog_restore(log, (kb_log_channel_t)row->channel, row->text, row->len, row->date,
                      row->timestamp);
    if (row->lost) {
        /* its file's end did not survive the machine (kb_frames.h): said, not hidden */
        char why[160];
        int n = snprintf(why, sizeof why,
                         "%zu bytes of this output were lost with the machine (state.db-frames)",
                         row->lost);
        kb_runlog_restore(log, KB_LOG_SYSTEM, why, (size_t)n, "", row->timestamp);
    }
    return 0;
}

/*  A run the last daemon did not finish: it ends now, as sandbox_stopped,
    with the output stored before. */
static void s_end_unfinished(kb_restore_t *self, kb_proc_t *proc, const char *context_id,
                             const char *language)
{
    const char *why = "the daemon stopped during the run (it was killed or crashed); the output "
                      "stored before is kept";
    kb_proc_log(proc, KB_LOG_SYSTEM, why);
    kb_run_error_t error = { .name = "SandboxStopped", .value = (char *)why };
    kb_result_t result = {
        .process_id = (char *)kb_proc_id(proc),
        .reason = KB_REASON_SANDBOX_STOPPED,
        .raw_reason = "the daemon stopped",
        .stdout_text = "",
        .stderr_text = "",
        .error = &error,
        .execution_count = -1,
        .sandbox_id = (char *)self->env->sandbox_id,
        .context_id = (char *)context_id,
        .language = (char *)language,
    };
    json_t *json = kb_result_to_json(&result);
    kb_proc_end(proc, json, KB_REASON_SANDBOX_STOPPED, -1, NULL, "the daemon stopped");
}

static int s_restore_records(kb_restore_t *self, kb_error_t *err)
{
    zhashx_t *procs = zhashx_new();
    zlistx_t *views = zlistx_new();
    zhashx_t *view_of = zhashx_new();
    KB_NOT_NULL(procs);
    KB_NOT_NULL(views);
    KB_NOT_NULL(view_of);
    kb_records_load_t load
        = { .store = self->env->procs, .procs = procs, .views = views, .view_of = view_of };
    zhashx_set_destructor(load.view_of, (zhashx_destructor_fn *)zstr_free);
    int rc = kb_db_record_each(self->db, s_on_record, &load);
    if (rc == 0)
        rc = kb_db_frames_for_each_record(self->db, s_on_frame, &load);
    if (rc != 0)
        kb_error_set(err, KB_ERR_BAD_REQUEST, "cannot read the process records of %s: %s",
                     kb_db_path(self->db), kb_db_error(self->db));
    for (kb_proc_t *proc = zlistx_first(load.views); proc; proc = zlistx_next(load.views)) {
        long long *view = zhashx_lookup(load.view_of, kb_proc_id(proc));
        bool running = kb_proc_running(proc);
        kb_procstore_restored(proc, view ? view[0] : 0, view ? view[1] : 0);
        if (running) {
            json_t *json = kb_procstore_record_json(proc);
            s_end_unfinished(self, proc, json_string_value(json_object_get(json, "context_id")),
                             json_string_value(json_object_get(json, "language")));
            json_decref(json);
        }
    }
    zhashx_destroy(&load.procs);
    zhashx_destroy(&load.view_of);
    zlistx_destroy(&load.views);
    return rc == 0 ? 0 : -1;
}

/* ---- kernels ------------------------------------------------------------------------- */

/*  One recorded kernel, copied out of the walk. */
typedef struct {
    char *id, *kind, *language, *kernel_name, *cwd, *connection, *connection_file, *log_file;
    long long pid, pgid, execution_count, generation;
    unsigned long long pid_start;
    double created_at, last_activity_at;
    long long memory_limit, pids_limit; /* from the row's extra */
    json_t *extra;                      /* the row's extra, or NULL */
} kb_kernel_row_t;

static char *s_dup(const char *text)
{
    return text ? strdup(text) : NULL;
}

static void s_row_free(kb_kernel_row_t **row_p)
{
    kb_kernel_row_t *row = *row_p;
    *row_p = NULL;
    free(row->id);
    free(row->kind);
    free(row->language);
    free(row->kernel_name);
    free(row->cwd);
    free(row->connection);
    free(row->connection_file);
    free(row->log_file);
    json_decref(row->extra);
    free(row);
}

static int s_on_context(const kb_db_context_t *row, void *arg)
{
    kb_kernel_row_t *copy = calloc(1, sizeof *copy);
    if (!copy)
        return -1;
    *copy = (kb_kernel_row_t){ .id = s_dup(row->id),
                               .kind = s_dup(row->kind),
                               .language = s_dup(row->language),
                               .kernel_name = s_dup(row->kernel_name),
                               .cwd = s_dup(row->cwd),
                               .connection = s_dup(row->connection),
                               .connection_file = s_dup(row->connection_file),
                               .log_file = s_dup(row->log_file),
                               .pid = row->pid,
                               .pgid = row->pgid,
                               .execution_count = row->execution_count,
                               .generation = row->generation,
                               .pid_start = row->pid_start,
                               .created_at = row->created_at,
                               .last_activity_at = row->last_activity_at };
    if (!copy->id || !copy->kind || (row->language && !copy->language)
        || (row->kernel_name && !copy->kernel_name) || (row->cwd && !copy->cwd)
        || (row->connection && !copy->connection)
        || (row->connection_file && !copy->connection_file) || (row->log_file && !copy->log_file)) {
        s_row_free(&copy);
        return -1; /* out of memory: the walk fails, and the start with it */
    }
    json_t *extra = row->extra ? json_loads(row->extra, 0, NULL) : NULL;
    copy->memory_limit = json_integer_value(json_object_get(extra, "memory_limit"));
    copy->pids_limit = json_integer_value(json_object_get(extra, "pids_limit"));
    copy->extra = extra;
    zlistx_add_end(arg, copy);
    return 0;
}

/*  The recorded process, if it is still the one we started: kill its
    group. A pid that is another process now is left alone. */
static void s_kill_recorded(const kb_kernel_row_t *row)
{
    if (row->pid <= 0 || !row->pid_start || kb_proc_start_time((pid_t)row->pid) != row->pid_start)
        return;
    kill(-(pid_t)(row->pgid > 0 ? row->pgid : row->pid), SIGKILL);
    kill((pid_t)row->pid, SIGKILL);
}

static void s_remove_files(const kb_kernel_row_t *row)
{
    if (row->connection_file)
        unlink(row->connection_file);
    if (row->log_file)
        unlink(row->log_file);
}

/*  The kernel is not coming back: killed (when still ours), its files
    removed, its row deleted, and a context that lived vanishes with why. */
static void s_give_up(kb_restore_t *self, const kb_kernel_row_t *row, const char *why)
{
    s_kill_recorded(row);
    s_remove_files(row);
    kb_db_context_delete(self->db, row->id);
    bool lived = strcmp(row->kind, "context") == 0 || strcmp(row->kind, "default") == 0
                 || strcmp(row->kind, "attached") == 0;
    if (lived) {
        if (json_array_append_new(self->found->vanished, json_pack("[ss]", row->id, why)) != 0)
            zsys_error("out of memory: context %s vanished: %s", row->id, why);
        zsys_info("context %s: %s", row->id, why);
    }
}

/*  The recorded kernel driven again (adoption begun: it answers later, or
    fails through start_failed), with its kernelspec; or NULL after giving
    it up. */
static kb_kernel_t *s_adopt_kernel(kb_restore_t *self, const kb_kernel_row_t *row,
                                   kb_kernelspec_t **spec_out)
{
    const kb_restore_env_t *env = self->env;
    char why[1400];
    kb_error_t err;
    kb_error_clear(&err);
    kb_kernelspec_t *spec
        = env->launcher->find_spec(env->launcher->impl, row->language, row->kernel_name, &err);
    if (!spec) {
        snprintf(
            why, sizeof why,
            "after the daemon restarted its kernelspec %s was gone (%s); its kernel was killed",
            row->kernel_name ? row->kernel_name : "?", err.message);
        s_give_up(self, row, why);
        return NULL;
    }
    json_t *connection = row->connection ? json_loads(row->connection, 0, NULL) : NULL;
    bool attached = strcmp(row->kind, "attached") == 0;
    kb_adopt_opts_t opts = { .connection = connection,
                             .connection_file = attached ? NULL : row->connection_file,
                             .log_file = attached ? NULL : row->log_file,
                             .pid = attached ? 0 : (pid_t)row->pid,
                             .pid_start = row->pid_start,
                             .timeout = attached ? 2.0 : 1.0,
                             .users = env->users,
                             .work_root = env->work_root,
                             .max_message = env->max_message };
    kb_error_t problem = { KB_OK, "" };
    static const kb_kernel_callbacks_t none = { 0 };
    kb_kernel_t *kernel
        = connection ? kb_kernel_adopt(env->loop, spec, &opts, &none, NULL, &problem) : NULL;
    json_decref(connection);
    if (!kernel) {
        snprintf(why, sizeof why,
                 "its kernel (pid %lld) did not come back after the daemon "
                 "restarted: %s",
                 row->pid, problem.message[0] ? problem.message : "no connection was recorded");
        s_give_up(self, row, why);
        kb_kernelspec_destroy(&spec);
        return NULL;
    }
    kb_kernel_set_observer(kernel, kb_metrics_observer(env->metrics));
    *spec_out = spec;
    return kernel;
}

/*  A warm kernel of the last daemon's pool goes back to the pool, when a
    slot wants it; else it is killed. */
static void s_adopt_pooled(kb_restore_t *self, const kb_kernel_row_t *row)
{
    kb_kernelspec_t *spec = NULL;
    kb_kernel_t *kernel = s_adopt_kernel(self, row, &spec);
    kb_kernelspec_destroy(&spec);
    if (kernel && !kb_pool_adopt(self->env->pool, kernel)) {
        kb_kernel_destroy(&kernel); /* killed, files removed */
        kb_db_context_delete(self->db, row->id);
    }
}

static void s_adopt(kb_restore_t *self, const kb_kernel_row_t *row)
{
    kb_kernelspec_t *spec = NULL;
    kb_kernel_t *kernel = s_adopt_kernel(self, row, &spec);
    if (!kernel)
        return;
    kb_error_t err;
    kb_context_opts_int_t ctx_opts = { .id = row->id,
                                       .language = row->language,
                                       .cwd = row->cwd,
                                       .is_default = strcmp(row->kind, "default") == 0,
                                       .attached = strcmp(row->kind, "attached") == 0,
                                       .memory_limit = row->memory_limit,
                                       .pids_limit = row->pids_limit,
                                       .forked_from = json_object_get(row->extra, "forked_from") };
    kb_context_restored_t restored = { .execution_count = row->execution_count,
                                       .generation = row->generation,
                                       .created_at = row->created_at,
                                       .last_activity_at = row->last_activity_at };
    kb_context_t *ctx
        = kb_context_adopt(self->env->context_env, spec, &ctx_opts, kernel, &restored, &err);
    kb_kernelspec_destroy(&spec);
    if (!ctx) {
        kb_kernel_destroy(&kernel);
        kb_db_context_delete(self->db, row->id);
        return;
    }
    zlistx_add_end(self->found->contexts, ctx);
    if (ctx_opts.is_default)
        json_object_set_new(self->found->generations, row->id, json_integer(row->generation));
}

/*  The default contexts' generations, kept across restarts. */
static void s_restore_generations(kb_restore_t *self)
{
    char *text = kb_db_meta_get(self->db, "default_generations");
    json_t *gens = text ? json_loads(text, 0, NULL) : NULL;
    const char *id;
    json_t *value;
    json_object_foreach(gens, id, value)
    {
        if (json_integer_value(value) > 0)
            json_object_set(self->found->generations, id, value);
    }
    json_decref(gens);
    free(text);
}

/*  Remove what no kernel of ours uses: connection and log files in the
    kernels dir, sockets in the ipc dir. */
static void s_sweep(zhashx_t *contexts, const char *dir, bool sockets)
{
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d)
        return;
    zhashx_t *used = zhashx_new();
    KB_NOT_NULL(used);
    for (kb_context_t *ctx = zhashx_first(contexts); ctx; ctx = zhashx_next(contexts)) {
        kb_db_context_t row;
        char *strings = kb_context_row(ctx, &row);
        const char *files[] = { row.connection_file, row.log_file };
        for (int i = 0; i < 2; i++)
            if (files[i])
                zhashx_update(used, files[i], (void *)1);
        /* ipc sockets are <ip>-<port>: the ip names their prefix */
        json_t *info = row.connection ? json_loads(row.connection, 0, NULL) : NULL;
        const char *ip = json_string_value(json_object_get(info, "ip"));
        if (ip && sockets)
            zhashx_update(used, ip, (void *)1);
        json_decref(info);
        free(strings);
    }
    struct dirent *entry;
    while ((entry = readdir(d))) {
        if (entry->d_name[0] == '.')
            continue;
        if (strncmp(entry->d_name, "cp-", 3) == 0)
            continue; /* a checkpoint's socket: the engine's (kb_checkpoints_adopt) */
        char *path = zsys_sprintf("%s/%s", dir, entry->d_name);
        if (!path)
            break; /* out of memory: the rest stays, to be swept next time */
        bool keep = zhashx_lookup(used, path) != NULL;
        if (sockets && !keep && entry->d_type == DT_DIR) {
            /* the socket dir of a kernel of another uid: <dir>/<hex>/k-<n> */
            char *base = zsys_sprintf("%s/k", path);
            if (!base) {
                free(path);
                break; /* out of memory: the rest stays, to be swept next time */
            }
            if (!zhashx_lookup(used, base))
                kb_work_dir_remove(path);
            free(base);
            free(path);
            continue;
        }
        if (sockets && !keep) {
            char *dash = strrchr(path, '-');
            if (dash) {
                *dash = 0;
                keep = zhashx_lookup(used, path) != NULL;
                *dash = '-';
            }
        }
        if (!keep)
            unlink(path);
        free(path);
    }
    closedir(d);
    zhashx_destroy(&used);
}

static int s_restore_kernels(kb_restore_t *self)
{
    zlistx_t *rows = zlistx_new();
    KB_NOT_NULL(rows);
    zlistx_set_destructor(rows, (zlistx_destructor_fn *)s_row_free);
    if (kb_db_context_each(self->db, s_on_context, rows) != 0) {
        zlistx_destroy(&rows);
        return -1;
    }
    for (kb_kernel_row_t *row = zlistx_first(rows); row; row = zlistx_next(rows)) {
        if (strcmp(row->kind, "checkpoint") == 0) {
            /*  The engine takes it back once it knows which contexts came. */
            json_t *found
                = json_pack("{s:s, s:O?, s:O?, s:I, s:I, s:I, s:f}", "id", row->id, "context_id",
                            json_object_get(row->extra, "context_id"), "path",
                            json_object_get(row->extra, "path"), "pid", (json_int_t)row->pid,
                            "pid_start", (json_int_t)row->pid_start, "execution_count",
                            (json_int_t)row->execution_count, "created_at", row->created_at);
            if (!found || json_array_append_new(self->found->checkpoints, found) != 0)
                zsys_error("out of memory: checkpoint %s is not taken back", row->id);
            continue;
        }
        bool lived = strcmp(row->kind, "context") == 0 || strcmp(row->kind, "default") == 0
                     || strcmp(row->kind, "attached") == 0;
        bool pooled = strcmp(row->kind, "pool") == 0;
        if (!lived && !(pooled && !self->env->no_adopt))
            s_give_up(self, row, "an isolated run's or the pool's kernel of the last daemon");
        else if (pooled)
            s_adopt_pooled(self, row);
        else if (self->env->no_adopt) {
            char why[200];
            snprintf(why, sizeof why,
                     "the daemon was started with --no-adopt; its kernel (pid "
                     "%lld) was killed",
                     row->pid);
            s_give_up(self, row, why);
        } else
            s_adopt(self, row);
    }
    zlistx_destroy(&rows);
    return 0;
}

/* ---- writing back -------------------------------------------------------------------- */

void kb_restore_mark(kb_restore_t *self, kb_context_t *ctx, bool at_once)
{
    if (!self || !self->persist)
        return;
    zhashx_update(self->dirty_contexts, kb_context_id(ctx), ctx);
    self->contexts_at_once = self->contexts_at_once || at_once;
    kb_persist_touch(self->persist);
}

void kb_restore_forget(kb_restore_t *self, kb_context_t *ctx)
{
    if (!self || !self->persist)
        return;
    if (zhashx_lookup(self->dirty_contexts, kb_context_id(ctx)) == ctx)
        zhashx_delete(self->dirty_contexts, kb_context_id(ctx));
    kb_persist_context_delete(self->persist, kb_context_id(ctx));
}

void kb_restore_generations(kb_restore_t *self, zhashx_t *generations)
{
    if (!self || !self->persist)
        return;
    json_t *gens = json_object();
    for (void *gen = zhashx_first(generations); gen; gen = zhashx_next(generations))
        json_object_set_new(gens, zhashx_cursor(generations), json_integer((intptr_t)gen));
    char *text = json_dumps(gens, JSON_COMPACT);
    if (text)
        kb_persist_meta(self->persist, "default_generations", text);
    else
        zsys_error("out of memory: the default contexts' generations are not written");
    free(text);
    json_decref(gens);
}

void kb_restore_keep(kb_restore_t *self, kb_context_t *ctx)
{
    if (!self || !self->persist)
        return;
    if (zhashx_lookup(self->dirty_contexts, kb_context_id(ctx)) == ctx)
        zhashx_delete(self->dirty_contexts, kb_context_id(ctx));
    kb_db_context_t row;
    char *strings = kb_context_row(ctx, &row);
    kb_persist_context_put(self->persist, &row);
    free(strings);
}

/*  The rows of the contexts that changed: at once if one of them must be
    (kb_restore_mark), else with the batch (held till then). */
static void s_collect_contexts(kb_persist_t *persist, void *arg)
{
    kb_restore_t *self = arg;
    if (!self->contexts_at_once
        && kb_persist_may_wait(persist, zhashx_size(self->dirty_contexts) > 0))
        return;
    self->contexts_at_once = false;
    for (kb_context_t *ctx = zhashx_first(self->dirty_contexts); ctx;
         ctx = zhashx_next(self->dirty_contexts)) {
        kb_db_context_t row;
        char *strings = kb_context_row(ctx, &row);
        kb_persist_context_put(persist, &row);
        free(strings);
    }
    zhashx_purge(self->dirty_contexts);
}

void kb_restore_found_fini(kb_restore_found_t *found)
{
    json_decref(found->generations);
    json_decref(found->vanished);
    json_decref(found->checkpoints);
    zlistx_destroy(&found->contexts);
    found->generations = found->vanished = found->checkpoints = NULL;
}

int kb_restore_run(kb_restore_t *self, const kb_restore_env_t *env, kb_restore_found_t *found,
                   kb_error_t *err)
{
    found->generations = json_object();
    found->vanished = json_array();
    found->checkpoints = json_array();
    found->contexts = zlistx_new();
    if (!found->generations || !found->vanished || !found->contexts || !found->checkpoints) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return -1;
    }
    self->env = env;
    self->found = found;
    s_restore_generations(self);
    int rc = s_restore_records(self, err);
    if (rc == 0 && s_restore_kernels(self) != 0) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "cannot read the kernels recorded in %s: %s",
                     kb_db_path(self->db), kb_db_error(self->db));
        rc = -1;
    }
    self->env = NULL;
    self->found = NULL;
    return rc;
}

int kb_restore_finish(kb_restore_t *self, const kb_restore_env_t *env, zhashx_t *contexts,
                      const char *ipc_dir, kb_error_t *err)
{
    s_sweep(contexts, self->kernel_dir, false);
    s_sweep(contexts, ipc_dir, true);
    kb_db_t *db = self->db;
    self->db = NULL;
    self->persist = kb_persist_new(db, env->loop);
    if (!self->persist) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot start the state writer");
        return -1;
    }
    kb_persist_add_collector(self->persist, s_collect_contexts, self);
    kb_procstore_set_persist(env->procs, self->persist);
    /* what the restore changed (records ended, contexts adopted) is written now */
    for (kb_context_t *ctx = zhashx_first(contexts); ctx; ctx = zhashx_next(contexts))
        zhashx_update(self->dirty_contexts, kb_context_id(ctx), ctx);
    kb_persist_touch(self->persist);
    return 0;
}

void kb_restore_close(kb_restore_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_restore_t *self = *self_p;
    *self_p = NULL;
    if (self->persist) {
        kb_persist_sync(self->persist);
        kb_persist_destroy(&self->persist);
    }
    kb_db_close(&self->db);
    kb_statedir_unlock(&self->lock_fd);
    zhashx_destroy(&self->dirty_contexts);
    free(self->kernel_dir);
    free(self);
}
