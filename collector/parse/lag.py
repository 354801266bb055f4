"""Whether a ``--rate`` run held its rate, read from its per-second schedule lag
(:class:`~collector.records.txlog.LatencyPoint` s, of one client or of all, from
:func:`collector.parse.latencyseries.latency_points`).

:func:`read_lag` states the rule and gives the verdict as a
:class:`~collector.records.txlog.LagReading`; the thresholds it applies are the
constants below. The lag's course (:func:`_lag_trend`) and what the clients scheduled
(:func:`_schedule`) are read apart, and the verdict's line for a report names the
first test that failed (:func:`_reason`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from collector.records.txlog import LagReading, LatencyPoint

#: lag growth tolerated whatever the transactions' own time (seconds)
LAG_FLOOR_S = 0.010
#: lag growth tolerated, in units of the mean service time (latency less lag)
LAG_SERVICE_FACTOR = 2.0
#: share of the schedule skipped (``-L``) above which the rate was not delivered
SKIPPED_TOLERANCE = 0.01
#: share of the asked rate the clients may fall short of scheduling in a window
#: (beside Poisson's noise: :func:`read_lag`)
SCHEDULED_TOLERANCE = 0.10


def read_lag(points: Sequence[LatencyPoint], rate: float | None = None) -> LagReading | None:
    """Whether the rate of a ``--rate`` run was sustained, from its per-second points
    (one client's or all clients'); ``None`` without lag figures (no ``--rate``) or
    with fewer than 3 seconds holding transactions. ``rate`` is the rate asked of
    those points' clients together (per second), when the caller knows it.

    The rule. Over the seconds with transactions, take each second's mean schedule lag,
    and the mean service time (latency less lag, weighted by transactions: the time a
    transaction took once started). The growth tolerated is ``bound = max(10 ms,
    2 x service time)``. The lag *grows* when both

    * its least-squares slope times the run's span exceeds ``bound``, and
    * the median lag of the last quarter of the seconds (at least 3) exceeds that of
      the first quarter by more than ``bound`` (a lone spike at the end, a checkpoint,
      moves the slope but not the medians).

    The rate was sustained when the lag does not grow and at most 1 % of the scheduled
    transactions (successful + skipped) were skipped. With ``-L`` pgbench skips the
    transactions already later than the limit when their turn comes, which keeps the
    lag below the limit however overloaded the drive is: there the skipped share
    tells. It also tells when the limit is tight for the drive's latency although the
    drive keeps up (the rate was then not held *within the limit*: the reason says
    which). A rate just above what the drive holds grows the lag slowly: a short run
    may not reach ``bound``; a longer run tells better.

    With ``rate`` a third test: the clients must have scheduled (successful + skipped)
    the rate asked over the points' seconds, short by at most the larger of
    :data:`SCHEDULED_TOLERANCE` and three standard deviations of a Poisson count
    (pgbench draws its schedule from one). A client starved of CPU falls behind its
    schedule and catches up on it while the lag stays flat, and what it misses when
    the duration ends is never counted (CI, 2738 s run: 339.2/s of 400/s asked over a
    window whose lag did not grow, on the lab's nvme that holds 800/s)."""
    pts = [p for p in points if p.transactions and p.lag_avg_s is not None]
    if len(pts) < 3:
        return None
    trend = _lag_trend(pts)
    schedule = _schedule(points, rate)
    return LagReading(
        sustained=(
            not trend.grows and schedule.skipped_ratio <= SKIPPED_TOLERANCE and not schedule.short
        ),
        reason=_reason(trend, schedule),
        lag_grows=trend.grows,
        slope=trend.slope,
        growth_s=trend.growth_s,
        lag_first_s=trend.first_s,
        lag_last_s=trend.last_s,
        bound_s=trend.bound_s,
        service_s=trend.service_s,
        skipped_ratio=schedule.skipped_ratio,
        seconds=len(pts),
        scheduled_ratio=schedule.ratio,
    )


class _Trend(NamedTuple):
    """The course of the per-second mean schedule lag (seconds; ``slope`` in seconds
    of lag per second of run) and the growth the rule tolerates."""

    service_s: float
    slope: float
    span_s: float
    growth_s: float
    first_s: float
    last_s: float
    bound_s: float

    @property
    def grows(self) -> bool:
        """Both the fitted growth and the quarters' medians moved by more than the bound."""
        return self.growth_s > self.bound_s and self.last_s - self.first_s > self.bound_s


def _lag_trend(pts: Sequence[LatencyPoint]) -> _Trend:
    """The lag's least-squares slope, its growth over the span, the medians of its first
    and last quarter (at least 3 seconds each) and the bound, over ``pts`` (the seconds
    with transactions and lag figures, at least 3)."""
    t = np.array([p.start for p in pts]) - pts[0].start
    lag = np.array([p.lag_avg_s for p in pts], dtype=np.float64)
    n = np.array([p.transactions for p in pts], dtype=np.float64)
    lat = np.array([p.latency_avg_s for p in pts], dtype=np.float64)
    service = max(float(np.dot(n, lat - lag) / n.sum()), 0.0)
    slope = float(np.polyfit(t, lag, 1)[0])
    span = float(t[-1] - t[0])
    quarter = min(max(3, math.ceil(len(pts) / 4)), len(pts))
    return _Trend(
        service_s=service,
        slope=slope,
        span_s=span,
        growth_s=slope * span,
        first_s=float(np.median(lag[:quarter])),
        last_s=float(np.median(lag[-quarter:])),
        bound_s=max(LAG_FLOOR_S, LAG_SERVICE_FACTOR * service),
    )


class _Schedule(NamedTuple):
    """What the clients scheduled (successful + skipped) over the points' ``seconds``:
    the skipped share, and with the ``rate`` asked the share of it they scheduled
    (``ratio``) and whether that fell short of the tolerance."""

    scheduled: int
    seconds: int
    skipped_ratio: float
    rate: float | None
    ratio: float | None
    short: bool


def _schedule(points: Sequence[LatencyPoint], rate: float | None) -> _Schedule:
    skipped = sum(p.skipped for p in points)
    scheduled = sum(p.transactions for p in points) + skipped
    ratio = None
    short = False
    if rate:
        expected = float(rate) * len(points)
        ratio = scheduled / expected
        short = ratio < 1.0 - max(SCHEDULED_TOLERANCE, 3.0 / math.sqrt(expected))
    return _Schedule(
        scheduled=scheduled,
        seconds=len(points),
        skipped_ratio=skipped / scheduled if scheduled else 0.0,
        rate=rate,
        ratio=ratio,
        short=short,
    )


def _reason(trend: _Trend, schedule: _Schedule) -> str:
    """The verdict in one line: the first test failed (lag growth, skipped share,
    schedule short of the rate), or the bounded lag."""
    if trend.grows:
        return (
            f"rate not sustained: schedule lag grew {trend.growth_s * 1e3:.0f} ms over "
            f"{trend.span_s:.0f} s ({trend.slope * 1e3:.1f} ms/s, {trend.first_s * 1e3:.1f} -> "
            f"{trend.last_s * 1e3:.1f} ms), more than the {trend.bound_s * 1e3:.0f} ms tolerated"
        )
    if schedule.skipped_ratio > SKIPPED_TOLERANCE:
        return (
            f"rate not sustained within the latency limit: {schedule.skipped_ratio:.1%} of the "
            f"scheduled transactions skipped (already later than the limit), more than "
            f"{SKIPPED_TOLERANCE:.0%}"
        )
    if schedule.short:
        return (
            f"rate not sustained: the clients scheduled "
            f"{schedule.scheduled / schedule.seconds:,.1f}/s of the {schedule.rate:,g}/s asked "
            f"({schedule.ratio:.0%}) over {schedule.seconds} s with a bounded lag: they ran "
            f"behind their schedule (a client short of CPU?)"
        )
    return (
        f"rate sustained: schedule lag bounded ({trend.first_s * 1e3:.1f} -> "
        f"{trend.last_s * 1e3:.1f} ms over {trend.span_s:.0f} s, within "
        f"{trend.bound_s * 1e3:.0f} ms)"
    )
