/*  scan_reference.h - what kb_scan_stream must find in a content frame,
    found the slow way: kb_wire_decode parses the frame as the content of
    a message (jansson, after kb_wire's UTF-8 repair), and name and text
    are read from the tree; and what kb_scan_fields must find in any part,
    read from kb_wire_load_object's tree. Header-only, shared by
    tests/test_scan.c and tests/fuzz/fuzz_scan.c, so that both check the
    same thing. */
#ifndef SCAN_REFERENCE_H_INCLUDED
#define SCAN_REFERENCE_H_INCLUDED

#include "wire/kb_scan.h"
#include "util/kb_utf8.h"
#include "wire/kb_wire.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    bool ok;        /* kb_wire_decode accepted the frame as content */
    char name[8];   /* "stdout", "stderr" or "" */
    bool present;   /* text is a string or an array of strings */
    char *text;     /* the text, joined; owned, NULL when absent */
    size_t len;     /* its bytes */
    kb_error_t why; /* kb_wire's reason when !ok */
} scan_reference_t;

static inline void scan_reference_free(scan_reference_t *ref)
{
    free(ref->text);
    ref->text = NULL;
}

/*  Decode frame[0..len) (borrowed) through wire (an unkeyed codec). */
static inline void scan_reference(kb_wire_t *wire, const void *frame, size_t len,
                                  scan_reference_t *ref)
{
    static char header[] = "{\"msg_id\":\"m\",\"msg_type\":\"stream\",\"session\":\"s\","
                           "\"version\":\"5.3\"}";
    static char empty[] = "{}";
    static char delimiter[] = KB_WIRE_DELIMITER;
    static char nothing[1];
    memset(ref, 0, sizeof *ref);
    kb_frame_t frames[6] = {
        { (unsigned char *)delimiter, sizeof delimiter - 1 },
        { (unsigned char *)nothing, 0 },
        { (unsigned char *)header, sizeof header - 1 },
        { (unsigned char *)empty, 2 },
        { (unsigned char *)empty, 2 },
        { (unsigned char *)(len ? frame : nothing), len },
    };
    kb_msg_t *msg = NULL;
    if (kb_wire_decode(wire, frames, 6, &msg, &ref->why) != KB_WIRE_OK)
        return;
    ref->ok = true;
    const json_t *name = json_object_get(msg->content, "name");
    if (json_is_string(name) && json_string_length(name) == 6
        && (strcmp(json_string_value(name), "stdout") == 0
            || strcmp(json_string_value(name), "stderr") == 0))
        memcpy(ref->name, json_string_value(name), 7);
    const json_t *text = json_object_get(msg->content, "text");
    if (json_is_string(text)) {
        ref->present = true;
        ref->len = json_string_length(text);
        ref->text = malloc(ref->len + 1);
        memcpy(ref->text, json_string_value(text), ref->len + 1);
    } else if (json_is_array(text)) {
        size_t i, total = 0;
        json_t *item;
        ref->present = true;
        json_array_foreach(text, i, item)
        {
            if (!json_is_string(item))
                ref->present = false;
            else
                total += json_string_length(item);
        }
        if (ref->present) {
            ref->text = malloc(total + 1);
            json_array_foreach(text, i, item)
            {
                memcpy(ref->text + ref->len, json_string_value(item), json_string_length(item));
                ref->len += json_string_length(item);
            }
            ref->text[ref->len] = '\0';
        }
    }
    if (!ref->present)
        ref->len = 0;
    kb_msg_destroy(&msg);
}

/*  Scan frame with kb_scan_stream into a buffer holding prefix, and
    compare with ref. NULL when they agree, else what differs (a static
    string, valid until the next call). */
