#!/usr/bin/python3
"""The contexts axis: the daemon's cost with 1, 10 and 100 idle contexts.

    /usr/bin/python3 bench/contexts.py [-n N] [--counts 1,10,100]
        [--kernels xpython,python3] [--json FILE] [--binary PATH]

For each kernelspec in turn (one daemon at a time: the first is torn down,
its kernels gone, before the next starts), one `kernelbridge serve`
(loopback, ephemeral port, private state dir, no warm pool) with one busy
context running `1+1` over a kept-alive connection, grown to each count of
idle contexts of the same kernelspec; at each count, once the machine is
quiet again (kbbench/contexts_axis.py says how each figure is taken):

  - the daemon's CPU over an idle window (default 10 s), as % of one core;
  - `1+1` run p50/p90 through `POST /run`, interleaved round by round with
    the raw ZeroMQ floor client on a kernel of its own, and the bridge's
    overhead over that floor; `GET /health` p50;
  - the daemon's CPU per run and per /health (back-to-back batches);
  - its VmRSS and RssAnon, and the RSS per idle context added.

Prints Markdown tables and whether each target of SPEC section 7 on this
axis is met, with the figure. Every process started is stopped at the end,
also on error or Ctrl-C.
"""

import argparse
import dataclasses
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from kbbench import cli, machine, procs, report as kbreport  # noqa: E402
from kbbench.contexts_axis import ContextsAxis, Settings, Step  # noqa: E402
from kbbench.results import Figures, figure  # noqa: E402

KERNEL_MIB = 100  # room to leave per kernel started (ipykernel: 50-80 MiB resident)
# Below this fraction of the CPUs idle during a step's rounds, its latencies
# say more about the machine's other load than about the daemon.
BUSY_MACHINE = 0.5


@dataclass(frozen=True)
class Verdict:
    kernel: str
    target: str
    met: bool
    figure: str
    caveat: str = ""  # why the figure may not be the daemon's alone


def busy_caveat(*steps: Step) -> str:
    """A caveat when the machine was busy with other work during these steps' rounds."""
    least = min(s.machine_idle_rounds for s in steps)
    if least >= BUSY_MACHINE:
        return ""
    return f"the machine was only {100 * least:.0f}% idle during the rounds"


def rss_per_context_kib(first: Step, step: Step) -> float | None:
    """VmRSS added per idle context from the first step to this one."""
    added = step.idle_contexts - first.idle_contexts
    return (step.memory["VmRSS"] - first.memory["VmRSS"]) / added if added > 0 else None


