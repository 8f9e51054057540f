/*  test_wsmsg.c - the kernel websocket codec: payloads made by Jupyter
    Server's own serializers, frames written out byte by byte from the
    documented layouts, round trips in both framings, every malformed
    case, and a client's message signed for the kernel and verified by
    kb_wire with the key. */
#include "wire/kb_wsmsg.h"

#include "kb_testutil.h"

#include <stdint.h>

static const unsigned char test_key[] = "kernel-key";
#define TEST_KEY_LEN (sizeof test_key - 1)

/*  ---------------------------------------------------------------------
    Vectors printed by tests/wsmsg_vectors.py with jupyter_server 1.23's
    serialize_msg_to_ws_v1 and serialize_binary_message (and, for the
    legacy text, json.dumps of the dict its handler writes), JSON dumped
    compactly. The message: header VEC_HEADER, parent_header VEC_PARENT
    (or {}), metadata {}, content VEC_CONTENT, buffers 00 01 ff and "". */
#define VEC_HEADER                                                                                 \
    "{\"msg_id\":\"a1\",\"msg_type\":\"comm_msg\",\"username\":\"u\",\"session\":\"s1\","          \
    "\"date\":\"2024-05-01T12:00:00.000000Z\",\"version\":\"5.3\"}"
#define VEC_PARENT "{\"msg_id\":\"p0\",\"msg_type\":\"comm_open\",\"session\":\"s0\"}"
#define VEC_CONTENT "{\"comm_id\":\"c\",\"data\":{\"x\":\"\xc3\xa9\"}}"

static const char v1_shell_buffers[] = /* 288 bytes */
    "\x08\x00\x00\x00\x00\x00\x00\x00\x48\x00\x00\x00\x00\x00\x00\x00\x4d\x00\x00\x00\x00\x00\x00"
    "\x00"
    "\xc5\x00\x00\x00\x00\x00\x00\x00\xfa\x00\x00\x00\x00\x00\x00\x00\xfc\x00\x00\x00\x00\x00\x00"
    "\x00"
    "\x1d\x01\x00\x00\x00\x00\x00\x00\x20\x01\x00\x00\x00\x00\x00\x00\x20\x01\x00\x00\x00\x00\x00"
    "\x00"
    "\x73\x68\x65\x6c\x6c\x7b\x22\x6d\x73\x67\x5f\x69\x64\x22\x3a\x22\x61\x31\x22\x2c\x22\x6d\x73"
    "\x67"
    "\x5f\x74\x79\x70\x65\x22\x3a\x22\x63\x6f\x6d\x6d\x5f\x6d\x73\x67\x22\x2c\x22\x75\x73\x65\x72"
    "\x6e"
    "\x61\x6d\x65\x22\x3a\x22\x75\x22\x2c\x22\x73\x65\x73\x73\x69\x6f\x6e\x22\x3a\x22\x73\x31\x22"
    "\x2c"
    "\x22\x64\x61\x74\x65\x22\x3a\x22\x32\x30\x32\x34\x2d\x30\x35\x2d\x30\x31\x54\x31\x32\x3a\x30"
    "\x30"
    "\x3a\x30\x30\x2e\x30\x30\x30\x30\x30\x30\x5a\x22\x2c\x22\x76\x65\x72\x73\x69\x6f\x6e\x22\x3a"
    "\x22"
    "\x35\x2e\x33\x22\x7d\x7b\x22\x6d\x73\x67\x5f\x69\x64\x22\x3a\x22\x70\x30\x22\x2c\x22\x6d\x73"
    "\x67"
    "\x5f\x74\x79\x70\x65\x22\x3a\x22\x63\x6f\x6d\x6d\x5f\x6f\x70\x65\x6e\x22\x2c\x22\x73\x65\x73"
    "\x73"
    "\x69\x6f\x6e\x22\x3a\x22\x73\x30\x22\x7d\x7b\x7d\x7b\x22\x63\x6f\x6d\x6d\x5f\x69\x64\x22\x3a"
    "\x22"
    "\x63\x22\x2c\x22\x64\x61\x74\x61\x22\x3a\x7b\x22\x78\x22\x3a\x22\xc3\xa9\x22\x7d\x7d\x00\x01"
    "\xff";
static const char v1_iopub_plain[] = /* 218 bytes */
    "\x06\x00\x00\x00\x00\x00\x00\x00\x38\x00\x00\x00\x00\x00\x00\x00\x3d\x00\x00\x00\x00\x00\x00"
    "\x00"
    "\xb5\x00\x00\x00\x00\x00\x00\x00\xb7\x00\x00\x00\x00\x00\x00\x00\xb9\x00\x00\x00\x00\x00\x00"
    "\x00"
    "\xda\x00\x00\x00\x00\x00\x00\x00\x69\x6f\x70\x75\x62\x7b\x22\x6d\x73\x67\x5f\x69\x64\x22\x3a"
    "\x22"
    "\x61\x31\x22\x2c\x22\x6d\x73\x67\x5f\x74\x79\x70\x65\x22\x3a\x22\x63\x6f\x6d\x6d\x5f\x6d\x73"
    "\x67"
    "\x22\x2c\x22\x75\x73\x65\x72\x6e\x61\x6d\x65\x22\x3a\x22\x75\x22\x2c\x22\x73\x65\x73\x73\x69"
    "\x6f"
    "\x6e\x22\x3a\x22\x73\x31\x22\x2c\x22\x64\x61\x74\x65\x22\x3a\x22\x32\x30\x32\x34\x2d\x30\x35"
    "\x2d"
    "\x30\x31\x54\x31\x32\x3a\x30\x30\x3a\x30\x30\x2e\x30\x30\x30\x30\x30\x30\x5a\x22\x2c\x22\x76"
    "\x65"
    "\x72\x73\x69\x6f\x6e\x22\x3a\x22\x35\x2e\x33\x22\x7d\x7b\x7d\x7b\x7d\x7b\x22\x63\x6f\x6d\x6d"
    "\x5f"
    "\x69\x64\x22\x3a\x22\x63\x22\x2c\x22\x64\x61\x74\x61\x22\x3a\x7b\x22\x78\x22\x3a\x22\xc3\xa9"
    "\x22"
    "\x7d\x7d";
