"""Context creation, cold and from the warm pool (SPEC section 7, "Context
creation").

  create       per kernelspec, interleaved rounds in a shuffled order: cold
               `POST /contexts` on a daemon without a pool; the kernel's own
               start-up measured by the raw client (spawn from the
               kernelspec until a kernel_info_reply and a message on iopub,
               kernel_info_request again every 20 ms while iopub is silent);
               jupyter_client's start_new_kernel; each kernel gone before the
               next start. Then warm: a daemon with a pool of one kernel per
               kernelspec, each create once the pool has refilled.
  interleaved  a daemon without a pool and one with `--pool python=1` side
               by side: `POST /contexts` and an isolated `POST /run` of
               `1+1` on each, in shuffled rounds, each warm operation once
               the pool has refilled.

Not for: the bridge's latency (latency.py).
"""

import os
import random
import time
from typing import Any, Callable

from . import peers, procs, raw
from .daemon import NO_POOL, Daemon
from .results import Figures, figure
from .stats import summary


def _cold_once(who: str, kname: str, daemon: Daemon, workdir: str, floor: dict[str, list]) -> float:
    if who == "kernelbridge":
        ctx, _, dt = daemon.create_context(kernel_name=kname)
        daemon.delete_context(ctx)
        return dt
    if who == "floor":
        rk = raw.RawKernel(kname, workdir, "ipc")
        try:
            rk.start()
            floor["kernel_info_sent"].append(rk.kernel_info_sent)
            floor["iopub_lag"].append(rk.iopub_lag_s)
            assert rk.startup_s is not None
            return rk.startup_s
        finally:
            rk.shutdown()
    dt, km, kc = peers.jc_start_new_kernel(kname)
    kc.stop_channels()
    pid = km.provisioner.pid if km.provisioner else None
    km.shutdown_kernel(now=False)
    if pid:
        procs.pid_gone(pid)
    return dt


