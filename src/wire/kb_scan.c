/*  kb_scan.c - the stream content scanner (see kb_scan.h).

    Sections: the scanner and its failures; plain runs; the text sink;
    strings; numbers; skipping values; the content object; named members.

    One pass over the bytes, front to back. No allocation but out's, no
    recursion (nested values are skipped with a bit stack), no globals
    but constant tables. Each rule below follows jansson 2.14's load.c,
    which is the parser kb_wire_decode uses: where the two could differ,
    the comment says what jansson does. */
#include "wire/kb_scan.h"

#include <assert.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util/kb_utf8.h"

/*  Decoded pieces shorter than this are gathered before they go to out,
    so that text with an escape every few bytes costs one kb_buf_append
    per stage, not one per piece. */
#define KB_SCAN_STAGE 4096
#define KB_SCAN_STAGE_DIRECT 256

/*  ---------------------------------------------------------------------
    The scanner and its failures */

typedef struct {
    const unsigned char *begin, *p, *end;
    /* The text sink: out gets the kept part of the current "text". */
    kb_buf_t *out;
    size_t base;       /* out's length when the scan began */
    size_t max;        /* most bytes to keep */
    size_t kept;       /* bytes kept of the current text, staged or in out */
    size_t text_bytes; /* bytes of the current text, kept or not */
    bool keeping;      /* no character has failed to fit yet */
    bool text_present;
    size_t staged;
    char why[128];
    unsigned char stage[KB_SCAN_STAGE];
} scanner_t;

/*  The decoded bytes of a key or of "name": the first 8 and the length. */
typedef struct {
    unsigned char head[8];
    size_t len;
    bool nul; /* "\u0000" in it */
} capture_t;

