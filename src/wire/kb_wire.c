/*  kb_wire.c - the Jupyter messaging wire codec (see kb_wire.h).

    Sections: frames and messages; the codec object; HMAC; decode;
    encode. The replay history it consults is kb_replay.c; a message's
    JSON parts (checked, their ids read, parsed when asked for),
    kb_wire_json.c.

    Not for: sockets, clocks, randomness or globals. Everything lives in
    one kb_wire_t. */
#include "wire/kb_wire.h"

#include <assert.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "util/kb_buf.h"
#include "wire/kb_replay.h"
#include "wire/kb_wire_impl.h"

#define KB_WIRE_DEFAULT_MAX_FRAME_BYTES ((size_t)256 << 20)
#define KB_WIRE_DEFAULT_MAX_TOTAL_BYTES ((size_t)512 << 20)
#define KB_WIRE_DEFAULT_REPLAY_WINDOW 65536
#define KB_WIRE_ERRSTR_SIZE 256
#define KB_WIRE_DELIMITER_LEN (sizeof KB_WIRE_DELIMITER - 1)
/* Frames after the delimiter: signature, header, parent, metadata, content. */
#define KB_WIRE_MIN_PARTS 5

/*  ---------------------------------------------------------------------
    Frames and messages */

void kb_frames_free(kb_frame_t *frames, size_t count)
{
    if (!frames)
        return;
    for (size_t i = 0; i < count; i++)
        free(frames[i].data);
    free(frames);
}

/*  Copy size bytes into frame; data is never NULL, even for size 0, so
    that callers may hand it to memcpy or zmq without a special case. */
static int frame_set_copy(kb_frame_t *frame, const void *data, size_t size)
{
    frame->data = malloc(size ? size : 1);
    if (!frame->data)
        return -1;
    if (size)
        memcpy(frame->data, data, size);
    frame->size = size;
    return 0;
}

/*  Deep copy of count frames; *out is NULL when count is 0. */
static int frames_copy(const kb_frame_t *frames, size_t count, kb_frame_t **out)
{
    *out = NULL;
    if (count == 0)
        return 0;
    kb_frame_t *copy = calloc(count, sizeof *copy);
    if (!copy)
        return -1;
    for (size_t i = 0; i < count; i++) {
        if (frame_set_copy(&copy[i], frames[i].data, frames[i].size) != 0) {
            kb_frames_free(copy, i);
            return -1;
        }
    }
    *out = copy;
    return 0;
}

void kb_msg_destroy(kb_msg_t **self_p)
{
    assert(self_p);
    kb_msg_t *self = *self_p;
    if (!self)
        return;
    kb_frames_free(self->identities, self->identities_len);
    kb_frames_free(self->buffers, self->buffers_len);
    json_decref(self->header_json);
    json_decref(self->parent_json);
    json_decref(self->metadata_json);
    json_decref(self->content);
    free(self->raw_parts[0].data);
    free(self->ids);
    free(self);
    *self_p = NULL;
}

/*  ---------------------------------------------------------------------
    The codec object */

struct kb_wire {
    EVP_MAC_CTX *mac;   /* keyed HMAC; NULL unsigned */
    EVP_MAC_CTX *work;  /* a copy of mac, re-initialised (same key) for each message */
    size_t digest_size; /* bytes of the HMAC */
    char *scheme;
    char *session;
    char *username;
    char *msg_id_prefix; /* session "_": a msg_id is it and the counter */
    unsigned long long msg_counter;
    kb_wire_limits_t limits;
    kb_replay_t replay;
    size_t accepted;
    size_t rejected[5]; /* indexed by -status */
    bool lazy_streams;  /* stream contents are left to the caller's scanner */
    char errstr[KB_WIRE_ERRSTR_SIZE];
};

/*  err set to text (KB_ERR_BAD_REQUEST), or cleared when text is empty. */
static void copy_error(kb_error_t *err, const char *text)
{
    if (*text)
        kb_error_set(err, KB_ERR_BAD_REQUEST, "%s", text);
    else
        kb_error_clear(err);
}

