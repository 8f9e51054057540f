"""Tables and verdicts of the output axis (output_axis.py's figures), for
bench/output.py and bench/run.py's `output` section.

report(res) returns Markdown lines and verdicts, each (target, met, figure),
met None when it could not be told. Worst round counts for every verdict.
"""

from typing import Any

from .output_axis import BIG_MIB, BUDGET_MIB, CAP, CONCURRENT, MIB, PURGE_SLACK_KIB, RATE_MIB, SHAPES
from .stats import pct

Verdict = tuple[str, "bool | None", str]
CAP_MIB = CAP // MIB
SINGLE_SLACK_MIB = 32  # SPEC §7: one run over the cap costs at most cap + 32 MiB
ALL_SLACK_MIB = 64  # all runs together at most the output budget + 64 MiB


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


def report(res: dict[str, Any]) -> tuple[list[str], list[Verdict]]:
    lines: list[str] = []
    verdicts: list[Verdict] = []
    for part, fn in (("rate", _rate), ("single", _single), ("concurrent", _concurrent),
                     ("stall", _stall)):
        if part not in res:
            continue
        R = res[part]
        if "error" in R:
            lines += [f"Output, {part}: **failed**: {R['error']}", ""]
            verdicts.append((f"output, {part}: measured", False, R["error"]))
            continue
        fn(R, res, lines.append, verdicts.append)
        if R.get("memory_bound_tripped"):
            lines += [f"- {part}: the bench's memory bound was hit: {R['memory_bound_tripped']}.", ""]
    B = res.get("memory_bound")
    if B:
        lines += [f"The bench's own memory (this process, the daemon and its kernels, the raw "
                  f"kernel), bounded at {B['bound_kib'] / 1024 / 1024:.1f} GiB: at most "
                  f"{mb(B['peak_kib'])} MiB seen (every 0.25 s).", ""]
    return lines, verdicts


def _rate(R: dict[str, Any], res: dict[str, Any], p: Any, v: Any) -> None:
    p(f"### Output rate: {RATE_MIB} MiB through `POST /run` vs the raw ZeroMQ client (python3)")
    p("")
    p(f"{res['rounds']} round(s); each runs the four in a shuffled order. Wall: from the request "
      "to its last byte (kernelbridge: the JSON answer read, parsed after; `--max-output 200M`) or "
      "to `execute_reply` and iopub idle, every stream message parsed (raw client). "
      f"MB/s = {RATE_MIB} MiB / wall p50 (MB = 10^6 bytes). One message: one `sys.stdout.write` "
      f"of {RATE_MIB * 1024:,} lines of 1 KiB; chunked: 1 MiB written and flushed at a time.")
    p("")
    p("| shape | contender | wall s p50 | per round | MB/s | daemon / raw | stdout bytes, per round "
      "| stream messages | headers at s | client parse s | daemon CPU s |")
    p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    want = RATE_MIB * MIB
    for shape in SHAPES:
        kb, rw = R["runs"][f"{shape}/kernelbridge"], R["runs"][f"{shape}/raw"]
        rates = {}
        for who, runs in (("raw", rw), ("kernelbridge", kb)):
            ok = _ok(runs)
            walls = [r["s"] for r in ok]
            rates[who] = want / pct(walls, 50) / 1e6 if walls else float("nan")
        ratio = rates["kernelbridge"] / rates["raw"]
        for who, runs in (("raw", rw), ("kernelbridge", kb)):
            ok = _ok(runs)
            walls = [r["s"] for r in ok]
            label = "raw ZeroMQ client (floor)" if who == "raw" else "kernelbridge `POST /run`"
            extra = ("- | - | -" if who == "raw" else
                     " | ".join(f"{pct([r[k] for r in ok], 50):.2f}"
                                for k in ("headers_s", "parse_s", "daemon_cpu_s")))
            p(f"| {shape} | {label} | {pct(walls, 50):.2f} | {_each(walls, '{:.2f}')} | "
              f"{rates[who]:.1f} | {'-' if who == 'raw' else f'{ratio * 100:.0f}%'} | "
              f"{_each([_n(r.get('stdout_bytes', '?')) for r in runs])} | "
              f"{_each([r['messages'] for r in ok]) if who == 'raw' else '-'} | {extra} |")
        v((f"output rate, {shape}: `POST /run` at least 80% of the raw client's rate",
           ratio >= 0.8, f"{ratio * 100:.0f}% ({rates['kernelbridge']:.1f} vs {rates['raw']:.1f} MB/s)"))
        got = [r.get("stdout_bytes") for r in kb]
        v((f"output rate, {shape}: stdout exactly {RATE_MIB} MiB ({want:,} bytes) every round",
           all(g == want for g in got), _each([_n(g) for g in got]) + " bytes"
           + "".join(f"; {e}" for e in _errors(kb))))
    p("")