static const char legacy_binary_shell[] = /* 332 bytes */
    "\x00\x00\x00\x03\x00\x00\x00\x10\x00\x00\x01\x49\x00\x00\x01\x4c\x7b\x22\x68\x65\x61\x64\x65"
    "\x72"
    "\x22\x3a\x7b\x22\x6d\x73\x67\x5f\x69\x64\x22\x3a\x22\x61\x31\x22\x2c\x22\x6d\x73\x67\x5f\x74"
    "\x79"
    "\x70\x65\x22\x3a\x22\x63\x6f\x6d\x6d\x5f\x6d\x73\x67\x22\x2c\x22\x75\x73\x65\x72\x6e\x61\x6d"
    "\x65"
    "\x22\x3a\x22\x75\x22\x2c\x22\x73\x65\x73\x73\x69\x6f\x6e\x22\x3a\x22\x73\x31\x22\x2c\x22\x64"
    "\x61"
    "\x74\x65\x22\x3a\x22\x32\x30\x32\x34\x2d\x30\x35\x2d\x30\x31\x54\x31\x32\x3a\x30\x30\x3a\x30"
    "\x30"
    "\x2e\x30\x30\x30\x30\x30\x30\x5a\x22\x2c\x22\x76\x65\x72\x73\x69\x6f\x6e\x22\x3a\x22\x35\x2e"
    "\x33"
    "\x22\x7d\x2c\x22\x6d\x73\x67\x5f\x69\x64\x22\x3a\x22\x61\x31\x22\x2c\x22\x6d\x73\x67\x5f\x74"
    "\x79"
    "\x70\x65\x22\x3a\x22\x63\x6f\x6d\x6d\x5f\x6d\x73\x67\x22\x2c\x22\x70\x61\x72\x65\x6e\x74\x5f"
    "\x68"
    "\x65\x61\x64\x65\x72\x22\x3a\x7b\x22\x6d\x73\x67\x5f\x69\x64\x22\x3a\x22\x70\x30\x22\x2c\x22"
    "\x6d"
    "\x73\x67\x5f\x74\x79\x70\x65\x22\x3a\x22\x63\x6f\x6d\x6d\x5f\x6f\x70\x65\x6e\x22\x2c\x22\x73"
    "\x65"
    "\x73\x73\x69\x6f\x6e\x22\x3a\x22\x73\x30\x22\x7d\x2c\x22\x6d\x65\x74\x61\x64\x61\x74\x61\x22"
    "\x3a"
    "\x7b\x7d\x2c\x22\x63\x6f\x6e\x74\x65\x6e\x74\x22\x3a\x7b\x22\x63\x6f\x6d\x6d\x5f\x69\x64\x22"
    "\x3a"
    "\x22\x63\x22\x2c\x22\x64\x61\x74\x61\x22\x3a\x7b\x22\x78\x22\x3a\x22\xc3\xa9\x22\x7d\x7d\x2c"
    "\x22"
    "\x63\x68\x61\x6e\x6e\x65\x6c\x22\x3a\x22\x73\x68\x65\x6c\x6c\x22\x7d\x00\x01\xff";
static const char legacy_text_iopub[] = /* 275 bytes */
    "\x7b\x22\x68\x65\x61\x64\x65\x72\x22\x3a\x7b\x22\x6d\x73\x67\x5f\x69\x64\x22\x3a\x22\x61\x31"
    "\x22"
    "\x2c\x22\x6d\x73\x67\x5f\x74\x79\x70\x65\x22\x3a\x22\x63\x6f\x6d\x6d\x5f\x6d\x73\x67\x22\x2c"
    "\x22"
    "\x75\x73\x65\x72\x6e\x61\x6d\x65\x22\x3a\x22\x75\x22\x2c\x22\x73\x65\x73\x73\x69\x6f\x6e\x22"
    "\x3a"
    "\x22\x73\x31\x22\x2c\x22\x64\x61\x74\x65\x22\x3a\x22\x32\x30\x32\x34\x2d\x30\x35\x2d\x30\x31"
    "\x54"
    "\x31\x32\x3a\x30\x30\x3a\x30\x30\x2e\x30\x30\x30\x30\x30\x30\x5a\x22\x2c\x22\x76\x65\x72\x73"
    "\x69"
    "\x6f\x6e\x22\x3a\x22\x35\x2e\x33\x22\x7d\x2c\x22\x6d\x73\x67\x5f\x69\x64\x22\x3a\x22\x61\x31"
    "\x22"
    "\x2c\x22\x6d\x73\x67\x5f\x74\x79\x70\x65\x22\x3a\x22\x63\x6f\x6d\x6d\x5f\x6d\x73\x67\x22\x2c"
    "\x22"
    "\x70\x61\x72\x65\x6e\x74\x5f\x68\x65\x61\x64\x65\x72\x22\x3a\x7b\x7d\x2c\x22\x6d\x65\x74\x61"
    "\x64"
    "\x61\x74\x61\x22\x3a\x7b\x7d\x2c\x22\x63\x6f\x6e\x74\x65\x6e\x74\x22\x3a\x7b\x22\x63\x6f\x6d"
    "\x6d"
    "\x5f\x69\x64\x22\x3a\x22\x63\x22\x2c\x22\x64\x61\x74\x61\x22\x3a\x7b\x22\x78\x22\x3a\x22\xc3"
    "\xa9"
    "\x22\x7d\x7d\x2c\x22\x62\x75\x66\x66\x65\x72\x73\x22\x3a\x5b\x5d\x2c\x22\x63\x68\x61\x6e\x6e"
    "\x65"
    "\x6c\x22\x3a\x22\x69\x6f\x70\x75\x62\x22\x7d";

/*  ---------------------------------------------------------------------
    Helpers */

static json_t *object_of(const char *text)
{
    json_t *value = kb_wire_load_object(text, strlen(text), "test", NULL);
    CHECK(value != NULL);
    return value;
}