static inline const char *scan_compare(const void *frame, size_t len, size_t max,
                                       const scan_reference_t *ref, const char *prefix)
{
    static char diff[512];
    kb_buf_t out = KB_BUF_INIT;
    size_t prefix_len = strlen(prefix);
    kb_buf_puts(&out, prefix);
    kb_scan_stream_t res;
    memset(&res, 0x5A, sizeof res);
    kb_error_t why = { KB_OK, "untouched" };
    int rc = kb_scan_stream(frame, len, max, &out, &res, &why);
    diff[0] = '\0';
    size_t cut = ref->present ? kb_utf8_prefix(ref->text, ref->len, max) : 0;
    if ((rc == 0) != ref->ok)
        snprintf(diff, sizeof diff, "scan %s (%.200s), jansson %s (%.200s)",
                 rc == 0 ? "accepts" : "refuses", rc == 0 ? "" : why.message,
                 ref->ok ? "accepts" : "refuses", ref->why.message);
    else if (rc != 0 && (!why.message[0] || strcmp(why.message, "untouched") == 0))
        snprintf(diff, sizeof diff, "refused without a reason");
    else if (rc != 0 && (res.text_bytes || res.kept_bytes || res.text_present || res.name[0]))
        snprintf(diff, sizeof diff, "refused but the result is not zeroed");
    else if (out.len < prefix_len || memcmp(kb_buf_cstr(&out), prefix, prefix_len) != 0)
        snprintf(diff, sizeof diff, "what out held before is changed");
    else if (rc != 0 && out.len != prefix_len)
        snprintf(diff, sizeof diff, "refused but out grew by %zu", out.len - prefix_len);
    else if (rc == 0 && (strcmp(res.name, ref->name) != 0 || res.name[7] != '\0'))
        snprintf(diff, sizeof diff, "name \"%.8s\", jansson \"%s\"", res.name, ref->name);
    else if (rc == 0 && res.text_present != ref->present)
        snprintf(diff, sizeof diff, "text_present %d, jansson %d", res.text_present, ref->present);
    else if (rc == 0 && res.text_bytes != ref->len)
        snprintf(diff, sizeof diff, "text_bytes %zu, jansson %zu", res.text_bytes, ref->len);
    else if (rc == 0 && (res.kept_bytes != cut || out.len != prefix_len + cut))
        snprintf(diff, sizeof diff, "kept %zu (out grew by %zu), expected %zu of %zu under max %zu",
                 res.kept_bytes, out.len - prefix_len, cut, ref->len, max);
    else if (rc == 0 && cut && memcmp(kb_buf_cstr(&out) + prefix_len, ref->text, cut) != 0)
        snprintf(diff, sizeof diff, "the kept %zu bytes differ from jansson's text", cut);
    else if (rc == 0 && why.message[0])
        snprintf(diff, sizeof diff, "accepted with a reason: %.400s", why.message);
    kb_buf_free(&out);
    return diff[0] ? diff : NULL;
}

/*  Read the members "text", "name", "msg_id" and "a" of frame with
    kb_scan_fields into a buffer holding a prefix, and compare with the
    tree kb_wire_load_object makes of it: the same accept or refuse, and
    for each member the same kind, and a string's bytes (and NUL flag).
    NULL when they agree, else what differs (a static string). */
static inline const char *fields_compare(const void *frame, size_t len)
{
    static char diff[512];
    static const char *const keys[4] = { "text", "name", "msg_id", "a" };
    kb_scan_field_t fields[4];
    for (int i = 0; i < 4; i++)
        fields[i] = (kb_scan_field_t){ .key = keys[i], .kind = KB_SCAN_OTHER, .at = 99 };
    kb_buf_t out = KB_BUF_INIT;
    kb_buf_puts(&out, "held");
    kb_error_t why = { KB_OK, "untouched" }, jwhy;
    int rc = kb_scan_fields(frame, len, fields, 4, &out, &why);
    json_t *tree = kb_wire_load_object(frame, len, "part", &jwhy);
    diff[0] = '\0';
    if ((rc == 0) != (tree != NULL))
        snprintf(diff, sizeof diff, "fields %s (%.200s), jansson %s (%.200s)",
                 rc == 0 ? "accepts" : "refuses", rc == 0 ? "" : why.message,
                 tree ? "accepts" : "refuses", tree ? "" : jwhy.message);
    else if (rc != 0 && (!why.message[0] || strcmp(why.message, "untouched") == 0))
        snprintf(diff, sizeof diff, "fields: refused without a reason");
    else if (out.len < 4 || memcmp(kb_buf_cstr(&out), "held", 4) != 0 || (rc != 0 && out.len != 4))
        snprintf(diff, sizeof diff, "fields: what out held before is changed");
    for (int i = 0; i < 4 && rc == 0 && !diff[0]; i++) {
        const json_t *value = json_object_get(tree, keys[i]);
        kb_scan_kind_t kind = !value                  ? KB_SCAN_ABSENT
                              : json_is_null(value)   ? KB_SCAN_NULL
                              : json_is_string(value) ? KB_SCAN_STRING
                                                      : KB_SCAN_OTHER;
        const kb_scan_field_t *f = &fields[i];
        if (f->kind != kind)
            snprintf(diff, sizeof diff, "fields: \"%s\" is of kind %d, jansson %d", keys[i],
                     (int)f->kind, (int)kind);
        else if (kind == KB_SCAN_STRING
                 && (f->bytes != json_string_length(value) || f->at + f->bytes >= out.len
                     || memcmp(out.data + f->at, json_string_value(value), f->bytes) != 0
                     || out.data[f->at + f->bytes] != '\0'
                     || f->nul != (strlen(json_string_value(value)) != f->bytes)))
            snprintf(diff, sizeof diff, "fields: \"%s\" differs from jansson's string", keys[i]);
    }
    json_decref(tree);
    kb_buf_free(&out);
    return diff[0] ? diff : NULL;
}

#endif
