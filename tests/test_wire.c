/*  test_wire.c - the Jupyter wire codec against itself, against
    jupyter_client's own Session (run at test time through
    tests/wire_vectors.py, both directions), and against crafted bad input.

    Environment: KB_PYTHON (default /usr/bin/python3) runs the script,
    found through KB_SOURCE_DIR (set by ctest) or next to this file. */
#include "wire/kb_wire.h"

#include "kb_testutil.h"

#include <ctype.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static const unsigned char test_key[] = "\x01kernelbridge-test-key\x00\xff";
#define TEST_KEY_LEN (sizeof test_key - 1)
#define TEST_DATE "2024-05-01T12:00:00.000000Z"

/*  ---------------------------------------------------------------------
    Helpers */

static char *hex_of(const unsigned char *data, size_t size)
{
    char *out = malloc(2 * size + 1);
    for (size_t i = 0; i < size; i++)
        sprintf(out + 2 * i, "%02x", data[i]);
    out[2 * size] = 0;
    return out;
}

static kb_frame_t frame_of_hex(const char *hex)
{
    size_t size = strlen(hex) / 2;
    kb_frame_t frame = { malloc(size ? size : 1), size };
    for (size_t i = 0; i < size; i++) {
        unsigned int byte = 0;
        sscanf(hex + 2 * i, "%2x", &byte);
        frame.data[i] = (unsigned char)byte;
    }
    return frame;
}

static kb_frame_t frame_of_str(const char *text)
{
    size_t size = strlen(text);
    kb_frame_t frame = { malloc(size ? size : 1), size };
    memcpy(frame.data, text, size);
    return frame;
}

/*  Frames from a JSON array of hex strings; caller frees. */
static kb_frame_t *frames_of_json(const json_t *array, size_t *count)
{
    *count = json_array_size(array);
    kb_frame_t *frames = calloc(*count ? *count : 1, sizeof *frames);
    for (size_t i = 0; i < *count; i++)
        frames[i] = frame_of_hex(json_string_value(json_array_get(array, i)));
    return frames;
}

static json_t *json_of_frames(const kb_frame_t *frames, size_t count)
{
    json_t *array = json_array();
    for (size_t i = 0; i < count; i++) {
        char *hex = hex_of(frames[i].data, frames[i].size);
        json_array_append_new(array, json_string(hex));
        free(hex);
    }
    return array;
}

static bool frame_equals(const kb_frame_t *frame, const void *data, size_t size)
{
    return frame->size == size && (size == 0 || memcmp(frame->data, data, size) == 0);
}

static char *python_command(const char *format, ...) __attribute__((format(printf, 1, 2)));

/*  "<python> <script> " followed by format; caller frees. */
static char *python_command(const char *format, ...)
{
    const char *python = getenv("KB_PYTHON");
    const char *source_dir = getenv("KB_SOURCE_DIR");
    char script[1024];
    if (source_dir && *source_dir)
        snprintf(script, sizeof script, "%s/tests/wire_vectors.py", source_dir);
    else {
        const char *slash = strrchr(__FILE__, '/');
        int dir_len = slash ? (int)(slash - __FILE__) : 1;
        snprintf(script, sizeof script, "%.*s/wire_vectors.py", dir_len, slash ? __FILE__ : ".");
    }
    char args[2048];
    va_list ap;
    va_start(ap, format);
    vsnprintf(args, sizeof args, format, ap);
    va_end(ap);
    char *command = NULL;
    if (asprintf(&command, "'%s' '%s' %s", python && *python ? python : "/usr/bin/python3", script,
                 args)
        < 0)
        return NULL;
    return command;
}

/*  Run the reference script and parse what it prints; NULL on failure. */
static json_t *run_python(const char *command)
{
    char *out = kb_test_capture(command);
    if (!out) {
        fprintf(stderr, "cannot run: %s\n", command);
        return NULL;
    }
    json_error_t error;
    json_t *result = json_loads(out, JSON_ALLOW_NUL, &error);
    if (!result)
        fprintf(stderr, "bad output of %s: %s\n%.500s\n", command, error.text, out);
    free(out);
    return result;
}

/*  HMAC of the concatenated parts as lowercase hex, for crafting frames
    independently of the codec under test. */
static char *reference_signature(const char *digest, const unsigned char *key, size_t key_len,
                                 const kb_frame_t *parts)
{
    size_t total = 0;
    for (int i = 0; i < 4; i++)
        total += parts[i].size;
    unsigned char *joined = malloc(total ? total : 1), mac[EVP_MAX_MD_SIZE];
    size_t at = 0, mac_len = 0;
    for (int i = 0; i < 4; i++) {
        memcpy(joined + at, parts[i].data, parts[i].size);
        at += parts[i].size;
    }
    unsigned char *ok = EVP_Q_mac(NULL, "HMAC", NULL, digest, NULL, key, key_len, joined, total,
                                  mac, sizeof mac, &mac_len);
    free(joined);
    return ok ? hex_of(mac, mac_len) : NULL;
}

/*  A message crafted by hand: [ident, <IDS|MSG>, signature, header, parent,
    metadata, content]; signed with test_key (sha256) when sign is true. */
typedef struct {
    kb_frame_t frames[8];
    size_t count;
} crafted_t;

static crafted_t craft(const char *header, const char *parent, const char *metadata,
                       const char *content, bool sign)
{
    crafted_t msg = { .count = 7 };
    msg.frames[0] = frame_of_str("ident");
    msg.frames[1] = frame_of_str(KB_WIRE_DELIMITER);
    msg.frames[3] = frame_of_str(header);
    msg.frames[4] = frame_of_str(parent);
    msg.frames[5] = frame_of_str(metadata);
    msg.frames[6] = frame_of_str(content);
    char *signature
        = sign ? reference_signature("SHA256", test_key, TEST_KEY_LEN, &msg.frames[3]) : strdup("");
    msg.frames[2] = frame_of_str(signature);
    free(signature);
    return msg;
}

static void crafted_free(crafted_t *msg)
{
    for (size_t i = 0; i < msg->count; i++)
        free(msg->frames[i].data);
    msg->count = 0;
}

#define GOOD_HEADER                                                                                \
    "{\"msg_id\":\"m-1\",\"msg_type\":\"status\",\"session\":\"k\",\"version\":\"5.3\"}"