/*  A message of JSON texts and count buffers (from buffers[], may be NULL). */
static kb_msg_t *message_of(const char *header, const char *parent, const char *metadata,
                            const char *content, const kb_frame_t *buffers, size_t count)
{
    kb_msg_t *msg = NULL;
    kb_error_t err;
    kb_wire_status_t status = kb_wire_msg_new(object_of(header), object_of(parent),
                                              object_of(metadata), object_of(content), &msg, &err);
    CHECK(status == KB_WIRE_OK);
    if (status != KB_WIRE_OK) {
        fprintf(stderr, "message_of: %s\n", err.message);
        return NULL;
    }
    if (count) {
        msg->buffers = calloc(count, sizeof *msg->buffers);
        for (size_t i = 0; i < count; i++) {
            msg->buffers[i].data = malloc(buffers[i].size ? buffers[i].size : 1);
            memcpy(msg->buffers[i].data, buffers[i].data, buffers[i].size);
            msg->buffers[i].size = buffers[i].size;
        }
        msg->buffers_len = count;
    }
    return msg;
}

static const kb_frame_t vec_buffers[2]
    = { { (unsigned char *)"\x00\x01\xff", 3 }, { (unsigned char *)"", 0 } };

static bool same_message(const kb_msg_t *a, const kb_msg_t *b)
{
    if (!a || !b || !json_equal(kb_msg_header(a), kb_msg_header(b))
        || !json_equal(kb_msg_parent_header(a), kb_msg_parent_header(b))
        || !json_equal(kb_msg_metadata(a), kb_msg_metadata(b))
        || !json_equal(a->content, b->content) || strcmp(a->msg_id, b->msg_id) != 0
        || strcmp(a->msg_type, b->msg_type) != 0 || strcmp(a->parent_msg_id, b->parent_msg_id) != 0
        || a->buffers_len != b->buffers_len)
        return false;
    for (size_t i = 0; i < a->buffers_len; i++)
        if (!a->buffers[i].data || a->buffers[i].size != b->buffers[i].size
            || memcmp(a->buffers[i].data, b->buffers[i].data, a->buffers[i].size) != 0)
            return false;
    return true;
}

static kb_wsmsg_status_t parse(kb_wsmsg_protocol_t protocol, bool binary, const void *data,
                               size_t size, kb_wsmsg_channel_t *channel, kb_msg_t **msg,
                               kb_error_t *err)
{
    return kb_wsmsg_parse(protocol, binary, data, size, NULL, channel, msg, err);
}

/*  Parse and expect a failure with status whose reason contains needle. */
static void expect_reject(kb_wsmsg_protocol_t protocol, bool binary, const void *data, size_t size,
                          const kb_wsmsg_limits_t *limits, kb_wsmsg_status_t status,
                          const char *needle, int line)
{
    kb_error_t err = { KB_OK, "untouched" };
    kb_msg_t *msg = (kb_msg_t *)(uintptr_t)1;
    kb_wsmsg_channel_t channel = KB_WSMSG_IOPUB;
    kb_wsmsg_status_t got
        = kb_wsmsg_parse(protocol, binary, data, size, limits, &channel, &msg, &err);
    kb_test_checks++;
    if (got != status || msg != NULL || !strstr(err.message, needle)) {
        kb_test_failures++;
        fprintf(stderr, "%s:%d: expected %s containing \"%s\", got %s \"%s\"\n", __FILE__, line,
                kb_wsmsg_status_str(status), needle, kb_wsmsg_status_str(got), err.message);
    }
    if (got == KB_WSMSG_OK)
        kb_msg_destroy(&msg);
}
#define EXPECT_REJECT(protocol, binary, data, size, status, needle)                                \
    expect_reject(protocol, binary, data, size, NULL, status, needle, __LINE__)

/*  A v1 payload of channel and parts (JSON texts, then buffers as text). */
static kb_buf_t v1_of(const char *channel, const char *const *parts, size_t count)
{
    kb_buf_t out = KB_BUF_INIT;
    size_t n = count + 2;
    uint64_t at = 8 * (n + 1);
    unsigned char word[8];
    for (size_t i = 0; i <= n; i++) {
        uint64_t value = i == 0 ? n : at;
        for (int b = 0; b < 8; b++)
            word[b] = (unsigned char)(value >> (8 * b));
        kb_buf_append(&out, word, 8);
        if (i >= 1 && i <= count + 1)
            at += strlen(i == 1 ? channel : parts[i - 2]);
    }
    kb_buf_puts(&out, channel);
    for (size_t i = 0; i < count; i++)
        kb_buf_puts(&out, parts[i]);
    return out;
}

static void set_le64(kb_buf_t *buf, size_t index, uint64_t value)
{
    unsigned char word[8];
    for (int b = 0; b < 8; b++)
        word[b] = (unsigned char)(value >> (8 * b));
    kb_buf_overwrite(buf, 8 * index, word, 8);
}

static void set_be32(kb_buf_t *buf, size_t index, uint32_t value)
{
    unsigned char word[4] = { (unsigned char)(value >> 24), (unsigned char)(value >> 16),
                              (unsigned char)(value >> 8), (unsigned char)value };
    kb_buf_overwrite(buf, 4 * index, word, 4);
}

/*  ---------------------------------------------------------------------
    Jupyter Server's bytes, both ways */

