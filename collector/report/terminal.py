"""The terminal table, like the seeds' ("SSD100 1472 tps, 13.9x 7200RPM"), with rich."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from collector.records import RunStatus
from collector.report import ScenarioView, fmt_ms, fmt_ratio, fmt_runs, fmt_tps


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


def warnings(view: ScenarioView) -> list[str]:
    """One line per cell whose runs carry a database warning (fits in RAM)."""
    return [f"{cv.drive} {cv.test}: {w}" for cv in view.cells for w in cv.warnings]


def publish(views: list[ScenarioView], console: Console | None = None) -> None:
    console = console or Console()
    for view in views:
        console.print(table(view))
        for line in notes(view):
            console.print(f"  [yellow]note[/yellow] {line}", highlight=False)
        for line in warnings(view):
            console.print(f"  [bold red]warning[/bold red] {escape(line)}", highlight=False)
