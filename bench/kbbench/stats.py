"""Percentiles of samples, shared by the bench scripts."""


def pct(xs, p):
    """The p-th percentile of xs, interpolated between the nearest ranks; nan if empty."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)
