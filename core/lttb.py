"""Largest-Triangle-Three-Buckets downsampling (Steinarsson, 2013) of many series on one time axis.

A chart ``threshold`` points wide needs no more points than that: LTTB keeps each series' first
and last point and, of each of ``threshold - 2`` buckets in between, the point that makes the
largest triangle with the point kept before it and the mean of the next bucket — so peaks,
troughs and the line's shape survive (a spike is its bucket's largest triangle), which a mean per
bucket would flatten.

When the buckets are large, each is first cut into a few sub-buckets whose lowest and highest
points alone are its candidates (MinMaxLTTB, Van Der Donckt et al. 2023, as ``tsdownsample``
does): LTTB's choice is nearly always among them, and the walk over the buckets then costs the
same however long the series.

Written here rather than taken from PyPI's ``lttb`` (numpy, one series at a time, no NaN): a
workload's telemetry is 5 series per GPU on one time axis, and walking the buckets once for all
of them is what keeps a chart of a long run cheap (bench/telemetry.py). NaN is "no point": a
bucket a series has nothing in gives a NaN point — a gap on the chart.
"""

from __future__ import annotations

import numpy as np

#: Candidates per bucket when the buckets are cut (the lowest and highest of half as many sub-buckets).
MINMAX_RATIO = 4