/*  Decode and expect a failure with status whose reason contains needle. */
static void expect_reject(kb_wire_t *wire, const kb_frame_t *frames, size_t count,
                          kb_wire_status_t status, const char *needle, int line)
{
    kb_error_t err = { KB_OK, "untouched" };
    kb_msg_t *msg = (kb_msg_t *)(uintptr_t)1;
    size_t before = kb_wire_rejected(wire, status);
    kb_wire_status_t got = kb_wire_decode(wire, frames, count, &msg, &err);
    kb_test_checks++;
    if (got != status || msg != NULL || !*err.message || strcmp(err.message, "untouched") == 0
        || !strstr(err.message, needle) || kb_wire_rejected(wire, status) != before + 1
        || strcmp(kb_wire_errstr(wire), err.message) != 0) {
        kb_test_failures++;
        fprintf(stderr, "%s:%d: expected %s containing \"%s\", got %s \"%s\"\n", __FILE__, line,
                kb_wire_status_str(status), needle, kb_wire_status_str(got), err.message);
    }
    if (got == KB_WIRE_OK)
        kb_msg_destroy(&msg);
}
#define EXPECT_REJECT(wire, frames, count, status, needle)                                         \
    expect_reject(wire, frames, count, status, needle, __LINE__)

static kb_wire_t *new_wire(const char *scheme, const unsigned char *key, size_t key_len,
                           const char *session)
{
    kb_error_t err = { 0 };
    kb_wire_t *wire = kb_wire_new(scheme, key, key_len, session, "tester", &err);
    if (!wire)
        fprintf(stderr, "kb_wire_new(%s): %s\n", scheme, err.message);
    CHECK(wire != NULL);
    return wire;
}

/*  ---------------------------------------------------------------------
    Encode -> decode with the codec itself */

static void test_round_trip(void)
{
    kb_wire_t *client = new_wire("hmac-sha256", test_key, TEST_KEY_LEN, "client-session");
    kb_wire_t *kernel = new_wire("hmac-sha256", test_key, TEST_KEY_LEN, "kernel-session");
    if (!client || !kernel)
        goto done;

    kb_frame_t ident = frame_of_str("router-id");
    kb_frame_t *frames = NULL;
    size_t count = 0;
    char msg_id[64] = "";
    json_t *content = json_pack("{s:s, s:b, s:s%}", "code", "print('h\xc3\xa9')", "silent", 0,
                                "nul", "a\0b", (size_t)3);
    json_t *expected_content = json_deep_copy(content);
    int rc = kb_wire_encode(client, "execute_request", content, NULL, json_pack("{s:i}", "x", 1),
                            TEST_DATE, &ident, 1, &frames, &count, msg_id, sizeof msg_id);
    CHECK(rc == 0);
    CHECK(count == 7);
    CHECK_STR(msg_id, "client-session_1");
    CHECK(frames && frame_equals(&frames[0], "router-id", 9));
    CHECK(frames && frame_equals(&frames[1], KB_WIRE_DELIMITER, 9));
    /* Lowercase hex HMAC-SHA256 over the four JSON frames, and compact JSON. */
    char *signature
        = frames ? reference_signature("SHA256", test_key, TEST_KEY_LEN, &frames[3]) : NULL;
    CHECK(signature && frames[2].size == 64 && frame_equals(&frames[2], signature, 64));
    free(signature);
    CHECK(frames && frame_equals(&frames[4], "{}", 2));
    CHECK(frames && frame_equals(&frames[5], "{\"x\":1}", 7));

    kb_msg_t *msg = NULL;
    kb_error_t err = { KB_OK, "x" };
    CHECK(kb_wire_decode(kernel, frames, count, &msg, &err) == KB_WIRE_OK);
    CHECK(msg != NULL);
    CHECK_STR(err.message, "");
    if (msg) {
        CHECK_STR(msg->msg_type, "execute_request");
        CHECK_STR(msg->msg_id, "client-session_1");
        CHECK_STR(msg->parent_msg_id, "");
        CHECK(json_equal(msg->content, expected_content));
        CHECK(json_integer_value(json_object_get(kb_msg_metadata(msg), "x")) == 1);
        CHECK_STR(json_string_value(json_object_get(kb_msg_header(msg), "session")),
                  "client-session");
        CHECK_STR(json_string_value(json_object_get(kb_msg_header(msg), "username")), "tester");
        CHECK_STR(json_string_value(json_object_get(kb_msg_header(msg), "date")), TEST_DATE);
        CHECK_STR(json_string_value(json_object_get(kb_msg_header(msg), "version")), "5.3");
        CHECK(msg->identities_len == 1 && frame_equals(&msg->identities[0], "router-id", 9));
        CHECK(msg->buffers_len == 0 && msg->buffers == NULL);
        CHECK(json_object_size(kb_msg_parent_header(msg)) == 0);
    }

    /* A reply names the request as parent; buffers after content are kept. */
    kb_frame_t *reply = NULL;
    size_t reply_count = 0;
    rc = kb_wire_encode(kernel, "execute_reply", json_pack("{s:s}", "status", "ok"),
                        msg ? kb_msg_header(msg) : NULL, NULL, TEST_DATE, NULL, 0, &reply,
                        &reply_count, msg_id, sizeof msg_id);
    CHECK(rc == 0 && reply_count == 6);
    CHECK_STR(msg_id, "kernel-session_1");
    if (rc == 0) {
        kb_frame_t with_buffers[8];
        memcpy(with_buffers, reply, 6 * sizeof *reply);
        with_buffers[6] = (kb_frame_t){ (unsigned char *)"\x00\x01\x02", 3 };
        with_buffers[7] = (kb_frame_t){ NULL, 0 };
        kb_msg_t *answer = NULL;
        CHECK(kb_wire_decode(client, with_buffers, 8, &answer, &err) == KB_WIRE_OK);
        if (answer) {
            CHECK_STR(answer->parent_msg_id, "client-session_1");
            CHECK_STR(answer->msg_id, "kernel-session_1");
            CHECK(answer->identities_len == 0);
            CHECK(answer->buffers_len == 2);
            CHECK(answer->buffers_len == 2 && frame_equals(&answer->buffers[0], "\x00\x01\x02", 3));
            CHECK(answer->buffers_len == 2 && answer->buffers[1].size == 0
                  && answer->buffers[1].data != NULL);
        }
        kb_msg_destroy(&answer);
        CHECK(answer == NULL);
    }
    kb_frames_free(reply, reply_count);

    /* The counter makes every msg_id of a codec distinct. */
    kb_frame_t *again = NULL;
    size_t again_count = 0;
    CHECK(kb_wire_encode(client, "kernel_info_request", json_object(), NULL, NULL, TEST_DATE, NULL,
                         0, &again, &again_count, msg_id, sizeof msg_id)
          == 0);
    CHECK_STR(msg_id, "client-session_2");

    /* The signature's hex digits are compared case-insensitively. */
    if (again) {
        for (size_t i = 0; i < again[1].size; i++)
            again[1].data[i] = (unsigned char)toupper(again[1].data[i]);
        kb_msg_t *upper = NULL;
        CHECK(kb_wire_decode(kernel, again, again_count, &upper, &err) == KB_WIRE_OK);
        kb_msg_destroy(&upper);
    }
    kb_frames_free(again, again_count);

    /* Encode failures: -1, a reason, nothing returned, stolen args freed
       (ASan/valgrind would report them otherwise). */
    kb_frame_t *none = (kb_frame_t *)(uintptr_t)1;
    size_t none_count = 99;
    CHECK(kb_wire_encode(client, "x", NULL, NULL, json_object(), TEST_DATE, NULL, 0, &none,
                         &none_count, NULL, 0)
          == -1);
    CHECK(none == NULL && none_count == 0);
    CHECK(strstr(kb_wire_errstr(client), "content") != NULL);
    CHECK(kb_wire_encode(client, "x", json_array(), NULL, NULL, TEST_DATE, NULL, 0, &none,
                         &none_count, NULL, 0)
          == -1);
    CHECK(kb_wire_encode(client, "x", json_object(), NULL, json_string("m"), TEST_DATE, NULL, 0,
                         &none, &none_count, NULL, 0)
          == -1);
    char tiny[4];
    CHECK(kb_wire_encode(client, "x", json_object(), NULL, NULL, TEST_DATE, NULL, 0, &none,
                         &none_count, tiny, sizeof tiny)
          == -1);
    CHECK(strstr(kb_wire_errstr(client), "msg_id_out") != NULL);
    CHECK(kb_wire_encode(client, "bad \xff utf8", json_object(), NULL, NULL, TEST_DATE, NULL, 0,
                         &none, &none_count, NULL, 0)
          == -1);
    /* A failed encode does not use up a msg_id. */
    CHECK(kb_wire_encode(client, "x", json_object(), NULL, NULL, TEST_DATE, NULL, 0, &none,
                         &none_count, msg_id, sizeof msg_id)
          == 0);
    CHECK_STR(msg_id, "client-session_3");
    kb_frames_free(none, none_count);

    CHECK(kb_wire_rejected(kernel, KB_WIRE_OK) == 2);
    CHECK(kb_wire_rejected(client, KB_WIRE_OK) == 1);
    CHECK(kb_wire_rejected(kernel, KB_WIRE_MALFORMED) == 0);
    kb_msg_destroy(&msg);
    kb_frames_free(frames, count);
    free(ident.data);
    json_decref(expected_content);
done:
    kb_wire_destroy(&client);
    kb_wire_destroy(&kernel);
    CHECK(client == NULL && kernel == NULL);
    kb_wire_destroy(&client); /* NULL-safe */
    kb_msg_destroy(&(kb_msg_t *){ NULL });
    kb_frames_free(NULL, 3);
}

