#!/usr/bin/python3
"""Cold versus warm: POST /contexts and an isolated POST /run of `1+1`, on a
daemon without a pool (--pool python=0) and one with a warm pool
(--pool python=1), side by side in interleaved rounds. Each warm operation
starts once the pool has refilled, so it measures a take from the pool.

    /usr/bin/python3 bench/pool.py [--rounds N] [--binary PATH]
"""
import argparse
import http.client
import json
import os
import pathlib
import random
import signal
import statistics
import subprocess
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


class Daemon:
    def __init__(self, binary, pool):
        self.dir = tempfile.mkdtemp(prefix="kbpool-", dir="/tmp")
        port_file = os.path.join(self.dir, "port")
        env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
        self.log = open(os.path.join(self.dir, "log"), "wb")
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--port-file", port_file,
             "--state-dir", os.path.join(self.dir, "state"), "--pool", pool],
            stdout=self.log, stderr=self.log, env=env, cwd=self.dir)
        deadline = time.monotonic() + 30
        while not os.path.exists(port_file):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("daemon did not start")
            time.sleep(0.02)
        self.conn = http.client.HTTPConnection("127.0.0.1", int(open(port_file).read()), timeout=120)

    def call(self, method, path, body=None):
        self.conn.request(method, path, body=json.dumps(body) if body is not None else None,
                          headers={"Content-Type": "application/json"})
        response = self.conn.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else None

    def wait_pool(self, ready):
        deadline = time.monotonic() + 60
        while self.call("GET", "/health")[1]["pool"].get("python", {}).get("ready", 0) < ready:
            if time.monotonic() > deadline:
                raise RuntimeError("pool did not refill")
            time.sleep(0.02)

    def close(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        self.log.close()
        subprocess.run(["rm", "-rf", self.dir], check=False)


def timed(fn):
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--binary", default=str(ROOT / "build" / "kernelbridge"))
    args = parser.parse_args()
    daemons = {"cold": Daemon(args.binary, "python=0"), "warm": Daemon(args.binary, "python=1")}
    samples = {(mode, op): [] for mode in daemons for op in ("create", "isolated")}
    try:
        daemons["warm"].wait_pool(1)
        for _ in range(args.rounds):
            order = [(mode, op) for mode in daemons for op in ("create", "isolated")]
            random.shuffle(order)
            for mode, op in order:
                d = daemons[mode]
                if mode == "warm":
                    d.wait_pool(1)
                if op == "create":
                    created = {}
                    ms = timed(lambda: created.update(
                        d.call("POST", "/contexts", {"language": "python"})[1]))
                    d.call("DELETE", "/contexts/" + created["context_id"])
                else:
                    result = {}
                    ms = timed(lambda: result.update(
                        d.call("POST", "/run", {"code": "1+1", "isolated": True})[1]))
                    assert result["results"][0]["text"] == "2", result
                samples[(mode, op)].append(ms)
    finally:
        for d in daemons.values():
            d.close()

    def p(values, q):
        values = sorted(values)
        return values[min(len(values) - 1, int(q * len(values)))]

    print("| operation | cold p50 (ms) | cold p90 | warm p50 (ms) | warm p90 | cold / warm (p50) |")
    print("|---|---|---|---|---|---|")
    for op, label in (("create", "POST /contexts"), ("isolated", "isolated POST /run `1+1`")):
        cold, warm = samples[("cold", op)], samples[("warm", op)]
        print("| %s | %.1f | %.1f | %.1f | %.1f | %.0fx |" % (
            label, statistics.median(cold), p(cold, 0.9), statistics.median(warm), p(warm, 0.9),
            statistics.median(cold) / statistics.median(warm)))


if __name__ == "__main__":
    main()
