/*  test_scan.c - the stream content scanner (src/wire/kb_scan.c) against
    jansson as kb_wire_decode runs it (tests/scan_reference.h), and on every
    frame kb_scan_fields (a message's header, parent_header and metadata)
    against kb_wire_load_object's tree: hand-written
    frames of each kind (escapes, surrogates, every kind of ill-formed
    UTF-8, arrays of strings, other members of every type, nesting up to
    jansson's depth limit, duplicate keys, numbers at the edges of their
    range, malformed input of each kind), generated frames and mutations
    of them, each at many byte caps; then a 64 MiB text kept to 1 MiB.

    KB_SCAN_SEED=n changes the generated frames (the seed is printed). */
#include "wire/kb_scan.h"

#include "kb_testutil.h"
#include "scan_reference.h"

#include <stdint.h>

static kb_wire_t *wire;

/*  ---------------------------------------------------------------------
    Helpers */

/*  Compare scanner and reference on frame at the caps that matter: none,
    0, a few bytes, around the length of the text, and one at random. */
static void check_frame_at(const void *frame, size_t len, unsigned long random, int line)
{
    const char *fields_diff = fields_compare(frame, len);
    kb_test_checks++;
    if (fields_diff) {
        kb_test_failures++;
        fprintf(stderr, "%s:%d: %s\n", __FILE__, line, fields_diff);
    }
    scan_reference_t ref;
    scan_reference(wire, frame, len, &ref);
    size_t maxes[12] = { SIZE_MAX, 0, 1, 2, 3, 4, 5, 7 };
    maxes[8] = ref.len;
    maxes[9] = ref.len ? ref.len - 1 : 9;
    maxes[10] = ref.len + 1;
    maxes[11] = random % (ref.len + 3);
    for (size_t i = 0; i < sizeof maxes / sizeof maxes[0]; i++) {
        const char *diff = scan_compare(frame, len, maxes[i], &ref, i % 2 ? "before:" : "");
        kb_test_checks++;
        if (diff) {
            kb_test_failures++;
            fprintf(stderr, "%s:%d: max %zu: %s\n  frame (%zu bytes): ", __FILE__, line, maxes[i],
                    diff, len);
            for (size_t k = 0; k < len && k < 300; k++) {
                unsigned char c = ((const unsigned char *)frame)[k];
                fprintf(stderr, c >= 0x20 && c < 0x7F ? "%c" : "\\x%02x", c);
            }
            fprintf(stderr, "\n");
            break;
        }
    }
    scan_reference_free(&ref);
}
#define CHECK_FRAME(text) check_frame_at(text, strlen(text), 0, __LINE__)
#define CHECK_FRAME_N(text, n) check_frame_at(text, n, 0, __LINE__)

/*  Scan with no cap; the result, and 0 or -1. */
static int scan_all(const char *json, kb_scan_stream_t *res, kb_buf_t *out, kb_error_t *why)
{
    kb_buf_reset(out);
    return kb_scan_stream(json, strlen(json), SIZE_MAX, out, res, why);
}

/*  The frame must be accepted with this name and text (and the reference
    must agree), or refused (text NULL) with a reason containing needle. */
static void expect(const char *json, const char *name, const char *text, const char *needle,
                   int line)
{
    kb_buf_t out = KB_BUF_INIT;
    kb_scan_stream_t res;
    kb_error_t why;
    int rc = scan_all(json, &res, &out, &why);
    kb_test_checks++;
    bool good = text ? rc == 0 && name && strcmp(res.name, name) == 0 && res.text_present
                           && res.text_bytes == strlen(text)
                           && strcmp(out.data ? out.data : "", text) == 0
                     : rc == -1 && strstr(why.message, needle);
    if (!good) {
        kb_test_failures++;
        fprintf(stderr, "%s:%d: %s: rc %d, name \"%s\", text \"%s\", why \"%s\"\n", __FILE__, line,
                json, rc, res.name, kb_buf_cstr(&out), rc ? why.message : "");
    }
    kb_buf_free(&out);
    check_frame_at(json, strlen(json), 0, line);
}
#define EXPECT_TEXT(json, name, text) expect(json, name, text, NULL, __LINE__)
#define EXPECT_REFUSED(json, needle) expect(json, NULL, NULL, needle, __LINE__)

/*  ---------------------------------------------------------------------
    Hand-written frames */

