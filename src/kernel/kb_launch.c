/*  kb_launch.c - what a kernel needs before it has sockets: a connection
    file (0600) with a fresh key and free ports or short ipc paths, a log
    for its own stdout/stderr (kept under KB_LOG_MAX), and the process
    itself, spawned in a session and process group of its own. Also the
    checks that come before adopting a running kernel: a connection given
    by someone else, and whether a pid is still the process it was. Not
    for: sockets, readiness or the lifecycle (kb_kernel.c).
*/
#include "kernel/kb_launch.h"
#include "kernel/kb_proctree.h"

#include <czmq.h>

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <ctype.h>
#include <limits.h>
#include <openssl/rand.h>
#include <signal.h>
#include <stdbool.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
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

int64_t kb_launch_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*  n random bytes as 2n lowercase hex digits into out (2n+1 bytes). */
static int s_random_hex(char *out, size_t n)
{
    unsigned char raw[32];
    assert(n <= sizeof raw);
    if (RAND_bytes(raw, (int)n) != 1)
        return -1;
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", raw[i]);
    return 0;
}

static bool s_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

int kb_launch_create_excl(const char *path)
{
    return open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
}

#define KB_NAME_TRIES 8 /* fresh random names tried before giving up */

/*  Pick <runtime_dir>/k-<hex>.json and .log that do not exist, create the
    log, and return the connection file's descriptor (or -1 with err). */
static int s_create_files(kb_connection_t *conn, const kb_kernel_opts_t *opts, char *hex,
                          kb_error_t *err)
{
    for (int attempt = 0; attempt < KB_NAME_TRIES; attempt++) {
        if (s_random_hex(hex, 8) != 0) {
            kb_error_set(err, KB_ERR_INTERNAL, "no random bytes for the kernel's file names");
            return -1;
        }
        free(conn->connection_file);
        free(conn->log_file);
        conn->connection_file = zsys_sprintf("%s/k-%s.json", opts->runtime_dir, hex);
        conn->log_file = zsys_sprintf("%s/k-%s.log", opts->runtime_dir, hex);
        if (!conn->connection_file || !conn->log_file) {
            kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
            goto fail;
        }
        int fd = kb_launch_create_excl(conn->connection_file);
        if (fd < 0 && errno == EEXIST)
            continue;
        if (fd < 0) {
            kb_error_set(err, KB_ERR_INTERNAL, "cannot create %s: %s", conn->connection_file,
                         strerror(errno));
            goto fail;
        }
        int log_fd = kb_launch_create_excl(conn->log_file);
        if (log_fd >= 0) {
            close(log_fd);
            return fd;
        }
        int e = errno;
        close(fd);
        unlink(conn->connection_file);
        if (e == EEXIST)
            continue;
        kb_error_set(err, KB_ERR_INTERNAL, "cannot create %s: %s", conn->log_file, strerror(e));
        goto fail;
    }
    kb_error_set(err, KB_ERR_INTERNAL, "no fresh file name in %s after %d tries", opts->runtime_dir,
                 KB_NAME_TRIES);
fail:
    free(conn->connection_file);
    free(conn->log_file);
    conn->connection_file = conn->log_file = NULL;
    return -1;
}

/*  A short ipc base in the ipc dir whose five sockets do not exist. For a
    kernel of another uid, a dir of its own: <ipc_dir>/<6 hex>, 0700 and
    owned by that uid, with the base <dir>/k (the same length as ours:
    "ipc:///tmp/kbXXXXXX/abcdef/k-1" is 30 characters). */
