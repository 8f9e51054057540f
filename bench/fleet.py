#!/usr/bin/python3
"""A fleet of daemons routed by sandbox through the SDK (SPEC section 12):

  place     three daemons kb-0..2 (own state dirs, no pool), N contexts
            created through the SDK without a sandbox (AsyncInterpreterService
            with sandboxes={id: url}); each daemon's own GET /contexts
            counts them; each context sets a variable.
  outage    kb-1 killed with SIGKILL (its kernels keep running): D runs on
            its contexts, each timed until SandboxUnavailable; meanwhile
            every other context's variable is read and new contexts are
            placed (only on the live sandboxes, then deleted).
  restart   kb-1 started again on its state dir (same id, a new port, given
            to the service with set_sandbox_url): every one of its contexts
            read back, the lost ones (variable not back) counted.

    /usr/bin/python3 bench/fleet.py [--contexts 30] [--dead-calls 10]
        [--binary PATH] [--results PATH] [--json FILE]

Loopback only, ephemeral ports, a private dir; every daemon and kernel is
stopped at the end.
"""
import argparse
import asyncio
import os
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "sdk", "python", "src"))
import kernelbridge  # noqa: E402
from kbbench import cli, machine  # noqa: E402
from kbbench.daemon import NO_POOL, Daemon, kill_kernels  # noqa: E402
from kbbench.results import Figures, figure  # noqa: E402
from kbbench.stats import pct, summary  # noqa: E402

IDS = ("kb-0", "kb-1", "kb-2")
DEAD = "kb-1"
PARALLEL = 6  # contexts created at once


class Fleet:
    """The three daemons, each with a state dir that outlives it."""

    def __init__(self, binary: str, tmp: str) -> None:
        self.binary, self.tmp = binary, tmp
        self.daemons: dict[str, Daemon] = {}
        for sid in IDS:
            self.start(sid)

    def state_dir(self, sid: str) -> str:
        return os.path.join(self.tmp, sid)

    def start(self, sid: str) -> Daemon:
        self.daemons[sid] = Daemon(self.binary, None, ("--sandbox-id", sid, *NO_POOL),
                                   state_dir=self.state_dir(sid))
        return self.daemons[sid]

    def urls(self) -> dict[str, str]:
        return {sid: f"http://127.0.0.1:{d.port}" for sid, d in self.daemons.items()}

    def counts(self) -> dict[str, int]:
        """Contexts per sandbox, from each daemon's own GET /contexts."""
        return {sid: len(d.ok("GET", "/contexts")["contexts"]) for sid, d in self.daemons.items()
                if d.proc.poll() is None}

    def stop(self) -> None:
        for sid, d in self.daemons.items():
            d.stop()
            kill_kernels(self.state_dir(sid))


async def create(kb: kernelbridge.AsyncInterpreterService, n: int) -> list[Any]:
    gate = asyncio.Semaphore(PARALLEL)

    async def one() -> Any:
        async with gate:
            return await kb.create_context(language="python", request_timeout=120)

    return list(await asyncio.gather(*(one() for _ in range(n))))


