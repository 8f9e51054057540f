/*  kb_launch.h - the parts of starting a kernel that come before its
    sockets: the connection file, the log of its own stdout/stderr and the
    process; and what re-adopting a running kernel needs to check first (a
    connection given by someone else, the identity of a pid). Private to
    src/kernel.
*/
#ifndef KB_LAUNCH_H_INCLUDED
#define KB_LAUNCH_H_INCLUDED

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kernel/kb_kernel_user.h"
#include "kernel/kb_kernelspec.h"
#include "wire/kb_wire.h"

/*  How to launch a kernel. */
typedef struct {
    const char *runtime_dir;   /* private 0700 dir for the connection file */
    const char *ipc_dir;       /* private 0700 dir for ipc sockets: keep it short, since
                                  xeus-based kernels refuse endpoints over 31 characters */
    unsigned long serial;      /* unique per kernel of this service; for logs only: files
                                  are named from random bytes (a previous daemon's
                                  kernels may still own files named by serial) */
    const char *transport;     /* "ipc" or "tcp" */
    const char *cwd;           /* NULL: inherit */
    char *const *envp;         /* full environment, NULL-terminated; borrowed */
    const char *system_python; /* for argv[0] python/python3 */
    double start_timeout;      /* seconds */
    kb_kernel_users_t *users;  /* who the kernel runs as; NULL: the daemon's own user. Else
                                  a user, or a uid of its own from a range, taken at launch
                                  and given back when the kernel is destroyed (borrowed: it
                                  outlives the kernel). A NULL pointer, not a uid of -1, is
                                  the default, so that zeroed options keep meaning it */
    const char *work_root;     /* with users: the kernel's private dir is made here
                                  (<work_root>/k-<hex>): its HOME, and its cwd when cwd is
                                  NULL; the dir must be traversable (0711) */
    uint64_t data_limit;       /* RLIMIT_DATA (soft and hard) set in the launch, so that
                                  the kernel and all it starts inherit it; 0: none */
    uint64_t max_message;      /* largest message frame taken from the kernel (ZMQ_MAXMSGSIZE:
                                  a larger one is refused as it arrives, never held whole,
                                  and the connection is made again); 0: no limit */
    unsigned port_min;         /* tcp: the five ports come from port_min..port_max, in turn;
                                  0: the system's ephemeral ports */
    unsigned port_max;
} kb_kernel_opts_t;

/*  "SIGINT", "SIGKILL", ...; "SIG<n>" style names for others. Static. */
const char *kb_signal_name(int sig);

/*  What the daemon knows of a kernel's connection. */
typedef struct {
    char *connection_file; /* its path, or NULL */
    char *log_file;        /* the kernel's stdout+stderr log, or NULL */
    char *ipc_base;        /* ipc: the sockets are <ipc_base>-<port>; NULL for tcp */
    int ipc_ports[5];      /* ipc: the five "ports" (1..5 for ours) */
    kb_wire_t *wire;       /* the codec, keyed with the file's key */
} kb_connection_t;

/*  A kernel's log grows to KB_LOG_MAX bytes, then kb_launch_log_trim cuts
    it to its last KB_LOG_KEEP bytes. */
#define KB_LOG_MAX (1 << 20)
#define KB_LOG_KEEP (64 << 10)

/*  Write a fresh connection file for spec (a new key of 32 random bytes;
    free ports on 127.0.0.1 held together, or short ipc paths) and create
    an empty log beside it, both 0600 and named from 8 random bytes
    (<runtime_dir>/k-<16 hex>.json and .log, made with O_EXCL: a file
    left by an earlier daemon is never reused), and fill conn. Returns
    the file's JSON (caller owns), or NULL with err; conn's fields set so
    far are freed by kb_connection_remove either way. With cred (NULL:
    the daemon's own user) the connection file belongs to cred's uid, and
    ipc sockets go in a dir of their own (<ipc_dir>/<6 hex>/k-<n>, 0700,
    owned by that uid), removed with them. The log stays the daemon's:
    the kernel writes it through the descriptors it is given. */
json_t *kb_connection_write(kb_connection_t *conn, const kb_kernelspec_t *spec,
                            const kb_kernel_opts_t *opts, const kb_kernel_cred_t *cred,
                            kb_error_t *err);

/*  Create path for writing, 0600, O_EXCL|O_NOFOLLOW: never a file that
    was there (left by an earlier daemon) nor through a link. The
    descriptor (O_CLOEXEC), or -1 with errno (EEXIST). Caller closes. */