def create(binary: str, tmp: str, kernels: list[str], rounds: int, warm_rounds: int, seed: int,
           log: Callable[..., None]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    rng = random.Random(seed + 1)
    daemon = Daemon(binary, os.path.join(tmp, "create-daemon"), NO_POOL)
    try:
        for kname in kernels:
            samples: dict[str, list[float]] = {"kernelbridge": [], "floor": [], "jupyter_client": []}
            floor: dict[str, list] = {"kernel_info_sent": [], "iopub_lag": []}
            for i in range(rounds):
                order = list(samples)
                rng.shuffle(order)
                for who in order:
                    log(f"pool: create: {kname} round {i + 1}/{rounds}: {who}")
                    samples[who].append(_cold_once(who, kname, daemon,
                                                   os.path.join(tmp, f"create-{kname}-{i}"), floor))
                    time.sleep(0.2)  # let the torn-down kernel's exit settle
            out[kname] = {k: dict(summary(v), samples=v) for k, v in samples.items()}
            out[kname]["floor"]["kernel_info_sent"] = floor["kernel_info_sent"]
            out[kname]["floor"]["iopub_lag"] = summary(floor["iopub_lag"])
    finally:
        daemon.stop()
    pool_args = [a for k in kernels for a in ("--pool", f"{k}=1")]
    daemon = Daemon(binary, os.path.join(tmp, "warm-daemon"), (*NO_POOL, *pool_args))
    try:
        for kname in kernels:
            warm = []
            for _ in range(warm_rounds):
                daemon.wait_pool_settled()
                time.sleep(0.05)
                ctx, _, dt = daemon.create_context(kernel_name=kname)
                warm.append(dt)
                daemon.delete_context(ctx)
            log(f"pool: create: {kname}: warm pool, {len(warm)} creates")
            out[kname]["warm_pool"] = dict(summary(warm), samples=warm)
    finally:
        daemon.stop()
    return out


def interleaved(binary: str, tmp: str, rounds: int, seed: int) -> dict[str, Any]:
    """pool.py's rounds: cold and warm daemons, create and isolated run (ms)."""
    daemons = {"cold": Daemon(binary, os.path.join(tmp, "cold"), ("--pool", "python=0")),
               "warm": Daemon(binary, os.path.join(tmp, "warm"), ("--pool", "python=1"))}
    samples: dict[tuple[str, str], list[float]] = {
        (mode, op): [] for mode in daemons for op in ("create", "isolated")}
    rng = random.Random(seed)
    try:
        daemons["warm"].wait_pool_settled()
        for _ in range(rounds):
            order = list(samples)
            rng.shuffle(order)
            for mode, op in order:
                d = daemons[mode]
                if mode == "warm":
                    d.wait_pool_settled()
                t0 = time.perf_counter()
                if op == "create":
                    ctx = d.ok("POST", "/contexts", {"language": "python"})
                    ms = (time.perf_counter() - t0) * 1e3
                    d.ok("DELETE", "/contexts/" + ctx["context_id"])
                else:
                    r = d.ok("POST", "/run", {"code": "1+1", "isolated": True})
                    ms = (time.perf_counter() - t0) * 1e3
                    assert r["results"][0]["text"] == "2", r
                samples[(mode, op)].append(ms)
    finally:
        for d in daemons.values():
            d.stop()
            d.kill_processes_left()
    return {f"{mode}/{op}": dict(summary(v), samples=v) for (mode, op), v in samples.items()}


def figures(details: dict[str, Any]) -> Figures:
    out: Figures = {}
    for k, C in details.get("create", {}).items():
        if "warm_pool" in C:
            out[f"{k}.warm_create_ms"] = figure(f"{k}: warm POST /contexts p50",
                                                C["warm_pool"]["p50"] * 1e3, "ms")
        out[f"{k}.cold_create_ratio"] = figure(f"{k}: cold POST /contexts ÷ own start-up",
                                               C["kernelbridge"]["p50"] / C["floor"]["p50"], "x")
        out[f"{k}.cold_create_ms"] = figure(f"{k}: cold POST /contexts p50",
                                            C["kernelbridge"]["p50"] * 1e3, "ms")
        out[f"{k}.own_startup_ms"] = figure(f"{k}: the kernel's own start-up p50 (raw client)",
                                            C["floor"]["p50"] * 1e3, "ms")
    inter = details.get("interleaved")
    if inter:
        out["python.warm_create_ms"] = figure("python: warm POST /contexts p50",
                                              inter["warm/create"]["p50"], "ms")
        for op, label in (("create", "POST /contexts"), ("isolated", "isolated POST /run `1+1`")):
            for mode in ("cold", "warm"):
                if (mode, op) != ("warm", "create"):
                    out[f"python.{mode}_{op}_ms"] = figure(f"python: {mode} {label} p50",
                                                           inter[f"{mode}/{op}"]["p50"], "ms")
    return out


def tables(details: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    if details.get("create"):
        lines += ["### Context creation (ms)", "",
                  "| kernel | cold p50 | p90 | kernel's own start-up p50 | p90 | jupyter_client "
                  "start_new_kernel p50 | p90 | cold / own (p50) | warm pool p50 | p90 |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for k, C in details["create"].items():
            cells = [C[w][q] * 1e3 for w in ("kernelbridge", "floor", "jupyter_client")
                     for q in ("p50", "p90")]
            warm = C.get("warm_pool")
            lines.append(f"| {k} | " + " | ".join(f"{c:,.1f}" for c in cells)
                         + f" | {C['kernelbridge']['p50'] / C['floor']['p50']:.3f} | "
                         + (f"{warm['p50'] * 1e3:,.1f} | {warm['p90'] * 1e3:,.1f} |" if warm else "- | - |"))
        for k, C in details["create"].items():
            lines.append(f"- {k}: the raw client sent kernel_info_request "
                         f"{C['floor']['kernel_info_sent']} times per start; iopub came "
                         f"{C['floor']['iopub_lag']['p50'] * 1e3:,.1f} ms (p50) after the first reply.")
        lines.append("")
    inter = details.get("interleaved")
    if inter:
        lines += ["### Cold and warm daemons side by side (ms)", "",
                  "| operation | cold p50 | cold p90 | warm p50 | warm p90 | cold / warm (p50) |",
                  "|---|---:|---:|---:|---:|---:|"]
        for op, label in (("create", "POST /contexts"), ("isolated", "isolated POST /run `1+1`")):
            c, w = inter[f"cold/{op}"], inter[f"warm/{op}"]
            lines.append(f"| {label} | {c['p50']:.1f} | {c['p90']:.1f} | {w['p50']:.1f} "
                         f"| {w['p90']:.1f} | {c['p50'] / w['p50']:.0f}x |")
        lines.append("")
    return lines