static int fail(scanner_t *s, const unsigned char *at, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/*  Record why the frame is refused, with the byte offset; returns -1. */
static int fail(scanner_t *s, const unsigned char *at, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    int n = vsnprintf(s->why, sizeof s->why, format, args);
    va_end(args);
    if (n >= 0 && (size_t)n < sizeof s->why)
        snprintf(s->why + n, sizeof s->why - (size_t)n, " at byte %zu", (size_t)(at - s->begin));
    return -1;
}

static int fail_write(scanner_t *s, kb_buf_status_t status)
{
    snprintf(s->why, sizeof s->why, "%s", kb_buf_status_str(status));
    return -1;
}

static void skip_space(scanner_t *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\t' || *s->p == '\r'))
        s->p++;
}

/*  0 when a byte is left to read, else a failure saying what was due. */
static int expect_more(scanner_t *s, const char *what)
{
    if (s->p < s->end)
        return 0;
    return fail(s, s->p, "premature end of input, %s expected", what);
}

/*  ---------------------------------------------------------------------
    Plain runs: the bytes a string copies as they are, 0x20-0x7F but '"'
    and '\\'. Found a word of eight at a time (two per turn) rather than
    through a table of byte classes: a byte of x is flagged when it is
    below 0x20 (x - 0x20 borrows), equal to '"' or '\\' (x ^ c - 1
    borrows) or has its high bit set. A borrow can flag a plain byte only
    above a flagged one, so the lowest flag is exact. */

#define KB_SCAN_ONES 0x0101010101010101ull
#define KB_SCAN_HIGHS 0x8080808080808080ull

static inline uint64_t special_bytes(uint64_t x)
{
    return ((x - 0x20 * KB_SCAN_ONES) | ((x ^ ('"' * KB_SCAN_ONES)) - KB_SCAN_ONES)
            | ((x ^ ('\\' * KB_SCAN_ONES)) - KB_SCAN_ONES) | x)
           & KB_SCAN_HIGHS;
}

static inline bool is_plain(unsigned char c)
{
    return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

/*  The first byte at or after p that is not plain, or end. */
static inline const unsigned char *skip_plain(const unsigned char *p, const unsigned char *end)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while ((size_t)(end - p) >= 16) {
        uint64_t a, b;
        memcpy(&a, p, 8);
        memcpy(&b, p + 8, 8);
        uint64_t fa = special_bytes(a), fb = special_bytes(b);
        if (fa | fb) {
            if (fa)
                return p + (__builtin_ctzll(fa) >> 3);
            return p + 8 + (__builtin_ctzll(fb) >> 3);
        }
        p += 16;
    }
#endif
    while (p < end && is_plain(*p))
        p++;
    return p;
}

/*  ---------------------------------------------------------------------
    The text sink */

static int flush_stage(scanner_t *s)
{
    if (s->staged == 0)
        return 0;
    kb_buf_status_t status = kb_buf_append(s->out, s->stage, s->staged);
    s->staged = 0;
    return status == KB_BUF_OK ? 0 : fail_write(s, status);
}

/*  Start the text again: a later "text" member replaces an earlier one. */
static void text_reset(scanner_t *s)
{
    s->staged = 0;
    kb_buf_truncate(s->out, s->base);
    s->kept = 0;
    s->text_bytes = 0;
    s->keeping = true;
    s->text_present = false;
}

/*  Add piece[0..n), whole characters of valid UTF-8, to the text: keep
    what fits under max, cutting before the first character that does not
    (and keeping nothing after it), and count it all. */
static int text_put(scanner_t *s, const unsigned char *piece, size_t n)
{
    s->text_bytes += n;
    if (!s->keeping || n == 0)
        return 0;
    if (n > s->max - s->kept) {
        size_t cut = s->max - s->kept;
        while (cut > 0 && (piece[cut] & 0xC0) == 0x80)
            cut--;
        n = cut;
        s->keeping = false;
    }
    s->kept += n;
    if (n < KB_SCAN_STAGE_DIRECT) {
        if (n > sizeof s->stage - s->staged && flush_stage(s) != 0)
            return -1;
        memcpy(s->stage + s->staged, piece, n);
        s->staged += n;
        return 0;
    }
    if (flush_stage(s) != 0)
        return -1;
    kb_buf_status_t status = kb_buf_append(s->out, piece, n);
    return status == KB_BUF_OK ? 0 : fail_write(s, status);
}

static void capture_put(capture_t *cap, const unsigned char *piece, size_t n)
{
    if (cap->len < sizeof cap->head) {
        size_t room = sizeof cap->head - cap->len;
        memcpy(cap->head + cap->len, piece, n < room ? n : room);
    }
    cap->len += n;
}

/*  Decoded bytes go to the capture when there is one, else to the text. */
static inline int put(scanner_t *s, capture_t *cap, const unsigned char *piece, size_t n)
{
    if (!cap)
        return text_put(s, piece, n);
    capture_put(cap, piece, n);
    return 0;
}

static bool capture_is(const capture_t *cap, const char *word)
{
    size_t n = strlen(word);
    return cap->len == n && memcmp(cap->head, word, n) == 0;
}

/*  ---------------------------------------------------------------------
    Strings */

static long hex4(const unsigned char *p, const unsigned char *end)
{
    if (end - p < 4)
        return -1;
    long value = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        int digit = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
        if (digit < 0)
            return -1;
        value = value << 4 | digit;
    }
    return value;
}

static size_t utf8_encode(long cp, unsigned char *out)
{
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | cp >> 6);
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | cp >> 12);
        out[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | cp >> 18);
    out[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/*  Decode the escape at p (a backslash) into bytes; the position after
    it, or NULL. A high surrogate must be followed at once by an escaped
    low one; a lone low surrogate is refused, as jansson does. */
static const unsigned char *decode_escape(scanner_t *s, const unsigned char *p,
                                          unsigned char bytes[4], size_t *n)
{
    static const char simple_from[] = "\"\\/bfnrt", simple_to[] = "\"\\/\b\f\n\r\t";
    if (s->end - p < 2) {
        fail(s, p, "premature end of input in an escape");
        return NULL;
    }
    const char *simple = p[1] ? strchr(simple_from, p[1]) : NULL;
    if (simple) {
        bytes[0] = (unsigned char)simple_to[simple - simple_from];
        *n = 1;
        return p + 2;
    }
    long cp = p[1] == 'u' ? hex4(p + 2, s->end) : -1;
    if (cp < 0) {
        fail(s, p, "invalid escape");
        return NULL;
    }
    const unsigned char *at = p;
    p += 6;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (s->end - p < 2 || p[0] != '\\' || p[1] != 'u') {
            fail(s, at, "invalid Unicode '\\u%04lX'", cp);
            return NULL;
        }
        long low = hex4(p + 2, s->end);
        if (low < 0) {
            fail(s, p, "invalid escape");
            return NULL;
        }
        if (low < 0xDC00 || low > 0xDFFF) {
            fail(s, at, "invalid Unicode '\\u%04lX\\u%04lX'", cp, low);
            return NULL;
        }
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        p += 6;
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        fail(s, at, "invalid Unicode '\\u%04lX'", cp);
        return NULL;
    }
    *n = utf8_encode(cp, bytes);
    return p;
}

