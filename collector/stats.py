"""Statistics: from parsed outputs to per-client figures, from clients to a run,
from runs to a cell, and cells against each other.

* per client (:func:`client_result`): tps, latency average/stddev/p50/p95/p99/max,
  failed transactions, and the span in which the client ran transactions;
* per run (:func:`run_stats`): aggregate tps = sum over clients, computed over the
  window in which ALL clients were running (:func:`concurrent_window`), beside the
  plain sum of what each pgbench reported; start skew; latency percentiles of all
  clients' transactions together;
* per cell (:func:`cell_stats`): over complete repetitions only, mean, standard
  deviation, Student-t 95 % confidence interval and coefficient of variation;
  partial and failed runs are counted and shown, never averaged in;
* between cells: :func:`ratio` (contender / baseline, with an interval) and
  :func:`welch` (Welch's t-test: is the difference significant?).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

from collector.records import (
    AggInterval,
    CellSpec,
    ClientResult,
    LatencyHistogram,
    PgbenchReport,
    PgbenchStderr,
    ProgressPoint,
    RunStatus,
    SeriesPoint,
    TxLogSummary,
)

CONFIDENCE = 0.95
ALPHA = 0.05


# --------------------------------------------------------------------------- summaries


@dataclass(frozen=True)
class Summary:
    """n values: mean, sample standard deviation, Student-t confidence interval of
    the mean, coefficient of variation (stddev / mean). With one value the spread
    and the interval are ``None``: unknown, not zero."""

    n: int
    mean: float
    stddev: float | None
    ci_low: float | None
    ci_high: float | None
    cv: float | None
    confidence: float = CONFIDENCE

    @property
    def half_width(self) -> float | None:
        return None if self.ci_high is None else self.ci_high - self.mean


def summarize(values: Iterable[float], confidence: float = CONFIDENCE) -> Summary | None:
    """Mean, stddev (n-1), ``mean +- t(1-a/2, n-1) * s / sqrt(n)``, CV; ``None`` for no values."""
    xs = np.asarray([float(v) for v in values], dtype=np.float64)
    n = int(xs.size)
    if n == 0:
        return None
    mean = float(xs.mean())
    if n == 1:
        return Summary(1, mean, None, None, None, None, confidence)
    sd = float(xs.std(ddof=1))
    half = float(sps.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    cv = sd / mean if mean else None
    return Summary(n, mean, sd, mean - half, mean + half, cv, confidence)


@dataclass(frozen=True)
class Ratio:
    """contender mean / baseline mean, with its confidence interval (``None`` when
    either side has fewer than two values or a spread of zero on both)."""

    ratio: float
    ci_low: float | None
    ci_high: float | None
    confidence: float = CONFIDENCE


def ratio(
    contender: Sequence[float], baseline: Sequence[float], confidence: float = CONFIDENCE
) -> Ratio | None:
    """Ratio of means. The interval is taken on the log scale (delta method):
    ``ln(a/b) +- t * sqrt(s_a^2/(n_a a^2) + s_b^2/(n_b b^2))`` with Welch-Satterthwaite
    degrees of freedom, then exponentiated, so it is never negative."""
    a, b = summarize(contender), summarize(baseline)
    if a is None or b is None or b.mean <= 0 or a.mean <= 0:
        return None
    r = a.mean / b.mean
    if a.stddev is None or b.stddev is None:
        return Ratio(r, None, None, confidence)
    va = (a.stddev / a.mean) ** 2 / a.n
    vb = (b.stddev / b.mean) ** 2 / b.n
    se = math.sqrt(va + vb)
    if se == 0:
        return Ratio(r, r, r, confidence)
    df = (va + vb) ** 2 / (va**2 / (a.n - 1) + vb**2 / (b.n - 1))
    t = float(sps.t.ppf(0.5 + confidence / 2, df))
    return Ratio(r, r * math.exp(-t * se), r * math.exp(t * se), confidence)


@dataclass(frozen=True)
class Welch:
    """Baseline against contender: difference of means in % of the baseline,
    Welch's t statistic, its degrees of freedom and two-sided p-value.
    ``significant`` is ``None`` when there are too few runs to tell."""

    baseline: Summary | None
    contender: Summary | None
    diff_pct: float | None
    t: float | None
    df: float | None
    p_value: float | None
    significant: bool | None
    alpha: float = ALPHA


def welch(baseline: Sequence[float], contender: Sequence[float], alpha: float = ALPHA) -> Welch:
    """Welch's unequal-variances t-test (``scipy.stats.ttest_ind(equal_var=False)``)."""
    b, c = summarize(baseline), summarize(contender)
    diff = None
    if b is not None and c is not None and b.mean:
        diff = (c.mean - b.mean) / b.mean * 100
    if b is None or c is None or b.n < 2 or c.n < 2:
        return Welch(b, c, diff, None, None, None, None, alpha)
    if b.stddev == 0 and c.stddev == 0:
        same = b.mean == c.mean
        return Welch(b, c, diff, None, None, 1.0 if same else 0.0, not same, alpha)
    res = sps.ttest_ind(np.asarray(contender), np.asarray(baseline), equal_var=False)
    va, vb = c.stddev**2 / c.n, b.stddev**2 / b.n  # type: ignore[operator]
    df = (va + vb) ** 2 / (va**2 / (c.n - 1) + vb**2 / (b.n - 1))
    p = float(res.pvalue)
    return Welch(b, c, diff, float(res.statistic), df, p, p < alpha, alpha)


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


