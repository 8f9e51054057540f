/*  kb_wsmsg.c - the kernel websocket codec (see kb_wsmsg.h).

    Sections: names; parse (offset tables, parts, the three framings);
    encode; the daemon's status message.

    Not for: the JSON checks and the signing of a message, which are
    kb_wire's (kb_wire_load_object, kb_wire_msg_new, kb_wire_encode_msg);
    nor sockets, clocks or globals. */
#include "wire/kb_wsmsg.h"

#include <assert.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KB_WSMSG_DEFAULT_MAX_BUFFERS 1018
#define KB_WSMSG_DEFAULT_MAX_BYTES ((size_t)256 << 20)
#define KB_WSMSG_V1_MIN_OFFSETS 6 /* channel, header, parent, metadata, content, end */

/*  ---------------------------------------------------------------------
    Names */

static const char *const channel_names[] = { "shell", "control", "stdin", "iopub" };

const char *kb_wsmsg_channel_name(kb_wsmsg_channel_t channel)
{
    assert(channel >= KB_WSMSG_SHELL && channel <= KB_WSMSG_IOPUB);
    return channel_names[channel];
}

const char *kb_wsmsg_status_str(kb_wsmsg_status_t status)
{
    switch (status) {
        case KB_WSMSG_OK:
            return "ok";
        case KB_WSMSG_MALFORMED:
            return "malformed";
        case KB_WSMSG_BAD_CHANNEL:
            return "bad channel";
        case KB_WSMSG_TOO_LARGE:
            return "too large";
    }
    return "unknown status";
}

kb_wsmsg_protocol_t kb_wsmsg_select_protocol(const char *offered)
{
    static const size_t v1_len = sizeof KB_WSMSG_V1_SUBPROTOCOL - 1;
    for (const char *at = offered; at && *at;) {
        at += strspn(at, " \t,");
        size_t len = strcspn(at, " \t,");
        if (len == v1_len && memcmp(at, KB_WSMSG_V1_SUBPROTOCOL, len) == 0)
            return KB_WSMSG_V1;
        at += len;
    }
    return KB_WSMSG_LEGACY;
}

/*  ---------------------------------------------------------------------
    Parse */

