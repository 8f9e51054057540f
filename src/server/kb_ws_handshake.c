/*  kb_ws_handshake.c - the opening handshake of RFC 6455 section 4.2 on
    libmicrohttpd's request: which upgrade requests are good, the
    Sec-WebSocket-Accept answer, the subprotocol chosen, and the plain-text
    refusals. It holds no state and opens nothing; kb_ws.c does. */
#include "server/kb_ws_handshake.h"

#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/*  RFC 6455 section 1.3: appended to the client's key before hashing. */
#define KB_WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

typedef struct {
    const char *name;
    const char *token; /* NULL: find the first offered that we list */
    const char *const *ours;
    bool found;
    char chosen[KB_WS_PROTOCOL_MAX];
} header_scan_t;

/*  Does the comma list hold token (case-insensitive), or, when looking
    for a protocol, one of ours? The first match wins. */
static void scan_list(header_scan_t *scan, const char *value)
{
    const char *p = value;
    while (*p && !scan->found) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *start = p;
        while (*p && *p != ',')
            p++;
        const char *end = p;
        while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        size_t len = (size_t)(end - start);
        if (len == 0)
            continue;
        if (scan->token) {
            scan->found = len == strlen(scan->token) && strncasecmp(start, scan->token, len) == 0;
            continue;
        }
        for (const char *const *ours = scan->ours; ours && *ours; ours++) {
            if (len == strlen(*ours) && strncmp(start, *ours, len) == 0
                && len < sizeof scan->chosen) {
                memcpy(scan->chosen, start, len);
                scan->chosen[len] = '\0';
                scan->found = true;
                break;
            }
        }
    }
}

static enum MHD_Result on_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    header_scan_t *scan = cls;
    if (key && value && strcasecmp(key, scan->name) == 0)
        scan_list(scan, value);
    return scan->found ? MHD_NO : MHD_YES;
}

/*  Every header of that name is read: a client may split a list. */
static bool header_has(struct MHD_Connection *connection, const char *name, const char *token)
{
    header_scan_t scan = { .name = name, .token = token };
    MHD_get_connection_values(connection, MHD_HEADER_KIND, on_header, &scan);
    return scan.found;
}

/*  16 bytes in base64 are 22 characters and "=="; the last character
    carries 2 bits, so it is one of A, Q, g, w. */
static bool key_is_valid(const char *key)
{
    static const char alphabet[]
        = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (!key || strlen(key) != 24 || key[22] != '=' || key[23] != '=')
        return false;
    for (int i = 0; i < 22; i++)
        if (!key[i] || !strchr(alphabet, key[i]))
            return false;
    return strchr("AQgw", key[21]) != NULL;
}

/*  base64(SHA-1(key GUID)), RFC 6455 section 4.2.2. */
static bool accept_value(const char *key, char out[29])
{
    char input[24 + sizeof KB_WS_GUID];
    snprintf(input, sizeof input, "%s%s", key, KB_WS_GUID);
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!EVP_Digest(input, strlen(input), digest, &len, EVP_sha1(), NULL) || len != 20)
        return false;
    return EVP_EncodeBlock((unsigned char *)out, digest, 20) == 28;
}

unsigned kb_ws_handshake_refuse(struct MHD_Connection *connection, unsigned status,
                                const char *text)
{
    struct MHD_Response *response
        = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (!response)
        return 500;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, "GET");
    if (status == MHD_HTTP_UPGRADE_REQUIRED)
        MHD_add_response_header(response, "Sec-WebSocket-Version", "13");
    MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return status;
}

unsigned kb_ws_handshake_check(struct MHD_Connection *connection, const char *method,
                               const char *const *protocols, kb_ws_handshake_t *out)
{
    memset(out, 0, sizeof *out);
    const char **text = &out->error;
    if (strcmp(method, "GET") != 0) {
        *text = "a websocket is opened with GET\n";
        return MHD_HTTP_METHOD_NOT_ALLOWED;
    }
    if (!header_has(connection, MHD_HTTP_HEADER_UPGRADE, "websocket")
        || !header_has(connection, MHD_HTTP_HEADER_CONNECTION, "upgrade")) {
        *text = "a websocket needs Upgrade: websocket and Connection: Upgrade\n";
        return MHD_HTTP_BAD_REQUEST;
    }
    const char *version
        = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Sec-WebSocket-Version");
    if (!version || strcmp(version, "13") != 0) {
        *text = "websocket version 13 only\n";
        return MHD_HTTP_UPGRADE_REQUIRED;
    }
    const char *key = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Sec-WebSocket-Key");
    if (!key_is_valid(key)) {
        *text = "Sec-WebSocket-Key must be 16 bytes in base64\n";
        return MHD_HTTP_BAD_REQUEST;
    }
    if (!accept_value(key, out->accept)) {
        *text = "out of memory\n";
        return MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
    header_scan_t scan = { .name = "Sec-WebSocket-Protocol", .ours = protocols };
    MHD_get_connection_values(connection, MHD_HEADER_KIND, on_header, &scan);
    if (scan.found)
        memcpy(out->protocol, scan.chosen, sizeof out->protocol);
    return 0;
}
