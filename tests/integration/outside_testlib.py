"""An ipykernel the test starts itself, outside the daemon, from a
connection file it wrote (attached by connection_info), and the TCP ports
such a kernel listens on. Shared by the integration suites and tests/fork."""

import json
import os
import random
import socket
import subprocess

PORT_NAMES = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")


def free_tcp_ports(n):
    """n TCP ports on 127.0.0.1 free now, chosen under the system's
    ephemeral range (net.ipv4.ip_local_port_range). A port found by binding
    port 0 and closing is in that range, and any loopback connection made
    before the kernel binds it (the suites run beside this one make many)
    can take it as its source port; below the range only an explicit bind
    can."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    ports = []
    for port in random.sample(range(max(1024, low - 8192), low), 64):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == n:
            return ports
    raise RuntimeError(f"no {n} free TCP ports under {low}")


def tcp_connection(kernel_name=None):
    """A new connection's info on 127.0.0.1: five free ports, a new key."""
    info = {"transport": "tcp", "ip": "127.0.0.1", "key": os.urandom(16).hex(),
            "signature_scheme": "hmac-sha256"}
    if kernel_name:
        info["kernel_name"] = kernel_name
    info.update(zip(PORT_NAMES, free_tcp_ports(len(PORT_NAMES))))
    return info


def start_outside_kernel(path, cwd=None):
    """An ipykernel in a session of its own on a new TCP connection written
    to `path`: (its info, its Popen). The caller kills its group."""
    info = tcp_connection("python3")
    path.write_text(json.dumps(info))
    proc = subprocess.Popen(["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, cwd=cwd)
    return info, proc
