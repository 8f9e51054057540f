/*  kb_utf8.h - well-formed UTF-8 (Unicode's definition: no overlong
    forms, no surrogates, nothing past U+10FFFF), for every layer that
    checks or repairs text. Pure functions of bytes. */
#ifndef KB_UTF8_H_INCLUDED
#define KB_UTF8_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

/*  Length (1-4) of the well-formed sequence at s, of which n bytes may be
    read (n >= 1); 0 when it is ill-formed, and then, when bad is not NULL,
    *bad is the length (1-3) of its maximal subpart: what one replacement
    character stands for. */
size_t kb_utf8_sequence(const unsigned char *s, size_t n, size_t *bad);

/*  Whether text[0..len) is well-formed UTF-8 (NUL bytes included). */
bool kb_utf8_valid(const char *text, size_t len);

/*  The length of the longest prefix of text[0..len) (well-formed UTF-8) of
    at most max bytes that ends on a character boundary. */
size_t kb_utf8_prefix(const char *text, size_t len, size_t max);

#endif