static void test_strings(void)
{
    EXPECT_TEXT("{\"name\":\"stdout\",\"text\":\"hello\\n\"}", "stdout", "hello\n");
    EXPECT_TEXT(" \r\n\t{ \"text\" : \"x\" , \"name\" : \"stderr\" } \n", "stderr", "x");
    EXPECT_TEXT("{\"text\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"}", "", "\"\\/\b\f\n\r\t");
    EXPECT_TEXT("{\"text\":\"\\u0041\\u00e9\\u20AC\\uFFFF\"}", "",
                "A\xc3\xa9\xe2\x82\xac\xef\xbf\xbf");
    EXPECT_TEXT("{\"text\":\"\\uD83D\\uDE00\\udbff\\udfff\"}", "",
                "\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf");
    EXPECT_TEXT("{\"text\":\"h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80\x7f\"}", "",
                "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80\x7f");
    EXPECT_TEXT("{\"text\":\"\",\"name\":\"std\\u006fut\"}", "stdout", "");
    EXPECT_REFUSED("{\"text\":\"a\nb\"}", "control character 0x0a");
    EXPECT_REFUSED("{\"text\":\"a\x01\"}", "control character 0x01");
    EXPECT_REFUSED("{\"text\":\"\\x\"}", "invalid escape");
    EXPECT_REFUSED("{\"text\":\"\\u12G4\"}", "invalid escape");
    EXPECT_REFUSED("{\"text\":\"\\u12\"}", "invalid escape");
    EXPECT_REFUSED("{\"text\":\"\\uD800\"}", "invalid Unicode");
    EXPECT_REFUSED("{\"text\":\"\\uD800x\"}", "invalid Unicode");
    EXPECT_REFUSED("{\"text\":\"\\uD800\\u0041\"}", "invalid Unicode");
    EXPECT_REFUSED("{\"text\":\"\\uD800\\uD800\"}", "invalid Unicode");
    EXPECT_REFUSED("{\"text\":\"\\uDC00\"}", "invalid Unicode");
    EXPECT_REFUSED("{\"other\":\"\\uDFFF\"}", "invalid Unicode");
    EXPECT_REFUSED("{\"text\":\"abc", "premature end");
    EXPECT_REFUSED("{\"text\":\"abc\\", "premature end");
    /* \u0000 is a NUL byte in a value, and refused in a key. */
    kb_buf_t out = KB_BUF_INIT;
    kb_scan_stream_t res;
    kb_error_t why;
    CHECK(scan_all("{\"text\":\"a\\u0000b\"}", &res, &out, &why) == 0);
    CHECK(res.text_bytes == 3 && out.len == 3 && memcmp(out.data, "a\0b", 3) == 0);
    CHECK_FRAME("{\"text\":\"a\\u0000b\"}");
    EXPECT_REFUSED("{\"te\\u0000xt\":\"a\"}", "NUL byte in object key");
    EXPECT_REFUSED("{\"x\":{\"\\u0000\":1}}", "NUL byte in object key");
    EXPECT_TEXT("{\"te\\u0078t\":\"escaped key\"}", "", "escaped key");
    /* The name must be exactly one of the two. */
    EXPECT_TEXT("{\"name\":\"stdin\",\"text\":\"\"}", "", "");
    EXPECT_TEXT("{\"name\":\"stdout\\u0000\",\"text\":\"\"}", "", "");
    EXPECT_TEXT("{\"name\":\"stdoutx\",\"text\":\"\"}", "", "");
    EXPECT_TEXT("{\"name\":\"stderr!!\",\"text\":\"\"}", "", "");
    EXPECT_TEXT("{\"name\":[\"stdout\"],\"text\":\"\"}", "", "");
    CHECK(scan_all("{}", &res, &out, &why) == 0 && !res.text_present && res.name[0] == 0);
    CHECK_STR(why.message, "");
    kb_buf_free(&out);
}

/*  Every kind of ill-formed UTF-8, inside and outside strings: each
    maximal subpart is one U+FFFD. */
