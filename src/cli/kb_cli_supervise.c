/*  kb_cli_supervise.c - `kernelbridge serve --supervise`: a small parent in
    front of the daemon, made to be a container's first process. It becomes
    the child subreaper of what runs below it (prctl PR_SET_CHILD_SUBREAPER),
    so kernels whose daemon died are re-parented to it and stay; it reaps
    every zombie; it forwards SIGTERM and SIGINT to the daemon; and when the
    daemon dies by a signal (a crash, SIGKILL, the OOM killer) it starts a
    new one on the same state dir, which adopts the kernels that stayed
    (SPEC section 8), with a backoff when daemons keep dying young. A daemon
    that exits by itself (status 0, 1, 2) ends the supervisor with that
    status. Not for what the daemon does: the child returns to
    kb_cli_serve.c, which goes on as a daemon. */
#include "cli/kb_cli_supervise.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/*  A daemon that lived this long died by accident, not in a crash loop:
    the next one starts at once. */
#define KB_SUPERVISE_STABLE_MS 10000
/*  The first delay of a crash loop, doubled per death, and its cap. */
#define KB_SUPERVISE_BACKOFF_MS 250
#define KB_SUPERVISE_BACKOFF_MAX_MS 30000
/*  At the end, from SIGTERM to SIGKILL of what is left below the supervisor. */
#define KB_SUPERVISE_LEFTOVER_MS 5000

typedef struct kb_supervisor {
    kb_log_format_t format;
    sigset_t watched;      /* SIGCHLD, SIGTERM, SIGINT: taken by sigtimedwait */
    sigset_t original;     /* the mask to give back to each daemon */
    pid_t daemon;          /* the daemon running now, 0 while none */
    long long started_ms;  /* when it started */
    int stop_signal;       /* the SIGTERM or SIGINT received, 0 before */
    unsigned quick_deaths; /* daemons in a row that died within KB_SUPERVISE_STABLE_MS */
    unsigned restarts;
    long long next_start_ms; /* when the next daemon may start */
    int status;              /* the exit status once known, -1 before */
} kb_supervisor_t;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*  The next watched signal within timeout_ms (-1: no limit); 0 on timeout. */
static int next_signal(kb_supervisor_t *s, long long timeout_ms)
{
    for (;;) {
        int sig;
        if (timeout_ms < 0) {
            sig = sigwaitinfo(&s->watched, NULL);
        } else {
            struct timespec ts
                = { (time_t)(timeout_ms / 1000), (long)(timeout_ms % 1000) * 1000000 };
            sig = sigtimedwait(&s->watched, NULL, &ts);
        }
        if (sig > 0)
            return sig;
        if (errno == EAGAIN)
            return 0;
        /* EINTR: a signal not watched (stopped, continued); wait again */
    }
}

/*  The daemon's exit status as the supervisor's: its own, or 128 + signal. */
static int status_of(int wstatus)
{
    return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
}

/*  How long to wait before the next daemon: nothing after a daemon that
    lived or the first that died young, then 250 ms doubled per quick death
    in a row, at most 30 s. */
static long long backoff_ms(const kb_supervisor_t *s)
{
    if (s->quick_deaths <= 1)
        return 0;
    long long delay = KB_SUPERVISE_BACKOFF_MS;
    for (unsigned i = 2; i < s->quick_deaths && delay < KB_SUPERVISE_BACKOFF_MAX_MS; i++)
        delay *= 2;
    return delay < KB_SUPERVISE_BACKOFF_MAX_MS ? delay : KB_SUPERVISE_BACKOFF_MAX_MS;
}

/*  The daemon is gone: decide between a restart and the end. */
static void daemon_died(kb_supervisor_t *s, int wstatus)
{
    long long lived = now_ms() - s->started_ms;
    s->daemon = 0;
    if (s->stop_signal || !WIFSIGNALED(wstatus)) {
        s->status = status_of(wstatus);
        if (!s->stop_signal && s->status != 0)
            kb_server_log(s->format, "error", "supervisor: the daemon exited with status %d",
                          s->status);
        return;
    }
    s->quick_deaths = lived < KB_SUPERVISE_STABLE_MS ? s->quick_deaths + 1 : 0;
    kb_server_log(s->format, "error",
                  "supervisor: the daemon died of SIG%s after %lld ms; starting another on the "
                  "same state dir",
                  sigabbrev_np(WTERMSIG(wstatus)), lived);
    s->next_start_ms = now_ms() + backoff_ms(s);
}

