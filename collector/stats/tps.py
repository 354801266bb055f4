"""Statistics: from parsed outputs to per-client figures, from clients to a run,
from runs to a cell, and cells against each other.

* per client (:func:`client_result`, in :mod:`collector.stats.clientstats`, re-exported
  here): tps, latency average/stddev/p50/p95/p99/max, failed transactions, and the
  span in which the client ran transactions;
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

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

# scipy.stats itself (slow to import, most of a report's start: docs/scaling.md) only
# where Welch's test runs: the t quantiles are scipy.special's stdtrit, which scipy.stats'
# t.ppf calls
from scipy import special

from collector.records import CellSpec, ClientResult, RunStatus, SeriesPoint
from collector.stats.clientstats import (
    client_result,
    merge_histograms,
    percentile,
    run_status,
    series_from_agglog,
    series_from_progress,
    series_from_txlog,
)

__all__ = [
    "ALPHA",
    "CONFIDENCE",
    "CellStats",
    "Ratio",
    "RunStats",
    "Summary",
    "Welch",
    "cell_stats",
    "client_result",
    "concurrent_window",
    "merge_histograms",
    "percentile",
    "ratio",
    "run_stats",
    "run_status",
    "series_from_agglog",
    "series_from_progress",
    "series_from_txlog",
    "summarize",
    "transactions_in",
    "welch",
]

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
    half = float(special.stdtrit(n - 1, 0.5 + confidence / 2)) * sd / math.sqrt(n)
    cv = sd / mean if mean else None
    return Summary(n, mean, sd, mean - half, mean + half, cv, confidence)


def ci_pct(values: Iterable[float]) -> float | None:
    """The 95% confidence interval's half width as a percentage of the mean (None: fewer
    than two values, or a mean of 0): what adaptive stopping compares with its target."""
    s = summarize(values)
    if s is None or s.ci_low is None or not s.mean:
        return None
    return (s.mean - s.ci_low) / s.mean * 100


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
    t = float(special.stdtrit(df, 0.5 + confidence / 2))
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
    from scipy import stats as sps  # noqa: PLC0415  (see the imports)

    res = sps.ttest_ind(np.asarray(contender), np.asarray(baseline), equal_var=False)
    va, vb = c.stddev**2 / c.n, b.stddev**2 / b.n  # type: ignore[operator]
    df = (va + vb) ** 2 / (va**2 / (c.n - 1) + vb**2 / (b.n - 1))
    p = float(res.pvalue)
    return Welch(b, c, diff, float(res.statistic), df, p, p < alpha, alpha)


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
    #: 1, or the retry's number (a partial or failed attempt at the repetition run again)
    attempt: int = 1

    @property
    def name(self) -> str:
        """``run 2``, or ``run 2 attempt 2`` for a retry."""
        return f"run {self.repetition}" + (f" attempt {self.attempt}" if self.attempt > 1 else "")


def run_stats(
    clients: Sequence[ClientResult],
    series: Sequence[SeriesPoint] = (),
    *,
    status: RunStatus | None = None,
    reason: str | None = None,
    repetition: int = 0,
    run_id: int | None = None,
    attempt: int = 1,
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
        attempt=attempt,
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
    latency_p50_s: Summary | None = None
    latency_p99_s: Summary | None = None

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
        latency_p50_s=summarize(r.latency_p50_s for r in done if r.latency_p50_s is not None),
        latency_p99_s=summarize(r.latency_p99_s for r in done if r.latency_p99_s is not None),
    )
