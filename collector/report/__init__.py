"""Reports: every publisher takes a :class:`ScenarioView` (loaded from the store by
:func:`load`, the statistics already done) and writes one format: ``terminal``
(rich), ``html`` (self-contained, matplotlib SVG), ``export`` (CSV and JSON of
every figure), ``compare`` (two scenarios or two drives, Welch's t-test)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from collector.errors import DrivelabError
from collector.records import LatencyHistogram, RunStatus, Sample, SeriesPoint
from collector.stats import drift
from collector.stats import tps as stats
from collector.store import Fact, ScenarioInfo, Store
from collector.verdicts import caveats as caveat
from collector.verdicts.pretest import PRETEST_PREFIXES

TELEMETRY_PREFIX = "drivelab_device_"
#: the per-second latency series gather stores (collector.stats.latency)
LATENCY_PREFIXES = ("drivelab_latency_seconds", "drivelab_schedule_lag_seconds")
#: run facts (``drivelab gather``, from db/database.json) a report shows for each cell
DATABASE_KEYS = (
    "cache",
    "client_bound",
    "wal_placement",
    "db_wal_device",
    "db_memory_bytes",
    "db_memory_source",
    "db_sizes_bytes",
    "db_init_seconds",
    "db_caps_lifted",
    "db_init_at_once",
    "postgresql_version",
)


@dataclass(frozen=True)
class CellView:
    """A cell's statistics plus what its plots need."""

    stats: stats.CellStats
    baseline_ratio: stats.Ratio | None
    is_baseline: bool
    series: tuple[SeriesPoint, ...]
    series_run: int | None
    window: tuple[float, float] | None
    histogram: LatencyHistogram | None
    #: distinct database warnings of its runs ("fits in RAM: measures RAM, not the drive")
    warnings: tuple[str, ...] = ()
    #: :data:`DATABASE_KEYS` facts of its latest run that has them
    database: Mapping[str, Any] = field(default_factory=dict)
    #: the per-second latency and schedule lag samples of the run ``series`` is of
    #: (``drivelab_latency_seconds``, ``drivelab_schedule_lag_seconds``: collector.stats.latency)
    latency: tuple[Sample, ...] = ()
    #: what of its complete runs says its tps is not (only) the drive's
    #: (:mod:`collector.verdicts.caveats`): marked on the figure in every report
    caveats: tuple[caveat.Caveat, ...] = ()

    @property
    def caveat_codes(self) -> tuple[str, ...]:
        return tuple(c.code for c in self.caveats)

    @property
    def drift(self) -> str | None:
        """Its complete repetitions' trend in words (:mod:`collector.stats.drift`), or None."""
        found = drift.repetition_trend(self.stats.tps_values)
        return drift.repetition_words(found) if found is not None else None

    @property
    def cache_defeated(self) -> bool | None:
        """False when a complete run's cache was not defeated; True when its latest run
        with cache figures says it was; None when no run had the figures."""
        if caveat.CACHE_NOT_DEFEATED in self.caveat_codes:
            return False
        verdict = (self.database.get("cache") or {}).get("verdict")
        return True if verdict == "cache defeated" else None

    @property
    def drive(self) -> str:
        return self.stats.spec.drive

    @property
    def test(self) -> str:
        return self.stats.spec.test


@dataclass(frozen=True)
class ScenarioView:
    info: ScenarioInfo
    baseline: str | None
    cells: tuple[CellView, ...]
    telemetry: tuple[Sample, ...] = ()
    pretests: tuple[Sample, ...] = ()
    facts: tuple[Fact, ...] = ()
    drives: tuple[str, ...] = field(default_factory=tuple)


def open_store(path) -> Store:
    """The store for reading; a missing or empty store is a one-line error."""
    store = Store.open(path, create=False)
    if not store.scenarios():
        store.close()
        raise DrivelabError(f"results store {store.path} holds no scenarios yet: run one first")
    return store


def run_warnings(repetition: int, rf: Mapping[str, Any]) -> list[str]:
    """What a run's facts warn about: datasets that fit in RAM, a cache not defeated,
    clients that were CPU-bound, a DB host on an emulated CPU (the VM lab under TCG)."""
    out = []
    if rf.get("db_warning"):
        out.append(str(rf["db_warning"]))
    cache = rf.get("cache") or {}
    if cache.get("verdict") == "cache not defeated":
        out.append(f"run {repetition}: cache not defeated: {cache.get('reason')}")
    lab = rf.get("lab") or {}
    if isinstance(lab, Mapping) and lab.get("accel") == "tcg":
        # one line per cell (the warnings are kept once each): every run of a VM lab is so
        out.append(
            "emulated CPU: the DB host was a qemu VM without hardware acceleration (TCG);"
            " these tps measure the emulation, not the drive"
        )
    if rf.get("client_bound"):
        out.append(
            f"run {repetition}: client-bound: this run measured the client, not the drive"
            f" ({', '.join(rf['client_bound'])} above 90% CPU)"
        )
    return out


