/*  kb_call.c - the answer handshake of a call to the engine thread. */
#include "service/engine/kb_call.h"

#include <linux/futex.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/*  The handshake is a futex on call->done rather than a mutex and a
    condition: the caller wakes once, to a word already set, where a
    condition signalled under its mutex woke it into that mutex, still
    held, for a second sleep and wake-up on every call. */
void kb_call_answer(kb_call_t *call)
{
    atomic_store_explicit(&call->done, 1, memory_order_release);
    /* the caller may have seen the word and let the call go already: a
       wake at an address nobody waits on does nothing, and one who waits
       there later (a new call on the same stack) looks at its own word */
    syscall(SYS_futex, &call->done, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

void kb_call_wait(kb_call_t *call)
{
    while (atomic_load_explicit(&call->done, memory_order_acquire) == 0)
        syscall(SYS_futex, &call->done, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
}

void kb_call_fail(kb_call_t *call, kb_code_t code, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    call->err.code = code;
    vsnprintf(call->err.message, sizeof call->err.message, fmt, args);
    va_end(args);
    call->rc = -1;
    json_decref(call->result);
    call->result = NULL;
    kb_call_answer(call);
}

void kb_call_init(kb_call_t *call, kb_call_type_t type)
{
    *call = (kb_call_t){ .type = type, .ask = { .cursor = -1 } };
    kb_timer_init(&call->timer);
}

void kb_call_answer_json(kb_call_t *call, json_t *result)
{
    json_decref(call->result);
    call->result = result;
    call->rc = 0;
    kb_call_answer(call);
}

void kb_call_answer_doc(kb_call_t *call, kb_result_doc_t *doc)
{
    call->doc = doc;
    kb_call_answer_json(call, NULL);
}

void kb_call_answer_text(kb_call_t *call, char *text)
{
    call->text = text;
    kb_call_answer_json(call, NULL);
}

void kb_call_answer_not_yet(kb_call_t *call)
{
    call->rc = 1;
    kb_call_answer(call);
}

void *kb_call_take_msg(kb_call_t *call)
{
    call->msg_taken = true;
    return call->ask.msg;
}

void kb_call_set_owner(kb_call_t *call, void *owner)
{
    call->owner = owner;
}

void kb_call_set_next(kb_call_t *call, kb_call_t *next)
{
    call->next = next;
}

void kb_call_refuse(kb_call_t *call, kb_code_t code, const char *message)
{
    call->rc = -1;
    call->err.code = code;
    snprintf(call->err.message, sizeof call->err.message, "%s", message);
}
