"""Percentiles of samples, and the interleaved rounds that take them,
shared by the bench scripts."""

import gc
import random
import statistics
from collections.abc import Callable, Iterable


def pct(xs: Iterable[float], p: float) -> float:
    """The p-th percentile of xs, interpolated between the nearest ranks; nan if empty."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(xs: list[float]) -> dict[str, float]:
    """Count, p50, p90, p99, min and mean of xs (not empty)."""
    return {"n": len(xs), "p50": pct(xs, 50), "p90": pct(xs, 90), "p99": pct(xs, 99),
            "min": min(xs), "mean": statistics.fmean(xs)}


def us(s: float) -> str:
    """Seconds as whole microseconds with thousands separators."""
    return f"{s * 1e6:,.0f}"


def interleave(contenders: dict[str, Callable[[], float]], warmup: int, n: int,
               seed: int) -> dict[str, list[float]]:
    """Each contender's samples: warmup calls of each, then n rounds, each
    calling every contender once in a shuffled order, so that noise on the
    machine hits all alike (the garbage collector off during the rounds)."""
    rng = random.Random(seed)
    names = list(contenders)
    samples: dict[str, list[float]] = {k: [] for k in names}
    for _ in range(warmup):
        for k in names:
            contenders[k]()
    gc.collect()
    gc.disable()
    try:
        for _ in range(n):
            order = names[:]
            rng.shuffle(order)
            for k in order:
                samples[k].append(contenders[k]())
    finally:
        gc.enable()
    return samples
