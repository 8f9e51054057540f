/*  kb_engine_orphans.c - at start, after the restore: end the kernel
    processes a killed daemon left half-made (a fork or a checkpoint made
    but not yet recorded), and the checkpoint sockets nobody holds. Reads
    the engine's tables; writes nothing of it. Engine thread.
*/
#include "service/engine/kb_engine_orphans.h"

#include <czmq.h>
#include <dirent.h>
#include <string.h>
#include <unistd.h>

#include "kernel/kb_orphans.h"
#include "service/engine/kb_engine.h"
#include "service/durable/kb_restore.h"
#include "service/fork/kb_checkpoints.h"
#include "service/ops/kb_pool.h"
#include "service/run/kb_context.h"

static bool s_ours(void *arg, pid_t pid)
{
    kb_engine_t *self = arg;
    for (kb_context_t *ctx = zhashx_first(self->contexts); ctx; ctx = zhashx_next(self->contexts)) {
        kb_kernel_t *kernel = kb_context_kernel(ctx);
        if (kernel && kb_kernel_pid(kernel) == pid)
            return true;
    }
    return kb_pool_owns(self->pool, pid) || kb_checkpoints_owns(self->checkpoints, pid, NULL);
}

/*  Remove the checkpoint sockets (cp-*) in dir that no checkpoint has. */
static void s_sweep_sockets(kb_engine_t *self, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *entry;
    while ((entry = readdir(d))) {
        if (strncmp(entry->d_name, "cp-", 3) != 0)
            continue;
        char *path = zsys_sprintf("%s/%s", dir, entry->d_name);
        if (!path)
            break; /* out of memory: the rest stays, to be swept next time */
        if (!kb_checkpoints_owns(self->checkpoints, 0, path)) {
            zsys_info("removing %s: the socket of a checkpoint no record names", path);
            unlink(path);
        }
        free(path);
    }
    closedir(d);
}

void kb_engine_end_orphans(kb_engine_t *self)
{
    const char *dir = self->durable ? kb_restore_kernel_dir(self->durable) : NULL;
    if (!dir)
        return;
    kb_orphans_end(dir, s_ours, self);
    s_sweep_sockets(self, dir);
}
