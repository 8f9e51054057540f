/*  test_utf8.c - the one UTF-8 decoder (src/util/kb_utf8.c): every kind
    of ill-formed sequence is refused with the length of its maximal
    subpart, a sequence cut by the end of the buffer is ill-formed, and the
    boundaries of each range are exact. */
#include "kb_testutil.h"
#include "util/kb_utf8.h"

static size_t s_len(const char *bytes, size_t n, size_t *bad)
{
    *bad = 99;
    return kb_utf8_sequence((const unsigned char *)bytes, n, bad);
}

static void test_well_formed(void)
{
    size_t bad;
    CHECK(s_len("A", 1, &bad) == 1);
    CHECK(s_len("\xc2\x80", 2, &bad) == 2);                /* U+0080 */
    CHECK(s_len("\xdf\xbf", 2, &bad) == 2);                /* U+07FF */
    CHECK(s_len("\xe0\xa0\x80", 3, &bad) == 3);            /* U+0800 */
    CHECK(s_len("\xed\x9f\xbf", 3, &bad) == 3);            /* U+D7FF */
    CHECK(s_len("\xee\x80\x80", 3, &bad) == 3);            /* U+E000 */
    CHECK(s_len("\xf0\x90\x80\x80", 4, &bad) == 4);        /* U+10000 */
    CHECK(s_len("\xf4\x8f\xbf\xbf", 4, &bad) == 4);        /* U+10FFFF */
    CHECK(kb_utf8_valid("h\xc3\xa9llo \xe2\x82\xac", 10)); /* héllo € */
    CHECK(kb_utf8_valid("a\0b", 3));                       /* NUL is a character */
    CHECK(kb_utf8_valid("", 0));
}

static void test_ill_formed(void)
{
    size_t bad;
    CHECK(s_len("\x80", 1, &bad) == 0 && bad == 1);             /* a lone continuation */
    CHECK(s_len("\xc0\xaf", 2, &bad) == 0 && bad == 1);         /* overlong */
    CHECK(s_len("\xe0\x9f\xbf", 3, &bad) == 0 && bad == 1);     /* overlong, 3 bytes */
    CHECK(s_len("\xed\xa0\x80", 3, &bad) == 0 && bad == 1);     /* a surrogate */
    CHECK(s_len("\xf4\x90\x80\x80", 4, &bad) == 0 && bad == 1); /* past U+10FFFF */
    CHECK(s_len("\xf5\x80\x80\x80", 4, &bad) == 0 && bad == 1);
    CHECK(s_len("\xe2\x82", 2, &bad) == 0 && bad == 2);  /* cut by the end */
    CHECK(s_len("\xe2\x82X", 3, &bad) == 0 && bad == 2); /* cut by another byte */
    CHECK(s_len("\xf0\x90\x80", 3, &bad) == 0 && bad == 3);
    CHECK(kb_utf8_sequence((const unsigned char *)"\xff", 1, NULL) == 0); /* bad may be NULL */
    CHECK(!kb_utf8_valid("abc\xe2\x82", 5));
    CHECK(!kb_utf8_valid("\xed\xbf\xbf", 3));
}

int main(void)
{
    RUN_TEST(test_well_formed);
    RUN_TEST(test_ill_formed);
    return kb_test_summary();
}
