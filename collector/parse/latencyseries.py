"""Reading the per-second latency series of a per-transaction log: merging several
clients' series into one, and the percentiles over a second or a window of seconds.

A :class:`~collector.records.txlog.LatencySeries` (made by
:func:`collector.parse.txlog.summarize_txlog`) holds, for each second of completion,
a sparse coarse histogram of its successful transactions' latencies
(:mod:`collector.parse.latencyhist`) with exact counts, sums and maxima. Several
clients' series merge exactly (:func:`merge_latency_series`): the percentile over all
clients is read from the summed histograms, not averaged from each client's.
:func:`latency_points` gives the per-second p50/p95/p99/max, :func:`window_percentiles`
a percentile over a span of seconds (nearest rank, within 1/64 of the exact value).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from collector.parse.latencyhist import NCOARSE, US, coarse_edges_us, read_only, sum_by_key
from collector.records.txlog import LatencyPoint, LatencySeries


def merge_latency_series(series: Iterable[LatencySeries]) -> LatencySeries:
    """Several clients' per-second series as one (the all-clients series): counts and
    histograms summed second by second, maxima taken, so that its percentiles are
    those of the union of the clients' transactions (to the histogram's resolution).
    ``late`` is kept only when every series counted it against the same limit, the lag
    only when every series has it."""
    parts = list(series)
    if not parts:
        raise ValueError("no latency series to merge")
    first = min(p.first_second for p in parts)
    last = max(p.first_second + p.seconds - 1 for p in parts)
    size = last - first + 1

    def dense(name: str, combine: str = "add") -> np.ndarray:
        out = np.zeros(size, dtype=np.int64)
        for p in parts:
            at = slice(p.first_second - first, p.first_second - first + p.seconds)
            if combine == "add":
                out[at] += getattr(p, name)
            else:
                np.maximum(out[at], getattr(p, name), out=out[at])
        return out

    limits = {p.latency_limit_us for p in parts}
    same_limit = len(limits) == 1 and None not in limits and all(p.late is not None for p in parts)
    lag = all(p.lag_sum_us is not None for p in parts)
    keys = np.concatenate([p.hist_second.astype(np.int64) * NCOARSE + p.hist_bucket for p in parts])
    keys, counts = sum_by_key(keys, np.concatenate([p.hist_count for p in parts]))
    return LatencySeries(
        sources=tuple(s for p in parts for s in p.sources),
        first_second=first,
        transactions=read_only(dense("transactions")),
        latency_sum_us=read_only(dense("latency_sum_us")),
        max_us=read_only(dense("max_us", "max")),
        skipped=read_only(dense("skipped")),
        hist_second=read_only(keys // NCOARSE),
        hist_bucket=read_only((keys % NCOARSE).astype(np.int16)),
        hist_count=read_only(counts),
        late=read_only(dense("late")) if same_limit else None,
        latency_limit_us=limits.pop() if same_limit else None,
        lag_sum_us=read_only(dense("lag_sum_us")) if lag else None,
        lag_max_us=read_only(dense("lag_max_us", "max")) if lag else None,
    )


def _ranks(q: float, n: np.ndarray) -> np.ndarray:
    """Nearest rank (1-based) of the q-quantile among n values: the smallest r with
    r >= q*n (q*n a hair above a whole number from float rounding counts as it)."""
    return np.maximum(1, np.ceil(q * n.astype(np.float64) - 1e-9)).astype(np.int64)


def _midpoints_s(buckets: np.ndarray) -> np.ndarray:
    """Where a percentile falling in each coarse bucket is reported (seconds): the
    value itself for 1-µs buckets, else the bucket's midpoint."""
    low, width = coarse_edges_us(buckets)
    return np.where(width <= 1, low, low + width / 2) * US


def _percentiles_per_second(series: LatencySeries, qs: Sequence[float]) -> np.ndarray:
    """(len(qs), seconds) array of nearest-rank percentiles in seconds; NaN where a
    second has no successful transaction."""
    out = np.full((len(qs), series.seconds), np.nan)
    n = np.asarray(series.transactions, dtype=np.int64)
    have = np.flatnonzero(n)
    if have.size == 0:
        return out
    cum = np.cumsum(series.hist_count)
    before = np.cumsum(n) - n  # transactions in earlier seconds
    for i, q in enumerate(qs):
        target = before[have] + _ranks(q, n[have])
        idx = np.searchsorted(cum, target, side="left")
        # a midpoint past the second's (exact) max is reported as that max
        out[i, have] = np.minimum(_midpoints_s(series.hist_bucket[idx]), series.max_us[have] * US)
    return out


def latency_points(series: LatencySeries, client: str = "") -> tuple[LatencyPoint, ...]:
    """One :class:`LatencyPoint` per second of ``series`` (``client`` ``""`` for the
    all-clients series), empty seconds included: p50, p95 and p99 from the second's
    histogram (nearest rank, within 1/64 of the exact value, never above the second's
    max), max, average latency,
    skipped and late counts, lag average and max (exact)."""
    pct = _percentiles_per_second(series, (0.50, 0.95, 0.99))
    n = np.asarray(series.transactions)
    out = []
    for i in range(series.seconds):
        k = int(n[i])
        lag_avg = lag_max = None
        if series.lag_sum_us is not None and series.lag_max_us is not None and k:
            lag_avg = float(series.lag_sum_us[i]) / k * US
            lag_max = float(series.lag_max_us[i]) * US
        out.append(
            LatencyPoint(
                client=client,
                start=float(series.first_second + i),
                transactions=k,
                latency_avg_s=float(series.latency_sum_us[i]) / k * US if k else None,
                p50_s=float(pct[0, i]) if k else None,
                p95_s=float(pct[1, i]) if k else None,
                p99_s=float(pct[2, i]) if k else None,
                max_s=float(series.max_us[i]) * US if k else None,
                skipped=int(series.skipped[i]),
                late=None if series.late is None else int(series.late[i]),
                lag_avg_s=lag_avg,
                lag_max_s=lag_max,
            )
        )
    return tuple(out)


def window_percentiles(
    series: LatencySeries,
    first_second: int,
    last_second: int,
    qs: Sequence[float] = (0.50, 0.95, 0.99),
) -> dict[float, float | None]:
    """Percentiles (nearest rank, seconds, within 1/64) of the successful transactions
    that completed in the whole seconds ``first_second`` to ``last_second`` (epoch,
    both included): e.g. the p99 over the window where every client ran, on the
    merged series. ``None`` for a window without a transaction."""
    sel = (series.hist_second >= first_second) & (series.hist_second <= last_second)
    counts = series.hist_count[sel]
    total = int(counts.sum())
    if total == 0:
        return {q: None for q in qs}
    # the window's histogram: the selected pairs summed by bucket
    hist = np.bincount(series.hist_bucket[sel], weights=counts, minlength=NCOARSE)
    cum = np.cumsum(hist.astype(np.int64))
    lo = max(first_second - series.first_second, 0)
    top = float(series.max_us[lo : max(last_second - series.first_second + 1, 0)].max()) * US
    out: dict[float, float | None] = {}
    for q in qs:
        rank = int(_ranks(q, np.array([total]))[0])
        mid = float(_midpoints_s(np.searchsorted(cum, [rank], side="left"))[0])
        out[q] = min(mid, top)
    return out
