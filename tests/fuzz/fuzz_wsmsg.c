/*  fuzz_wsmsg.c - libFuzzer target for the kernel websocket codec.

    Input layout: byte 0 holds mode bits, the rest is one websocket
    payload, copied into an exact-size allocation so that ASan sees any
    over-read.

    Mode bits:
      0x01  protocol v1.kernel.websocket.jupyter.org (else legacy)
      0x02  a binary frame (else text)
      0x04  tight limits, to reach the size checks with small inputs

    Checks beyond "no crash, no leak": a failure has a reason and no
    message; an accepted message is well formed, re-serializes in both
    protocols and parses back equal, and, signed for a kernel with
    kb_wire_encode_msg, is accepted by kb_wire_decode unchanged.

    Built by CMake with -DKB_FUZZ=ON -DCMAKE_C_COMPILER=clang. */
#include "wire/kb_wsmsg.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MODE_V1 0x01
#define MODE_BINARY 0x02
#define MODE_TIGHT 0x04

static const unsigned char fuzz_key[] = "fuzz-key";
#define FUZZ_KEY_LEN (sizeof fuzz_key - 1)

static int same_message(const kb_msg_t *a, const kb_msg_t *b)
{
    if (!json_equal(kb_msg_header(a), kb_msg_header(b))
        || !json_equal(kb_msg_parent_header(a), kb_msg_parent_header(b))
        || !json_equal(kb_msg_metadata(a), kb_msg_metadata(b))
        || !json_equal(a->content, b->content) || strcmp(a->msg_id, b->msg_id) != 0
        || strcmp(a->msg_type, b->msg_type) != 0 || strcmp(a->parent_msg_id, b->parent_msg_id) != 0
        || a->buffers_len != b->buffers_len)
        return 0;
    for (size_t i = 0; i < a->buffers_len; i++)
        if (a->buffers[i].size != b->buffers[i].size
            || memcmp(a->buffers[i].data, b->buffers[i].data, a->buffers[i].size) != 0)
            return 0;
    return 1;
}

static void check_message(const kb_msg_t *msg)
{
    if (!json_is_object(kb_msg_header(msg)) || !json_is_object(kb_msg_parent_header(msg))
        || !json_is_object(kb_msg_metadata(msg)) || !json_is_object(msg->content) || !msg->msg_type
        || !*msg->msg_type || !msg->msg_id || !*msg->msg_id || !msg->parent_msg_id
        || msg->identities_len != 0 || (msg->buffers_len && !msg->buffers))
        abort();
    for (size_t i = 0; i < msg->buffers_len; i++)
        if (!msg->buffers[i].data)
            abort();
}

static void check_round_trip(const kb_msg_t *msg, kb_wsmsg_channel_t channel, kb_buf_t *out)
{
    for (int protocol = KB_WSMSG_LEGACY; protocol <= KB_WSMSG_V1; protocol++) {
        bool binary = false;
        kb_error_t err;
        if (kb_wsmsg_encode(protocol, channel, msg, out, &binary, &err) != KB_WSMSG_OK)
            abort();
        kb_msg_t *again = NULL;
        kb_wsmsg_channel_t channel_again = KB_WSMSG_IOPUB;
        if (kb_wsmsg_parse(protocol, binary, out->data, out->len, NULL, &channel_again, &again,
                           &err)
                != KB_WSMSG_OK
            || channel_again != channel || !same_message(again, msg))
            abort();
        kb_msg_destroy(&again);
    }
}

static void check_signed(const kb_msg_t *msg)
{
    kb_wire_t *daemon = kb_wire_new("hmac-sha256", fuzz_key, FUZZ_KEY_LEN, "d", NULL, NULL);
    kb_wire_t *kernel = kb_wire_new("hmac-sha256", fuzz_key, FUZZ_KEY_LEN, "k", NULL, NULL);
    if (!daemon || !kernel)
        abort();
    kb_frame_t *frames = NULL;
    size_t count = 0;
    if (kb_wire_encode_msg(daemon, msg, &frames, &count) != 0)
        abort();
    kb_msg_t *received = NULL;
    kb_error_t err;
    if (kb_wire_decode(kernel, frames, count, &received, &err) != KB_WIRE_OK
        || !same_message(received, msg))
        abort();
    kb_msg_destroy(&received);
    kb_frames_free(frames, count);
    kb_wire_destroy(&daemon);
    kb_wire_destroy(&kernel);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned mode = data[0];
    size_t payload_size = size - 1;
    unsigned char *payload = malloc(payload_size ? payload_size : 1);
    if (!payload)
        abort();
    memcpy(payload, data + 1, payload_size);
    kb_wsmsg_limits_t tight = { .max_buffers = 3, .max_bytes = 512 };
    kb_wsmsg_protocol_t protocol = mode & MODE_V1 ? KB_WSMSG_V1 : KB_WSMSG_LEGACY;

    kb_msg_t *msg = NULL;
    kb_wsmsg_channel_t channel = KB_WSMSG_IOPUB;
    kb_error_t err;
    kb_wsmsg_status_t status
        = kb_wsmsg_parse(protocol, mode & MODE_BINARY, payload, payload_size,
                         mode & MODE_TIGHT ? &tight : NULL, &channel, &msg, &err);
    if (status == KB_WSMSG_OK) {
        if (!msg || *err.message || channel == KB_WSMSG_IOPUB)
            abort();
        check_message(msg);
        kb_buf_t out = KB_BUF_INIT;
        check_round_trip(msg, channel, &out);
        kb_buf_free(&out);
        check_signed(msg);
    } else if (msg || !*err.message)
        abort();
    kb_msg_destroy(&msg);
    free(payload);
    return 0;
}