# --------------------------------------------------------------------------- per run


def concurrent_window(spans: Mapping[str, tuple[float, float]]) -> tuple[float, float] | None:
    """The interval in which every client was running: from the last start to the
    first end. ``None`` if some client's span is unknown or they never overlapped."""
    if not spans:
        return None
    start = max(s for s, _ in spans.values())
    end = min(e for _, e in spans.values())
    return (start, end) if end > start else None


def transactions_in(
    points: Iterable[SeriesPoint],
    start: float,
    end: float,
    span: tuple[float, float] | None = None,
) -> float:
    """Transactions of a series inside ``[start, end]``, each interval's count spread
    evenly over it (an interval half inside counts half). ``span``, the client's own
    first-to-last transaction, narrows its edge intervals: pgbench's first and last
    per-second buckets hold transactions only from the client's start, or up to its
    end, so their counts are spread over that part alone. Without it, a window that
    begins or ends at this client's own edge loses on average a sixth of a bucket at
    each end (2 % of a 15 s run, measured by bench/fidelity.py)."""
    total = 0.0
    for p in points:
        p_lo, p_hi = p.start, p.start + p.duration_s
        if span is not None:
            p_lo, p_hi = max(p_lo, span[0]), min(p_hi, span[1])
            if p_hi <= p_lo:  # a bucket outside the span: spread it over the whole bucket
                p_lo, p_hi = p.start, p.start + p.duration_s
        lo, hi = max(p_lo, start), min(p_hi, end)
        if hi > lo:
            total += p.transactions * (hi - lo) / (p_hi - p_lo)
    return total


@dataclass(frozen=True)
class RunStats:
    """One run's aggregate. ``tps`` is the windowed sum where a window is known
    (``windowed`` true), else the sum pgbench reported; both sums are kept."""

    repetition: int
    status: RunStatus
    reason: str | None
    clients: int
    tps: float | None
    windowed: bool
    tps_windowed: float | None
    tps_reported_sum: float | None
    window: tuple[float, float] | None
    start_skew_s: float | None
    latency_avg_s: float | None
    latency_p50_s: float | None
    latency_p95_s: float | None
    latency_p99_s: float | None
    failed: int | None
    per_client_tps: Mapping[str, float] = field(default_factory=dict)
    run_id: int | None = None