static int s_pick_ipc_base(kb_connection_t *conn, const kb_kernel_opts_t *opts,
                           const kb_kernel_cred_t *cred, kb_error_t *err)
{
    const char *dir = opts->ipc_dir ? opts->ipc_dir : opts->runtime_dir;
    for (int attempt = 0; attempt < KB_NAME_TRIES; attempt++) {
        char hex[7];
        if (s_random_hex(hex, 3) != 0)
            break;
        free(conn->ipc_base);
        conn->ipc_base = NULL;
        if (cred) {
            char *own = zsys_sprintf("%s/%s", dir, hex);
            if (!own) {
                kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
                return -1;
            }
            if (kb_work_dir_make(own, cred, err) != 0) {
                bool taken = errno == EEXIST;
                free(own);
                if (taken)
                    continue;
                return -1;
            }
            conn->ipc_base = zsys_sprintf("%s/k", own);
            if (!conn->ipc_base) {
                kb_work_dir_remove(own);
                free(own);
                kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
                return -1;
            }
            free(own);
            for (int i = 0; i < 5; i++)
                conn->ipc_ports[i] = i + 1;
            return 0;
        }
        /*  3 bytes are enough in a private per-daemon dir, and keep
            "ipc:///tmp/kbXXXXXX/k123abc-1" within xeus's 31 characters. */
        conn->ipc_base = zsys_sprintf("%s/k%s", dir, hex);
        if (!conn->ipc_base) {
            kb_error_set(err, KB_ERR_INTERNAL, "out of memory");
            return -1;
        }
        bool taken = false;
        for (int i = 0; i < 5 && !taken; i++) {
            char path[600];
            snprintf(path, sizeof path, "%s-%d", conn->ipc_base, i + 1);
            taken = s_exists(path);
        }
        if (!taken) {
            for (int i = 0; i < 5; i++)
                conn->ipc_ports[i] = i + 1;
            return 0;
        }
    }
    free(conn->ipc_base);
    conn->ipc_base = NULL;
    kb_error_set(err, KB_ERR_INTERNAL, "no fresh ipc name in %s", dir);
    return -1;
}

static kb_wire_t *s_new_wire(const char *scheme, const char *key, kb_error_t *err)
{
    char session[40];
    if (s_random_hex(session, 12) != 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "no random bytes for the session");
        return NULL;
    }
    kb_wire_t *wire = kb_wire_new(scheme, (const unsigned char *)key, strlen(key), session,
                                  "kernelbridge", err);
    /* Stream text is decoded once, by the run's scanner (kb_scan.h). */
    if (wire)
        kb_wire_set_lazy_streams(wire, true);
    return wire;
}

json_t *kb_connection_write(kb_connection_t *conn, const kb_kernelspec_t *spec,
                            const kb_kernel_opts_t *opts, const kb_kernel_cred_t *cred,
                            kb_error_t *err)
{
    char key[65], hex[17];
    int fd = -1;
    if (s_random_hex(key, 32) != 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "no random bytes for the kernel's key");
        return NULL;
    }
    json_t *info = json_object();
    bool ipc = opts->transport && strcmp(opts->transport, "ipc") == 0;
    if (ipc) {
        if (s_pick_ipc_base(conn, opts, cred, err) != 0)
            goto fail;
        json_object_set_new(info, "transport", json_string("ipc"));
        json_object_set_new(info, "ip", json_string(conn->ipc_base));
        const char *keys[]
            = { "shell_port", "iopub_port", "stdin_port", "control_port", "hb_port" };
        for (int i = 0; i < 5; i++)
            json_object_set_new(info, keys[i], json_integer(conn->ipc_ports[i]));
    } else {
        int ports[5];
        if (kb_launch_free_ports(opts, ports) != 0) {
            if (opts->port_min) /* all in use: like a start that failed, not our fault */
                kb_error_set(err, KB_ERR_KERNEL_START_FAILED,
                             "no five free TCP ports on 127.0.0.1 in the kernels' range %u-%u",
                             opts->port_min, opts->port_max);
            else
                kb_error_set(err, KB_ERR_INTERNAL, "no free TCP ports on 127.0.0.1: %s",
                             strerror(errno));
            goto fail;
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

    fd = s_create_files(conn, opts, hex, err);
    if (fd < 0)
        goto fail;
    if (cred && fchown(fd, (uid_t)cred->uid, (gid_t)cred->gid) != 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot give %s to uid %lld: %s", conn->connection_file,
                     cred->uid, strerror(errno));
        close(fd);
        goto fail;
    }
    char *text = json_dumps(info, JSON_INDENT(1));
    size_t len = text ? strlen(text) : 0;
    ssize_t n = text ? write(fd, text, len) : -1;
    free(text);
    close(fd);
    if (n != (ssize_t)len || len == 0) {
        kb_error_set(err, KB_ERR_INTERNAL, "cannot write %s", conn->connection_file);
        goto fail;
    }
    conn->wire = s_new_wire("hmac-sha256", key, err);
    if (!conn->wire)
        goto fail;
    return info;
fail:
    json_decref(info);
    return NULL;
}