/*  Look up the digest named by jupyter_client's scheme suffix, which is a
    Python hashlib name: try it as is, then with '_' as '-' (sha3_256,
    sha512_256), then the hashlib aliases OpenSSL spells differently. */
static EVP_MD *fetch_digest(const char *name)
{
    static const struct {
        const char *hashlib, *openssl;
    } aliases[] = { { "blake2b", "BLAKE2B-512" }, { "blake2s", "BLAKE2S-256" } };
    char dashed[64];
    if (!*name || strlen(name) >= sizeof dashed)
        return NULL;
    ERR_set_mark();
    EVP_MD *md = EVP_MD_fetch(NULL, name, NULL);
    if (!md) {
        snprintf(dashed, sizeof dashed, "%s", name);
        for (char *c = dashed; *c; c++)
            if (*c == '_')
                *c = '-';
        md = EVP_MD_fetch(NULL, dashed, NULL);
    }
    for (size_t i = 0; !md && i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcasecmp(name, aliases[i].hashlib) == 0)
            md = EVP_MD_fetch(NULL, aliases[i].openssl, NULL);
    ERR_pop_to_mark();
    if (md && ((EVP_MD_get_flags(md) & EVP_MD_FLAG_XOF) || EVP_MD_get_size(md) <= 0)) {
        EVP_MD_free(md); /* an extendable-output function is no HMAC digest */
        md = NULL;
    }
    return md;
}

static bool is_utf8_string(const char *text)
{
    json_t *probe = json_string(text);
    json_decref(probe);
    return probe != NULL;
}

kb_wire_t *kb_wire_new(const char *scheme, const unsigned char *key, size_t key_len,
                       const char *session, const char *username, kb_error_t *err)
{
    assert(session);
    assert(key || key_len == 0);
    char reason[KB_WIRE_ERRSTR_SIZE] = "";
    EVP_MD *md = NULL;
    EVP_MAC *hmac = NULL;
    if (!scheme)
        scheme = "hmac-sha256";
    if (!username)
        username = "kernelbridge";

    kb_wire_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(reason, sizeof reason, "out of memory");
        goto fail;
    }
    self->scheme = strdup(scheme);
    self->session = strdup(session);
    self->username = strdup(username);
    if (asprintf(&self->msg_id_prefix, "%s_", session) < 0)
        self->msg_id_prefix = NULL;
    if (!self->scheme || !self->session || !self->username || !self->msg_id_prefix) {
        snprintf(reason, sizeof reason, "out of memory");
        goto fail;
    }
    if (!is_utf8_string(session) || !is_utf8_string(username)) {
        snprintf(reason, sizeof reason, "session and username must be valid UTF-8");
        goto fail;
    }
    if (strncmp(scheme, "hmac-", 5) != 0) {
        snprintf(reason, sizeof reason, "unknown signature scheme \"%.64s\": must be hmac-<digest>",
                 scheme);
        goto fail;
    }
    md = fetch_digest(scheme + 5);
    if (!md) {
        snprintf(reason, sizeof reason, "unknown signature scheme \"%.64s\": no such digest",
                 scheme);
        goto fail;
    }
    self->digest_size = (size_t)EVP_MD_get_size(md);

    if (key_len > 0) {
        ERR_set_mark();
        hmac = EVP_MAC_fetch(NULL, OSSL_MAC_NAME_HMAC, NULL);
        self->mac = hmac ? EVP_MAC_CTX_new(hmac) : NULL;
        OSSL_PARAM params[] = { OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
                                                                 (char *)EVP_MD_get0_name(md), 0),
                                OSSL_PARAM_construct_end() };
        bool ready = self->mac && EVP_MAC_init(self->mac, key, key_len, params) == 1
                     && EVP_MAC_CTX_get_mac_size(self->mac) == self->digest_size;
        ERR_pop_to_mark();
        if (!ready) {
            snprintf(reason, sizeof reason, "signature scheme \"%.64s\": HMAC unavailable", scheme);
            goto fail;
        }
    }
    EVP_MAC_free(hmac);
    EVP_MD_free(md);
    kb_wire_set_limits(self, NULL);
    return self;