static void test_jupyter_server_vectors(void)
{
    kb_msg_t *with_parent = message_of(VEC_HEADER, VEC_PARENT, "{}", VEC_CONTENT, vec_buffers, 2);
    kb_msg_t *plain = message_of(VEC_HEADER, "{}", "{}", VEC_CONTENT, NULL, 0);
    static const struct {
        kb_wsmsg_protocol_t protocol;
        kb_wsmsg_channel_t channel;
        bool with_parent, binary;
        const char *bytes;
        size_t size;
    } vectors[] = {
        { KB_WSMSG_V1, KB_WSMSG_SHELL, true, true, v1_shell_buffers, sizeof v1_shell_buffers - 1 },
        { KB_WSMSG_V1, KB_WSMSG_IOPUB, false, true, v1_iopub_plain, sizeof v1_iopub_plain - 1 },
        { KB_WSMSG_LEGACY, KB_WSMSG_SHELL, true, true, legacy_binary_shell,
          sizeof legacy_binary_shell - 1 },
        { KB_WSMSG_LEGACY, KB_WSMSG_IOPUB, false, false, legacy_text_iopub,
          sizeof legacy_text_iopub - 1 },
    };
    kb_buf_t out = KB_BUF_INIT;
    for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
        const kb_msg_t *expected = vectors[i].with_parent ? with_parent : plain;
        /* We write what Jupyter Server writes, byte for byte. */
        bool binary = !vectors[i].binary;
        kb_error_t err;
        CHECK(
            kb_wsmsg_encode(vectors[i].protocol, vectors[i].channel, expected, &out, &binary, &err)
            == KB_WSMSG_OK);
        CHECK(binary == vectors[i].binary);
        CHECK(out.len == vectors[i].size && memcmp(out.data, vectors[i].bytes, out.len) == 0);
        if (out.len != vectors[i].size || memcmp(out.data, vectors[i].bytes, out.len) != 0)
            fprintf(stderr, "vector %zu: %zu bytes, expected %zu: %.*s\n", i, out.len,
                    vectors[i].size, (int)out.len, kb_buf_cstr(&out));
        /* And read it: a client sends on shell; iopub is not for us. */
        kb_msg_t *msg = NULL;
        kb_wsmsg_channel_t channel = KB_WSMSG_IOPUB;
        kb_wsmsg_status_t status = parse(vectors[i].protocol, vectors[i].binary, vectors[i].bytes,
                                         vectors[i].size, &channel, &msg, &err);
        if (vectors[i].channel == KB_WSMSG_SHELL) {
            CHECK(status == KB_WSMSG_OK && channel == KB_WSMSG_SHELL);
            CHECK(same_message(msg, expected));
            CHECK(msg && msg->identities_len == 0);
            CHECK_STR(msg ? msg->parent_msg_id : NULL, "p0");
        } else {
            CHECK(status == KB_WSMSG_BAD_CHANNEL && msg == NULL);
            CHECK(strstr(err.message, "\"iopub\"") != NULL);
        }
        kb_msg_destroy(&msg);
    }
    kb_buf_free(&out);
    kb_msg_destroy(&with_parent);
    kb_msg_destroy(&plain);
}

/*  ---------------------------------------------------------------------
    Frames written out by hand from the documented layouts */

static void test_hand_written_frames(void)
{
    /* v1: 7 offsets (one buffer), as @jupyterlab/services sends an empty
       parent_header and metadata when it has none: as nothing at all. */
    static const unsigned char v1[]
        = { 7,   0,   0,   0,   0,   0,   0,   0, /* offset count, u64 LE */
            64,  0,   0,   0,   0,   0,   0,   0, /* channel at 8 * (7 + 1) */
            69,  0,   0,   0,   0,   0,   0,   0, /* header */
            98,  0,   0,   0,   0,   0,   0,   0, /* parent_header: empty */
            98,  0,   0,   0,   0,   0,   0,   0, /* metadata: empty */
            98,  0,   0,   0,   0,   0,   0,   0, /* content */
            100, 0,   0,   0,   0,   0,   0,   0, /* buffer 0 */
            102, 0,   0,   0,   0,   0,   0,   0, /* the end */
            's', 't', 'd', 'i', 'n', '{', '"', 'm', 's', 'g', '_', 'i', 'd',
            '"', ':', '"', 'm', '"', ',', '"', 'm', 's', 'g', '_', 't', 'y',
            'p', 'e', '"', ':', '"', 't', '"', '}', '{', '}', 'A', 'B' };
    kb_msg_t *msg = NULL;
    kb_wsmsg_channel_t channel = KB_WSMSG_IOPUB;
    kb_error_t err;
    CHECK(parse(KB_WSMSG_V1, true, v1, sizeof v1, &channel, &msg, &err) == KB_WSMSG_OK);
    CHECK(channel == KB_WSMSG_STDIN);
    if (msg) {
        CHECK_STR(msg->msg_id, "m");
        CHECK_STR(msg->msg_type, "t");
        CHECK_STR(msg->parent_msg_id, "");
        CHECK(json_object_size(kb_msg_parent_header(msg)) == 0
              && json_object_size(kb_msg_metadata(msg)) == 0);
        CHECK(json_object_size(msg->content) == 0);
        CHECK(msg->buffers_len == 1 && msg->buffers[0].size == 2
              && memcmp(msg->buffers[0].data, "AB", 2) == 0);
    }
    kb_msg_destroy(&msg);

    /* Legacy binary: 2 parts (JSON, one buffer), u32 big-endian. */
    static const unsigned char legacy[] = {
        0,   0,   0,   2,  /* parts */
        0,   0,   0,   12, /* JSON at 4 * (2 + 1) */
        0,   0,   0,   85, /* buffer 0: 12 + 73 bytes of JSON */
        '{', '"', 'c', 'h', 'a', 'n', 'n', 'e', 'l', '"', ':', '"', 'c', 'o', 'n', 't',
        'r', 'o', 'l', '"', ',', '"', 'h', 'e', 'a', 'd', 'e', 'r', '"', ':', '{', '"',
        'm', 's', 'g', '_', 'i', 'd', '"', ':', '"', 'm', '"', ',', '"', 'm', 's', 'g',
        '_', 't', 'y', 'p', 'e', '"', ':', '"', 't', '"', '}', ',', '"', 'c', 'o', 'n',
        't', 'e', 'n', 't', '"', ':', '{', '}', '}', 0,   0,   0 /* the buffer runs to the end: 3
                                                                    bytes */
    };
    /* One byte short, the JSON is cut. */
    unsigned char cut[sizeof legacy];
    memcpy(cut, legacy, sizeof legacy);
    cut[11] = 84;
    EXPECT_REJECT(KB_WSMSG_LEGACY, true, cut, sizeof cut, KB_WSMSG_MALFORMED,
                  "message is not a JSON object");
    CHECK(parse(KB_WSMSG_LEGACY, true, legacy, sizeof legacy, &channel, &msg, &err) == KB_WSMSG_OK);
    CHECK(channel == KB_WSMSG_CONTROL);
    if (msg) {
        CHECK_STR(msg->msg_id, "m");
        CHECK(json_object_size(kb_msg_parent_header(msg)) == 0);
        CHECK(msg->buffers_len == 1 && msg->buffers[0].size == 3
              && memcmp(msg->buffers[0].data, "\0\0\0", 3) == 0);
    }
    kb_msg_destroy(&msg);
}

/*  ---------------------------------------------------------------------
    Round trips */