/*  Decode the string at s->p (its opening quote) into cap, or into the
    text when cap is NULL. Raw bytes go in as runs: plain bytes and
    well-formed UTF-8 sequences, each maximal ill-formed subpart as
    U+FFFD, exactly as kb_wire repairs a frame before jansson reads it. */
static int scan_string(scanner_t *s, capture_t *cap)
{
    static const unsigned char replacement[3] = { 0xEF, 0xBF, 0xBD };
    const unsigned char *p = s->p + 1, *end = s->end, *run = p;
    for (;;) {
        p = skip_plain(p, end);
        if (p == end)
            return fail(s, p, "premature end of input in a string");
        unsigned char c = *p;
        if (c >= 0x80) {
            size_t bad = 1, good;
            /* Non-Latin text is mostly sequence after sequence: stay here. */
            while ((good = kb_utf8_sequence(p, (size_t)(end - p), &bad)) != 0)
                if ((p += good) == end || *p < 0x80)
                    break;
            if (good)
                continue; /* all part of the run */
            if (put(s, cap, run, (size_t)(p - run)) != 0 || put(s, cap, replacement, 3) != 0)
                return -1;
            run = p += bad;
            continue;
        }
        if (put(s, cap, run, (size_t)(p - run)) != 0)
            return -1;
        if (c == '"') {
            s->p = p + 1;
            return 0;
        }
        if (c < 0x20)
            return fail(s, p, "control character 0x%02x in a string", c);
        unsigned char bytes[4];
        size_t n = 0;
        const unsigned char *next = decode_escape(s, p, bytes, &n);
        if (!next)
            return -1;
        if (cap && n == 1 && bytes[0] == 0)
            cap->nul = true;
        if (put(s, cap, bytes, n) != 0)
            return -1;
        run = p = next;
    }
}

/*  ---------------------------------------------------------------------
    Numbers. jansson reads a number without '.', 'e' or 'E' with strtoll
    and refuses it on ERANGE; any other with strtod, refused when that
    overflows to +-HUGE_VAL (underflow to 0 is accepted). Both are decided
    here from the digits, with no copy and whatever the locale. */

/*  Step over the end of a number or a literal. jansson reads one byte
    past such a token and pushes it back; its reader takes a NUL in its
    one-character buffer for "empty", so a NUL byte pushed back is lost:
    one NUL right after a number, true, false or null is skipped, and
    {"a":1<NUL>} is accepted. kb_wire accepts what jansson does. */
static void end_token(scanner_t *s, const unsigned char *p)
{
    s->p = p < s->end && *p == '\0' ? p + 1 : p;
}

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/*  Whether the magnitude digits[0..n) (no leading zero) fits a json_int_t. */
static bool integer_fits(const unsigned char *digits, size_t n, bool negative)
{
    static const char most[] = "9223372036854775807", least[] = "9223372036854775808";
    if (n != sizeof most - 1)
        return n < sizeof most - 1;
    return memcmp(digits, negative ? least : most, n) <= 0;
}

/*  Whether int_part "." frac_part "e" exponent rounds past DBL_MAX. A
    value 0.D x 10^E overflows when E > 309, never when E < 309, and when
    E == 309 exactly when D >= the digits of 2^1024 - 2^970: the midpoint
    between DBL_MAX and 2^1024, where round-half-even goes up. */
static bool real_overflows(const unsigned char *int_part, size_t int_len,
                           const unsigned char *frac_part, size_t frac_len, long long exponent)
{
    static const char midpoint[] = "179769313486231580793728971405303415079934132710037826936173"
                                   "778980444968292764750946649017977587207096330286416692887910"
                                   "946555547851940402630657488671505820681908902000708383676273"
                                   "854845817711531764475730270069855571366959622842914819860834"
                                   "936475292719074168444365510704342711559699508093042880177904"
                                   "174497792";
    /* The grammar allows no leading zero but a lone "0": when int is not
       that, its digits are the first significant ones. */
    long long e;
    if (int_part[0] != '0')
        e = (long long)int_len + exponent;
    else {
        size_t zeros = 0;
        while (zeros < frac_len && frac_part[zeros] == '0')
            zeros++;
        if (zeros == frac_len)
            return false; /* zero */
        e = exponent - (long long)zeros;
        int_len = 0;
        frac_part += zeros;
        frac_len -= zeros;
    }
    if (e != 309)
        return e > 309;
    size_t k = 0;
    for (size_t i = 0; i < int_len + frac_len && k < sizeof midpoint - 1; i++, k++) {
        unsigned char d = i < int_len ? int_part[i] : frac_part[i - int_len];
        if (d != (unsigned char)midpoint[k])
            return d > (unsigned char)midpoint[k];
    }
    return k == sizeof midpoint - 1; /* equal so far: over it unless D ran out first */
}

