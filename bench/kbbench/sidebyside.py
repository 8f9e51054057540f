"""What the benches that start one daemon of their own share: the daemon
(--ephemeral, no pool) around one measurement, stopped whatever happens;
two operations timed in interleaved rounds (which goes first alternates,
so that neither gains from the other's warm caches); and the end of the
run: the tables printed, each series kept as its summary, not its
samples, the figures saved (cli.finish)."""

import argparse
from typing import Any, Callable

from . import cli
from .daemon import NO_POOL, Daemon
from .results import Figures
from .stats import summary


def on_own_daemon(binary: str, measure: Callable[[Daemon], dict[str, Any]],
                  env: dict[str, str] | None = None) -> dict[str, Any]:
    """measure(d) on a daemon started for it, stopped after."""
    d = Daemon(binary, None, NO_POOL, ephemeral=True, **({"env": env} if env else {}))
    try:
        return measure(d)
    finally:
        d.stop()


def interleaved(rounds: int, warmup: int, a: Callable[[], float],
                b: Callable[[], float]) -> tuple[list[float], list[float]]:
    """warmup rounds of a and b not counted, then rounds of both (a first
    in even rounds, b in odd ones): the seconds each returned."""
    for _ in range(warmup):
        a()
        b()
    a_s: list[float] = []
    b_s: list[float] = []
    for i in range(rounds):
        if i % 2 == 0:
            a_s.append(a())
            b_s.append(b())
        else:
            b_s.append(b())
            a_s.append(a())
    return a_s, b_s


def finish(args: argparse.Namespace, concept: str, res: dict[str, Any], series: tuple[str, ...],
           tables: list[str], figures: Figures, env: dict[str, Any]) -> None:
    """Print tables; save res (each key of series as its summary) and the
    figures."""
    print("\n".join(tables))
    details = {k: (summary(v) if k in series else v) for k, v in res.items()}
    cli.finish(args, concept, details, figures, env)