static void test_utf8_repair(void)
{
    static const char *const bad[] = {
        "\x80",
        "\xbf",
        "\x80\x80",
        "\xc0\xaf",
        "\xc1\xbf",
        "\xe0\x80\x80",
        "\xe0\x9f\xbf",
        "\xf0\x80\x80\x80",
        "\xf0\x8f\xbf\xbf",
        "\xed\xa0\x80",
        "\xed\xbf\xbf",
        "\xf4\x90\x80\x80",
        "\xf5\x80\x80\x80",
        "\xf8\x88\x80\x80\x80",
        "\xfe",
        "\xff",
        "\xc2",
        "\xe2\x82",
        "\xf0\x9f\x98",
        "\xe2\x82\xe2\x82\xac",
        "\xf0\x9f\x98\xf0\x9f\x98\x80",
        "\xc3\xa9\xa9",
        "a\xe2\x82"
        "b",
    };
    char frame[128];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int n = snprintf(frame, sizeof frame, "{\"text\":\"<%s>\",\"name\":\"stdout\"}", bad[i]);
        CHECK_FRAME_N(frame, (size_t)n);
        n = snprintf(frame, sizeof frame, "{\"k%s\":[\"%s\",\"%s\"],\"text\":[\"%s\",\"x%s\"]}",
                     bad[i], bad[i], bad[i], bad[i], bad[i]);
        CHECK_FRAME_N(frame, (size_t)n);
        n = snprintf(frame, sizeof frame, "{\"text\":\"a\"}%s", bad[i]); /* outside a string */
        CHECK_FRAME_N(frame, (size_t)n);
        n = snprintf(frame, sizeof frame, "{\"text\":\"%s", bad[i]); /* cut by the end */
        CHECK_FRAME_N(frame, (size_t)n);
    }
    EXPECT_TEXT("{\"text\":\"\xe2\x82\"}", "", "\xef\xbf\xbd");
    EXPECT_TEXT("{\"text\":\"\xf0\x80\x80\x80\"}", "", /* four subparts */
                "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    EXPECT_TEXT("{\"text\":\"\xed\xa0\x80\xed\xb0\x80\"}", "", /* CESU-8 surrogates */
                "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    EXPECT_TEXT("{\"\xff\":\"x\",\"text\":\"ok\"}", "", "ok");
    EXPECT_REFUSED("{\"text\":\"ok\",\xff:1}", "string or '}' expected");
    EXPECT_REFUSED("\xef\xbb\xbf{\"text\":\"a byte order mark\"}", "not a JSON object");
}

static void test_arrays_and_duplicates(void)
{
    EXPECT_TEXT("{\"text\":[\"a\",\"b\\n\",\"\",\"\xc3\xa9\"],\"name\":\"stdout\"}", "stdout",
                "ab\n\xc3\xa9");
    EXPECT_TEXT("{\"text\":[ ]}", "", "");
    EXPECT_TEXT("{\"text\":\"first\",\"text\":\"second\"}", "", "second");
    EXPECT_TEXT("{\"text\":[\"a\",\"b\"],\"text\":[\"c\"]}", "", "c");
    EXPECT_TEXT("{\"text\":5,\"text\":\"again\"}", "", "again");
    EXPECT_TEXT("{\"name\":\"stdout\",\"name\":\"stderr\",\"text\":\"\"}", "stderr", "");
    EXPECT_TEXT("{\"name\":\"stdout\",\"name\":null,\"text\":\"\"}", "", "");
    /* Absent: another type, an array with anything but strings, nested. */
    static const char *const absent[] = {
        "{\"text\":\"kept\",\"text\":null}",
        "{\"text\":[\"a\",1,\"b\"]}",
        "{\"text\":[\"a\",[\"b\"]]}",
        "{\"text\":[[]]}",
        "{\"text\":{\"text\":\"x\"}}",
        "{\"data\":{\"text\":\"x\"},\"name\":\"stdout\"}",
        "{\"text\":true}",
        "{\"text\":-1.5e3}",
    };
    kb_buf_t out = KB_BUF_INIT;
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++) {
        kb_scan_stream_t res;
        kb_error_t why;
        CHECK(scan_all(absent[i], &res, &out, &why) == 0 && !res.text_present && res.text_bytes == 0
              && res.kept_bytes == 0 && out.len == 0);
        CHECK_FRAME(absent[i]);
    }
    kb_buf_free(&out);
    EXPECT_REFUSED("{\"text\":[\"a\",]}", "invalid token");
    EXPECT_REFUSED("{\"text\":[\"a\" \"b\"]}", "']' expected");
    EXPECT_REFUSED("{\"text\":[\"a\",1 2]}", "']' expected");
    EXPECT_REFUSED("{\"text\":[\"a\"", "premature end");
    EXPECT_REFUSED("{\"text\":\"a\",\"text\":\"b\\q\"}", "invalid escape");
}