static void round_trip(kb_wsmsg_protocol_t protocol, const kb_msg_t *msg, bool expect_binary)
{
    kb_buf_t out = KB_BUF_INIT;
    bool binary = !expect_binary;
    kb_error_t err;
    CHECK(kb_wsmsg_encode(protocol, KB_WSMSG_CONTROL, msg, &out, &binary, &err) == KB_WSMSG_OK);
    CHECK(binary == expect_binary);
    kb_msg_t *again = NULL;
    kb_wsmsg_channel_t channel = KB_WSMSG_IOPUB;
    CHECK(parse(protocol, binary, out.data, out.len, &channel, &again, &err) == KB_WSMSG_OK);
    CHECK(channel == KB_WSMSG_CONTROL);
    CHECK(same_message(again, msg));
    if (!again)
        fprintf(stderr, "round trip: %s\n", err.message);
    kb_msg_destroy(&again);
    kb_buf_free(&out);
}

static void test_round_trips(void)
{
    static const kb_frame_t buffers[3] = { { (unsigned char *)"", 0 },
                                           { (unsigned char *)"\0\xff\n", 3 },
                                           { (unsigned char *)"", 0 } };
    kb_msg_t *plain = message_of("{\"msg_id\":\"x\",\"msg_type\":\"execute_request\",\"n\":1}",
                                 "{}", "{}", "{\"code\":\"print(1)\\n\\u0000\"}", NULL, 0);
    kb_msg_t *replying
        = message_of("{\"msg_id\":\"y\",\"msg_type\":\"comm_msg\"}", "{\"msg_id\":\"x\"}",
                     "{\"k\":[1,2.5,null,true]}", "{\"data\":{}}", buffers, 3);
    kb_msg_t *empty_buffer
        = message_of("{\"msg_id\":\"z\",\"msg_type\":\"comm_msg\"}", "{}", "{}", "{}", buffers, 1);
    for (int protocol = KB_WSMSG_LEGACY; protocol <= KB_WSMSG_V1; protocol++) {
        round_trip(protocol, plain, protocol == KB_WSMSG_V1);
        round_trip(protocol, replying, true);
        round_trip(protocol, empty_buffer, true);
    }

    /* A stream left unparsed (kb_wire_set_lazy_streams) goes out raw. */
    kb_msg_t *lazy
        = message_of("{\"msg_id\":\"s\",\"msg_type\":\"stream\"}", "{}", "{}", "{}", NULL, 0);
    static const char raw[] = "{\"name\":\"stdout\",\"text\":\"hi\\n\"}";
    kb_msg_t *parsed
        = message_of("{\"msg_id\":\"s\",\"msg_type\":\"stream\"}", "{}", "{}", raw, NULL, 0);
    if (lazy) {
        lazy->raw_content = (kb_frame_t){ (unsigned char *)raw, sizeof raw - 1 };
        kb_buf_t out = KB_BUF_INIT;
        for (int protocol = KB_WSMSG_LEGACY; protocol <= KB_WSMSG_V1; protocol++) {
            bool binary = false;
            CHECK(kb_wsmsg_encode(protocol, KB_WSMSG_SHELL, lazy, &out, &binary, NULL)
                  == KB_WSMSG_OK);
            CHECK(strstr(kb_buf_cstr(&out) + (binary ? 8 * 7 : 0), raw) != NULL);
            kb_msg_t *again = NULL;
            kb_wsmsg_channel_t channel;
            kb_error_t err;
            CHECK(parse(protocol, binary, out.data, out.len, &channel, &again, &err)
                  == KB_WSMSG_OK);
            CHECK(same_message(again, parsed));
            kb_msg_destroy(&again);
        }
        lazy->raw_content = (kb_frame_t){ NULL, 0 };
        kb_buf_free(&out);
    }

    /* Legacy text carries the copies Jupyter Server adds; top-level copies
       that disagree, and a "buffers" placeholder, are ignored when read. */
    kb_buf_t out = KB_BUF_INIT;
    CHECK(kb_wsmsg_encode(KB_WSMSG_LEGACY, KB_WSMSG_IOPUB, plain, &out, NULL, NULL) == KB_WSMSG_OK);
    json_t *doc = object_of(kb_buf_cstr(&out));
    CHECK_STR(json_string_value(json_object_get(doc, "msg_id")), "x");
    CHECK_STR(json_string_value(json_object_get(doc, "msg_type")), "execute_request");
    CHECK_STR(json_string_value(json_object_get(doc, "channel")), "iopub");
    CHECK(json_array_size(json_object_get(doc, "buffers")) == 0
          && json_is_array(json_object_get(doc, "buffers")));
    json_decref(doc);
    static const char odd[]
        = "{\"header\":{\"msg_id\":\"x\",\"msg_type\":\"execute_request\",\"n\":1},"
          "\"msg_id\":\"other\",\"msg_type\":9,\"buffers\":[{}],"
          "\"content\":{\"code\":\"print(1)\\n\\u0000\"}}"; /* no channel: shell */
    kb_msg_t *msg = NULL;
    kb_wsmsg_channel_t channel = KB_WSMSG_IOPUB;
    kb_error_t err;
    CHECK(parse(KB_WSMSG_LEGACY, false, odd, sizeof odd - 1, &channel, &msg, &err) == KB_WSMSG_OK);
    CHECK(channel == KB_WSMSG_SHELL && same_message(msg, plain));
    kb_msg_destroy(&msg);
    static const char nulls[]
        = "{\"header\":{\"msg_id\":\"x\",\"msg_type\":\"t\"},\"parent_header\":"
          "null,\"metadata\":null,\"content\":{},\"channel\":null}";
    CHECK(parse(KB_WSMSG_LEGACY, false, nulls, sizeof nulls - 1, &channel, &msg, &err)
          == KB_WSMSG_OK);
    CHECK(msg && json_object_size(kb_msg_parent_header(msg)) == 0
          && json_is_object(kb_msg_metadata(msg)));
    kb_msg_destroy(&msg);

    /* The caller's cap holds: too large, and the buffer left empty. */
    kb_buf_t small;
    kb_buf_init(&small, 40);
    CHECK(kb_wsmsg_encode(KB_WSMSG_V1, KB_WSMSG_SHELL, replying, &small, NULL, &err)
          == KB_WSMSG_TOO_LARGE);
    CHECK(small.len == 0 && strstr(err.message, "over the size limit"));
    CHECK(kb_wsmsg_encode(KB_WSMSG_LEGACY, KB_WSMSG_SHELL, replying, &small, NULL, &err)
          == KB_WSMSG_TOO_LARGE);
    CHECK(small.len == 0);
    kb_buf_free(&small);

    kb_buf_free(&out);
    kb_msg_destroy(&lazy);
    kb_msg_destroy(&parsed);
    kb_msg_destroy(&plain);
    kb_msg_destroy(&replying);
    kb_msg_destroy(&empty_buffer);
}

