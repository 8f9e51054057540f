/*  fuzz_wire.c - libFuzzer target for the Jupyter wire codec.

    Input layout: byte 0 holds mode bits, the rest is a list of frames, each
    a length byte L then L bytes (L = 0xFF: the length is the next two bytes,
    little-endian); the last frame takes whatever remains. Each frame gets
    its own exact-size allocation so that ASan sees any over-read.

    Mode bits:
      0x01  re-sign: put the right HMAC (under the fuzz key) in the frame
            after the first <IDS|MSG>, so the keyed codec reaches the JSON
      0x02  tight limits, to reach the size checks with small inputs

    Checks beyond "no crash, no leak": a keyed and an unkeyed codec agree on
    re-signed input; an accepted message is well-formed (its parts parse
    when asked for, to the ids read without them), is a replay the second
    time, and survives encode -> decode with the same content.

    Built by CMake with -DKB_FUZZ=ON -DCMAKE_C_COMPILER=clang, which
    instruments the whole library for coverage. */
#include "wire/kb_wire.h"

#include <openssl/evp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_FRAMES 2048
#define MODE_RESIGN 0x01
#define MODE_TIGHT 0x02

static const unsigned char fuzz_key[] = "fuzz-key";
#define FUZZ_KEY_LEN (sizeof fuzz_key - 1)

static size_t split_frames(const uint8_t *data, size_t size, kb_frame_t *frames)
{
    size_t count = 0, at = 0;
    while (at < size && count < FUZZ_MAX_FRAMES) {
        size_t len = data[at++];
        if (len == 0xFF && size - at >= 2) {
            len = (size_t)data[at] | (size_t)data[at + 1] << 8;
            at += 2;
        }
        if (len > size - at)
            len = size - at;
        frames[count].data = malloc(len ? len : 1);
        if (!frames[count].data)
            abort();
        memcpy(frames[count].data, data + at, len);
        frames[count].size = len;
        count++;
        at += len;
    }
    return count;
}

/*  Replace the signature after the first delimiter with the correct one. */
static void resign(kb_frame_t *frames, size_t count)
{
    size_t d = 0;
    while (d < count && !(frames[d].size == 9 && memcmp(frames[d].data, KB_WIRE_DELIMITER, 9) == 0))
        d++;
    if (d == count || count - d < 6)
        return;
    size_t total = 0;
    for (size_t i = d + 2; i < d + 6; i++)
        total += frames[i].size;
    unsigned char *joined = malloc(total ? total : 1), mac[EVP_MAX_MD_SIZE];
    if (!joined)
        abort();
    size_t at = 0, mac_len = 0;
    for (size_t i = d + 2; i < d + 6; i++) {
        memcpy(joined + at, frames[i].data, frames[i].size);
        at += frames[i].size;
    }
    if (!EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, fuzz_key, FUZZ_KEY_LEN, joined, total, mac,
                   sizeof mac, &mac_len))
        abort();
    free(joined);
    free(frames[d + 1].data);
    frames[d + 1].data = malloc(2 * mac_len);
    if (!frames[d + 1].data)
        abort();
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < mac_len; i++) {
        frames[d + 1].data[2 * i] = (unsigned char)hex[mac[i] >> 4];
        frames[d + 1].data[2 * i + 1] = (unsigned char)hex[mac[i] & 15];
    }
    frames[d + 1].size = 2 * mac_len;
}

/*  What every accepted message must look like. */
static void check_message(const kb_msg_t *msg, size_t count, const char *err)
{
    if (!msg || *err || !json_is_object(kb_msg_header(msg))
        || !json_is_object(kb_msg_parent_header(msg)) || !json_is_object(kb_msg_metadata(msg))
        || !json_is_object(msg->content) || !msg->msg_type || !*msg->msg_type || !msg->msg_id
        || !*msg->msg_id || !msg->parent_msg_id
        || msg->identities_len + 6 + msg->buffers_len != count)
        abort();
    for (size_t i = 0; i < msg->buffers_len; i++)
        if (!msg->buffers[i].data)
            abort();
    /* The ids read without a tree are those of the tree. */
    const json_t *header = kb_msg_header(msg);
    const json_t *date = json_object_get(header, "date");
    const json_t *parent_id = json_object_get(kb_msg_parent_header(msg), "msg_id");
    if (strcmp(msg->msg_type, json_string_value(json_object_get(header, "msg_type"))) != 0
        || strcmp(msg->msg_id, json_string_value(json_object_get(header, "msg_id"))) != 0
        || strcmp(msg->parent_msg_id, json_is_string(parent_id) ? json_string_value(parent_id) : "")
               != 0
        || (json_is_string(date) ? !msg->date || strcmp(msg->date, json_string_value(date)) != 0
                                 : msg->date != NULL))
        abort();
}

