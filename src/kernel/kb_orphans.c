/*  kb_orphans.c - ending the kernels nobody adopted (see kb_orphans.h).
 */
#include "kernel/kb_orphans.h"

#include "kernel/kb_proctree.h"

#include <czmq.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KB_CMDLINE_MAX 8192 /* a kernel's argv fits; a longer one is read cut */

bool kb_orphans_names_dir(const char *args, size_t len, const char *dir)
{
    size_t dlen = strlen(dir);
    if (dlen == 0)
        return false;
    for (size_t at = 0; at < len;) {
        const char *arg = args + at;
        size_t n = strnlen(arg, len - at);
        if (n > dlen && strncmp(arg, dir, dlen) == 0 && arg[dlen] == '/')
            return true;
        at += n + 1;
    }
    return false;
}

/*  The parent and process group of pid, from /proc/<pid>/stat. 0, or -1
    when it is gone. */
static int s_ppid_pgrp(pid_t pid, pid_t *ppid, pid_t *pgrp)
{
    char buf[512];
    if (kb_proc_read(pid, "stat", buf, sizeof buf) < 0)
        return -1;
    const char *paren = strrchr(buf, ')'); /* the name may hold anything */
    int p = 0, g = 0;
    char state;
    if (!paren || sscanf(paren + 1, " %c %d %d", &state, &p, &g) != 3 || state == 'Z')
        return -1;
    *ppid = p;
    *pgrp = g;
    return 0;
}

/*  Whether pid's command line names a file in dir. */
static bool s_names_dir(pid_t pid, const char *dir)
{
    char *buf = malloc(KB_CMDLINE_MAX);
    ssize_t n = buf ? kb_proc_read(pid, "cmdline", buf, KB_CMDLINE_MAX) : -1;
    bool named = n > 0 && kb_orphans_names_dir(buf, (size_t)n, dir);
    free(buf);
    return named;
}

size_t kb_orphans_end(const char *dir, kb_orphan_ours_fn *ours, void *arg)
{
    DIR *proc = dir ? opendir("/proc") : NULL;
    if (!proc)
        return 0;
    pid_t self = getpid();
    size_t ended = 0;
    struct dirent *entry;
    while ((entry = readdir(proc))) {
        char *end;
        long pid = strtol(entry->d_name, &end, 10);
        pid_t ppid, pgrp;
        if (*end != '\0' || pid <= 1 || pid == self)
            continue;
        if (s_ppid_pgrp((pid_t)pid, &ppid, &pgrp) != 0 || ppid == self)
            continue;
        if (!s_names_dir((pid_t)pid, dir) || ours(arg, (pid_t)pid))
            continue;
        zsys_warning("ending pid %ld: a kernel process in %s that no record names "
                     "(left half-made by a daemon that was killed)",
                     pid, dir);
        kill(pgrp == pid ? -(pid_t)pid : (pid_t)pid, SIGKILL);
        ended++;
    }
    closedir(proc);
    return ended;
}
