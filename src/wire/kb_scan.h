/*  kb_scan.h - a one-pass scanner for the content frame of a Jupyter
    "stream" message: it decodes the text once, straight from the frame's
    bytes into the caller's buffer, stops storing at a byte cap and goes
    on counting, and never builds a jansson tree.

    What it is for: the iopub hot path, where a kernel may print 100 MB/s
    and all the daemon keeps is the first bytes of the text and how long
    it was; and (kb_scan_fields) every message's header, parent_header and
    metadata, of which kb_wire_decode needs a few strings and a check that
    each is well formed. What it is not for: the content of other messages
    (kb_wire_decode parses those with jansson), or checking that a message
    is a stream message (the header says so; this reads only the frame).

    Equivalence: a frame is accepted exactly when kb_wire_decode would
    accept it as content, that is when json_loadb (JSON_DECODE_ANY |
    JSON_ALLOW_NUL) accepts it after kb_wire's UTF-8 repair and it is an
    object; and name, text and the counts are those of that object. So
    ill-formed UTF-8 inside strings reads as U+FFFD per maximal subpart,
    and everything jansson refuses is refused: control characters in
    strings, lone surrogate escapes, "\u0000" in a key, integers beyond
    64 bits, reals that overflow a double, values nested deeper than 2048
    (scalars count: the object itself is at depth 1), trailing bytes;
    and what jansson lets through is let through: one NUL byte right after
    a number or a literal is skipped, as jansson's reader loses it. */
#ifndef KB_SCAN_H_INCLUDED
#define KB_SCAN_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

#include "util/kb_buf.h"

#ifdef __cplusplus
extern "C" {
#endif

/*  The deepest value jansson parses (its JSON_PARSER_MAX_DEPTH). */
#define KB_SCAN_MAX_DEPTH 2048

/*  What kb_scan_stream found in one content frame. */
typedef struct {
    char name[8];      /* "stdout" or "stderr"; "" when "name" is absent or anything else */
    size_t text_bytes; /* bytes of the whole decoded text (UTF-8), kept or not */
    size_t kept_bytes; /* bytes appended to out: at most max, whole characters */
    bool text_present; /* "text" is a string, or an array of strings (joined, as nbformat
                          stores streams; [] is present and empty) */
} kb_scan_stream_t;

/*  Scan json[0..len) (borrowed), which must be one JSON object with
    optional whitespace around it. Of its last "text" member (duplicate
    keys: the last wins, as in jansson) the decoded text is appended to
    out: its longest prefix of at most max bytes that ends on a character
    boundary, so that the kept part is valid UTF-8 (it may hold NUL bytes,
    from "\u0000"); the rest is decoded only to count text_bytes. A "text"
    of another type, or an array holding anything but strings, is absent
    (text_present false, nothing kept). Every other member is checked and
    skipped; only members of the object itself are read, not nested ones.
    Returns 0 and fills *res. Returns -1 when the frame is malformed or not
    an object, or when a write to out fails (out of memory, or over out's
    own cap: keep max within it), with the reason in err (if not NULL),
    e.g. "control character 0x0a in a string at byte 17", "out of memory";
    then out holds what it held before the call (a failed write leaves
    out's status set, as every kb_buf write does) and *res is zeroed.
    out is borrowed; while it is failed, a scan that keeps any byte fails. */
int kb_scan_stream(const char *json, size_t len, size_t max, kb_buf_t *out, kb_scan_stream_t *res,
                   kb_error_t *err);

/*  What kb_scan_fields found of one named member. */
typedef enum {
    KB_SCAN_ABSENT = 0, /* no such member */
    KB_SCAN_STRING,     /* a string: its decoded text is in out */
    KB_SCAN_NULL,       /* null */
    KB_SCAN_OTHER       /* a number, true, false, an object or an array */
} kb_scan_kind_t;

typedef struct {
    const char *key;     /* in: the member's name, at most 8 bytes */
    kb_scan_kind_t kind; /* out */
    size_t at;           /* out, a string: where its decoded text starts in out */
    size_t bytes;        /* out, a string: its length; a NUL follows it in out */
    bool nul;            /* out, a string: it holds a NUL byte (from "\u0000") */
} kb_scan_field_t;

/*  Check json[0..len) (borrowed), which must be one JSON object with
    optional whitespace around it, accepted exactly when kb_scan_stream
    accepts it (and json_loadb, as above), and read the members of the
    object itself named by fields[i].key (duplicate keys: the last wins):
    the decoded text of a string (ill-formed UTF-8 as U+FFFD) is appended
    to out, then a NUL, and fields[i] says where; every other member is
    checked and skipped. For the small JSON objects of a message's header,
    parent_header and metadata: no tree is built. Returns 0, or -1 when
    the frame is malformed or not an object, or a write to out fails, with
    the reason in err (if not NULL); then out holds what it held before. */
int kb_scan_fields(const char *json, size_t len, kb_scan_field_t *fields, size_t count,
                   kb_buf_t *out, kb_error_t *err);

#ifdef __cplusplus
}
#endif

#endif