static void test_other_members(void)
{
    EXPECT_TEXT("{\"a\":1,\"b\":-0,\"c\":0.5e-3,\"d\":1E+2,\"e\":true,\"f\":false,\"g\":null,"
                "\"h\":[1,[2,{}],{\"x\":[]}],\"i\":{\"j\":{\"k\":\"\\u0000\"}},\"text\":\"t\"}",
                "", "t");
    EXPECT_TEXT("{\"a\" : [ 1 , { \"b\" : [ ] } ] , \"text\" : \"t\" }", "", "t");
    static const struct {
        const char *json, *needle;
    } bad[] = {
        { "", "not a JSON object" },
        { "   ", "not a JSON object" },
        { "[]", "not a JSON object" },
        { "\"text\"", "not a JSON object" },
        { "{", "string or '}' expected" },
        { "{\"a\"}", "':' expected" },
        { "{\"a\":}", "invalid token" },
        { "{\"a\":1,}", "string or '}' expected" },
        { "{\"a\":1 \"b\":2}", "'}' expected" },
        { "{\"a\":1}}", "end of file expected" },
        { "{\"a\":1} x", "end of file expected" },
        { "{\"a\":1}\f", "end of file expected" },
        { "{\f\"a\":1}", "string or '}' expected" },
        { "{'a':1}", "string or '}' expected" },
        { "{a:1}", "string or '}' expected" },
        { "{\"a\":tru}", "invalid token" },
        { "{\"a\":True}", "invalid token" },
        { "{\"a\":nulll}", "'}' expected" },
        { "{\"a\":NaN}", "invalid token" },
        { "{\"a\":Infinity}", "invalid token" },
        { "{\"a\":[1,2}", "']' expected" },
        { "{\"a\":{\"b\":1]}", "'}' expected" },
        { "{\"a\":\"x\"\0}", "'}' expected" },
        { "{\"a\":01}", "leading zero" },
        { "{\"a\":-}", "invalid number" },
        { "{\"a\":+1}", "invalid token" },
        { "{\"a\":.5}", "invalid token" },
        { "{\"a\":1.}", "invalid number" },
        { "{\"a\":1.e5}", "invalid number" },
        { "{\"a\":1e}", "invalid number" },
        { "{\"a\":1e+}", "invalid number" },
        { "{\"a\":0x10}", "'}' expected" },
        { "{\"a\":1", "premature end" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect(bad[i].json, NULL, NULL, bad[i].needle, __LINE__);
    CHECK_FRAME_N("{\"a\":\"x\"\0}", 10);
    CHECK_FRAME_N("{\"a\":\0}", 7);
    CHECK_FRAME_N("{\"text\":\"\0\"}", 12);
    CHECK_FRAME_N("{\"a\":1}\0", 8);
    /* jansson loses one NUL byte pushed back after a number or a literal. */
    kb_scan_stream_t nul_res;
    kb_buf_t nul_out = KB_BUF_INIT;
    static const struct {
        const char *json;
        size_t len;
        bool ok;
    } nul[] = {
#define BYTES(literal, ok) { literal, sizeof literal - 1, ok }
        BYTES("{\"a\":1\0}", true),
        BYTES("{\"a\":-0.5e1\0 }", true),
        BYTES("{\"a\":[true\0,null\0]}", true),
        BYTES("{\"text\":false\0,\"name\":\"stdout\"}", true),
        BYTES("{\"a\":1\0\0}", false),
        BYTES("{\"a\":\"s\"\0}", false),
        BYTES("{\"a\":1 \0}", false),
        BYTES("{\"a\":{}\0}", false),
        BYTES("{\"a\":1\0", false),
#undef BYTES
    };
    for (size_t i = 0; i < sizeof nul / sizeof nul[0]; i++) {
        CHECK((kb_scan_stream(nul[i].json, nul[i].len, 9, &nul_out, &nul_res, NULL) == 0)
              == nul[i].ok);
        CHECK_FRAME_N(nul[i].json, nul[i].len);
    }
    kb_buf_free(&nul_out);
    kb_scan_stream_t res;
    kb_buf_t out = KB_BUF_INIT;
    CHECK(kb_scan_stream(NULL, 0, 10, &out, &res, NULL) == -1); /* err may be NULL */
    kb_buf_free(&out);
}

/*  Integers beyond 64 bits and reals beyond DBL_MAX are refused; reals
    that underflow are not. */
static void test_numbers(void)
{
    static const char *const good[] = {
        "9223372036854775807",
        "-9223372036854775808",
        "-0",
        "0",
        "0e0",
        "-0.0E-0",
        "1.7976931348623157e308",
        "1.7976931348623158e308", /* rounds down to DBL_MAX */
        "0.17976931348623158079e309",
        "179769313486231580793728971405303415079934132710037826936173778980444968292764750946649"
        "017977587207096330286416692887910946555547851940402630657488671505820681908902000708383"
        "676273854845817711531764475730270069855571366959622842914819860834936475292719074168444"
        "365510704342711559699508093042880177904174497791.999999999", /* just under the midpoint */
        "1e-400",
        "-1e-99999999999999999999999",
        "0.0000000000000000000000000000000000000000000000001e357",
        "1e308",
        "123456789012345678.5",
    };
    static const char *const bad[] = {
        "9223372036854775808",
        "-9223372036854775809",
        "10000000000000000000000",
        "1.7976931348623159e308",
        "179769313486231580793728971405303415079934132710037826936173778980444968292764750946649"
        "017977587207096330286416692887910946555547851940402630657488671505820681908902000708383"
        "676273854845817711531764475730270069855571366959622842914819860834936475292719074168444"
        "365510704342711559699508093042880177904174497792.0", /* the midpoint rounds up */
        "1e309",
        "-1e309",
        "0.1e310",
        "1e99999999999999999999999",
        "0.0000000000000000000000000000000000000000000000001e358",
    };
    char frame[512];
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        snprintf(frame, sizeof frame, "{\"a\":[%s],\"text\":\"n\"}", good[i]);
        EXPECT_TEXT(frame, "", "n");
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(frame, sizeof frame, "{\"a\":[%s],\"text\":\"n\"}", bad[i]);
        EXPECT_REFUSED(frame, i < 3 ? "too big" : "real number overflow");
    }
}

/*  jansson counts every value, scalars too, against 2048: the object is at
    depth 1. */
static void depth_case(const char *open, const char *inner, const char *close, size_t n, bool ok,
                       int line)
{
    size_t size = n * (strlen(open) + strlen(close)) + strlen(inner) + 2;
    char *frame = malloc(size);
    size_t at = 0;
    for (size_t k = 0; k < n; k++)
        at += (size_t)sprintf(frame + at, "%s", open);
    at += (size_t)sprintf(frame + at, "%s", inner);
    for (size_t k = 0; k < n; k++)
        at += (size_t)sprintf(frame + at, "%s", close);
    kb_buf_t out = KB_BUF_INIT;
    kb_scan_stream_t res;
    kb_error_t why;
    int rc = kb_scan_stream(frame, at, SIZE_MAX, &out, &res, &why);
    kb_test_checks++;
    if ((rc == 0) != ok || (!ok && !strstr(why.message, "maximum parsing depth"))) {
        kb_test_failures++;
        fprintf(stderr, "%s:%d: %zu x %s%s: rc %d, %s\n", __FILE__, line, n, open, inner, rc,
                why.message);
    }
    kb_buf_free(&out);
    check_frame_at(frame, at, 0, line);
    free(frame);
}

static void test_depth(void)
{
    /* {"a": then arrays: the innermost value at depth arrays + 1 (empty) or + 2. */
    depth_case("{\"a\":[", "", "]}", 1, true, __LINE__);
    char *prefix = malloc(2048 + 8);
    for (size_t arrays = 2045; arrays <= 2048; arrays++) {
        sprintf(prefix, "{\"a\":%s", "");
        size_t at = strlen(prefix);
        memset(prefix + at, '[', arrays);
        prefix[at + arrays] = '\0';
        /* one "open" of the whole prefix: n = 1 */
        char *close = malloc(arrays + 2);
        memset(close, ']', arrays);
        close[arrays] = '}';
        close[arrays + 1] = '\0';
        depth_case(prefix, "", close, 1, arrays + 1 <= 2048, __LINE__);
        depth_case(prefix, "1", close, 1, arrays + 2 <= 2048, __LINE__);
        depth_case(prefix, "{}", close, 1, arrays + 2 <= 2048, __LINE__);
        depth_case(prefix, "\"s\"", close, 1, arrays + 2 <= 2048, __LINE__);
        free(close);
    }
    free(prefix);
    /* Objects: n of them, the scalar at depth n + 1. */
    depth_case("{\"a\":", "1", "}", 2047, true, __LINE__);
    depth_case("{\"a\":", "1", "}", 2048, false, __LINE__);
    depth_case("{\"a\":", "{}", "}", 2047, true, __LINE__);
    depth_case("{\"a\":", "{}", "}", 2048, false, __LINE__);
    /* The "text" array (at depth 2) and what is in it count the same way. */
    for (size_t arrays = 2045; arrays <= 2047; arrays++) {
        char *open = malloc(arrays + 16), *close = malloc(arrays + 4);
        strcpy(open, "{\"text\":[");
        memset(open + 9, '[', arrays);
        open[9 + arrays] = '\0';
        memset(close, ']', arrays + 1);
        strcpy(close + arrays + 1, "}");
        depth_case(open, "", close, 1, arrays + 2 <= 2048, __LINE__);
        free(open);
        free(close);
    }
}

/*  ---------------------------------------------------------------------
    Generated frames: values of every type with random whitespace, keys
    and strings built from pieces that exercise each path, and mutations
    that make most of them malformed in some way. */

static uint64_t rng_state;

static unsigned long rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (unsigned long)(rng_state >> 11);
}

