/*  test_proctree.c - process trees read from /proc, with real processes:
    a session leader that forks children, grandchildren and orphans. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kb_testutil.h"
#include "kernel/kb_proctree.h"

static void s_sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/*  In a child: forks `children` sleepers, of which `orphans` fork a
    sleeper themselves and exit (so that it is adopted by init), then
    waits for SIGTERM. Returns only in the parent: the leader's pid. */
static pid_t s_leader(int children, int orphans, int pipe_fd)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    setsid();
    pid_t parents[64];
    int n_parents = 0;
    for (int i = 0; i < children; i++) {
        pid_t child = fork();
        if (child != 0 && i < orphans && n_parents < 64)
            parents[n_parents++] = child;
        if (child == 0) {
            if (i < orphans) {
                if (fork() == 0) {
                    pause();
                    _exit(0);
                }
                _exit(0);
            }
            pause();
            _exit(0);
        }
    }
    for (int i = 0; i < n_parents; i++)
        waitpid(parents[i], NULL, 0); /* the orphans' parents have exited */
    char ok = 1;
    if (write(pipe_fd, &ok, 1) != 1)
        _exit(1);
    for (;;) {
        int status;
        if (waitpid(-1, &status, 0) < 0 && errno == ECHILD)
            pause();
    }
}

static void s_wait_ready(int fd)
{
    char c;
    CHECK(read(fd, &c, 1) == 1);
}

static unsigned s_pids(kb_proctree_t *tree)
{
    kb_tree_sample_t sample;
    kb_proctree_sample(tree, &sample);
    return sample.pids;
}

/*  Polls until the tree counts `want` live processes (a killed process
    takes its time to die on a loaded machine), for 10 s at most. */
static unsigned s_wait_pids(kb_proctree_t *tree, unsigned want)
{
    unsigned n = s_pids(tree);
    for (int i = 0; i < 1000 && n != want; i++) {
        s_sleep_ms(10);
        n = s_pids(tree);
    }
    return n;
}

static void s_reap(pid_t leader)
{
    kill(leader, SIGKILL);
    waitpid(leader, NULL, 0);
}

static void test_finds_children_grandchildren_and_orphans(void)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t leader = s_leader(6, 2, fds[1]);
    s_wait_ready(fds[0]);
    kb_procscan_t *scan = kb_procscan_new();
    kb_proctree_t *tree = kb_proctree_new(scan, leader);
    CHECK(tree && kb_proctree_root(tree) == leader);
    CHECK(kb_procscan_update(scan) == 0);
    /*  the leader, 4 sleeping children, 2 orphans adopted by init */
    kb_tree_sample_t sample;
    CHECK(kb_proctree_sample(tree, &sample) == 0);
    CHECK(sample.pids == 7);
    CHECK(sample.rss_bytes > 7 * 4096);
    /*  an incremental update finds nothing new, and keeps what it knows */
    CHECK(kb_procscan_update(scan) == 0);
    CHECK(s_pids(tree) == 7);

    CHECK(kb_proctree_kill_over(tree, 3) == 4);
    CHECK(s_wait_pids(tree, 3) == 3);
    CHECK(kb_proctree_kill_descendants(tree) >= 2);
    CHECK(s_wait_pids(tree, 1) == 1);
    CHECK(kb_procscan_update(scan) == 0);
    CHECK(s_pids(tree) == 1);
    kb_proctree_destroy(&tree);
    CHECK(tree == NULL);
    kb_procscan_destroy(&scan);
    s_reap(leader);
    close(fds[0]);
    close(fds[1]);
}

static void test_new_processes_join_between_updates(void)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t leader = s_leader(1, 0, fds[1]);
    s_wait_ready(fds[0]);
    kb_procscan_t *scan = kb_procscan_new();
    kb_proctree_t *tree = kb_proctree_new(scan, leader);
    CHECK(kb_procscan_update(scan) == 0);
    CHECK(s_pids(tree) == 2);
    /*  a process that is not in the tree is never counted */
    pid_t stranger = fork();
    if (stranger == 0) {
        pause();
        _exit(0);
    }
    /*  a second tree on the same scan */
    int fds2[2];
    CHECK(pipe(fds2) == 0);
    pid_t leader2 = s_leader(3, 1, fds2[1]);
    s_wait_ready(fds2[0]);
    kb_proctree_t *tree2 = kb_proctree_new(scan, leader2);
    CHECK(kb_procscan_update(scan) == 0);
    CHECK(s_pids(tree) == 2);
    CHECK(s_pids(tree2) == 4);
    /*  signalling only the descendants leaves the root */
    CHECK(kb_proctree_signal(tree2, SIGKILL, false) == 3);
    CHECK(s_wait_pids(tree2, 1) == 1);
    /*  a root that is gone: -1 */
    s_reap(leader2);
    kb_tree_sample_t sample;
    CHECK(kb_proctree_sample(tree2, &sample) == -1);
    CHECK(sample.pids == 0);
    kb_proctree_destroy(&tree2);
    kb_proctree_kill_descendants(tree);
    kb_proctree_destroy(&tree);
    kb_procscan_destroy(&scan);
    s_reap(leader);
    kill(stranger, SIGKILL);
    waitpid(stranger, NULL, 0);
    close(fds[0]);
    close(fds[1]);
    close(fds2[0]);
    close(fds2[1]);
}

