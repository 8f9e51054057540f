/*  kb_launch_ports.c - the TCP ports a kernel reached over tcp listens
    on: from the daemon's range (--kernel-ports), handed out in turn, or
    from the system's ephemeral ports; and whether one was taken.
*/
#include "kernel/kb_launch.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

/*  A TCP socket bound to 127.0.0.1:port (0: one the system chooses), with
    SO_REUSEADDR as ZeroMQ binds (a port whose last connection is in
    TIME_WAIT is free to it); the port in *port. The fd, or -1. */
static int s_bind_loopback(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int on = 1;
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons((uint16_t)*port) };
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if ((*port && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0)
        || bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0
        || getsockname(fd, (struct sockaddr *)&addr, &len) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    *port = ntohs(addr.sin_port);
    return fd;
}

/*  Where the next kernel's ports are looked for in opts' range: every
    engine's launches take their turn, so that ports handed out a moment
    ago (their kernel not bound yet) are not handed out again before the
    range has gone round. */
static _Atomic unsigned long s_port_turn;

int kb_launch_free_ports(const kb_kernel_opts_t *opts, int ports[5])
{
    int fds[5];
    int found = 0, rc = -1;
    unsigned long span = opts->port_min ? opts->port_max - opts->port_min + 1 : 0;
    for (unsigned long tried = 0; found < 5 && (!span || tried < span); tried++) {
        ports[found] = span ? (int)(opts->port_min + s_port_turn++ % span) : 0;
        fds[found] = s_bind_loopback(&ports[found]);
        if (fds[found] >= 0)
            found++;
        else if (!span || errno != EADDRINUSE)
            goto done;
    }
    if (found == 5)
        rc = 0;
    else
        errno = EADDRINUSE;
done:
    for (int i = 0; i < found; i++)
        close(fds[i]);
    return rc;
}

bool kb_connection_port_taken(const json_t *info, const char *why)
{
    const char *transport = json_string_value(json_object_get(info, "transport"));
    return transport && strcmp(transport, "tcp") == 0 && why
           && strstr(why, "Address already in use");
}