def checks(kernel: str, steps: list[Step]) -> list[tuple[str, float, str, str, str]]:
    """(figure key, value, verdict text, figure text, caveat) of each target on
    this axis that these steps measure; the bounds from bench/targets.py."""
    lo, hi = steps[0], steps[-1]
    a, b = lo.idle_contexts, hi.idle_contexts
    bound = lambda key: kbreport.bound("scale", f"{kernel}.{key}")  # noqa: E731
    out = [("idle_cpu_pct", hi.idle.core_pct,
            f"idle daemon with {b} idle contexts: at most {bound('idle_cpu_pct')}% of one core",
            f"{hi.idle.core_pct:.2f}% ({hi.idle.daemon_cpu_s * 1e3:.0f} ms of CPU in "
            f"{hi.idle.window_s:.1f} s; /proc/PID/stat {hi.idle.core_pct_stat:.2f}%)", "")]
    for key, s in (("overhead_us_fewest", lo), ("overhead_us_most", hi)) if b != a else \
            (("overhead_us_fewest", lo),):
        out.append((key, s.overhead_p50_s * 1e6,
                    f"bridge overhead p50 at most {bound(key)} µs, {s.idle_contexts} idle",
                    f"{s.overhead_p50_s * 1e6:,.0f} µs ({s.run.p50 * 1e6:,.0f} − "
                    f"{s.floor.p50 * 1e6:,.0f}; paired {s.paired_overhead_p50_s * 1e6:,.0f} µs)",
                    busy_caveat(s)))
    if b == a:
        return out
    for key, name, x, y, caveat in (
            # CPU time is the daemon's own, whatever else the machine does
            ("cpu_per_run_ratio", "daemon CPU per run", lo.cpu_per_run.cpu_s, hi.cpu_per_run.cpu_s, ""),
            ("run_p50_ratio", "run p50", lo.run.p50, hi.run.p50, busy_caveat(lo, hi)),
            ("health_p50_ratio", "/health p50", lo.health.p50, hi.health.p50, busy_caveat(lo, hi))):
        ratio = y / x if x > 0 else float("inf")
        out.append((key, ratio, f"{name} at {b} idle at most {bound(key)}x the figure at {a}",
                    f"{x * 1e6:,.0f} → {y * 1e6:,.0f} µs = {ratio:.2f}x", caveat))
    per = rss_per_context_kib(lo, hi)
    assert per is not None
    anon = (hi.memory["RssAnon"] - lo.memory["RssAnon"]) / (b - a)
    out.append(("rss_per_idle_context_kib", per,
                f"at most {bound('rss_per_idle_context_kib')} KiB RSS per idle context",
                f"{per:,.0f} KiB (({hi.memory['VmRSS']:,} − {lo.memory['VmRSS']:,}) / "
                f"{b - a}; RssAnon {anon:,.0f} KiB)", ""))
    return out


UNITS = {"idle_cpu_pct": "%", "overhead_us_fewest": "µs", "overhead_us_most": "µs",
         "rss_per_idle_context_kib": "KiB"}


def verdicts(kernel: str, steps: list[Step]) -> list[Verdict]:
    out = []
    for key, value, text, fig, caveat in checks(kernel, steps):
        t = kbreport.target("scale", f"{kernel}.{key}")
        out.append(Verdict(kernel, text, kbreport.met(t, value), fig, caveat))
    return out


def figures(steps_by_kernel: dict[str, list[Step]]) -> Figures:
    out: Figures = {}
    for kernel, steps in steps_by_kernel.items():
        for key, value, text, _, caveat in checks(kernel, steps):
            label = f"{kernel}: {text}" + (f" ({caveat})" if caveat else "")
            out[f"{kernel}.{key}"] = figure(label, value, UNITS.get(key, "x"))
    return out


