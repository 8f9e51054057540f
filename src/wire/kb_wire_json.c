/*  kb_wire_json.c - a message's four JSON parts (see kb_wire.h): a part
    loaded as a JSON object, invalid UTF-8 repaired as jupyter_client
    does; a decoded message's header, parent_header and metadata checked
    and their ids read by kb_scan_fields, their trees built only when
    asked for; the ids of a message made of trees.

    Not for: frames, signatures or limits (kb_wire.c). */
#include "wire/kb_wire.h"
#include "util/kb_buf.h"
#include "util/kb_utf8.h"
#include "wire/kb_scan.h"
#include "wire/kb_wire_impl.h"

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

/*  ---------------------------------------------------------------------
    The parts of a message */

enum { PART_HEADER, PART_PARENT, PART_METADATA, PART_CONTENT };
static const char *const part_names[4] = { "header", "parent_header", "metadata", "content" };

/*  Where a message's ids are read from: the header's msg_type, msg_id
    and date, the parent_header's msg_id; and their decoded text. */
typedef struct {
    kb_scan_field_t header[3];
    kb_scan_field_t parent[1];
    kb_buf_t text;
} ids_t;

static void ids_init(ids_t *ids)
{
    *ids = (ids_t){ .header = { { .key = "msg_type" }, { .key = "msg_id" }, { .key = "date" } },
                    .parent = { { .key = "msg_id" } },
                    .text = KB_BUF_INIT };
}

/*  fields read from a tree, as kb_scan_fields reads them from bytes. */
static int fields_of(const json_t *object, kb_scan_field_t *fields, size_t count, kb_buf_t *text)
{
    for (size_t i = 0; i < count; i++) {
        kb_scan_field_t *field = &fields[i];
        const json_t *value = json_object_get(object, field->key);
        field->kind = !value                  ? KB_SCAN_ABSENT
                      : json_is_null(value)   ? KB_SCAN_NULL
                      : json_is_string(value) ? KB_SCAN_STRING
                                              : KB_SCAN_OTHER;
        if (field->kind != KB_SCAN_STRING)
            continue;
        field->at = text->len;
        field->bytes = json_string_length(value);
        field->nul = strlen(json_string_value(value)) != field->bytes;
        kb_buf_append(text, json_string_value(value), field->bytes);
        kb_buf_putc(text, '\0');
    }
    return kb_buf_status(text) == KB_BUF_OK ? 0 : -1;
}

/*  Check a part's bytes and read its fields, with the scanner; when it
    refuses them, jansson decides, and its reason is given (should it
    accept them, its tree is kept in *tree and the fields are read from
    that). 0, or -1 with the reason in why. */
static int scan_part(const kb_frame_t *frame, int part, kb_scan_field_t *fields, size_t count,
                     kb_buf_t *text, json_t **tree, kb_error_t *why)
{
    if (kb_scan_fields((const char *)frame->data, frame->size, fields, count, text, NULL) == 0)
        return 0;
    *tree = kb_wire_load_object(frame->data, frame->size, part_names[part], why);
    if (!*tree)
        return -1;
    if (fields_of(*tree, fields, count, text) != 0) {
        kb_error_set(why, KB_ERR_BAD_REQUEST, "out of memory");
        return -1;
    }
    return 0;
}

/*  A non-empty string without NUL. */
static bool plain(const kb_scan_field_t *field)
{
    return field->kind == KB_SCAN_STRING && field->bytes > 0 && !field->nul;
}

/*  Check the ids and point msg's at them; their text becomes the
    message's. 0, or -1 with the reason in why. */
static int ids_finish(ids_t *ids, kb_msg_t *msg, kb_error_t *why)
{
    const kb_scan_field_t *parent = &ids->parent[0];
    if (!plain(&ids->header[0])) {
        kb_error_set(why, KB_ERR_BAD_REQUEST, "header lacks msg_type (a non-empty string)");
        return -1;
    }
    if (!plain(&ids->header[1])) {
        kb_error_set(why, KB_ERR_BAD_REQUEST, "header lacks msg_id (a non-empty string)");
        return -1;
    }
    /* Unsolicited messages have an empty parent_header; one that names a
       parent must do so with a string. */
    if (parent->kind == KB_SCAN_OTHER || (parent->kind == KB_SCAN_STRING && parent->nul)) {
        kb_error_set(why, KB_ERR_BAD_REQUEST, "parent_header msg_id is not a string");
        return -1;
    }
    if (!(msg->ids = kb_buf_take(&ids->text, NULL))) {
        kb_error_set(why, KB_ERR_BAD_REQUEST, "out of memory");
        return -1;
    }
    msg->msg_type = msg->ids + ids->header[0].at;
    msg->msg_id = msg->ids + ids->header[1].at;
    msg->date = ids->header[2].kind == KB_SCAN_STRING ? msg->ids + ids->header[2].at : NULL;
    msg->parent_msg_id = parent->kind == KB_SCAN_STRING ? msg->ids + parent->at : "";
    return 0;
}

