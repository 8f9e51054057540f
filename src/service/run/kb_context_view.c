/*  kb_context_view.c - what a context shows, without changing it: its
    identity, state and JSON for the API (SPEC section 3), and its row for
    state.db. Reads struct kb_context (kb_context_impl.h); kb_context.c is
    the one file that writes it. Engine thread only. */
#include "service/run/kb_context.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <czmq.h>

#include "kernel/kb_proctree.h"
#include "service/run/kb_context_impl.h"
#include "util/kb_buf.h"
#include "util/kb_clock.h"

const char *kb_context_id(const kb_context_t *self)
{
    return self->id;
}

const char *kb_context_kernel_id(const kb_context_t *self)
{
    return self->kernel_id;
}

void kb_context_kernel_id_of(const char *sandbox_id, const char *id, char *out)
{
    char *name = sandbox_id ? zsys_sprintf("kernelbridge/%s/%s", sandbox_id, id) : NULL;
    if (name)
        kb_uuid_from(name, out);
    else
        out[0] = '\0';
    free(name);
}

const char *kb_context_language(const kb_context_t *self)
{
    return self->language;
}

const char *kb_context_kernel_name(const kb_context_t *self)
{
    return self->spec->name;
}

bool kb_context_is_default(const kb_context_t *self)
{
    return self->is_default;
}

bool kb_context_isolated(const kb_context_t *self)
{
    return self->isolated;
}

bool kb_context_ready(const kb_context_t *self)
{
    return self->ready;
}

double kb_context_created_at(const kb_context_t *self)
{
    return self->created_at;
}

long long kb_context_generation(const kb_context_t *self)
{
    return self->generation;
}

const char *kb_context_cwd(const kb_context_t *self)
{
    return self->cwd;
}

const json_t *kb_context_env(const kb_context_t *self)
{
    return self->kernel_env;
}

long long kb_context_execution_count(const kb_context_t *self)
{
    return self->execution_count;
}

void kb_context_limits(const kb_context_t *self, long long *memory_limit, long long *pids_limit)
{
    *memory_limit = self->memory_limit;
    *pids_limit = self->pids_limit;
}

json_t *kb_context_identity(const kb_context_t *self)
{
    return json_pack("{s:s, s:s, s:s, s:I}", "sandbox_id", self->env->sandbox_id, "context_id",
                     self->id, "language", self->language, "generation",
                     (json_int_t)self->generation);
}

static const char *s_state(const kb_context_t *self)
{
    if (!self->kernel)
        return "dead";
    kb_kernel_state_t state = kb_kernel_state(self->kernel);
    if (state == KB_KERNEL_STARTING)
        return "starting";
    if (state == KB_KERNEL_DEAD || state == KB_KERNEL_DYING)
        return "dead";
    return self->running || self->barrier || (self->hub && kb_hub_busy(self->hub)) ? "busy"
                                                                                   : "idle";
}

const char *kb_context_state(const kb_context_t *self)
{
    return s_state(self);
}

/*  The kernel's effective working directory (SPEC section 3, never null):
    its process's now when /proc/<pid>/cwd is readable, else where it was
    started; an attached kernel (no pid) gets the daemon's, the best known.
    Into buf, or a string of self. */
static const char *s_effective_cwd(const kb_context_t *self, char *buf, size_t len)
{
    kb_kernel_t *kernel = self->kernel;
    pid_t pid = kernel ? kb_kernel_pid(kernel) : 0;
    if (pid > 0 && kb_kernel_state(kernel) != KB_KERNEL_DEAD && kb_proc_cwd(pid, buf, len) == 0)
        return buf;
    if (!self->cwd && kernel && kb_kernel_work_dir(kernel))
        return kb_kernel_work_dir(kernel);
    return self->start_dir;
}

json_t *kb_context_json(const kb_context_t *self)
{
    char created[40], active[40];
    kb_iso_time(self->created_at, created, sizeof created);
    kb_iso_time(self->last_activity_at, active, sizeof active);
    kb_kernel_t *kernel = self->kernel;
    json_t *json = kb_context_identity(self);
    json_object_set_new(json, "kernel_name", json_string(self->spec->name));
    json_object_set_new(json, "kernel_id", json_string(self->kernel_id));
    json_object_set_new(json, "connections",
                        json_integer(self->hub ? (json_int_t)kb_hub_count(self->hub) : 0));
    json_object_set_new(json, "dropped_messages",
                        json_integer(kernel ? (json_int_t)kb_kernel_dropped(kernel) : 0));
    char cwd[PATH_MAX];
    json_object_set_new(json, "cwd", json_string(s_effective_cwd(self, cwd, sizeof cwd)));
    json_object_set_new(json, "state", json_string(s_state(self)));
    json_object_set_new(json, "created_at", json_string(created));
    json_object_set_new(json, "last_activity_at", json_string(active));
    json_object_set_new(json, "execution_count", json_integer(self->execution_count));
    /* null: no kernel, or one this daemon did not start (attached) */
    json_object_set_new(json, "pid",
                        kernel && kb_kernel_pid(kernel) > 0 ? json_integer(kb_kernel_pid(kernel))
                                                            : json_null());
    json_object_set_new(json, "default", json_boolean(self->is_default));
    json_object_set_new(
        json, "heartbeat",
        json_string(kernel && kb_kernel_heartbeat_misses(kernel) > 1 ? "late" : "ok"));
    json_object_set_new(json, "memory_limit",
                        self->memory_limit ? json_integer(self->memory_limit) : json_null());
    json_object_set_new(json, "pids_limit",
                        self->pids_limit ? json_integer(self->pids_limit) : json_null());
    json_t *resources = json_null();
    if (self->watch) {
        kb_usage_t usage;
        kb_watch_usage(self->watch, &usage);
        resources = json_pack("{s:I, s:f, s:i}", "memory_bytes", (json_int_t)usage.memory_bytes,
                              "cpu_time_s", (double)(long long)(usage.cpu_time_s * 1e3) / 1e3,
                              "pids", (int)usage.pids);
    }
    json_object_set_new(json, "resources", resources);
    json_object_set(json, "forked_from", self->forked_from ? self->forked_from : json_null());
    json_object_set(json, "restored_from", self->restored_from ? self->restored_from : json_null());
    return json;
}