def lttb(x: np.ndarray, ys: np.ndarray, threshold: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Downsample each row of ``ys`` (``(series, n)``, NaN: missing) on the shared increasing ``x``.

    Returns each series' kept points as ``(xs, values)`` in time order, at most ``threshold`` of
    them: its first and last real points, one per bucket between (NaN for a bucket it has nothing
    in, once per stretch, never at either end). With ``n <= threshold`` every point is kept as it is.
    """
    x = np.asarray(x, dtype=np.float64)
    ys = np.asarray(ys, dtype=np.float64)
    if ys.ndim != 2 or x.ndim != 1 or ys.shape[1] != x.shape[0]:
        raise ValueError("ys must be (series, n) on an x of n points")
    series, n = ys.shape
    if n <= max(threshold, 2):
        return [(x.copy(), ys[s].copy()) for s in range(series)]
    threshold = max(threshold, 3)
    cand_x, cand_y = _candidates(x, ys, threshold - 2)
    valid = ~np.isnan(ys)
    anywhere = valid.any(axis=1)
    first = np.argmax(valid, axis=1)
    last = n - 1 - np.argmax(valid[:, ::-1], axis=1)
    rows = np.arange(series)
    # The mean of each bucket's candidates, which the bucket before it aims at; the last bucket aims
    # at the series' last point. A bucket followed by nothing aims at its own mean.
    with np.errstate(invalid="ignore", divide="ignore"):
        seen = (~np.isnan(cand_y)).sum(axis=2)
        mean_x = np.where(np.isnan(cand_y), 0.0, cand_x).sum(axis=2) / seen
        mean_y = np.where(np.isnan(cand_y), 0.0, cand_y).sum(axis=2) / seen
    aim_x = np.concatenate([mean_x[:, 1:], x[last][:, None]], axis=1)
    aim_y = np.concatenate([mean_y[:, 1:], ys[rows, last][:, None]], axis=1)
    lost = np.isnan(aim_y)
    aim_x, aim_y = np.where(lost, mean_x, aim_x), np.where(lost, mean_y, aim_y)

    kept_x, kept_y = _walk(cand_x, cand_y, aim_x, aim_y, x[first], ys[rows, first])
    out = []
    for s in range(series):
        if not anywhere[s]:
            out.append((np.empty(0), np.empty(0)))
            continue
        inside = (kept_x[s] > x[first[s]]) & (kept_x[s] < x[last[s]])
        xs = np.concatenate([[x[first[s]]], kept_x[s][inside], [x[last[s]]]])
        vs = np.concatenate([[ys[s, first[s]]], kept_y[s][inside], [ys[s, last[s]]]])
        gap = np.isnan(vs)
        keep = ~(gap & np.concatenate([[False], gap[:-1]]))  # one NaN per stretch of empty buckets
        out.append((xs[keep], vs[keep]))
    return out


def _walk(cand_x, cand_y, aim_x, aim_y, a_x, a_y):
    """LTTB's choice in every bucket, each made against the point kept in the bucket before (from
    ``a``, the series' start): ``(series, buckets)`` x and y, NaN y where a bucket has no point.

    The triangle's doubled area with ``a`` and the aim ``c`` is ``|A·y + B·x + C|`` for a candidate
    ``(x, y)``, with ``A = a.x − c.x``, ``B = c.y − a.y``, ``C = −(A·a.y + B·a.x)``. The walk goes
    bucket by bucket, every series at once.
    """
    series, buckets, k = cand_x.shape
    kept_x = np.empty((buckets, series))
    kept_y = np.empty((buckets, series))
    offsets = np.arange(series) * k
    # Bucket-major copies: each step reads one contiguous block.
    xs_by_bucket = np.ascontiguousarray(cand_x.transpose(1, 0, 2))
    ys_by_bucket = np.ascontiguousarray(cand_y.transpose(1, 0, 2))
    aims_x, aims_y = np.ascontiguousarray(aim_x.T), np.ascontiguousarray(aim_y.T)
    for i in range(buckets):
        b_x, b_y = xs_by_bucket[i], ys_by_bucket[i]
        big_a = a_x - aims_x[i]
        big_b = aims_y[i] - a_y
        big_c = -(big_a * a_y + big_b * a_x)
        area = np.fmax(np.abs(b_y * big_a[:, None] + b_x * big_b[:, None] + big_c[:, None]), -1.0)  # NaN: none
        pick = offsets + area.argmax(axis=1)
        chosen_x, chosen_y = b_x.take(pick), b_y.take(pick)
        kept_x[i], kept_y[i] = chosen_x, chosen_y
        found = chosen_y == chosen_y  # not NaN
        a_x, a_y = np.where(found, chosen_x, a_x), np.where(found, chosen_y, a_y)
    return kept_x.T, kept_y.T


def _candidates(x: np.ndarray, ys: np.ndarray, buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """Each bucket's candidate points ``(series, buckets, k)`` (x, y; NaN y: none) between the first and last point.

    Small buckets offer all their points (padded with NaN to the widest); large ones the lowest
    and highest point of each of :data:`MINMAX_RATIO` / 2 equal sub-buckets (the last one takes
    the few points left over), in time order.
    """
    series, n = ys.shape
    half = MINMAX_RATIO // 2
    if (n - 2) / buckets <= 2 * MINMAX_RATIO:
        edges = np.floor(np.linspace(1, n - 1, buckets + 1)).astype(np.int64)
        sizes = np.diff(edges)
        offsets = np.arange(int(sizes.max()))
        index = np.minimum(edges[:-1, None] + offsets[None, :], n - 2)
        present = offsets[None, :] < sizes[:, None]
        return np.broadcast_to(x[index], (series, *index.shape)), np.where(present, ys[:, index], np.nan)
    subs = buckets * half
    width = (n - 2) // subs
    picks = []
    for pick, fill in ((np.argmin, np.inf), (np.argmax, -np.inf)):
        body = np.where(np.isnan(ys[:, 1:]), fill, ys[:, 1:])  # every point but the first
        windows = body[:, :subs * width].reshape(series, subs, width)
        at = pick(windows, axis=2) + np.arange(subs) * width + 1
        # The last sub-bucket also holds the points left over (up to the last point, excluded).
        tail = body[:, (subs - 1) * width:n - 2]
        at[:, -1] = pick(tail, axis=1) + (subs - 1) * width + 1
        picks.append(at)
    low, high = picks
    ordered = np.stack([np.minimum(low, high), np.maximum(low, high)], axis=2)  # in time order
    cand_y = np.take_along_axis(ys, ordered.reshape(series, -1), axis=1).reshape(series, buckets, 2 * half)
    cand_x = x[ordered].reshape(series, buckets, 2 * half)
    return cand_x, cand_y
