/*  kb_launch.h - the parts of starting a kernel that come before its
    sockets: the connection file and the process. Private to src/kernel.
*/
#ifndef KB_LAUNCH_H_INCLUDED
#define KB_LAUNCH_H_INCLUDED

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "kernel/kb_kernelspec.h"
#include "wire/kb_wire.h"

/*  How to launch a kernel. */
typedef struct {
    const char *runtime_dir;   /* private 0700 dir for the connection file */
    const char *ipc_dir;       /* private 0700 dir for ipc sockets: keep it short, since
                                  xeus-based kernels refuse endpoints over 31 characters */
    unsigned long serial;      /* unique per kernel of this service; names its files */
    const char *transport;     /* "ipc" or "tcp" */
    const char *cwd;           /* NULL: inherit */
    char *const *envp;         /* full environment, NULL-terminated; borrowed */
    const char *system_python; /* for argv[0] python/python3 */
    double start_timeout;      /* seconds */
} kb_kernel_opts_t;

/*  "SIGINT", "SIGKILL", ...; "SIG<n>" style names for others. Static. */
const char *kb_signal_name(int sig);

/*  What the daemon knows of a kernel's connection. */
typedef struct {
    char *connection_file; /* its path */
    char *ipc_base;        /* ipc: the sockets are <ipc_base>-<n>; NULL for tcp */
    kb_wire_t *wire;       /* the codec, keyed with the file's key */
} kb_connection_t;

/*  Write a fresh connection file for spec (a new key of 32 random bytes;
    free ports on 127.0.0.1 held together, or short ipc paths) and fill
    conn. Returns the file's JSON (caller owns), or NULL with err; conn's
    fields set so far are freed by kb_connection_remove either way. */
json_t *kb_connection_write(kb_connection_t *conn, const kb_kernelspec_t *spec,
                            const kb_kernel_opts_t *opts, char *err, size_t errlen);

/*  Remove the connection file and ipc sockets, free the paths (not the
    wire). Safe on an empty conn. */
void kb_connection_remove(kb_connection_t *conn);

/*  posix_spawn the kernel: a new session and process group, signal mask
    and dispositions reset, stdin /dev/null, stdout and stderr into a
    non-blocking pipe whose read end goes to *output_fd (caller owns),
    every other descriptor closed. 0, or -1 with err. */
int kb_launch_spawn(const kb_kernelspec_t *spec, const char *connection_file,
                    const kb_kernel_opts_t *opts, pid_t *pid, int *output_fd, int64_t *started_ms,
                    char *err, size_t errlen);

/*  Monotonic milliseconds. */
int64_t kb_launch_now_ms(void);

#endif