/*  ---------------------------------------------------------------------
    jupyter_client signs, we decode */

static const char *const schemes[]
    = { "hmac-sha256", "hmac-sha512", "hmac-sha1", "hmac-md5", "hmac-sha3_256", "hmac-blake2b" };

static void check_vector(const json_t *vector, const kb_msg_t *msg)
{
    const char *name = json_string_value(json_object_get(vector, "name"));
    CHECK_STR(msg->msg_type, json_string_value(json_object_get(vector, "msg_type")));
    CHECK_STR(msg->msg_id, json_string_value(json_object_get(vector, "msg_id")));
    CHECK_STR(msg->parent_msg_id, json_string_value(json_object_get(vector, "parent_msg_id")));
    bool same = json_equal(kb_msg_header(msg), json_object_get(vector, "header"))
                && json_equal(kb_msg_parent_header(msg), json_object_get(vector, "parent_header"))
                && json_equal(kb_msg_metadata(msg), json_object_get(vector, "metadata"))
                && json_equal(msg->content, json_object_get(vector, "content"));
    CHECK(same);
    if (!same) {
        char *got = json_dumps(msg->content, JSON_COMPACT);
        fprintf(stderr, "vector %s: content %s\n", name, got);
        free(got);
    }
    json_t *identities = json_of_frames(msg->identities, msg->identities_len);
    json_t *buffers = json_of_frames(msg->buffers, msg->buffers_len);
    CHECK(json_equal(identities, json_object_get(vector, "identities")));
    CHECK(json_equal(buffers, json_object_get(vector, "buffers")));
    json_decref(identities);
    json_decref(buffers);
}

static void decode_python_vectors(const char *scheme, const unsigned char *key, size_t key_len)
{
    char *key_hex = hex_of(key, key_len);
    char *command = python_command("sign '%s' '%s'", scheme, key_hex);
    json_t *doc = run_python(command);
    json_t *vectors = json_object_get(doc, "vectors");
    CHECK(json_array_size(vectors) == 5);
    kb_wire_t *wire = new_wire(scheme, key, key_len, "kb");
    kb_wire_t *wrong_key = new_wire(scheme, (const unsigned char *)"other", 5, "kb");
    size_t i;
    json_t *vector;
    json_array_foreach(vectors, i, vector)
    {
        size_t count;
        kb_frame_t *frames = frames_of_json(json_object_get(vector, "frames"), &count);
        kb_msg_t *msg = NULL;
        kb_error_t err = { 0 };
        kb_wire_status_t status
            = wire ? kb_wire_decode(wire, frames, count, &msg, &err) : KB_WIRE_MALFORMED;
        CHECK(status == KB_WIRE_OK);
        if (status != KB_WIRE_OK)
            fprintf(stderr, "%s vector %s: %s\n", scheme,
                    json_string_value(json_object_get(vector, "name")), err.message);
        if (msg)
            check_vector(vector, msg);
        kb_msg_destroy(&msg);
        if (key_len > 0) {
            /* The very same frames again are a replay; another key fails. */
            EXPECT_REJECT(wire, frames, count, KB_WIRE_REPLAYED, "replayed");
            EXPECT_REJECT(wrong_key, frames, count, KB_WIRE_BAD_SIGNATURE, "signature mismatch");
        } else {
            /* Unsigned: nothing to check and nothing to remember. */
            CHECK(kb_wire_decode(wire, frames, count, &msg, &err) == KB_WIRE_OK);
            kb_msg_destroy(&msg);
            EXPECT_REJECT(wrong_key, frames, count, KB_WIRE_BAD_SIGNATURE, "unsigned message");
        }
        kb_frames_free(frames, count);
    }
    kb_wire_destroy(&wire);
    kb_wire_destroy(&wrong_key);
    json_decref(doc);
    free(command);
    free(key_hex);
}