/*  The number at s->p, in jansson's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?
    ([eE][+-]?[0-9]+)?, within range. */
static int scan_number(scanner_t *s)
{
    /* Exponent digits beyond this saturate: any such real is 0 or overflows. */
    const long long exponent_limit = 1000000000000000LL;
    const unsigned char *start = s->p, *p = s->p, *end = s->end;
    bool negative = p < end && *p == '-';
    if (negative)
        p++;
    const unsigned char *int_part = p;
    if (p == end || !is_digit(*p))
        return fail(s, start, "invalid number");
    if (*p == '0') {
        if (++p < end && is_digit(*p))
            return fail(s, start, "invalid number (a leading zero)");
    } else
        while (p < end && is_digit(*p))
            p++;
    size_t int_len = (size_t)(p - int_part);
    if (p == end || (*p != '.' && *p != 'e' && *p != 'E')) {
        end_token(s, p);
        if (!integer_fits(int_part, int_len, negative))
            return fail(s, start, negative ? "too big negative integer" : "too big integer");
        return 0;
    }
    const unsigned char *frac_part = p;
    if (*p == '.') {
        frac_part = ++p;
        if (p == end || !is_digit(*p))
            return fail(s, start, "invalid number");
        while (p < end && is_digit(*p))
            p++;
    }
    size_t frac_len = (size_t)(p - frac_part);
    long long exponent = 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        bool exponent_negative = false;
        if (++p < end && (*p == '+' || *p == '-'))
            exponent_negative = *p++ == '-';
        if (p == end || !is_digit(*p))
            return fail(s, start, "invalid number");
        for (; p < end && is_digit(*p); p++)
            if (exponent < exponent_limit)
                exponent = exponent * 10 + (*p - '0');
        if (exponent_negative)
            exponent = -exponent;
    }
    end_token(s, p);
    if (real_overflows(int_part, int_len, frac_part, frac_len, exponent))
        return fail(s, start, "real number overflow");
    return 0;
}

static int scan_literal(scanner_t *s, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return fail(s, s->p, "invalid token");
    end_token(s, s->p + n);
    return 0;
}

/*  ---------------------------------------------------------------------
    Skipping values */

/*  A member's key and its colon, into cap; jansson refuses a key that
    holds a NUL (JSON_ALLOW_NUL is for values only). */
static int scan_key(scanner_t *s, capture_t *cap)
{
    skip_space(s);
    if (s->p == s->end || *s->p != '"')
        return fail(s, s->p, "string or '}' expected");
    const unsigned char *at = s->p;
    *cap = (capture_t){ .len = 0 };
    if (scan_string(s, cap) != 0)
        return -1;
    if (cap->nul)
        return fail(s, at, "NUL byte in object key not supported");
    skip_space(s);
    if (s->p == s->end || *s->p != ':')
        return fail(s, s->p, "':' expected");
    s->p++;
    return 0;
}

/*  Check and pass over the value at s->p (after any whitespace), which
    sits at depth (the content object is at 1). jansson counts every value
    against its limit, scalars too: 2048 nested empty arrays pass, and so
    does a scalar at depth 2048, but not one at 2049. */
