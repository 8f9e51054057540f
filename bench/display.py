#!/usr/bin/python3
"""What the IPython extension kernelbridge_display costs a run (concept:
display; docs/charts.md).

One daemon as started by default (Python contexts load the extension) and
one context on Debian's ipykernel, in which the extension is unloaded and
loaded again in turn (`%unload_ext` / `%load_ext` in an untimed run before
each timed one): the same kernel, the same process, with and without. In
interleaved rounds (each round runs the four in a shuffled order):
  (a) POST /run `1+1`, with the extension and without, over a kept-alive
      connection;
  (b) POST /run of a cell that shows a 1000-point line chart (a matplotlib
      figure, closed and returned: its PNG from the inline backend and,
      with the extension, its chart), with and without.
Figures: the p50 of (a) with minus without (target: at most 200 µs), the
p50 of (b) with over without, in percent (target: at most 10%); and,
inside the kernel, what IPython's display formatter takes for the value 2
and for the figure with and without (the formatter's own cost, free of the
HTTP round trip), as figures without a target.

    /usr/bin/python3 bench/display.py [-n 300] [--warmup 20] [--binary PATH]
        [--results PATH] [--json FILE] [--seed 7]
"""
import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kbbench import cli, machine  # noqa: E402
from kbbench.daemon import NO_POOL, Daemon  # noqa: E402
from kbbench.results import Figures, figure  # noqa: E402
from kbbench.stats import interleave, pct, summary  # noqa: E402

SETUP = (
    "import math\n"
    "import matplotlib.pyplot as plt\n"
    "XS = list(range(1000))\n"
    "YS = [math.sin(x / 50) for x in XS]\n"
)
CHART = "fig, ax = plt.subplots()\nax.plot(XS, YS, label='sin')\nplt.close(fig)\nfig"
CHART_MIME = "application/vnd.kernelbridge.chart+json"
# the formatter's own time inside one kernel, the extension loaded and
# unloaded in turn (which first alternates): µs per call, median of rounds
INSIDE = (
    "import statistics, timeit\n"
    "_ip = get_ipython()\n"
    "_f, _em = _ip.display_formatter.format, _ip.extension_manager\n"
    "_fig, _ax = plt.subplots(); _ax.plot(XS, YS); plt.close(_fig)\n"
    "_t = {True: ([], []), False: ([], [])}\n"
    "for _i in range(%d):\n"
    "    for _on in ((True, False) if _i %% 2 == 0 else (False, True)):\n"
    "        (_em.load_extension if _on else _em.unload_extension)('kernelbridge_display')\n"
    "        _t[_on][0].append(timeit.timeit(lambda: _f(2), number=200) / 200 * 1e6)\n"
    "        _t[_on][1].append(timeit.timeit(lambda: _f(_fig), number=1) * 1e6)\n"
    "_em.load_extension('kernelbridge_display')\n"
    "print(*(statistics.median(_t[on][k]) for k in (0, 1) for on in (True, False)))\n"
)


def runner(d: Daemon, context_id: str, code: str, chart: bool | None, loaded: bool):
    """A contender: seconds of one POST /run of code, the extension loaded
    or not by an untimed run first, its result checked (chart: whether the
    entry must carry a chart; None: `1+1`)."""
    toggle = "%%%s_ext kernelbridge_display" % ("load" if loaded else "unload")

    def run() -> float:
        d.ok("POST", "/run", {"code": toggle, "context_id": context_id})
        started = time.perf_counter()
        result = d.ok("POST", "/run", {"code": code, "context_id": context_id})
        elapsed = time.perf_counter() - started
        entries = result["results"]
        if result["error"] is not None or len(entries) != 1:
            sys.exit("unexpected result: %r" % result)
        if chart is None and entries[0]["text"] != "2":
            sys.exit("unexpected result: %r" % result)
        if chart is not None and ((CHART_MIME in entries[0]["data"]) != chart
                                  or not entries[0]["png"]):
            sys.exit("unexpected chart result: %r" % entries[0].keys())
        return elapsed
    return run


def inside(d: Daemon, context_id: str, rounds: int) -> list[float]:
    """µs per call of the display formatter, medians: on 2 with and without
    the extension, on the figure with and without."""
    result = d.ok("POST", "/run", {"code": INSIDE % rounds, "context_id": context_id})
    if result["error"] is not None:
        sys.exit("unexpected result: %r" % result)
    return [float(x) for x in result["logs"]["stdout"].split()]