int kb_connection_key(kb_connection_t *conn, const json_t *info, kb_error_t *err)
{
    const char *scheme = json_string_value(json_object_get(info, "signature_scheme"));
    const char *key = json_string_value(json_object_get(info, "key"));
    conn->wire = s_new_wire(scheme ? scheme : "hmac-sha256", key ? key : "", err);
    return conn->wire ? 0 : -1;
}

/*  A host name as DNS spells it: labels of letters, digits and '-'. */
static bool s_is_hostname(const char *s)
{
    size_t len = strlen(s), label = 0;
    if (len == 0 || len > 253)
        return false;
    for (const char *p = s; *p; p++) {
        if (*p == '.') {
            if (label == 0)
                return false;
            label = 0;
        } else if (isalnum((unsigned char)*p) || *p == '-') {
            if (++label > 63)
                return false;
        } else
            return false;
    }
    return label > 0;
}

int kb_connection_check(const json_t *info, kb_error_t *err)
{
    static const char *ports[]
        = { "shell_port", "iopub_port", "stdin_port", "control_port", "hb_port" };
    if (!json_is_object(info)) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "connection info is not a JSON object");
        return -1;
    }
    const json_t *value = json_object_get(info, "transport");
    const char *transport = "tcp";
    if (value) {
        transport = json_string_value(value);
        if (!transport || (strcmp(transport, "tcp") != 0 && strcmp(transport, "ipc") != 0)) {
            kb_error_set(err, KB_ERR_BAD_REQUEST, "transport must be \"tcp\" or \"ipc\"");
            return -1;
        }
    }
    bool ipc = strcmp(transport, "ipc") == 0;
    const char *ip = json_string_value(json_object_get(info, "ip"));
    if (!ip || !*ip || strlen(ip) > 400) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "ip must be a non-empty string%s",
                     ipc ? " (the ipc path)" : "");
        return -1;
    }
    if (!ipc) {
        unsigned char addr[sizeof(struct in6_addr)];
        if (inet_pton(AF_INET, ip, addr) != 1 && inet_pton(AF_INET6, ip, addr) != 1
            && !s_is_hostname(ip)) {
            kb_error_set(err, KB_ERR_BAD_REQUEST,
                         "ip \"%.64s\" is neither an IP address nor a host name", ip);
            return -1;
        }
    }
    for (size_t i = 0; i < 5; i++) {
        value = json_object_get(info, ports[i]);
        json_int_t port = json_integer_value(value);
        if (!json_is_integer(value) || port < (ipc ? 0 : 1) || port > (ipc ? INT_MAX : 65535)) {
            kb_error_set(err, KB_ERR_BAD_REQUEST, "%s must be an integer %s", ports[i],
                         ipc ? "of at least 0" : "in 1..65535");
            return -1;
        }
    }
    const char *key = json_string_value(json_object_get(info, "key"));
    if (!key || !*key) {
        kb_error_set(err, KB_ERR_BAD_REQUEST, "key must be a non-empty string");
        return -1;
    }
    value = json_object_get(info, "signature_scheme");
    if (value) {
        const char *scheme = json_string_value(value);
        kb_wire_t *wire = scheme && strncmp(scheme, "hmac-", 5) == 0
                              ? kb_wire_new(scheme, (const unsigned char *)"k", 1, "s", NULL, NULL)
                              : NULL;
        if (!wire) {
            kb_error_set(err, KB_ERR_BAD_REQUEST,
                         "signature_scheme must be hmac-<digest>, as hmac-sha256");
            return -1;
        }
        kb_wire_destroy(&wire);
    }
    return 0;
}

