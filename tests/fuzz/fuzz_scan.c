/*  fuzz_scan.c - libFuzzer target for the stream content scanner
    (src/wire/kb_scan.c), checked against jansson as kb_wire_decode runs
    it (tests/scan_reference.h): same accept or refuse, same name, same
    text length, and the kept part the longest prefix of jansson's text
    that ends on a character boundary within the cap; and kb_scan_fields
    against kb_wire_load_object's tree (fields_compare).

    Input layout: bytes 0-1 choose the cap (little-endian; 0xFFFF: no cap),
    the rest is the content frame, copied to an exact-size allocation so
    that ASan sees any read past its end. Each input is also scanned with
    no cap and with a cap of 0, and into a buffer that already holds bytes.

    Built by CMake with -DKB_FUZZ=ON -DCMAKE_C_COMPILER=clang. A dictionary
    of the tokens that matter is tests/fuzz/fuzz_scan.dict:
        build-fuzz/fuzz_scan -dict=tests/fuzz/fuzz_scan.dict corpus/ */
#include "../scan_reference.h"

#include <stdint.h>

static void check(const void *frame, size_t len, size_t max, const scan_reference_t *ref,
                  const char *prefix)
{
    const char *diff = scan_compare(frame, len, max, ref, prefix);
    if (diff) {
        fprintf(stderr, "max %zu: %s\n", max, diff);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static kb_wire_t *wire;
    if (!wire && !(wire = kb_wire_new("hmac-sha256", NULL, 0, "fuzz", NULL, NULL)))
        abort();
    if (size < 2)
        return 0;
    size_t max = (size_t)data[0] | (size_t)data[1] << 8;
    if (max == 0xFFFF)
        max = SIZE_MAX;
    size_t len = size - 2;
    char *frame = malloc(len ? len : 1);
    if (!frame)
        abort();
    memcpy(frame, data + 2, len);

    const char *fields_diff = fields_compare(frame, len);
    if (fields_diff) {
        fprintf(stderr, "%s\n", fields_diff);
        abort();
    }
    scan_reference_t ref;
    scan_reference(wire, frame, len, &ref);
    check(frame, len, max, &ref, "");
    check(frame, len, SIZE_MAX, &ref, "held");
    check(frame, len, 0, &ref, "");
    if (ref.len > 0)
        check(frame, len, max % ref.len, &ref, "x");
    scan_reference_free(&ref);
    free(frame);
    return 0;
}
