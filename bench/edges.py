#!/usr/bin/python3
"""A fresh client while hostile ones hold connections (SPEC section 6):

  lockout   R rounds, interleaved: a round opens S silent connections and
            T trickling ones (a request line, then a byte every 200 ms),
            then times K fresh clients, each a new connection and one
            GET /health; a quiet round times K fresh clients with nothing
            else open. The target: every fresh client under attack answered
            within 2 s. Also how many attacking connections the daemon
            closed (evicted, header deadline) and its open descriptors
            after the attack (none left behind).

    /usr/bin/python3 bench/edges.py [--rounds 10] [--fresh 50] [--silent 300]
        [--trickling 20] [--binary PATH]

Attackers come from 127.0.0.2-4 (silent) and 127.0.0.5 (trickling), fresh
clients from 127.0.0.1: loopback only, an ephemeral port, a private dir.
"""
import argparse
import os
import pathlib
import socket
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from durability import Daemon  # noqa: E402
from kbbench.stats import pct  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
TARGET_S = 2.0


def connect(port, source):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(10)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def fresh_health(port):
    """Seconds until a new connection's GET /health is answered whole;
    inf when it is not answered (refused, closed)."""
    started = time.perf_counter()
    try:
        s = connect(port, "127.0.0.1")
        try:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: kb\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        finally:
            s.close()
    except OSError:
        return float("inf")
    return time.perf_counter() - started if data.startswith(b"HTTP/1.1 200") else float("inf")


class Attack:
    """Silent and trickling connections held open until close()."""

    def __init__(self, port, silent, trickling):
        self.socks = [connect(port, "127.0.0.%d" % (2 + i % 3)) for i in range(silent)]
        self.trickling = []
        for _ in range(trickling):
            s = connect(port, "127.0.0.5")
            s.sendall(b"GET /health HTTP/1.1\r\n")
            self.trickling.append(s)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._trickle)
        self.thread.start()

    def _trickle(self):
        while not self.stop.is_set():
            for s in self.trickling:
                try:
                    s.sendall(b"X")
                except OSError:
                    pass
            self.stop.wait(0.2)

    def close(self):
        self.stop.set()
        self.thread.join()
        for s in self.socks + self.trickling:
            s.close()


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def lockout(d, rounds, fresh, silent, trickling):
    port = int(open(d.port_file).read())
    quiet, attacked = [], []
    baseline = fds(d.proc.pid)
    for _ in range(rounds):
        quiet += [fresh_health(port) for _ in range(fresh)]
        attack = Attack(port, silent, trickling)
        try:
            attacked += [fresh_health(port) for _ in range(fresh)]
        finally:
            attack.close()
        time.sleep(0.5)
    time.sleep(1.0)
    conns = d.ok("GET", "/health").get("connections")  # absent before kb_conns
    return quiet, attacked, conns, baseline, fds(d.proc.pid)


def ms(x):
    return "never" if x != x or x == float("inf") else "%.2f" % (x * 1e3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--fresh", type=int, default=50)
    ap.add_argument("--silent", type=int, default=300)
    ap.add_argument("--trickling", type=int, default=20)
    ap.add_argument("--binary", default=str(ROOT / "build" / "kernelbridge"))
    a = ap.parse_args()
    d = Daemon(a.binary, None)
    try:
        quiet, attacked, conns, before, after = lockout(d, a.rounds, a.fresh, a.silent,
                                                        a.trickling)
    finally:
        d.close()
    within = sum(1 for x in attacked if x < TARGET_S)
    print("lockout: %d rounds of %d silent + %d trickling connections, %d fresh clients each"
          % (a.rounds, a.silent, a.trickling, a.fresh))
    print("%-22s %8s %8s %8s %8s" % ("fresh GET /health", "p50 ms", "p99 ms", "max ms", "n"))
    for name, xs in (("quiet", quiet), ("under attack", attacked)):
        print("%-22s %8s %8s %8s %8d" % (name, ms(pct(xs, 50)), ms(pct(xs, 99)), ms(max(xs)),
                                         len(xs)))
    print("answered within %.0f s under attack: %d/%d (target: all) -> %s"
          % (TARGET_S, within, len(attacked), "PASS" if within == len(attacked) else "FAIL"))
    print("daemon's connections afterwards: %s" % conns)
    print("daemon's open descriptors: %d before, %d after" % (before, after))


if __name__ == "__main__":
    main()
