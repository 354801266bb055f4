"""A client sweep's curves (``workload.clients_per_host`` a list): per drive and test,
tps and latency percentiles against the total connections (client hosts x ``-c``), the
knee marked by :func:`collector.stats.knee.knee`. Words and numbers for the publishers:
the terminal's table, the HTML page's table and plot."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from collector.report import ScenarioView, fmt_ms
from collector.stats.knee import KNEE_GAIN, Point, gain_per_doubling, knee
from collector.verdicts import caveats as caveat

#: the words of a test that a sweep's counts change (-c and -j)
_COUNT_WORD = re.compile(r"[cj]\d+")

COLUMNS = ("drive", "connections", "-c x hosts", "-j", "tps", "p50 ms", "p95 ms", "p99 ms",
           "gain per doubling", "knee")  # fmt: skip


@dataclass(frozen=True)
class SweepPoint:
    connections: int
    clients_per_host: int
    threads: int
    hosts: int
    tps: float
    p50_s: float | None
    p95_s: float | None
    p99_s: float | None
    marks: str  # the cell's caveat marks ("c"), "" for none


@dataclass(frozen=True)
class Curve:
    drive: str
    #: the test without its counts (``tpcb ext4 tablespace s5 1cl T5``)
    test: str
    points: tuple[SweepPoint, ...]  # by connections
    #: the knee's connections, None when the curve keeps paying
    knee: int | None


def _mean(summary) -> float | None:
    return None if summary is None else summary.mean


def curves(view: ScenarioView) -> list[Curve]:
    """Every drive's and test's curve with at least two connection counts that have a
    tps (complete runs), in the view's drive order."""
    groups: dict[tuple[str, str], dict[int, SweepPoint]] = defaultdict(dict)
    for cv in view.cells:
        params, cs = cv.stats.spec.params, cv.stats
        c, j = params.get("clients_per_host"), params.get("threads")
        if cs.tps is None or not isinstance(c, int) or not isinstance(j, int):
            continue
        hosts = cv.stats.spec.clients or 1
        rest = " ".join(w for w in cv.test.split() if not _COUNT_WORD.fullmatch(w))
        groups[cv.drive, rest][c * hosts] = SweepPoint(
            c * hosts, c, j, hosts, cs.tps.mean, _mean(cs.latency_p50_s),
            _mean(cs.latency_p95_s), _mean(cs.latency_p99_s), caveat.marks(cv.caveats),
        )  # fmt: skip
    out = []
    for (drive, test), by_count in groups.items():
        if len(by_count) < 2:
            continue
        points = tuple(by_count[n] for n in sorted(by_count))
        found = knee([Point(p.connections, p.tps, p.p99_s) for p in points])
        out.append(Curve(drive, test, points, found.connections if found else None))
    order = {d: i for i, d in enumerate(view.drives)}
    return sorted(out, key=lambda c: (order.get(c.drive, 99), c.drive, c.test))


def rows(curve: Curve) -> list[list[str]]:
    """The curve as table rows (:data:`COLUMNS`): the gain per doubling from the count
    before, and ``knee`` at the knee's count."""
    out = []
    for before, p in zip((None, *curve.points), curve.points, strict=False):
        gain = (
            "-"
            if before is None
            else f"{gain_per_doubling(_point(before), _point(p)) * 100:+.0f} %"
        )
        drive = f"{curve.drive} [{p.marks}]" if p.marks else curve.drive
        out.append([
            drive, str(p.connections), f"{p.clients_per_host} x {p.hosts}", str(p.threads),
            f"{p.tps:,.1f}", fmt_ms(p.p50_s), fmt_ms(p.p95_s), fmt_ms(p.p99_s), gain,
            "knee" if p.connections == curve.knee else "",
        ])  # fmt: skip
    return out


def export_rows(view: ScenarioView) -> list[dict]:
    """The curves as plain rows (CSV/JSON): one per count, ``knee`` true at the knee."""
    return [
        {
            "scenario": view.info.name, "drive": c.drive, "test": c.test,
            "connections": p.connections, "clients_per_host": p.clients_per_host,
            "threads": p.threads, "client_hosts": p.hosts, "tps": p.tps,
            "latency_p50_s": p.p50_s, "latency_p95_s": p.p95_s, "latency_p99_s": p.p99_s,
            "knee": p.connections == c.knee,
        }
        for c in curves(view)
        for p in c.points
    ]  # fmt: skip


def knee_line(curve: Curve) -> str:
    """What the knee rule found, in words."""
    where = f"{curve.drive} ({curve.test})"
    if curve.knee is None:
        return (
            f"{where}: no knee: every doubling of the connections added {KNEE_GAIN:.0%} of"
            " tps or more, or the p99 did not grow"
        )
    return (
        f"{where}: knee at {curve.knee} connections: beyond it a doubling adds less than"
        f" {KNEE_GAIN:.0%} of tps while the p99 grows"
    )


def _point(p: SweepPoint) -> Point:
    return Point(p.connections, p.tps, p.p99_s)


def plot(found: list[Curve]) -> str:
    """tps (left) and p99 latency (right) against the total connections, one line per
    curve, the knee ringed; the x axis in doublings (log 2)."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    from collector.report.charts import _svg  # noqa: PLC0415

    fig = Figure(figsize=(10, 3.4))
    left, right = fig.subplots(1, 2)
    for curve in found:
        label = curve.drive if len({c.test for c in found}) == 1 else f"{curve.drive} {curve.test}"
        xs = [p.connections for p in curve.points]
        (line,) = left.plot(xs, [p.tps for p in curve.points], marker="o", label=label)
        p99 = [(p.connections, p.p99_s * 1e3) for p in curve.points if p.p99_s is not None]
        if p99:
            right.plot(*zip(*p99, strict=True), marker="o", color=line.get_color(), label=label)
        at = next((p for p in curve.points if p.connections == curve.knee), None)
        if at is not None:
            left.plot([at.connections], [at.tps], marker="o", markersize=14, fillstyle="none",
                      color=line.get_color())  # fmt: skip
            left.annotate("knee", (at.connections, at.tps), textcoords="offset points",
                          xytext=(8, -14), fontsize=8)  # fmt: skip
    for ax, what in ((left, "tps, all clients"), (right, "p99 latency ms")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("connections (client hosts x -c)")
        ax.set_ylabel(what)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    left.set_title("tps against connections")
    right.set_title("p99 latency against connections")
    return _svg(fig)
