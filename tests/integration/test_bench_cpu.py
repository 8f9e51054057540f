"""bench/cpu.py, the harness behind the CPU axis of docs/PERFORMANCE.md,
runs on this machine: on both kernels a few `1+1` runs counted under
callgrind (instructions by thread and by function) and a few under
schedstat (CPU and run slices by thread, the bridge over the floor), every
answer checked by the script, the tables and the targets printed, nothing
left behind. No figure is compared with a target: figures come from full
runs, not tests."""

import math
import os

from test_bench_contexts import positive, processes_naming, run_bench

KERNELS = ("xpython", "python3")
CALLGRIND_N = 3
N = 5
# the daemon's own threads that do the work of a run
THREADS = ("kb-engine", "MHD-connection", "kb-persist")


def test_the_cpu_bench_counts_instructions_and_cpu_per_run(tmp_path):
    done, details = run_bench(
        "cpu.py", ["-n", str(N), "--callgrind-n", str(CALLGRIND_N), "--warmup", "2",
                   "--kernels", ",".join(KERNELS)],
        tmp_path / "cpu.json", 600)
    assert set(details["kernels"]) == set(KERNELS)
    for kernel, entry in details["kernels"].items():
        cg = entry["callgrind"]
        assert cg["n"] == CALLGRIND_N, kernel
        assert positive(cg["instructions_per_run"]), (kernel, cg["instructions_per_run"])
        assert 0 < cg["per_run_without_timed"] <= cg["instructions_per_run"], kernel
        by_thread = cg["by_thread"]
        for name in THREADS:
            assert positive(by_thread.get(name)), (kernel, name, by_thread)
        # the threads' counts add up to the whole
        assert abs(sum(by_thread.values()) - cg["instructions_per_run"]) <= 1 + 1e-6 * cg[
            "instructions_per_run"], (kernel, by_thread, cg["instructions_per_run"])
        top = cg["top_functions"]
        assert top and all(positive(v) for v in top.values()), (kernel, top)
        assert any("[kernelbridge]" in name for name in top), (kernel, list(top))

        ss = entry["schedstat"]
        assert ss["n"] == N, kernel
        assert positive(ss["run_p50_us"]) and positive(ss["floor_p50_us"]), (kernel, ss)
        assert math.isfinite(ss["overhead_us"]), (kernel, ss)
        for batch in ("per_run", "per_health"):
            b = ss[batch]
            assert positive(b["cpu_us"]) and positive(b["slices"]), (kernel, batch, b)
            assert positive(b["by_thread_us"].get("kb-engine")), (kernel, batch, b)

    assert "### Targets (cpu)" in done.stdout, done.stdout
    for kernel in KERNELS:
        assert f"{kernel}: daemon CPU per `1+1` run, all threads (schedstat)" in done.stdout
        assert f"{kernel}: instructions per run, thread kb-engine" in done.stdout
    assert not os.path.exists(details["workdir"]), "temp dir left behind"
    assert not processes_naming(details["workdir"]), "processes left behind"
