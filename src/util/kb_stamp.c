/*  kb_stamp.c - wall clock, ISO 8601 text, random ids. */
#include "util/kb_stamp.h"

#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double kb_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

void kb_iso_time(double t, char *buf, size_t size)
{
    time_t secs = (time_t)t;
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, size - n, ".%03dZ", (int)((t - (double)secs) * 1000));
}

char *kb_random_id(const char *prefix)
{
    unsigned char raw[8];
    char hex[17];
    if (RAND_bytes(raw, sizeof raw) != 1)
        return NULL;
    for (int i = 0; i < 8; i++)
        sprintf(hex + 2 * i, "%02x", raw[i]);
    size_t len = strlen(prefix) + sizeof hex;
    char *id = malloc(len);
    if (id)
        snprintf(id, len, "%s%s", prefix, hex);
    return id;
}
