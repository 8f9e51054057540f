"""Percentiles of samples, shared by the bench scripts."""

from collections.abc import Iterable


def pct(xs: Iterable[float], p: float) -> float:
    """The p-th percentile of xs, interpolated between the nearest ranks; nan if empty."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)
