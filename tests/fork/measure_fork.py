"""Fork-to-first-reply latency and a fresh fork's private memory (USS), on
a real kernel holding N MiB of NumPy data. Not a test; run by hand:

    /usr/bin/python3 tests/fork/measure_fork.py 10 500

Latency runs from sending the fork request to the first execute_reply from
the fork (connecting included; the request is sent as soon as the channels
are started, without jupyter_client's wait_for_ready, which alone spends
200 ms draining IOPub); USS is Private_Clean + Private_Dirty of the
fork's smaps_rollup before its first run."""

import statistics
import sys
import time

from jupyter_client import BlockingKernelClient

from forklib import ask_fork, execute, new_connection, reap, start_parent, subreaper

ROUNDS = 11


def uss_kib(pid):
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                fields[parts[0].rstrip(":")] = int(parts[1])
    return fields["Private_Clean"] + fields["Private_Dirty"]


def one_fork(kc):
    info = new_connection()
    started = time.perf_counter()
    content = ask_fork(kc, f"fork({info!r})")
    pid = content["user_expressions"]["fork"]["data"]["application/json"]["pid"]
    forked = time.perf_counter()
    uss = uss_kib(pid)
    fkc = BlockingKernelClient()
    fkc.load_connection_info(info)
    fkc.start_channels()
    fkc.execute("1")
    reply = fkc.get_shell_msg(timeout=30)["content"]
    done = time.perf_counter()
    assert reply["status"] == "ok"
    fkc.stop_channels()
    reap(pid)
    return (forked - started) * 1000, (done - started) * 1000, uss / 1024


def measure(mib):
    km, kc = start_parent()
    try:
        execute(kc, f"import numpy as np\na = np.ones({mib} * 2**20 // 8)")
        rows = [one_fork(kc) for _ in range(ROUNDS)]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    fork_ms, first_ms, uss = (statistics.median(col) for col in zip(*rows))
    print(f"{mib} MiB: fork reply p50 {fork_ms:.1f} ms, fork-to-first-reply p50 {first_ms:.1f} ms, "
          f"USS p50 {uss:.1f} MiB ({ROUNDS} forks)")


if __name__ == "__main__":
    subreaper(True)
    for size in sys.argv[1:] or ["10", "500"]:
        measure(int(size))
