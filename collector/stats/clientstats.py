"""Per-client statistics: from one client's parsed pgbench outputs to its figures.

* series (:func:`series_from_txlog`, :func:`series_from_agglog`,
  :func:`series_from_progress`): per-interval transactions of one client;
* :func:`client_result`: tps, latency average/stddev/p50/p95/p99/max, failed
  transactions, and the span in which the client ran transactions;
* :func:`run_status`: a run's status from its clients';
* latency histograms: :func:`percentile` and :func:`merge_histograms`.

:mod:`collector.stats.tps`, which aggregates clients into runs and runs into cells,
re-exports these names.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

from collector.records import ClientResult, LatencyHistogram, RunStatus, SeriesPoint
from collector.records.pgbench import AggInterval, PgbenchReport, PgbenchStderr, ProgressPoint
from collector.records.txlog import TxLogSummary

# --------------------------------------------------------------------------- latency


def percentile(hist: LatencyHistogram | None, q: float) -> float | None:
    """The q-quantile (0..1) of a histogram, nearest rank: the bucket holding the
    ``ceil(q*N)``-th latency, reported at its midpoint (exact for 1-µs buckets)."""
    if hist is None or not hist.counts:
        return None
    total = hist.total
    rank = max(1, math.ceil(q * total))
    run = 0
    for lo, hi, c in zip(hist.lows_s, hist.highs_s, hist.counts, strict=True):
        run += c
        if run >= rank:
            return lo if hi - lo <= 1.0000001e-6 else (lo + hi) / 2
    return hist.highs_s[-1]  # pragma: no cover


def merge_histograms(hists: Iterable[LatencyHistogram]) -> LatencyHistogram | None:
    """Sum of histograms with the same bucketing (the txlog parser's)."""
    acc: dict[tuple[float, float], int] = defaultdict(int)
    seen = False
    for h in hists:
        seen = True
        for lo, hi, c in zip(h.lows_s, h.highs_s, h.counts, strict=True):
            acc[(lo, hi)] += c
    if not seen:
        return None
    keys = sorted(acc)
    return LatencyHistogram(
        lows_s=tuple(k[0] for k in keys),
        highs_s=tuple(k[1] for k in keys),
        counts=tuple(acc[k] for k in keys),
    )


# --------------------------------------------------------------------------- per client


def series_from_txlog(
    client: str, log: TxLogSummary, sampling_rate: float = 1.0
) -> list[SeriesPoint]:
    """Per-second series of a per-transaction log; counts divided by ``sampling_rate``."""
    scale = 1.0 / sampling_rate
    return [
        SeriesPoint(
            client=client,
            start=float(sec),
            duration_s=1.0,
            transactions=ok * scale,
            latency_avg_s=lat / ok if ok else None,
            failed=round(failed * scale),
            source="txlog" if sampling_rate == 1.0 else f"txlog sampled {sampling_rate:g}",
        )
        for sec, ok, failed, lat in log.per_second
    ]


def series_from_agglog(
    client: str, intervals: Sequence[AggInterval], interval_s: float | None = None
) -> list[SeriesPoint]:
    """Series of an aggregate log (merge the thread files first). The interval length
    is the smallest gap between starts unless given."""
    if interval_s is None:
        gaps = [b.start - a.start for a, b in itertools.pairwise(intervals)]
        interval_s = min((g for g in gaps if g > 0), default=1.0)
    out = []
    for iv in intervals:
        failed = None
        if iv.serialization_failures is not None:
            failed = iv.serialization_failures + (iv.deadlock_failures or 0)
        out.append(
            SeriesPoint(
                client=client,
                start=iv.start,
                duration_s=interval_s,
                transactions=float(iv.transactions),
                latency_avg_s=iv.latency_sum_s / iv.transactions if iv.transactions else None,
                failed=failed,
                source="agglog",
            )
        )
    return out


def series_from_progress(
    client: str, points: Sequence[ProgressPoint], start_epoch: float | None = None
) -> list[SeriesPoint]:
    """Series of ``-P`` lines. A point's time is the END of its interval; relative
    times need ``start_epoch`` (pgbench's start) to be placed on the clock."""
    out = []
    prev_t = None
    first_gap = points[1].t - points[0].t if len(points) > 1 else 1.0
    for p in points:
        if p.epoch:
            end = p.t
        elif start_epoch is not None:
            end = start_epoch + p.t
        else:
            end = p.t
        begin = prev_t if prev_t is not None else end - (first_gap if p.epoch else p.t)
        begin = min(begin, end)
        dur = max(end - begin, 1e-9)
        out.append(
            SeriesPoint(
                client=client,
                start=begin,
                duration_s=dur,
                transactions=p.tps * dur,
                latency_avg_s=p.latency_avg_s,
                failed=p.failed,
                source="progress",
            )
        )
        prev_t = end
    return out


def client_result(
    client: str,
    report: PgbenchReport | None,
    *,
    stderr: PgbenchStderr | None = None,
    exit_code: int | None = None,
    txlog: TxLogSummary | None = None,
    agglog: Sequence[AggInterval] | None = None,
    series: Sequence[SeriesPoint] | None = None,
) -> ClientResult:
    """One client's figures from what its pgbench left.

    Status: no report or an exit code other than 0/2 -> failed; an aborted run
    (exit 2, or "Run was aborted") -> partial; otherwise complete. Percentiles
    and max come from the per-transaction log's histogram; max also from an
    aggregate log. ``start``/``end`` come from the log, else from ``series``."""
    reason = stderr.reason if stderr else None
    if report is None:
        return ClientResult(
            client=client,
            status=RunStatus.FAILED,
            reason=reason or "no pgbench report",
            exit_code=exit_code,
        )
    aborted = report.aborted or (stderr is not None and stderr.aborted) or exit_code == 2
    if exit_code not in (None, 0, 2):
        status, reason = RunStatus.FAILED, reason or f"pgbench exited {exit_code}"
    elif aborted:
        status = RunStatus.PARTIAL
        reason = reason or next(iter(report.errors), None) or "run was aborted"
    else:
        status, reason = RunStatus.COMPLETE, None
    hist = txlog.histogram if txlog is not None and txlog.histogram.counts else None
    lat_avg = report.latency_avg_s
    lat_std = report.latency_stddev_s
    lat_max = None
    start = end = None
    if txlog is not None:
        lat_avg = lat_avg if lat_avg is not None else txlog.latency_avg_s
        lat_std = lat_std if lat_std is not None else txlog.latency_stddev_s
        lat_max = txlog.latency_max_s
        start, end = txlog.first_start, txlog.last_end
    if agglog:
        lat_max = lat_max if lat_max is not None else max(i.latency_max_s for i in agglog)
        if start is None:
            width = series_from_agglog(client, agglog)[0].duration_s
            start, end = agglog[0].start, agglog[-1].start + width
    if start is None and series:
        start = min(p.start for p in series)
        end = max(p.start + p.duration_s for p in series)
    return ClientResult(
        client=client,
        status=status,
        reason=reason,
        tps=report.tps,
        tps_kind=report.tps_kind,
        processed=report.processed,
        failed=report.failed,
        skipped=report.skipped,
        latency_avg_s=lat_avg,
        latency_stddev_s=lat_std,
        latency_p50_s=percentile(hist, 0.50),
        latency_p95_s=percentile(hist, 0.95),
        latency_p99_s=percentile(hist, 0.99),
        latency_max_s=lat_max,
        start=start,
        end=end,
        exit_code=exit_code,
        histogram=hist,
        report={
            k: v
            for k, v in report.__dict__.items()
            if v is not None and k not in ("errors",) and not isinstance(v, tuple)
        },
    )


def run_status(clients: Sequence[ClientResult]) -> tuple[RunStatus, str | None]:
    """A run is complete only if every client is; failed if no client completed (none
    produced a result, or all were cut off, as when the server dies); partial when
    some completed and some did not. The reason names the first client that did not."""
    if not clients:
        return RunStatus.FAILED, "no client results"
    bad = [c for c in clients if c.status != RunStatus.COMPLETE]
    if not bad:
        return RunStatus.COMPLETE, None
    why = f"{bad[0].client}: {bad[0].reason or bad[0].status.value}"
    if not any(c.status == RunStatus.COMPLETE for c in clients):
        return RunStatus.FAILED, why
    return RunStatus.PARTIAL, why
