/*  kb_engine_dirs.c - the engine's settings and places, before it has
    any state: the configuration's defaults, the state dir (given, or a
    fresh private one), the socket dir, the sandbox id, whether kernels
    of other uids can reach a dir, and where the kernel-side Python
    packages are. Touches no engine field: the
    engine (kb_engine.c) stores what these return.
*/
#include "service/engine/kb_engine_dirs.h"

#include <czmq.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/kb_alloc.h"
#include "util/kb_buf.h"
#include "util/kb_clock.h"

char *kb_engine_make_state_dir(const char *given, bool *own, kb_error_t *err)
{
    if (given) {
        *own = false;
        return strdup(given); /* made private and locked by kb_restore_open */
    }
    const char *base = getenv("XDG_RUNTIME_DIR");
    if (!base || access(base, W_OK) != 0)
        base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    char *path = zsys_sprintf("%s/kernelbridge-XXXXXX", base);
    if (!path || !mkdtemp(path)) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot create a state dir under %s: %s", base,
                     path ? strerror(errno) : "out of memory");
        free(path);
        return NULL;
    }
    *own = true;
    return path;
}

char *kb_engine_sandbox_id(const char *configured, const char *state_dir, bool own)
{
    if (configured && *configured)
        return strdup(configured);
    const char *env = getenv("KB_SANDBOX_ID");
    if (env && *env)
        return strdup(env);
    char *path = zsys_sprintf("%s/sandbox_id", state_dir);
    if (!path)
        return NULL;
    char line[128] = "";
    FILE *file = own ? NULL : fopen(path, "r");
    if (file) {
        if (!fgets(line, sizeof line, file))
            line[0] = 0;
        fclose(file);
        line[strcspn(line, "\r\n")] = 0;
    }
    char *id = line[0] ? strdup(line) : kb_random_id("sb_");
    if (id && !line[0] && !own && (file = fopen(path, "w"))) {
        fprintf(file, "%s\n", id);
        fclose(file);
    }
    free(path);
    return id;
}

int kb_engine_check_reachable(const char *path, kb_error_t *err)
{
    char *copy = strdup(path);
    for (char *slash = copy ? strrchr(copy, '/') : NULL; slash; slash = strrchr(copy, '/')) {
        *slash = 0;
        struct stat st;
        const char *dir = slash == copy ? "/" : copy;
        if (stat(dir, &st) == 0 && !(st.st_mode & S_IXOTH)) {
            kb_error_set(err, KB_ERR_BAD_REQUEST,
                         "kernels that run as other users cannot reach the state dir %s: %s is "
                         "not searchable by others (chmod o+x, or choose another --state-dir)",
                         path, dir);
            free(copy);
            return -1;
        }
        if (slash == copy)
            break;
    }
    free(copy);
    return 0;
}

void kb_engine_default_config(kb_service_config_t *c)
{
    c->state_dir = c->sandbox_id = c->transport = c->system_python = NULL;
    c->kernel_map = c->pool = NULL;
    c->kernel_user = NULL;
    if (c->interrupt_grace <= 0)
        c->interrupt_grace = 2.0;
    if (c->hog_after == 0)
        c->hog_after = 1.0;
    if (!c->max_message_bytes)
        c->max_message_bytes = (size_t)128 << 20;
    if (c->start_timeout <= 0)
        c->start_timeout = 60;
    if (c->completion_grace <= 0)
        c->completion_grace = 3.0;
    if (!c->max_contexts)
        c->max_contexts = 64;
    if (!c->max_checkpoints)
        c->max_checkpoints = 8;
    if (!c->max_code_bytes)
        c->max_code_bytes = 8 << 20;
    if (!c->max_output_bytes)
        c->max_output_bytes = 64 << 20;
    if (!c->max_processes)
        c->max_processes = 1000;
    if (!c->max_process_bytes)
        c->max_process_bytes = (size_t)256 << 20;
    if (!c->max_output_memory)
        c->max_output_memory = (size_t)256 << 20;
}

char *kb_engine_make_ipc_dir(kb_error_t *err)
{
    char *dir = strdup("/tmp/kbXXXXXX");
    if (!dir || !mkdtemp(dir)) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot create a socket dir in /tmp: %s",
                     dir ? strerror(errno) : "out of memory");
        free(dir);
        return NULL;
    }
    return dir;
}

#ifndef KB_PYTHON_DIR
#define KB_PYTHON_DIR "/usr/local/share/kernelbridge/python"
#endif

#if defined(KB_BUILD_DIR) && defined(KB_SOURCE_PYTHON_DIR)
/*  True when the running executable lies under dir. */
static bool s_running_from(const char *dir)
{
    char *exe = realpath("/proc/self/exe", NULL);
    char *root = realpath(dir, NULL);
    size_t len = root ? strlen(root) : 0;
    bool inside = exe && root && strncmp(exe, root, len) == 0 && exe[len] == '/';
    free(exe);
    free(root);
    return inside;
}
#endif

const char *kb_engine_python_dir(const kb_service_config_t *config)
{
    const char *dir = config->python_dir ? config->python_dir : KB_PYTHON_DIR;
#if defined(KB_BUILD_DIR) && defined(KB_SOURCE_PYTHON_DIR)
    if (!config->python_dir && s_running_from(KB_BUILD_DIR))
        dir = KB_SOURCE_PYTHON_DIR;
#endif
    return dir;
}

char *kb_engine_display_dir(const kb_service_config_t *config)
{
    if (config->no_display_ext)
        return NULL;
    const char *dir = kb_engine_python_dir(config);
    char *init = kb_buf_sprintf("%s/kernelbridge_display/__init__.py", dir);
    KB_NOT_NULL(init);
    bool found = access(init, R_OK) == 0;
    free(init);
    if (!found) {
        zsys_warning("no kernelbridge_display in %s: Python contexts show no charts and tables "
                     "as data",
                     dir);
        return NULL;
    }
    return kb_xstrdup(dir);
}
