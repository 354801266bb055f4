"""Latency under load, as the reports show it: per drive (and test without its rate),
one :class:`LoadStep` per rate step, from the run facts ``latency_window`` that gather
stored (:mod:`collector.stats.latency`), ordered by rate. The terminal's latency-vs-throughput
table, the HTML plot of the same and the CSV/JSON rows all come from :func:`steps`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from collector.records import RunStatus
from collector.report import CellView, ScenarioView


@dataclass(frozen=True)
class LoadStep:
    """One rate step of one drive: a cell whose complete runs have a latency window.

    Latency figures are the mean over those runs of each run's figure over its window
    (where every client ran); ``late`` and ``skipped`` the mean per run; ``tps`` the
    cell's mean tps over the same window (what the drive achieved). ``not_sustained``
    counts the runs the lag rule (:func:`collector.parse.lag.read_lag`) says did not
    hold the rate, ``reasons`` its words for them."""

    drive: str
    group: str
    test: str
    rate_per_host: int | None
    hosts: int
    rate_per: str
    tps: float | None
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    late: float | None
    skipped: float | None
    latency_limit_ms: float | None
    runs: int
    not_sustained: int
    lag_runs: int
    reasons: tuple[str, ...] = ()

    @property
    def rate_total(self) -> int | None:
        """The rate asked of all the cell's client hosts together (per host x hosts)."""
        return None if self.rate_per_host is None else self.rate_per_host * self.hosts

    @property
    def sustained(self) -> bool | None:
        """False when the lag rule says some run did not hold its rate; None unread."""
        if not self.lag_runs:
            return None
        return self.not_sustained == 0

    @property
    def held(self) -> str:
        """What the table's "rate held" column says."""
        if self.rate_per_host is None:
            return "unthrottled"
        if self.sustained is None:
            return "-"
        if self.sustained:
            return "yes"
        if self.not_sustained < self.lag_runs:
            return f"not sust. {self.not_sustained}/{self.lag_runs}"
        return "not sustained"


def group_of(cv: CellView) -> str:
    """The cell's test without its rate: the rate steps of one curve share it."""
    spec = cv.stats.spec
    return replace(spec, params={**spec.params, "rate": 0}).test


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _windows(view: ScenarioView) -> dict[int, dict[str, Any]]:
    return {
        f.run_id: f.value
        for f in view.facts
        if f.scope == "run" and f.key == "latency_window" and isinstance(f.value, dict)
    }


def _step(cv: CellView, windows: dict[int, dict[str, Any]]) -> LoadStep | None:
    done = [
        windows[r.run_id]
        for r in cv.stats.runs
        if r.status == RunStatus.COMPLETE and r.run_id in windows
    ]
    if not done:
        return None

    def mean(key: str) -> float | None:
        return _mean([float(w[key]) for w in done if w.get(key) is not None])

    lags = [w["lag"] for w in done if isinstance(w.get("lag"), dict)]
    bad = [lag for lag in lags if not lag.get("sustained")]
    rate = cv.stats.spec.params.get("rate") or None
    return LoadStep(
        drive=cv.drive,
        group=group_of(cv),
        test=cv.test,
        rate_per_host=int(rate) if rate else None,
        hosts=cv.stats.clients,
        rate_per=str(done[-1].get("rate_per") or "host"),
        tps=cv.stats.tps.mean if cv.stats.tps else mean("tps"),
        p50_ms=mean("p50_ms"),
        p95_ms=mean("p95_ms"),
        p99_ms=mean("p99_ms"),
        max_ms=mean("max_ms"),
        late=mean("late"),
        skipped=mean("skipped"),
        latency_limit_ms=mean("latency_limit_ms"),
        runs=len(done),
        not_sustained=len(bad),
        lag_runs=len(lags),
        reasons=tuple(dict.fromkeys(str(lag.get("reason")) for lag in bad)),
    )


def steps(view: ScenarioView) -> dict[tuple[str, str], list[LoadStep]]:
    """Per (drive, test without the rate), in the view's drive order: its rate steps
    ordered by total rate (an unthrottled cell last: the drive's peak). Only groups
    with at least one rate step (``-R``) are kept."""
    windows = _windows(view)
    out: dict[tuple[str, str], list[LoadStep]] = {}
    order = {d: i for i, d in enumerate(view.drives)}
    for cv in sorted(view.cells, key=lambda c: order.get(c.drive, len(order))):
        step = _step(cv, windows)
        if step is not None:
            out.setdefault((step.drive, step.group), []).append(step)
    for group in out.values():
        group.sort(key=lambda s: (s.rate_total is None, s.rate_total or 0))
    return {k: v for k, v in out.items() if any(s.rate_per_host for s in v)}


def step_rows(view: ScenarioView) -> list[dict[str, Any]]:
    """The steps as plain rows (CSV/JSON)."""
    rows = []
    for group in steps(view).values():
        for s in group:
            rows.append(
                {
                    "scenario": view.info.name,
                    "drive": s.drive,
                    "test": s.test,
                    "group": s.group,
                    "rate_per": s.rate_per,
                    "rate_per_host": s.rate_per_host,
                    "client_hosts": s.hosts,
                    "rate_total": s.rate_total,
                    "tps": s.tps,
                    "p50_ms": s.p50_ms,
                    "p95_ms": s.p95_ms,
                    "p99_ms": s.p99_ms,
                    "max_ms": s.max_ms,
                    "late": s.late,
                    "skipped": s.skipped,
                    "latency_limit_ms": s.latency_limit_ms,
                    "runs": s.runs,
                    "runs_not_sustained": s.not_sustained if s.lag_runs else None,
                    "rate_sustained": s.sustained,
                    "lag_reasons": "; ".join(s.reasons) or None,
                }
            )
    return rows


def lag_lines(view: ScenarioView) -> list[str]:
    """One line per rate step some run of which did not hold its rate: the lag rule's words."""
    out = []
    for group in steps(view).values():
        for s in group:
            for reason in s.reasons:
                runs = f" ({s.not_sustained} of {s.lag_runs} runs)" if s.lag_runs > 1 else ""
                out.append(f"{s.drive} {s.test}{runs}: {reason}")
    return out
