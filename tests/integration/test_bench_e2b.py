"""bench/e2b.py, the harness behind the E2B figures of docs/PERFORMANCE.md,
runs on this machine: a few rounds, every contender answering correctly
(the script checks each answer and fails on a wrong one), every figure
present. No timing is asserted: figures come from full runs, not tests."""

import json
import subprocess

from conftest import BINARY, REPO


def test_the_e2b_bench_runs_and_reports_every_figure(tmp_path):
    out = tmp_path / "e2b.json"
    done = subprocess.run(
        ["/usr/bin/python3", str(REPO / "bench" / "e2b.py"), "-n", "5", "--warmup", "1",
         "--binary", BINARY, "--json", str(out)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    assert set(figures["latency_s"]) == {
        "E2B POST /execute", "native POST /run", "Jupyter Server websocket",
        "Jupyter Server websocket, TCP_NODELAY"}
    for name, s in figures["latency_s"].items():
        assert 0 < s["p50"] <= s["p90"] <= s["p99"], (name, s)
    for key in ("daemon_rss_kib_ready", "daemon_rss_kib_after", "server_rss_kib_ready",
                "server_rss_kib_after", "daemon_kernels_rss_kib"):
        assert figures[key] > 1024, (key, figures[key])
    assert "| E2B POST /execute |" in done.stdout, done.stdout
