/*  kb_engine.h - the engine: the one thread that owns all service state.

    Requests come in through a mailbox (a locked list plus an eventfd that
    wakes the engine's zloop); each request carries its own lock and
    condition so that the calling thread can wait for the answer. Answers
    may be deferred (a context create waits for readiness, a process wait
    for the end of its run) because the caller is blocked meanwhile and so
    the request stays valid until answered. Everything else in this header
    (contexts, processes) is touched by the engine thread alone.
*/
#ifndef KB_ENGINE_H_INCLUDED
#define KB_ENGINE_H_INCLUDED

#include <czmq.h>
#include <pthread.h>

#include "kernel/kb_kernel.h"
#include "kernel/kb_kernelspec.h"
#include "kernelbridge/kb_service.h"
#include "service/kb_execution.h"
#include "service/kb_stream.h"

typedef struct kb_engine kb_engine_t;
typedef struct kb_context kb_context_t;
typedef struct kb_proc kb_proc_t;
typedef struct kb_pool_slot kb_pool_slot_t;

typedef enum {
    KB_REQ_HEALTH,
    KB_REQ_KERNELSPECS,
    KB_REQ_CTX_CREATE,
    KB_REQ_CTX_DEFAULT,
    KB_REQ_CTX_GET,
    KB_REQ_CTX_LIST,
    KB_REQ_CTX_DELETE,
    KB_REQ_CTX_RESTART,
    KB_REQ_CTX_INTERRUPT,
    KB_REQ_RUN,
    KB_REQ_PROC_LIST,
    KB_REQ_PROC_GET,
    KB_REQ_PROC_RESULT,
    KB_REQ_PROC_LOGS,
    KB_REQ_PROC_FOLLOW,
    KB_REQ_PROC_WAIT,
    KB_REQ_PROC_SIGNAL,
    KB_REQ_PROC_DELETE,
} kb_request_type_t;

typedef struct kb_request {
    kb_request_type_t type;
    /* inputs, borrowed from the blocked caller */
    const kb_context_opts_t *context_opts;
    const kb_run_opts_t *run_opts;
    const char *id;
    const char *filter_state;
    const char *filter_context;
    const char *signal;
    bool all;
    long long cursor;
    size_t limit;
    double timeout;
    kb_stream_t *stream; /* run / follow: the caller's stream */
    /* outputs */
    json_t *result;
    kb_error_t err;
    int rc;
    /* answer handshake */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    int timer;   /* deferred waits: the engine's timer, or -1 */
    void *owner; /* deferred waits: what the request waits on */
    struct kb_request *next;
} kb_request_t;

/*  Answer a request: wakes its caller, after which the engine must not
    touch it again. */