def _single(R: dict[str, Any], res: dict[str, Any], p: Any, v: Any) -> None:
    target = CAP_MIB + SINGLE_SLACK_MIB
    p(f"### One {BIG_MIB} MiB run at the default {CAP_MIB} MiB cap: the daemon's RSS (MiB)")
    p("")
    p(f"`POST /run`, plain JSON. Idle: the daemon with its context, one `1+1` run, its record "
      "deleted. Peak: VmHWM reset before the run (`5` to /proc/PID/clear_refs), with VmRSS "
      f"sampled every 50 ms; target idle + cap + {SINGLE_SLACK_MIB} MiB. After purge: 0.2 s after "
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
        ok = _ok(runs)
        if not ok:
            v((f"one {BIG_MIB} MiB run, {shape}: measured", False, "; ".join(_errors(runs))))
            continue
        worst = max(ok, key=lambda r: r["peak_minus_idle_kib"])
        case = " (one message: a documented case)" if shape == "one-message" else ""
        v((f"one {BIG_MIB} MiB run, {shape}{case}: peak ≤ idle + cap + {SINGLE_SLACK_MIB} MiB",
           worst["peak_minus_idle_kib"] <= target * 1024 and len(ok) == len(runs),
           f"peak − idle {mb(worst['peak_minus_idle_kib'])} MiB (peak {mb(worst['peak_kib'])}, "
           f"idle {mb(worst['idle_kib'])}; target {target})"
           + ("" if worst["hwm_reset"] else ", VmHWM not reset: sampled")))
        v((f"one {BIG_MIB} MiB run, {shape}: `truncated: true` and stdout exactly the cap ({CAP:,} bytes)",
           all(r.get("truncated") is True and r.get("stdout_bytes") == CAP for r in runs),
           _each([f"{r.get('truncated')}, {r.get('stdout_bytes', 0):,}" for r in runs])))
    p("")


def _concurrent(R: dict[str, Any], res: dict[str, Any], p: Any, v: Any) -> None:
    budget = R["max_output_memory"]
    note = (f"`--max-output-memory {budget}M`" if budget else
            "this daemon has no `--max-output-memory` (not in `serve --help`): run without it, "
            f"the target taken at {BUDGET_MIB} MiB")
    target = BUDGET_MIB + ALL_SLACK_MIB
    p(f"### {CONCURRENT} runs of {BIG_MIB} MiB at once: the daemon's RSS (MiB)")
    p("")
    p(f"Chunked (1 MiB flushes), {CONCURRENT} contexts, each run on an HTTP connection of its own "
      f"(threads started together); {note}; default cap. Peak as above; target idle + budget + "
      f"{ALL_SLACK_MIB} MiB.")
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
    worst = max(R["rounds"], key=lambda r: r["peak_minus_idle_kib"])
    errs = [x["error"] for r in R["rounds"] for x in r["runs"] if "error" in x]
    v((f"{CONCURRENT} runs of {BIG_MIB} MiB at once: peak ≤ idle + {BUDGET_MIB} + {ALL_SLACK_MIB} MiB",
       worst["peak_minus_idle_kib"] <= target * 1024 and not errs,
       f"peak − idle {mb(worst['peak_minus_idle_kib'])} MiB (peak {mb(worst['peak_kib'])}, idle "
       f"{mb(worst['idle_kib'])})" + ("" if budget else "; no --max-output-memory in this daemon")
       + "".join(f"; {e}" for e in errs)))
    slack = PURGE_SLACK_KIB // 1024
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
    late = [r for r in R["rounds"] if r["purge"]["within_slack_at_s"] is None]
    if late:
        fig = "; ".join(f"round {R['rounds'].index(r) + 1}: {mb(r['purge']['at_5s_kib'] - r['idle_kib'])} "
                        f"MiB above idle at 5 s" for r in late)
    else:
        fig = "at " + _each([r["purge"]["within_slack_at_s"] for r in R["rounds"]], "{:.2f}") + " s"
    v((f"after purge: RSS back within idle + {slack} MiB within 5 s", not late, fig))


def _stall(R: dict[str, Any], res: dict[str, Any], p: Any, v: Any) -> None:
    p(f"### A stalled SSE reader: {BIG_MIB} MiB chunked, default cap (MiB)")
    p("")
    p(f"`POST /run` with `Accept: text/event-stream` on a socket with SO_RCVBUF set to 64 KiB "
      f"before connect (the kernel reports twice that): the headers read, then nothing for "
      f"{R['stall_s']:g} s, then everything to the end. Peak as above, over the whole run; target: "
      f"peak − idle ≤ the cap ({CAP_MIB} MiB).")
    p("")
    p(f"| round | SO_RCVBUF | idle | peak − idle during the stall | peak − idle | target ≤ {CAP_MIB} "
      "| `result` event last | stdout in events MiB | result: stdout bytes, truncated | events "
      "| wall s | ended |")
    p("|---:|---:|---:|---:|---:|---|---|---:|---|---|---:|---|")
    for i, r in enumerate(R["runs"]):
        rise = r["peak_minus_idle_kib"] / 1024
        ev = ", ".join(f"{k} {n}" for k, n in r["events"].items())
        p(f"| {i + 1} | {r['rcvbuf']:,} | {mb(r['idle_kib'])} | {mb(r['stall_peak_minus_idle_kib'])} "
          f"| {rise:,.0f} | {'yes' if rise <= CAP_MIB else '**no**'} "
          f"| {'yes' if r['result_arrived'] else '**no**'} | {r['stdout_event_bytes'] / MIB:.1f} "
          f"| {_n(r.get('result_stdout_bytes', '-'))}, {r.get('truncated', '-')} | {ev} | {r['s']:.2f} "
          f"| {r['end']} |")
    p("")
    worst = max(R["runs"], key=lambda r: r["peak_minus_idle_kib"])
    v((f"stalled SSE reader: peak ≤ idle + the cap ({CAP_MIB} MiB)",
       worst["peak_minus_idle_kib"] <= CAP_MIB * 1024,
       f"peak − idle {mb(worst['peak_minus_idle_kib'])} MiB (during the stall "
       f"{mb(worst['stall_peak_minus_idle_kib'])})"))
    v(("stalled SSE reader: the final `result` event arrived", all(r["result_arrived"] for r in R["runs"]),
       _each(["yes" if r["result_arrived"] else f"no ({r['end']}; last event {r['last_event']})"
              for r in R["runs"]])))


def targets_table(verdicts: list[Verdict]) -> list[str]:
    out = ["| target | met | measured |", "|---|---|---|"]
    for name, ok, fig in verdicts:
        out.append(f"| {name} | {'n/a' if ok is None else ('yes' if ok else '**no**')} | {fig} |")
    return out
