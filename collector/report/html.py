"""A self-contained HTML report: one file, no network needed to view it.

Plots are drawn with matplotlib's object API (no pyplot, no GUI backend) and
embedded as inline SVG with text as paths, so no font, script or stylesheet is
fetched. Plots: tps per drive with CI bars; tps per second per client over one
run of each cell (the concurrent window shaded, the server's checkpoints marked), and
beside it the same run's p50/p95/p99/max latency per second; latency distribution;
per drive, latency against throughput over a rate sweep; device telemetry when the
store has some."""

from __future__ import annotations

import contextlib
import contextvars
import html
import io
import json
import os
import selectors
import signal
import time
import warnings
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import matplotlib as mpl
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter

from collector import __version__, environment, ratesearch
from collector.pretest import summarize
from collector.records import RunStatus
from collector.report import (
    ScenarioView,
    fmt_cache,
    fmt_ms,
    fmt_ratio,
    fmt_runs,
    fmt_tps,
)
from collector.report import latency as load_steps
from collector.report.terminal import (
    PRETEST_COLUMNS,
    checkpoint_lines,
    physics_lines,
    pretest_rows,
    rate_searches,
    run_facts,
    start_lines,
)
from collector.units import human_size

mpl.rcParams["svg.fonttype"] = "path"
mpl.rcParams["svg.hashsalt"] = "drivelab"

CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
h1{font-size:1.6em}h2{margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.8em 0}td,th{border:1px solid #ccc;padding:.3em .6em}
th{background:#f0f0f0}td.num{text-align:right;font-variant-numeric:tabular-nums}
.partial{color:#a60}.failed{color:#b00}.note{color:#555;font-size:.9em}
.warn{color:#b00;font-weight:bold}
figure{margin:1em 0}svg{max-width:100%;height:auto}
.pair{display:flex;gap:1em;align-items:flex-start}.pair figure{flex:1;min-width:0;margin:.5em 0}
"""


class PlainLogFormatter(LogFormatter):
    """matplotlib's choice of which log ticks get a label, each written as a plain
    number: 0.6, 20, 1,000."""

    def __call__(self, x, pos=None):
        if not super().__call__(x, pos):
            return ""
        return f"{x:,.0f}" if x >= 1 else f"{x:g}"


def _log(ax, which: str, base: float = 10) -> None:
    """A log scale on ``ax``'s ``which`` axis ("x" or "y") labelled in plain numbers
    (100, 1000, 20), where matplotlib's default writes 10^2 in TeX: the same ticks and
    labels, without a mathtext parse of every label (the overhead scenario's HTML report:
    3.4 -> 2.9 s of CPU)."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log", base=base)
    axis.set_major_formatter(PlainLogFormatter(base))
    axis.set_minor_formatter(PlainLogFormatter(base, labelOnlyBase=False))


#: the figures render() collects, each drawn once the page is built (_draw_all); None
#: outside render(): a figure is drawn at once
_PENDING: contextvars.ContextVar[list[Figure] | None] = contextvars.ContextVar(
    "drivelab_pending_figures", default=None
)
#: where a collected figure's SVG goes in the page; NUL never occurs in escaped HTML
_MARK = "\0drivelab-figure-{}\0"
#: the forked copy's figures are drawn by the report itself after this long without an
#: answer (a whole report's 14 figures take about 1.5 s on the 2-core lab machine)
DRAW_TIMEOUT_S = 60.0


def _svg(fig: Figure) -> str:
    """The figure as inline SVG; inside render(), a mark the SVG replaces later."""
    pending = _PENDING.get()
    if pending is None:
        return _draw(fig)
    pending.append(fig)
    return _MARK.format(len(pending) - 1)


def _draw(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    return text[text.index("<svg") :]


def _draw_all(figs: list[Figure]) -> list[str]:
    """Each figure's SVG. Where there are two CPUs or more, every other figure is drawn by
    a forked copy of this process meanwhile: drawing is CPU-bound and one Python process
    draws on one CPU (the overhead scenario's report, 14 figures: 1.47-1.66 s drawn here
    alone, 0.92-1.25 s in two; `drivelab report --html` 3.4-3.5 -> 2.0-2.3 s). The copy
    only draws the figures it inherited and writes their SVG to a pipe; one that fails,
    or gives no answer within DRAW_TIMEOUT_S, is ended and its figures drawn here."""
    if len(figs) < 2 or (os.cpu_count() or 1) < 2 or not hasattr(os, "fork"):
        return [_draw(f) for f in figs]
    import matplotlib.backends.backend_svg  # noqa: F401, PLC0415  (once, before the fork)

    theirs = figs[1::2]
    read_fd, write_fd = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns of fork() in a process with threads (the live view's, the
        # metrics server's): the copy runs no code of theirs and takes none of their locks
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the copy: draw, answer, leave without running the parent's exit code
        code = 1
        try:
            os.close(read_fd)
            data = json.dumps([_draw(f) for f in theirs]).encode()
            with os.fdopen(write_fd, "wb") as out:
                out.write(data)
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    try:
        mine = [_draw(f) for f in figs[0::2]]
        drawn = _answer(_read_all(read_fd, DRAW_TIMEOUT_S), len(theirs))
    finally:
        os.close(read_fd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # ours, not yet reaped: at most a zombie by now
        os.waitpid(pid, 0)
    if drawn is None:
        drawn = [_draw(f) for f in theirs]
    return [mine[i // 2] if i % 2 == 0 else drawn[i // 2] for i in range(len(figs))]


def _answer(data: bytes | None, count: int) -> list[str] | None:
    """The copy's SVGs from what it wrote, or None unless it wrote ``count`` of them."""
    if data is None:
        return None
    try:
        svgs = json.loads(data)
    except ValueError:
        return None
    ok = isinstance(svgs, list) and len(svgs) == count and all(isinstance(x, str) for x in svgs)
    return svgs if ok else None


def _read_all(fd: int, timeout_s: float) -> bytes | None:
    """Everything written to the pipe ``fd`` until its writer closed it, or None after
    ``timeout_s`` seconds."""
    chunks = []
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


#: when the largest mean is this many times the smallest, the tps axis is logarithmic:
#: drive classes 25x apart would otherwise leave the slow ones as slivers
LOG_AXIS_SPREAD = 10.0


def plot_tps(view: ScenarioView) -> str:
    """Bars: mean tps of each cell, 95 % CI as error bars, grouped by test, the figure
    printed on each bar; a log axis when the means spread over LOG_AXIS_SPREAD or more."""
    cells = [c for c in view.cells if c.stats.tps is not None]
    fig = Figure(figsize=(9, 3.6))
    ax = fig.subplots()
    if not cells:
        ax.text(0.5, 0.5, "no complete runs", ha="center", va="center")
        return _svg(fig)
    tests = list(dict.fromkeys(c.test for c in cells))
    drives = list(view.drives)
    width = 0.8 / max(len(drives), 1)
    colors = mpl.colormaps["tab10"]
    means = [c.stats.tps.mean for c in cells if c.stats.tps.mean > 0]
    log = bool(means) and max(means) >= LOG_AXIS_SPREAD * min(means)
    for di, drive in enumerate(drives):
        xs, ys, lo, hi = [], [], [], []
        for ti, test in enumerate(tests):
            for c in cells:
                if c.drive == drive and c.test == test:
                    s = c.stats.tps
                    xs.append(ti + (di - (len(drives) - 1) / 2) * width)
                    ys.append(s.mean)
                    lo.append(s.mean - s.ci_low if s.ci_low is not None else 0)
                    hi.append(s.ci_high - s.mean if s.ci_high is not None else 0)
        if xs:
            if log:  # an error bar may not reach zero or below on a log axis
                lo = [min(d, y * 0.99) for d, y in zip(lo, ys, strict=True)]
            bars = ax.bar(
                xs, ys, width * 0.9, yerr=[lo, hi], capsize=4, label=drive, color=colors(di % 10)
            )
            ax.bar_label(bars, labels=[f"{y:,.0f}" for y in ys], fontsize=7, padding=2)
    ax.set_xticks(range(len(tests)), tests, fontsize=8)
    if log:
        _log(ax, "y")
    ax.set_ylabel("tps (all clients, window)" + (", log scale" if log else ""))
    ax.set_title("tps per drive, mean with 95% confidence interval")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _svg(fig)


def plot_ratio(view: ScenarioView) -> str | None:
    """Bars: each cell's tps as a multiple of the baseline drive's in the same test, with
    its 95 % CI, on a log axis (1x is the baseline), the ratio printed on each bar. None
    when no cell has a ratio."""
    cells = [c for c in view.cells if c.baseline_ratio is not None]
    if not cells:
        return None
    fig = Figure(figsize=(9, 3.2))
    ax = fig.subplots()
    labels = [c.drive if len({x.test for x in cells}) == 1 else f"{c.drive}\n{c.test}"
              for c in cells]  # fmt: skip
    ys = [c.baseline_ratio.ratio for c in cells]
    lo = [r.ratio - r.ci_low if r.ci_low is not None else 0
          for r in (c.baseline_ratio for c in cells)]  # fmt: skip
    hi = [r.ci_high - r.ratio if r.ci_high is not None else 0
          for r in (c.baseline_ratio for c in cells)]  # fmt: skip
    lo = [min(d, y * 0.99) for d, y in zip(lo, ys, strict=True)]
    colors = mpl.colormaps["tab10"]
    drives = list(view.drives)
    bars = ax.bar(range(len(cells)), ys, 0.6, yerr=[lo, hi], capsize=4,
                  color=[colors(drives.index(c.drive) % 10) for c in cells])  # fmt: skip
    ax.bar_label(bars, labels=[f"{y:.2f}x" if y < 10 else f"{y:.1f}x" for y in ys],
                 fontsize=8, padding=2)  # fmt: skip
    ax.set_xticks(range(len(cells)), labels, fontsize=8)
    _log(ax, "y")
    ax.set_ylim(min(0.5, min(ys) / 2), max(2.0, max(ys) * 2.5))  # room for 1x and the labels
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylabel(f"x {view.baseline} (log scale)")
    ax.set_title(f"tps as a multiple of {view.baseline}'s, with 95% confidence interval")
    ax.grid(axis="y", alpha=0.3)
    return _svg(fig)


#: the colour of checkpoint marks on the per-second plot
CHECKPOINT_COLOR = "#c0392b"


def checkpoint_spans(view: ScenarioView, cv) -> list[tuple[float, float | None, str]]:
    """The checkpoints of the run a cell's per-second plot shows (its run fact
    ``checkpoints``): (start, end or None while still running, reason), epoch seconds."""
    run = next(
        (
            r
            for r in cv.stats.runs
            if r.repetition == cv.series_run and r.status == RunStatus.COMPLETE
        ),
        None,
    )
    events = run_facts(view, "checkpoints").get(run.run_id) if run else None
    return [
        (e["start"], e.get("end"), str(e.get("reason") or "?"))
        for e in events or []
        if isinstance(e, dict) and e.get("start") is not None
    ]


def _checkpoint_marks(ax, spans, t0: float, t_end: float) -> None:
    """Each checkpoint as a band from its start to its end (to the plot's end while it
    ran on), with a dashed line where it started; those outside the plot are left out."""
    labelled = False
    for start, end, _ in spans:
        lo, hi = max(start, t0), min(end if end is not None else t_end, t_end)
        if hi < lo:
            continue
        label = None if labelled else "checkpoint"
        ax.axvspan(lo - t0, hi - t0, color=CHECKPOINT_COLOR, alpha=0.15, lw=0, label=label)
        if start >= t0:
            ax.axvline(start - t0, color=CHECKPOINT_COLOR, lw=0.9, ls="--")
        labelled = True


def plot_series(view: ScenarioView) -> list[tuple[str, str]]:
    """One plot per cell: tps per second of each client in one complete run, with the
    window where all ran shaded and the server's checkpoints marked."""
    out = []
    for c in view.cells:
        if not c.series:
            continue
        by_client = defaultdict(list)
        for p in c.series:
            by_client[p.client].append(p)
        t0 = min(p.start for p in c.series)
        fig = Figure(figsize=(9, 2.8))
        ax = fig.subplots()
        for client, pts in sorted(by_client.items()):
            xs = [p.start - t0 for p in pts] + [pts[-1].start + pts[-1].duration_s - t0]
            ys = [p.transactions / p.duration_s for p in pts]
            ax.step(xs, [*ys, ys[-1]], where="post", label=client)
        if c.window:
            ax.axvspan(
                c.window[0] - t0, c.window[1] - t0, color="#2a7", alpha=0.12, label="all running"
            )
        t_end = max(p.start + p.duration_s for p in c.series)
        _checkpoint_marks(ax, checkpoint_spans(view, c), t0, t_end)
        ax.set_xlabel("seconds since the first client started")
        ax.set_ylabel("tps")
        ax.set_title(f"{c.drive} / {c.test}: tps per second per client (run {c.series_run})")
        ax.legend(fontsize=8, loc="lower right")
        ax.grid(alpha=0.3)
        out.append((f"{c.drive} {c.test}", _svg(fig)))
    return out


# --------------------------------------------------------------------------- latency under load

#: the per-second latency lines: quantile label -> (legend, colour)
LATENCY_LINES = {
    "0.5": ("p50", "#1f77b4"),
    "0.95": ("p95", "#ff7f0e"),
    "0.99": ("p99", "#d62728"),
    "1": ("max", "#7f7f7f"),
}
#: a latency axis is logarithmic when its largest value is this many times its smallest
LOG_LATENCY_SPREAD = 20.0


def plot_latency_series(cv) -> str | None:
    """The per-second p50/p95/p99/max latency over all clients of the run a cell's
    tps plot shows (same time axis, the window shaded), with the mean schedule lag
    dashed under ``--rate``; None when the run kept no per-transaction log."""
    lines: dict[str, list[tuple[float, float]]] = defaultdict(list)
    lag: list[tuple[float, float]] = []
    for s in cv.latency:
        if "client" in s.labels or s.timestamp is None:
            continue  # the all-clients series: no client label
        if s.metric == "drivelab_schedule_lag_seconds":
            lag.append((s.timestamp, s.value * 1e3))
        elif s.labels.get("quantile") in LATENCY_LINES:
            lines[s.labels["quantile"]].append((s.timestamp, s.value * 1e3))
    if not lines or not cv.series:
        return None
    t0 = min(p.start for p in cv.series)
    fig = Figure(figsize=(9, 2.8))
    ax = fig.subplots()
    values = []
    for q, (name, color) in LATENCY_LINES.items():
        pts = sorted(lines.get(q, []))
        if pts:
            xs = [t - t0 for t, _ in pts] + [pts[-1][0] + 1 - t0]
            ys = [v for _, v in pts]
            ax.step(xs, [*ys, ys[-1]], where="post", label=name, color=color, lw=1.2)
            values += ys
    if lag:
        lag.sort()
        ax.plot([t + 0.5 - t0 for t, _ in lag], [v for _, v in lag], ls="--", color="#2ca02c",
                lw=1, label="schedule lag (mean)")  # fmt: skip
        values += [v for _, v in lag]
    positive = [v for v in values if v > 0]
    if positive and max(positive) >= LOG_LATENCY_SPREAD * min(positive):
        _log(ax, "y")
    if cv.window:
        ax.axvspan(cv.window[0] - t0, cv.window[1] - t0, color="#2a7", alpha=0.12,
                   label="all running")  # fmt: skip
    ax.set_xlabel("seconds since the first client started")
    ax.set_ylabel("latency ms" + (", log scale" if ax.get_yscale() == "log" else ""))
    ax.set_title(f"{cv.drive} / {cv.test}: latency per second, all clients (run {cv.series_run})")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3, which="both")
    return _svg(fig)


def plot_latency_throughput(view: ScenarioView) -> list[tuple[str, str]]:
    """Per drive (and test without its rate) with rate steps: achieved tps against
    p50/p95/p99 latency over the window where all clients ran, one point per rate step,
    each labelled with its total rate; a step whose rate was not held is ringed."""
    out = []
    for (drive, group), steps in load_steps.steps(view).items():
        pts = [s for s in steps if s.tps is not None and s.p99_ms is not None]
        if not pts:
            continue
        fig = Figure(figsize=(9, 3.8))
        ax = fig.subplots()
        xs = [s.tps for s in pts]
        for q, attr in (("0.5", "p50_ms"), ("0.95", "p95_ms"), ("0.99", "p99_ms")):
            name, color = LATENCY_LINES[q]
            ax.plot(xs, [getattr(s, attr) for s in pts], marker="o", color=color, label=name)
        bad = [s for s in pts if s.sustained is False]
        if bad:
            ax.scatter([s.tps for s in bad], [s.p99_ms for s in bad], s=180, zorder=3,
                       facecolors="none", edgecolors="#b00", linewidths=1.5,
                       label="rate not sustained")  # fmt: skip
        for s in pts:
            text = "no -R" if s.rate_total is None else f"{s.rate_total:,}/s"
            ax.annotate(text, (s.tps, s.p99_ms), textcoords="offset points", xytext=(4, 6),
                        fontsize=7)  # fmt: skip
        ys = [v for s in pts for v in (s.p50_ms, s.p99_ms) if v and v > 0]
        if ys and max(ys) >= LOG_LATENCY_SPREAD * min(ys):
            _log(ax, "y")
        per = "total" if pts[0].rate_per == "total" else "per host"
        ax.set_xlabel(f"achieved tps (all clients; points: rate asked in all, given {per})")
        ax.set_ylabel("latency ms" + (", log scale" if ax.get_yscale() == "log" else ""))
        ax.margins(x=0.08, y=0.15)
        ax.set_title(f"{drive} / {group}: latency against throughput")
        ax.legend(fontsize=8, loc="upper left")
        ax.grid(alpha=0.3, which="both")
        out.append((f"{drive} {group}", _svg(fig)))
    return out


def _latency_section(view: ScenarioView) -> list[str]:
    """The latency-vs-throughput table and plot of each drive with rate steps."""
    groups = load_steps.steps(view)
    if not groups:
        return []
    parts = ["<h3>Latency under load (rate steps)</h3>"]
    plots = dict(plot_latency_throughput(view))
    for (drive, group), steps in groups.items():
        per = "total" if steps[0].rate_per == "total" else "per host"
        rows = [
            [
                "none" if s.rate_total is None else f"{s.rate_total:,}",
                "-" if s.rate_per_host is None else f"{s.rate_per_host:,}",
                "-" if s.tps is None else f"{s.tps:,.1f}",
                *("-" if v is None else f"{v:,.2f}"
                  for v in (s.p50_ms, s.p95_ms, s.p99_ms, s.max_ms)),
                "-" if s.late is None else f"{s.late:,.0f}",
                "-" if s.skipped is None else f"{s.skipped:,.0f}",
                s.held,
            ]
            for s in steps
        ]  # fmt: skip
        parts.append(
            f"<p class=note>{html.escape(f'{drive} {group}')}: rate asked of all"
            f" {steps[0].hosts} client hosts together (the scenario gave it {per})</p>"
        )
        head = ["rate/s (total)", "-R per host", "tps", "p50 ms", "p95 ms", "p99 ms", "max ms"]
        parts.append(_table([*head, "late", "skipped", "rate held"], rows, 0))
        if f"{drive} {group}" in plots:
            parts.append(f"<figure>{plots[f'{drive} {group}']}</figure>")
    parts += [f"<p class=warn>lag: {html.escape(x)}</p>" for x in load_steps.lag_lines(view)]
    return parts


def plot_latency(view: ScenarioView) -> str | None:
    """Cumulative latency distribution of every cell with a per-transaction log."""
    cells = [c for c in view.cells if c.histogram is not None and c.histogram.counts]
    if not cells:
        return None
    fig = Figure(figsize=(9, 3.6))
    ax = fig.subplots()
    for c in cells:
        h = c.histogram
        total = h.total
        xs, ys, run = [], [], 0
        for hi, n in zip(h.highs_s, h.counts, strict=True):
            run += n
            xs.append(hi * 1000)
            ys.append(run / total)
        ax.plot(xs, ys, label=f"{c.drive} {c.test}")
    _log(ax, "x")
    ax.axhline(0.95, color="#999", lw=0.8, ls="--")
    ax.set_xlabel("transaction latency (ms, log scale)")
    ax.set_ylabel("fraction of transactions")
    ax.set_title("latency distribution (complete runs; dashed: p95)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    return _svg(fig)


def plot_telemetry(view: ScenarioView) -> list[tuple[str, str]]:
    """One plot per telemetry metric, one line per label set."""
    by_metric = defaultdict(lambda: defaultdict(list))
    for s in view.telemetry:
        if s.timestamp is None:
            continue
        key = ", ".join(f"{k}={v}" for k, v in s.labels.items())
        by_metric[(s.metric, s.unit)][key].append((s.timestamp, s.value))
    out = []
    for (metric, unit), lines in sorted(by_metric.items()):
        fig = Figure(figsize=(9, 2.6))
        ax = fig.subplots()
        t0 = min(t for pts in lines.values() for t, _ in pts)
        for label, pts in sorted(lines.items()):
            pts.sort()
            ax.plot([t - t0 for t, _ in pts], [v for _, v in pts], label=label)
        ax.set_title(metric)
        ax.set_xlabel("seconds")
        ax.set_ylabel(unit)
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


def _table(headers: list[str], rows: list[list[str]], num_from: int = 2) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            cls = ' class="num"' if i >= num_from else ""
            cells.append(f"<td{cls}>{html.escape(str(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _search_section(view: ScenarioView) -> list[str]:
    """Each searched cell's sustained rate with its bracket, and its steps in run order."""
    found = rate_searches(view)
    if not found:
        return []
    rows = [
        [
            str(d.get("drive")), str(d.get("test")), f"p99 <= {d.get('p99_ms'):g} ms",
            "-" if d.get("sustained_rate") is None else f"{d['sustained_rate']}/s",
            "-" if d.get("holds_at") is None else str(d["holds_at"]),
            "-" if d.get("breaks_at") is None else str(d["breaks_at"]),
            f"{d.get('runs', len(d.get('steps') or []))} of {d.get('max_steps')}",
            str(d.get("status")),
        ]
        for d in found
    ]  # fmt: skip
    head = ["drive", "test", "target", "sustained (total)", "holds at", "breaks at"]
    parts = ["<h3>Rate search</h3>", _table([*head, "steps", "how it ended"], rows)]
    for d in found:
        steps = [
            [str(i), f"{s.get('rate')}/s", f"{s.get('rate_per_host', '-')}/s", fmt_ms(
                None if s.get("p99_ms") is None else s["p99_ms"] / 1e3),
             ("holds" if s.get("holds") else "breaks")
             + (f" ({s['runs']} runs)" if s.get("runs", 1) > 1 else ""), str(s.get("why"))]
            for i, s in enumerate(d.get("steps") or [], start=1)
        ]  # fmt: skip
        line = f"{d.get('drive')} {d.get('test')}: {d.get('text')}"
        parts.append(f"<p class=note>{html.escape(line)}</p>")
        parts.append(
            _table(["step", "total rate", "per host", "p99 ms", "verdict", "why"], steps, 1)
        )
    return parts


def _init_cell(init: dict, at_once) -> str:
    """The longest client's init seconds, and how many clients ran pgbench -i at once when
    the cell's database.json says it (older runs do not)."""
    if not init:
        return "-"
    text = f"{max(init.values()):.1f}"
    return f"{text} ({at_once} at once)" if isinstance(at_once, int) else text


def _database_table(view: ScenarioView) -> str:
    """Per cell, from its latest gathered run: WAL placement, DB memory, dataset size,
    init time, whether the IOPS caps were lifted for init, PostgreSQL version."""
    rows = []
    for cv in view.cells:
        db = cv.database
        if not db:
            continue
        sizes = db.get("db_sizes_bytes") or {}
        memory = db.get("db_memory_bytes")
        init = db.get("db_init_seconds") or {}
        lifted = db.get("db_caps_lifted")
        rows.append(
            [
                cv.drive,
                cv.test,
                str(db.get("wal_placement") or "-"),
                "-"
                if memory is None
                else human_size(memory)
                + (f" ({db['db_memory_source']})" if db.get("db_memory_source") else ""),
                human_size(sum(sizes.values())) if sizes else "-",
                _init_cell(init, db.get("db_init_at_once")),
                "-" if lifted is None else ("yes" if lifted else "no"),
                str(db.get("postgresql_version") or "-"),
                fmt_cache(db.get("cache")),
            ]
        )
    if not rows:
        return ""
    head = ["drive", "test", "WAL", "DB memory", "datasets", "init s (max)", "caps lifted"]
    return _table([*head, "PostgreSQL", "cache (buffer hits, reads reaching the drive)"], rows, 3)


#: the environment table's rows, by group: label, the flattened keys shown in it (joined
#: by a space). PostgreSQL's settings, a dm/md/Btrfs device's members and the sysctls
#: come between the groups, one row per key.
ENVIRONMENT_SERVER = (("PostgreSQL", ("postgresql.version",)),)
ENVIRONMENT_STORAGE = (
    ("kernel", ("kernel.release",)),
    ("OS", ("os.pretty_name",)),
    (
        "mount (as mounted)",
        ("storage.mount.source", "storage.mount.fstype", "storage.mount.options"),
    ),
    ("filesystem features", ("storage.filesystem.features",)),
    ("filesystem not read", ("storage.filesystem.error",)),
    ("scheduler", ("storage.queue.scheduler",)),
    ("read-ahead KiB", ("storage.queue.read_ahead_kb",)),
    ("queue depth (nr_requests)", ("storage.queue.nr_requests",)),
    ("rotational", ("storage.queue.rotational",)),
    ("write cache (kernel view)", ("storage.queue.write_cache",)),
)
ENVIRONMENT_HOST = (
    ("CPU", ("cpu.model",)),
    ("CPUs", ("cpu.count",)),
    ("CPUs this process may use", ("cpu.allowed",)),
    ("frequency governor", ("cpu.governor",)),
    ("memory", ("memory.total_bytes",)),
    ("memory limit", ("memory.limit_bytes", "memory.limit_source")),
    ("not recorded", ("error",)),
)


def _env_value(merged: dict, key: str) -> str:
    value = merged.get(key)
    if key.endswith("_bytes") and isinstance(value, int) and not isinstance(value, bool):
        return human_size(value)
    return environment.show(value, key)


def _environment_table(view: ScenarioView) -> str:
    """Per drive, the environment its runs came from (collector.environment): PostgreSQL
    version and the settings the server was given, kernel, mount options as mounted,
    filesystem features, scheduler, read-ahead, dirty settings, CPU, memory. A value
    not the same in all the drive's runs reads "varies"."""
    merged = {}
    for drive in view.drives:
        runs = [
            r.run_id
            for cv in view.cells
            if cv.drive == drive
            for r in cv.stats.runs
            if r.run_id is not None
        ]
        envs = environment.of_runs(view.facts, runs)
        if envs:
            merged[drive] = environment.merge(envs)
    if not merged:
        return ""
    keys = dict.fromkeys(k for m in merged.values() for k in m)

    def each(prefix: str, label: str = "") -> list[tuple[str, tuple[str, ...]]]:
        return [(label + k.removeprefix(prefix), (k,)) for k in keys if k.startswith(prefix)]

    rows_spec = [
        *ENVIRONMENT_SERVER,
        *each("postgresql.settings.", "PostgreSQL "),
        *ENVIRONMENT_STORAGE,
        *each("storage.members.", "member "),
        *each("sysctl."),
        *ENVIRONMENT_HOST,
    ]
    rows = []
    for label, row_keys in rows_spec:
        if not any(k in m for k in row_keys for m in merged.values()):
            continue
        values = [
            " ".join(_env_value(m, k) for k in row_keys if k in m) or _env_value(m, row_keys[0])
            for m in merged.values()
        ]
        differs = ["differs" if len(set(values)) > 1 else ""] if len(merged) > 1 else []
        rows.append([label, *values, *differs])
    head = ["setting", *merged, *(["across drives"] if len(merged) > 1 else [])]
    return _table(head, rows, 99)


def _environment_section(view: ScenarioView) -> list[str]:
    table = _environment_table(view)
    return ["<h3>Environment per drive (what the figures came from)</h3>", table] if table else []


def render(views: list[ScenarioView], now: datetime | None = None) -> str:
    """The whole page; its figures drawn together once it is built (_draw_all)."""
    pending: list[Figure] = []
    token = _PENDING.set(pending)
    try:
        page = _page(views, now)
    finally:
        _PENDING.reset(token)
    svgs = _draw_all(pending)
    # the page split at its NULs: text, then a mark's name, then text, ...
    return "".join(
        svgs[int(piece.removeprefix("drivelab-figure-"))] if i % 2 else piece
        for i, piece in enumerate(page.split("\0"))
    )


def _page(views: list[ScenarioView], now: datetime | None) -> str:
    now = now or datetime.now(UTC)
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        f"<title>drivelab report: {html.escape(', '.join(v.info.name for v in views))}</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>drivelab: how fast is PostgreSQL on this drive</h1>",
        f"<p class=note>drivelab {__version__}, generated {now:%Y-%m-%d %H:%M} UTC. "
        "tps is the sum over clients over the window in which all clients were running; "
        "± is the 95% Student-t confidence interval over complete repetitions; "
        "partial and failed runs are listed, never averaged in.</p>",
    ]
    for view in views:
        parts.append(f"<h2>Scenario {html.escape(view.info.name)}</h2>")
        if view.info.description:
            parts.append(f"<p class=desc>{html.escape(view.info.description.strip())}</p>")
        rows = [
            [
                cv.drive,
                cv.test,
                fmt_tps(cv.stats.tps),
                fmt_ratio(cv.baseline_ratio, cv.is_baseline),
                f"{cv.stats.tps_reported.mean:,.1f}" if cv.stats.tps_reported else "-",
                fmt_ms(cv.stats.latency_p95_s.mean if cv.stats.latency_p95_s else None),
                str(cv.stats.clients),
                fmt_runs(cv.stats),
            ]
            for cv in view.cells
        ]
        parts.append(
            _table(
                [
                    "drive",
                    "test",
                    "tps ± CI",
                    f"x {view.baseline}",
                    "pgbench sum",
                    "p95 ms",
                    "clients",
                    "runs",
                ],
                rows,
            )
        )
        parts += [
            f"<p class=warn>warning: {html.escape(f'{cv.drive} {cv.test}: {w}')}</p>"
            for cv in view.cells
            for w in cv.warnings
        ]
        parts += [
            f"<p class=note>{kind}: {html.escape(x)}</p>"
            for kind, lines in (("checkpoint", checkpoint_lines), ("start", start_lines))
            for x in lines(view)
        ]
        parts += _search_section(view)
        database = _database_table(view)
        if database:
            parts.append("<h3>Database</h3>")
            parts.append(database)
        parts += [f"<figure>{svg}</figure>" for svg in (plot_tps(view), plot_ratio(view)) if svg]
        runs = []
        for cv in view.cells:
            for r in cv.stats.runs:
                cls = "" if r.status == RunStatus.COMPLETE else r.status.value
                runs.append(
                    (
                        cls,
                        [
                            cv.drive,
                            cv.test,
                            str(r.repetition)
                            + (f" (attempt {r.attempt})" if r.attempt > 1 else ""),
                            r.status.value,
                            "-"
                            if r.tps is None
                            else f"{r.tps:,.1f}" + ("" if r.windowed else " (sum)"),
                            "-" if r.tps_reported_sum is None else f"{r.tps_reported_sum:,.1f}",
                            "-" if r.start_skew_s is None else f"{r.start_skew_s:.3f}",
                            fmt_ms(r.latency_p95_s),
                            r.reason or "",
                        ],
                    )
                )
        parts.append("<h3>Runs</h3>")
        head = [
            "drive",
            "test",
            "rep",
            "status",
            "tps (window)",
            "pgbench sum",
            "start skew s",
            "p95 ms",
            "reason",
        ]
        trs = []
        for cls, row in runs:
            tds = "".join(f"<td>{html.escape(v)}</td>" for v in row)
            trs.append(f'<tr class="{cls}">{tds}</tr>')
        parts.append(
            "<table><tr>"
            + "".join(f"<th>{h}</th>" for h in head)
            + "</tr>"
            + "".join(trs)
            + "</table>"
        )
        parts += _latency_section(view)
        series = plot_series(view)
        if series:
            per_second = {
                f"{cv.drive} {cv.test}": svg
                for cv in view.cells
                if (svg := plot_latency_series(cv)) is not None
            }
            parts.append(
                "<h3>tps per second per client"
                + (", and latency per second" if per_second else "")
                + "</h3>"
            )
            parts += [
                f"<div class=pair><figure>{svg}</figure><figure>{per_second[label]}</figure></div>"
                if label in per_second
                else f"<figure>{svg}</figure>"
                for label, svg in series
            ]
        lat = plot_latency(view)
        if lat:
            parts.append(f"<h3>Latency distribution</h3><figure>{lat}</figure>")
        tele = plot_telemetry(view)
        if tele:
            parts.append("<h3>Device telemetry</h3>")
            parts += [f"<figure>{svg}</figure>" for _, svg in tele]
        if view.pretests:
            parts.append("<h3>Raw drive pre-tests (fio direct I/O, pg_test_fsync)</h3>")
            parts.append(_table(list(PRETEST_COLUMNS), pretest_rows(view)))
            sweep = plot_sweep(view)
            if sweep:
                parts.append(f"<figure>{sweep}</figure>")
        parts.append(_physics(view))
        parts += _environment_section(view)
        # run facts are per run (the Database table shows them); device facts repeat per run
        env = dict.fromkeys(
            (f.scope, f.host or "", f.key, str(f.value))
            for f in view.facts
            if f.scope not in ("run", ratesearch.FACT)  # a search has its own section
        )
        if env:
            parts.append("<h3>Environment and device facts</h3>")
            parts.append(_table(["scope", "host", "key", "value"], [list(r) for r in env], 99))
    parts.append("</body></html>")
    return "\n".join(parts)


def _physics(view: ScenarioView) -> str:
    """The physics checks as a short list, as the terminal report words them."""
    items = [
        f"<li{' class=warn' if p.level == 'warning' else ''}>{html.escape(p.text)}</li>"
        for p in physics_lines(view)
    ]
    return f"<h3>Physics checks</h3><ul>{''.join(items)}</ul>" if items else ""


def publish(views: list[ScenarioView], path: Path | str) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(render(views), encoding="utf-8")
    tmp.replace(p)
    return p
