#!/usr/bin/python3
"""The cost and the promise of the state dir (SPEC "Durability"):

  persistence  `1+1` through POST /run on three daemons side by side, in
               shuffled interleaved rounds: --ephemeral (no state.db), a
               state dir on tmpfs (/dev/shm) and one on disk (/var/tmp);
               p50/p90 and what persistence adds to the p50.
  adopt        N contexts (each with a variable) on a daemon that is then
               SIGKILLed; a new daemon on the same state dir: seconds from
               its spawn until it listens (adoption is done by then) and
               until every context answered a run reading its variable.
  cycles       C crash-and-restart cycles (start, run, SIGKILL): kernels
               left that no context owns (orphans) and finished records
               that did not come back (lost).

    /usr/bin/python3 bench/durability.py [--rounds N] [--adopt 1,10,50]
        [--cycles C] [--sections persistence,adopt,cycles] [--binary PATH]

Everything listens on 127.0.0.1 (ephemeral ports) and lives in private
temporary dirs; every daemon and kernel started is killed at the end.
"""
import argparse
import http.client
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kbbench.stats import pct  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


class Daemon:
    def __init__(self, binary, state_dir, *args):
        self.dir = tempfile.mkdtemp(prefix="kbdur-", dir="/tmp")
        self.port_file = os.path.join(self.dir, "port")
        env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
        self.log = open(os.path.join(self.dir, "log"), "wb")
        where = ["--state-dir", state_dir] if state_dir else ["--ephemeral"]
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--port-file", self.port_file,
             "--pool", "python=0", *where, *args],
            stdout=self.log, stderr=self.log, env=env, cwd=self.dir)
        deadline = time.monotonic() + 60
        while not os.path.exists(self.port_file):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("daemon did not start: " + open(self.log.name).read()[-2000:])
            time.sleep(0.002)
        self.listening = time.perf_counter() - self.started
        self.conn = http.client.HTTPConnection("127.0.0.1", int(open(self.port_file).read()),
                                               timeout=120)

    def call(self, method, path, body=None):
        self.conn.request(method, path, body=json.dumps(body) if body is not None else None,
                          headers={"Content-Type": "application/json"})
        response = self.conn.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else None

    def ok(self, method, path, body=None):
        status, data = self.call(method, path, body)
        if status not in (200, 201):
            raise RuntimeError("%s %s: %s %s" % (method, path, status, data))
        return data

    def crash(self):
        self.proc.kill()
        self.proc.wait(30)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def cpu_seconds(pid):
    """utime + stime of every thread of pid, in seconds (clock ticks)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def kernel_pids(state_dir):
    inside = (state_dir + "/kernels/").encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    argv = f.read().split(b"\0")
                with open("/proc/%s/stat" % entry) as f:
                    zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
            except OSError:
                continue
            if not zombie and any(a.startswith(inside) for a in argv):
                found.append(int(entry))
    return found


def kill_kernels(state_dir):
    for pid in kernel_pids(state_dir):
        for target in (-pid, pid):
            try:
                os.kill(target, signal.SIGKILL)
            except OSError:
                pass


def private_dir(base):
    return tempfile.mkdtemp(prefix="kbdur-", dir=base)


def persistence(binary, rounds):
    places = {"ephemeral": None, "tmpfs (/dev/shm)": private_dir("/dev/shm"),
              "disk (/var/tmp)": private_dir("/var/tmp")}
    daemons, samples, cids = {}, {name: [] for name in places}, {}
    try:
        for name, base in places.items():
            daemons[name] = Daemon(binary, base and os.path.join(base, "state"))
            cids[name] = daemons[name].ok("POST", "/contexts", {"language": "python"})["context_id"]
        body = {name: {"code": "1+1", "context_id": cids[name]} for name in places}
        for warm in range(20):
            for name, d in daemons.items():
                d.ok("POST", "/run", body[name])
        cpu0 = {name: cpu_seconds(d.proc.pid) for name, d in daemons.items()}
        for _ in range(rounds):
            order = list(places)
            random.shuffle(order)
            for name in order:
                t0 = time.perf_counter()
                r = daemons[name].ok("POST", "/run", body[name])
                samples[name].append((time.perf_counter() - t0) * 1e6)
                assert r["results"][0]["text"] == "2", r
        cpu = {name: (cpu_seconds(d.proc.pid) - cpu0[name]) / rounds * 1e6
               for name, d in daemons.items()}
        writes = {name: d.ok("GET", "/health")["state"] for name, d in daemons.items()}
    finally:
        for name, d in daemons.items():
            d.close()
        for base in places.values():
            if base:
                kill_kernels(os.path.join(base, "state"))
                shutil.rmtree(base, ignore_errors=True)
    base = pct(samples["ephemeral"], 50)
    print("\n### persistence: `1+1` through POST /run, %d interleaved rounds\n" % rounds)
    print("| state dir | p50 (µs) | p90 (µs) | p50 added (µs) | paired difference p50 (µs) "
          "| daemon CPU per run (µs, all threads) | batches written |")
    print("|---|---|---|---|---|---|---|")
    for name in places:
        p50 = pct(samples[name], 50)
        paired = pct([a - b for a, b in zip(samples[name], samples["ephemeral"])], 50)
        print("| %s | %.0f | %.0f | %+.0f | %+.0f | %.0f | %s |" % (
            name, p50, pct(samples[name], 90), p50 - base, paired, cpu[name],
            writes[name].get("batches", "-")))


def adopt(binary, counts):
    print("\n### re-adoption after SIGKILL (python3 kernels)\n")
    print("| contexts | new daemon listening (s) | every context answered (s) | adopted |")
    print("|---|---|---|---|")
    for n in counts:
        base = private_dir("/var/tmp")
        state = os.path.join(base, "state")
        try:
            d = Daemon(binary, state, "--max-contexts", str(n + 4))
            cids = []
            for i in range(n):
                cid = d.ok("POST", "/contexts", {"language": "python"})["context_id"]
                d.ok("POST", "/run", {"code": "v = %d" % i, "context_id": cid})
                cids.append(cid)
            d.crash()
            d = Daemon(binary, state, "--max-contexts", str(n + 4))
            for i, cid in enumerate(cids):
                r = d.ok("POST", "/run", {"code": "print(v)", "context_id": cid})
                assert r["logs"]["stdout"] == "%d\n" % i, r
            answered = time.perf_counter() - d.started
            adopted = len(d.ok("GET", "/contexts")["contexts"])
            print("| %d | %.3f | %.3f | %d/%d |" % (n, d.listening, answered, adopted, n))
            d.close()
        finally:
            kill_kernels(state)
            shutil.rmtree(base, ignore_errors=True)


def cycles(binary, count):
    base = private_dir("/var/tmp")
    state = os.path.join(base, "state")
    records, orphans_seen, cid = [], 0, None
    t0 = time.perf_counter()
    try:
        for cycle in range(count):
            d = Daemon(binary, state)
            if cid is None:
                cid = d.ok("POST", "/contexts", {"language": "python"})["context_id"]
            r = d.ok("POST", "/run", {"code": "print(%d)" % cycle, "context_id": cid})
            records.append(r["process"]["process_id"])
            d.crash()
            orphans_seen = max(orphans_seen, len(kernel_pids(state)) - 1)
        d = Daemon(binary, state)
        kept = {p["process_id"] for p in d.ok("GET", "/processes")["processes"]}
        alive = len(d.ok("GET", "/contexts")["contexts"])
        d.close()
        left = len(kernel_pids(state))
    finally:
        kill_kernels(state)
        shutil.rmtree(base, ignore_errors=True)
    lost = len(set(records) - kept)
    print("\n### %d crash-and-restart cycles (%.0f s)\n" % (count, time.perf_counter() - t0))
    print("| orphaned kernels (most at once) | lost finished records | context alive at the end "
          "| kernels left after a plain stop |")
    print("|---|---|---|---|")
    print("| %d | %d of %d | %s | %d |" % (orphans_seen, lost, len(records), alive == 1, left))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--adopt", default="1,10,50")
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--sections", default="persistence,adopt,cycles")
    parser.add_argument("--binary", default=str(ROOT / "build" / "kernelbridge"))
    args = parser.parse_args()
    sections = args.sections.split(",")
    if "persistence" in sections:
        persistence(args.binary, args.rounds)
    if "adopt" in sections:
        adopt(args.binary, [int(n) for n in args.adopt.split(",")])
    if "cycles" in sections:
        cycles(args.binary, args.cycles)


if __name__ == "__main__":
    main()