static void gen_space(kb_buf_t *b)
{
    static const char spaces[] = " \t\n\r";
    if (rng() % 3 == 0)
        for (unsigned long n = rng() % 3 + 1; n > 0; n--)
            kb_buf_putc(b, spaces[rng() % 4]);
}

static void gen_string(kb_buf_t *b)
{
    static const char *const pieces[] = {
        "\\n",
        "\\\"",
        "\\\\",
        "\\/",
        "\\b",
        "\\f",
        "\\r",
        "\\t",
        "\\u0041",
        "\\u00e9",
        "\\u07FF",
        "\\u0800",
        "\\uFFFD",
        "\\uD83D\\uDE00",
        "\\uDBFF\\uDFFF",
        "\\u0000",
        "\xc3\xa9",
        "\xe2\x82\xac",
        "\xf0\x9f\x98\x80",
        "\xf4\x8f\xbf\xbf",
        "\xef\xbf\xbd",
        "\x7f",
        /* ill-formed */
        "\x80",
        "\xc0\xaf",
        "\xe0\x9f\xbf",
        "\xed\xa0\x80",
        "\xf4\x90\x80\x80",
        "\xff",
        "\xe2\x82",
        "\xf0\x9f\x98",
        "\xc3",
        /* refused */
        "\\uD800",
        "\\uDC00",
        "\\uD800\\u0041",
        "\\x",
        "\x01",
        "\\u12",
    };
    size_t n_pieces = sizeof pieces / sizeof pieces[0];
    kb_buf_putc(b, '"');
    for (unsigned long n = rng() % 6; n > 0; n--) {
        unsigned long kind = rng() % 16;
        if (kind < 6) {
            size_t run = kind == 0 ? rng() % 600 : rng() % 12;
            for (size_t i = 0; i < run; i++) {
                char c = (char)(' ' + rng() % 95);
                kb_buf_putc(b, c == '"' || c == '\\' ? 'q' : c);
            }
        } else if (kind < 15) {
            kb_buf_puts(b, pieces[rng() % (n_pieces - 7)]);
        } else
            kb_buf_puts(b, pieces[rng() % n_pieces]);
    }
    kb_buf_putc(b, '"');
}