def load(store: Store, name: str, baseline: str | None = None) -> ScenarioView:
    """Everything a report shows about scenario ``name``, statistics done."""
    info = store.scenario(name)
    cells = store.cells(info.id)
    drives = tuple(dict.fromkeys(spec.drive for _, spec in cells))
    if baseline is not None and baseline not in drives:
        raise DrivelabError(
            f"baseline drive {baseline!r} is not in scenario {name!r} (drives: {', '.join(drives)})"
        )
    base = baseline or info.baseline_drive or (drives[0] if drives else None)
    if base not in drives:
        base = drives[0] if drives else None
    facts = store.facts(info.id)
    run_facts: dict[int, dict[str, Any]] = defaultdict(dict)
    for f in facts:
        if f.scope == "run" and f.run_id is not None:
            run_facts[f.run_id][f.key] = f.value
    built = [_built_cell(store, cell_id, spec, run_facts) for cell_id, spec in cells]
    by_test = {(b.stats.spec.test, b.stats.spec.drive): b.stats for b in built}
    views = []
    for b in built:
        cs = b.stats
        ref = by_test.get((cs.spec.test, base))
        r = None
        if ref is not None and ref is not cs:
            r = stats.ratio(cs.tps_values, ref.tps_values)
        elif ref is cs and cs.tps_values:
            r = stats.Ratio(1.0, 1.0, 1.0)
        views.append(
            CellView(
                cs,
                r,
                cs.spec.drive == base,
                b.example,
                b.example_run,
                b.window,
                b.histogram,
                b.warnings,
                b.database,
                b.latency,
                b.caveats,
            )
        )
    return ScenarioView(
        info=info,
        baseline=base,
        cells=tuple(views),
        telemetry=tuple(store.samples(info.id, metric_prefix=TELEMETRY_PREFIX)),
        pretests=tuple(
            s for p in PRETEST_PREFIXES for s in store.samples(info.id, metric_prefix=p)
        ),
        facts=tuple(facts),
        drives=drives,
    )


@dataclass(frozen=True)
class _BuiltCell:
    """One cell's statistics and what its view shows beside them, before the ratios."""

    stats: stats.CellStats
    example: tuple[SeriesPoint, ...]
    example_run: int | None
    window: tuple[float, float] | None
    histogram: LatencyHistogram | None
    warnings: tuple[str, ...]
    database: Mapping[str, Any]
    latency: tuple[Sample, ...]
    caveats: tuple[caveat.Caveat, ...]


def _built_cell(
    store: Store, cell_id: int, spec: Any, run_facts: Mapping[int, Mapping[str, Any]]
) -> _BuiltCell:
    """A cell's runs read and their statistics done: its first complete run with a series
    is its example (series, window, latency samples); the histograms of its complete
    runs merged; every run's warnings, once each; the caveats of its complete runs."""
    warnings: dict[str, None] = {}
    database: dict[str, Any] = {}
    runs = []
    example: tuple[SeriesPoint, ...] = ()
    example_run = None
    example_window = None
    latency: tuple[Sample, ...] = ()
    hists: list[LatencyHistogram] = []
    run_caveats: list[tuple[str, ...]] = []
    for run in store.runs(cell_id):
        clients = store.client_results(run.id)
        series = store.series(run.id)
        rs = stats.run_stats(
            clients,
            series,
            status=run.status,
            reason=run.reason,
            repetition=run.repetition,
            run_id=run.id,
            attempt=run.attempt,
        )
        runs.append(rs)
        rf = run_facts.get(run.id, {})
        warnings.update(dict.fromkeys(run_warnings(run.repetition, rf)))
        database = {k: rf[k] for k in DATABASE_KEYS if k in rf} or database
        if run.status == RunStatus.COMPLETE:
            run_caveats.append(caveat.run_caveats(rf))
            hists += [c.histogram for c in clients if c.histogram is not None]
            if example_run is None and series:
                example, example_run, example_window = tuple(series), run.repetition, rs.window
                latency = _latency_samples(store, run.id)
    return _BuiltCell(
        stats.cell_stats(spec, runs, cell_id), example, example_run, example_window,
        stats.merge_histograms(hists), tuple(warnings), database, latency,
        caveat.cell_caveats(run_caveats),
    )  # fmt: skip


def _latency_samples(store: Store, run_id: int) -> tuple[Sample, ...]:
    return tuple(s for p in LATENCY_PREFIXES for s in store.samples(run_id=run_id, metric_prefix=p))


def load_all(
    store: Store, names: Sequence[str] | None, baseline: str | None = None
) -> list[ScenarioView]:
    names = list(names) if names else [s.name for s in store.scenarios()]
    return [load(store, n, baseline) for n in names]


# ------------------------------------------------------------------ shared formatting


def fmt_tps(s: stats.Summary | None) -> str:
    if s is None:
        return "-"
    if s.half_width is None:
        return f"{s.mean:,.1f}"
    return f"{s.mean:,.1f} ± {s.half_width:,.1f}"