def report(res: dict[str, Any], steps_by_kernel: dict[str, list[Step]],
           all_verdicts: list[Verdict]) -> str:
    lines: list[str] = []
    p = lines.append
    env = res["env"]
    S = res["settings"]
    p(f"## The contexts axis ({env['nproc']} CPUs, {env['cpu']}; commit {env['commit']})")
    p("")
    p(f"One busy context running `1+1` plus N idle contexts of the same kernelspec on one "
      f"daemon; {S['rounds']} interleaved rounds (after {S['warmup']} warm-up) of the run, the "
      f"floor on its own kernel and /health; CPU per request over {S['cpu_batch']} back-to-back "
      f"requests; idle CPU over {S['idle_window_s']:g} s with nothing running. µs unless said; "
      f"CPU per request from /proc/PID/stat (schedstat in brackets), idle CPU from schedstat "
      f"(/proc/PID/stat in brackets); RSS in KiB, taken after the step's runs.")
    p("")
    for kernel, steps in steps_by_kernel.items():
        p(f"### {kernel}")
        p("")
        p("| idle contexts | run p50 | run p90 | floor p50 | floor p90 | overhead p50 (paired) "
          "| /health p50 | daemon CPU per run | per /health | idle CPU, % of one core (stat) "
          "| VmRSS | RssAnon | RSS per idle context | machine idle, rounds |")
        p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for s in steps:
            per = rss_per_context_kib(steps[0], s)
            p(f"| {s.idle_contexts} | {s.run.p50 * 1e6:,.0f} | {s.run.p90 * 1e6:,.0f} "
              f"| {s.floor.p50 * 1e6:,.0f} | {s.floor.p90 * 1e6:,.0f} "
              f"| {s.overhead_p50_s * 1e6:,.0f} ({s.paired_overhead_p50_s * 1e6:,.0f}) "
              f"| {s.health.p50 * 1e6:,.0f} "
              f"| {s.cpu_per_run.cpu_s * 1e6:,.0f} ({s.cpu_per_run.cpu_sched_s * 1e6:,.0f}) "
              f"| {s.cpu_per_health.cpu_s * 1e6:,.0f} ({s.cpu_per_health.cpu_sched_s * 1e6:,.0f}) "
              f"| {s.idle.core_pct:.2f} ({s.idle.core_pct_stat:.2f}) "
              f"| {s.memory['VmRSS']:,} | {s.memory['RssAnon']:,} "
              f"| {'-' if per is None else f'{per:,.0f}'} | {100 * s.machine_idle_rounds:.0f}% |")
        p("")
        for s in steps:
            threads = ", ".join(f"{t} {v * 1e6:,.0f}" for t, v in
                                sorted(s.cpu_per_run.by_thread_s.items(), key=lambda kv: -kv[1])
                                if v * 1e6 >= 1)
            created = (f"{s.created} created, POST /contexts p50 {s.create_p50_s * 1e3:,.0f} ms"
                       if s.create_p50_s is not None else "none created")
            settled = ("" if s.machine_idle_settled is None else
                       f", machine {100 * s.machine_idle_settled:.0f}% idle after "
                       f"{s.settle_wait_s:.0f} s")
            p(f"- {s.idle_contexts} idle: {created}{settled}, load {s.loadavg}; CPU per run by "
              f"thread (schedstat): {threads}; {s.cpu_per_run.slices:.1f} run slices per run; "
              f"idle: {s.idle.wakeups_per_s:,.1f} run slices/s of the daemon, its kernels "
              f"{s.idle.kernels_cpu_s * 1e3:,.0f} ms of CPU, machine {100 * s.idle.machine_idle:.0f}% "
              f"idle{'' if s.idle.same_threads else ' (threads came or went: /proc/PID/stat used)'}; "
              f"{s.memory['Threads']} threads.")
        td = res["kernels"][kernel].get("teardown", {})
        if td:
            p(f"- teardown: the daemon stopped in {td.get('daemon_stop_s', 0):.1f} s; kernels "
              f"left after it and killed: {td.get('kernels_killed_after_stop', 0)}.")
        p("")
    p("### Targets (SPEC §7, the contexts axis)")
    p("")
    p("| kernel | target | met | measured |")
    p("|---|---|---|---|")
    for v in all_verdicts:
        caveat = f" (not to be trusted: {v.caveat})" if v.caveat else ""
        p(f"| {v.kernel} | {v.target} | {'yes' if v.met else '**no**'}{caveat} | {v.figure} |")
    return "\n".join(lines)


def counts_arg(text: str) -> list[int]:
    counts = sorted({int(x) for x in text.split(",") if x.strip()})
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError("counts are integers >= 1, e.g. 1,10,100")
    return counts


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=1000, help="interleaved rounds per step (default 1000)")
    ap.add_argument("--warmup", type=int, default=50, help="rounds before them (default 50)")
    ap.add_argument("--counts", type=counts_arg, default=[1, 10, 100],
                    help="idle contexts at each step (default 1,10,100)")
    ap.add_argument("--kernels", default="xpython,python3",
                    help="kernelspecs, one daemon each, in turn (default xpython,python3)")
    ap.add_argument("--idle-window", type=float, default=10.0, metavar="S",
                    help="seconds of the idle window (default 10)")
    ap.add_argument("--cpu-batch", type=int, help="back-to-back requests per CPU batch (default: -n)")
    ap.add_argument("--settle", type=float, default=120.0, metavar="S",
                    help="before each step, wait up to S s for the machine to be quiet (default 120; 0: no wait)")
    ap.add_argument("--want-idle", type=float, default=0.9,
                    help="quiet: this fraction of all CPUs idle over 2 s (default 0.9)")
    cli.add_common(ap)
    return ap.parse_args()