int kb_launch_create_excl(const char *path);

/*  Fill conn->wire from a connection-file JSON made by someone else (an
    earlier daemon): its key and signature_scheme, a fresh session. info
    must have passed kb_connection_check. 0, or -1 with err. */
int kb_connection_key(kb_connection_t *conn, const json_t *info, kb_error_t *err);

/*  Check a connection-file JSON given by a user or a stored record:
    transport "tcp" or "ipc" (absent: tcp); ip a string, for tcp an IPv4
    or IPv6 literal or a host name (the daemon connects where it says:
    the tests and kernelbridge itself use 127.0.0.1); shell_port,
    iopub_port, stdin_port, control_port and hb_port integers, 1..65535
    for tcp, any non-negative int for ipc; key a non-empty string;
    signature_scheme an "hmac-<digest>" the codec knows (absent:
    hmac-sha256). 0, or -1 with a reason that names the field. info
    borrowed. */
int kb_connection_check(const json_t *info, kb_error_t *err);

/*  Five free TCP ports on 127.0.0.1 for a kernel, held open together so
    that they differ: from opts' range (port_min..port_max) when it has
    one, else from the system's ephemeral ports (bind to port 0). 0, or -1
    with errno (EADDRINUSE: not five free in the range). */
int kb_launch_free_ports(const kb_kernel_opts_t *opts, int ports[5]);

/*  Whether a kernel, fork or restore on connection info failed because a
    tcp port chosen for it was taken before it bound it (why, its output's
    end or its reply, says "Address already in use"): another socket on
    the machine was given the port meanwhile (docs/concepts/kernels.md),
    so new ports may well do. */
bool kb_connection_port_taken(const json_t *info, const char *why);

/*  Remove the connection file, the log and the ipc sockets, free the paths
    (not the wire). Safe on an empty conn. */
void kb_connection_remove(kb_connection_t *conn);

/*  Free the paths and remove nothing (a kernel let go runs on). */
void kb_connection_forget(kb_connection_t *conn);

/*  Start the kernel: a new session and process group, signal mask and
    dispositions reset, stdin /dev/null, stdout and stderr onto log_fd
    (borrowed: the caller opened it, O_WRONLY|O_APPEND, and closes it),
    every other descriptor closed, in cwd (NULL: the daemon's). A log, not
    a pipe: a pipe's reader dies with the daemon and the kernel would then
    get EPIPE. cred NULL: posix_spawnp as the daemon's user. Else fork and
    execve (posix_spawn cannot change credentials): the groups, gid and
    uid of cred, then HOME=home (when given; USER and LOGNAME too for a
    named user) in the environment; argv[0] is looked up in PATH before
    the fork, so that the child calls only async-signal-safe functions; a
    step that fails is written to the log, the child exits 127 and the
    reason comes back here through a close-on-exec pipe. opts->data_limit
    is set by the child on itself before execve when it changes uid (a
    process may lower its own limits; another uid's it may not without
    CAP_SYS_RESOURCE), and with prlimit(2) right after posix_spawnp
    otherwise (a failure is logged). 0, or -1 with err. */
int kb_launch_spawn(const kb_kernelspec_t *spec, const char *connection_file,
                    const kb_kernel_opts_t *opts, const kb_kernel_cred_t *cred, const char *cwd,
                    const char *home, pid_t *pid, int log_fd, int64_t *started_ms, kb_error_t *err);

/*  When the log at path is over KB_LOG_MAX bytes, keep its last KB_LOG_KEEP
    (read them, truncate, write them back; the kernel's O_APPEND writes go
    on at the new end). 1 when it was cut, 0 when it was small enough, -1
    with errno. */
int kb_launch_log_trim(const char *path);

/*  The same on a descriptor open O_RDWR|O_APPEND on the log (one fstat
    when there is nothing to cut). */
int kb_launch_log_trim_fd(int fd);

/*  The last max_bytes of the log at path, NUL-terminated; "" when it
    cannot be read. NULL only without memory. Caller frees. */
char *kb_launch_log_tail(const char *path, size_t max_bytes);

/*  Field 22 of /proc/<pid>/stat: the process's start time in clock ticks
    since boot, which with the pid names one process for good (a pid is
    reused, a pid and its start time are not). 0 when there is no such
    process, or it is a zombie (state Z or X): a dead kernel that no one
    reaps, as in a container whose pid 1 does not, counts as gone. */
unsigned long long kb_proc_start_time(pid_t pid);

/*  Monotonic milliseconds. */
int64_t kb_launch_now_ms(void);

#endif