async def place(kb: kernelbridge.AsyncInterpreterService, fleet: Fleet, n: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    contexts = await create(kb, n)
    created_s = time.perf_counter() - t0
    runs = await asyncio.gather(*(c.run(f"v = {i}") for i, c in enumerate(contexts)))
    by_handle = {sid: sum(c.sandbox_id == sid for c in contexts) for sid in IDS}
    return {"contexts": contexts, "created_s": created_s, "counts": fleet.counts(),
            "by_handle": by_handle, "set_errors": sum(r.error is not None for r in runs)}


async def dead_call(ctx: Any) -> float:
    """Seconds until a run on a context of the dead sandbox raises SandboxUnavailable (inf: it did not)."""
    t0 = time.perf_counter()
    try:
        await ctx.run("v")
    except kernelbridge.SandboxUnavailable:
        return time.perf_counter() - t0
    return float("inf")


async def outage(kb: kernelbridge.AsyncInterpreterService, fleet: Fleet, contexts: list[Any],
                 calls: int) -> dict[str, Any]:
    fleet.daemons[DEAD].crash()
    dead = [c for c in contexts if c.sandbox_id == DEAD]
    live = [(i, c) for i, c in enumerate(contexts) if c.sandbox_id != DEAD]
    times, live_ok = [], 0
    for k in range(calls):  # each dead call alongside reads of every live context
        got = await asyncio.gather(dead_call(dead[k % len(dead)]), *(c.run("v") for _, c in live))
        times.append(got[0])
        live_ok += sum(r.text == str(i) for (i, _), r in zip(live, got[1:]))
    extra = await create(kb, len(IDS))
    on_dead = sum(c.sandbox_id == DEAD for c in extra)
    await asyncio.gather(*(c.close() for c in extra))
    return {"dead": dead, "dead_s": times, "live_reads": calls * len(live), "live_ok": live_ok,
            "placed": len(extra), "placed_on_dead": on_dead}


async def restart(kb: kernelbridge.AsyncInterpreterService, fleet: Fleet, contexts: list[Any],
                  dead: list[Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    d = fleet.start(DEAD)
    kb.set_sandbox_url(DEAD, f"http://127.0.0.1:{d.port}")
    index = {c.context_id: i for i, c in enumerate(contexts)}

    async def back(c: Any) -> bool:
        try:
            return (await c.run("v")).text == str(index[c.context_id])
        except kernelbridge.KernelBridgeError:
            return False

    ok = await asyncio.gather(*(back(c) for c in dead))
    return {"back_s": time.perf_counter() - t0, "dead_contexts": len(dead), "back": sum(ok),
            "lost": len(dead) - sum(ok), "listening_s": d.listening_s}


async def simulate(fleet: Fleet, n: int, calls: int) -> dict[str, Any]:
    kb = kernelbridge.AsyncInterpreterService(sandboxes=fleet.urls())
    try:
        placed = await place(kb, fleet, n)
        contexts = placed.pop("contexts")
        out = await outage(kb, fleet, contexts, calls)
        res = {"place": placed, "outage": {k: v for k, v in out.items() if k != "dead"},
               "restart": await restart(kb, fleet, contexts, out["dead"])}
        await asyncio.gather(*(c.close() for c in contexts))
        return res
    finally:
        await kb.aclose()


def figures(res: dict[str, Any]) -> Figures:
    place, out, back = res["place"], res["outage"], res["restart"]
    return {
        "place.min_per_sandbox": figure("contexts placed on the emptiest sandbox (of %d, 3 sandboxes)"
                                        % sum(place["counts"].values()), min(place["counts"].values()),
                                        "count"),
        "restart.lost_contexts": figure("contexts of the killed sandbox without their variable after "
                                        "its restart", back["lost"], "count"),
        "outage.dead_max_s": figure("a run on a killed sandbox's context until SandboxUnavailable, "
                                    "the slowest", max(out["dead_s"]), "s"),
        "outage.dead_p50_s": figure("a run on a killed sandbox's context until SandboxUnavailable, "
                                    "p50", pct(out["dead_s"], 50), "s"),
        "outage.live_failed": figure("runs on the live sandboxes' contexts that failed during the "
                                     "outage", out["live_reads"] - out["live_ok"], "count"),
        "outage.placed_on_dead": figure("contexts placed on the killed sandbox during the outage",
                                        out["placed_on_dead"], "count"),
        "restart.back_s": figure("restart: spawn to every context of the sandbox read back",
                                 back["back_s"], "s"),
        "place.created_s": figure("creating the contexts through the SDK (6 at a time)",
                                  place["created_s"], "s"),
    }


def tables(res: dict[str, Any]) -> list[str]:
    place, out, back = res["place"], res["outage"], res["restart"]
    lines = ["| sandbox | contexts (daemon's GET /contexts) | handles |", "|---|---:|---:|"]
    lines += ["| %s | %d | %d |" % (sid, place["counts"][sid], place["by_handle"][sid]) for sid in IDS]
    lines += ["", "outage of %s: SandboxUnavailable p50 %.1f ms, max %.1f ms over %d calls; "
              "%d/%d live reads ok; %d of %d new contexts placed on it"
              % (DEAD, pct(out["dead_s"], 50) * 1e3, max(out["dead_s"]) * 1e3, len(out["dead_s"]), out["live_ok"],
                 out["live_reads"], out["placed_on_dead"], out["placed"]),
              "restart: %d/%d contexts back with their variable in %.2f s (daemon listening in %.2f s)"
              % (back["back"], back["dead_contexts"], back["back_s"], back["listening_s"])]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contexts", type=int, default=30)
    ap.add_argument("--dead-calls", type=int, default=10)
    cli.add_common(ap, seed=False)
    a = ap.parse_args()
    a.binary = cli.check_binary(a.binary)
    tmp = cli.setup("kbf")
    env = machine.environment(a.binary, cli.ROOT)
    fleet = Fleet(a.binary, tmp)
    try:
        res = asyncio.run(simulate(fleet, a.contexts, a.dead_calls))
    finally:
        fleet.stop()
    print("\n".join(tables(res)))
    figs = figures(res)
    dead_s = res["outage"]["dead_s"]
    res["outage"]["dead_s"] = {**summary(dead_s), "max": max(dead_s)}  # a summary, not the samples
    cli.finish(a, "fleet", res, figs, env)


if __name__ == "__main__":
    main()