static void test_root_peak_and_its_reset(void)
{
    int fds[2], back[2];
    CHECK(pipe(fds) == 0 && pipe(back) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        setsid();
        size_t n = 64 << 20;
        char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        memset(p, 1, n);
        munmap(p, n);
        char c = 1;
        if (write(fds[1], &c, 1) != 1 || read(back[0], &c, 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    s_wait_ready(fds[0]);
    kb_procscan_t *scan = kb_procscan_new();
    kb_proctree_t *tree = kb_proctree_new(scan, pid);
    uint64_t peak = kb_proctree_root_peak(tree);
    CHECK(peak >= (uint64_t)64 << 20);
    CHECK(kb_proctree_root_peak_reset(tree) == 0);
    CHECK(kb_proctree_root_peak(tree) < (uint64_t)32 << 20);
    kb_tree_sample_t sample;
    CHECK(kb_proctree_sample(tree, &sample) == 0);
    CHECK(sample.rss_bytes < (uint64_t)32 << 20);

    /*  RLIMIT_DATA from outside */
    CHECK(kb_proc_limit_data(pid, (uint64_t)256 << 20) == 0);
    struct rlimit limit;
    CHECK(prlimit(pid, RLIMIT_DATA, NULL, &limit) == 0);
    CHECK(limit.rlim_cur == (rlim_t)256 << 20 && limit.rlim_max == (rlim_t)256 << 20);
    kb_proctree_destroy(&tree);
    kb_procscan_destroy(&scan);
    s_reap(pid);
    CHECK(kb_proc_limit_data(pid, 1 << 20) == -1); /* gone */
    close(fds[0]);
    close(fds[1]);
    close(back[0]);
    close(back[1]);
}

static void test_cpu_time_counts_the_tree(void)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        setsid();
        if (fork() == 0) {
            /* a child that spins 300 ms of its own CPU time, then waits */
            struct timespec now;
            volatile unsigned long x = 0;
            do {
                for (int i = 0; i < 100000; i++)
                    x += (unsigned long)i;
                clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
            } while (now.tv_sec * 1000 + now.tv_nsec / 1000000 < 300);
            char c = 1;
            if (write(fds[1], &c, 1) != 1)
                _exit(1);
            pause();
            _exit(0);
        }
        pause();
        _exit(0);
    }
    kb_procscan_t *scan = kb_procscan_new();
    kb_proctree_t *tree = kb_proctree_new(scan, pid);
    /*  listed once the child has spun: on a busy machine it may not have
        been forked yet 20 ms after the leader */
    s_wait_ready(fds[0]);
    CHECK(kb_procscan_update(scan) == 0);
    kb_tree_sample_t sample;
    CHECK(kb_proctree_sample(tree, &sample) == 0);
    CHECK(sample.pids == 2);
    CHECK(sample.cpu_time_s >= 0.25 && sample.cpu_time_s < 2.0);
    kb_proctree_kill_descendants(tree);
    kb_proctree_destroy(&tree);
    kb_procscan_destroy(&scan);
    s_reap(pid);
    close(fds[0]);
    close(fds[1]);
}

/*  In a child: a session leader that, for each byte read from go, forks
    a sleeper ('s') or a child that exits at once and is never reaped
    ('z', a zombie), then answers on ack. Returns only in the parent. */
static pid_t s_forker(int go, int ack)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    setsid();
    char c;
    while (read(go, &c, 1) == 1) {
        pid_t child = fork();
        if (child == 0) {
            if (c == 's')
                pause();
            _exit(0);
        }
        if (c == 'z') { /* it has exited: a zombie, not reaped */
            siginfo_t info;
            waitid(P_PID, (id_t)child, &info, WEXITED | WNOWAIT);
        }
        if (write(ack, &c, 1) != 1)
            _exit(1);
    }
    _exit(0);
}