void kb_connection_forget(kb_connection_t *conn)
{
    free(conn->connection_file);
    free(conn->log_file);
    free(conn->ipc_base);
    conn->connection_file = conn->log_file = conn->ipc_base = NULL;
}

void kb_connection_remove(kb_connection_t *conn)
{
    if (conn->connection_file)
        unlink(conn->connection_file);
    if (conn->log_file)
        unlink(conn->log_file);
    if (conn->ipc_base)
        for (int i = 0; i < 5; i++) {
            char path[600];
            snprintf(path, sizeof path, "%s-%d", conn->ipc_base, conn->ipc_ports[i]);
            unlink(path);
        }
    /*  A kernel of another uid had a socket dir of its own: <dir>/k. */
    size_t len = conn->ipc_base ? strlen(conn->ipc_base) : 0;
    if (len > 2 && strcmp(conn->ipc_base + len - 2, "/k") == 0) {
        conn->ipc_base[len - 2] = 0;
        kb_work_dir_remove(conn->ipc_base);
    }
    kb_connection_forget(conn);
}

/*  argv[0] as execvp would find it in the daemon's PATH, or NULL. Caller
    frees. Looked up before the fork: the child only calls execve. */
static char *s_find_program(const char *name)
{
    if (strchr(name, '/'))
        return strdup(name);
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, ":");
        char *candidate = zsys_sprintf("%.*s/%s", (int)n, n ? p : ".", name);
        struct stat st;
        if (candidate && stat(candidate, &st) == 0 && S_ISREG(st.st_mode)
            && access(candidate, X_OK) == 0)
            return candidate;
        free(candidate);
        p += n;
        if (*p == ':')
            p++;
    }
    return NULL;
}

/*  envp with NAME=value in place of any NAME=... (a new array; the
    strings are envp's but for the new one, appended last). */
static char **s_env_with(char *const *envp, char **owned, const char *name, const char *value)
{
    size_t n = 0, len = strlen(name);
    while (envp && envp[n])
        n++;
    char **out = calloc(n + 2, sizeof *out);
    *owned = zsys_sprintf("%s=%s", name, value);
    if (!out || !*owned) {
        free(out);
        free(*owned);
        *owned = NULL;
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(envp[i], name, len) != 0 || envp[i][len] != '=')
            out[k++] = envp[i];
    out[k++] = *owned;
    return out;
}

/*  Where a child's start failed, sent back through the pipe. */
typedef struct {
    int step; /* index into s_child_steps */
    int error;
} kb_child_failure_t;

static const char *const s_child_steps[]
    = { "setsid", "open /dev/null", "dup2",   "setgroups", "setgid",
        "setuid", "chdir",          "execve", "setrlimit" };

/*  Between fork and execve: async-signal-safe calls only. */
static void s_child_fail(int pipe_fd, int step)
{
    kb_child_failure_t failure = { .step = step, .error = errno };
    static const char prefix[] = "kernelbridge: cannot start the kernel: ";
    const char *name = s_child_steps[step];
    ssize_t ignored = write(2, prefix, sizeof prefix - 1);
    ignored = write(2, name, strlen(name));
    ignored = write(2, " failed\n", 8);
    ignored = write(pipe_fd, &failure, sizeof failure);
    (void)ignored;
    _exit(127);
}

