/*  fuzz_mcp.c - libFuzzer target for the MCP server's pure parts
    (src/server/kb_mcp.c, kb_mcp_content.c): a POST body or a stdio line
    parsed as JSON-RPC, and any JSON value rendered as a run's content.

    Input layout: byte 0 is the text bound for the content (its value,
    0..255 bytes; 0 is 1), the rest the message, in an allocation of its
    own size (no NUL after it) so that ASan sees any over-read.

    Checks beyond "no crash, no leak": parsing gives a message or an
    error response, never both nor neither, and the error is -32700 or
    -32600 with a null id; the content is an array of items with a type
    each, whose text items hold valid UTF-8 (jansson refuses any other)
    without ESC, and at most the bound of text but the note's. Built by
    CMake with -DKB_FUZZ=ON -DCMAKE_C_COMPILER=clang. */
#include "server/kb_mcp.h"
#include "server/kb_mcp_tools.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check(int ok)
{
    if (!ok)
        abort();
}

static void check_content(const json_t *out, size_t bound)
{
    const json_t *content = json_object_get(out, "content");
    check(json_is_array(content) && json_array_size(content) > 0);
    size_t text = 0, i;
    const json_t *item;
    json_array_foreach(content, i, item)
    {
        const char *type = json_string_value(json_object_get(item, "type"));
        check(type != NULL);
        const char *s = json_string_value(json_object_get(item, "text"));
        if (strcmp(type, "text") != 0 || !s)
            continue;
        check(strchr(s, '\x1b') == NULL);
        if (strncmp(s, "[output cut", 11) != 0 && strcmp(s, "(no output)") != 0)
            text += strlen(s);
    }
    check(text <= bound);
    check(json_is_boolean(json_object_get(out, "isError")));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t bound = data[0] ? data[0] : 1;
    size_t len = size - 1;
    char *text = malloc(len ? len : 1);
    if (!text)
        return 0;
    memcpy(text, data + 1, len);
    json_t *error = NULL;
    json_t *message = kb_mcp_parse(text, len, &error);
    check((message == NULL) != (error == NULL));
    if (error) {
        json_int_t code
            = json_integer_value(json_object_get(json_object_get(error, "error"), "code"));
        check(code == KB_RPC_PARSE_ERROR || code == KB_RPC_INVALID_REQUEST);
        check(json_is_null(json_object_get(error, "id")));
    }
    if (message) {
        (void)kb_mcp_request_method(message);
        (void)kb_mcp_wants_progress(message);
        json_t *out = kb_mcp_run_result(message, bound);
        check_content(out, bound);
        json_decref(out);
    }
    json_decref(message);
    json_decref(error);
    free(text);
    return 0;
}
