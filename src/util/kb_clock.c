/*  kb_clock.c - wall clock, ISO 8601 text, random ids. */
#include "util/kb_clock.h"

#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int kb_cond_init_monotonic(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

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

void kb_iso_now_us(char *buf, size_t size)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, size - n, ".%06ldZ", (long)(ts.tv_nsec / 1000));
}

char *kb_random_id(const char *prefix)
{
    static const char digits[] = "0123456789abcdef";
    unsigned char raw[8];
    if (RAND_bytes(raw, sizeof raw) != 1)
        return NULL;
    size_t prefix_len = strlen(prefix);
    char *id = malloc(prefix_len + 2 * sizeof raw + 1);
    if (!id)
        return NULL;
    memcpy(id, prefix, prefix_len);
    char *hex = id + prefix_len; /* once per run: no printf */
    for (size_t i = 0; i < sizeof raw; i++) {
        hex[2 * i] = digits[raw[i] >> 4];
        hex[2 * i + 1] = digits[raw[i] & 15];
    }
    hex[2 * sizeof raw] = '\0';
    return id;
}

void kb_uuid_from(const char *name, char *out)
{
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)name, strlen(name), digest);
    digest[6] = (unsigned char)((digest[6] & 0x0f) | 0x80); /* version 8 */
    digest[8] = (unsigned char)((digest[8] & 0x3f) | 0x80); /* variant 10 */
    static const char hex[] = "0123456789abcdef";
    char *p = out;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *p++ = '-';
        *p++ = hex[digest[i] >> 4];
        *p++ = hex[digest[i] & 15];
    }
    *p = 0;
}

bool kb_is_uuid(const char *text)
{
    for (int i = 0; i < KB_UUID_LEN; i++) {
        char c = text[i];
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    }
    return text[KB_UUID_LEN] == 0;
}