/*  Re-encode an accepted message and decode it again: same content. */
static void check_round_trip(const kb_msg_t *msg)
{
    kb_wire_t *sender = kb_wire_new("hmac-sha256", fuzz_key, FUZZ_KEY_LEN, "fuzz", NULL, NULL);
    kb_wire_t *receiver = kb_wire_new("hmac-sha256", fuzz_key, FUZZ_KEY_LEN, "fuzz", NULL, NULL);
    if (!sender || !receiver)
        abort();
    kb_frame_t *frames = NULL;
    size_t count = 0;
    char msg_id[64];
    if (kb_wire_encode(sender, msg->msg_type, json_deep_copy(msg->content),
                       kb_msg_parent_header(msg), json_deep_copy(kb_msg_metadata(msg)),
                       "2024-01-01T00:00:00Z", msg->identities, msg->identities_len, &frames,
                       &count, msg_id, sizeof msg_id)
        != 0)
        abort();
    kb_msg_t *again = NULL;
    kb_error_t err;
    if (kb_wire_decode(receiver, frames, count, &again, &err) != KB_WIRE_OK)
        abort();
    if (!json_equal(again->content, msg->content)
        || !json_equal(kb_msg_metadata(again), kb_msg_metadata(msg))
        || !json_equal(kb_msg_parent_header(again), kb_msg_parent_header(msg))
        || strcmp(again->msg_type, msg->msg_type) != 0
        || strcmp(again->parent_msg_id, msg->parent_msg_id) != 0
        || strcmp(again->msg_id, msg_id) != 0 || again->identities_len != msg->identities_len)
        abort();
    kb_msg_destroy(&again);
    kb_frames_free(frames, count);
    kb_wire_destroy(&sender);
    kb_wire_destroy(&receiver);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned mode = data[0];
    static kb_frame_t frames[FUZZ_MAX_FRAMES];
    size_t count = split_frames(data + 1, size - 1, frames);
    if (mode & MODE_RESIGN)
        resign(frames, count);

    kb_wire_t *keyed = kb_wire_new("hmac-sha256", fuzz_key, FUZZ_KEY_LEN, "fuzz", NULL, NULL);
    kb_wire_t *open = kb_wire_new("hmac-sha256", NULL, 0, "fuzz", NULL, NULL);
    if (!keyed || !open)
        abort();
    if (mode & MODE_TIGHT) {
        kb_wire_limits_t tight = {
            .max_frames = 12, .max_frame_bytes = 512, .max_total_bytes = 2048, .replay_window = 2
        };
        kb_wire_set_limits(keyed, &tight);
        kb_wire_set_limits(open, &tight);
    }

    kb_error_t err;
    kb_msg_t *msg = NULL;
    kb_wire_status_t open_status = kb_wire_decode(open, frames, count, &msg, &err);
    if (open_status == KB_WIRE_OK) {
        check_message(msg, count, err.message);
        check_round_trip(msg);
    } else if (msg || !*err.message || open_status == KB_WIRE_BAD_SIGNATURE
               || open_status == KB_WIRE_REPLAYED)
        abort();
    kb_msg_destroy(&msg);

    kb_wire_status_t keyed_status = kb_wire_decode(keyed, frames, count, &msg, &err);
    if (keyed_status == KB_WIRE_OK)
        check_message(msg, count, err.message);
    else if (msg || !*err.message)
        abort();
    kb_msg_destroy(&msg);
    if ((mode & MODE_RESIGN) && keyed_status != open_status)
        abort(); /* a valid signature must make the key irrelevant */
    if (keyed_status == KB_WIRE_OK) {
        if (kb_wire_decode(keyed, frames, count, &msg, &err) != KB_WIRE_REPLAYED || msg)
            abort();
    }
    if (kb_wire_rejected(keyed, keyed_status) == 0)
        abort();

    kb_wire_destroy(&keyed);
    kb_wire_destroy(&open);
    for (size_t i = 0; i < count; i++)
        free(frames[i].data);
    return 0;
}