/* ---- the state database ---------------------------------------------------------- */

char *kb_context_row(const kb_context_t *self, kb_db_context_t *row)
{
    kb_kernel_t *kernel = self->kernel;
    const json_t *info = kernel ? kb_kernel_connection_info(kernel) : NULL;
    json_t *names = json_array();
    const char *name;
    json_t *value;
    json_object_foreach(self->kernel_env, name, value)
        json_array_append_new(names, json_string(name));
    kb_buf_t strings;
    kb_buf_init(&strings, 0);
    /* three strings in one allocation: the connection, the env names, the limits */
    kb_buf_append_json(&strings, info, JSON_COMPACT);
    kb_buf_putc(&strings, 0);
    size_t names_at = strings.len;
    kb_buf_append_json(&strings, names, JSON_COMPACT);
    json_decref(names);
    kb_buf_putc(&strings, 0);
    size_t extra_at = strings.len;
    bool limited = self->memory_limit || self->pids_limit || self->forked_from;
    if (limited) {
        json_t *extra = json_pack("{s:I, s:I, s:O?}", "memory_limit",
                                  (json_int_t)self->memory_limit, "pids_limit",
                                  (json_int_t)self->pids_limit, "forked_from", self->forked_from);
        kb_buf_append_json(&strings, extra, JSON_COMPACT);
        json_decref(extra);
    }
    char *both = kb_buf_take(&strings, NULL);
    *row = (kb_db_context_t){
        .id = self->id,
        .kind = self->isolated     ? "isolated"
                : self->is_default ? "default"
                : self->attached   ? "attached"
                                   : "context",
        .language = self->language,
        .kernel_name = self->spec->name,
        .cwd = self->cwd,
        .env_names = both && self->kernel_env ? both + names_at : NULL,
        .connection = both && info ? both : NULL,
        .extra = both && limited ? both + extra_at : NULL,
        .connection_file = kernel ? kb_kernel_connection_file(kernel) : NULL,
        .log_file = kernel ? kb_kernel_log_file(kernel) : NULL,
        .pid = kernel && !self->attached ? kb_kernel_pid(kernel) : 0,
        .pid_start = kernel ? kb_kernel_pid_start(kernel) : 0,
        .pgid = kernel && !self->attached ? kb_kernel_pgid(kernel) : 0,
        .execution_count = self->execution_count,
        .generation = self->generation,
        .created_at = self->created_at,
        .last_activity_at = self->last_activity_at,
    };
    return both;
}

bool kb_context_channels_ready(kb_context_t *self)
{
    return !self->kernel || self->over || kb_kernel_stdin_connected(self->kernel);
}

kb_kernel_t *kb_context_kernel(const kb_context_t *self)
{
    return self->kernel;
}

double kb_context_idle_for(const kb_context_t *self, double now)
{
    if (!self->ready || self->over || self->attaching || self->barrier || self->running
        || zlistx_size(self->queue) > 0 || self->setup || kb_context_jobs_pending(&self->jobs))
        return -1;
    if (self->hub && (kb_hub_count(self->hub) > 0 || kb_hub_busy(self->hub)))
        return -1;
    return now
           - (self->ready_at > self->last_activity_at ? self->ready_at : self->last_activity_at);
}

bool kb_context_settled(const kb_context_t *self)
{
    return self->ready || self->over;
}

/*  Where a kernel starts (kb_launch: in cwd, relative to the daemon's
    directory, else in the daemon's), absolute. Caller owns it; NULL: OOM. */
char *kb_context_start_dir(const char *cwd)
{
    char here[PATH_MAX], *resolved;
    if (cwd && *cwd && (resolved = realpath(cwd, NULL)))
        return resolved;
    if (!getcwd(here, sizeof here))
        snprintf(here, sizeof here, "/");
    if (!cwd || !*cwd)
        return strdup(here);
    if (*cwd == '/')
        return strdup(cwd);
    return kb_buf_sprintf("%s%s%s", here, strcmp(here, "/") ? "/" : "", cwd);
}

uint64_t kb_context_data_limit(const kb_context_t *self)
{
    if (self->memory_limit <= 0 || kb_kernelspec_quirks(self->spec).no_rlimit_data)
        return 0;
    return (uint64_t)self->memory_limit;
}