/*  ---------------------------------------------------------------------
    Malformed input */

#define H "{\"msg_id\":\"m\",\"msg_type\":\"t\"}"

static void test_malformed_v1(void)
{
    const bool B = true;
    const kb_wsmsg_protocol_t V1 = KB_WSMSG_V1;
    const char *good[] = { H, "{}", "{}", "{}", "buf" };
    kb_buf_t ok = v1_of("shell", good, 5);
    kb_msg_t *msg = NULL;
    kb_wsmsg_channel_t channel;
    kb_error_t err;
    CHECK(parse(V1, B, ok.data, ok.len, &channel, &msg, &err) == KB_WSMSG_OK);
    kb_msg_destroy(&msg);

    EXPECT_REJECT(V1, B, "", 0, KB_WSMSG_MALFORMED, "truncated");
    EXPECT_REJECT(V1, B, ok.data, 7, KB_WSMSG_MALFORMED, "truncated");
    EXPECT_REJECT(V1, B, ok.data, 60, KB_WSMSG_MALFORMED, "truncated: 7 offsets need 64");
    for (size_t cut = 64; cut < ok.len; cut += 7) /* every truncation of the parts */
        EXPECT_REJECT(V1, B, ok.data, cut, KB_WSMSG_MALFORMED, "offset");
    EXPECT_REJECT(V1, false, ok.data, ok.len, KB_WSMSG_MALFORMED, "a text frame");

    struct {
        size_t index;
        uint64_t value;
        kb_wsmsg_status_t status;
        const char *needle;
    } tampered[] = {
        { 0, 5, KB_WSMSG_MALFORMED, "5 offsets, at least 6" },
        { 0, 0, KB_WSMSG_MALFORMED, "0 offsets" },
        { 0, UINT64_MAX, KB_WSMSG_TOO_LARGE, "offsets, limit 1024" },
        { 0, (uint64_t)1 << 61, KB_WSMSG_TOO_LARGE, "limit" },
        { 0, 1024, KB_WSMSG_MALFORMED, "truncated: 1024 offsets" },
        { 1, 56, KB_WSMSG_MALFORMED, "offset 0 (56) is not the end of the offset table (64)" },
        { 1, UINT64_MAX, KB_WSMSG_MALFORMED, "offset 0" },
        { 3, 60, KB_WSMSG_MALFORMED, "offset 2 (60) is before offset 1" },
        { 4, 1000, KB_WSMSG_MALFORMED, "past the payload" },
        { 4, UINT64_MAX, KB_WSMSG_MALFORMED, "past the payload" },
        { 7, 106, KB_WSMSG_MALFORMED, "the last offset (106) is not the payload's size" },
        { 6, 64, KB_WSMSG_MALFORMED, "before offset 4" },
    };
    for (size_t i = 0; i < sizeof tampered / sizeof tampered[0]; i++) {
        kb_buf_t bad = v1_of("shell", good, 5);
        set_le64(&bad, tampered[i].index, tampered[i].value);
        expect_reject(V1, B, bad.data, bad.len, NULL, tampered[i].status, tampered[i].needle,
                      __LINE__);
        kb_buf_free(&bad);
    }
    /* Trailing bytes after the last offset are refused too. */
    kb_buf_t longer = v1_of("shell", good, 5);
    kb_buf_puts(&longer, "x");
    EXPECT_REJECT(V1, B, longer.data, longer.len, KB_WSMSG_MALFORMED, "not the payload's size");
    kb_buf_free(&longer);

    struct {
        const char *channel, *parts[4];
        kb_wsmsg_status_t status;
        const char *needle;
    } cases[] = {
        { "shell",
          { "{\"msg_id\":", "{}", "{}", "{}" },
          KB_WSMSG_MALFORMED,
          "header is not a JSON" },
        { "shell", { "[1]", "{}", "{}", "{}" }, KB_WSMSG_MALFORMED, "it is an array" },
        { "shell", { "", "{}", "{}", "{}" }, KB_WSMSG_MALFORMED, "header is not a JSON object" },
        { "shell",
          { "{\"msg_type\":\"t\"}", "{}", "{}", "{}" },
          KB_WSMSG_MALFORMED,
          "lacks msg_id" },
        { "shell",
          { "{\"msg_id\":\"m\",\"msg_type\":\"\"}", "{}", "{}", "{}" },
          KB_WSMSG_MALFORMED,
          "lacks msg_type" },
        { "shell", { H, "null", "{}", "{}" }, KB_WSMSG_MALFORMED, "parent_header is not" },
        { "shell",
          { H, "{\"msg_id\":1}", "{}", "{}" },
          KB_WSMSG_MALFORMED,
          "parent_header msg_id" },
        { "shell", { H, "{}", "[]", "{}" }, KB_WSMSG_MALFORMED, "metadata is not" },
        { "shell", { H, "{}", "{}", "" }, KB_WSMSG_MALFORMED, "content is not a JSON object" },
        { "shell", { H, "{}", "{}", "{} {}" }, KB_WSMSG_MALFORMED, "content is not" },
        { "iopub", { H, "{}", "{}", "{}" }, KB_WSMSG_BAD_CHANNEL, "\"iopub\" is not shell" },
        { "", { H, "{}", "{}", "{}" }, KB_WSMSG_BAD_CHANNEL, "\"\" is not shell" },
        { "Shell", { H, "{}", "{}", "{}" }, KB_WSMSG_BAD_CHANNEL, "\"Shell\"" },
        { "shell\n\"", { H, "{}", "{}", "{}" }, KB_WSMSG_BAD_CHANNEL, "\"shell??\"" },
        /* Malformed before the channel is looked at. */
        { "iopub", { "{}", "{}", "{}", "{}" }, KB_WSMSG_MALFORMED, "lacks msg_type" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kb_buf_t bad = v1_of(cases[i].channel, cases[i].parts, 4);
        expect_reject(V1, B, bad.data, bad.len, NULL, cases[i].status, cases[i].needle, __LINE__);
        kb_buf_free(&bad);
    }

    /* Limits: payload bytes, then buffers. */
    kb_wsmsg_limits_t tight = { .max_bytes = ok.len - 1 };
    expect_reject(V1, B, ok.data, ok.len, &tight, KB_WSMSG_TOO_LARGE, "limit", __LINE__);
    tight = (kb_wsmsg_limits_t){ .max_buffers = 1 };
    CHECK(kb_wsmsg_parse(V1, B, ok.data, ok.len, &tight, &channel, &msg, &err) == KB_WSMSG_OK);
    kb_msg_destroy(&msg);
    const char *two[] = { H, "{}", "{}", "{}", "a", "" };
    kb_buf_t more = v1_of("shell", two, 6);
    expect_reject(V1, B, more.data, more.len, &tight, KB_WSMSG_TOO_LARGE, "8 offsets, limit 7",
                  __LINE__);
    tight.max_buffers = SIZE_MAX; /* no wrap in the count's limit */
    CHECK(kb_wsmsg_parse(V1, B, more.data, more.len, &tight, &channel, &msg, &err) == KB_WSMSG_OK);
    kb_msg_destroy(&msg);
    kb_buf_free(&more);
    kb_buf_free(&ok);
}

static void test_malformed_legacy(void)
{
    const kb_wsmsg_protocol_t L = KB_WSMSG_LEGACY;
    static const char json[] = "{\"header\":" H ",\"content\":{},\"channel\":\"shell\"}";
    /* Binary: 2 parts, the JSON and a 2-byte buffer. */
    kb_buf_t ok = KB_BUF_INIT;
    kb_buf_append(&ok, "\0\0\0\2\0\0\0\x0c\0\0\0\0", 12);
    set_be32(&ok, 2, (uint32_t)(12 + sizeof json - 1));
    kb_buf_puts(&ok, json);
    kb_buf_puts(&ok, "zz");
    kb_msg_t *msg = NULL;
    kb_wsmsg_channel_t channel;
    kb_error_t err;
    CHECK(parse(L, true, ok.data, ok.len, &channel, &msg, &err) == KB_WSMSG_OK);
    CHECK(msg && msg->buffers_len == 1 && msg->buffers[0].size == 2);
    kb_msg_destroy(&msg);

    EXPECT_REJECT(L, true, "", 0, KB_WSMSG_MALFORMED, "truncated");
    EXPECT_REJECT(L, true, ok.data, 3, KB_WSMSG_MALFORMED, "truncated");
    EXPECT_REJECT(L, true, ok.data, 11, KB_WSMSG_MALFORMED, "truncated: 2 offsets need 12");
    EXPECT_REJECT(L, true, ok.data, 20, KB_WSMSG_MALFORMED, "past the payload");
    struct {
        size_t index;
        uint32_t value;
        kb_wsmsg_status_t status;
        const char *needle;
    } tampered[] = {
        { 0, 0, KB_WSMSG_MALFORMED, "0 offsets, at least 1" },
        { 0, UINT32_MAX, KB_WSMSG_TOO_LARGE, "4294967295 offsets, limit 1019" },
        { 0, 1019, KB_WSMSG_MALFORMED, "truncated" },
        { 0, 1, KB_WSMSG_MALFORMED, "offset 0 (12) is not the end of the offset table (8)" },
        { 1, 8, KB_WSMSG_MALFORMED, "offset 0 (8) is not the end" },
        { 2, 11, KB_WSMSG_MALFORMED, "offset 1 (11) is before offset 0" },
        { 2, 4000, KB_WSMSG_MALFORMED, "past the payload" },
        { 2, 12, KB_WSMSG_MALFORMED, "message is not a JSON object" },
    };
    for (size_t i = 0; i < sizeof tampered / sizeof tampered[0]; i++) {
        kb_buf_t bad = KB_BUF_INIT;
        kb_buf_append(&bad, ok.data, ok.len);
        set_be32(&bad, tampered[i].index, tampered[i].value);
        expect_reject(L, true, bad.data, bad.len, NULL, tampered[i].status, tampered[i].needle,
                      __LINE__);
        kb_buf_free(&bad);
    }
    kb_buf_free(&ok);

    struct {
        const char *text;
        kb_wsmsg_status_t status;
        const char *needle;
    } texts[] = {
        { "", KB_WSMSG_MALFORMED, "message is not a JSON object" },
        { "not json", KB_WSMSG_MALFORMED, "message is not a JSON object" },
        { "[]", KB_WSMSG_MALFORMED, "it is an array" },
        { "{\"header\":" H ",\"content\":{}} x", KB_WSMSG_MALFORMED, "not a JSON object" },
        { "{\"content\":{},\"channel\":\"shell\"}", KB_WSMSG_MALFORMED, "header is not" },
        { "{\"header\":[],"
          "\"content\":{}}",
          KB_WSMSG_MALFORMED, "header is not" },
        { "{\"header\":{\"msg_type\":\"t\"},\"content\":{}}", KB_WSMSG_MALFORMED, "lacks msg_id" },
        { "{\"header\":{\"msg_id\":\"m\"},\"content\":{}}", KB_WSMSG_MALFORMED, "lacks msg_type" },
        { "{\"header\":{\"msg_id\":\"m\\u0000\",\"msg_type\":\"t\"},\"content\":{}}",
          KB_WSMSG_MALFORMED, "lacks msg_id" },
        { "{\"header\":" H "}", KB_WSMSG_MALFORMED, "content is not" },
        { "{\"header\":" H ",\"content\":5}", KB_WSMSG_MALFORMED, "content is not" },
        { "{\"header\":" H ",\"content\":{},\"parent_header\":\"x\"}", KB_WSMSG_MALFORMED,
          "parent_header is not" },
        { "{\"header\":" H ",\"content\":{},\"metadata\":[]}", KB_WSMSG_MALFORMED,
          "metadata is not" },
        { "{\"header\":" H ",\"content\":{},\"channel\":5}", KB_WSMSG_MALFORMED,
          "channel is not a string" },
        { "{\"header\":" H ",\"content\":{},\"channel\":\"iopub\"}", KB_WSMSG_BAD_CHANNEL,
          "\"iopub\" is not shell, control or stdin" },
        { "{\"header\":" H ",\"content\":{},\"channel\":\"shell\\u0000\"}", KB_WSMSG_BAD_CHANNEL,
          "\"shell?\"" },
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        expect_reject(L, false, texts[i].text, strlen(texts[i].text), NULL, texts[i].status,
                      texts[i].needle, __LINE__);
    kb_wsmsg_limits_t tight = { .max_bytes = 10 };
    expect_reject(L, false, json, sizeof json - 1, &tight, KB_WSMSG_TOO_LARGE,
                  "payload is 71 bytes, limit 10", __LINE__);
}

/*  ---------------------------------------------------------------------
    A client's message, signed for the kernel */

static void test_signed_for_the_kernel(void)
{
    kb_error_t err;
    kb_wire_t *daemon = kb_wire_new("hmac-sha256", test_key, TEST_KEY_LEN, "daemon", NULL, &err);
    kb_wire_t *kernel = kb_wire_new("hmac-sha256", test_key, TEST_KEY_LEN, "kernel", NULL, &err);
    kb_wire_t *stranger
        = kb_wire_new("hmac-sha256", (const unsigned char *)"other", 5, "x", NULL, &err);
    CHECK(daemon && kernel && stranger);
    kb_msg_t *msg = NULL;
    kb_wsmsg_channel_t channel;
    CHECK(parse(KB_WSMSG_V1, true, v1_shell_buffers, sizeof v1_shell_buffers - 1, &channel, &msg,
                &err)
          == KB_WSMSG_OK);
    kb_frame_t *frames = NULL;
    size_t count = 0;
    CHECK(msg && kb_wire_encode_msg(daemon, msg, &frames, &count) == 0);
    CHECK(count == 8);
    CHECK(frames && frames[1].size == 64); /* a sha256 signature, never empty */
    kb_msg_t *received = NULL;
    CHECK(kb_wire_decode(kernel, frames, count, &received, &err) == KB_WIRE_OK);
    /* The client's own header goes through: replies name its msg_id. */
    CHECK(same_message(received, msg));
    CHECK_STR(received ? received->msg_id : NULL, "a1");
    CHECK_STR(received ? json_string_value(json_object_get(kb_msg_header(received), "session"))
                       : NULL,
              "s1");
    kb_msg_destroy(&received);
    CHECK(kb_wire_decode(stranger, frames, count, &received, &err) == KB_WIRE_BAD_SIGNATURE);
    /* Sent again unchanged, the kernel sees a replay (as jupyter_client does). */
    CHECK(kb_wire_decode(kernel, frames, count, &received, &err) == KB_WIRE_REPLAYED);
    kb_frames_free(frames, count);
    kb_msg_destroy(&msg);
    kb_wire_destroy(&daemon);
    kb_wire_destroy(&kernel);
    kb_wire_destroy(&stranger);
}

/*  ---------------------------------------------------------------------
    The daemon's status messages; protocol selection */

static void test_status_message(void)
{
    kb_error_t err;
    kb_msg_t *msg = kb_wsmsg_status_new("ws-session", "id-1", "2024-05-01T12:00:00Z", NULL,
                                        "restarting", &err);
    CHECK(msg != NULL);
    kb_buf_t out = KB_BUF_INIT;
    bool binary = true;
    CHECK(msg
          && kb_wsmsg_encode(KB_WSMSG_LEGACY, KB_WSMSG_IOPUB, msg, &out, &binary, &err)
                 == KB_WSMSG_OK);
    CHECK(!binary);
    CHECK_STR(kb_buf_cstr(&out),
              "{\"header\":{\"msg_id\":\"id-1\",\"msg_type\":\"status\",\"username\":"
              "\"kernelbridge\",\"session\":\"ws-session\",\"date\":\"2024-05-01T12:00:00Z\","
              "\"version\":\"5.3\"},\"msg_id\":\"id-1\",\"msg_type\":\"status\",\"parent_header\":"
              "{},\"metadata\":{},\"content\":{\"execution_state\":\"restarting\"},\"buffers\":[],"
              "\"channel\":\"iopub\"}");
    kb_msg_destroy(&msg);
    msg = kb_wsmsg_status_new("s", "id-2", "d", "me", "dead", &err);
    CHECK(msg
          && kb_wsmsg_encode(KB_WSMSG_V1, KB_WSMSG_IOPUB, msg, &out, &binary, &err) == KB_WSMSG_OK);
    CHECK(binary && out.len > 64 && memcmp(out.data + 56, "iopub{", 6) == 0);
    CHECK(strstr(out.data + 56, "{\"execution_state\":\"dead\"}") != NULL);
    kb_msg_destroy(&msg);
    CHECK(kb_wsmsg_status_new("s", "", "d", NULL, "dead", &err) == NULL);
    CHECK(strstr(err.message, "msg_id") != NULL);
    CHECK(kb_wsmsg_status_new("s\xff", "i", "d", NULL, "dead", &err) == NULL);
    CHECK(strstr(err.message, "UTF-8") != NULL);
    kb_buf_free(&out);
}

static void test_select_protocol(void)
{
    CHECK(kb_wsmsg_select_protocol(NULL) == KB_WSMSG_LEGACY);
    CHECK(kb_wsmsg_select_protocol("") == KB_WSMSG_LEGACY);
    CHECK(kb_wsmsg_select_protocol("v1.kernel.websocket.jupyter.org") == KB_WSMSG_V1);
    CHECK(kb_wsmsg_select_protocol("foo, v1.kernel.websocket.jupyter.org ,bar") == KB_WSMSG_V1);
    CHECK(kb_wsmsg_select_protocol("v1.kernel.websocket.jupyter.orgx") == KB_WSMSG_LEGACY);
    CHECK(kb_wsmsg_select_protocol("v2.kernel.websocket.jupyter.org") == KB_WSMSG_LEGACY);
    CHECK_STR(kb_wsmsg_channel_name(KB_WSMSG_STDIN), "stdin");
    CHECK_STR(kb_wsmsg_status_str(KB_WSMSG_BAD_CHANNEL), "bad channel");
}

int main(void)
{
    RUN_TEST(test_jupyter_server_vectors);
    RUN_TEST(test_hand_written_frames);
    RUN_TEST(test_round_trips);
    RUN_TEST(test_malformed_v1);
    RUN_TEST(test_malformed_legacy);
    RUN_TEST(test_signed_for_the_kernel);
    RUN_TEST(test_status_message);
    RUN_TEST(test_select_protocol);
    return kb_test_summary();
}
