"""The terminal table, like the seeds' ("SSD100 1472 tps, 13.9x 7200RPM"), with rich."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from collector.pretest import summarize
from collector.records import RunStatus
from collector.report import ScenarioView, fmt_cache, fmt_ms, fmt_ratio, fmt_runs, fmt_tps


def table(view: ScenarioView) -> Table:
    t = Table(
        title=f"{view.info.name}: tps over the window where all clients ran "
        f"(mean ± 95% CI over complete runs)",
        caption=f"baseline: {view.baseline or '-'}",
    )
    t.add_column("drive")
    t.add_column("test")
    t.add_column("tps ± CI", justify="right")
    t.add_column("x baseline", justify="right")
    t.add_column("pgbench sum", justify="right")
    t.add_column("p95 ms", justify="right")
    t.add_column("clients", justify="right")
    t.add_column("runs", justify="right")
    for cv in sorted(view.cells, key=lambda c: (c.test, view.drives.index(c.drive))):
        cs = cv.stats
        t.add_row(
            cv.drive,
            cv.test,
            fmt_tps(cs.tps),
            fmt_ratio(cv.baseline_ratio, cv.is_baseline),
            f"{cs.tps_reported.mean:,.1f}" if cs.tps_reported else "-",
            fmt_ms(cs.latency_p95_s.mean if cs.latency_p95_s else None),
            str(cs.clients),
            fmt_runs(cs),
        )
    return t


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


def pretest_table(view: ScenarioView) -> Table | None:
    rows = pretest_rows(view)
    if not rows:
        return None
    t = Table(title=f"{view.info.name}: raw drive pre-tests (fio direct I/O, pg_test_fsync)")
    for i, col in enumerate(PRETEST_COLUMNS):
        t.add_column(col, justify="left" if i < 2 else "right")
    for r in rows:
        t.add_row(*r)
    return t


def notes(view: ScenarioView) -> list[str]:
    """One line per run that was not averaged in, with its reason."""
    out = []
    for cv in view.cells:
        for r in cv.stats.runs:
            if r.status != RunStatus.COMPLETE:
                out.append(
                    f"{cv.drive} {cv.test} run {r.repetition}: {r.status.value}"
                    f" ({r.reason or 'no reason recorded'}), not averaged in"
                )
            elif not r.windowed:
                out.append(
                    f"{cv.drive} {cv.test} run {r.repetition}: no per-second data, "
                    "tps is pgbench's reported sum"
                )
    return out


def cache_lines(view: ScenarioView) -> list[str]:
    """One line per cell whose latest run has cache figures (pg_stat_database and the
    drive's reads): the cache-defeat proof, or its absence."""
    return [
        f"{cv.drive} {cv.test}: {fmt_cache(cv.database['cache'])}"
        for cv in view.cells
        if cv.database.get("cache")
    ]


def warnings(view: ScenarioView) -> list[str]:
    """One line per cell whose runs carry a database warning (fits in RAM)."""
    return [f"{cv.drive} {cv.test}: {w}" for cv in view.cells for w in cv.warnings]


def publish(views: list[ScenarioView], console: Console | None = None) -> None:
    console = console or Console()
    for view in views:
        if view.info.description:
            # the scenario's own words, as stored with it
            console.print(f"{view.info.name}: {escape(view.info.description.strip())}",
                          highlight=False)  # fmt: skip
        console.print(table(view))
        pre = pretest_table(view)
        if pre is not None:
            console.print(pre)
        for line in cache_lines(view):
            console.print(f"  [cyan]cache[/cyan] {escape(line)}", highlight=False)
        for line in notes(view):
            console.print(f"  [yellow]note[/yellow] {line}", highlight=False)
        for line in warnings(view):
            console.print(f"  [bold red]warning[/bold red] {escape(line)}", highlight=False)