static void gen_value(kb_buf_t *b, int depth);

static void gen_key(kb_buf_t *b)
{
    static const char *const keys[] = { "\"text\"", "\"name\"", "\"te\\u0078t\"", "\"data\"",
                                        "\"\"",     "\"tex\"",  "\"texts\"",      "\"n\\u0000\"" };
    if (rng() % 4 == 0)
        gen_string(b);
    else {
        size_t choices = rng() % 8 ? 7 : 8; /* the NUL key now and then */
        kb_buf_puts(b, keys[rng() % choices]);
    }
}

static void gen_value(kb_buf_t *b, int depth)
{
    static const char *const scalars[] = {
        "0",     "-0",         "1",          "-12",
        "3.25",  "1e5",        "-2.5E-3",    "9223372036854775807",
        "1e400", "1e-400",     "true",       "false",
        "null",  "\"stdout\"", "\"stderr\"", "\"std\\u006fut\"",
    };
    unsigned long kind = rng() % (depth > 3 ? 3 : 6);
    if (kind == 0)
        gen_string(b);
    else if (kind <= 2)
        kb_buf_puts(b, scalars[rng() % (sizeof scalars / sizeof scalars[0])]);
    else {
        bool object = kind == 3;
        kb_buf_putc(b, object ? '{' : '[');
        for (unsigned long n = rng() % 4, i = 0; i < n; i++) {
            if (i)
                kb_buf_putc(b, ',');
            gen_space(b);
            if (object) {
                gen_key(b);
                gen_space(b);
                kb_buf_putc(b, ':');
                gen_space(b);
            }
            gen_value(b, depth + 1);
            gen_space(b);
        }
        kb_buf_putc(b, object ? '}' : ']');
    }
}

/*  A stream-like content object, of the shape kernels send and others. */
static void gen_frame(kb_buf_t *b)
{
    kb_buf_reset(b);
    gen_space(b);
    kb_buf_putc(b, '{');
    for (unsigned long n = rng() % 5, i = 0; i < n; i++) {
        if (i)
            kb_buf_putc(b, ',');
        gen_space(b);
        unsigned long which = rng() % 4;
        kb_buf_puts(b, which == 0 ? "\"name\"" : which == 1 ? "\"text\"" : "");
        if (which > 1)
            gen_key(b);
        gen_space(b);
        kb_buf_putc(b, ':');
        gen_space(b);
        if (which == 1 && rng() % 2) { /* an nbformat-style array of strings */
            kb_buf_putc(b, '[');
            for (unsigned long k = rng() % 4, j = 0; j < k; j++) {
                if (j)
                    kb_buf_putc(b, ',');
                gen_space(b);
                if (rng() % 8)
                    gen_string(b);
                else
                    gen_value(b, 3);
            }
            kb_buf_putc(b, ']');
        } else if (which <= 1 && rng() % 4)
            gen_string(b);
        else
            gen_value(b, 2);
        gen_space(b);
    }
    kb_buf_putc(b, '}');
    gen_space(b);
}

