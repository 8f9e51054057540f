/*  kb_request_fork.c - the bodies of SPEC section 13's requests: a fork
    ({count, context_ids, memory_limit, pids_limit}) and a restore
    ({checkpoint_id}), read and checked as kb_request.c reads the others
    (its kb_request_body and kb_request_string). Any thread. */
#include <string.h>

#include "kernel/kb_kernel.h"
#include "service/engine/kb_request.h"
#include "util/kb_alloc.h"

/*  An integer field (absent or null: left as it is). 0, or -1 with
    BAD_REQUEST naming it. */
static int s_integer(const json_t *body, const char *key, long long *out, kb_error_t *err)
{
    json_t *value = json_object_get(body, key);
    if (!value || json_is_null(value))
        return 0;
    if (!json_is_integer(value))
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "field %s must be an integer", key);
    *out = json_integer_value(value);
    return 0;
}

static int s_id_validate(const char *id, kb_error_t *err)
{
    if (kb_context_id_valid(id))
        return 0;
    return kb_error_set(err, KB_ERR_BAD_REQUEST,
                        "context_ids must hold ids of 1-%d characters of A-Z a-z 0-9 . _ -",
                        KB_CONTEXT_ID_MAX);
}

size_t kb_fork_opts_count(const kb_fork_opts_t *opts)
{
    size_t ids = 0;
    while (opts && opts->context_ids && !opts->count && opts->context_ids[ids])
        ids++;
    return opts && opts->count ? opts->count : ids ? ids : 1;
}

int kb_fork_opts_validate(const kb_fork_opts_t *opts, kb_error_t *err)
{
    if (!opts)
        return 0;
    size_t count = kb_fork_opts_count(opts);
    if (count < 1 || count > KB_FORK_MAX)
        return kb_error_set(err, KB_ERR_BAD_REQUEST, "field count must be 1 to %d (%zu given)",
                            KB_FORK_MAX, count);
    for (size_t i = 0; opts->context_ids && i < count; i++) {
        if (!opts->context_ids[i])
            return kb_error_set(err, KB_ERR_BAD_REQUEST,
                                "fields count and context_ids disagree: %zu ids for %zu forks", i,
                                count);
        if (s_id_validate(opts->context_ids[i], err) != 0)
            return -1;
        for (size_t k = 0; k < i; k++)
            if (strcmp(opts->context_ids[k], opts->context_ids[i]) == 0)
                return kb_error_set(err, KB_ERR_BAD_REQUEST, "context_ids names %s twice",
                                    opts->context_ids[i]);
    }
    if (opts->context_ids && opts->count && opts->context_ids[count])
        return kb_error_set(err, KB_ERR_BAD_REQUEST,
                            "fields count and context_ids disagree: more ids than %zu forks",
                            count);
    return kb_limits_validate(opts->memory_limit, opts->pids_limit, err);
}

int kb_fork_request_parse(kb_fork_request_t *self, const char *data, size_t len, kb_error_t *err)
{
    memset(self, 0, sizeof *self);
    if (!(self->body = kb_request_body(data, len, true, err)))
        return -1;
    long long count = 0;
    json_t *ids = json_object_get(self->body, "context_ids");
    ids = json_is_null(ids) ? NULL : ids;
    kb_fork_opts_t *opts = &self->opts;
    if (s_integer(self->body, "count", &count, err) != 0
        || s_integer(self->body, "memory_limit", &opts->memory_limit, err) != 0
        || s_integer(self->body, "pids_limit", &opts->pids_limit, err) != 0)
        goto fail;
    if (count < 0 || count > KB_FORK_MAX || (json_object_get(self->body, "count") && count == 0)) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "field count must be 1 to %d (%lld given)",
                     KB_FORK_MAX, count);
        goto fail;
    }
    opts->count = (size_t)count;
    size_t n = json_array_size(ids);
    if (ids && (!json_is_array(ids) || n == 0 || n > KB_FORK_MAX)) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "field context_ids must be an array of 1 to %d ids",
                     KB_FORK_MAX);
        goto fail;
    }
    self->ids = ids ? kb_xcalloc(n + 1, sizeof *self->ids) : NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *id = json_array_get(ids, i);
        self->ids[i] = json_string_value(id);
        if (!self->ids[i] || strlen(self->ids[i]) != json_string_length(id)) {
            kb_error_set(err, KB_ERR_BAD_REQUEST, "field context_ids must hold context ids");
            goto fail;
        }
    }
    opts->context_ids = self->ids;
    if (opts->count && self->ids && n != opts->count) {
        kb_error_set(err, KB_ERR_BAD_REQUEST,
                     "fields count and context_ids disagree: %zu ids for %zu forks", n,
                     opts->count);
        goto fail;
    }
    if (kb_fork_opts_validate(opts, err) == 0)
        return 0;
fail:
    kb_fork_request_clear(self);
    return -1;
}

void kb_fork_request_clear(kb_fork_request_t *self)
{
    json_decref(self->body);
    free(self->ids);
    memset(self, 0, sizeof *self);
}

const char *kb_restore_request_parse(json_t **body, const char *data, size_t len, kb_error_t *err)
{
    const char *id = NULL;
    *body = kb_request_body(data, len, false, err);
    int has = *body ? kb_request_string(*body, "checkpoint_id", &id, err) : -1;
    if (has == 0)
        kb_error_set(err, KB_ERR_BAD_REQUEST, "field checkpoint_id is required");
    if (has <= 0) {
        json_decref(*body);
        *body = NULL;
        return NULL;
    }
    return id;
}
