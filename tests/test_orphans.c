/*  test_orphans.c - ending kernel processes no record names (kb_orphans):
    which command lines name a dir; a real process left by a parent that
    exited (not our child) is ended with its group unless the caller says
    it is its own; our own children are never touched. */
#include "kb_testutil.h"

#include "kernel/kb_orphans.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void test_names_dir(void)
{
    const char args[] = "python3\0-m\0ipykernel_launcher\0-f\0/s/kernels/kernel-1.json";
    CHECK(kb_orphans_names_dir(args, sizeof args, "/s/kernels"));
    CHECK(!kb_orphans_names_dir(args, sizeof args, "/s/kern")); /* not a dir of it */
    CHECK(!kb_orphans_names_dir(args, sizeof args, "/s/kernels/kernel-1.json"));
    CHECK(!kb_orphans_names_dir(args, sizeof args, ""));
    const char bare[] = "sleep\0/s/kernels"; /* the dir itself is no file in it */
    CHECK(!kb_orphans_names_dir(bare, sizeof bare, "/s/kernels"));
    const char cut[] = { 's', 'h', 0, '/', 's', '/' }; /* unterminated last argument */
    CHECK(!kb_orphans_names_dir(cut, sizeof cut, "/s/kernels"));
}

/*  A process whose argv names dir/kernel.json, in its own group, whose
    parent has exited (so it is not ours). Its pid, read from a pipe. */
static pid_t s_orphan(const char *dir)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t middle = fork();
    if (middle == 0) {
        pid_t pid = fork();
        if (pid == 0) {
            setsid();
            char file[512];
            snprintf(file, sizeof file, "%s/kernel.json", dir);
            /* sh waits for its sleep: the group has two processes */
            execl("/bin/sh", "sh", "-c", "sleep 60; :", file, (char *)NULL);
            _exit(127);
        }
        (void)!write(fds[1], &pid, sizeof pid);
        _exit(0);
    }
    close(fds[1]);
    pid_t pid = 0;
    CHECK(read(fds[0], &pid, sizeof pid) == sizeof pid);
    close(fds[0]);
    waitpid(middle, NULL, 0);
    return pid;
}

/*  Whether pid is gone (or a zombie nobody reaped yet). */
static bool s_gone(pid_t pid)
{
    for (int i = 0; i < 200; i++) {
        char path[64], buf[256];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f)
            return true;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *paren = strrchr(buf, ')');
        if (paren && paren[1] == ' ' && paren[2] == 'Z')
            return true;
        nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
    }
    return false;
}

static pid_t s_keep;

static bool s_ours(void *arg, pid_t pid)
{
    (void)arg;
    return pid == s_keep;
}

static void test_ends_what_is_nobodys(void)
{
    char *dir = kb_test_tmpdir();
    pid_t kept = s_orphan(dir), lost = s_orphan(dir);
    /* wait until both have exec'd (their argv names the dir) */
    for (int i = 0; i < 200; i++) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "tr '\\0' ' ' </proc/%d/cmdline; tr '\\0' ' ' </proc/%d/cmdline",
                 (int)kept, (int)lost);
        char *out = kb_test_capture(cmd);
        int named = 0;
        for (const char *at = out; at && (at = strstr(at, "kernel.json")); at++)
            named++;
        free(out);
        if (named == 2)
            break;
        nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
    }
    /* a child of ours naming the dir is never touched */
    pid_t child = fork();
    if (child == 0) {
        char file[512];
        snprintf(file, sizeof file, "%s/kernel.json", dir);
        execl("/bin/sh", "sh", "-c", "exec sleep 60", file, (char *)NULL);
        _exit(127);
    }
    nanosleep(&(struct timespec){ .tv_nsec = 100 * 1000 * 1000 }, NULL);
    s_keep = kept;
    CHECK(kb_orphans_end(dir, s_ours, NULL) == 1);
    CHECK(s_gone(lost));
    CHECK(kill(kept, 0) == 0);
    CHECK(waitpid(child, NULL, WNOHANG) == 0); /* still running */
    s_keep = 0;
    CHECK(kb_orphans_end(dir, s_ours, NULL) == 1);
    CHECK(s_gone(kept));
    CHECK(kb_orphans_end("/nonexistent-dir", s_ours, NULL) == 0);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    kb_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    RUN_TEST(test_names_dir);
    RUN_TEST(test_ends_what_is_nobodys);
    return kb_test_summary();
}
