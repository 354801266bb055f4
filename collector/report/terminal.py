"""The terminal table, like the seeds' ("SSD100 1472 tps, 13.9x 7200RPM"), with rich."""

from __future__ import annotations

from dataclasses import replace

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

from collector.report import ScenarioView, fiomatrix, fmt_ms, fmt_ratio, sweep
from collector.report import latency as load_steps
from collector.report.findings import (
    Findings,
    findings,
    shared_test,
    shared_words,
    test_rest,
)
from collector.report.rows import PRETEST_COLUMNS
from collector.verdicts import caveats as caveat
from collector.verdicts import physics


def table(view: ScenarioView) -> Table:
    """The seeds' shape (drive, tps, ratio to the baseline) first; it fits 80 columns:
    the numbers never wrap. Rows of different tests show only what their tests do not
    share (the shared words are printed once above the table); with one drive there is
    no ratio to show."""
    common = shared_test(view)
    base = view.baseline or "-"
    ratios = len(view.drives) > 1
    t = Table(
        title=f"{view.info.name}: tps over the window where all clients ran",
        caption="mean and 95% CI over complete runs; sum: pgbench's own tps, summed over"
        " the clients; runs: complete/stored" + (f"; baseline: {base}" if ratios else ""),
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        title_justify="left",
        caption_justify="left",
    )
    t.add_column("drive", no_wrap=True)
    rests = {cv.test: test_rest(view, cv.test) for cv in view.cells}
    if common is None:
        t.add_column(
            "test", overflow="fold", ratio=1, min_width=min(max(map(len, rests.values())), 14)
        )
    numbers = ("tps", "± CI", *((f"x {base}"[:12], "ratio CI") if ratios else ()), "sum",
               "p95 ms", "runs")  # fmt: skip
    for name in numbers:
        t.add_column(name, justify="right", no_wrap=True)
    clients = len({cv.stats.clients for cv in view.cells}) > 1
    if clients:
        t.add_column("clients", justify="right", no_wrap=True)
    for cv in sorted(view.cells, key=lambda c: (c.test, view.drives.index(c.drive))):
        cs = cv.stats
        r = cv.baseline_ratio
        ratio = fmt_ratio(r if r is None else replace(r, ci_low=None), cv.is_baseline)
        ratio_ci = ""
        if r is not None and r.ci_low is not None and not cv.is_baseline:
            ratio_ci = f"{r.ci_low:.3g}-{r.ci_high:.3g}"  # three digits: 1.43-1.71, 29.7-35.5
        # the caveats' marks on the row itself (their legend under the table)
        mark = caveat.marks(cv.caveats)
        row = [escape(f"{cv.drive} [{mark}]") if mark else cv.drive]
        row += [] if common is not None else [rests[cv.test]]
        row += [
            "-" if cs.tps is None else f"{cs.tps.mean:,.1f}",
            "" if cs.tps is None or cs.tps.half_width is None else f"{cs.tps.half_width:,.1f}",
            *((ratio, ratio_ci) if ratios else ()),
            f"{cs.tps_reported.mean:,.1f}" if cs.tps_reported else "-",
            fmt_ms(cs.latency_p95_s.mean if cs.latency_p95_s else None),
            f"{cs.complete}/{cs.complete + cs.partial + cs.failed}",
        ]
        t.add_row(*row, *([str(cs.clients)] if clients else []))
    return t


def pretest_table(view: ScenarioView) -> Table | None:
    rows = findings(view).pretests
    if not rows:
        return None
    t = Table(title=f"{view.info.name}: raw drive pre-tests (fio direct I/O, pg_test_fsync)")
    for i, col in enumerate(PRETEST_COLUMNS):
        t.add_column(col, justify="left" if i < 2 else "right")
    for r in rows:
        t.add_row(*r)
    return t


# --------------------------------------------------------------------------- latency under load


def _fig(value: float | None, fmt: str = ",.1f") -> str:
    return "-" if value is None else format(value, fmt)


def latency_table(view: ScenarioView, steps: list[load_steps.LoadStep]) -> Table:
    """One drive's latency against throughput: a row per rate step, ordered by the total
    rate; it fits 80 columns (the drive and test are in the title, which may wrap)."""
    first = steps[0]
    per = "total" if first.rate_per == "total" else "per host"
    t = Table(
        title=f"{first.drive} {first.group}: latency under load",
        caption=f"rate/s: all {first.hosts} client hosts together (-R per host x {first.hosts},"
        f" given {per}); tps and latency: the window where all clients ran, mean of complete"
        " runs; late (above -L) and skipped: per run",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        title_justify="left",
        caption_justify="left",
    )
    for name in ("rate/s", "tps", "p50 ms", "p95 ms", "p99 ms", "late", "skipped"):
        t.add_column(name, justify="right", no_wrap=True)
    t.add_column("rate held", no_wrap=True)
    for s in steps:
        t.add_row(
            "none" if s.rate_total is None else f"{s.rate_total:,}",
            _fig(s.tps),
            _fig(s.p50_ms, ",.2f"),
            _fig(s.p95_ms, ",.2f"),
            _fig(s.p99_ms, ",.2f"),
            _fig(s.late, ",.0f"),
            _fig(s.skipped, ",.0f"),
            s.held,
        )
    return t


