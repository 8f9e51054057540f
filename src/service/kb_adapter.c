/*  kb_adapter.c - per-run cwd/env on a persistent context: the silent
    snippets that apply them before a run and restore them after, one pair
    per language. The apply snippet saves what it changes first, so the
    restore snippet puts back exactly that even when applying failed half
    way (a cwd that does not exist). Values are embedded as JSON string
    literals, which are valid string literals in these languages.
*/
#include "service/kb_engine.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *language;
    char *(*apply)(const char *cwd_literal, const char *keys_literal, const char *env_literal);
    const char *restore;
} kb_adapter_t;

/*  Python: state saved on a stack kept on the os module, so that nothing
    is left in the user's namespace. */
static char *s_python_apply(const char *cwd, const char *keys, const char *env)
{
    return zsys_sprintf("(lambda o, c, k, e: (o.__dict__.setdefault('_kb_saved', []).append("
                        "(o.getcwd(), {n: o.environ.get(n) for n in k})), o.environ.update(e), "
                        "o.chdir(c) if c is not None else None))(__import__('os'), %s, %s, %s)",
                        cwd, keys, env);
}

static const char s_python_restore[]
    = "(lambda o: (lambda s: (o.chdir(s[0]), [o.environ.pop(n, None) if v is None else "
      "o.environ.__setitem__(n, v) for n, v in s[1].items()]))(o.__dict__['_kb_saved'].pop()) "
      "if o.__dict__.get('_kb_saved') else None)(__import__('os'))";

static const kb_adapter_t s_adapters[] = {
    { "python", s_python_apply, s_python_restore },
};

static const kb_adapter_t *s_find(const char *language)
{
    for (size_t i = 0; i < sizeof s_adapters / sizeof s_adapters[0]; i++)
        if (strcmp(s_adapters[i].language, language) == 0)
            return &s_adapters[i];
    return NULL;
}

bool kb_adapter_supported(const char *language)
{
    return s_find(language) != NULL;
}

char *kb_adapter_apply_code(const char *language, const char *cwd, const json_t *env)
{
    const kb_adapter_t *adapter = s_find(language);
    assert(adapter);
    json_t *cwd_json = cwd ? json_string(cwd) : json_null();
    json_t *keys = json_array();
    json_t *values = env ? json_deep_copy(env) : json_object();
    const char *key;
    json_t *value;
    json_object_foreach(values, key, value) json_array_append_new(keys, json_string(key));
    char *cwd_text = json_dumps(cwd_json, JSON_ENCODE_ANY);
    char *keys_text = json_dumps(keys, JSON_COMPACT);
    char *env_text = json_dumps(values, JSON_COMPACT);
    /*  JSON null is not Python's None. */
    char *code = adapter->apply(cwd ? cwd_text : "None", keys_text, env_text);
    free(cwd_text);
    free(keys_text);
    free(env_text);
    json_decref(cwd_json);
    json_decref(keys);
    json_decref(values);
    return code;
}

char *kb_adapter_restore_code(const char *language)
{
    const kb_adapter_t *adapter = s_find(language);
    assert(adapter);
    return strdup(adapter->restore);
}
