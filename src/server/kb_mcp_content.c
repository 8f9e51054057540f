/*  kb_mcp_content.c - a run's InterpreterResult as an MCP CallToolResult
    (SPEC section 14): structuredContent is the result, content what a
    model reads: text items for stdout, stderr, results' text and the
    error with its traceback (ANSI escapes removed), image items for PNG
    and JPEG outputs, embedded resources for HTML and SVG, all within a
    bound of text with a note naming get_process_logs past it. Pure: no
    service call, no I/O. */
#include "server/kb_mcp_tools.h"
#include "util/kb_alloc.h"
#include "util/kb_buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Text ------------------------------------------------------------------ */

void kb_mcp_strip_ansi(char *text)
{
    char *out = text;
    for (const char *p = text; *p;) {
        if (*p != '\x1b') {
            *out++ = *p++;
            continue;
        }
        p++;
        if (*p == '[') {
            /* CSI: parameters and intermediates, then one final byte */
            p++;
            while (*p && (unsigned char)*p >= 0x20 && (unsigned char)*p <= 0x3f)
                p++;
            while (*p && (unsigned char)*p >= 0x20 && (unsigned char)*p <= 0x2f)
                p++;
            if (*p)
                p++;
        } else if (*p == ']') {
            /* OSC: to BEL or ST */
            while (*p && *p != '\a' && !(p[0] == '\x1b' && p[1] == '\\'))
                p++;
            p += *p == '\a' ? 1 : *p ? 2 : 0;
        } else {
            /* nF (intermediates, then a final byte) or a two-byte escape */
            while (*p && (unsigned char)*p >= 0x20 && (unsigned char)*p <= 0x2f)
                p++;
            if (*p)
                p++;
        }
    }
    *out = '\0';
}

/*  The length of text's first len bytes cut back to a whole UTF-8
    character. */
static size_t s_utf8_cut(const char *text, size_t len)
{
    while (len > 0 && ((unsigned char)text[len] & 0xc0) == 0x80)
        len--;
    return len;
}

/*  A copy of text, ANSI removed, cut to *budget bytes (which it uses up);
 *cut set when something was left out. Caller frees. */
static char *s_bounded(const char *text, size_t *budget, bool *cut)
{
    char *copy = kb_xstrdup(text);
    kb_mcp_strip_ansi(copy);
    size_t len = strlen(copy);
    if (len > *budget) {
        len = s_utf8_cut(copy, *budget);
        copy[len] = '\0';
        *cut = true;
    }
    *budget -= len;
    return copy;
}

static void s_add_text(json_t *content, const char *text, size_t *budget, bool *cut)
{
    if (!text || !*text)
        return;
    if (*budget == 0) {
        *cut = true;
        return;
    }
    char *bounded = s_bounded(text, budget, cut);
    if (!*bounded) { /* all of it cut (or all of it escapes) */
        free(bounded);
        return;
    }
    json_t *item = json_pack("{s:s, s:s}", "type", "text", "text", bounded);
    KB_NOT_NULL(item);
    json_array_append_new(content, item);
    free(bounded);
}

/* ---- Results ----------------------------------------------------------------- */

static void s_add_image(json_t *content, const char *base64, const char *mime)
{
    json_t *item = json_pack("{s:s, s:s, s:s}", "type", "image", "data", base64, "mimeType", mime);
    KB_NOT_NULL(item);
    json_array_append_new(content, item);
}

static void s_add_resource(json_t *content, const char *process_id, size_t index, const char *ext,
                           const char *mime, const char *text)
{
    char uri[200];
    snprintf(uri, sizeof uri, "kernelbridge://processes/%.80s/results/%zu.%s", process_id, index,
             ext);
    json_t *item = json_pack("{s:s, s:{s:s, s:s, s:s}}", "type", "resource", "resource", "uri", uri,
                             "mimeType", mime, "text", text);
    KB_NOT_NULL(item);
    json_array_append_new(content, item);
}

/*  One results entry: its images and documents, and its text when it is
    the main result or has nothing else to show. */
