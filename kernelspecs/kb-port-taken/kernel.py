"""An ipykernel over tcp whose shell port is taken before it binds it, as
when another process's connection is given that port as its source port
between the daemon's choice and the kernel's start. The first
PORT_TAKEN_TIMES starts (default 1), counted by the lines of the file
PORT_TAKEN_FILE (both from the environment), listen on their shell port
themselves, so that ipykernel's own bind fails for real ("Address already
in use") and the process exits; the starts after them run as ipykernel.
For kernelbridge's reliability tests."""

import json
import os
import socket
import sys

from ipykernel.kernelapp import IPKernelApp


def starts_so_far(path):
    with open(path, "a+") as f:
        f.seek(0)
        count = len(f.readlines())
        f.write(f"{os.getpid()}\n")
    return count


if __name__ == "__main__":
    path = os.environ.get("PORT_TAKEN_FILE")
    if path and starts_so_far(path) < int(os.environ.get("PORT_TAKEN_TIMES", "1")):
        with open(sys.argv[sys.argv.index("-f") + 1]) as f:
            info = json.load(f)
        taken = socket.socket()
        taken.bind((info["ip"], info["shell_port"]))
        taken.listen()
    IPKernelApp.launch_instance()