def print_latency(view: ScenarioView, console: Console) -> None:
    """The latency-vs-throughput tables of a scenario with rate steps, and why a rate
    was not held."""
    for group in load_steps.steps(view).values():
        console.print(latency_table(view, group))
    for line in load_steps.lag_lines(view):
        console.print(f"  [bold red]lag[/bold red] {escape(line)}", highlight=False)


def print_fio_matrix(view: ScenarioView, console: Console) -> None:
    """A fio matrix's throughput by block size (seed study 004's table); every job's
    figures and the plots are the HTML page's and the JSON's."""
    found = fiomatrix.jobs(view)
    if not found:
        return
    head, rows = fiomatrix.by_block_size(found)
    t = Table(title=f"{view.info.name}: fio matrix, MB/s by block size", box=box.SIMPLE_HEAD,
              show_edge=False, pad_edge=False, title_justify="left")  # fmt: skip
    for i, name in enumerate(head):
        t.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        t.add_row(*row)
    console.print(t)
    console.print(f"  fio matrix: {len(found)} jobs (IOPS, p99 and p99.9 of each, and the plots:"
                  " report --html)", highlight=False)  # fmt: skip


def print_sweeps(view: ScenarioView, console: Console) -> None:
    """Each client sweep's curve as a table (a row per connection count, the tps gain
    per doubling from the count before, the knee marked) and the knee rule's verdict."""
    for curve in sweep.curves(view):
        # the title a line of its own: a table's title wraps at the table's width
        console.print(f"{escape(curve.drive)} {escape(curve.test)}: tps against connections",
                      highlight=False)  # fmt: skip
        t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        for name in ("connections", "-c x hosts", "-j", "tps", "p50 ms", "p95 ms", "p99 ms"):
            t.add_column(name, justify="right", no_wrap=True)
        t.add_column("gain/doubling", justify="right", no_wrap=True)
        t.add_column("", no_wrap=True)
        for p, row in zip(curve.points, sweep.rows(curve), strict=True):
            marks = f"[{p.marks}]" if p.marks else ""
            t.add_row(*row[1:-1], escape(" ".join(w for w in (row[-1], marks) if w)))
        console.print(t)
        console.print(Padding(escape(sweep.knee_line(curve)), (0, 0, 0, 2)), highlight=False)


def publish(
    views: list[ScenarioView], console: Console | None = None, *, verbose: bool = False
) -> None:
    """The report of ``views`` on the terminal. Lines that say more than the figures
    need (each cell's start, the notes of what a drive is) one line each only with
    ``verbose``; else the start lines in one and the notes counted."""
    console = console or Console()
    for view in views:
        said = findings(view)
        _heading(view, said, console)
        console.print(table(view))
        for mark, meaning in said.legend:
            console.print(f"  [bold]\\[{mark}][/bold] {escape(meaning)}", highlight=False)
        print_latency(view, console)
        print_sweeps(view, console)
        pre = pretest_table(view)
        if pre is not None:
            console.print(pre)
        print_fio_matrix(view, console)
        _lines(said, console, verbose)


def _heading(view: ScenarioView, said: Findings, console: Console) -> None:
    """The scenario's own words, the verdict lines, the test every row shares."""
    if view.info.description:
        console.print(f"{view.info.name}: {escape(view.info.description.strip())}",
                      highlight=False)  # fmt: skip
    for line in said.verdicts:
        console.print(f"[bold]verdict[/bold] {escape(line)}", highlight=False)
    common = shared_test(view)
    if common is not None:
        console.print(f"test: {escape(common)}", highlight=False)
    elif shared_words(view):
        console.print(f"test: {escape(' '.join(shared_words(view)))} (and what each row adds)",
                      highlight=False)  # fmt: skip
    if said.test_legend:
        # folded under its indent at any width
        console.print(Padding(f"[dim]{escape(said.test_legend)}[/dim]", (0, 0, 0, 2), expand=False),
                      highlight=False)  # fmt: skip


def _lines(said: Findings, console: Console, verbose: bool) -> None:
    """The report's lines under its tables, each kind with its word."""
    for line in said.searches:
        console.print(f"  [green]rate search[/green] {escape(line)}", highlight=False,
                      soft_wrap=True)  # fmt: skip
    for line in said.cache:
        console.print(f"  [cyan]cache[/cyan] {escape(line)}", highlight=False)
    for line in said.checkpoints:
        console.print(f"  [magenta]checkpoint[/magenta] {escape(line)}", highlight=False)
    for line in said.states:
        console.print(f"  [yellow]drive state[/yellow] {escape(line)}", highlight=False)
    starts = said.starts if verbose or said.start_summary is None else (said.start_summary,)
    for line in starts:
        console.print(f"  [blue]start[/blue] {escape(line)}", highlight=False)
    notes = [p for p in said.physics if p.level != physics.WARNING]
    for p in said.physics:
        if p.level != physics.WARNING and not verbose:
            continue
        style = "bold red" if p.level == physics.WARNING else "cyan"
        console.print(f"  [{style}]{p.kind}[/{style}] {escape(p.who)}: {escape(p.message)}",
                      highlight=False)  # fmt: skip
    if notes and not verbose:
        console.print(f"  [cyan]physics[/cyan] {len(notes)} notes (checks not made, what a"
                      " drive is): report -v lists them", highlight=False)  # fmt: skip
    for line in said.notes:
        console.print(f"  [yellow]note[/yellow] {line}", highlight=False)
    for line in said.warnings:
        console.print(f"  [bold red]warning[/bold red] {escape(line)}", highlight=False)
