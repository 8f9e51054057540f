/*  kb_testutil.c - shared helpers of the C tests. */
#include "kb_testutil.h"

#include <dirent.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int kb_test_failures = 0;
int kb_test_checks = 0;

int kb_test_summary(void)
{
    fprintf(stderr, "%d checks, %d failed\n", kb_test_checks, kb_test_failures);
    return kb_test_failures == 0 && kb_test_checks > 0 ? 0 : 1;
}

char *kb_test_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/kbtest-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(path))
        return NULL;
    return strdup(path);
}

void kb_test_rmtree(const char *path)
{
    char command[1024];
    snprintf(command, sizeof command, "rm -rf '%s'", path);
    if (system(command) != 0)
        fprintf(stderr, "rm -rf %s failed\n", path);
}

char *kb_test_capture(const char *command)
{
    FILE *pipe = popen(command, "r");
    if (!pipe)
        return NULL;
    size_t size = 0, cap = 4096;
    char *out = malloc(cap);
    size_t n;
    while ((n = fread(out + size, 1, cap - size - 1, pipe)) > 0) {
        size += n;
        if (cap - size < 2) {
            cap *= 2;
            out = realloc(out, cap);
        }
    }
    out[size] = 0;
    pclose(pipe);
    return out;
}

int kb_test_count_entries(const char *path)
{
    DIR *dir = opendir(path);
    if (!dir)
        return -1;
    int count = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)))
        if (entry->d_name[0] != '.')
            count++;
    closedir(dir);
    return count;
}

int kb_test_count_fds(void)
{
    int count = kb_test_count_entries("/proc/self/fd");
    return count < 0 ? -1 : count - 1; /* the DIR's own descriptor */
}

double kb_test_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}
