/*  kb_clock.h - the clock and the ids every layer stamps things with:
    wall-clock seconds, ISO 8601 text of them, random ids, and the UUIDs
    named by them. */
#ifndef KB_CLOCK_H_INCLUDED
#define KB_CLOCK_H_INCLUDED

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

/*  A condition variable whose timed waits run on CLOCK_MONOTONIC (a
    deadline that the wall clock cannot move). 0, or an error number. */
int kb_cond_init_monotonic(pthread_cond_t *cond);

/*  Wall-clock seconds since the epoch. */
double kb_now(void);

/*  "2026-12-03T13:02:28.123Z" of t into buf. */
void kb_iso_time(double t, char *buf, size_t size);

/*  Now as Jupyter's messages date it, "2026-12-03T13:02:28.123456Z"
    (microseconds), into buf (at least 32 bytes). */
void kb_iso_now_us(char *buf, size_t size);

/*  prefix + 16 random hex digits (from the OS's generator). Caller frees;
    NULL when no random bytes could be had. */
char *kb_random_id(const char *prefix);

/*  The UUID (RFC 9562 version 8, lowercase, 36 characters) named by name:
    the first 16 bytes of its SHA-256 with the version and variant bits
    set. The same name gives the same UUID, in every run. out holds at
    least KB_UUID_LEN + 1 bytes. */
#define KB_UUID_LEN 36
void kb_uuid_from(const char *name, char *out);

/*  True when text is a UUID in that form (8-4-4-4-12 lowercase hex). */
bool kb_is_uuid(const char *text);

#endif