/*  Flip, delete, insert or truncate: mostly malformed, sometimes not. */
static void mutate(kb_buf_t *b)
{
    static const char inserts[] = "{}[],:\"\\ 0-.eE+tfnu\x01\x80\xc3\xff\0"; /* and NUL */
    for (unsigned long n = rng() % 3 + 1; n > 0 && b->len > 0; n--) {
        size_t at = rng() % b->len;
        switch (rng() % 4) {
            case 0:
                b->data[at] = (char)(rng() % 256);
                break;
            case 1:
                memmove(b->data + at, b->data + at + 1, b->len - at - 1);
                kb_buf_truncate(b, b->len - 1);
                break;
            case 2: {
                char c = inserts[rng() % (sizeof inserts - 1)];
                kb_buf_putc(b, 0);
                memmove(b->data + at + 1, b->data + at, b->len - 1 - at);
                b->data[at] = c;
                break;
            }
            default:
                kb_buf_truncate(b, at);
        }
    }
}

static void test_generated(void)
{
    const char *seed = getenv("KB_SCAN_SEED");
    rng_state = seed && *seed ? strtoull(seed, NULL, 0) : 20240501;
    if (rng_state == 0)
        rng_state = 1;
    fprintf(stderr, "seed %llu\n", (unsigned long long)rng_state);
    kb_buf_t frame = KB_BUF_INIT;
    size_t accepted = 0, present = 0, total = 30000;
    for (size_t i = 0; i < total; i++) {
        gen_frame(&frame);
        if (i % 3 == 0)
            mutate(&frame);
        /* An exact-size copy, so that ASan sees any read past the end. */
        char *copy = malloc(frame.len ? frame.len : 1);
        memcpy(copy, kb_buf_cstr(&frame), frame.len);
        int failures = kb_test_failures;
        check_frame_at(copy, frame.len, rng(), __LINE__);
        scan_reference_t ref;
        scan_reference(wire, copy, frame.len, &ref);
        accepted += ref.ok;
        present += ref.ok && ref.present && ref.len > 0;
        scan_reference_free(&ref);
        free(copy);
        if (kb_test_failures - failures > 0 && kb_test_failures > 20)
            break;
    }
    fprintf(stderr, "%zu frames: %zu accepted, %zu with a non-empty text\n", total, accepted,
            present);
    /* The generator must reach both sides, or the comparison says little. */
    CHECK(accepted > total / 5 && accepted < total - total / 5);
    CHECK(present > total / 10);
    kb_buf_free(&frame);
}

/*  ---------------------------------------------------------------------
    The cap, out, and a large text */

static void test_cap(void)
{
    const char *json = "{\"text\":[\"ab\\u00e9\",\"\xe2\x82\xac\",\"\\uD83D\\uDE00z\"]}";
    /* a b U+00E9(2) U+20AC(3) U+1F600(4) z: 12 bytes, boundaries 0 1 2 4 7 11 12 */
    static const size_t kept_at[13] = { 0, 1, 2, 2, 4, 4, 4, 7, 7, 7, 7, 11, 12 };
    kb_buf_t out = KB_BUF_INIT;
    for (size_t max = 0; max <= 12; max++) {
        kb_buf_reset(&out);
        kb_buf_puts(&out, "old");
        kb_scan_stream_t res;
        CHECK(kb_scan_stream(json, strlen(json), max, &out, &res, NULL) == 0);
        CHECK(res.text_bytes == 12 && res.kept_bytes == kept_at[max]);
        CHECK(out.len == 3 + kept_at[max] && memcmp(out.data, "old", 3) == 0);
        CHECK(memcmp(out.data + 3, "ab\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z", kept_at[max]) == 0);
    }
    /* Once a character does not fit, nothing after it is kept either. */
    const char *wide = "{\"text\":\"a\xe2\x82\xac"
                       "b\"}";
    kb_scan_stream_t res;
    kb_buf_reset(&out);
    CHECK(kb_scan_stream(wide, strlen(wide), 2, &out, &res, NULL) == 0);
    CHECK(res.kept_bytes == 1 && res.text_bytes == 5 && out.len == 1);
    /* A refused frame leaves out as it was, also after text was kept. */
    const char *late = "{\"text\":\"kept until\",\"x\":[1,}";
    kb_buf_reset(&out);
    kb_buf_puts(&out, "old");
    kb_error_t why;
    memset(&res, 1, sizeof res);
    CHECK(kb_scan_stream(late, strlen(late), 100, &out, &res, &why) == -1);
    CHECK(out.len == 3 && strcmp(out.data, "old") == 0 && res.kept_bytes == 0 && !res.name[0]);
    CHECK(strstr(why.message, "invalid token at byte 28") != NULL);
    /* A later "text" replaces what the first one kept. */
    const char *twice = "{\"text\":\"0123456789\",\"text\":\"ab\"}";
    kb_buf_reset(&out);
    kb_buf_puts(&out, "old");
    CHECK(kb_scan_stream(twice, strlen(twice), 5, &out, &res, NULL) == 0);
    CHECK(res.text_bytes == 2 && res.kept_bytes == 2 && strcmp(out.data, "oldab") == 0);
    char *long_first = malloc(2000); /* long enough to reach out before the reset */
    int n = sprintf(long_first, "{\"text\":\"%01000d\",\"text\":\"ab\"}", 7);
    kb_buf_reset(&out);
    kb_buf_puts(&out, "old");
    CHECK(kb_scan_stream(long_first, (size_t)n, 600, &out, &res, NULL) == 0);
    CHECK(res.text_bytes == 2 && res.kept_bytes == 2 && strcmp(out.data, "oldab") == 0);
    free(long_first);
    kb_buf_free(&out);
}

