"""Sections of the HTML page beside its main ones (:mod:`collector.report.html`): the
rate steps, the rate searches and the client sweeps, each a heading, tables and plots,
and the page's one way of writing a table."""

from __future__ import annotations

import html

from collector.report import ScenarioView, charts, fiomatrix, fmt_ms, sweep
from collector.report import latency as load_steps
from collector.report.findings import rate_searches


def latency_section(view: ScenarioView) -> list[str]:
    """The latency-vs-throughput table and plot of each drive with rate steps."""
    groups = load_steps.steps(view)
    if not groups:
        return []
    parts = ["<h3>Latency under load (rate steps)</h3>"]
    plots = dict(charts.plot_latency_throughput(view))
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
        parts.append(table([*head, "late", "skipped", "rate held"], rows, 0))
        if f"{drive} {group}" in plots:
            parts.append(f"<figure>{plots[f'{drive} {group}']}</figure>")
    parts += [f"<p class=warn>lag: {html.escape(x)}</p>" for x in load_steps.lag_lines(view)]
    return parts


def table(headers: list[str], rows: list[list[str]], num_from: int = 2) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            cls = ' class="num"' if i >= num_from else ""
            cells.append(f"<td{cls}>{html.escape(str(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def search_section(view: ScenarioView) -> list[str]:
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
    parts = ["<h3>Rate search</h3>", table([*head, "steps", "how it ended"], rows)]
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
            table(["step", "total rate", "per host", "p99 ms", "verdict", "why"], steps, 1)
        )
    return parts


def sweep_section(view: ScenarioView) -> list[str]:
    """Each client sweep's curve: tps and latency against the total connections, the
    knee rule's verdict, the table of its counts."""
    found = sweep.curves(view)
    if not found:
        return []
    parts = ["<h3>tps against connections (client sweep)</h3>"]
    svg = sweep.plot(found)
    parts.append(f"<figure>{svg}</figure>")
    for curve in found:
        parts.append(f"<p class=note>{html.escape(sweep.knee_line(curve))}</p>")
        parts.append(table(list(sweep.COLUMNS), sweep.rows(curve), 1))
    return parts


def fio_matrix_section(view: ScenarioView) -> list[str]:
    """A fio matrix's jobs: per drive the plots over block size and iodepth, seed study
    004's table of throughput by block size, and every job's figures."""
    found = fiomatrix.jobs(view)
    if not found:
        return []
    parts = ["<h3>fio matrix (raw drive, each job after the other)</h3>"]
    parts += [f"<figure>{svg}</figure>" for _, svg in fiomatrix.plots(found)]
    head, rows = fiomatrix.by_block_size(found)
    parts.append("<p class=note>Throughput by block size, read and write (seed study 004's"
                 " table)</p>")  # fmt: skip
    parts.append(table(head, rows, 1))
    parts.append(table(list(fiomatrix.COLUMNS), fiomatrix.rows(found), 7))
    return parts
