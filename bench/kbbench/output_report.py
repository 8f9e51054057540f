"""Tables and figures of the output axis (output_axis.py's measurements), for
bench/output.py.

tables(res) returns Markdown lines; figures(res) the figures its targets
read (bench/targets.py), the worst round counting for each. The bounds the
tables show come from the targets.
"""

from typing import Any

from . import report
from .output_axis import BIG_MIB, BUDGET_MIB, CAP, CONCURRENT, MIB, RATE_MIB, SHAPES
from .results import Figures, figure
from .stats import pct

CAP_MIB = CAP // MIB


def _bound(fig: str) -> Any:
    return report.bound("output", fig)


def mb(kib: float) -> str:
    return f"{kib / 1024:,.0f}"


def _n(x: Any) -> str:
    return f"{x:,}" if isinstance(x, int) else str(x)


def _ok(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in runs if "error" not in r]


def _each(xs: list[Any], fmt: str = "{}") -> str:
    return " / ".join(fmt.format(x) for x in xs)


def _errors(runs: list[dict[str, Any]]) -> list[str]:
    return [r["error"] for r in runs if "error" in r]


def tables(res: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for part, fn in (("rate", _rate), ("single", _single), ("concurrent", _concurrent),
                     ("concurrent8", _concurrent), ("stall", _stall)):
        if part not in res:
            continue
        R = res[part]
        if "error" in R:
            lines += [f"Output, {part}: **failed**: {R['error']}", ""]
            continue
        fn(R, res, lines.append)
        if R.get("memory_bound_tripped"):
            lines += [f"- {part}: the bench's memory bound was hit: {R['memory_bound_tripped']}.", ""]
    B = res.get("memory_bound")
    if B:
        lines += [f"The bench's own memory (this process, the daemon and its kernels, the raw "
                  f"kernel), bounded at {B['bound_kib'] / 1024 / 1024:.1f} GiB: at most "
                  f"{mb(B['peak_kib'])} MiB seen (every 0.25 s).", ""]
    return lines


_RATE_LABELS = {
    "raw": "raw ZeroMQ client (floor)",
    "kernelbridge": "kernelbridge `POST /run`",
    "raw-parsing": "raw client, each message parsed as it comes (before)",
    "kernelbridge-fresh": "`POST /run`, the answer in new memory (before)",
}
# (contender, the floor it is compared with): the target's pair, then the
# pair as measured before (absent from older results)
_RATE_PAIRS = (("kernelbridge", "raw"), ("kernelbridge-fresh", "raw-parsing"))


def _rates(R: dict[str, Any], shape: str) -> dict[str, float]:
    """MB/s of each contender of shape that has runs: 100 MiB / wall p50."""
    rates = {}
    for who in _RATE_LABELS:
        walls = [r["s"] for r in _ok(R["runs"].get(f"{shape}/{who}", []))]
        if walls:
            rates[who] = RATE_MIB * MIB / pct(walls, 50) / 1e6
    return rates


def _rate(R: dict[str, Any], res: dict[str, Any], p: Any) -> None:
    p(f"### Output rate: {RATE_MIB} MiB through `POST /run` vs the raw ZeroMQ client (python3)")
    p("")
    p(f"{res['rounds']} round(s); each runs every contender in a shuffled order. Wall: from the "
      "request to its last byte (kernelbridge: the JSON answer read; `--max-output 200M`) or to "
      "`execute_reply` and iopub idle, every message verified (raw client). The first two "
      "contenders keep the output in a buffer made once and used again by each round, and parse "
      "it after the wall (client parse s); the two marked before are the clients as measured "
      "before: the raw client parsing each stream message as it comes, the answer read into new "
      "memory each round (`read()`). Each pair is compared with its own raw client. "
      f"MB/s = {RATE_MIB} MiB / wall p50 (MB = 10^6 bytes). One message: one `sys.stdout.write` "
      f"of {RATE_MIB * 1024:,} lines of 1 KiB; chunked: 1 MiB written and flushed at a time.")
    p("")
    p("| shape | contender | wall s p50 | per round | MB/s | daemon / raw | stdout bytes, per round "
      "| stream messages | headers at s | client parse s | daemon CPU s |")
    p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for shape in SHAPES:
        rates = _rates(R, shape)
        for who, floor in _RATE_PAIRS:
            if who not in rates or floor not in rates:
                continue
            for name in (floor, who):
                runs = R["runs"][f"{shape}/{name}"]
                ok = _ok(runs)
                walls = [r["s"] for r in ok]
                bridge = name == who
                cols = ("headers_s", "parse_s", "daemon_cpu_s") if bridge else ("parse_s",)
                extra = " | ".join(f"{pct([r[k] for r in ok], 50):.2f}" if all(k in r for r in ok)
                                   else "-" for k in cols)
                if not bridge:
                    extra = f"- | {extra} | -"
                ratio = f"{rates[who] / rates[floor] * 100:.0f}%" if bridge else "-"
                p(f"| {shape} | {_RATE_LABELS[name]} | {pct(walls, 50):.2f} | "
                  f"{_each(walls, '{:.2f}')} | {rates[name]:.1f} | {ratio} | "
                  f"{_each([_n(r.get('stdout_bytes', '?')) for r in runs])} | "
                  f"{'-' if bridge else _each([r['messages'] for r in ok])} | {extra} |")
    p("")


def _single(R: dict[str, Any], res: dict[str, Any], p: Any) -> None:
    target = _bound("single.chunked.peak_minus_idle_mib")
    p(f"### One {BIG_MIB} MiB run at the default {CAP_MIB} MiB cap: the daemon's RSS (MiB)")
    p("")
    p(f"`POST /run`, plain JSON. Idle: the daemon with its context, one `1+1` run, its record "
      "deleted. Peak: VmHWM reset before the run (`5` to /proc/PID/clear_refs), with VmRSS "
      f"sampled every 50 ms; target idle + {target} MiB. After purge: 0.2 s after "
      "`DELETE /processes/{id}`.")
    p("")
    p(f"| shape | round | idle | before run | peak | peak − idle | target ≤ {target} | truncated "
      "| stdout bytes | wall s | after run | after purge |")
    p("|---|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|")
    for shape in SHAPES:
        runs = R["runs"][shape]
        for i, r in enumerate(runs):
            if "error" in r:
                p(f"| {shape} | {i + 1} | {r['error']} |" + " |" * 9)
                continue
            rise = r["peak_minus_idle_kib"] / 1024
            p(f"| {shape} | {i + 1} | {mb(r['idle_kib'])} | {mb(r['before_kib'])} | {mb(r['peak_kib'])} "
              f"| {rise:,.0f} | {'yes' if rise <= target else '**no**'} | {r['truncated']} "
              f"| {r['stdout_bytes']:,} | {r['s']:.2f} | {mb(r['after_kib'])} | {mb(r['after_purge_kib'])} |")
    p("")


def _concurrent(R: dict[str, Any], res: dict[str, Any], p: Any) -> None:
    budget = R["max_output_memory"]
    note = (f"`--max-output-memory {budget}M`" if budget else
            "this daemon has no `--max-output-memory` (not in `serve --help`): run without it, "
            f"the target taken at {BUDGET_MIB} MiB")
    n = R.get("n", CONCURRENT)
    target = _bound("concurrent.peak_minus_idle_mib" if n == CONCURRENT
                    else f"concurrent{n}.peak_minus_idle_mib")
    p(f"### {n} runs of {BIG_MIB} MiB at once: the daemon's RSS (MiB)")
    p("")
    p(f"Chunked (1 MiB flushes), {n} contexts, each run on an HTTP connection of its own "
      f"(threads started together); {note}; default cap. Peak as above; target idle + "
      f"{target} MiB.")
    p("")
    p(f"| round | idle | before | peak | peak − idle | target ≤ {target} | stdout MiB per run "
      "| truncated | wall s |")
    p("|---:|---:|---:|---:|---:|---|---:|---|---:|")
    for i, r in enumerate(R["rounds"]):
        rise = r["peak_minus_idle_kib"] / 1024
        p(f"| {i + 1} | {mb(r['idle_kib'])} | {mb(r['before_kib'])} | {mb(r['peak_kib'])} | {rise:,.0f} "
          f"| {'yes' if rise <= target else '**no**'} "
          f"| {_each([x.get('stdout_bytes', 0) / MIB for x in r['runs']], '{:.1f}')} "
          f"| {_each([x.get('truncated', x.get('error')) for x in r['runs']])} | {r['wall_s']:.2f} |")
    p("")
    if not all("purge" in r for r in R["rounds"]):
        return
    slack = _bound("purge.after_5s_minus_idle_mib")
    p("After those runs: every record deleted (`GET /processes`, then `DELETE /processes/{id}` "
      "each), then VmRSS every 0.25 s for 5 s (MiB):")
    p("")
    p(f"| round | after the runs | records listed and deleted (of the runs) | DELETEs took s "
      f"| RSS at 5 s | at 5 s − idle "
      f"| within idle + {slack} MiB at |")
    p("|---:|---:|---:|---:|---:|---:|---:|")
    for i, r in enumerate(R["rounds"]):
        P = r["purge"]
        w = P["within_slack_at_s"]
        mine = {x.get("process_id") for x in r["runs"]}
        p(f"| {i + 1} | {mb(P['before_kib'])} | {P['records']} ({len(mine & set(P['ids']))} of "
          f"{len(r['runs'])}) | {P['delete_s']:.2f} | {mb(P['at_5s_kib'])} "
          f"| {mb(P['at_5s_kib'] - r['idle_kib'])} | {'not within 5 s' if w is None else f'{w:.2f} s'} |")
    p("")


def _stall(R: dict[str, Any], res: dict[str, Any], p: Any) -> None:
    cap = _bound("stall.peak_minus_idle_mib")
    p(f"### A stalled SSE reader: {BIG_MIB} MiB chunked, default cap (MiB)")
    p("")
    p(f"`POST /run` with `Accept: text/event-stream` on a socket with SO_RCVBUF set to 64 KiB "
      f"before connect (the kernel reports twice that): the headers read, then nothing for "
      f"{R['stall_s']:g} s, then everything to the end. Peak as above, over the whole run; target: "
      f"peak − idle ≤ the cap ({cap} MiB).")
    p("")
    p(f"| round | SO_RCVBUF | idle | peak − idle during the stall | peak − idle | target ≤ {cap} "
      "| `result` event last | stdout in events MiB | result: stdout bytes, truncated | events "
      "| wall s | ended |")
    p("|---:|---:|---:|---:|---:|---|---|---:|---|---|---:|---|")
    for i, r in enumerate(R["runs"]):
        rise = r["peak_minus_idle_kib"] / 1024
        ev = ", ".join(f"{k} {n}" for k, n in r["events"].items())
        p(f"| {i + 1} | {r['rcvbuf']:,} | {mb(r['idle_kib'])} | {mb(r['stall_peak_minus_idle_kib'])} "
          f"| {rise:,.0f} | {'yes' if rise <= cap else '**no**'} "
          f"| {'yes' if r['result_arrived'] else '**no**'} | {r['stdout_event_bytes'] / MIB:.1f} "
          f"| {_n(r.get('result_stdout_bytes', '-'))}, {r.get('truncated', '-')} | {ev} | {r['s']:.2f} "
          f"| {r['end']} |")
    p("")


def _rate_figures(R: dict[str, Any], out: Figures) -> None:
    want = RATE_MIB * MIB
    for shape in SHAPES:
        rates = _rates(R, shape)
        for who in ("raw", "kernelbridge"):
            out[f"rate.{shape}.{who}_mbps"] = figure(f"{shape}: {who} MB/s",
                                                     rates.get(who, float("nan")), "MB/s")
        out[f"rate.{shape}.ratio_pct"] = figure(
            f"{shape}: POST /run ÷ raw",
            100 * rates.get("kernelbridge", float("nan")) / rates.get("raw", float("nan")), "%")
        if "kernelbridge-fresh" in rates and "raw-parsing" in rates:
            out[f"rate.{shape}.ratio_before_pct"] = figure(
                f"{shape}: POST /run ÷ raw, both clients as measured before",
                100 * rates["kernelbridge-fresh"] / rates["raw-parsing"], "%")
        out[f"rate.{shape}.exact"] = figure(
            f"{shape}: stdout exactly {RATE_MIB} MiB every round",
            all(r.get("stdout_bytes") == want for who in _RATE_LABELS
                for r in R["runs"].get(f"{shape}/{who}", [])), "bool")


def _single_figures(R: dict[str, Any], out: Figures) -> None:
    for shape in SHAPES:
        runs = R["runs"][shape]
        ok = _ok(runs)
        worst = max((r["peak_minus_idle_kib"] for r in ok), default=None)
        out[f"single.{shape}.peak_minus_idle_mib"] = figure(
            f"one {BIG_MIB} MiB run, {shape}: peak − idle, worst round",
            None if worst is None or len(ok) < len(runs) else worst / 1024, "MiB")
        if shape == "one-message":  # over --max-message-size (128 MiB): refused, never held
            out[f"single.{shape}.refused"] = figure(
                f"one {BIG_MIB} MiB message: refused (MessageTooLarge, truncated)",
                all(r.get("truncated") is True and r.get("error_name") == "MessageTooLarge"
                    for r in runs), "bool")
            continue
        out[f"single.{shape}.truncated_at_cap"] = figure(
            f"one {BIG_MIB} MiB run, {shape}: truncated at the cap",
            all(r.get("truncated") is True and r.get("stdout_bytes") == CAP for r in runs), "bool")


def _concurrent_figures(R: dict[str, Any], out: Figures) -> None:
    errs = [x for r in R["rounds"] for x in r["runs"] if "error" in x]
    worst = max(r["peak_minus_idle_kib"] for r in R["rounds"])
    n = R.get("n", CONCURRENT)
    part = "concurrent" if n == CONCURRENT else f"concurrent{n}"
    out[f"{part}.peak_minus_idle_mib"] = figure(
        f"{n} runs at once: peak − idle, worst round",
        None if errs or not R["max_output_memory"] else worst / 1024, "MiB")
    if n != CONCURRENT:
        return  # the purge is measured after the four
    after = max(r["purge"]["at_5s_kib"] - r["idle_kib"] for r in R["rounds"])
    out["purge.after_5s_minus_idle_mib"] = figure("after purge: RSS − idle at 5 s, worst round",
                                                  after / 1024, "MiB")
    within = [r["purge"]["within_slack_at_s"] for r in R["rounds"]]
    slack = _bound("purge.after_5s_minus_idle_mib")
    out["purge.within_s"] = figure(f"after purge: back within idle + {slack} MiB after, worst round",
                                   None if None in within else max(within), "s")


def _stall_figures(R: dict[str, Any], out: Figures) -> None:
    worst = max(r["peak_minus_idle_kib"] for r in R["runs"]) / 1024
    out["stall.peak_minus_idle_mib"] = figure("stalled SSE reader: peak − idle, worst round",
                                              worst, "MiB")
    # the same figure against the bound that counts in-flight output too
    out["stall.peak_minus_idle_mib.bound"] = figure(
        "stalled SSE reader: peak − idle, worst round (against the cap + 64 MiB)", worst, "MiB")
    out["stall.result_arrived"] = figure("stalled SSE reader: `result` arrived every round",
                                         all(r["result_arrived"] for r in R["runs"]), "bool")


def figures(res: dict[str, Any]) -> Figures:
    """The figures of the parts measured; a failed part gives none."""
    out: Figures = {}
    for part, fn in (("rate", _rate_figures), ("single", _single_figures),
                     ("concurrent", _concurrent_figures), ("concurrent8", _concurrent_figures),
                     ("stall", _stall_figures)):
        if part in res and "error" not in res[part]:
            fn(res[part], out)
    return out
