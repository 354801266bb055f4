"""The records of a pgbench per-transaction log (:mod:`collector.parse.txlog`): its
streamed summary, its per-second latency series and what is read from them (a second's
latency point, the lag reading of :mod:`collector.parse.lag`).

Latencies in the series are integer µs as the log writes them; every other figure is in
seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from collector.records import LatencyHistogram

if TYPE_CHECKING:
    import numpy as np


def _arrays_equal(a: Any, b: Any) -> bool:
    import numpy as np  # noqa: PLC0415  (records stay importable without numpy loaded)

    if a is None or b is None:
        return a is b
    return bool(np.array_equal(a, b))


@dataclass(frozen=True, eq=False)
class LatencySeries:
    """Per-second latency histograms of one pgbench's per-transaction log (all its
    thread files), or of several clients' merged: what the per-second percentiles,
    and a percentile over any window of seconds, are read from
    (:mod:`collector.parse.latencyseries`:
    :func:`~collector.parse.latencyseries.latency_points`,
    :func:`~collector.parse.latencyseries.merge_latency_series`,
    :func:`~collector.parse.latencyseries.window_percentiles`).

    Seconds are epoch seconds of completion (``time_epoch``). The dense arrays hold one
    entry per second from ``first_second`` to the last second with a row, empty seconds
    included (a stall is a second with no transactions). Latencies are integer µs as
    the log writes them (the histogram's bucket numbers are µs-based; the points built
    from it are in seconds). ``hist_*`` are the non-empty (second, bucket) pairs of the
    successful transactions' coarse histogram, sorted by second then bucket.

    * ``transactions``, ``latency_sum_us``, ``max_us``: successful transactions;
    * ``skipped``: rows reading ``skipped`` (``--rate`` with ``-L``);
    * ``late``: successful transactions slower than ``latency_limit_us`` (``None``
      when no limit was given to the parser);
    * ``lag_sum_us``, ``lag_max_us``: schedule lag of the successful transactions
      (``None`` when the log has no lag column, i.e. no ``--rate``).

    With ``--sampling-rate`` every figure is of the sampled transactions only.
    """

    sources: tuple[str, ...]
    first_second: int
    transactions: np.ndarray
    latency_sum_us: np.ndarray
    max_us: np.ndarray
    skipped: np.ndarray
    hist_second: np.ndarray
    hist_bucket: np.ndarray
    hist_count: np.ndarray
    late: np.ndarray | None = None
    latency_limit_us: float | None = None
    lag_sum_us: np.ndarray | None = None
    lag_max_us: np.ndarray | None = None

    @property
    def seconds(self) -> int:
        """Seconds the series spans."""
        return int(self.transactions.size)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LatencySeries):
            return NotImplemented
        return (
            self.sources == other.sources
            and self.first_second == other.first_second
            and self.latency_limit_us == other.latency_limit_us
            and all(
                _arrays_equal(getattr(self, f), getattr(other, f))
                for f in (
                    "transactions", "latency_sum_us", "max_us", "skipped", "hist_second",
                    "hist_bucket", "hist_count", "late", "lag_sum_us", "lag_max_us",
                )
            )
        )  # fmt: skip

    __hash__ = None  # type: ignore[assignment]  # holds arrays


@dataclass(frozen=True)
class LatencyPoint:
    """One second of a per-second latency series, of one client or of all of them
    (``client`` ``""``): transactions that completed in ``[start, start + 1)`` (epoch).

    Percentiles are nearest-rank over the second's successful transactions, read from
    the coarse histogram (within 1/64 of the exact value, see
    :mod:`collector.parse.latencyhist`); ``max_s`` and the averages are exact. Every latency
    figure is ``None`` in a second without a successful transaction. With ``--rate``
    pgbench's latency counts from the scheduled start, so it includes the lag.
    ``late`` is ``None`` when no latency limit was given; the lag figures are ``None``
    without ``--rate``."""

    client: str
    start: float
    transactions: int
    latency_avg_s: float | None
    p50_s: float | None
    p95_s: float | None
    p99_s: float | None
    max_s: float | None
    skipped: int = 0
    late: int | None = None
    lag_avg_s: float | None = None
    lag_max_s: float | None = None


@dataclass(frozen=True)
class LagReading:
    """Whether a ``--rate`` run held its rate, read from its per-second schedule lag
    (:func:`collector.parse.lag.read_lag`; the rule is stated there).

    ``sustained`` is the verdict, ``reason`` one line for a report saying why.
    ``lag_grows``: the lag grew through the run (the drive fell behind the schedule);
    a run can also fail by its skipped share alone (``-L``). ``slope`` is seconds of
    lag gained per second of run (least squares over the per-second mean lag),
    ``growth_s`` that slope over the run's span; ``lag_first_s`` and ``lag_last_s``
    are the medians of the per-second mean lag over the first and the last quarter of
    the seconds; ``bound_s`` is the growth the rule tolerates; ``service_s`` the mean
    latency less the lag (the time a transaction took once started);
    ``skipped_ratio`` is skipped / (successful + skipped); ``scheduled_ratio`` the
    transactions scheduled (successful + skipped) over those the rate asked, where the
    reader was given the rate (else None)."""

    sustained: bool
    reason: str
    lag_grows: bool
    slope: float
    growth_s: float
    lag_first_s: float
    lag_last_s: float
    bound_s: float
    service_s: float
    skipped_ratio: float
    seconds: int
    scheduled_ratio: float | None = None


@dataclass(frozen=True)
class TxLogSummary:
    """What a per-transaction log (``-l``, all thread files of one pgbench) says,
    streamed into fixed-size figures: counts, latency moments of the successful
    transactions, a latency histogram, the span, and the per-second series.

    ``per_second`` rows are ``(epoch_second, successful, failed, latency_sum_s)``
    by completion time. With ``--sampling-rate`` every count is of the sample only.
    ``late`` counts the successful transactions slower than the latency limit the
    parser was given (``None``: none given). ``latency_series`` holds the per-second
    latency histograms, lag and skipped counts (``None`` when the parser was asked not
    to keep them)."""

    sources: tuple[str, ...]
    rows: int
    successful: int
    failed: int
    skipped: int
    failures: Mapping[str, int]
    latency_sum_s: float
    latency_sum2_s2: float
    latency_min_s: float | None
    latency_max_s: float | None
    first_start: float | None
    last_end: float | None
    per_second: tuple[tuple[int, int, int, float], ...]
    histogram: LatencyHistogram
    connections: int
    retries: int | None = None
    lag_sum_s: float | None = None
    late: int | None = None
    latency_series: LatencySeries | None = None

    @property
    def latency_avg_s(self) -> float | None:
        return self.latency_sum_s / self.successful if self.successful else None

    @property
    def latency_stddev_s(self) -> float | None:
        n = self.successful
        if n < 2:
            return None
        var = (self.latency_sum2_s2 - self.latency_sum_s**2 / n) / (n - 1)
        return max(var, 0.0) ** 0.5
