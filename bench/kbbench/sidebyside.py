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
from .stats import pct, summary


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


def rounds_parser(doc: str | None) -> argparse.ArgumentParser:
    """The command line of a bench of interleaved rounds: -n, --warmup and
    the common flags (more may be added before parsing)."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=500, help="rounds (default 500)")
    ap.add_argument("--warmup", type=int, default=20, help="rounds not counted (default 20)")
    cli.add_common(ap, seed=False)
    return ap


def p50_p90_rows(series: tuple[tuple[str, list[float]], ...]) -> list[str]:
    """A markdown table of each named series' p50 and p90 in ms."""
    lines = ["| | p50 ms | p90 ms |", "|---|---:|---:|"]
    for name, xs in series:
        lines.append("| %s | %.3f | %.3f |" % (name, pct(xs, 50) * 1e3, pct(xs, 90) * 1e3))
    return lines
