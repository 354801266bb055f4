"""The report's tables as rows of words (no format): the pre-tests' device figures,
iostat's summary per drive over its runs' windows, the latency percentiles per cell.
:mod:`collector.report.findings` computes them once per view; the publishers lay them out."""

from __future__ import annotations

from collections import defaultdict

from collector.records import RunStatus
from collector.report import ScenarioView
from collector.stats import tps as stats
from collector.verdicts.pretest import summarize


def _num(value: float | None, scale: float = 1.0, fmt: str = ",.0f") -> str:
    return "-" if value is None else format(value / scale, fmt)


PRETEST_COLUMNS = (
    "drive",
    "write cache",
    "seq read MB/s",
    "seq write MB/s",
    "4k rand read IOPS qd1/qd32",
    "4k rand write IOPS qd1/qd32",
    "access ms mean/p99",
    "8k page read qd1 / WAL 8k fdatasync IOPS",
    "fdatasync /s",
)


def pretest_rows(view: ScenarioView) -> list[list[str]]:
    """The device figures per drive and write cache state (fio, pg_test_fsync)."""
    rows = []
    order = {d: i for i, d in enumerate(view.drives)}
    for p in sorted(summarize(view.pretests), key=lambda p: (order.get(p.drive, 99), p.drive)):
        rows.append(
            [
                p.drive,
                p.write_cache,
                _num(p.seq_read_bps, 1e6, ",.1f"),
                _num(p.seq_write_bps, 1e6, ",.1f"),
                f"{_num(p.rand_read_qd1)} / {_num(p.rand_read_qd32)}",
                f"{_num(p.rand_write_qd1)} / {_num(p.rand_write_qd32)}",
                f"{_num(p.latency_mean_s, 1e-3, '.3f')} / {_num(p.latency_p99_s, 1e-3, '.3f')}",
                f"{_num(p.page_read_qd1)} / {_num(p.wal_writes_per_s)}",
                _num(p.fsync_per_s, 1.0, ",.0f"),
            ]
        )
    return rows


def device_drives(view: ScenarioView) -> dict[str, str]:
    """Kernel device name -> the drive (filesystem) it carries, from the runs' device
    facts: ``loop0`` -> ``nvme``; a RAID member -> its set's name."""
    out: dict[str, str] = {}
    for f in view.facts:
        if f.scope != "device" or not isinstance(f.value, dict):
            continue
        for d in f.value.get("drives") or []:
            if isinstance(d, dict) and d.get("kname"):
                out[str(d["kname"])] = f.key
    return out


IOSTAT_COLUMNS = ("drive", "r/s", "w/s", "rMB/s", "wMB/s", "r_await ms", "w_await ms", "%util")
#: (metric, factor from base units, format) of each column after the drive
_IOSTAT = (
    ("drivelab_device_read_iops", 1.0, ",.0f"),
    ("drivelab_device_write_iops", 1.0, ",.0f"),
    ("drivelab_device_read_bytes_per_second", 1e-6, ",.1f"),
    ("drivelab_device_write_bytes_per_second", 1e-6, ",.1f"),
    ("drivelab_device_read_await_seconds", 1e3, ",.2f"),
    ("drivelab_device_write_await_seconds", 1e3, ",.2f"),
    ("drivelab_device_util_ratio", 100.0, ".0f"),
)


def iostat_rows(view: ScenarioView) -> list[list[str]]:
    """Per drive, iostat's summary over the windows of its cells' complete runs: the mean
    of each per-second device figure of the drive's own device(s), in iostat's units."""
    names = device_drives(view)
    windows: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for cv in view.cells:
        windows[cv.drive] += [
            r.window for r in cv.stats.runs if r.status == RunStatus.COMPLETE and r.window
        ]
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in view.telemetry:
        drive = names.get(s.labels.get("device", ""))
        if drive is None or s.timestamp is None:
            continue
        if any(lo <= s.timestamp <= hi for lo, hi in windows.get(drive, ())):
            values[drive][s.metric].append(s.value)
    rows = []
    for drive in (d for d in view.drives if d in values):
        row = [drive]
        for metric, factor, fmt in _IOSTAT:
            got = values[drive].get(metric)
            row.append(format(sum(got) / len(got) * factor, fmt) if got else "-")
        rows.append(row)
    return rows


PERCENTILE_COLUMNS = ("drive", "test", "p50 ms", "p95 ms", "p99 ms", "p99.9 ms", "max ms")


def percentile_rows(view: ScenarioView) -> list[list[str]]:
    """Per cell, the latency percentiles of its complete runs' merged transaction logs."""
    rows = []
    for cv in view.cells:
        h = cv.histogram
        if h is None:
            continue
        qs = [stats.percentile(h, q) for q in (0.50, 0.95, 0.99, 0.999, 1.0)]
        rows.append([cv.drive, cv.test, *("-" if q is None else f"{q * 1e3:,.2f}" for q in qs)])
    return rows


CHECKPOINT_COLUMNS = (
    "drive", "test", "checkpoints", "buffers: checkpointer", "bgwriter", "backends",
    "backend fsyncs", "WAL MB", "full-page images %",
)  # fmt: skip


def checkpoint_rows(view: ScenarioView) -> list[list[str]]:
    """Per cell, what the server wrote during its complete runs, mean per run (the run
    facts ``pg_checkpoints`` and ``pg_wal``: the counters after the run less before):
    checkpoints, buffers written by whom, backends' own fsyncs, WAL and its share of
    full-page images. Cells whose runs have no counters are left out."""
    facts: dict[int, dict[str, dict]] = defaultdict(dict)
    for f in view.facts:
        if f.scope == "run" and f.key in ("pg_checkpoints", "pg_wal") and isinstance(f.value, dict):
            facts[f.run_id][f.key] = f.value
    rows = []
    for cv in view.cells:
        runs = [facts[r.run_id] for r in cv.stats.runs
                if r.status == RunStatus.COMPLETE and facts.get(r.run_id)]  # fmt: skip
        if not runs:
            continue

        def mean(key: str, name: str, runs=runs) -> float | None:
            got = [v for r in runs if isinstance(v := (r.get(key) or {}).get(name), int | float)]
            return sum(got) / len(got) if got else None

        timed, requested = mean("pg_checkpoints", "timed"), mean("pg_checkpoints", "requested")
        checkpoints = (
            None if timed is None and requested is None else (timed or 0) + (requested or 0)
        )
        records, fpi = mean("pg_wal", "records"), mean("pg_wal", "fpi")
        wal = mean("pg_wal", "bytes")
        rows.append([
            cv.drive, cv.test, _num(checkpoints, 1.0, ",.1f"),
            *(_num(mean("pg_checkpoints", k)) for k in
              ("buffers_checkpoint", "buffers_clean", "buffers_backend", "backend_fsyncs")),
            _num(wal, 1e6, ",.1f"),
            _num(100 * fpi / records if records and fpi is not None else None, 1.0, ".1f"),
        ])  # fmt: skip
    return rows


#: the HTML's tables of a scenario: (heading, columns, the Findings field holding its
#: rows, the first column with numbers)
TABLES = (
    ("Latency percentiles (complete runs' logs)", PERCENTILE_COLUMNS, "percentiles", 2),
    ("Checkpoints, buffers and WAL (mean per run)", CHECKPOINT_COLUMNS, "checkpoints_table", 2),
    ("Drives under load (iostat over the runs' windows)", IOSTAT_COLUMNS, "iostat", 1),
)
