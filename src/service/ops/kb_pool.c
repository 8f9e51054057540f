/*  kb_pool.c - warm kernels: started and ready before anyone asks, so that
    creating a context or running isolated code takes a kernel at once.

    The pool holds, per configured entry ("python=2": a language or a
    kernelspec name, and a count), that many kernels started with the
    daemon's cwd and environment. A pooled kernel has never run user code
    and is handed out once. Taking one schedules a refill on the next loop
    turn, so the request that took it is answered first. A pooled kernel
    that dies or fails to start is replaced, after a pause that grows with
    repeated failures. Engine thread only.
*/
#include "service/ops/kb_pool.h"
#include "util/kb_alloc.h"

#include <czmq.h>

#include <assert.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define KB_POOL_RETRY_MS 1000   /* first pause after a failed start */
#define KB_POOL_RETRY_MAX 30000 /* longest pause */

typedef struct kb_pool_slot kb_pool_slot_t;

struct kb_pool_slot {
    kb_pool_t *pool;
    char *key; /* language or kernelspec name, as configured */
    size_t target;
    unsigned failures; /* starts in a row that failed */
    kb_timer_t refill_timer;
};

struct kb_pool {
    const kb_kernel_source_t *launcher;
    kb_loop_t *loop;
    bool stopping;
    kb_pool_slot_t **slots; /* NULL-terminated, one per configured entry */
    zlistx_t *pooled;       /* kb_pooled_t *, warm kernels */
};

typedef struct {
    kb_pool_slot_t *slot;
    kb_kernel_t *kernel;
    char *spec_name;
    bool ready;
} kb_pooled_t;

static void s_schedule_refill(kb_pool_slot_t *slot, size_t delay_ms);

static void s_pooled_free(kb_pooled_t **pooled_p)
{
    kb_pooled_t *pooled = *pooled_p;
    *pooled_p = NULL;
    free(pooled->spec_name);
    free(pooled);
}

static void s_forget(kb_pool_t *self, kb_pooled_t *pooled)
{
    void *handle = zlistx_find(self->pooled, pooled);
    if (handle)
        zlistx_detach(self->pooled, handle);
}

static size_t s_retry_delay(const kb_pool_slot_t *slot)
{
    size_t delay = KB_POOL_RETRY_MS;
    for (unsigned i = 1; i < slot->failures && delay < KB_POOL_RETRY_MAX; i++)
        delay *= 2;
    return delay < KB_POOL_RETRY_MAX ? delay : KB_POOL_RETRY_MAX;
}

static void s_on_ready(kb_kernel_t *kernel, void *arg)
{
    kb_pooled_t *pooled = arg;
    pooled->ready = true;
    pooled->slot->failures = 0;
}

static void s_on_start_failed(kb_kernel_t *kernel, const char *why, void *arg)
{
    kb_pooled_t *pooled = arg;
    kb_pool_slot_t *slot = pooled->slot;
    kb_pool_t *self = slot->pool;
    /* forked from a template, now marked failed: the next one starts the ordinary way */
    bool forked = self->launcher->fork_failed
                  && self->launcher->fork_failed(self->launcher->impl, kernel, why);
    zsys_warning("pool %s: a kernel failed to start: %s", slot->key, why);
    s_forget(self, pooled);
    self->launcher->retire(self->launcher->impl, pooled->kernel, true);
    s_pooled_free(&pooled);
    slot->failures += !forked;
    s_schedule_refill(slot, forked ? 1 : s_retry_delay(slot));
}

static void s_on_exited(kb_kernel_t *kernel, void *arg)
{
    kb_pooled_t *pooled = arg;
    kb_pool_slot_t *slot = pooled->slot;
    kb_pool_t *self = slot->pool;
    zsys_info("pool %s: a ready kernel went away (%s); replacing it", slot->key,
              kb_kernel_exit_text(kernel));
    s_forget(self, pooled);
    s_pooled_free(&pooled);
    self->launcher->retire(self->launcher->impl, kernel, true);
    slot->failures++;
    s_schedule_refill(slot, slot->failures > 1 ? s_retry_delay(slot) : 1);
}

static void s_on_message(kb_kernel_t *kernel, kb_channel_t channel, const kb_msg_t *msg, void *arg)
{
    /* nothing runs on a pooled kernel */
}

static const kb_kernel_callbacks_t s_pooled_callbacks = {
    .ready = s_on_ready,
    .start_failed = s_on_start_failed,
    .message = s_on_message,
    .exited = s_on_exited,
};

static size_t s_count(kb_pool_t *self, const kb_pool_slot_t *slot, bool ready_only)
{
    size_t count = 0;
    for (kb_pooled_t *p = zlistx_first(self->pooled); p; p = zlistx_next(self->pooled))
        if (p->slot == slot && (!ready_only || p->ready))
            count++;
    return count;
}

size_t kb_pool_starting(kb_pool_t *self)
{
    size_t count = 0;
    for (kb_pooled_t *p = self->pooled ? zlistx_first(self->pooled) : NULL; p;
         p = zlistx_next(self->pooled))
        count += !p->ready;
    return count;
}