fail:
    copy_error(err, reason);
    EVP_MAC_free(hmac);
    EVP_MD_free(md);
    kb_wire_destroy(&self);
    return NULL;
}

void kb_wire_destroy(kb_wire_t **self_p)
{
    assert(self_p);
    kb_wire_t *self = *self_p;
    if (!self)
        return;
    EVP_MAC_CTX_free(self->mac);
    EVP_MAC_CTX_free(self->work);
    kb_replay_free(&self->replay);
    free(self->scheme);
    free(self->session);
    free(self->username);
    free(self->msg_id_prefix);
    free(self);
    *self_p = NULL;
}

void kb_wire_set_lazy_streams(kb_wire_t *self, bool lazy)
{
    self->lazy_streams = lazy;
}

void kb_wire_set_limits(kb_wire_t *self, const kb_wire_limits_t *limits)
{
    assert(self);
    kb_wire_limits_t next = limits ? *limits : (kb_wire_limits_t){ 0 };
    if (next.max_frames == 0 || next.max_frames > KB_WIRE_MAX_FRAMES)
        next.max_frames = KB_WIRE_MAX_FRAMES;
    if (next.max_frame_bytes == 0)
        next.max_frame_bytes = KB_WIRE_DEFAULT_MAX_FRAME_BYTES;
    if (next.max_total_bytes == 0)
        next.max_total_bytes = KB_WIRE_DEFAULT_MAX_TOTAL_BYTES;
    if (next.replay_window == 0)
        next.replay_window = KB_WIRE_DEFAULT_REPLAY_WINDOW;
    if (next.replay_window > KB_REPLAY_MAX_WINDOW)
        next.replay_window = KB_REPLAY_MAX_WINDOW;
    self->limits = next;
    kb_replay_set_window(&self->replay, next.replay_window);
}

size_t kb_wire_rejected(const kb_wire_t *self, kb_wire_status_t status)
{
    assert(self);
    if (status == KB_WIRE_OK)
        return self->accepted;
    int index = -(int)status;
    if (index < 1 || index >= (int)(sizeof self->rejected / sizeof self->rejected[0]))
        return 0;
    return self->rejected[index];
}

const char *kb_wire_errstr(const kb_wire_t *self)
{
    assert(self);
    return self->errstr;
}

const char *kb_wire_status_str(kb_wire_status_t status)
{
    switch (status) {
        case KB_WIRE_OK:
            return "ok";
        case KB_WIRE_MALFORMED:
            return "malformed";
        case KB_WIRE_BAD_SIGNATURE:
            return "bad signature";
        case KB_WIRE_REPLAYED:
            return "replayed";
        case KB_WIRE_TOO_LARGE:
            return "too large";
    }
    return "unknown status";
}

/*  ---------------------------------------------------------------------
    HMAC */

/*  HMAC of the four signed frames (header, parent, metadata, content) into
    digest, which holds digest_size bytes. One working context, keyed once:
    EVP_MAC_init without a key starts a new HMAC with the same key (no
    copy of the context, no allocation per message). */