/*  A failed write into out: the frame is refused with out's reason and
    out keeps what it held. */
static void test_write_failure(void)
{
    kb_buf_t out;
    kb_buf_init(&out, 8);
    kb_buf_puts(&out, "old");
    const char *json = "{\"text\":\"longer than the cap\"}";
    kb_scan_stream_t res;
    kb_error_t why;
    CHECK(kb_scan_stream(json, strlen(json), SIZE_MAX, &out, &res, &why) == -1);
    CHECK_STR(why.message, "over the size limit");
    CHECK(out.len == 3 && strcmp(out.data, "old") == 0 && !res.text_present);
    /* Within the room there is, it fits; a failed buffer fails a scan that
       keeps a byte, and not one that keeps none. */
    kb_buf_recover(&out);
    CHECK(kb_scan_stream(json, strlen(json), 5, &out, &res, &why) == 0);
    CHECK(strcmp(out.data, "oldlonge") == 0 && res.text_bytes == 19);
    CHECK(kb_buf_puts(&out, "x") == KB_BUF_OVER_CAP);
    kb_buf_truncate(&out, 3);
    CHECK(kb_scan_stream(json, strlen(json), 5, &out, &res, &why) == -1);
    CHECK(kb_scan_stream(json, strlen(json), 0, &out, &res, &why) == 0);
    CHECK(res.text_bytes == 19 && res.kept_bytes == 0 && out.len == 3);
    kb_buf_free(&out);
}

/*  64 MiB of text kept to 1 MiB: the rest is counted, not stored. */
static void test_large_text(void)
{
    const size_t text_size = (size_t)64 << 20, max = (size_t)1 << 20;
    const char *head = "{\"name\":\"stdout\",\"text\":\"", *tail = "\"}";
    size_t head_len = strlen(head);
    char *frame = malloc(head_len + text_size + text_size / 64 + 64); /* escapes take 2 */
    memcpy(frame, head, head_len);
    size_t at = head_len, decoded = 0;
    while (decoded < text_size) {
        /* lines of 100 bytes ending in an escaped newline, and one 'é'
           that straddles the cap so that the cut moves back a byte */
        if (decoded == max - 1) {
            memcpy(frame + at, "\xc3\xa9", 2);
            at += 2, decoded += 2;
        } else if (decoded % 100 == 99) {
            memcpy(frame + at, "\\n", 2);
            at += 2, decoded += 1;
        } else {
            frame[at++] = (char)('a' + decoded % 26);
            decoded++;
        }
    }
    memcpy(frame + at, tail, 2);
    at += 2;
    kb_buf_t out = KB_BUF_INIT;
    kb_scan_stream_t res;
    kb_error_t why;
    double start = kb_test_now();
    int rc = kb_scan_stream(frame, at, max, &out, &res, &why);
    double seconds = kb_test_now() - start;
    fprintf(stderr, "%zu MiB frame kept to %zu KiB in %.3f s (%.2f GB/s)\n", at >> 20, max >> 10,
            seconds, (double)at / seconds / 1e9);
    CHECK(rc == 0);
    CHECK_STR(res.name, "stdout");
    CHECK(res.text_present && res.text_bytes == decoded && decoded >= text_size);
    CHECK(res.kept_bytes == max - 1 && out.len == max - 1); /* not half of the 'é' */
    CHECK(out.data && out.data[0] == 'a' && out.data[99] == '\n' && out.data[max - 2] != '\xc3');
    CHECK(out.alloc <= 2 * max); /* nothing of the rest was stored */
    kb_buf_free(&out);
    free(frame);
}

int main(void)
{
    wire = kb_wire_new("hmac-sha256", NULL, 0, "scan-test", NULL, NULL);
    if (!wire)
        return 1;
    RUN_TEST(test_strings);
    RUN_TEST(test_utf8_repair);
    RUN_TEST(test_arrays_and_duplicates);
    RUN_TEST(test_other_members);
    RUN_TEST(test_numbers);
    RUN_TEST(test_depth);
    RUN_TEST(test_cap);
    RUN_TEST(test_write_failure);
    RUN_TEST(test_large_text);
    RUN_TEST(test_generated);
    kb_wire_destroy(&wire);
    return kb_test_summary();
}
