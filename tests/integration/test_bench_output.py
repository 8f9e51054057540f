"""bench/output.py's rate part, the harness behind the output rate of
docs/PERFORMANCE.md, runs on this machine: 100 MiB through `POST /run` and
through the raw ZeroMQ client, in one message and in 1 MiB messages, each
client as the target's pair (the output kept in a buffer of the client's
own, parsed after) and as measured before; every run's stdout counted to
the byte, the table and the targets printed, nothing left behind. No
figure is compared with a target: figures come from full runs, not tests."""

import os

from test_bench_contexts import positive, processes_naming, run_bench

SHAPES = ("one-message", "chunked")
WHO = ("kernelbridge", "raw", "kernelbridge-fresh", "raw-parsing")
WANT = 100 * 1024 * 1024


def test_the_output_rate_bench_runs_every_client_and_counts_every_byte(tmp_path):
    done, details = run_bench(
        "output.py", ["--parts", "rate", "--rounds", "1", "--results", "none"],
        tmp_path / "output.json", 600)
    rate = details["output"]["rate"]
    assert "error" not in rate, rate
    assert set(rate["runs"]) == {f"{shape}/{who}" for shape in SHAPES for who in WHO}
    for key, runs in rate["runs"].items():
        assert len(runs) == 1, key
        run = runs[0]
        assert "error" not in run, (key, run)
        assert run["stdout_bytes"] == WANT, (key, run)
        assert positive(run["s"]), (key, run)
        if key.split("/")[1].startswith("raw"):
            assert run["status"] == "ok", (key, run)
            # one message, or one per MiB flushed
            assert run["messages"] == (1 if key.startswith("one-message") else 100), (key, run)
        else:
            assert run["http_status"] == 200 and run["truncated"] is False, (key, run)
            assert 0 < run["headers_s"] <= run["s"], (key, run)
    # the kept raw client parses 100 MiB after its wall; the one as before
    # has parsed each message within it: nothing is left after
    for shape in SHAPES:
        assert rate["runs"][f"{shape}/raw"][0]["parse_s"] > 0.01, shape
        assert rate["runs"][f"{shape}/raw-parsing"][0]["parse_s"] < 0.01, shape
    # the table: a ratio for each pair of each shape; the targets' table
    table = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    for shape in SHAPES:
        ratios = [line.split(" | ")[5] for line in table
                  if line.startswith(f"| {shape} |") and "POST /run" in line]
        assert len(ratios) == 2 and all(r.endswith("%") and int(r[:-1]) > 0 for r in ratios), (
            shape, ratios)
    for shape in ("as one message", "in 1 MiB messages"):
        assert any(line.startswith(f"| 100 MiB {shape}: stdout exactly 104,857,600 bytes every "
                                   "round | yes |") for line in table), (shape, table)
    assert not os.path.exists(details["workdir"]), "temp dir left behind"
    assert not processes_naming(details["workdir"]), "processes left behind"