static void s_child(const char *program, char **argv, char *const *envp,
                    const kb_kernel_cred_t *cred, const char *cwd, uint64_t data_limit, int log_fd,
                    int pipe_fd)
{
    struct sigaction dfl = { .sa_handler = SIG_DFL };
    for (int sig = 1; sig < NSIG; sig++)
        sigaction(sig, &dfl, NULL); /* SIGKILL, SIGSTOP and glibc's own refuse: fine */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (setsid() < 0)
        s_child_fail(pipe_fd, 0);
    int null = open("/dev/null", O_RDONLY);
    if (null < 0)
        s_child_fail(pipe_fd, 1);
    if ((null != 0 && dup2(null, 0) < 0) || dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0)
        s_child_fail(pipe_fd, 2);
    /*  The pipe is close-on-exec; every other descriptor goes now. */
    if (pipe_fd > 3)
        close_range(3, (unsigned)pipe_fd - 1, 0);
    close_range((unsigned)pipe_fd + 1, ~0U, 0);
    /*  Raw system calls: after fork this is the one thread, and glibc's
        wrappers would try to change the credentials of all of them. */
    if (syscall(SYS_setgroups, (size_t)cred->ngroups, cred->groups) != 0)
        s_child_fail(pipe_fd, 3);
    if (syscall(SYS_setresgid, (gid_t)cred->gid, (gid_t)cred->gid, (gid_t)cred->gid) != 0)
        s_child_fail(pipe_fd, 4);
    if (syscall(SYS_setresuid, (uid_t)cred->uid, (uid_t)cred->uid, (uid_t)cred->uid) != 0)
        s_child_fail(pipe_fd, 5);
    struct rlimit limit = { (rlim_t)data_limit, (rlim_t)data_limit };
    if (data_limit && setrlimit(RLIMIT_DATA, &limit) != 0)
        s_child_fail(pipe_fd, 8);
    if (cwd && *cwd && chdir(cwd) != 0)
        s_child_fail(pipe_fd, 6);
    execve(program, argv, envp);
    s_child_fail(pipe_fd, 7);
}

/*  fork and execve as cred (see kb_launch_spawn). */
static int s_spawn_as(char **argv, const kb_kernel_opts_t *opts, const kb_kernel_cred_t *cred,
                      const char *cwd, const char *home, pid_t *pid, int log_fd, kb_error_t *err)
{
    char *program = s_find_program(argv[0]);
    char *owned[3] = { NULL, NULL, NULL };
    char **env = NULL, **next;
    int fds[2] = { -1, -1 }, rc = -1;
    if (!program) {
        kb_error_set(err, KB_ERR_KERNEL_START_FAILED, "cannot start %s: not found in PATH",
                     argv[0]);
        return -1;
    }
    env = home ? s_env_with(opts->envp, &owned[0], "HOME", home) : NULL;
    if (env && cred->name[0] && (next = s_env_with(env, &owned[1], "USER", cred->name))) {
        free(env);
        env = next;
        if ((next = s_env_with(env, &owned[2], "LOGNAME", cred->name))) {
            free(env);
            env = next;
        }
    }
    if (home && !env) {
        kb_error_set(err, KB_ERR_KERNEL_START_FAILED, "cannot start %s: out of memory", argv[0]);
        goto done;
    }
    if (pipe2(fds, O_CLOEXEC) != 0) {
        kb_error_set(err, KB_ERR_KERNEL_START_FAILED, "cannot start %s: %s", argv[0],
                     strerror(errno));
        goto done;
    }
    *pid = fork();
    if (*pid == 0)
        s_child(program, argv, env ? env : opts->envp, cred, cwd, opts->data_limit, log_fd, fds[1]);
    if (*pid < 0) {
        kb_error_set(err, KB_ERR_KERNEL_START_FAILED, "cannot fork for %s: %s", argv[0],
                     strerror(errno));
        goto done;
    }
    close(fds[1]);
    fds[1] = -1;
    kb_child_failure_t failure;
    ssize_t n;
    while ((n = read(fds[0], &failure, sizeof failure)) < 0 && errno == EINTR)
        ;
    if (n == 0) {
        rc = 0; /* the pipe closed on execve */
        goto done;
    }
    int status;
    while (waitpid(*pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (n == (ssize_t)sizeof failure && failure.step >= 0
        && failure.step < (int)(sizeof s_child_steps / sizeof *s_child_steps))
        kb_error_set(err, KB_ERR_KERNEL_START_FAILED, "cannot start %s as uid %lld: %s%s%s: %s",
                     argv[0], cred->uid, s_child_steps[failure.step], failure.step == 6 ? " " : "",
                     failure.step == 6 ? cwd : "", strerror(failure.error));
    else
        kb_error_set(err, KB_ERR_KERNEL_START_FAILED, "cannot start %s as uid %lld", argv[0],
                     cred->uid);
done:
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    for (int i = 0; i < 3; i++)
        free(owned[i]);
    free(env);
    free(program);
    return rc;
}

int kb_launch_spawn(const kb_kernelspec_t *spec, const char *connection_file,
                    const kb_kernel_opts_t *opts, const kb_kernel_cred_t *cred, const char *cwd,
                    const char *home, pid_t *pid, int log_fd, int64_t *started_ms, kb_error_t *err)
{
    char **argv = kb_kernelspec_build_argv(spec, connection_file, opts->system_python);
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    int rc = -1;
    if (!argv || !argv[0]) {
        kb_error_set(err, KB_ERR_KERNEL_START_FAILED, "kernelspec %s has an empty argv",
                     spec->name);
        kb_strv_free(argv);
        return -1;
    }
    assert(log_fd > 2);
    if (cred) {
        rc = s_spawn_as(argv, opts, cred, cwd, home, pid, log_fd, err);
        if (rc == 0)
            *started_ms = kb_launch_now_ms();
        kb_strv_free(argv);
        return rc;
    }
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, log_fd, 1);
    posix_spawn_file_actions_adddup2(&actions, log_fd, 2);
    if (cwd && *cwd)
        posix_spawn_file_actions_addchdir_np(&actions, cwd);
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
        kb_error_set(err, KB_ERR_KERNEL_START_FAILED, "cannot start %s: %s%s%s%s", argv[0],
                     strerror(e), cwd ? " (cwd " : "", cwd ? cwd : "", cwd ? ")" : "");
        goto done;
    }
    *started_ms = kb_launch_now_ms();
    struct rlimit limit = { (rlim_t)opts->data_limit, (rlim_t)opts->data_limit };
    if (opts->data_limit && prlimit(*pid, RLIMIT_DATA, &limit, NULL) != 0)
        zsys_warning("kernel %s (pid %d): cannot set its RLIMIT_DATA: %s", spec->name, (int)*pid,
                     strerror(errno));
    rc = 0;
done:
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    kb_strv_free(argv);
    return rc;
}