static int sign_parts(kb_wire_t *self, const kb_frame_t parts[4], unsigned char *digest)
{
    if (!self->work && !(self->work = EVP_MAC_CTX_dup(self->mac)))
        return -1;
    EVP_MAC_CTX *ctx = self->work;
    int rc = EVP_MAC_init(ctx, NULL, 0, NULL) == 1 ? 0 : -1;
    for (int i = 0; i < 4 && rc == 0; i++)
        if (parts[i].size > 0 && EVP_MAC_update(ctx, parts[i].data, parts[i].size) != 1)
            rc = -1;
    size_t out_len = 0;
    if (rc == 0
        && (EVP_MAC_final(ctx, digest, &out_len, EVP_MAX_MD_SIZE) != 1
            || out_len != self->digest_size))
        rc = -1;
    if (rc != 0)
        ERR_clear_error();
    return rc;
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/*  ---------------------------------------------------------------------
    Decode */

/*  Record a rejection: count it, keep the reason, and copy it to err. */
static kb_wire_status_t reject(kb_wire_t *self, kb_wire_status_t status, kb_error_t *err,
                               const char *format, ...) __attribute__((format(printf, 4, 5)));

static kb_wire_status_t reject(kb_wire_t *self, kb_wire_status_t status, kb_error_t *err,
                               const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(self->errstr, sizeof self->errstr, format, args);
    va_end(args);
    copy_error(err, self->errstr);
    self->rejected[-status]++;
    return status;
}

/*  The limits, checked first: nothing else is looked at in an oversized
    message. KB_WIRE_OK, or the rejection. */
static kb_wire_status_t check_limits(kb_wire_t *self, const kb_frame_t *frames, size_t count,
                                     kb_error_t *err)
{
    const kb_wire_limits_t *limits = &self->limits;
    if (count > limits->max_frames)
        return reject(self, KB_WIRE_TOO_LARGE, err, "message has %zu frames, limit %zu", count,
                      limits->max_frames);
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        assert(frames[i].data || frames[i].size == 0);
        if (frames[i].size > limits->max_frame_bytes)
            return reject(self, KB_WIRE_TOO_LARGE, err, "frame %zu is %zu bytes, limit %zu", i,
                          frames[i].size, limits->max_frame_bytes);
        if (frames[i].size > limits->max_total_bytes - total) /* total <= max: no wrap */
            return reject(self, KB_WIRE_TOO_LARGE, err,
                          "message is over %zu bytes in total at frame %zu",
                          limits->max_total_bytes, i);
        total += frames[i].size;
    }
    return KB_WIRE_OK;
}

/*  Check the message's signature against its parts, and that it is not a
    replay: KB_WIRE_OK with its fingerprint, or the rejection. */
static kb_wire_status_t authenticate(kb_wire_t *self, const kb_frame_t *signature,
                                     const kb_frame_t parts[4],
                                     unsigned char fingerprint[KB_REPLAY_FINGERPRINT_SIZE],
                                     kb_error_t *err)
{
    unsigned char claimed[EVP_MAX_MD_SIZE], expected[EVP_MAX_MD_SIZE];
    if (signature->size == 0)
        return reject(self, KB_WIRE_BAD_SIGNATURE, err, "unsigned message");
    if (signature->size != 2 * self->digest_size)
        return reject(self, KB_WIRE_BAD_SIGNATURE, err,
                      "signature is %zu bytes, %s needs %zu hex digits", signature->size,
                      self->scheme, 2 * self->digest_size);
    for (size_t i = 0; i < self->digest_size; i++) {
        int high = hex_value(signature->data[2 * i]), low = hex_value(signature->data[2 * i + 1]);
        if (high < 0 || low < 0)
            return reject(self, KB_WIRE_BAD_SIGNATURE, err, "signature is not hexadecimal");
        claimed[i] = (unsigned char)(high << 4 | low);
    }
    if (sign_parts(self, parts, expected) != 0)
        return reject(self, KB_WIRE_MALFORMED, err, "HMAC computation failed");
    if (CRYPTO_memcmp(claimed, expected, self->digest_size) != 0)
        return reject(self, KB_WIRE_BAD_SIGNATURE, err, "signature mismatch");
    memcpy(fingerprint, expected,
           self->digest_size < KB_REPLAY_FINGERPRINT_SIZE ? self->digest_size
                                                          : KB_REPLAY_FINGERPRINT_SIZE);
    if (kb_replay_contains(&self->replay, fingerprint))
        return reject(self, KB_WIRE_REPLAYED, err, "replayed signature");
    return KB_WIRE_OK;
}