/*  Reap every child that has ended: the daemon, and kernels (or their
    children) re-parented here. */
static void reap(kb_supervisor_t *s)
{
    int wstatus;
    pid_t pid;
    while ((pid = waitpid(-1, &wstatus, WNOHANG)) > 0) {
        if (pid == s->daemon)
            daemon_died(s, wstatus);
    }
}

/*  Handle one watched signal. */
static void on_signal(kb_supervisor_t *s, int sig)
{
    if (sig == SIGCHLD) {
        reap(s);
        return;
    }
    if (!s->stop_signal)
        kb_server_log(s->format, "info", "supervisor: SIG%s: stopping the daemon",
                      sigabbrev_np(sig));
    s->stop_signal = sig;
    if (s->daemon)
        kill(s->daemon, sig);
    else if (s->status < 0)
        s->status = 0; /* between two daemons: nothing to stop */
}

/*  The pids of the supervisor's children, from /proc: up to max of them. */
static size_t children(pid_t *pids, size_t max)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%ld/children", (long)getpid());
    FILE *file = fopen(path, "r");
    size_t n = 0;
    long pid;
    while (file && n < max && fscanf(file, "%ld", &pid) == 1)
        pids[n++] = (pid_t)pid;
    if (file)
        fclose(file);
    return n;
}

/*  What is left below the supervisor once the daemon is gone (kernels of a
    daemon that died, their children): SIGTERM, then SIGKILL after
    KB_SUPERVISE_LEFTOVER_MS, reaping all. */
static void end_leftovers(kb_supervisor_t *s)
{
    pid_t pids[256];
    size_t n = children(pids, 256);
    if (n == 0)
        return;
    kb_server_log(s->format, "info", "supervisor: ending %zu process(es) left by the daemon", n);
    for (size_t i = 0; i < n; i++)
        kill(pids[i], SIGTERM);
    long long deadline = now_ms() + KB_SUPERVISE_LEFTOVER_MS;
    while (children(pids, 256) > 0 && now_ms() < deadline) {
        if (next_signal(s, deadline - now_ms()) == SIGCHLD)
            reap(s);
    }
    while ((n = children(pids, 256)) > 0) {
        for (size_t i = 0; i < n; i++)
            kill(pids[i], SIGKILL);
        while (waitpid(-1, NULL, 0) > 0)
            ;
    }
}

/*  Start a daemon. 1 in the new daemon, 0 in the supervisor, -1 when fork
    failed (after a message). */
static int start_daemon(kb_supervisor_t *s)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        kb_server_log(s->format, "error", "supervisor: cannot start the daemon: %s",
                      strerror(errno));
        return -1;
    }
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &s->original, NULL);
        return 1;
    }
    s->daemon = pid;
    s->started_ms = now_ms();
    if (s->restarts++ > 0)
        kb_server_log(s->format, "info", "supervisor: daemon restarted (pid %ld, restart %u)",
                      (long)pid, s->restarts - 1);
    return 0;
}

int kb_cli_supervise(kb_log_format_t format, bool *is_daemon)
{
    kb_supervisor_t s = { .format = format, .status = -1 };
    *is_daemon = false;
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        kb_server_log(format, "error", "supervisor: cannot become a child subreaper: %s",
                      strerror(errno));
    sigemptyset(&s.watched);
    sigaddset(&s.watched, SIGCHLD);
    sigaddset(&s.watched, SIGTERM);
    sigaddset(&s.watched, SIGINT);
    sigprocmask(SIG_BLOCK, &s.watched, &s.original);
    s.next_start_ms = now_ms();
    while (s.status < 0) {
        if (!s.daemon && now_ms() >= s.next_start_ms) {
            int started = start_daemon(&s);
            if (started > 0) {
                *is_daemon = true;
                return 0;
            }
            if (started < 0)
                s.status = 1;
            continue;
        }
        long long wait = s.daemon ? -1 : s.next_start_ms - now_ms();
        int sig = next_signal(&s, wait > 0 ? wait : 0);
        if (sig)
            on_signal(&s, sig);
    }
    end_leftovers(&s);
    sigprocmask(SIG_SETMASK, &s.original, NULL);
    return s.status;
}
