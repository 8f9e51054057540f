/*  kb_adapter.h - per-run cwd/env on a persistent context: the silent
    snippets that apply them in the context's language and restore them
    after the run (SPEC section 3). Pure text; no I/O. */
#ifndef KB_ADAPTER_H_INCLUDED
#define KB_ADAPTER_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>

/*  Whether the language has snippets. */
bool kb_adapter_supported(const char *language);

/*  The snippet that applies cwd (may be NULL) and env (an object of
    strings, may be NULL), or NULL when the language has none. Caller
    frees. */
char *kb_adapter_apply_code(const char *language, const char *cwd, const json_t *env);

/*  The snippet that restores what the apply snippet changed. Caller frees. */
char *kb_adapter_restore_code(const char *language);

#endif