bool kb_pool_owns(kb_pool_t *self, pid_t pid)
{
    if (!self->pooled)
        return false;
    for (kb_pooled_t *p = zlistx_first(self->pooled); p; p = zlistx_next(self->pooled))
        if (p->kernel && kb_kernel_pid(p->kernel) == pid)
            return true;
    return false;
}

size_t kb_pool_size(kb_pool_t *self)
{
    return self->pooled ? zlistx_size(self->pooled) : 0;
}

json_t *kb_pool_pids(kb_pool_t *self)
{
    json_t *pids = json_array();
    for (kb_pooled_t *p = pids && self->pooled ? zlistx_first(self->pooled) : NULL; p;
         p = zlistx_next(self->pooled))
        if (p->kernel && kb_kernel_pid(p->kernel) > 0)
            json_array_append_new(pids, json_integer(kb_kernel_pid(p->kernel)));
    return pids;
}

/*  Start kernels until the slot has its count, within max_contexts. */
static void s_fill(kb_pool_slot_t *slot)
{
    kb_pool_t *self = slot->pool;
    if (self->stopping)
        return;
    while (s_count(self, slot, false) < slot->target
           && self->launcher->has_room(self->launcher->impl)) {
        kb_error_t err;
        kb_kernelspec_t *spec
            = self->launcher->find_spec(self->launcher->impl, slot->key, NULL, &err);
        if (!spec) {
            /* maybe it is a kernelspec name rather than a language */
            spec = self->launcher->find_spec(self->launcher->impl, NULL, slot->key, &err);
            if (!spec) {
                zsys_warning("pool %s: %s", slot->key, err.message);
                slot->failures++;
                s_schedule_refill(slot, s_retry_delay(slot));
                return;
            }
        }
        kb_pooled_t *pooled = kb_xcalloc(1, sizeof *pooled);
        pooled->slot = slot;
        pooled->spec_name = kb_xstrdup(spec->name);
        pooled->kernel = self->launcher->launch(self->launcher->impl, spec, NULL, NULL, 0,
                                                &s_pooled_callbacks, pooled, &err);
        kb_kernelspec_destroy(&spec);
        if (!pooled->kernel) {
            zsys_warning("pool %s: %s", slot->key, err.message);
            s_pooled_free(&pooled);
            slot->failures++;
            s_schedule_refill(slot, s_retry_delay(slot));
            return;
        }
        zlistx_add_end(self->pooled, pooled);
    }
}

static void s_on_refill(kb_timer_t *timer, void *arg)
{
    s_fill(arg);
}

static void s_schedule_refill(kb_pool_slot_t *slot, size_t delay_ms)
{
    if (kb_timer_active(&slot->refill_timer) || slot->pool->stopping)
        return;
    kb_timer_start(slot->pool->loop, &slot->refill_timer, delay_ms, 0, s_on_refill, slot);
}

kb_pool_t *kb_pool_new(const char *const *entries, const kb_kernel_source_t *launcher,
                       kb_loop_t *loop, kb_error_t *err)
{
    size_t count = 0;
    while (entries && entries[count])
        count++;
    kb_pool_t *self = calloc(1, sizeof *self);
    if (!self) {
        kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
        return NULL;
    }
    self->launcher = launcher;
    self->loop = loop;
    self->slots = kb_xcalloc(count + 1, sizeof(kb_pool_slot_t *));
    self->pooled = zlistx_new();
    KB_NOT_NULL(self->pooled);
    for (size_t i = 0; i < count; i++) {
        const char *entry = entries[i];
        const char *eq = strchr(entry, '=');
        char *end = NULL;
        long target = eq ? strtol(eq + 1, &end, 10) : -1;
        if (!eq || eq == entry || !end || *end || end == eq + 1 || target < 0 || target > 64) {
            kb_error_set(err, KB_ERR_BAD_REQUEST,
                         "pool entry '%s' must be LANGUAGE=COUNT with a count of 0-64", entry);
            kb_pool_destroy(&self);
            return NULL;
        }
        kb_pool_slot_t *slot = kb_xcalloc(1, sizeof *slot);
        slot->pool = self;
        slot->key = strndup(entry, (size_t)(eq - entry));
        KB_NOT_NULL(slot->key);
        for (char *p = slot->key; *p; p++)
            *p = (char)tolower((unsigned char)*p);
        slot->target = (size_t)target;
        kb_timer_init(&slot->refill_timer);
        self->slots[i] = slot;
    }
    return self;
}

void kb_pool_start(kb_pool_t *self)
{
    for (size_t i = 0; self->slots && self->slots[i]; i++)
        s_fill(self->slots[i]);
}

/*  The kernelspec name a slot starts, or NULL (caller frees). */
static char *s_slot_spec_name(kb_pool_t *self, const kb_pool_slot_t *slot)
{
    kb_error_t err;
    kb_kernelspec_t *spec = self->launcher->find_spec(self->launcher->impl, slot->key, NULL, &err);
    if (!spec)
        spec = self->launcher->find_spec(self->launcher->impl, NULL, slot->key, &err);
    char *name = spec ? strdup(spec->name) : NULL;
    kb_kernelspec_destroy(&spec);
    return name;
}