static void test_python_signs(void)
{
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        fprintf(stderr, "   %s\n", schemes[i]);
        decode_python_vectors(schemes[i], test_key, TEST_KEY_LEN);
    }
    fprintf(stderr, "   unsigned\n");
    decode_python_vectors("hmac-sha256", NULL, 0);
}

/*  ---------------------------------------------------------------------
    We encode, jupyter_client decodes */

static void python_verifies(const char *scheme, const unsigned char *key, size_t key_len)
{
    kb_wire_t *wire = new_wire(scheme, key, key_len, "kb-session");
    if (!wire)
        return;
    json_t *contents
        = json_pack("[{s:s, s:b}, {s:s, s:s}, {s:{s:s, s:{s:[I, f, n, b]}}, s:{}}, {s:s%}]", "code",
                    "import os\nprint(1)", "silent", 0, "name", "stdout", "text",
                    "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x90\x8d\n", "data",
                    "text/plain", "x", "application/json", "v", (json_int_t)9007199254740993LL, 2.5,
                    1, "metadata", "text", "a\0b", (size_t)3);
    json_t *messages = json_array();
    json_t *parent = NULL;
    kb_frame_t ident = { malloc(3), 3 };
    memcpy(ident.data, "\x00\x80\xff", 3);
    char msg_ids[5][64];
    for (size_t i = 0; i < json_array_size(contents) + 1; i++) {
        kb_frame_t *frames = NULL;
        size_t count = 0;
        /* the last message is a tampered copy of the first */
        size_t which = i < json_array_size(contents) ? i : 0;
        json_t *content = json_deep_copy(json_array_get(contents, which));
        int rc = kb_wire_encode(wire, which == 0 ? "execute_request" : "stream", content, parent,
                                json_pack("{s:s}", "tag", "\xc3\xbc"), TEST_DATE, &ident,
                                which == 2 ? 1 : 0, &frames, &count, msg_ids[i], sizeof msg_ids[i]);
        CHECK(rc == 0);
        if (rc != 0)
            continue;
        if (i == json_array_size(contents))
            frames[count - 1].data[2] ^= 1; /* change the content after signing */
        if (!parent) {
            parent
                = json_loadb((const char *)frames[count - 4].data, frames[count - 4].size, 0, NULL);
        }
        json_array_append_new(messages,
                              json_pack("{s:o}", "frames", json_of_frames(frames, count)));
        kb_frames_free(frames, count);
    }

    char *dir = kb_test_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/messages.json", dir);
    json_t *input = json_pack("{s:o}", "messages", messages);
    CHECK(json_dump_file(input, path, 0) == 0);
    char *key_hex = hex_of(key, key_len);
    char *command = python_command("verify '%s' '%s' '%s'", scheme, key_hex, path);
    json_t *doc = run_python(command);
    json_t *results = json_object_get(doc, "results");
    CHECK(json_array_size(results) == json_array_size(contents) + 1);
    for (size_t i = 0; i < json_array_size(results); i++) {
        json_t *result = json_array_get(results, i);
        bool ok = json_is_true(json_object_get(result, "ok"));
        if (i == json_array_size(contents)) {
            /* jupyter_client refuses the tampered copy: our signature is real. */
            CHECK(ok == (key_len == 0));
            if (key_len > 0)
                CHECK(strstr(json_string_value(json_object_get(result, "error")), "Signature"));
            continue;
        }
        CHECK(ok);
        if (!ok) {
            fprintf(stderr, "%s message %zu: %s\n", scheme, i,
                    json_string_value(json_object_get(result, "error")));
            continue;
        }
        CHECK(json_equal(json_object_get(result, "content"), json_array_get(contents, i)));
        json_t *header = json_object_get(result, "header");
        CHECK_STR(json_string_value(json_object_get(header, "msg_id")), msg_ids[i]);
        CHECK_STR(json_string_value(json_object_get(header, "session")), "kb-session");
        CHECK_STR(json_string_value(json_object_get(header, "username")), "tester");
        CHECK_STR(json_string_value(json_object_get(header, "version")), "5.3");
        CHECK_STR(json_string_value(json_object_get(result, "msg_type")),
                  i == 0 ? "execute_request" : "stream");
        CHECK_STR(json_string_value(json_object_get(json_object_get(result, "metadata"), "tag")),
                  "\xc3\xbc");
        if (i == 0)
            CHECK(json_object_size(json_object_get(result, "parent_header")) == 0);
        else
            CHECK_STR(json_string_value(
                          json_object_get(json_object_get(result, "parent_header"), "msg_id")),
                      msg_ids[0]);
        CHECK(json_array_size(json_object_get(result, "identities")) == (i == 2 ? 1u : 0u));
        if (i == 2)
            CHECK_STR(json_string_value(json_array_get(json_object_get(result, "identities"), 0)),
                      "0080ff");
    }
    json_decref(doc);
    json_decref(input);
    json_decref(parent);
    json_decref(contents);
    free(ident.data);
    free(command);
    free(key_hex);
    kb_test_rmtree(dir);
    free(dir);
    kb_wire_destroy(&wire);
}

static void test_python_verifies(void)
{
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        fprintf(stderr, "   %s\n", schemes[i]);
        python_verifies(schemes[i], test_key, TEST_KEY_LEN);
    }
    fprintf(stderr, "   unsigned\n");
    python_verifies("hmac-sha256", NULL, 0);
}

/*  ---------------------------------------------------------------------
    Bad input */

