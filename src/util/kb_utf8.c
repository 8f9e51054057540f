/*  kb_utf8.c - the one UTF-8 decoder of the tree: the ranges of the
    Unicode standard's table of well-formed byte sequences. */
#include "util/kb_utf8.h"

size_t kb_utf8_sequence(const unsigned char *s, size_t n, size_t *bad)
{
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    size_t need, ignored;
    if (!bad)
        bad = &ignored;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c == 0xE0)
        need = 2, lo = 0xA0;
    else if (c == 0xED)
        need = 2, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF)
        need = 2;
    else if (c == 0xF0)
        need = 3, lo = 0x90;
    else if (c == 0xF4)
        need = 3, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3)
        need = 3;
    else {
        *bad = 1;
        return 0;
    }
    for (size_t i = 1; i <= need; i++) {
        if (i >= n || s[i] < lo || s[i] > hi) {
            *bad = i;
            return 0;
        }
        lo = 0x80, hi = 0xBF;
    }
    return need + 1;
}

bool kb_utf8_valid(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        size_t n = kb_utf8_sequence(s + i, len - i, NULL);
        if (n == 0)
            return false;
        i += n;
    }
    return true;
}

size_t kb_utf8_prefix(const char *text, size_t len, size_t max)
{
    if (len <= max)
        return len;
    size_t cut = max;
    while (cut > 0 && ((unsigned char)text[cut] & 0xC0) == 0x80)
        cut--;
    return cut;
}
