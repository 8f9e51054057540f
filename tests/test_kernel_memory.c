/*  test_kernel_memory.c - service/ops/kb_kernel_memory with real processes:
    a figure is read once and kept for its time to live, then read again;
    a pass reads every new pid but at most KB_KERNEL_MEMORY_READS older
    figures; processes that are gone read as such; pids a pass did not ask
    for are forgotten. */
#include "kb_testutil.h"
#include "service/ops/kb_kernel_memory.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB ((uint64_t)1 << 20)
#define CHILDREN (KB_KERNEL_MEMORY_READS + 2)

static void test_kept_then_read_again(void)
{
    kb_kernel_memory_t cache;
    kb_kernel_memory_init(&cache);
    uint64_t rss = 0, pss = 0, rss2 = 0, pss2 = 0;
    kb_kernel_memory_begin(&cache, 0);
    CHECK(kb_kernel_memory_of(&cache, getpid(), &rss, &pss));
    kb_kernel_memory_end(&cache);
    CHECK(rss > 0 && pss > 0 && pss <= rss);

    size_t size = 64 * MIB; /* touched: resident */
    char *more = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(more != MAP_FAILED);
    for (size_t i = 0; more != MAP_FAILED && i < size; i += 4096)
        more[i] = 1;

    kb_kernel_memory_begin(&cache, KB_KERNEL_MEMORY_TTL_MS - 1); /* still kept */
    CHECK(kb_kernel_memory_of(&cache, getpid(), &rss2, &pss2));
    kb_kernel_memory_end(&cache);
    CHECK(rss2 == rss && pss2 == pss);

    kb_kernel_memory_begin(&cache, KB_KERNEL_MEMORY_TTL_MS); /* read again */
    CHECK(kb_kernel_memory_of(&cache, getpid(), &rss2, &pss2));
    kb_kernel_memory_end(&cache);
    CHECK(rss2 >= rss + 60 * MIB && pss2 >= pss + 60 * MIB);
    if (more != MAP_FAILED)
        munmap(more, size);
    kb_kernel_memory_free(&cache);
}

static void test_older_figures_read_a_few_at_a_time(void)
{
    kb_kernel_memory_t cache;
    kb_kernel_memory_init(&cache);
    pid_t kids[CHILDREN];
    for (int i = 0; i < CHILDREN; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            pause();
            _exit(0);
        }
    }
    uint64_t rss, pss;
    int readable = 0;
    kb_kernel_memory_begin(&cache, 0); /* new pids: every one read */
    for (int i = 0; i < CHILDREN; i++)
        readable += kids[i] > 0 && kb_kernel_memory_of(&cache, kids[i], &rss, &pss);
    kb_kernel_memory_end(&cache);
    CHECK(readable == CHILDREN);

    for (int i = 0; i < CHILDREN; i++) /* gone, reaped: /proc/<pid> no more */
        if (kids[i] > 0 && kill(kids[i], SIGKILL) == 0)
            waitpid(kids[i], NULL, 0);

    int64_t later = KB_KERNEL_MEMORY_TTL_MS;
    readable = 0;
    kb_kernel_memory_begin(&cache, later); /* older: READS of them read again */
    for (int i = 0; i < CHILDREN; i++)
        readable += kb_kernel_memory_of(&cache, kids[i], &rss, &pss);
    kb_kernel_memory_end(&cache);
    CHECK(readable == CHILDREN - KB_KERNEL_MEMORY_READS);

    readable = 0;
    kb_kernel_memory_begin(&cache, later + 1); /* the rest, in the next pass */
    for (int i = 0; i < CHILDREN; i++)
        readable += kb_kernel_memory_of(&cache, kids[i], &rss, &pss);
    kb_kernel_memory_end(&cache);
    CHECK(readable == 0);

    kb_kernel_memory_begin(&cache, later + 2); /* asked for none: all forgotten */
    CHECK(kb_kernel_memory_of(&cache, getpid(), &rss, &pss));
    kb_kernel_memory_end(&cache);
    CHECK(cache.entries.len == 1);
    kb_kernel_memory_free(&cache);
}

int main(void)
{
    RUN_TEST(test_kept_then_read_again);
    RUN_TEST(test_older_figures_read_a_few_at_a_time);
    return kb_test_summary();
}
