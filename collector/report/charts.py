"""The report's figures: matplotlib's object API (no pyplot, no GUI backend), each
figure inline SVG with text as paths (no font, script or stylesheet fetched). tps per
drive with CI bars and the ratio to the baseline; tps per second per client over one run
of each cell (the concurrent window shaded, the server's checkpoints marked) and the same
run's latency per second; latency distribution; latency against throughput over a rate
sweep; device telemetry; the pre-tests' block-size sweep. Inside
:func:`collector.report.html.render` figures are collected and drawn together
(:func:`_draw_all`); outside it each is drawn at once."""

from __future__ import annotations

import contextlib
import contextvars
import io
import json
import os
import re
import selectors
import signal
import time
import warnings
from collections import defaultdict

import matplotlib as mpl
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter

from collector.records import RunStatus
from collector.report import ScenarioView
from collector.report import latency as load_steps
from collector.report.findings import run_facts
from collector.verdicts import caveats as caveat

mpl.rcParams["svg.fonttype"] = "path"
mpl.rcParams["svg.hashsalt"] = "drivelab"


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
    labels, without a mathtext parse of every label (CPU of every HTML report:
    docs/scaling.md, "Why the hot path is shaped as it is")."""
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
#: answer (far longer than a whole report's figures take to draw: docs/scaling.md)
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


_SVG_ID = re.compile(r'\bid="([^"]+)"')
_SVG_REF = re.compile(r'(href="#|url\(#)([^")]+)')


def own_ids(svg: str, n: int) -> str:
    """Figure ``n``'s SVG with its ids (matplotlib names glyphs and clip paths alike in
    every figure) and the references to them prefixed ``f<n>-``: one page, no id twice."""
    svg = _SVG_ID.sub(lambda m: f'id="f{n}-{m.group(1)}"', svg)
    return _SVG_REF.sub(lambda m: f"{m.group(1)}f{n}-{m.group(2)}", svg)


def _draw_all(figs: list[Figure]) -> list[str]:
    """Each figure's SVG. Where there are two CPUs or more, every other figure is drawn by
    a forked copy of this process meanwhile: drawing is CPU-bound and one Python process
    draws on one CPU (docs/scaling.md, "Why the hot path is shaped as it is"). The copy
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


def _label_bars(ax, bars, cells, texts: list[str], fontsize: int) -> None:
    """Each bar's figure printed on it; a bar whose cell carries a caveat
    (:mod:`collector.verdicts.caveats`) hatched, its marks beside the figure (``1,050 [c]``)."""
    for bar, c in zip(bars, cells, strict=True):
        if c.caveats:
            bar.set_hatch("//")
            bar.set_edgecolor("black")
    marks = [caveat.marks(c.caveats) for c in cells]
    texts = [f"{t} [{m}]" if m else t for t, m in zip(texts, marks, strict=True)]
    ax.bar_label(bars, labels=texts, fontsize=fontsize, padding=2)


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
        xs, ys, lo, hi, shown = [], [], [], [], []
        for ti, test in enumerate(tests):
            for c in cells:
                if c.drive == drive and c.test == test:
                    s = c.stats.tps
                    shown.append(c)
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
            _label_bars(ax, bars, shown, [f"{y:,.0f}" for y in ys], 7)
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
    _label_bars(ax, bars, cells, [f"{y:.2f}x" if y < 10 else f"{y:.1f}x" for y in ys], 8)
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


def plot_all_tps(view: ScenarioView) -> str | None:
    """Every cell's tps per second (all clients summed, the run its own plot shows) on one
    axis from its first client's start: the drives' steadiness side by side; a log axis
    when their levels spread over LOG_AXIS_SPREAD or more. None with fewer than two."""
    cells = [c for c in view.cells if c.series]
    if len(cells) < 2:
        return None
    fig = Figure(figsize=(9, 3.2))
    ax = fig.subplots()
    levels = []
    for c in cells:
        t0 = min(p.start for p in c.series)
        per_second: dict[int, float] = defaultdict(float)
        for p in c.series:
            per_second[int(p.start - t0)] += p.transactions / p.duration_s
        xs = sorted(per_second)
        ys = [per_second[x] for x in xs]
        levels += [y for y in ys if y > 0]
        marks = caveat.marks(c.caveats)
        label = c.drive if len({x.test for x in cells}) == 1 else f"{c.drive} {c.test}"
        ax.plot(xs, ys, label=f"{label} [{marks}]" if marks else label)
    if levels and max(levels) >= LOG_AXIS_SPREAD * min(levels):
        _log(ax, "y")
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlabel("seconds since the first client started")
    ax.set_ylabel("tps, all clients")
    ax.set_title("tps per second, every cell on one axis")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _svg(fig)


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