kb_wire_status_t kb_wire_decode(kb_wire_t *self, const kb_frame_t *frames, size_t count,
                                kb_msg_t **msg_out, kb_error_t *err)
{
    assert(self);
    assert(msg_out);
    assert(frames || count == 0);
    *msg_out = NULL;
    kb_error_t why; /* set on every way to malformed */

    kb_wire_status_t status = check_limits(self, frames, count, err);
    if (status != KB_WIRE_OK)
        return status;

    size_t delimiter = 0;
    while (delimiter < count
           && !(frames[delimiter].size == KB_WIRE_DELIMITER_LEN
                && memcmp(frames[delimiter].data, KB_WIRE_DELIMITER, KB_WIRE_DELIMITER_LEN) == 0))
        delimiter++;
    if (delimiter == count)
        return reject(self, KB_WIRE_MALFORMED, err, "no <IDS|MSG> delimiter in %zu frames", count);
    size_t parts_len = count - delimiter - 1;
    if (parts_len < KB_WIRE_MIN_PARTS)
        return reject(self, KB_WIRE_MALFORMED, err,
                      "truncated message: %zu frames after <IDS|MSG>, need at least %d", parts_len,
                      KB_WIRE_MIN_PARTS);
    const kb_frame_t *signature = &frames[delimiter + 1];
    const kb_frame_t *parts = &frames[delimiter + 2]; /* header, parent, metadata, content */

    /* Authenticate before parsing anything an unauthenticated peer sent. */
    unsigned char fingerprint[KB_REPLAY_FINGERPRINT_SIZE] = { 0 };
    if (self->mac
        && (status = authenticate(self, signature, parts, fingerprint, err)) != KB_WIRE_OK)
        return status;

    kb_msg_t *msg = calloc(1, sizeof *msg);
    if (!msg)
        return reject(self, KB_WIRE_MALFORMED, err, "out of memory");
    if (kb_wire_read_parts(msg, parts, self->lazy_streams, &why) != 0)
        goto malformed;

    if (frames_copy(frames, delimiter, &msg->identities) != 0) {
        kb_error_set(&why, KB_ERR_BAD_REQUEST, "out of memory");
        goto malformed;
    }
    msg->identities_len = delimiter;
    if (frames_copy(parts + 4, parts_len - KB_WIRE_MIN_PARTS, &msg->buffers) != 0) {
        kb_error_set(&why, KB_ERR_BAD_REQUEST, "out of memory");
        goto malformed;
    }
    msg->buffers_len = parts_len - KB_WIRE_MIN_PARTS;

    if (self->mac)
        kb_replay_insert(&self->replay, fingerprint);
    self->accepted++;
    copy_error(err, "");
    *msg_out = msg;
    return KB_WIRE_OK;

malformed:
    kb_msg_destroy(&msg);
    return reject(self, KB_WIRE_MALFORMED, err, "%s", why.message);
}

/*  ---------------------------------------------------------------------
    Encode */

/*  Dump value compactly into frame (data never NULL). */
static int dump_frame(const json_t *value, kb_frame_t *frame)
{
    kb_buf_t buffer = KB_BUF_INIT;
    kb_buf_append_json(&buffer, value, JSON_COMPACT);
    frame->data = (unsigned char *)kb_buf_take(&buffer, &frame->size);
    return frame->data ? 0 : -1;
}

