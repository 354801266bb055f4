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