def run_kernel(args: argparse.Namespace, settings: Settings, kernel: str, tmp: str,
               entry: dict[str, Any]) -> list[Step]:
    """One daemon on one kernelspec, grown to each count; its steps."""
    axis = ContextsAxis(args.binary, kernel, os.path.join(tmp, kernel),
                        max_contexts=args.counts[-1] + 8, log=cli.log)
    steps: list[Step] = []
    try:
        axis.start()
        entry["floor_startup_s"] = axis.floor.startup_s
        for n in args.counts:
            created = axis.grow_to(n)
            step = axis.measure(settings, created)
            steps.append(step)
            entry["steps"].append(dataclasses.asdict(step))
            cli.log(f"{kernel}, {n} idle: run p50 {step.run.p50 * 1e6:,.0f} µs, floor "
                    f"{step.floor.p50 * 1e6:,.0f} µs, /health {step.health.p50 * 1e6:,.0f} µs, "
                    f"CPU per run {step.cpu_per_run.cpu_s * 1e6:,.0f} µs, idle "
                    f"{step.idle.core_pct:.2f}% of a core, VmRSS {step.memory['VmRSS']:,} KiB")
    finally:
        cli.log(f"{kernel}: stopping the daemon and its {len(axis.kernel_pids())} kernels")
        entry["teardown"] = axis.close()
    return steps


def main() -> None:
    args = parse()
    kernels = [k for k in args.kernels.split(",") if k]
    args.binary = cli.check_binary(args.binary)
    settings = Settings(rounds=args.n, warmup=args.warmup, cpu_batch=args.cpu_batch or args.n,
                        idle_window_s=args.idle_window, settle_s=args.settle,
                        want_idle=args.want_idle, seed=args.seed)
    need_kib = (args.counts[-1] + 3) * KERNEL_MIB * 1024
    if machine.mem_available_kib() < need_kib:
        sys.exit(f"{args.counts[-1]} contexts need about {need_kib // 1024 // 1024} GiB free; "
                 f"{machine.mem_available_kib() // 1024 // 1024} GiB available")
    tmp = cli.setup("kbc")  # only the flags below configure the daemon
    t_start = time.perf_counter()
    env = machine.environment(args.binary, cli.ROOT)
    res: dict[str, Any] = {
        "env": env,
        "settings": dataclasses.asdict(settings) | {"counts": args.counts, "kernels": kernels},
        "loadavg_before": machine.loadavg(),
        "workdir": tmp,  # removed at the end, with everything in it
        "kernels": {},
    }
    steps_by_kernel: dict[str, list[Step]] = {}
    all_verdicts: list[Verdict] = []
    try:
        for kernel in kernels:
            res["kernels"][kernel] = {"steps": []}
            steps_by_kernel[kernel] = run_kernel(args, settings, kernel, tmp, res["kernels"][kernel])
            all_verdicts.extend(verdicts(kernel, steps_by_kernel[kernel]))
    finally:
        procs.stop_all()
    res["verdicts"] = [dataclasses.asdict(v) for v in all_verdicts]
    res["elapsed_s"] = time.perf_counter() - t_start
    res["loadavg_after"] = machine.loadavg()
    print(report(res, steps_by_kernel, all_verdicts))
    print(f"\n(elapsed {res['elapsed_s']:.0f} s; load average {res['loadavg_before']} before, "
          f"{res['loadavg_after']} after)")
    cli.finish(args, "scale", res, figures(steps_by_kernel), env, inline="kernels")


if __name__ == "__main__":
    main()