static kb_wsmsg_status_t fail(kb_wsmsg_status_t status, kb_error_t *err, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static kb_wsmsg_status_t fail(kb_wsmsg_status_t status, kb_error_t *err, const char *format, ...)
{
    if (err) {
        va_list args;
        va_start(args, format);
        err->code = KB_ERR_BAD_REQUEST;
        vsnprintf(err->message, sizeof err->message, format, args);
        va_end(args);
    }
    return status;
}

/*  An offset table read and checked: offsets[i] for i < count, each within
    [table end, size] and never below the one before. */
typedef struct {
    const unsigned char *data;
    size_t size;
    size_t count;
    size_t width;        /* 4 (legacy, big-endian) or 8 (v1, little-endian) */
    size_t table_end;    /* where the parts begin */
    bool last_is_offset; /* v1: offsets[count - 1] is the end; legacy: size is */
} offsets_t;

static uint64_t offset_at(const offsets_t *table, size_t i)
{
    const unsigned char *p = table->data + table->width * (i + 1);
    uint64_t value = 0;
    if (table->width == 4)
        value = (uint64_t)p[0] << 24 | (uint64_t)p[1] << 16 | (uint64_t)p[2] << 8 | p[3];
    else
        for (int b = 7; b >= 0; b--)
            value = value << 8 | p[b];
    return value;
}

/*  The bytes of part i: from offsets[i] to offsets[i + 1], or to the end
    of the payload for the last part of a legacy frame. Checked already. */
static kb_frame_t part_at(const offsets_t *table, size_t i)
{
    size_t start = (size_t)offset_at(table, i);
    size_t stop = i + 1 < table->count ? (size_t)offset_at(table, i + 1) : table->size;
    return (kb_frame_t){ (unsigned char *)table->data + start, stop - start };
}

/*  Read the count and check every offset, before any part is looked at. */
static kb_wsmsg_status_t read_offsets(offsets_t *table, size_t min_count, size_t max_count,
                                      kb_error_t *err)
{
    size_t width = table->width;
    if (table->size < width)
        return fail(KB_WSMSG_MALFORMED, err, "truncated: %zu bytes, the offset count takes %zu",
                    table->size, width);
    uint64_t count = 0;
    if (width == 4)
        count = (uint64_t)table->data[0] << 24 | (uint64_t)table->data[1] << 16
                | (uint64_t)table->data[2] << 8 | table->data[3];
    else
        for (int b = 7; b >= 0; b--)
            count = count << 8 | table->data[b];
    if (count < min_count)
        return fail(KB_WSMSG_MALFORMED, err, "%llu offsets, at least %zu needed",
                    (unsigned long long)count, min_count);
    if (count > max_count)
        return fail(KB_WSMSG_TOO_LARGE, err, "%llu offsets, limit %zu", (unsigned long long)count,
                    max_count);
    if (count > table->size / width - 1) /* size >= width: no wrap */
        return fail(
            KB_WSMSG_MALFORMED, err, "truncated: %llu offsets need %llu bytes, the payload has %zu",
            (unsigned long long)count, (unsigned long long)(count + 1) * width, table->size);
    table->count = (size_t)count;
    table->table_end = width * (table->count + 1);

    uint64_t previous = table->table_end;
    for (size_t i = 0; i < table->count; i++) {
        uint64_t offset = offset_at(table, i);
        if (i == 0 && offset != table->table_end)
            return fail(KB_WSMSG_MALFORMED, err,
                        "offset 0 (%llu) is not the end of the offset table (%zu)",
                        (unsigned long long)offset, table->table_end);
        if (offset < previous)
            return fail(KB_WSMSG_MALFORMED, err, "offset %zu (%llu) is before offset %zu", i,
                        (unsigned long long)offset, i - 1);
        if (offset > table->size)
            return fail(KB_WSMSG_MALFORMED, err,
                        "offset %zu (%llu) is past the payload's %zu bytes", i,
                        (unsigned long long)offset, table->size);
        previous = offset;
    }
    if (table->last_is_offset && previous != table->size)
        return fail(KB_WSMSG_MALFORMED, err,
                    "the last offset (%llu) is not the payload's size (%zu)",
                    (unsigned long long)previous, table->size);
    return KB_WSMSG_OK;
}

/*  Copies of parts [first, first + count) as a message's buffers. */
static kb_frame_t *copy_buffers(const offsets_t *table, size_t first, size_t count)
{
    kb_frame_t *buffers = calloc(count ? count : 1, sizeof *buffers);
    if (!buffers)
        return NULL;
    for (size_t i = 0; i < count; i++) {
        kb_frame_t part = part_at(table, first + i);
        buffers[i].data = malloc(part.size ? part.size : 1);
        if (!buffers[i].data) {
            kb_frames_free(buffers, i);
            return NULL;
        }
        if (part.size)
            memcpy(buffers[i].data, part.data, part.size);
        buffers[i].size = part.size;
    }
    return buffers;
}

static kb_wsmsg_status_t channel_of(const char *name, size_t len, kb_wsmsg_channel_t *out,
                                    kb_error_t *err)
{
    for (int c = KB_WSMSG_SHELL; c <= KB_WSMSG_STDIN; c++)
        if (strlen(channel_names[c]) == len && memcmp(channel_names[c], name, len) == 0) {
            *out = (kb_wsmsg_channel_t)c;
            return KB_WSMSG_OK;
        }
    char shown[40];
    size_t n = len < sizeof shown - 1 ? len : sizeof shown - 1;
    for (size_t i = 0; i < n; i++)
        shown[i] = name[i] >= 0x20 && name[i] < 0x7f && name[i] != '"' ? name[i] : '?';
    shown[n] = '\0';
    return fail(KB_WSMSG_BAD_CHANNEL, err, "channel \"%s%s\" is not shell, control or stdin", shown,
                len > n ? "..." : "");
}

/*  A part that clients may leave out: absent, null (legacy) or empty (v1)
    is {}. Returns a new reference, or NULL when it is there but no object. */
static json_t *optional_object(const json_t *value)
{
    if (!value || json_is_null(value))
        return json_object();
    return json_is_object(value) ? json_incref((json_t *)value) : NULL;
}

/*  The legacy JSON object root (stolen) with buffers (stolen) as a message. */
static kb_wsmsg_status_t legacy_message(json_t *root, kb_frame_t *buffers, size_t buffers_len,
                                        kb_wsmsg_channel_t *channel_out, kb_msg_t **msg_out,
                                        kb_error_t *err)
{
    kb_error_t reason = { 0 };
    kb_wsmsg_status_t status = KB_WSMSG_MALFORMED;
    const json_t *header = json_object_get(root, "header");
    const json_t *content = json_object_get(root, "content");
    json_t *parent = optional_object(json_object_get(root, "parent_header"));
    json_t *metadata = optional_object(json_object_get(root, "metadata"));
    const json_t *channel = json_object_get(root, "channel");
    kb_msg_t *msg = NULL;
    if (!parent || !metadata) {
        kb_error_set(&reason, KB_ERR_BAD_REQUEST, "%s is not a JSON object",
                     parent ? "metadata" : "parent_header");
        json_decref(parent);
        json_decref(metadata);
        goto done;
    }
    /* kb_wire_msg_new says which of header and content is no object. */
    if (kb_wire_msg_new(json_incref((json_t *)header), parent, metadata,
                        json_incref((json_t *)content), &msg, &reason)
        != KB_WIRE_OK)
        goto done;
    if (channel && !json_is_null(channel) && !json_is_string(channel)) {
        kb_error_set(&reason, KB_ERR_BAD_REQUEST, "channel is not a string");
        goto done;
    }
    if (!channel || json_is_null(channel))
        *channel_out = KB_WSMSG_SHELL; /* as Jupyter Server takes it */
    else if ((status = channel_of(json_string_value(channel), json_string_length(channel),
                                  channel_out, &reason))
             != KB_WSMSG_OK)
        goto done;
    msg->buffers = buffers;
    msg->buffers_len = buffers_len;
    buffers = NULL;
    *msg_out = msg;
    msg = NULL;
    status = KB_WSMSG_OK;

done:
    if (status == KB_WSMSG_OK)
        kb_error_clear(err);
    else
        kb_error_set(err, reason.code, "%s", reason.message);
    kb_msg_destroy(&msg);
    kb_frames_free(buffers, buffers_len);
    json_decref(root);
    return status;
}

static kb_wsmsg_status_t parse_legacy_binary(const offsets_t *table,
                                             kb_wsmsg_channel_t *channel_out, kb_msg_t **msg_out,
                                             kb_error_t *err)
{
    kb_frame_t text = part_at(table, 0);
    json_t *root = kb_wire_load_object(text.data, text.size, "message", err);
    if (!root)
        return KB_WSMSG_MALFORMED;
    kb_frame_t *buffers = copy_buffers(table, 1, table->count - 1);
    if (!buffers) {
        json_decref(root);
        return fail(KB_WSMSG_MALFORMED, err, "out of memory");
    }
    return legacy_message(root, buffers, table->count - 1, channel_out, msg_out, err);
}

static kb_wsmsg_status_t parse_v1(const offsets_t *table, kb_wsmsg_channel_t *channel_out,
                                  kb_msg_t **msg_out, kb_error_t *err)
{
    static const char *const names[4] = { "header", "parent_header", "metadata", "content" };
    json_t *parts[4] = { NULL };
    for (int i = 0; i < 4; i++) {
        kb_frame_t part = part_at(table, 1 + (size_t)i);
        bool optional = i == 1 || i == 2;
        parts[i] = optional && part.size == 0
                       ? json_object()
                       : kb_wire_load_object(part.data, part.size, names[i], err);
        if (!parts[i]) {
            for (int j = 0; j < i; j++)
                json_decref(parts[j]);
            return KB_WSMSG_MALFORMED;
        }
    }
    kb_msg_t *msg = NULL;
    if (kb_wire_msg_new(parts[0], parts[1], parts[2], parts[3], &msg, err) != KB_WIRE_OK)
        return KB_WSMSG_MALFORMED;
    kb_frame_t channel = part_at(table, 0);
    kb_wsmsg_status_t status
        = channel_of((const char *)channel.data, channel.size, channel_out, err);
    if (status != KB_WSMSG_OK) {
        kb_msg_destroy(&msg);
        return status;
    }
    size_t buffers_len = table->count - KB_WSMSG_V1_MIN_OFFSETS;
    msg->buffers = copy_buffers(table, 5, buffers_len);
    if (!msg->buffers) {
        kb_msg_destroy(&msg);
        return fail(KB_WSMSG_MALFORMED, err, "out of memory");
    }
    msg->buffers_len = buffers_len;
    *msg_out = msg;
    return KB_WSMSG_OK;
}

kb_wsmsg_status_t kb_wsmsg_parse(kb_wsmsg_protocol_t protocol, bool binary, const void *data,
                                 size_t size, const kb_wsmsg_limits_t *limits,
                                 kb_wsmsg_channel_t *channel_out, kb_msg_t **msg_out,
                                 kb_error_t *err)
{
    assert(protocol == KB_WSMSG_LEGACY || protocol == KB_WSMSG_V1);
    assert(data || size == 0);
    assert(channel_out && msg_out);
    *msg_out = NULL;
    size_t max_buffers
        = limits && limits->max_buffers ? limits->max_buffers : KB_WSMSG_DEFAULT_MAX_BUFFERS;
    size_t max_bytes = limits && limits->max_bytes ? limits->max_bytes : KB_WSMSG_DEFAULT_MAX_BYTES;
    if (size > max_bytes)
        return fail(KB_WSMSG_TOO_LARGE, err, "payload is %zu bytes, limit %zu", size, max_bytes);
    kb_error_clear(err);

    if (!binary) {
        if (protocol == KB_WSMSG_V1)
            return fail(KB_WSMSG_MALFORMED, err, "a text frame under %s", KB_WSMSG_V1_SUBPROTOCOL);
        json_t *root = kb_wire_load_object(data, size, "message", err);
        if (!root)
            return KB_WSMSG_MALFORMED;
        return legacy_message(root, NULL, 0, channel_out, msg_out, err);
    }

    offsets_t table = { .data = data, .size = size };
    /* Saturating: a limit near SIZE_MAX must not wrap the largest count. */
    size_t fixed = protocol == KB_WSMSG_V1 ? KB_WSMSG_V1_MIN_OFFSETS : 1;
    size_t max_count = max_buffers > SIZE_MAX - fixed ? SIZE_MAX : max_buffers + fixed;
    table.width = protocol == KB_WSMSG_V1 ? 8 : 4;
    table.last_is_offset = protocol == KB_WSMSG_V1;
    kb_wsmsg_status_t status = read_offsets(&table, fixed, max_count, err);
    if (status != KB_WSMSG_OK)
        return status;
    return protocol == KB_WSMSG_V1 ? parse_v1(&table, channel_out, msg_out, err)
                                   : parse_legacy_binary(&table, channel_out, msg_out, err);
}

/*  ---------------------------------------------------------------------
    Encode */

static void append_content(kb_buf_t *out, const kb_msg_t *msg)
{
    if (msg->raw_content.data)
        kb_buf_append(out, msg->raw_content.data, msg->raw_content.size);
    else
        kb_buf_append_json(out, msg->content, JSON_COMPACT);
}

/*  The legacy JSON object, as Jupyter Server dumps a deserialized message
    (with buffers: [] when it goes in a text frame). */
static void append_legacy_json(kb_buf_t *out, const kb_msg_t *msg, const char *channel,
                               bool with_buffers_key)
{
    kb_buf_puts(out, "{\"header\":");
    kb_buf_append_json(out, kb_msg_header(msg), JSON_COMPACT);
    kb_buf_puts(out, ",\"msg_id\":");
    kb_buf_append_json(out, json_object_get(kb_msg_header(msg), "msg_id"), 0);
    kb_buf_puts(out, ",\"msg_type\":");
    kb_buf_append_json(out, json_object_get(kb_msg_header(msg), "msg_type"), 0);
    kb_buf_puts(out, ",\"parent_header\":");
    kb_buf_append_json(out, kb_msg_parent_header(msg), JSON_COMPACT);
    kb_buf_puts(out, ",\"metadata\":");
    kb_buf_append_json(out, kb_msg_metadata(msg), JSON_COMPACT);
    kb_buf_puts(out, ",\"content\":");
    append_content(out, msg);
    if (with_buffers_key)
        kb_buf_puts(out, ",\"buffers\":[]");
    kb_buf_puts(out, ",\"channel\":\"");
    kb_buf_puts(out, channel);
    kb_buf_puts(out, "\"}");
}

/*  Room for an offset table: size zero bytes, filled in as the parts
    after it are written. */
static void append_zeros(kb_buf_t *out, size_t size)
{
    static const unsigned char zeros[64];
    if (kb_buf_reserve(out, size) != KB_BUF_OK)
        return;
    while (size > 0) {
        size_t n = size < sizeof zeros ? size : sizeof zeros;
        kb_buf_append(out, zeros, n);
        size -= n;
    }
}

static void put_be32(kb_buf_t *out, size_t at, uint64_t value)
{
    unsigned char word[4] = { (unsigned char)(value >> 24), (unsigned char)(value >> 16),
                              (unsigned char)(value >> 8), (unsigned char)value };
    kb_buf_overwrite(out, at, word, sizeof word);
}

static void put_le64(kb_buf_t *out, size_t at, uint64_t value)
{
    unsigned char word[8];
    for (int b = 0; b < 8; b++)
        word[b] = (unsigned char)(value >> (8 * b));
    kb_buf_overwrite(out, at, word, sizeof word);
}

/*  u32 n | u32 offsets[n] | JSON | buffers, offsets big-endian. */
static kb_wsmsg_status_t encode_legacy_binary(const kb_msg_t *msg, const char *channel,
                                              kb_buf_t *out, kb_error_t *err)
{
    size_t count = 1 + msg->buffers_len;
    if (count > UINT32_MAX - 1)
        return fail(KB_WSMSG_TOO_LARGE, err, "%zu buffers, the legacy format takes fewer",
                    msg->buffers_len);
    size_t table_end = 4 * (count + 1);
    append_zeros(out, table_end);
    if (kb_buf_status(out) != KB_BUF_OK)
        return KB_WSMSG_OK; /* the caller reports the buffer's status */
    put_be32(out, 0, count);
    put_be32(out, 4, table_end);
    append_legacy_json(out, msg, channel, false);
    for (size_t i = 0; i < msg->buffers_len; i++) {
        if (kb_buf_status(out) != KB_BUF_OK)
            return KB_WSMSG_OK;
        if (out->len > UINT32_MAX)
            return fail(KB_WSMSG_TOO_LARGE, err,
                        "buffer %zu starts past 4 GiB, which legacy offsets cannot address", i);
        put_be32(out, 4 * (i + 2), out->len);
        kb_buf_append(out, msg->buffers[i].data, msg->buffers[i].size);
    }
    return KB_WSMSG_OK;
}

/*  u64 n | u64 offsets[n] | channel | four JSON parts | buffers. */
static void encode_v1(const kb_msg_t *msg, const char *channel, kb_buf_t *out)
{
    size_t count = KB_WSMSG_V1_MIN_OFFSETS + msg->buffers_len;
    /* buffers_len counts frames held in memory: 8 * (count + 1) fits. */
    append_zeros(out, 8 * (count + 1));
    if (kb_buf_status(out) != KB_BUF_OK)
        return;
    put_le64(out, 0, count);
    size_t slot = 0;
#define MARK() put_le64(out, 8 * (++slot), out->len)
    MARK();
    kb_buf_puts(out, channel);
    MARK();
    kb_buf_append_json(out, kb_msg_header(msg), JSON_COMPACT);
    MARK();
    kb_buf_append_json(out, kb_msg_parent_header(msg), JSON_COMPACT);
    MARK();
    kb_buf_append_json(out, kb_msg_metadata(msg), JSON_COMPACT);
    MARK();
    append_content(out, msg);
    for (size_t i = 0; i < msg->buffers_len; i++) {
        MARK();
        kb_buf_append(out, msg->buffers[i].data, msg->buffers[i].size);
    }
    MARK();
#undef MARK
    assert(kb_buf_status(out) != KB_BUF_OK || slot == count);
}

kb_wsmsg_status_t kb_wsmsg_encode(kb_wsmsg_protocol_t protocol, kb_wsmsg_channel_t channel,
                                  const kb_msg_t *msg, kb_buf_t *out, bool *binary_out,
                                  kb_error_t *err)
{
    assert(protocol == KB_WSMSG_LEGACY || protocol == KB_WSMSG_V1);
    assert(msg && out);
    assert(json_is_object(msg->content));
    assert(msg->buffers || msg->buffers_len == 0);
    const char *name = kb_wsmsg_channel_name(channel);
    kb_buf_reset(out);
    /* parsed here when the message was decoded, then kept */
    if (!kb_msg_header(msg) || !kb_msg_parent_header(msg) || !kb_msg_metadata(msg))
        return fail(KB_WSMSG_MALFORMED, err, "out of memory");
    bool binary = protocol == KB_WSMSG_V1 || msg->buffers_len > 0;
    kb_wsmsg_status_t status = KB_WSMSG_OK;
    if (protocol == KB_WSMSG_V1)
        encode_v1(msg, name, out);
    else if (binary)
        status = encode_legacy_binary(msg, name, out, err);
    else
        append_legacy_json(out, msg, name, true);

    if (status == KB_WSMSG_OK && kb_buf_status(out) != KB_BUF_OK) {
        kb_buf_status_t why = kb_buf_status(out);
        status = why == KB_BUF_OVER_CAP ? KB_WSMSG_TOO_LARGE : KB_WSMSG_MALFORMED;
        fail(status, err, "payload: %s", kb_buf_status_str(why));
    }
    if (status != KB_WSMSG_OK) {
        kb_buf_reset(out);
        return status;
    }
    if (binary_out)
        *binary_out = binary;
    kb_error_clear(err);
    return KB_WSMSG_OK;
}

/*  ---------------------------------------------------------------------
    The daemon's status message */

kb_msg_t *kb_wsmsg_status_new(const char *session, const char *msg_id, const char *date,
                              const char *username, const char *execution_state, kb_error_t *err)
{
    assert(session && msg_id && date && execution_state);
    json_t *header
        = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", msg_id, "msg_type", "status",
                    "username", username ? username : "kernelbridge", "session", session, "date",
                    date, "version", KB_WIRE_PROTOCOL_VERSION);
    json_t *content = json_pack("{s:s}", "execution_state", execution_state);
    if (!header || !content) {
        json_decref(header);
        json_decref(content);
        fail(KB_WSMSG_MALFORMED, err,
             "status message: out of memory, or a string that is not UTF-8");
        return NULL;
    }
    kb_msg_t *msg = NULL;
    if (kb_wire_msg_new(header, json_object(), json_object(), content, &msg, err) != KB_WIRE_OK)
        return NULL;
    return msg;
}