static int skip_value(scanner_t *s, size_t depth)
{
    unsigned char is_object[KB_SCAN_MAX_DEPTH / 8]; /* one bit per open container */
    size_t open = 0;
    capture_t ignored;
    for (;;) {
        if (depth + open > KB_SCAN_MAX_DEPTH)
            return fail(s, s->p, "maximum parsing depth reached");
        skip_space(s);
        if (expect_more(s, "a value") != 0)
            return -1;
        unsigned char c = *s->p;
        int rc = 0;
        if (c == '{' || c == '[') {
            assert(open < sizeof is_object * 8);
            if (c == '{')
                is_object[open / 8] |= (unsigned char)(1u << open % 8);
            else
                is_object[open / 8] &= (unsigned char)~(1u << open % 8);
            open++;
            s->p++;
            skip_space(s);
            if (s->p < s->end && *s->p == (c == '{' ? '}' : ']')) {
                s->p++;
                open--;
            } else {
                if (c == '{' && scan_key(s, &ignored) != 0)
                    return -1;
                continue; /* to the first member's value or element */
            }
        } else if (c == '"')
            rc = scan_string(s, &ignored);
        else if (c == 't')
            rc = scan_literal(s, "true");
        else if (c == 'f')
            rc = scan_literal(s, "false");
        else if (c == 'n')
            rc = scan_literal(s, "null");
        else if (c == '-' || is_digit(c))
            rc = scan_number(s);
        else
            rc = fail(s, s->p, "invalid token");
        if (rc != 0)
            return -1;
        /* A value ended: close what it ends, or go to the next one. */
        for (;;) {
            if (open == 0)
                return 0;
            bool in_object = is_object[(open - 1) / 8] >> (open - 1) % 8 & 1;
            skip_space(s);
            if (expect_more(s, in_object ? "'}'" : "']'") != 0)
                return -1;
            c = *s->p++;
            if (c == ',') {
                if (in_object && scan_key(s, &ignored) != 0)
                    return -1;
                break;
            }
            if (c != (in_object ? '}' : ']'))
                return fail(s, s->p - 1, in_object ? "'}' expected" : "']' expected");
            open--;
        }
    }
}

/*  ---------------------------------------------------------------------
    The content object */

/*  The value of "text": a string, or an array of strings joined; anything
    else is checked and leaves the text absent. */
static int scan_text(scanner_t *s)
{
    text_reset(s);
    skip_space(s);
    if (expect_more(s, "a value") != 0)
        return -1;
    if (*s->p == '"') {
        if (scan_string(s, NULL) != 0)
            return -1;
        s->text_present = true;
        return 0;
    }
    if (*s->p != '[')
        return skip_value(s, 2);
    s->p++;
    skip_space(s);
    bool strings = true;
    if (s->p < s->end && *s->p == ']')
        s->p++;
    else
        for (;;) {
            skip_space(s);
            if (strings && s->p < s->end && *s->p == '"') {
                if (scan_string(s, NULL) != 0)
                    return -1;
            } else {
                if (strings)
                    text_reset(s);
                strings = false;
                if (skip_value(s, 3) != 0)
                    return -1;
            }
            skip_space(s);
            if (expect_more(s, "']'") != 0)
                return -1;
            unsigned char c = *s->p++;
            if (c == ']')
                break;
            if (c != ',')
                return fail(s, s->p - 1, "']' expected");
        }
    s->text_present = strings;
    return 0;
}

/*  The value of "name": kept only when it is "stdout" or "stderr". */
static int scan_name(scanner_t *s, char name[8])
{
    memset(name, 0, 8);
    skip_space(s);
    if (s->p == s->end || *s->p != '"')
        return skip_value(s, 2);
    capture_t value = { .len = 0 };
    if (scan_string(s, &value) != 0)
        return -1;
    if (capture_is(&value, "stdout") || capture_is(&value, "stderr"))
        memcpy(name, value.head, value.len);
    return 0;
}

/*  A member of the top-level object: its key is read, and its colon;
    read its value. */
typedef int member_fn(scanner_t *s, const capture_t *key, void *arg);

/*  The one object of the frame, each member handed to member, and
    nothing but whitespace after it. */
static int scan_object(scanner_t *s, member_fn *member, void *arg)
{
    skip_space(s);
    if (s->p == s->end || *s->p != '{')
        return fail(s, s->p, "not a JSON object");
    s->p++;
    skip_space(s);
    if (s->p < s->end && *s->p == '}')
        s->p++;
    else
        for (;;) {
            capture_t key;
            if (scan_key(s, &key) != 0 || member(s, &key, arg) != 0)
                return -1;
            skip_space(s);
            if (expect_more(s, "'}'") != 0)
                return -1;
            unsigned char c = *s->p++;
            if (c == '}')
                break;
            if (c != ',')
                return fail(s, s->p - 1, "'}' expected");
        }
    skip_space(s);
    if (s->p != s->end)
        return fail(s, s->p, "end of file expected");
    return 0;
}