/* ---- the kernel's log ----------------------------------------------------- */

int kb_launch_log_trim_fd(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -1;
    if (st.st_size <= KB_LOG_MAX)
        return 0;
    char *keep = malloc(KB_LOG_KEEP);
    if (!keep) {
        errno = ENOMEM;
        return -1;
    }
    ssize_t n = pread(fd, keep, KB_LOG_KEEP, st.st_size - KB_LOG_KEEP);
    int rc = -1;
    /*  O_APPEND: what the kernel wrote since the read lands before our
        copy rather than under it; a few lines out of order, none lost. */
    if (n >= 0 && ftruncate(fd, 0) == 0 && write(fd, keep, (size_t)n) == n)
        rc = 1;
    free(keep);
    return rc;
}

int kb_launch_log_trim(const char *path)
{
    int fd = open(path, O_RDWR | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = kb_launch_log_trim_fd(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

char *kb_launch_log_tail(const char *path, size_t max_bytes)
{
    int fd = path ? open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    struct stat st;
    size_t len = 0;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0)
        len = (size_t)st.st_size < max_bytes ? (size_t)st.st_size : max_bytes;
    char *out = malloc(len + 1);
    if (out && len > 0) {
        ssize_t n = pread(fd, out, len, st.st_size - (off_t)len);
        len = n > 0 ? (size_t)n : 0;
    }
    if (out)
        out[len] = 0;
    if (fd >= 0)
        close(fd);
    return out;
}

/* ---- processes ------------------------------------------------------------ */

unsigned long long kb_proc_start_time(pid_t pid)
{
    char buf[1024];
    if (pid <= 0 || kb_proc_read(pid, "stat", buf, sizeof buf) < 0)
        return 0;
    /*  "pid (comm) state ppid ...": comm may hold spaces and parens, so
        the fields start after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return 0;
    p += 2;
    if (*p == 'Z' || *p == 'X' || *p == 0)
        return 0;
    /*  state is field 3; starttime is field 22, 19 fields further on. */
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return 0;
        p++;
    }
    char *end;
    errno = 0;
    unsigned long long start = strtoull(p, &end, 10);
    if (errno || end == p || (*end != ' ' && *end != '\n' && *end != 0))
        return 0;
    return start;
}
