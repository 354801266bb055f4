"""Latency under load: what a run's per-transaction logs say about its latency, second
by second and over the window where every client ran, and whether a ``--rate`` run
held its rate.

:func:`window_summary` reads a gathered run (:class:`Gathered`: its clients'
per-second latency series, :class:`~collector.records.LatencySeries`, kept by gather
from the ``-l`` logs) into one dict over the concurrent window (the window the run's
tps is counted in, :func:`collector.stats.tps.concurrent_window`), in whole seconds:

============== ==================================================================
key            value
============== ==================================================================
p50_ms ...     p50, p95, p99 (nearest rank, within 1/64) and max latency, ms
transactions   successful transactions that completed in the window
tps            transactions / seconds
seconds        whole seconds of the window
skipped        transactions pgbench skipped (``-L`` with ``-R``) in the window
late           successful transactions slower than ``-L`` (None without ``-L``)
rate_per_host  pgbench ``-R`` of each client host (None without ``--rate``)
rate_total     ``rate_per_host`` x client hosts
rate_per       ``host`` or ``total``: how the scenario gave the rate
latency_limit_ms  pgbench ``-L`` (None without it)
lag            the lag reading (:func:`collector.parse.lag.read_lag`) as a dict,
               None without ``--rate``
============== ==================================================================

:func:`add_latency` stores it as the run fact ``latency_window`` (and the lag reading
as ``schedule_lag``), each client's whole-run figures as ``latency_clients``, and the
per-second series as samples ``drivelab_latency_seconds{client, quantile}`` (quantile
``0.5``, ``0.95``, ``0.99``, and ``1`` for the max; no ``client`` label: all clients
merged) plus ``drivelab_schedule_lag_seconds{client}`` (mean lag per second) with
``--rate``. With a sampled log (``--sampling-rate``) every figure is of the sample.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from collector.cell import total_rate
from collector.parse.lag import read_lag
from collector.parse.latencyseries import latency_points, merge_latency_series, window_percentiles
from collector.records import CellSpec, RunRecord, Sample
from collector.records.txlog import LatencyPoint, LatencySeries

if TYPE_CHECKING:
    from collector.stats.tps import RunStats


class Gathered(Protocol):
    """What this module reads of a gathered run (:class:`collector.gather.folder.GatheredRun`
    is one; statistics take records and know no gathering)."""

    @property
    def cell(self) -> CellSpec: ...
    @property
    def run(self) -> RunRecord: ...
    @property
    def latency(self) -> Mapping[str, LatencySeries]: ...
    def stats(self) -> RunStats: ...


G = TypeVar("G", bound=Gathered)

LATENCY_METRIC = "drivelab_latency_seconds"
LAG_METRIC = "drivelab_schedule_lag_seconds"
#: quantile label -> the LatencyPoint field it is read from (the max is the 1-quantile)
QUANTILES = {"0.5": "p50_s", "0.95": "p95_s", "0.99": "p99_s", "1": "max_s"}
#: the keys of :func:`window_summary`'s dict, in order (stable: other modules read them)
SUMMARY_KEYS = (
    "p50_ms", "p95_ms", "p99_ms", "max_ms", "transactions", "tps", "seconds", "skipped",
    "late", "rate_per_host", "rate_total", "rate_per", "latency_limit_ms", "lag",
)  # fmt: skip
MS = 1e3


def window_seconds(window: tuple[float, float] | None) -> tuple[int, int] | None:
    """The whole epoch seconds ``[s, s + 1)`` inside ``window`` (first, last, both
    included); when the window holds no whole second, the seconds it touches."""
    if window is None:
        return None
    start, end = window
    first, last = math.ceil(start), math.floor(end) - 1
    if last < first:
        first, last = math.floor(start), math.ceil(end) - 1
    return first, last


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * MS


def _span(series: LatencySeries, first: int, last: int) -> slice:
    lo = min(max(first - series.first_second, 0), series.seconds)
    hi = min(max(last - series.first_second + 1, lo), series.seconds)
    return slice(lo, hi)


def _rate(g: Gathered) -> tuple[int | None, str, float | None]:
    options = g.run.facts.get("pgbench_options") or {}
    rate = g.cell.params.get("rate") or options.get("rate") or None
    limit = options.get("latency_limit") or g.cell.params.get("latency_limit") or None
    return (int(rate) if rate else None), str(options.get("rate_per") or "host"), limit


def summarize_span(
    series: LatencySeries,
    first: int,
    last: int,
    points: Sequence[LatencyPoint] | None = None,
    rate: float | None = None,
) -> dict[str, Any]:
    """Latency figures of ``series`` over the whole seconds ``first`` to ``last``:
    percentiles and max (ms), transactions, tps, seconds, skipped, late, the lag reading
    (against ``rate``, the rate asked of the series' clients together, when given)."""
    at = _span(series, first, last)
    pct = window_percentiles(series, first, last, (0.50, 0.95, 0.99))
    n = int(np.asarray(series.transactions[at]).sum())
    seconds = last - first + 1
    top = float(np.asarray(series.max_us[at]).max()) / 1e3 if n else None
    pts = (points if points is not None else latency_points(series))[at]
    lag = read_lag(pts, rate)
    return {
        "p50_ms": _ms(pct[0.50]),
        "p95_ms": _ms(pct[0.95]),
        "p99_ms": _ms(pct[0.99]),
        "max_ms": top,
        "transactions": n,
        "tps": n / seconds if seconds > 0 else None,
        "seconds": seconds,
        "skipped": int(np.asarray(series.skipped[at]).sum()),
        "late": None if series.late is None else int(np.asarray(series.late[at]).sum()),
        "lag": None if lag is None else asdict(lag),
    }


def _merged(g: Gathered) -> LatencySeries | None:
    """Every client's series merged; None unless every client of the run has one."""
    per = getattr(g, "latency", None) or {}
    names = [c.client for c in g.run.clients]
    if not names or any(per.get(n) is None for n in names):
        return None
    return merge_latency_series(per[n] for n in names)


def window_summary(g: Gathered) -> dict[str, Any] | None:
    """The run's latency over the window where every client ran (keys: the module's
    table, :data:`SUMMARY_KEYS`). ``None`` when some client kept no per-transaction
    log (``log: aggregate`` or ``none``, a failed client) or the clients never ran
    together."""
    merged = _merged(g)
    if merged is None:
        return None
    span = window_seconds(g.stats().window)
    if span is None:
        return None
    rate, rate_per, limit = _rate(g)
    hosts = len(g.run.clients)
    total = total_rate(rate, hosts)
    out = summarize_span(merged, *span, rate=total)
    out |= {
        "rate_per_host": rate,
        "rate_total": total,
        "rate_per": rate_per,
        "latency_limit_ms": limit,
    }
    return {k: out[k] for k in SUMMARY_KEYS}


def client_summaries(g: Gathered) -> dict[str, dict[str, Any]]:
    """Each client's latency over its own whole run (the seconds its log spans). Its lag
    reading is not held against the rate: the first and last seconds are partial."""
    out = {}
    for name, series in (getattr(g, "latency", None) or {}).items():
        if series is None or not series.seconds:
            continue
        first = series.first_second
        out[name] = summarize_span(series, first, first + series.seconds - 1)
    return out


def series_samples(per_client: Mapping[str, LatencySeries]) -> list[Sample]:
    """The per-second p50/p95/p99/max of each client and of all clients merged (no
    ``client`` label), and the mean schedule lag per second with ``--rate``, as samples
    stamped with the second's start (seconds without a transaction left out)."""
    parts = {k: v for k, v in per_client.items() if v is not None}
    if not parts:
        return []
    named: list[tuple[dict[str, str], LatencySeries]] = [
        ({"client": k}, v) for k, v in sorted(parts.items())
    ]
    if len(parts) > 1:
        named.append(({}, merge_latency_series(parts[k] for k in sorted(parts))))
    else:
        named.append(({}, next(iter(parts.values()))))
    out = []
    for labels, series in named:
        for p in latency_points(series):
            if not p.transactions:
                continue
            for q, attr in QUANTILES.items():
                value = getattr(p, attr)
                if value is not None:
                    out.append(
                        Sample(LATENCY_METRIC, value, "seconds", labels | {"quantile": q}, p.start)
                    )
            if p.lag_avg_s is not None:
                out.append(Sample(LAG_METRIC, p.lag_avg_s, "seconds", labels, p.start))
    return out


def add_latency(g: G) -> G:
    """``g`` with its latency facts (``latency_window``, ``schedule_lag``,
    ``latency_clients``) and per-second samples; unchanged without latency series."""
    per = {k: v for k, v in (getattr(g, "latency", None) or {}).items() if v is not None}
    if not per:
        return g
    facts = dict(g.run.facts)
    summary = window_summary(g)
    if summary is not None:
        facts["latency_window"] = summary
        facts["schedule_lag"] = summary["lag"]
    facts["latency_clients"] = client_summaries(g)
    samples = g.run.samples + tuple(series_samples(per))
    return replace(g, run=replace(g.run, facts=facts, samples=samples))
