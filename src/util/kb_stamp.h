/*  kb_stamp.h - the clock and the ids every layer stamps things with:
    wall-clock seconds, ISO 8601 text of them, and random ids. */
#ifndef KB_STAMP_H_INCLUDED
#define KB_STAMP_H_INCLUDED

#include <stddef.h>

/*  Wall-clock seconds since the epoch. */
double kb_now(void);

/*  "2026-12-03T13:02:28.123Z" of t into buf. */
void kb_iso_time(double t, char *buf, size_t size);

/*  prefix + 16 random hex digits (from the OS's generator). Caller frees;
    NULL when no random bytes could be had. */
char *kb_random_id(const char *prefix);

#endif