bool kb_pool_adopt(kb_pool_t *self, kb_kernel_t *kernel)
{
    const char *name = kb_kernel_spec(kernel)->name;
    for (size_t i = 0; !self->stopping && self->slots && self->slots[i]; i++) {
        kb_pool_slot_t *slot = self->slots[i];
        char *slot_name = s_slot_spec_name(self, slot);
        bool fits = slot_name && strcmp(slot_name, name) == 0
                    && s_count(self, slot, false) < slot->target;
        free(slot_name);
        if (!fits)
            continue;
        kb_pooled_t *pooled = calloc(1, sizeof *pooled);
        if (!pooled || !(pooled->spec_name = strdup(name))) {
            free(pooled);
            return false;
        }
        pooled->slot = slot;
        pooled->kernel = kernel;
        kb_kernel_set_callbacks(kernel, &s_pooled_callbacks, pooled);
        zlistx_add_end(self->pooled, pooled);
        return true;
    }
    return false;
}

kb_kernel_t *kb_pool_take(kb_pool_t *self, const char *spec_name)
{
    if (!self->pooled)
        return NULL;
    for (kb_pooled_t *p = zlistx_first(self->pooled); p; p = zlistx_next(self->pooled)) {
        if (!p->ready || strcmp(p->spec_name, spec_name) != 0)
            continue;
        if (kb_kernel_state(p->kernel) != KB_KERNEL_IDLE)
            continue;
        kb_kernel_t *kernel = p->kernel;
        kb_pool_slot_t *slot = p->slot;
        zlistx_detach_cur(self->pooled);
        s_pooled_free(&p);
        s_schedule_refill(slot, 1); /* after the request that took it is answered */
        return kernel;
    }
    return NULL;
}

void kb_pool_poke(kb_pool_t *self)
{
    for (size_t i = 0; self->slots && self->slots[i]; i++) {
        kb_pool_slot_t *slot = self->slots[i];
        if (s_count(self, slot, false) < slot->target && !slot->failures)
            s_schedule_refill(slot, 1);
    }
}

bool kb_pool_has(kb_pool_t *self, const char *spec_name)
{
    for (kb_pooled_t *p = self->pooled ? zlistx_first(self->pooled) : NULL; p;
         p = zlistx_next(self->pooled))
        if (p->ready && strcmp(p->spec_name, spec_name) == 0)
            return true;
    return false;
}

bool kb_pool_evict(kb_pool_t *self)
{
    kb_pooled_t *victim = NULL;
    for (kb_pooled_t *p = self->pooled ? zlistx_first(self->pooled) : NULL; p;
         p = zlistx_next(self->pooled))
        if (!victim || (victim->ready && !p->ready))
            victim = p; /* a starting one first: it is worth least */
    if (!victim)
        return false;
    s_forget(self, victim);
    self->launcher->retire(self->launcher->impl, victim->kernel, true);
    s_pooled_free(&victim);
    return true;
}

json_t *kb_pool_json(kb_pool_t *self)
{
    json_t *pool = json_object();
    for (size_t i = 0; self->slots && self->slots[i]; i++) {
        kb_pool_slot_t *slot = self->slots[i];
        json_t *pids = json_array();
        const char *spec_name = NULL;
        for (kb_pooled_t *p = zlistx_first(self->pooled); p; p = zlistx_next(self->pooled))
            if (p->slot == slot) {
                spec_name = p->spec_name;
                if (p->ready)
                    json_array_append_new(pids, json_integer(kb_kernel_pid(p->kernel)));
            }
        size_t all = s_count(self, slot, false);
        size_t ready = s_count(self, slot, true);
        json_object_set_new(pool, slot->key,
                            json_pack("{s:I, s:I, s:I, s:o, s:o, s:I}", "target",
                                      (json_int_t)slot->target, "ready", (json_int_t)ready,
                                      "starting", (json_int_t)(all - ready), "kernel_name",
                                      spec_name ? json_string(spec_name) : json_null(),
                                      "ready_pids", pids, "failures", (json_int_t)slot->failures));
    }
    return pool;
}

void kb_pool_stop(kb_pool_t *self)
{
    self->stopping = true;
    for (size_t i = 0; self->slots && self->slots[i]; i++) {
        kb_pool_slot_t *slot = self->slots[i];
        kb_timer_stop(&slot->refill_timer);
    }
    kb_pooled_t *pooled;
    while (self->pooled && (pooled = zlistx_detach(self->pooled, NULL))) {
        self->launcher->retire(self->launcher->impl, pooled->kernel, !pooled->ready);
        s_pooled_free(&pooled);
    }
}

void kb_pool_destroy(kb_pool_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_pool_t *self = *self_p;
    *self_p = NULL;
    for (size_t i = 0; self->slots && self->slots[i]; i++) {
        assert(!kb_timer_active(&self->slots[i]->refill_timer));
        free(self->slots[i]->key);
        free(self->slots[i]);
    }
    free(self->slots);
    assert(!self->pooled || zlistx_size(self->pooled) == 0);
    zlistx_destroy(&self->pooled);
    free(self);
}
