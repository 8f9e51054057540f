/*  kb_kernel_memory.c - the kernels' resident memory for /health, kept per
    pid. See kb_kernel_memory.h. */
#include "service/ops/kb_kernel_memory.h"

#include <string.h>

#include "kernel/kb_proctree.h"

typedef struct {
    pid_t pid;
    bool readable;
    uint64_t rss, pss;
    int64_t read_ms;
    unsigned pass; /* the last pass that asked for it */
} kb_kernel_memory_entry;

void kb_kernel_memory_init(kb_kernel_memory_t *self)
{
    memset(self, 0, sizeof *self);
    kb_vec_init(&self->entries, sizeof(kb_kernel_memory_entry), 0);
}

void kb_kernel_memory_free(kb_kernel_memory_t *self)
{
    kb_vec_free(&self->entries);
    self->next = 0;
}

void kb_kernel_memory_begin(kb_kernel_memory_t *self, int64_t now_ms)
{
    self->pass++;
    self->reads = 0;
    self->next = 0;
    self->now_ms = now_ms;
}

/*  The entry of pid: looked for from where the last one was found (a pass
    asks in the order of the last one), then from the start. */
static kb_kernel_memory_entry *s_find(kb_kernel_memory_t *self, pid_t pid)
{
    size_t len = self->entries.len;
    for (size_t k = 0; k < len; k++) {
        size_t i = (self->next + k) % len;
        kb_kernel_memory_entry *entry = kb_vec_at(&self->entries, i);
        if (entry->pid == pid) {
            self->next = i + 1;
            return entry;
        }
    }
    return NULL;
}

static void s_read(kb_kernel_memory_t *self, kb_kernel_memory_entry *entry)
{
    entry->readable = kb_proc_memory_rss(entry->pid, NULL, &entry->pss, &entry->rss) == 0;
    entry->read_ms = self->now_ms;
}

bool kb_kernel_memory_of(kb_kernel_memory_t *self, pid_t pid, uint64_t *rss, uint64_t *pss)
{
    kb_kernel_memory_entry fresh = { .pid = pid };
    kb_kernel_memory_entry *entry = s_find(self, pid);
    if (!entry) {
        s_read(self, &fresh);
        /* out of memory: the figure is still given, not kept */
        entry = kb_vec_push(&self->entries, &fresh) == KB_BUF_OK
                    ? kb_vec_at(&self->entries, self->entries.len - 1)
                    : &fresh;
        self->next = self->entries.len;
    } else if (self->now_ms - entry->read_ms >= KB_KERNEL_MEMORY_TTL_MS
               && self->reads < KB_KERNEL_MEMORY_READS) {
        self->reads++;
        s_read(self, entry);
    }
    entry->pass = self->pass;
    *rss = entry->rss, *pss = entry->pss;
    return entry->readable;
}

void kb_kernel_memory_end(kb_kernel_memory_t *self)
{
    size_t kept = 0;
    for (size_t i = 0; i < self->entries.len; i++) {
        kb_kernel_memory_entry *entry = kb_vec_at(&self->entries, i);
        if (entry->pass == self->pass && kept++ != i)
            memcpy(kb_vec_at(&self->entries, kept - 1), entry, sizeof *entry);
    }
    self->entries.len = kept;
    self->next = 0;
}
