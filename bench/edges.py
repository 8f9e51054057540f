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
        [--trickling 20] [--binary PATH] [--results PATH] [--json FILE]

Attackers come from 127.0.0.2-4 (silent) and 127.0.0.5 (trickling), fresh
clients from 127.0.0.1: loopback only, an ephemeral port, a private dir.
"""
import argparse
import os
import socket
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kbbench import cli, machine, procs, sidebyside  # noqa: E402
from kbbench.daemon import Daemon  # noqa: E402
from kbbench.results import Figures, figure  # noqa: E402
from kbbench.stats import pct  # noqa: E402


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


def lockout(d: Daemon, rounds: int, fresh: int, silent: int, trickling: int) -> dict[str, Any]:
    quiet: list[float] = []
    attacked: list[float] = []
    baseline = procs.open_fds(d.pid)
    for _ in range(rounds):
        quiet += [fresh_health(d.port) for _ in range(fresh)]
        attack = Attack(d.port, silent, trickling)
        try:
            attacked += [fresh_health(d.port) for _ in range(fresh)]
        finally:
            attack.close()
        time.sleep(0.5)
    time.sleep(1.0)
    conns = d.ok("GET", "/health").get("connections")  # absent before kb_conns
    return {"rounds": rounds, "fresh": fresh, "silent": silent, "trickling": trickling,
            "quiet_s": quiet, "attacked_s": attacked, "connections": conns,
            "fds_before": baseline, "fds_after": procs.open_fds(d.pid)}


def ms(x):
    return "never" if x is None or x != x or x == float("inf") else "%.2f" % (x * 1e3)


def figures(res: dict[str, Any]) -> Figures:
    attacked = res["attacked_s"]
    return {
        "lockout.attacked_max_s": figure("fresh client under attack, the slowest", max(attacked), "s"),
        "lockout.attacked_p50_s": figure("fresh client under attack, p50", pct(attacked, 50), "s"),
        "lockout.quiet_p50_s": figure("fresh client, quiet, p50", pct(res["quiet_s"], 50), "s"),
        "lockout.fds_added": figure("the daemon's open descriptors after the attack − before",
                                    res["fds_after"] - res["fds_before"], "count"),
    }


def tables(res: dict[str, Any]) -> list[str]:
    lines = ["lockout: %d rounds of %d silent + %d trickling connections, %d fresh clients each"
             % (res["rounds"], res["silent"], res["trickling"], res["fresh"]), "",
             "| fresh GET /health | p50 ms | p99 ms | max ms | n |", "|---|---:|---:|---:|---:|"]
    for name, xs in (("quiet", res["quiet_s"]), ("under attack", res["attacked_s"])):
        lines.append("| %s | %s | %s | %s | %d |" % (name, ms(pct(xs, 50)), ms(pct(xs, 99)),
                                                    ms(max(xs)), len(xs)))
    lines += ["", "daemon's connections afterwards: %s" % res["connections"],
              "daemon's open descriptors: %d before, %d after" % (res["fds_before"], res["fds_after"])]
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--fresh", type=int, default=50)
    ap.add_argument("--silent", type=int, default=300)
    ap.add_argument("--trickling", type=int, default=20)
    cli.add_common(ap, seed=False)
    a = ap.parse_args()
    a.binary = cli.check_binary(a.binary)
    cli.setup("kbg")
    env = machine.environment(a.binary, cli.ROOT)
    res = sidebyside.on_own_daemon(
        a.binary, lambda d: lockout(d, a.rounds, a.fresh, a.silent, a.trickling))
    sidebyside.finish(a, "edges", res, ("quiet_s", "attacked_s"), tables(res), figures(res), env)

if __name__ == "__main__":
    main()
