"""Trends a mean hides: a cell whose repetitions drift (tps falling or rising with the
repetition number), and a run whose per-second tps is still climbing or falling through
its window (warm-up not over, or the drive leaving its cache).

Both are a rank test and a robust slope: Kendall's tau of the figures against their order
(``scipy.stats.kendalltau``: exact p-values for short series without ties) says whether
there is a trend beyond the noise; the Theil-Sen slope (``scipy.stats.theilslopes``, the
median of the pairwise slopes) says how large it is, as the change across the series in
per cent of its mean. A trend is flagged when both say so:

- across repetitions: at least :data:`MIN_REPETITIONS` (5: with fewer, no order of the
  figures reaches p < 0.05), p < :data:`REP_ALPHA`, and a change of at least
  :data:`REP_CHANGE` (5 %) of the mean across them;
- within a run: at least :data:`MIN_SECONDS` whole seconds in the window, p <
  :data:`RUN_ALPHA` (0.01: neighbouring seconds are not independent, so the rank test
  alone would flag noise), and a change of at least :data:`RUN_CHANGE` (10 %).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from collector.records import SeriesPoint
from collector.stats.tps import transactions_in

MIN_REPETITIONS = 5
REP_ALPHA = 0.05
REP_CHANGE = 0.05
MIN_SECONDS = 8
RUN_ALPHA = 0.01
RUN_CHANGE = 0.10
#: the run fact of a run's trend (:func:`run_trend_fact`)
FACT = "tps_trend"


@dataclass(frozen=True)
class Trend:
    """A trend found: ``change`` the Theil-Sen line's change across the series, as a
    fraction of its mean (negative: falling), ``p`` Kendall's two-sided p-value."""

    change: float
    p: float
    n: int
    mean: float

    @property
    def direction(self) -> str:
        return "rose" if self.change > 0 else "fell"

    def to_fact(self) -> dict[str, Any]:
        return {"change": self.change, "p": self.p, "n": self.n, "mean": self.mean}


def trend(values: Sequence[float], *, alpha: float, change: float, least: int) -> Trend | None:
    """The trend of ``values`` in their order, or None: too few, no trend beyond the
    noise at ``alpha``, or one smaller than ``change`` of the mean."""
    if len(values) < least:
        return None
    y = [float(v) for v in values]
    mean = sum(y) / len(y)
    if mean <= 0 or max(y) == min(y):
        return None
    # scipy.stats takes 0.4-0.7 s to import (docs/scaling.md): only where a trend is judged
    from scipy import stats as sps  # noqa: PLC0415

    x = list(range(len(y)))
    p = float(sps.kendalltau(x, y).pvalue)
    slope = float(sps.theilslopes(y, x).slope)
    across = slope * (len(y) - 1) / mean
    if math.isnan(p) or p >= alpha or abs(across) < change:
        return None
    return Trend(change=across, p=p, n=len(y), mean=mean)


def repetition_trend(tps: Sequence[float]) -> Trend | None:
    """A cell's complete repetitions' tps in repetition order: drifting, or None."""
    return trend(tps, alpha=REP_ALPHA, change=REP_CHANGE, least=MIN_REPETITIONS)


def per_second(
    series: Sequence[SeriesPoint],
    window: tuple[float, float],
    spans: Mapping[str, tuple[float, float]] | None = None,
) -> list[float]:
    """Transactions per second of all clients together, in each whole second of
    ``window`` (a second partly outside it is left out); ``spans``, each client's first
    to last transaction, narrow its edge buckets as the windowed tps does
    (:func:`~collector.stats.tps.transactions_in`)."""
    by_client: dict[str, list[SeriesPoint]] = defaultdict(list)
    for p in series:
        by_client[p.client].append(p)
    start, end = window
    return [
        sum(
            transactions_in(points, start + k, start + k + 1, span=(spans or {}).get(client))
            for client, points in by_client.items()
        )
        for k in range(int(end - start))
    ]


def run_trend(
    series: Sequence[SeriesPoint],
    window: tuple[float, float] | None,
    spans: Mapping[str, tuple[float, float]] | None = None,
) -> Trend | None:
    """A run whose tps was still rising or falling through its window, or None (no
    window, too short to judge, or steady)."""
    if window is None:
        return None
    rates = per_second(series, window, spans)
    return trend(rates, alpha=RUN_ALPHA, change=RUN_CHANGE, least=MIN_SECONDS)


def run_words(fact: Any) -> str | None:
    """The run fact as a report says it: ``tps fell 24 % through the window``."""
    if not isinstance(fact, dict) or not isinstance(fact.get("change"), int | float):
        return None
    direction = "rose" if fact["change"] > 0 else "fell"
    return f"tps {direction} {abs(fact['change']) * 100:.0f} % through the window"


def repetition_words(t: Trend) -> str:
    """``tps fell 12 % across 6 repetitions (Kendall's p 0.003)``."""
    return (
        f"tps {t.direction} {abs(t.change) * 100:.0f} % across {t.n} repetitions"
        f" (Kendall's p {t.p:.3f}): the drive drifts between repetitions (its state, TRIM,"
        " heat), so their mean is no one state's figure"
    )