static void s_add_entry(json_t *content, const json_t *entry, size_t index, const char *process_id,
                        size_t *budget, bool *cut)
{
    const json_t *data = json_object_get(entry, "data");
    const char *png = json_string_value(json_object_get(entry, "png"));
    const char *jpeg = json_string_value(json_object_get(data, "image/jpeg"));
    const char *html = json_string_value(json_object_get(entry, "html"));
    const char *svg = json_string_value(json_object_get(entry, "svg"));
    if (png)
        s_add_image(content, png, "image/png");
    if (jpeg)
        s_add_image(content, jpeg, "image/jpeg");
    if (html)
        s_add_resource(content, process_id, index, "html", "text/html", html);
    if (svg)
        s_add_resource(content, process_id, index, "svg", "image/svg+xml", svg);
    bool main = json_is_true(json_object_get(entry, "is_main_result"));
    if (main || !(png || jpeg || html || svg))
        s_add_text(content, json_string_value(json_object_get(entry, "text")), budget, cut);
}

/*  The error as a model reads it: the traceback, or name: value. */
static void s_add_error(json_t *content, const json_t *error, size_t *budget, bool *cut)
{
    if (!json_is_object(error))
        return;
    kb_buf_t text = KB_BUF_INIT;
    const json_t *traceback = json_object_get(error, "traceback");
    size_t i;
    const json_t *line;
    json_array_foreach(traceback, i, line) if (json_is_string(line))
        kb_buf_printf(&text, "%s%s", i ? "\n" : "", json_string_value(line));
    if (text.len == 0)
        kb_buf_printf(&text, "%s: %s", json_string_value(json_object_get(error, "name")),
                      json_string_value(json_object_get(error, "value")));
    if (kb_buf_status(&text) == KB_BUF_OK)
        s_add_text(content, kb_buf_cstr(&text), budget, cut);
    else
        *cut = true;
    kb_buf_free(&text);
}

/*  structuredContent's logs cut to max_text each; true when one was. */
static bool s_bound_logs(json_t *structured, size_t max_text)
{
    bool cut = false;
    json_t *logs = json_object_get(structured, "logs");
    const char *names[] = { "stdout", "stderr" };
    for (size_t i = 0; i < 2; i++) {
        const char *text = json_string_value(json_object_get(logs, names[i]));
        size_t len = text ? strlen(text) : 0;
        if (len <= max_text)
            continue;
        json_object_set_new(logs, names[i], json_stringn(text, s_utf8_cut(text, max_text)));
        cut = true;
    }
    return cut;
}

json_t *kb_mcp_run_result(const json_t *result, size_t max_text)
{
    json_t *content = json_array();
    KB_NOT_NULL(content);
    size_t budget = max_text;
    bool cut = false;
    const json_t *logs = json_object_get(result, "logs");
    const char *process_id
        = json_string_value(json_object_get(json_object_get(result, "process"), "process_id"));
    process_id = process_id ? process_id : "";
    s_add_text(content, json_string_value(json_object_get(logs, "stdout")), &budget, &cut);
    s_add_text(content, json_string_value(json_object_get(logs, "stderr")), &budget, &cut);
    size_t i;
    const json_t *entry;
    json_array_foreach(json_object_get(result, "results"), i, entry)
        s_add_entry(content, entry, i, process_id, &budget, &cut);
    const json_t *error = json_object_get(result, "error");
    s_add_error(content, error, &budget, &cut);
    json_t *structured = json_deep_copy(result);
    KB_NOT_NULL(structured);
    if (s_bound_logs(structured, max_text) || cut) {
        cut = true;
        json_object_set_new(structured, "truncated", json_true());
    }
    if (cut) {
        char note[400];
        snprintf(note, sizeof note,
                 "[output cut: a call shows at most %zu bytes of text; the full logs: "
                 "get_process_logs with process_id \"%.80s\"]",
                 max_text, process_id);
        json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text", "text", note));
    }
    if (json_array_size(content) == 0)
        json_array_append_new(content,
                              json_pack("{s:s, s:s}", "type", "text", "text", "(no output)"));
    json_t *out = json_pack("{s:o, s:o, s:b}", "content", content, "structuredContent", structured,
                            "isError", json_is_object(error));
    KB_NOT_NULL(out);
    return out;
}