/*  The bytes of header, parent_header and metadata, in one block. */
static int keep_raw(kb_msg_t *msg, const kb_frame_t parts[3])
{
    size_t total = parts[0].size + parts[1].size + parts[2].size;
    unsigned char *block = malloc(total ? total : 1);
    if (!block)
        return -1;
    size_t at = 0;
    for (int i = 0; i < 3; i++) {
        if (parts[i].size)
            memcpy(block + at, parts[i].data, parts[i].size);
        msg->raw_parts[i] = (kb_frame_t){ block + at, parts[i].size };
        at += parts[i].size;
    }
    return 0;
}

int kb_wire_read_parts(kb_msg_t *msg, const kb_frame_t parts[4], bool lazy_streams, kb_error_t *why)
{
    ids_t ids;
    ids_init(&ids);
    int rc = -1;
    if (scan_part(&parts[PART_HEADER], PART_HEADER, ids.header, 3, &ids.text, &msg->header_json,
                  why)
        != 0)
        goto done;
    if (!plain(&ids.header[0])) {
        kb_error_set(why, KB_ERR_BAD_REQUEST, "header lacks msg_type (a non-empty string)");
        goto done;
    }
    bool stream = lazy_streams && ids.header[0].bytes == 6
                  && memcmp(ids.text.data + ids.header[0].at, "stream", 6) == 0;
    if (scan_part(&parts[PART_PARENT], PART_PARENT, ids.parent, 1, &ids.text, &msg->parent_json,
                  why)
            != 0
        || scan_part(&parts[PART_METADATA], PART_METADATA, NULL, 0, &ids.text, &msg->metadata_json,
                     why)
               != 0)
        goto done;
    if (stream) {
        /* Left to the caller's scanner (kb_scan.h): no tree is built. */
        msg->content = json_object();
        msg->raw_content = parts[PART_CONTENT];
    } else if (!(msg->content = kb_wire_load_object(parts[PART_CONTENT].data,
                                                    parts[PART_CONTENT].size, "content", why)))
        goto done;
    if (!msg->content || keep_raw(msg, parts) != 0) {
        kb_error_set(why, KB_ERR_BAD_REQUEST, "out of memory");
        goto done;
    }
    rc = ids_finish(&ids, msg, why);
done:
    kb_buf_free(&ids.text);
    return rc;
}

/*  A part's tree, parsed from its kept bytes on first use. */
static json_t *part_of(const kb_msg_t *msg, int part)
{
    kb_msg_t *self = (kb_msg_t *)msg; /* a memo: parsing changes what is stored, not what is said */
    json_t **tree = part == PART_HEADER   ? &self->header_json
                    : part == PART_PARENT ? &self->parent_json
                                          : &self->metadata_json;
    const kb_frame_t *raw = &self->raw_parts[part];
    if (!*tree && raw->data)
        *tree = kb_wire_load_object(raw->data, raw->size, part_names[part], NULL);
    return *tree;
}

json_t *kb_msg_header(const kb_msg_t *msg)
{
    assert(msg);
    return part_of(msg, PART_HEADER);
}

json_t *kb_msg_parent_header(const kb_msg_t *msg)
{
    assert(msg);
    return part_of(msg, PART_PARENT);
}

json_t *kb_msg_metadata(const kb_msg_t *msg)
{
    assert(msg);
    return part_of(msg, PART_METADATA);
}

kb_wire_status_t kb_wire_msg_new(json_t *header, json_t *parent_header, json_t *metadata,
                                 json_t *content, kb_msg_t **msg_out, kb_error_t *err)
{
    assert(msg_out);
    *msg_out = NULL;
    kb_msg_t *msg = calloc(1, sizeof *msg);
    if (!msg) {
        json_decref(header);
        json_decref(parent_header);
        json_decref(metadata);
        json_decref(content);
        kb_error_set(err, KB_ERR_BAD_REQUEST, "out of memory");
        return KB_WIRE_MALFORMED;
    }
    msg->header_json = header;
    msg->parent_json = parent_header;
    msg->metadata_json = metadata;
    msg->content = content;
    kb_error_t why = { 0 };
    const json_t *parts[4] = { header, parent_header, metadata, content };
    ids_t ids;
    ids_init(&ids);
    int rc = 0;
    for (int i = 0; i < 4 && rc == 0; i++)
        if (!json_is_object(parts[i])) {
            kb_error_set(&why, KB_ERR_BAD_REQUEST, "%s is not a JSON object", part_names[i]);
            rc = -1;
        }
    if (rc == 0
        && (fields_of(header, ids.header, 3, &ids.text) != 0
            || fields_of(parent_header, ids.parent, 1, &ids.text) != 0)) {
        kb_error_set(&why, KB_ERR_BAD_REQUEST, "out of memory");
        rc = -1;
    }
    if (rc == 0)
        rc = ids_finish(&ids, msg, &why);
    kb_buf_free(&ids.text);
    if (rc != 0) {
        kb_msg_destroy(&msg);
        kb_error_set(err, KB_ERR_BAD_REQUEST, "%s", why.message);
        return KB_WIRE_MALFORMED;
    }
    kb_error_clear(err);
    *msg_out = msg;
    return KB_WIRE_OK;
}