static void s_ask(int go, int ack, char c)
{
    char got;
    CHECK(write(go, &c, 1) == 1);
    CHECK(read(ack, &got, 1) == 1 && got == c);
}

/*  The memory-only sample (statm) agrees with the full one and leaves a
    zombie out; a child forked after updates that found nothing new (no
    pid given out, so /proc was not listed) is found by the next one. */
static void test_memory_sample_and_quiet_updates(void)
{
    int go[2], ack[2];
    CHECK(pipe(go) == 0 && pipe(ack) == 0);
    pid_t leader = s_forker(go[0], ack[1]);
    kb_procscan_t *scan = kb_procscan_new();
    kb_proctree_t *tree = kb_proctree_new(scan, leader);
    s_ask(go[1], ack[0], 's');
    CHECK(kb_procscan_update(scan) == 0);
    kb_tree_sample_t full, memory;
    CHECK(kb_proctree_sample(tree, &full) == 0);
    CHECK(kb_proctree_sample_memory(tree, &memory) == 0);
    CHECK(full.pids == 2 && memory.pids == 2);
    CHECK(memory.cpu_time_s == 0);
    CHECK(memory.root_rss_bytes > 0 && memory.root_rss_bytes < memory.rss_bytes);
    CHECK(memory.rss_bytes > full.rss_bytes / 2 && memory.rss_bytes < full.rss_bytes * 2);
    for (int i = 0; i < 20; i++)
        CHECK(kb_procscan_update(scan) == 0);
    CHECK(kb_proctree_sample_memory(tree, &memory) == 0 && memory.pids == 2);

    s_ask(go[1], ack[0], 's');
    CHECK(kb_procscan_update(scan) == 0);
    CHECK(kb_proctree_sample_memory(tree, &memory) == 0 && memory.pids == 3);
    CHECK(s_pids(tree) == 3);

    s_ask(go[1], ack[0], 'z');
    CHECK(kb_procscan_update(scan) == 0);
    CHECK(kb_proctree_sample_memory(tree, &memory) == 0 && memory.pids == 3);
    CHECK(s_pids(tree) == 3);

    CHECK(kb_proctree_kill_descendants(tree) >= 2);
    s_reap(leader);
    /*  The root reaped is gone at once; its killed children (init's now)
        take a moment to die */
    int rc = kb_proctree_sample_memory(tree, &memory);
    for (int i = 0; i < 200 && memory.pids > 0; i++) {
        s_sleep_ms(10);
        rc = kb_proctree_sample_memory(tree, &memory);
    }
    CHECK(rc == -1 && memory.pids == 0);
    kb_proctree_destroy(&tree);
    kb_procscan_destroy(&scan);
    for (int i = 0; i < 2; i++) {
        close(go[i]);
        close(ack[i]);
    }
}

/*  A process's working directory now: a child's after its chdir, none for
    a pid that is gone. */
static void test_proc_cwd_is_where_the_process_is(void)
{
    char dir[] = "/tmp/kbtest-cwd-XXXXXX", buf[4096];
    CHECK(mkdtemp(dir) != NULL);
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t child = fork();
    if (child == 0) {
        char ok = chdir(dir) == 0;
        if (write(fds[1], &ok, 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    close(fds[1]);
    char ok = 0;
    CHECK(read(fds[0], &ok, 1) == 1 && ok);
    close(fds[0]);
    CHECK(kb_proc_cwd(child, buf, sizeof buf) == 0);
    CHECK_STR(buf, dir);
    CHECK(kb_proc_cwd(child, buf, 4) == -1 && errno == ENAMETOOLONG);
    CHECK(rmdir(dir) == 0); /* "<dir> (deleted)" is no directory */
    CHECK(kb_proc_cwd(child, buf, sizeof buf) == -1);
    s_reap(child);
    CHECK(kb_proc_cwd(child, buf, sizeof buf) == -1);
    CHECK(kb_proc_cwd(getpid(), buf, sizeof buf) == 0 && buf[0] == '/');
}

int main(void)
{
    int fds_before = kb_test_count_fds();
    RUN_TEST(test_finds_children_grandchildren_and_orphans);
    RUN_TEST(test_new_processes_join_between_updates);
    RUN_TEST(test_root_peak_and_its_reset);
    RUN_TEST(test_cpu_time_counts_the_tree);
    RUN_TEST(test_memory_sample_and_quiet_updates);
    RUN_TEST(test_proc_cwd_is_where_the_process_is);
    CHECK(kb_test_count_fds() == fds_before);
    return kb_test_summary();
}