def fmt_ratio(r: stats.Ratio | None, is_baseline: bool = False) -> str:
    if is_baseline:
        return "baseline"
    if r is None:
        return "-"
    if r.ci_low is None:
        return f"{r.ratio:.2f}x"
    return f"{r.ratio:.2f}x [{r.ci_low:.2f}-{r.ci_high:.2f}]"


def fmt_cache(cache: Mapping[str, Any] | None) -> str:
    """A run's cache figures in one phrase: buffer hit ratio, share of the reads
    PostgreSQL missed that reached the drive, verdict."""
    if not cache:
        return "-"
    hit = cache.get("hit_ratio")
    share = cache.get("drive_share")
    parts = [
        "hit " + ("-" if hit is None else f"{hit * 100:.1f}%"),
        "drive " + ("-" if share is None else f"{share * 100:.0f}%"),
    ]
    return f"{', '.join(parts)}: {cache.get('verdict', '?')}"


def fmt_ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.2f}"


def fmt_runs(cs: stats.CellStats) -> str:
    text = str(cs.complete)
    extra = []
    if cs.partial:
        extra.append(f"{cs.partial} partial")
    if cs.failed:
        extra.append(f"{cs.failed} failed")
    return text + (f" (+{', '.join(extra)})" if extra else "")


def cell_rows(view: ScenarioView) -> list[dict]:
    """The summary table as plain rows: what the terminal, HTML and CSV all show."""
    rows = []
    for cv in view.cells:
        cs = cv.stats
        t = cs.tps
        r = cv.baseline_ratio
        rows.append(
            {
                "scenario": view.info.name,
                "drive": cs.spec.drive,
                "test": cs.spec.test,
                "tps_mean": t.mean if t else None,
                "tps_stddev": t.stddev if t else None,
                "tps_ci_low": t.ci_low if t else None,
                "tps_ci_high": t.ci_high if t else None,
                "tps_cv": t.cv if t else None,
                "tps_reported_sum_mean": cs.tps_reported.mean if cs.tps_reported else None,
                "baseline_drive": view.baseline,
                "ratio_to_baseline": r.ratio if r else None,
                "ratio_ci_low": r.ci_low if r else None,
                "ratio_ci_high": r.ci_high if r else None,
                "latency_p50_s": stats.percentile(cv.histogram, 0.50),
                "latency_p95_s": cs.latency_p95_s.mean if cs.latency_p95_s else None,
                "latency_p99_s": stats.percentile(cv.histogram, 0.99),
                "latency_p999_s": stats.percentile(cv.histogram, 0.999),
                "latency_avg_s": cs.latency_avg_s.mean if cs.latency_avg_s else None,
                "clients": cs.clients,
                "runs_complete": cs.complete,
                "runs_partial": cs.partial,
                "runs_failed": cs.failed,
                "db_warning": "; ".join(cv.warnings) or None,
                # the caveats on this figure (collector.verdicts.caveats), as booleans a
                # script can filter on and as their codes
                "client_bound": caveat.CLIENT_BOUND in cv.caveat_codes,
                "cache_defeated": cv.cache_defeated,
                "checkpoint_in_window": caveat.CHECKPOINT in cv.caveat_codes,
                "caveats": " ".join(cv.caveat_codes) or None,
                "wal_placement": cv.database.get("wal_placement"),
                "drift": cv.drift,
                "wal_drive": cs.spec.wal_drive,
                "wal_device": (cv.database.get("db_wal_device") or {}).get("device"),
            }
        )
    return rows


def run_rows(view: ScenarioView) -> list[dict]:
    rows = []
    spreads = {
        key: {f.run_id: f.value for f in view.facts if f.scope == "run" and f.key == key}
        for key in ("launch_skew_s", "connect_spread_s", "start_lead_s", "launch_late_s")
    }
    for cv in view.cells:
        for r in cv.stats.runs:
            rows.append(
                {
                    "scenario": view.info.name,
                    "drive": cv.drive,
                    "test": cv.test,
                    "repetition": r.repetition,
                    "attempt": r.attempt,
                    "status": r.status.value,
                    "reason": r.reason,
                    "clients": r.clients,
                    "tps": r.tps,
                    "windowed": r.windowed,
                    "tps_windowed": r.tps_windowed,
                    "tps_reported_sum": r.tps_reported_sum,
                    "window_start": r.window[0] if r.window else None,
                    "window_end": r.window[1] if r.window else None,
                    "start_skew_s": r.start_skew_s,
                    "launch_skew_s": spreads["launch_skew_s"].get(r.run_id),
                    "connect_spread_s": spreads["connect_spread_s"].get(r.run_id),
                    "start_lead_s": spreads["start_lead_s"].get(r.run_id),
                    "launch_late_s": spreads["launch_late_s"].get(r.run_id),
                    "latency_avg_s": r.latency_avg_s,
                    "latency_p50_s": r.latency_p50_s,
                    "latency_p95_s": r.latency_p95_s,
                    "latency_p99_s": r.latency_p99_s,
                    "failed_transactions": r.failed,
                }
            )
    return rows