static int stream_member(scanner_t *s, const capture_t *key, void *name)
{
    return capture_is(key, "text")   ? scan_text(s)
           : capture_is(key, "name") ? scan_name(s, name)
                                     : skip_value(s, 2);
}

int kb_scan_stream(const char *json, size_t len, size_t max, kb_buf_t *out, kb_scan_stream_t *res,
                   kb_error_t *err)
{
    assert(json || len == 0);
    assert(out && res);
    static const char empty[1] = "";
    scanner_t scanner, *s = &scanner; /* not zeroed: the stage is 4 KiB */
    s->out = out;
    s->base = out->len;
    s->max = max;
    s->kept = s->text_bytes = s->staged = 0;
    s->keeping = true;
    s->text_present = false;
    s->why[0] = '\0';
    s->begin = s->p = (const unsigned char *)(json ? json : empty);
    s->end = s->begin + len;
    char name[8] = "";
    if (scan_object(s, stream_member, name) != 0 || flush_stage(s) != 0) {
        kb_buf_truncate(out, s->base);
        *res = (kb_scan_stream_t){ .text_present = false };
        kb_error_set(err, KB_ERR_BAD_REQUEST, "%s", s->why);
        return -1;
    }
    assert(out->len - s->base == s->kept);
    *res = (kb_scan_stream_t){ .text_bytes = s->text_bytes,
                               .kept_bytes = s->kept,
                               .text_present = s->text_present };
    memcpy(res->name, name, sizeof name);
    kb_error_clear(err);
    return 0;
}

/*  ---------------------------------------------------------------------
    Named members */

typedef struct {
    kb_scan_field_t *fields;
    size_t count;
} fields_t;

/*  A string member's decoded text, into out after what it holds, then a
    NUL. */
static int field_string(scanner_t *s, kb_scan_field_t *field)
{
    s->base = s->out->len;
    s->kept = s->text_bytes = s->staged = 0;
    s->keeping = true;
    if (scan_string(s, NULL) != 0 || flush_stage(s) != 0)
        return -1;
    kb_buf_status_t status = kb_buf_putc(s->out, '\0');
    if (status != KB_BUF_OK)
        return fail_write(s, status);
    field->kind = KB_SCAN_STRING;
    field->at = s->base;
    field->bytes = s->text_bytes;
    field->nul = memchr(s->out->data + s->base, 0, s->text_bytes) != NULL;
    return 0;
}

static int named_member(scanner_t *s, const capture_t *key, void *arg)
{
    fields_t *f = arg;
    kb_scan_field_t *field = NULL;
    for (size_t i = 0; i < f->count && !field; i++)
        if (capture_is(key, f->fields[i].key))
            field = &f->fields[i]; /* a later duplicate replaces it, as in jansson */
    if (!field)
        return skip_value(s, 2);
    skip_space(s);
    if (expect_more(s, "a value") != 0)
        return -1;
    if (*s->p == '"')
        return field_string(s, field);
    field->kind = *s->p == 'n' ? KB_SCAN_NULL : KB_SCAN_OTHER;
    return *s->p == 'n' ? scan_literal(s, "null") : skip_value(s, 2);
}

int kb_scan_fields(const char *json, size_t len, kb_scan_field_t *fields, size_t count,
                   kb_buf_t *out, kb_error_t *err)
{
    assert(json || len == 0);
    assert(out && (fields || count == 0));
    static const char empty[1] = "";
    scanner_t scanner, *s = &scanner; /* not zeroed: the stage is 4 KiB */
    size_t start = out->len;
    for (size_t i = 0; i < count; i++) {
        assert(strlen(fields[i].key) <= sizeof((capture_t *)0)->head);
        fields[i].kind = KB_SCAN_ABSENT;
        fields[i].at = fields[i].bytes = 0;
        fields[i].nul = false;
    }
    s->out = out;
    s->max = SIZE_MAX;
    s->why[0] = '\0';
    s->begin = s->p = (const unsigned char *)(json ? json : empty);
    s->end = s->begin + len;
    fields_t f = { fields, count };
    if (scan_object(s, named_member, &f) != 0) {
        kb_buf_truncate(out, start);
        kb_error_set(err, KB_ERR_BAD_REQUEST, "%s", s->why);
        return -1;
    }
    kb_error_clear(err);
    return 0;
}