static void test_malformed(void)
{
    kb_wire_t *wire = new_wire("hmac-sha256", test_key, TEST_KEY_LEN, "kb");
    kb_wire_t *open_wire = new_wire("hmac-sha256", NULL, 0, "kb");
    if (!wire || !open_wire)
        goto done;

    /* The good message itself is accepted, so each case below differs in
       exactly the way it names. */
    crafted_t good = craft(GOOD_HEADER, "{}", "{}", "{\"execution_state\":\"idle\"}", true);
    kb_msg_t *msg = NULL;
    kb_error_t err = { 0 };
    CHECK(kb_wire_decode(wire, good.frames, good.count, &msg, &err) == KB_WIRE_OK);
    kb_msg_destroy(&msg);

    /* Replayed: the same signed message a second time. */
    EXPECT_REJECT(wire, good.frames, good.count, KB_WIRE_REPLAYED, "replayed signature");
    /* Truncated: only four frames after the delimiter. */
    EXPECT_REJECT(wire, good.frames, good.count - 1, KB_WIRE_MALFORMED, "truncated");
    EXPECT_REJECT(wire, good.frames, 2, KB_WIRE_MALFORMED, "truncated");
    /* No delimiter: drop it, or garble it. */
    kb_frame_t no_delimiter[7];
    no_delimiter[0] = good.frames[0];
    memcpy(&no_delimiter[1], &good.frames[2], 5 * sizeof(kb_frame_t));
    EXPECT_REJECT(wire, no_delimiter, 6, KB_WIRE_MALFORMED, "no <IDS|MSG> delimiter");
    EXPECT_REJECT(wire, good.frames, 0, KB_WIRE_MALFORMED, "no <IDS|MSG> delimiter");
    memcpy(no_delimiter, good.frames, 7 * sizeof(kb_frame_t));
    no_delimiter[1] = (kb_frame_t){ (unsigned char *)"<IDS|MSG", 8 };
    EXPECT_REJECT(wire, no_delimiter, 7, KB_WIRE_MALFORMED, "no <IDS|MSG> delimiter");
    crafted_free(&good);

    /* Signature problems. */
    crafted_t unsigned_msg = craft(GOOD_HEADER, "{}", "{}", "{}", false);
    EXPECT_REJECT(wire, unsigned_msg.frames, unsigned_msg.count, KB_WIRE_BAD_SIGNATURE,
                  "unsigned message");
    crafted_free(&unsigned_msg);

    crafted_t flipped = craft(GOOD_HEADER, "{}", "{}", "{\"n\":1}", true);
    flipped.frames[2].data[10] = flipped.frames[2].data[10] == '0' ? '1' : '0';
    EXPECT_REJECT(wire, flipped.frames, flipped.count, KB_WIRE_BAD_SIGNATURE, "signature mismatch");
    crafted_free(&flipped);

    crafted_t tampered = craft(GOOD_HEADER, "{}", "{}", "{\"n\":1}", true);
    tampered.frames[6].data[5] = '2'; /* {"n":2} under the signature of {"n":1} */
    EXPECT_REJECT(wire, tampered.frames, tampered.count, KB_WIRE_BAD_SIGNATURE,
                  "signature mismatch");
    tampered.frames[6].data[5] = '1';
    CHECK(kb_wire_decode(wire, tampered.frames, tampered.count, &msg, &err) == KB_WIRE_OK);
    kb_msg_destroy(&msg);
    /* Signed with a different scheme: right key, wrong digest length. */
    free(tampered.frames[2].data);
    char *sha512 = reference_signature("SHA512", test_key, TEST_KEY_LEN, &tampered.frames[3]);
    tampered.frames[2] = frame_of_str(sha512);
    free(sha512);
    EXPECT_REJECT(wire, tampered.frames, tampered.count, KB_WIRE_BAD_SIGNATURE, "hex digits");
    crafted_free(&tampered);

    crafted_t not_hex = craft(GOOD_HEADER, "{}", "{}", "{}", true);
    not_hex.frames[2].data[0] = 'g';
    EXPECT_REJECT(wire, not_hex.frames, not_hex.count, KB_WIRE_BAD_SIGNATURE, "not hexadecimal");
    crafted_free(&not_hex);

    /* JSON problems, correctly signed so that the parser is reached. */
    static const struct {
        const char *header, *parent, *metadata, *content, *needle;
    } cases[] = {
        { GOOD_HEADER, "{}", "{}", "{\"a\":", "content is not a JSON object" },
        { GOOD_HEADER, "{}", "{}", "", "content is not a JSON object" },
        { GOOD_HEADER, "{}", "{}", "{} {}", "content is not a JSON object" },
        { GOOD_HEADER, "{}", "{}", "\"text\"", "content is not a JSON object: it is a string" },
        { "[1,2]", "{}", "{}", "{}", "header is not a JSON object: it is an array" },
        { "nope", "{}", "{}", "{}", "header is not a JSON object" },
        { GOOD_HEADER, "null", "{}", "{}", "parent_header is not a JSON object" },
        { GOOD_HEADER, "{}", "[]", "{}", "metadata is not a JSON object" },
        { "{\"msg_id\":\"m-2\"}", "{}", "{}", "{}", "header lacks msg_type" },
        { "{\"msg_id\":\"m-3\",\"msg_type\":7}", "{}", "{}", "{}", "header lacks msg_type" },
        { "{\"msg_id\":\"m-4\",\"msg_type\":\"\"}", "{}", "{}", "{}", "header lacks msg_type" },
        { "{\"msg_id\":\"m-5\",\"msg_type\":\"a\\u0000b\"}", "{}", "{}", "{}",
          "header lacks msg_type" },
        { "{\"msg_type\":\"status\"}", "{}", "{}", "{}", "header lacks msg_id" },
        { GOOD_HEADER, "{\"msg_id\":42}", "{}", "{}", "parent_header msg_id is not a string" },
        { GOOD_HEADER, "{}", "{}", "{\"n\":123456789012345678901234567890}",
          "content is not a JSON object" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        crafted_t bad
            = craft(cases[i].header, cases[i].parent, cases[i].metadata, cases[i].content, true);
        EXPECT_REJECT(wire, bad.frames, bad.count, KB_WIRE_MALFORMED, cases[i].needle);
        /* the unsigned codec parses the same bytes to the same verdict */
        EXPECT_REJECT(open_wire, bad.frames, bad.count, KB_WIRE_MALFORMED, cases[i].needle);
        crafted_free(&bad);
    }
    /* A malformed message is not remembered: once fixed and re-signed it
       would differ anyway, but the same bytes keep failing the same way. */
    crafted_t twice = craft(GOOD_HEADER, "{}", "{}", "[]", true);
    EXPECT_REJECT(wire, twice.frames, twice.count, KB_WIRE_MALFORMED, "content");
    EXPECT_REJECT(wire, twice.frames, twice.count, KB_WIRE_MALFORMED, "content");
    crafted_free(&twice);

    /* Invalid UTF-8 is repaired to U+FFFD as jupyter_client does; a null
       parent msg_id counts as none. */
    crafted_t latin1 = craft(GOOD_HEADER, "{\"msg_id\":null}", "{}",
                             "{\"text\":\"caf\xe9 \xed\xa0\x80 \xf0\x9f\x90\"}", true);
    CHECK(kb_wire_decode(wire, latin1.frames, latin1.count, &msg, &err) == KB_WIRE_OK);
    if (msg) {
        CHECK_STR(json_string_value(json_object_get(msg->content, "text")),
                  "caf\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd");
        CHECK_STR(msg->parent_msg_id, "");
    }
    kb_msg_destroy(&msg);
    crafted_free(&latin1);

    /* Empty key: unsigned messages are accepted, any signature is ignored,
       and the same message may come twice. */
    crafted_t plain = craft(GOOD_HEADER, "{\"msg_id\":\"p-1\"}", "{}", "{}", false);
    for (int round = 0; round < 2; round++) {
        CHECK(kb_wire_decode(open_wire, plain.frames, plain.count, &msg, &err) == KB_WIRE_OK);
        CHECK(msg && strcmp(msg->parent_msg_id, "p-1") == 0);
        kb_msg_destroy(&msg);
    }
    crafted_free(&plain);
    crafted_t signed_anyway = craft(GOOD_HEADER, "{}", "{}", "{}", true);
    CHECK(kb_wire_decode(open_wire, signed_anyway.frames, signed_anyway.count, &msg, &err)
          == KB_WIRE_OK);
    kb_msg_destroy(&msg);
    crafted_free(&signed_anyway);

    /* An unknown scheme is refused at creation, with a reason. */
    static const char *const bad_schemes[]
        = { "hmac-nosuchdigest", "sha256", "hmac-", "hmac-shake128", "HMAC-SHA256", "" };
    for (size_t i = 0; i < sizeof bad_schemes / sizeof bad_schemes[0]; i++) {
        kb_error_t reason = { 0 };
        kb_wire_t *none = kb_wire_new(bad_schemes[i], test_key, TEST_KEY_LEN, "kb", NULL, &reason);
        CHECK(none == NULL);
        CHECK(strstr(reason.message, "scheme") != NULL);
        kb_wire_destroy(&none);
        /* also without a key: a bad connection file is bad either way */
        none = kb_wire_new(bad_schemes[i], NULL, 0, "kb", NULL, &reason);
        CHECK(none == NULL);
        kb_wire_destroy(&none);
    }
    kb_error_t reason = { 0 };
    kb_wire_t *bad_session = kb_wire_new(NULL, NULL, 0, "\xff", NULL, &reason);
    CHECK(bad_session == NULL && strstr(reason.message, "UTF-8"));
    kb_wire_t *default_scheme = kb_wire_new(NULL, test_key, TEST_KEY_LEN, "kb", NULL, NULL);
    CHECK(default_scheme != NULL);
    if (default_scheme) {
        /* NULL scheme means hmac-sha256, as in jupyter_client */
        kb_frame_t *frames = NULL;
        size_t count = 0;
        CHECK(kb_wire_encode(default_scheme, "status", json_object(), NULL, NULL, TEST_DATE, NULL,
                             0, &frames, &count, NULL, 0)
              == 0);
        char *expected
            = frames ? reference_signature("SHA256", test_key, TEST_KEY_LEN, &frames[2]) : NULL;
        CHECK(expected && frame_equals(&frames[1], expected, 64));
        free(expected);
        kb_frames_free(frames, count);
    }
    kb_wire_destroy(&default_scheme);

    CHECK(kb_wire_rejected(wire, KB_WIRE_MALFORMED) == 5 + sizeof cases / sizeof cases[0] + 2);
    CHECK(kb_wire_rejected(wire, KB_WIRE_BAD_SIGNATURE) == 5);
    CHECK(kb_wire_rejected(wire, KB_WIRE_REPLAYED) == 1);
    CHECK(kb_wire_rejected(wire, (kb_wire_status_t)-9) == 0);
done:
    kb_wire_destroy(&wire);
    kb_wire_destroy(&open_wire);
}

static void test_limits(void)
{
    kb_wire_t *wire = new_wire("hmac-sha256", test_key, TEST_KEY_LEN, "kb");
    if (!wire)
        return;
    crafted_t base = craft(GOOD_HEADER, "{}", "{}", "{\"text\":\"0123456789\"}", true);
    kb_frame_t frames[16];
    memcpy(frames, base.frames, 7 * sizeof *frames);
    for (size_t i = 7; i < 16; i++)
        frames[i] = (kb_frame_t){ (unsigned char *)"buffer", 6 };

    kb_wire_set_limits(wire, &(kb_wire_limits_t){ .max_frames = 10 });
    EXPECT_REJECT(wire, frames, 11, KB_WIRE_TOO_LARGE, "message has 11 frames, limit 10");
    kb_wire_set_limits(wire, &(kb_wire_limits_t){ .max_frame_bytes = 20 });
    EXPECT_REJECT(wire, frames, 7, KB_WIRE_TOO_LARGE, "frame 2 is 64 bytes, limit 20");
    kb_wire_set_limits(wire, &(kb_wire_limits_t){ .max_frame_bytes = 70, .max_total_bytes = 150 });
    EXPECT_REJECT(wire, frames, 7, KB_WIRE_TOO_LARGE, "over 150 bytes in total at frame 6");
    /* At the limits exactly, it passes. */
    size_t total = 0, largest = 0;
    for (size_t i = 0; i < 10; i++) {
        total += frames[i].size;
        largest = frames[i].size > largest ? frames[i].size : largest;
    }
    kb_wire_set_limits(wire, &(kb_wire_limits_t){ 10, largest, total, 0 });
    kb_msg_t *msg = NULL;
    kb_error_t err = { 0 };
    CHECK(kb_wire_decode(wire, frames, 10, &msg, &err) == KB_WIRE_OK);
    CHECK(msg && msg->buffers_len == 3 && frame_equals(&msg->buffers[2], "buffer", 6));
    kb_msg_destroy(&msg);
    /* Limits are checked before the signature: an oversized replay is too large. */
    EXPECT_REJECT(wire, frames, 11, KB_WIRE_TOO_LARGE, "frames");
    CHECK(kb_wire_rejected(wire, KB_WIRE_TOO_LARGE) == 4);
    /* NULL restores the defaults. */
    kb_wire_set_limits(wire, NULL);
    memcpy(frames, base.frames, 7 * sizeof *frames);
    EXPECT_REJECT(wire, frames, 16, KB_WIRE_REPLAYED, "replayed");
    crafted_free(&base);

    /* Default frame-size limit, 256 MiB, without touching that much memory
       beyond one allocation: a zero-filled frame past it is refused. */
    kb_wire_set_limits(wire, NULL);
    size_t huge_size = ((size_t)256 << 20) + 1;
    kb_frame_t huge[7] = { { (unsigned char *)KB_WIRE_DELIMITER, 9 } };
    for (size_t i = 1; i < 7; i++)
        huge[i] = (kb_frame_t){ (unsigned char *)"{}", 2 };
    huge[6] = (kb_frame_t){ calloc(1, 1), huge_size }; /* never read: size alone decides */
    EXPECT_REJECT(wire, huge, 7, KB_WIRE_TOO_LARGE, "frame 6 is 268435457 bytes, limit 268435456");
    free(huge[6].data);
    kb_wire_destroy(&wire);
}

/*  Replay history: bounded, oldest forgotten first, resizable. */
static void test_replay_window(void)
{
    kb_wire_t *sender = new_wire("hmac-sha256", test_key, TEST_KEY_LEN, "sender");
    kb_wire_t *wire = new_wire("hmac-sha256", test_key, TEST_KEY_LEN, "receiver");
    if (!sender || !wire)
        goto done;
    enum { N = 5000, WINDOW = 1000 };
    kb_frame_t *sent[N];
    size_t counts[N];
    for (int i = 0; i < N; i++) {
        CHECK(kb_wire_encode(sender, "status", json_pack("{s:i}", "n", i), NULL, NULL, TEST_DATE,
                             NULL, 0, &sent[i], &counts[i], NULL, 0)
              == 0);
    }
    kb_wire_set_limits(wire, &(kb_wire_limits_t){ .replay_window = WINDOW });
    kb_msg_t *msg = NULL;
    int accepted = 0;
    for (int i = 0; i < N; i++) {
        accepted += kb_wire_decode(wire, sent[i], counts[i], &msg, NULL) == KB_WIRE_OK;
        kb_msg_destroy(&msg);
    }
    CHECK(accepted == N);
    int replays = 0;
    for (int i = N - 1; i >= N - WINDOW; i--)
        replays += kb_wire_decode(wire, sent[i], counts[i], &msg, NULL) == KB_WIRE_REPLAYED;
    CHECK(replays == WINDOW);
    /* Forgotten, so accepted again (and remembered, pushing out N - WINDOW). */
    CHECK(kb_wire_decode(wire, sent[0], counts[0], &msg, NULL) == KB_WIRE_OK);
    kb_msg_destroy(&msg);
    CHECK(kb_wire_decode(wire, sent[0], counts[0], &msg, NULL) == KB_WIRE_REPLAYED);
    CHECK(kb_wire_decode(wire, sent[N - 1], counts[N - 1], &msg, NULL) == KB_WIRE_REPLAYED);
    CHECK(kb_wire_decode(wire, sent[N - WINDOW], counts[N - WINDOW], &msg, NULL) == KB_WIRE_OK);
    kb_msg_destroy(&msg);

    /* Shrinking keeps the newest three: N-1, 0 and N-WINDOW. */
    kb_wire_set_limits(wire, &(kb_wire_limits_t){ .replay_window = 3 });
    CHECK(kb_wire_decode(wire, sent[N - 1], counts[N - 1], &msg, NULL) == KB_WIRE_REPLAYED);
    CHECK(kb_wire_decode(wire, sent[0], counts[0], &msg, NULL) == KB_WIRE_REPLAYED);
    CHECK(kb_wire_decode(wire, sent[N - WINDOW], counts[N - WINDOW], &msg, NULL)
          == KB_WIRE_REPLAYED);
    CHECK(kb_wire_decode(wire, sent[N - 2], counts[N - 2], &msg, NULL) == KB_WIRE_OK);
    kb_msg_destroy(&msg);
    /* ... which pushed out N-1, the oldest of the three. */
    CHECK(kb_wire_decode(wire, sent[N - 1], counts[N - 1], &msg, NULL) == KB_WIRE_OK);
    kb_msg_destroy(&msg);
    CHECK(kb_wire_decode(wire, sent[N - 2], counts[N - 2], &msg, NULL) == KB_WIRE_REPLAYED);
    /* Growing again keeps all that was remembered. */
    kb_wire_set_limits(wire, NULL);
    CHECK(kb_wire_decode(wire, sent[N - WINDOW], counts[N - WINDOW], &msg, NULL)
          == KB_WIRE_REPLAYED);
    CHECK(kb_wire_decode(wire, sent[N - 2], counts[N - 2], &msg, NULL) == KB_WIRE_REPLAYED);
    CHECK(kb_wire_decode(wire, sent[N - 1], counts[N - 1], &msg, NULL) == KB_WIRE_REPLAYED);
    CHECK(kb_wire_decode(wire, sent[1], counts[1], &msg, NULL) == KB_WIRE_OK);
    kb_msg_destroy(&msg);
    for (int i = 0; i < N; i++)
        kb_frames_free(sent[i], counts[i]);
done:
    kb_wire_destroy(&sender);
    kb_wire_destroy(&wire);
}

/*  ---------------------------------------------------------------------
    Messages made elsewhere: checked like decoded ones (the four parts
    stolen even on failure: ASan sees a leak), sent as they stand */

static void test_msg_new_and_encode_msg(void)
{
    kb_error_t err = { 0 };
    kb_msg_t *msg = (kb_msg_t *)(uintptr_t)1;
    kb_wire_status_t status = kb_wire_msg_new(json_pack("{s:s}", "msg_id", "m"), json_object(),
                                              json_object(), json_object(), &msg, &err);
    CHECK(status == KB_WIRE_MALFORMED && msg == NULL
          && strstr(err.message, "header lacks msg_type"));
    status = kb_wire_msg_new(NULL, json_object(), json_object(), json_object(), &msg, &err);
    CHECK(status == KB_WIRE_MALFORMED && strstr(err.message, "header is not a JSON object"));
    json_t *header = json_pack("{s:s, s:s, s:s}", "msg_id", "client-7", "msg_type",
                               "execute_request", "session", "client");
    CHECK(kb_wire_msg_new(header, json_pack("{s:s}", "msg_id", "p"), json_object(),
                          json_pack("{s:s}", "code", "1"), &msg, &err)
          == KB_WIRE_OK);
    CHECK(msg && *err.message == '\0' && strcmp(msg->parent_msg_id, "p") == 0);
    if (!msg)
        return;
    kb_frame_t ident = frame_of_str("id");
    msg->identities = &ident;
    msg->identities_len = 1;
    kb_wire_t *daemon = new_wire("hmac-sha256", test_key, TEST_KEY_LEN, "daemon");
    kb_wire_t *kernel = new_wire("hmac-sha256", test_key, TEST_KEY_LEN, "kernel");
    kb_frame_t *frames = NULL;
    size_t count = 0;
    CHECK(daemon && kb_wire_encode_msg(daemon, msg, &frames, &count) == 0 && count == 7);
    msg->identities = NULL;
    msg->identities_len = 0;
    kb_msg_t *got = NULL;
    CHECK(kernel && kb_wire_decode(kernel, frames, count, &got, &err) == KB_WIRE_OK);
    if (got) {
        /* The sender's header (msg_id, session), not the daemon's. */
        CHECK(json_equal(kb_msg_header(got), kb_msg_header(msg))
              && json_equal(got->content, msg->content));
        CHECK(got->identities_len == 1 && frame_equals(&got->identities[0], "id", 2));
    }
    kb_msg_destroy(&got);
    kb_frames_free(frames, count);
    free(ident.data);
    kb_msg_destroy(&msg);
    kb_wire_destroy(&daemon);
    kb_wire_destroy(&kernel);
}

/*  header, parent_header and metadata are checked and their ids read
    without a tree; each tree is made on first use, once, and says what
    the bytes say (escapes, U+FFFD for ill-formed UTF-8, the last of
    duplicate keys, a date that is not a string). */
static void test_parts_on_demand(void)
{
    kb_wire_t *wire = new_wire("hmac-sha256", test_key, TEST_KEY_LEN, "kernel");
    kb_error_t err;
    kb_msg_t *msg = NULL;
    crafted_t c = craft("{\"msg_type\":\"x\",\"msg_id\":\"m\\u00e9-\xff\",\"date\":\"D\","
                        "\"msg_type\":\"exec\\u0075te_reply\",\"extra\":[1,{\"msg_id\":2}]}",
                        " { \"msg_id\" : \"p\\\"1\" , \"date\":null } ", "{\"k\":[true]}",
                        "{\"status\":\"ok\"}", true);
    CHECK(wire && kb_wire_decode(wire, c.frames, c.count, &msg, &err) == KB_WIRE_OK);
    if (msg) {
        CHECK_STR(msg->msg_type, "execute_reply");
        CHECK_STR(msg->msg_id, "m\xc3\xa9-\xef\xbf\xbd");
        CHECK_STR(msg->parent_msg_id, "p\"1");
        CHECK_STR(msg->date, "D");
        CHECK(!msg->header_json && !msg->parent_json && !msg->metadata_json);
        json_t *header = kb_msg_header(msg);
        CHECK(header && header == kb_msg_header(msg) && msg->header_json == header);
        CHECK_STR(json_string_value(json_object_get(header, "msg_type")), msg->msg_type);
        CHECK_STR(json_string_value(json_object_get(header, "msg_id")), msg->msg_id);
        CHECK(json_is_array(json_object_get(header, "extra")));
        CHECK(json_is_null(json_object_get(kb_msg_parent_header(msg), "date")));
        CHECK(json_is_true(json_array_get(json_object_get(kb_msg_metadata(msg), "k"), 0)));
        CHECK_STR(json_string_value(json_object_get(msg->content, "status")), "ok");
    }
    kb_msg_destroy(&msg);
    crafted_free(&c);
    /* A date that is no string is none; a parent without msg_id is "". */
    c = craft("{\"msg_type\":\"status\",\"msg_id\":\"m-2\",\"date\":7}", "{\"x\":1}", "{}", "{}",
              true);
    CHECK(kb_wire_decode(wire, c.frames, c.count, &msg, &err) == KB_WIRE_OK);
    if (msg) {
        CHECK(msg->date == NULL);
        CHECK_STR(msg->parent_msg_id, "");
        CHECK(json_integer_value(json_object_get(kb_msg_header(msg), "date")) == 7);
    }
    kb_msg_destroy(&msg);
    crafted_free(&c);
    /* Refused as jansson refuses, with its reason, in any of the three. */
    static const char *const bad[][3] = {
        { "{\"msg_type\":\"s\",\"msg_id\":\"m\",}", "{}", "{}" },
        { GOOD_HEADER, "{\"msg_id\":\"p\"} x", "{}" },
        { GOOD_HEADER, "{}", "{\"n\":1e999}" },
        { GOOD_HEADER, "{}", "{\"k\\u0000\":1}" },
    };
    static const char *const names[] = { "header", "parent_header", "metadata", "metadata" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = craft(bad[i][0], bad[i][1], bad[i][2], "{}", true);
        char needle[64];
        snprintf(needle, sizeof needle, "%s is not a JSON object: ", names[i]);
        EXPECT_REJECT(wire, c.frames, c.count, KB_WIRE_MALFORMED, needle);
        crafted_free(&c);
    }
    kb_wire_destroy(&wire);
}

/*  The header kb_wire_encode writes without a tree is what jansson's
    compact dump of {msg_id, msg_type, username, session, date, version}
    is, byte for byte, with strings that need escapes too. */
static void test_header_bytes(void)
{
    static const char *const cases[][4] = {
        /* session, username, msg_type, date */
        { "k-1", "tester", "execute_request", TEST_DATE },
        { "s\\e\"s\x7f", "\xc3\xa9t\xc3\xa9", "a\"b\n\x01/", "2024-01-01T00:00:00\xe2\x82\xac" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kb_wire_t *wire
            = kb_wire_new("hmac-sha256", test_key, TEST_KEY_LEN, cases[i][0], cases[i][1], NULL);
        kb_frame_t *frames = NULL;
        size_t count = 0;
        char msg_id[128];
        for (int n = 0; n < 2 && wire; n++) {
            CHECK(kb_wire_encode(wire, cases[i][2], json_object(), NULL, NULL, cases[i][3], NULL, 0,
                                 &frames, &count, msg_id, sizeof msg_id)
                  == 0);
            json_t *tree = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", msg_id, "msg_type",
                                     cases[i][2], "username", cases[i][1], "session", cases[i][0],
                                     "date", cases[i][3], "version", "5.3");
            char *want = json_dumps(tree, JSON_COMPACT);
            char expected_id[128];
            snprintf(expected_id, sizeof expected_id, "%s_%d", cases[i][0], n + 1);
            CHECK_STR(msg_id, expected_id);
            CHECK(want && count == 6 && frames[2].size == strlen(want)
                  && memcmp(frames[2].data, want, frames[2].size) == 0);
            free(want);
            json_decref(tree);
            kb_frames_free(frames, count);
        }
        CHECK(wire != NULL);
        /* what is not UTF-8 is refused, and counts no msg_id */
        CHECK(wire
              && kb_wire_encode(wire, "bad\xff", json_object(), NULL, NULL, TEST_DATE, NULL, 0,
                                &frames, &count, NULL, 0)
                     == -1
              && strstr(kb_wire_errstr(wire), "UTF-8"));
        kb_wire_destroy(&wire);
    }
}

int main(void)
{
    RUN_TEST(test_round_trip);
    RUN_TEST(test_python_signs);
    RUN_TEST(test_python_verifies);
    RUN_TEST(test_malformed);
    RUN_TEST(test_limits);
    RUN_TEST(test_replay_window);
    RUN_TEST(test_msg_new_and_encode_msg);
    RUN_TEST(test_parts_on_demand);
    RUN_TEST(test_header_bytes);
    return kb_test_summary();
}
