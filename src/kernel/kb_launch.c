/*  kb_launch.c - what a kernel needs before it has sockets: a connection
    file (0600) with a fresh key and free ports or short ipc paths, and the
    process itself, spawned in a session and process group of its own with
    its stdout/stderr into a pipe. Not for: sockets, readiness or the
    lifecycle (kb_kernel.c).
*/
#include "kernel/kb_launch.h"

#include <czmq.h>

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/rand.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

const char *kb_signal_name(int sig)
{
    switch (sig) {
        case SIGHUP:
            return "SIGHUP";
        case SIGINT:
            return "SIGINT";
        case SIGQUIT:
            return "SIGQUIT";
        case SIGILL:
            return "SIGILL";
        case SIGTRAP:
            return "SIGTRAP";
        case SIGABRT:
            return "SIGABRT";
        case SIGBUS:
            return "SIGBUS";
        case SIGFPE:
            return "SIGFPE";
        case SIGKILL:
            return "SIGKILL";
        case SIGUSR1:
            return "SIGUSR1";
        case SIGSEGV:
            return "SIGSEGV";
        case SIGUSR2:
            return "SIGUSR2";
        case SIGPIPE:
            return "SIGPIPE";
        case SIGALRM:
            return "SIGALRM";
        case SIGTERM:
            return "SIGTERM";
        case SIGXCPU:
            return "SIGXCPU";
        case SIGXFSZ:
            return "SIGXFSZ";
        case SIGSYS:
            return "SIGSYS";
        default:
            return "SIGUNKNOWN";
    }
}

/* ---- connection file ------------------------------------------------------ */

/*  Five free TCP ports on 127.0.0.1, held open together so they differ. */
static int s_free_ports(int ports[5])
{
    int fds[5];
    int i, rc = -1;
    for (i = 0; i < 5; i++)
        fds[i] = -1;
    for (i = 0; i < 5; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds[i] < 0)
            goto done;
        struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = 0 };
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof addr;
        if (bind(fds[i], (struct sockaddr *)&addr, sizeof addr) != 0
            || getsockname(fds[i], (struct sockaddr *)&addr, &len) != 0)
            goto done;
        ports[i] = ntohs(addr.sin_port);
    }
    rc = 0;
done:
    for (i = 0; i < 5; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return rc;
}

int64_t kb_launch_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