def measure(d: Daemon, rounds: int, warmup: int, seed: int) -> dict[str, Any]:
    ctx = d.ok("POST", "/contexts", {"language": "python"})["context_id"]
    setup = d.ok("POST", "/run", {"code": SETUP, "context_id": ctx})
    if setup["error"] is not None:
        sys.exit("setup failed: %r" % setup["error"])
    contenders = {
        "plain_on": runner(d, ctx, "1+1", None, True),
        "plain_off": runner(d, ctx, "1+1", None, False),
        "chart_on": runner(d, ctx, CHART, True, True),
        "chart_off": runner(d, ctx, CHART, False, False),
    }
    samples = interleave(contenders, warmup, rounds, seed)
    return {"rounds": rounds, "samples": samples, "loadavg": list(os.getloadavg()),
            "inside_us": inside(d, ctx, max(rounds // 10, 4))}


def figures(res: dict[str, Any]) -> Figures:
    s = {k: pct(v, 50) for k, v in res["samples"].items()}
    plain_on, plain_off, fig_on, fig_off = res["inside_us"]
    return {
        "plain.added_us": figure("`1+1` through POST /run, p50 with the extension minus without",
                                 (s["plain_on"] - s["plain_off"]) * 1e6, "µs"),
        "chart.added_pct": figure("a 1000-point line chart shown, p50 with the extension over "
                                  "without", (s["chart_on"] / s["chart_off"] - 1) * 100, "%"),
        "plain.on_p50_ms": figure("`1+1` with the extension, p50", s["plain_on"] * 1e3, "ms"),
        "plain.off_p50_ms": figure("`1+1` without, p50", s["plain_off"] * 1e3, "ms"),
        "chart.on_p50_ms": figure("the chart with the extension, p50", s["chart_on"] * 1e3, "ms"),
        "chart.off_p50_ms": figure("the chart without, p50", s["chart_off"] * 1e3, "ms"),
        "inside.plain_added_us": figure("inside the kernel: the display formatter on 2, with "
                                        "the extension minus without", plain_on - plain_off, "µs"),
        "inside.chart_added_pct": figure("inside the kernel: the display formatter on the "
                                         "figure, with over without", (fig_on / fig_off - 1) * 100,
                                         "%"),
    }


def tables(res: dict[str, Any]) -> list[str]:
    lines = ["display: %d interleaved rounds, load average %s"
             % (res["rounds"], " ".join("%.2f" % x for x in res["loadavg"])),
             "", "| | with p50 ms | without p50 ms | with p90 ms | without p90 ms |",
             "|---|---:|---:|---:|---:|"]
    for name, key in (("`1+1`", "plain"), ("1000-point line chart", "chart")):
        on, off = res["samples"][key + "_on"], res["samples"][key + "_off"]
        lines.append("| %s | %.3f | %.3f | %.3f | %.3f |" % (
            name, pct(on, 50) * 1e3, pct(off, 50) * 1e3, pct(on, 90) * 1e3, pct(off, 90) * 1e3))
    plain_on, plain_off, fig_on, fig_off = res["inside_us"]
    lines += ["", "inside one kernel, the extension loaded and unloaded in turn, µs per "
              "display_formatter.format() (medians): 2: %.1f with, %.1f without; the figure: "
              "%.0f with, %.0f without" % (plain_on, plain_off, fig_on, fig_off)]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=300, help="rounds (default 300)")
    ap.add_argument("--warmup", type=int, default=20, help="rounds not counted (default 20)")
    cli.add_common(ap)
    a = ap.parse_args()
    a.binary = cli.check_binary(a.binary)
    cli.setup("kbdisp")
    env = machine.environment(a.binary, cli.ROOT)
    d = Daemon(a.binary, None, NO_POOL, ephemeral=True)
    try:
        res = measure(d, max(a.n, 2), a.warmup, a.seed)
    finally:
        d.stop()
    print("\n".join(tables(res)))
    details = {k: ({n: summary(v) for n, v in res["samples"].items()} if k == "samples" else v)
               for k, v in res.items()}
    cli.finish(a, "display", details, figures(res), env)


if __name__ == "__main__":
    main()