static int encode_fail(kb_wire_t *self, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

static int encode_fail(kb_wire_t *self, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(self->errstr, sizeof self->errstr, format, args);
    va_end(args);
    return -1;
}

/*  Build [identities..., <IDS|MSG>, signature, header, parent, metadata,
    content, buffers...]: each of the four parts is raw[i]'s bytes when
    that is not NULL, else json[i] dumped compactly; signed with the
    codec's key. Everything given is borrowed. 0, or -1 with errstr set. */
static int assemble(kb_wire_t *self, const kb_frame_t *identities, size_t identities_len,
                    const json_t *const json[4], const kb_frame_t *const raw[4],
                    const kb_frame_t *buffers, size_t buffers_len, kb_frame_t **frames_out,
                    size_t *count_out)
{
    size_t count = identities_len + 6 + buffers_len;
    kb_frame_t *frames = calloc(count, sizeof *frames);
    if (!frames)
        return encode_fail(self, "out of memory");
    for (size_t i = 0; i < identities_len; i++)
        if (frame_set_copy(&frames[i], identities[i].data, identities[i].size) != 0)
            goto nomem;
    kb_frame_t *delimiter = &frames[identities_len];
    kb_frame_t *signature = delimiter + 1;
    kb_frame_t *parts = delimiter + 2;
    if (frame_set_copy(delimiter, KB_WIRE_DELIMITER, KB_WIRE_DELIMITER_LEN) != 0)
        goto nomem;
    for (int i = 0; i < 4; i++)
        if ((raw[i] ? frame_set_copy(&parts[i], raw[i]->data, raw[i]->size)
                    : dump_frame(json[i], &parts[i]))
            != 0)
            goto nomem;
    for (size_t i = 0; i < buffers_len; i++)
        if (frame_set_copy(&parts[4 + i], buffers[i].data, buffers[i].size) != 0)
            goto nomem;
    if (self->mac) {
        static const char hex[] = "0123456789abcdef";
        unsigned char digest[EVP_MAX_MD_SIZE];
        signature->data = malloc(2 * self->digest_size);
        if (!signature->data || sign_parts(self, parts, digest) != 0) {
            encode_fail(self, "HMAC computation failed");
            goto fail;
        }
        for (size_t i = 0; i < self->digest_size; i++) {
            signature->data[2 * i] = (unsigned char)hex[digest[i] >> 4];
            signature->data[2 * i + 1] = (unsigned char)hex[digest[i] & 15];
        }
        signature->size = 2 * self->digest_size;
    } else if (frame_set_copy(signature, "", 0) != 0)
        goto nomem;
    *frames_out = frames;
    *count_out = count;
    return 0;

nomem:
    encode_fail(self, "out of memory");
fail:
    kb_frames_free(frames, count);
    return -1;
}

/*  text as a JSON string (quotes and all) onto buf, as jansson's compact
    dump writes it: copied when it needs no escape, else dumped by
    jansson. -1 when it is not valid UTF-8, or out of memory. */
static int put_string(kb_buf_t *buf, const char *text)
{
    const unsigned char *p = (const unsigned char *)text;
    while (*p >= 0x20 && *p < 0x7F && *p != '"' && *p != '\\')
        p++;
    if (!*p) {
        kb_buf_putc(buf, '"');
        kb_buf_append(buf, text, (size_t)(p - (const unsigned char *)text));
        kb_buf_putc(buf, '"');
        return 0;
    }
    json_t *value = json_string(text);
    if (!value)
        return -1;
    kb_buf_append_json(buf, value, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(value);
    return 0;
}

/*  The header of the codec's next message, as jansson would dump
    {msg_id, msg_type, username, session, date, version} compactly: no
    tree is built. The msg_id is session "_" n. 0, or -1 with errstr set. */
static int write_header(kb_wire_t *self, const char *msg_type, const char *date, kb_buf_t *out)
{
    kb_buf_puts(out, "{\"msg_id\":");
    put_string(out, self->msg_id_prefix);
    if (out->len > 0)
        kb_buf_truncate(out, out->len - 1); /* the string goes on with the counter */
    kb_buf_printf(out, "%llu\",\"msg_type\":", self->msg_counter + 1);
    if (put_string(out, msg_type) != 0) {
        encode_fail(self, "msg_type and date must be valid UTF-8");
        return -1;
    }
    kb_buf_puts(out, ",\"username\":");
    put_string(out, self->username);
    kb_buf_puts(out, ",\"session\":");
    put_string(out, self->session);
    kb_buf_puts(out, ",\"date\":");
    if (put_string(out, date) != 0) {
        encode_fail(self, "msg_type and date must be valid UTF-8");
        return -1;
    }
    kb_buf_puts(out, ",\"version\":\"" KB_WIRE_PROTOCOL_VERSION "\"}");
    if (kb_buf_status(out) != KB_BUF_OK) {
        encode_fail(self, "out of memory");
        return -1;
    }
    return 0;
}

int kb_wire_encode(kb_wire_t *self, const char *msg_type, json_t *content,
                   const json_t *parent_header, json_t *metadata, const char *date,
                   const kb_frame_t *identities, size_t identities_len, kb_frame_t **frames_out,
                   size_t *count_out, char *msg_id_out, size_t msg_id_size)
{
    assert(self);
    assert(msg_type);
    assert(date);
    assert(identities || identities_len == 0);
    assert(frames_out && count_out);
    *frames_out = NULL;
    *count_out = 0;
    int rc = -1;
    json_t *empty = NULL;
    kb_buf_t header = KB_BUF_INIT;
    char msg_id[256];

    if (!json_is_object(content)) {
        encode_fail(self, "content is %s", content ? "not a JSON object" : "NULL");
        goto done;
    }
    if (metadata && !json_is_object(metadata)) {
        encode_fail(self, "metadata is not a JSON object");
        goto done;
    }
    if (parent_header && !json_is_object(parent_header)) {
        encode_fail(self, "parent_header is not a JSON object");
        goto done;
    }
    int id_len
        = snprintf(msg_id, sizeof msg_id, "%s%llu", self->msg_id_prefix, self->msg_counter + 1);
    if (msg_id_out && (size_t)id_len >= msg_id_size) {
        encode_fail(self, "msg_id_out holds %zu bytes, msg_id needs %d", msg_id_size, id_len + 1);
        goto done;
    }
    if (!(empty = json_object())) {
        encode_fail(self, "out of memory");
        goto done;
    }
    if (write_header(self, msg_type, date, &header) != 0)
        goto done;
    kb_frame_t raw_header = { (unsigned char *)header.data, header.len };
    const json_t *json[4]
        = { NULL, parent_header ? parent_header : empty, metadata ? metadata : empty, content };
    const kb_frame_t *raw[4] = { &raw_header, NULL, NULL, NULL };
    if (assemble(self, identities, identities_len, json, raw, NULL, 0, frames_out, count_out) != 0)
        goto done;
    self->msg_counter++;
    if (msg_id_out) {
        if ((size_t)id_len < sizeof msg_id)
            memcpy(msg_id_out, msg_id, (size_t)id_len + 1);
        else
            snprintf(msg_id_out, msg_id_size, "%s%llu", self->msg_id_prefix, self->msg_counter);
    }
    rc = 0;

done:
    kb_buf_free(&header);
    json_decref(empty);
    json_decref(content);
    json_decref(metadata);
    return rc;
}

int kb_wire_encode_msg(kb_wire_t *self, const kb_msg_t *msg, kb_frame_t **frames_out,
                       size_t *count_out)
{
    assert(self && msg);
    assert(frames_out && count_out);
    *frames_out = NULL;
    *count_out = 0;
    assert(json_is_object(msg->content));
    assert(msg->identities || msg->identities_len == 0);
    assert(msg->buffers || msg->buffers_len == 0);
    const json_t *header = kb_msg_header(msg), *parent = kb_msg_parent_header(msg);
    const json_t *metadata = kb_msg_metadata(msg);
    if (!header || !parent || !metadata)
        return encode_fail(self, "out of memory");
    const json_t *json[4] = { header, parent, metadata, msg->content };
    const kb_frame_t *raw[4]
        = { NULL, NULL, NULL, msg->raw_content.data ? &msg->raw_content : NULL };
    return assemble(self, msg->identities, msg->identities_len, json, raw, msg->buffers,
                    msg->buffers_len, frames_out, count_out);
}