json_t *kb_connection_write(kb_connection_t *conn, const kb_kernelspec_t *spec,
                            const kb_kernel_opts_t *opts, char *err, size_t errlen)
{
    unsigned char raw[32];
    char key[65];
    if (RAND_bytes(raw, sizeof raw) != 1) {
        snprintf(err, errlen, "no random bytes for the kernel's key");
        return NULL;
    }
    for (int i = 0; i < 32; i++)
        sprintf(key + 2 * i, "%02x", raw[i]);

    /*  Short names in base 36: ipc endpoints must stay short (see ipc_dir). */
    char name[32];
    size_t at = sizeof name - 1;
    unsigned long serial = opts->serial;
    name[at] = 0;
    do {
        name[--at] = "0123456789abcdefghijklmnopqrstuvwxyz"[serial % 36];
        serial /= 36;
    } while (serial && at > 1);
    name[--at] = 'k';
    memmove(name, name + at, sizeof name - at);
    conn->connection_file = zsys_sprintf("%s/%s.json", opts->runtime_dir, name);

    json_t *info = json_object();
    bool ipc = opts->transport && strcmp(opts->transport, "ipc") == 0;
    if (ipc) {
        conn->ipc_base
            = zsys_sprintf("%s/%s", opts->ipc_dir ? opts->ipc_dir : opts->runtime_dir, name);
        json_object_set_new(info, "transport", json_string("ipc"));
        json_object_set_new(info, "ip", json_string(conn->ipc_base));
        const char *keys[]
            = { "shell_port", "iopub_port", "stdin_port", "control_port", "hb_port" };
        for (int i = 0; i < 5; i++)
            json_object_set_new(info, keys[i], json_integer(i + 1));
    } else {
        int ports[5];
        if (s_free_ports(ports) != 0) {
            snprintf(err, errlen, "no free TCP ports on 127.0.0.1: %s", strerror(errno));
            json_decref(info);
            return NULL;
        }
        json_object_set_new(info, "transport", json_string("tcp"));
        json_object_set_new(info, "ip", json_string("127.0.0.1"));
        json_object_set_new(info, "shell_port", json_integer(ports[0]));
        json_object_set_new(info, "iopub_port", json_integer(ports[1]));
        json_object_set_new(info, "stdin_port", json_integer(ports[2]));
        json_object_set_new(info, "control_port", json_integer(ports[3]));
        json_object_set_new(info, "hb_port", json_integer(ports[4]));
    }
    json_object_set_new(info, "key", json_string(key));
    json_object_set_new(info, "signature_scheme", json_string("hmac-sha256"));
    json_object_set_new(info, "kernel_name", json_string(spec->name));

    int fd = open(conn->connection_file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write %s: %s", conn->connection_file, strerror(errno));
        json_decref(info);
        return NULL;
    }
    char *text = json_dumps(info, JSON_INDENT(1));
    size_t len = strlen(text);
    ssize_t n = write(fd, text, len);
    free(text);
    close(fd);
    if (n != (ssize_t)len) {
        snprintf(err, errlen, "cannot write %s", conn->connection_file);
        json_decref(info);
        return NULL;
    }
    char session[128];
    snprintf(session, sizeof session, "%02x%02x%02x%02x%02x%02x-%s", raw[2], raw[3], raw[4], raw[5],
             raw[6], raw[7], name);
    conn->wire = kb_wire_new("hmac-sha256", (const unsigned char *)key, 64, session, "kernelbridge",
                             err, errlen);
    if (!conn->wire) {
        json_decref(info);
        return NULL;
    }
    /* Stream text is decoded once, by the run's scanner (kb_scan.h). */
    kb_wire_set_lazy_streams(conn->wire, true);
    return info;
}

void kb_connection_remove(kb_connection_t *conn)
{
    if (conn->connection_file)
        unlink(conn->connection_file);
    if (conn->ipc_base)
        for (int i = 1; i <= 5; i++) {
            char path[600];
            snprintf(path, sizeof path, "%s-%d", conn->ipc_base, i);
            unlink(path);
        }
    free(conn->connection_file);
    free(conn->ipc_base);
    conn->connection_file = conn->ipc_base = NULL;
}

int kb_launch_spawn(const kb_kernelspec_t *spec, const char *connection_file,
                    const kb_kernel_opts_t *opts, pid_t *pid, int *output_fd, int64_t *started_ms,
                    char *err, size_t errlen)
{
    int pipefd[2] = { -1, -1 };
    char **argv = kb_kernelspec_build_argv(spec, connection_file, opts->system_python);
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    int rc = -1;
    if (!argv || !argv[0]) {
        snprintf(err, errlen, "kernelspec %s has an empty argv", spec->name);
        kb_strv_free(argv);
        return -1;
    }
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        kb_strv_free(argv);
        return -1;
    }
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, pipefd[1], 1);
    posix_spawn_file_actions_adddup2(&actions, pipefd[1], 2);
    if (opts->cwd && *opts->cwd)
        posix_spawn_file_actions_addchdir_np(&actions, opts->cwd);
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr,
                             POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    int e = posix_spawnp(pid, argv[0], &actions, &attr, argv, opts->envp);
    if (e != 0) {
        snprintf(err, errlen, "cannot start %s: %s%s%s", argv[0], strerror(e),
                 opts->cwd ? " (cwd " : "", opts->cwd ? opts->cwd : "");
        if (opts->cwd)
            strncat(err, ")", errlen - strlen(err) - 1);
        goto done;
    }
    *started_ms = kb_launch_now_ms();
    *output_fd = pipefd[0];
    pipefd[0] = -1;
    fcntl(*output_fd, F_SETFL, O_NONBLOCK);
    rc = 0;
done:
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (pipefd[0] >= 0)
        close(pipefd[0]);
    close(pipefd[1]);
    kb_strv_free(argv);
    return rc;
}