void kb_request_answer(kb_request_t *request);
void kb_request_fail(kb_request_t *request, kb_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- contexts ----------------------------------------------------------- */

struct kb_context {
    kb_engine_t *engine;
    char *id;
    char *language;
    char *kernel_name;
    char *cwd;
    json_t *env;
    bool is_default;
    bool isolated;
    bool ready;
    kb_kernel_t *kernel;
    double created_at;
    double last_activity_at;
    long long execution_count;
    zlistx_t *queue; /* kb_proc_t * waiting, FIFO */
    kb_proc_t *running;
    zlistx_t *pending;     /* kb_request_t * answered when the kernel is ready */
    kb_execution_t *setup; /* applying cwd/env to a kernel taken from the pool */
    char setup_msg_id[96];
};

struct kb_engine {
    kb_service_config_t config;
    char *sandbox_id;
    char *state_dir;
    bool own_state_dir;
    char *ipc_dir; /* short private dir for ipc sockets, or NULL (tcp) */
    unsigned long kernel_serial;
    char **kernel_map;
    char *system_python;
    zloop_t *loop;
    bool stopping;
    double started_at;
    zhashx_t *contexts; /* id -> kb_context_t * */
    zhashx_t *procs;    /* id -> kb_proc_t * */
    zlistx_t *finished; /* kb_proc_t * finished, oldest first */
    size_t finished_bytes;
    zhashx_t *vanished;       /* context id -> message */
    zlistx_t *vanished_order; /* ids, oldest first */
    zlistx_t *dying;          /* kb_kernel_t * being shut down */
    int stop_timer;
    int64_t stop_deadline_ms;
    kb_pool_slot_t **pool_slots; /* NULL-terminated, one per configured entry */
    zlistx_t *pooled;            /* warm kernels (kb_pool.c) */
    kb_kernelspecs_t *specs;     /* discovered kernelspecs, refreshed when older than 2 s */
    int64_t specs_at_ms;
};

/*  Wall clock seconds and ISO 8601 text of it. */
double kb_now(void);
void kb_iso_time(double t, char *buf, size_t size);
/*  "prefix" + 16 random hex digits. Caller frees. */
char *kb_random_id(const char *prefix);

/*  Engine entry points, one per request type (kb_engine.c, kb_proc.c). */
void kb_engine_handle(kb_engine_t *self, kb_request_t *request);

/*  Context operations the process code needs. */
kb_context_t *kb_engine_context_for_run(kb_engine_t *self, kb_request_t *request);
void kb_context_pump(kb_context_t *ctx);
void kb_context_vanish(kb_context_t *ctx, const char *why);
json_t *kb_context_identity(kb_context_t *ctx);
void kb_engine_retire_kernel(kb_engine_t *self, kb_kernel_t *kernel, bool kill_now);
void kb_engine_remove_context(kb_engine_t *self, kb_context_t *ctx, const char *why);

/*  Kernels: how many run (contexts and pool), the kernelspec for a
    language or name (a copy; NULL with LANGUAGE_NOT_SUPPORTED listing
    what is installed), and a launch with the daemon's environment plus the
    kernelspec's plus env, in cwd. */
size_t kb_engine_kernel_count(kb_engine_t *self);
kb_kernelspec_t *kb_engine_find_spec(kb_engine_t *self, const char *language,
                                     const char *kernel_name, kb_error_t *err);
kb_kernel_t *kb_engine_launch(kb_engine_t *self, const kb_kernelspec_t *spec, const char *cwd,
                              const json_t *env, const kb_kernel_callbacks_t *callbacks, void *arg,
                              kb_error_t *err);

/*  The warm pool (kb_pool.c). */
int kb_pool_configure(kb_engine_t *self, const char *const *entries, kb_error_t *err);
void kb_pool_start(kb_engine_t *self);
/*  A ready pooled kernel of that kernelspec, now the caller's; or NULL. */
kb_kernel_t *kb_pool_take(kb_engine_t *self, const char *spec_name);
size_t kb_pool_size(kb_engine_t *self);
/*  A kernel went away: refill whatever the limit kept from refilling. */
void kb_pool_poke(kb_engine_t *self);
/*  Whether a ready kernel of that kernelspec waits in the pool. */
bool kb_pool_has(kb_engine_t *self, const char *spec_name);
/*  Give up one pooled kernel to make room; false when the pool is empty. */
bool kb_pool_evict(kb_engine_t *self);
json_t *kb_pool_json(kb_engine_t *self);
void kb_pool_stop(kb_engine_t *self);
void kb_pool_destroy(kb_engine_t *self);

/*  Processes (kb_proc.c). */
kb_proc_t *kb_proc_new(kb_engine_t *engine, kb_context_t *ctx, const kb_run_opts_t *opts,
                       kb_stream_t *stream);
void kb_proc_start(kb_proc_t *proc);
/*  Answer the run request of a run whose context was still starting. */
void kb_proc_answer_start(kb_proc_t *proc);
bool kb_proc_owns_message(kb_proc_t *proc, const kb_msg_t *msg);
void kb_proc_on_message(kb_proc_t *proc, kb_channel_t channel, const kb_msg_t *msg);
/*  End a run for an outside reason; the context has already been dealt with. */
void kb_proc_end(kb_proc_t *proc, kb_reason_t reason, int exit_code, const char *signal,
                 const char *error_name, const char *error_value, const char *raw_reason);
/*  The kernel of the process's context died or was killed. */
void kb_proc_on_kernel_exit(kb_proc_t *proc, kb_kernel_t *kernel);
/*  The run's context could not start its kernel. */
void kb_proc_start_failed(kb_proc_t *proc, const char *why);
void kb_proc_handle(kb_engine_t *self, kb_request_t *request);
void kb_proc_destroy_all(kb_engine_t *self);
const char *kb_proc_id(const kb_proc_t *proc);

/*  Per-run cwd/env adapters (kb_adapter.c): the silent snippets that apply
    and restore them for a language, or NULL when it has none. Caller frees. */
bool kb_adapter_supported(const char *language);
char *kb_adapter_apply_code(const char *language, const char *cwd, const json_t *env);
char *kb_adapter_restore_code(const char *language);

#endif
