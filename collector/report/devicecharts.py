"""The device figures' plots: the telemetry of each run's window per drive (in words and
human units) and the pre-tests' block-size sweep. Drawn as every figure of the page is
(:func:`collector.report.charts._svg`)."""

from __future__ import annotations

from collections import defaultdict

from matplotlib.figure import Figure

from collector.report import ScenarioView
from collector.report.charts import _log, _svg
from collector.report.rows import device_drives
from collector.verdicts.pretest import summarize

#: a device metric's words and unit on the page: (title, unit, factor from base units)
TELEMETRY_WORDS = {
    "drivelab_device_read_iops": ("reads per second", "IOPS", 1.0),
    "drivelab_device_write_iops": ("writes per second", "IOPS", 1.0),
    "drivelab_device_read_bytes_per_second": ("read throughput", "MB/s", 1e-6),
    "drivelab_device_write_bytes_per_second": ("write throughput", "MB/s", 1e-6),
    "drivelab_device_read_await_seconds": ("read await (queue and service)", "ms", 1e3),
    "drivelab_device_write_await_seconds": ("write await (queue and service)", "ms", 1e3),
    "drivelab_device_util_ratio": ("utilisation", "%", 100.0),
}


def plot_telemetry(view: ScenarioView) -> list[tuple[str, str]]:
    """One plot per telemetry metric, in words and human units (MB/s, ms, %), one line
    per drive (the device's drive name, else the device), the y axis from zero."""
    names = device_drives(view)
    by_metric = defaultdict(lambda: defaultdict(list))
    for s in view.telemetry:
        if s.timestamp is None:
            continue
        device = s.labels.get("device")
        key = (
            names.get(device, device)
            if device
            else ", ".join(f"{k}={v}" for k, v in s.labels.items())
        )
        by_metric[(s.metric, s.unit)][key].append((s.timestamp, s.value))
    out = []
    for (metric, unit), lines in sorted(by_metric.items()):
        title, shown, factor = TELEMETRY_WORDS.get(metric, (metric, unit, 1.0))
        fig = Figure(figsize=(9, 2.6))
        ax = fig.subplots()
        t0 = min(t for pts in lines.values() for t, _ in pts)
        for label, pts in sorted(lines.items()):
            pts.sort()
            ax.plot([t - t0 for t, _ in pts], [v * factor for _, v in pts], label=label)
        ax.set_title(f"{title}, {shown}")
        ax.set_xlabel("seconds")
        ax.set_ylabel(shown)
        ax.set_ylim(bottom=0)
        ax.ticklabel_format(axis="y", style="plain", useOffset=False)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        out.append((metric, _svg(fig)))
    return out


def plot_sweep(view: ScenarioView) -> str | None:
    """Random-read throughput against block size (queue depth 1), one line per drive
    and write cache state, log-log."""
    rows = [p for p in summarize(view.pretests) if p.sweep_bps]
    if not rows:
        return None
    fig = Figure(figsize=(9, 3.2))
    ax = fig.subplots()
    for p in rows:
        sizes = sorted(p.sweep_bps)
        ax.plot(
            [b / 1024 for b in sizes],
            [p.sweep_bps[b] / 1e6 for b in sizes],
            marker="o",
            label=f"{p.drive} (write cache {p.write_cache})",
        )
    _log(ax, "x", base=2)
    _log(ax, "y")
    ax.set_title("block-size sweep: random reads, queue depth 1")
    ax.set_xlabel("block size, KiB")
    ax.set_ylabel("MB/s")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _svg(fig)
