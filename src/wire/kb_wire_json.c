/*  kb_wire_json.c - a message part loaded as a JSON object (see
    kb_wire.h), invalid UTF-8 repaired as jupyter_client does.

    Not for: frames, signatures or limits (kb_wire.c). */
#include "wire/kb_wire.h"
#include "util/kb_utf8.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/*  ---------------------------------------------------------------------
    UTF-8 repair. jupyter_client decodes frames with errors="replace", and
    Python kernels can emit invalid UTF-8 (strings holding surrogateescape
    bytes are encoded back to raw bytes). Rather than drop such output, the
    decoder replaces each maximal ill-formed subsequence by U+FFFD, exactly
    as Python does, and parses again. Only runs when jansson reports invalid
    UTF-8, and only on signed-and-verified bytes when a key is set. */

/*  A copy of s with ill-formed sequences replaced; caller frees. */
static unsigned char *utf8_repair(const unsigned char *s, size_t n, size_t *out_n)
{
    static const unsigned char replacement[3] = { 0xEF, 0xBF, 0xBD };
    size_t size = 0, bad = 0;
    for (size_t i = 0; i < n;) {
        size_t good = kb_utf8_sequence(s + i, n - i, &bad);
        size += good ? good : sizeof replacement;
        i += good ? good : bad;
    }
    unsigned char *out = malloc(size ? size : 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t good = kb_utf8_sequence(s + i, n - i, &bad);
        if (good) {
            memcpy(out + o, s + i, good);
            o += good;
            i += good;
        } else {
            memcpy(out + o, replacement, sizeof replacement);
            o += sizeof replacement;
            i += bad;
        }
    }
    *out_n = o;
    return out;
}

json_t *kb_wire_load_object(const void *data, size_t size, const char *name, kb_error_t *err)
{
    assert(data || size == 0);
    assert(name);
    json_error_t error;
    const char *text = size ? (const char *)data : "";
    json_t *value = json_loadb(text, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, &error);
    if (!value && json_error_code(&error) == json_error_invalid_utf8) {
        size_t repaired_size = 0;
        unsigned char *repaired = utf8_repair(data, size, &repaired_size);
        if (repaired)
            value = json_loadb((const char *)repaired, repaired_size,
                               JSON_DECODE_ANY | JSON_ALLOW_NUL, &error);
        free(repaired);
    }
    if (!value) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "%s is not a JSON object: %s at byte %d", name,
                     error.text, error.position);
        return NULL;
    }
    if (!json_is_object(value)) {
        static const char *const kinds[] = { "an object", "an array", "a string", "an integer",
                                             "a real",    "true",     "false",    "null" };
        int kind = json_typeof(value);
        kb_error_set(err, KB_ERR_BAD_REQUEST, "%s is not a JSON object: it is %s", name,
                     kind >= 0 && kind < 8 ? kinds[kind] : "something else");
        json_decref(value);
        return NULL;
    }
    return value;
}
