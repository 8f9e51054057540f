"""bench/contexts.py, the harness behind the contexts axis of
docs/PERFORMANCE.md, runs on this machine: two small steps of idle contexts
on both kernels, a few checked rounds (every `1+1` answer is checked by the
script), every figure and every target's verdict present, no kernel left
behind. No timing is asserted: figures come from full runs, not tests."""

import json
import math
import os
import subprocess

from conftest import BINARY, REPO

KERNELS = ("xpython", "python3")
COUNTS = (1, 3)


def processes_naming(path):
    """Pids of the processes whose command line names something under path."""
    path = os.fsencode(path)
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if path in f.read():
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def positive(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def run_bench(script, args, out, timeout):
    """bench/<script> with args on the build under test, its details into
    out: (the finished process, the details). Asserts it exited 0."""
    done = subprocess.run(
        ["/usr/bin/python3", str(REPO / "bench" / script), *args, "--binary", BINARY,
         "--json", str(out)],
        capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done, json.loads(out.read_text())


def test_the_contexts_bench_runs_and_reports_every_figure(tmp_path):
    done, figures = run_bench(
        "contexts.py", ["--counts", "1,3", "-n", "5", "--warmup", "1", "--idle-window", "1",
                        "--settle", "0", "--kernels", ",".join(KERNELS)],
        tmp_path / "contexts.json", 300)
    assert set(figures["kernels"]) == set(KERNELS)
    for kernel, entry in figures["kernels"].items():
        steps = entry["steps"]
        assert [s["idle_contexts"] for s in steps] == list(COUNTS), kernel
        for s in steps:
            where = (kernel, s["idle_contexts"])
            # the busy context and the idle ones, as the daemon counts them
            assert s["contexts_reported"] == s["idle_contexts"] + 1, where
            for name in ("run", "floor", "health"):
                lat = s[name]
                assert lat["n"] == 5, (where, name)
                assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"], (where, name, lat)
            assert math.isfinite(s["overhead_p50_s"]), where
            assert math.isfinite(s["paired_overhead_p50_s"]), where
            for batch in ("cpu_per_run", "cpu_per_health"):
                b = s[batch]
                assert b["requests"] == 5, (where, batch)
                # schedstat counts nanoseconds; /proc/PID/stat 10 ms ticks, which
                # five requests may not reach
                assert positive(b["cpu_sched_s"]) and b["cpu_s"] >= 0, (where, batch, b)
                assert positive(b["wall_s"]) and positive(b["slices"]), (where, batch, b)
                assert b["by_thread_s"], (where, batch)
            idle = s["idle"]
            assert idle["window_s"] >= 1.0, where
            assert 0 <= idle["core_pct"] < 100 and 0 <= idle["core_pct_stat"] < 100, (where, idle)
            assert 0 <= idle["machine_idle"] <= 1, (where, idle)
            for key in ("VmRSS", "RssAnon", "RssFile"):
                assert s["memory"][key] > 1024, (where, key, s["memory"])
            assert s["created"] == (1 if s["idle_contexts"] == 1 else 2), where
            assert positive(s["create_p50_s"]), where
        # two more kernels connected: the daemon holds more memory
        assert steps[1]["memory"]["VmRSS"] > steps[0]["memory"]["VmRSS"], kernel
        assert entry["teardown"]["kernels_killed_after_stop"] == 0, entry["teardown"]
        assert positive(entry["floor_startup_s"]), kernel

    verdicts = figures["verdicts"]
    for kernel in KERNELS:
        mine = [v for v in verdicts if v["kernel"] == kernel]
        targets = " / ".join(v["target"] for v in mine)
        for words in ("idle daemon with 3 idle contexts", "overhead p50 at most 150 µs, 1 idle",
                      "overhead p50 at most 150 µs, 3 idle", "daemon CPU per run at 3 idle",
                      "run p50 at 3 idle", "/health p50 at 3 idle", "RSS per idle context"):
            assert words in targets, (kernel, words, targets)
        assert len(mine) == 7, mine
        for v in mine:
            assert isinstance(v["met"], bool) and v["figure"] and isinstance(v["caveat"], str), v

    assert "| idle contexts | run p50 |" in done.stdout, done.stdout
    assert "### Targets" in done.stdout, done.stdout
    assert not os.path.exists(figures["workdir"]), "temp dir left behind"
    assert not processes_naming(figures["workdir"]), "processes left behind"