def run_stats(
    clients: Sequence[ClientResult],
    series: Sequence[SeriesPoint] = (),
    *,
    status: RunStatus | None = None,
    reason: str | None = None,
    repetition: int = 0,
    run_id: int | None = None,
) -> RunStats:
    """Aggregate one run's clients. Windowed tps needs every client's span and a
    series for every client; otherwise it is ``None`` and ``tps`` falls back to
    the reported sum."""
    if status is None:
        status, reason = run_status(clients)
    reported = [c.tps for c in clients if c.tps is not None]
    reported_sum = sum(reported) if reported and len(reported) == len(clients) else None
    by_client: dict[str, list[SeriesPoint]] = defaultdict(list)
    for p in series:
        by_client[p.client].append(p)
    spans = {
        c.client: (c.start, c.end) for c in clients if c.start is not None and c.end is not None
    }
    window = concurrent_window(spans) if len(spans) == len(clients) else None
    starts = [s for s, _ in spans.values()]
    skew = max(starts) - min(starts) if len(starts) == len(clients) and starts else None
    windowed = None
    per_client: dict[str, float] = {}
    if window is not None and all(by_client.get(c.client) for c in clients):
        length = window[1] - window[0]
        for c in clients:
            per_client[c.client] = (
                transactions_in(by_client[c.client], *window, span=spans[c.client]) / length
            )
        windowed = sum(per_client.values())
    processed = [(c.processed or 0, c.latency_avg_s) for c in clients]
    weight = sum(n for n, lat in processed if lat is not None)
    lat_avg = sum(n * lat for n, lat in processed if lat is not None) / weight if weight else None
    hists = [c.histogram for c in clients if c.histogram is not None]
    merged = merge_histograms(hists) if hists and len(hists) == len(clients) else None
    fails = [c.failed for c in clients]
    return RunStats(
        repetition=repetition,
        status=RunStatus(status),
        reason=reason,
        clients=len(clients),
        tps=windowed if windowed is not None else reported_sum,
        windowed=windowed is not None,
        tps_windowed=windowed,
        tps_reported_sum=reported_sum,
        window=window,
        start_skew_s=skew,
        latency_avg_s=lat_avg,
        latency_p50_s=percentile(merged, 0.50),
        latency_p95_s=percentile(merged, 0.95),
        latency_p99_s=percentile(merged, 0.99),
        failed=sum(f for f in fails if f is not None)
        if any(f is not None for f in fails)
        else None,
        per_client_tps=per_client,
        run_id=run_id,
    )


# --------------------------------------------------------------------------- per cell


@dataclass(frozen=True)
class CellStats:
    """A cell over its repetitions. Only complete runs enter ``tps`` and the
    latency figures; ``partial`` and ``failed`` count the others."""

    spec: CellSpec
    runs: tuple[RunStats, ...]
    complete: int
    partial: int
    failed: int
    tps: Summary | None
    tps_reported: Summary | None
    latency_p95_s: Summary | None
    latency_avg_s: Summary | None
    clients: int
    cell_id: int | None = None

    @property
    def tps_values(self) -> list[float]:
        return [r.tps for r in self.runs if r.status == RunStatus.COMPLETE and r.tps is not None]


def cell_stats(spec: CellSpec, runs: Sequence[RunStats], cell_id: int | None = None) -> CellStats:
    done = [r for r in runs if r.status == RunStatus.COMPLETE]
    return CellStats(
        spec=spec,
        runs=tuple(runs),
        complete=len(done),
        partial=sum(r.status == RunStatus.PARTIAL for r in runs),
        failed=sum(r.status == RunStatus.FAILED for r in runs),
        tps=summarize(r.tps for r in done if r.tps is not None),
        tps_reported=summarize(r.tps_reported_sum for r in done if r.tps_reported_sum is not None),
        latency_p95_s=summarize(r.latency_p95_s for r in done if r.latency_p95_s is not None),
        latency_avg_s=summarize(r.latency_avg_s for r in done if r.latency_avg_s is not None),
        clients=max((r.clients for r in runs), default=spec.clients),
        cell_id=cell_id,
    )
