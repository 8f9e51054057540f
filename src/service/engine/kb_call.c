/*  kb_call.c - the answer handshake of a call to the engine thread. */
#include "service/engine/kb_call.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void kb_call_answer(kb_call_t *call)
{
    pthread_mutex_lock(&call->lock);
    call->done = true;
    pthread_cond_signal(&call->cond);
    pthread_mutex_unlock(&call->lock);
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
    pthread_mutex_init(&call->lock, NULL);
    pthread_cond_init(&call->cond, NULL);
}

void kb_call_fini(kb_call_t *call)
{
    pthread_mutex_destroy(&call->lock);
    pthread_cond_destroy(&call->cond);
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
