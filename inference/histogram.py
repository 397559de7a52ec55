"""Latency histograms that merge exactly: counts over fixed bucket bounds.

Several gateways measure one endpoint; their windows are added (``TrafficWindow.latency``), and a
percentile is read from the sum. A percentile is the upper bound of the bucket it falls in, linearly
interpolated inside the bucket (as Prometheus' ``histogram_quantile``); the bounds grow by about 25 %
a bucket, so a figure is within that of the truth.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence

#: Upper bounds in milliseconds; one more bucket (+Inf) follows the last.
BOUNDS_MS: tuple[float, ...] = (
    0.5, 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10, 12.5, 15, 20, 25, 30, 40, 50, 60, 80, 100, 125, 150, 200, 250,
    300, 400, 500, 600, 800, 1000, 1250, 1500, 2000, 2500, 3000, 4000, 5000, 6000, 8000, 10000, 15000,
    20000, 30000, 60000, 120000, 300000,
)
SIZE = len(BOUNDS_MS) + 1


def empty() -> list[int]:
    return [0] * SIZE


def bucket(ms: float) -> int:
    """The index of the bucket ``ms`` falls in."""
    return bisect_left(BOUNDS_MS, ms)


def add(counts: list[int], ms: float) -> None:
    counts[bucket(ms)] += 1


def merge(histograms: Iterable[Sequence[int]]) -> list[int]:
    """The bucket-wise sum (an empty or short list counts as zeros)."""
    total = empty()
    for counts in histograms:
        for i, n in enumerate(counts or ()):
            total[i] += n
    return total


def quantile(counts: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile (0–1) in milliseconds, None with no observation."""
    n = sum(counts)
    if not n:
        return None
    rank = q * n
    seen = 0
    for i, c in enumerate(counts):
        if c and seen + c >= rank:
            low = BOUNDS_MS[i - 1] if i else 0.0
            high = BOUNDS_MS[i] if i < len(BOUNDS_MS) else BOUNDS_MS[-1]
            return low + (high - low) * ((rank - seen) / c)
        seen += c
    return BOUNDS_MS[-1]
