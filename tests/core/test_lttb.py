"""The charts' downsampler: LTTB's size and shape, gaps, and many series walked at once."""

from __future__ import annotations

import numpy as np
import pytest

from core.lttb import lttb


def walk(x: np.ndarray, y: np.ndarray, threshold: int) -> np.ndarray:
    """LTTB as Steinarsson writes it, one point at a time (the same buckets): what lttb() must equal."""
    n, buckets = len(x), threshold - 2
    edges = np.floor(np.linspace(1, n - 1, buckets + 1)).astype(int)
    kept, a = [(x[0], y[0])], (x[0], y[0])
    for i in range(buckets):
        if i < buckets - 1:
            c = (x[edges[i + 1]:edges[i + 2]].mean(), y[edges[i + 1]:edges[i + 2]].mean())
        else:
            c = (x[-1], y[-1])
        areas = [abs((a[0] - c[0]) * (y[j] - a[1]) - (a[0] - x[j]) * (c[1] - a[1])) for j in range(edges[i], edges[i + 1])]
        j = edges[i] + int(np.argmax(areas))
        a = (x[j], y[j])
        kept.append(a)
    kept.append((x[-1], y[-1]))
    return np.array(kept)


@pytest.fixture
def noisy():
    rng = np.random.default_rng(38)
    x = np.arange(3000, dtype=float) * 60
    return x, np.sin(np.arange(3000) / 40) * 30 + 50 + rng.random(3000) * 10


def test_it_keeps_threshold_points_first_and_last_included(noisy):
    x, y = noisy
    ((xs, vs),) = lttb(x, y[None, :], 800)
    assert len(xs) == len(vs) == 800
    assert (xs[0], vs[0], xs[-1], vs[-1]) == (x[0], y[0], x[-1], y[-1])
    assert np.all(np.diff(xs) > 0)  # in time order, each point once


def test_it_is_steinarssons_walk(noisy):
    x, y = noisy
    ((xs, vs),) = lttb(x, y[None, :], 500)
    expected = walk(x, y, 500)
    assert np.array_equal(xs, expected[:, 0]) and np.array_equal(vs, expected[:, 1])


@pytest.mark.parametrize("n", [3000, 100_000])  # small buckets: every point a candidate; large: min/max preselected
def test_extremes_survive(n):
    x = np.arange(n, dtype=float)
    y = np.full(n, 50.0) + np.sin(x / 7)
    y[n // 3], y[2 * n // 3] = 99.0, 1.0  # a spike and a dip in a calm line
    ((xs, vs),) = lttb(x, y[None, :], 200)
    assert len(xs) == 200
    assert vs.max() == 99.0 and vs.min() == 1.0
    assert xs[np.argmax(vs)] == n // 3 and xs[np.argmin(vs)] == 2 * n // 3


@pytest.mark.parametrize("n", [1, 2, 5, 800])
def test_a_series_no_longer_than_the_threshold_is_unchanged(n):
    x = np.arange(n, dtype=float)
    y = np.stack([x * 2, np.where(x % 2 == 0, np.nan, x)])
    out = lttb(x, y, 800)
    for (xs, vs), row in zip(out, y, strict=True):
        assert np.array_equal(xs, x) and np.array_equal(vs, row, equal_nan=True)


def test_many_series_at_once_each_as_if_alone(noisy):
    x, y = noisy
    ys = np.stack([y, 100 - y, y * 0.5])
    together = lttb(x, ys, 300)
    for row, (xs, vs) in zip(ys, together, strict=True):
        ((alone_x, alone_v),) = lttb(x, row[None, :], 300)
        assert np.array_equal(xs, alone_x) and np.array_equal(vs, alone_v)


def test_missing_points_are_gaps_never_a_crash():
    n = 10_000
    x = np.arange(n, dtype=float)
    ys = np.tile(np.sin(x / 100) * 40 + 50, (4, 1))
    ys[0, 4000:5000] = np.nan  # a stretch with nothing reported
    ys[1, :6000] = np.nan  # a GPU that came later
    ys[2, :] = np.nan  # a series never reported (FB_FREE absent)
    ys[3, ::2] = np.nan  # every other reading lost
    gap, late, never, sparse = lttb(x, ys, 400)
    assert np.isnan(gap[1]).sum() == 1 and gap[0][np.isnan(gap[1])][0] > 3900  # one NaN marks the stretch
    assert late[0][0] == 6000 and not np.isnan(late[1]).any()  # starts at its first real point
    assert len(never[0]) == 0
    assert len(sparse[0]) == 400 and not np.isnan(sparse[1]).any()
    for xs, vs in (gap, late, sparse):
        assert np.all(np.diff(xs) > 0) and not np.isnan(vs[0]) and not np.isnan(vs[-1])


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="series"):
        lttb(np.arange(5.0), np.arange(4.0)[None, :], 3)
