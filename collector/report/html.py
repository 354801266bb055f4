"""A self-contained HTML report: one file, no network needed to view it. The page: the
tables, the sections and their notes, with the figures of :mod:`collector.report.charts`
embedded as inline SVG, so no font, script or stylesheet is fetched."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime
from pathlib import Path

from matplotlib.figure import Figure

from collector import __version__
from collector.records import RunStatus
from collector.report import (
    ScenarioView,
    charts,
    devicecharts,
    fmt_cache,
    fmt_ms,
    fmt_ratio,
    fmt_runs,
    fmt_tps,
)
from collector.report import htmlsections as sections
from collector.report import rows as tables
from collector.report.findings import findings
from collector.stats import ratesearch
from collector.units import human_size
from collector.verdicts import caveats as caveat
from collector.verdicts import environment

CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
h1{font-size:1.6em}h2{margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.8em 0}td,th{border:1px solid #ccc;padding:.3em .6em}
th{background:#f0f0f0}td.num{text-align:right;font-variant-numeric:tabular-nums}
.partial{color:#a60}.failed{color:#b00}.note{color:#555;font-size:.9em}
.warn{color:#b00;font-weight:bold}
.verdict{font-size:1.15em;font-weight:bold}.legend,.words{font-size:.9em;margin:.2em 0}
.toc{columns:3;font-size:.85em}.toc li.h3{margin-left:1.5em}
figure{margin:1em 0}svg{max-width:100%;height:auto}
.pair{display:flex;gap:1em;align-items:flex-start}.pair figure{flex:1;min-width:0;margin:.5em 0}
"""


# --------------------------------------------------------------------------- latency under load


def _init_cell(init: dict, at_once) -> str:
    """The longest client's init seconds, and how many clients ran pgbench -i at once when
    the cell's database.json says it (older runs do not)."""
    if not init:
        return "-"
    text = f"{max(init.values()):.1f}"
    return f"{text} ({at_once} at once)" if isinstance(at_once, int) else text


def _wal_cell(db: dict) -> str:
    """Where the WAL was (``on the drive``, ``on hdd7200 (a drive of its own)``) and the
    block device the DB host's kernel saw it on."""
    where = str(db.get("wal_placement") or "-")
    device = (db.get("db_wal_device") or {}).get("device")
    return f"{where}: {device}" if device else where


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
                _wal_cell(db),
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
    cache = "cache (buffer hits, reads reaching the drive)"
    return sections.table([*head, "PostgreSQL", cache], rows, 3)


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
    """Per drive, the environment its runs came from (collector.verdicts.environment): PostgreSQL
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
    if len(merged) < 2:
        return sections.table(head, rows, 99)
    differ = [r for r in rows if r[-1] == "differs"]  # first; all folded below (no script)
    none = "<p>No setting differs between the drives.</p>"
    shown = sections.table(head, differ, 99) if differ else none
    every = f"<summary>every setting ({len(rows)})</summary>{sections.table(head, rows, 99)}"
    return f"{shown}<details>{every}</details>"


def _environment_section(view: ScenarioView) -> list[str]:
    table = _environment_table(view)
    return ["<h3>Environment per drive (what the figures came from)</h3>", table] if table else []


def render(views: list[ScenarioView], now: datetime | None = None) -> str:
    """The whole page; its figures drawn together once it is built (charts._draw_all)."""
    pending: list[Figure] = []
    token = charts._PENDING.set(pending)
    try:
        page = _page(views, now)
    finally:
        charts._PENDING.reset(token)
    svgs = [charts.own_ids(svg, n) for n, svg in enumerate(charts._draw_all(pending))]
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
        parts += _summary_section(view)
        parts += sections.search_section(view)
        database = _database_table(view)
        if database:
            parts.append("<h3>Database</h3>")
            parts.append(database)
        parts += [
            f"<figure>{svg}</figure>"
            for svg in (charts.plot_tps(view), charts.plot_ratio(view), charts.plot_all_tps(view))
            if svg
        ]
        parts += _runs_section(view)
        parts += sections.latency_section(view)
        parts += sections.sweep_section(view)
        parts += _series_section(view)
        lat = charts.plot_latency(view)
        if lat:
            parts.append(f"<h3>Latency distribution</h3><figure>{lat}</figure>")
        parts += _table_sections(findings(view))
        tele = devicecharts.plot_telemetry(view)
        if tele:
            parts.append("<h3>Device telemetry</h3>")
            parts += [f"<figure>{svg}</figure>" for _, svg in tele]
        if view.pretests:
            parts.append("<h3>Raw drive pre-tests (fio direct I/O, pg_test_fsync)</h3>")
            pre = [list(r) for r in findings(view).pretests]
            parts.append(sections.table(list(tables.PRETEST_COLUMNS), pre))
            sweep = devicecharts.plot_sweep(view)
            if sweep:
                parts.append(f"<figure>{sweep}</figure>")
        parts += sections.fio_matrix_section(view)
        parts.append(_physics(view))
        parts += _environment_section(view)
        parts += _facts_section(view)
    parts.append("</body></html>")
    return _with_contents("\n".join(parts))


_HEADING = re.compile(r"<(h[23])>(.*?)</\1>")


def _with_contents(page: str) -> str:
    """The page with an anchor before each heading, and their table of contents after its
    first paragraph: an 8,000-pixel page is read by its sections."""
    entries: list[tuple[str, str, str]] = []

    def named(m: re.Match) -> str:
        ident = f"sec-{len(entries) + 1}"
        entries.append((m.group(1), ident, m.group(2)))
        return f'<a id="{ident}"></a>{m.group(0)}'

    page = _HEADING.sub(named, page)
    items = "".join(
        f'<li class={level}><a href="#{ident}">{text}</a></li>' for level, ident, text in entries
    )
    nav = f"<nav><h2>Contents</h2><ul class=toc>{items}</ul></nav>"
    head, sep, rest = page.partition("</p>")
    return head + sep + nav + rest


def _table_sections(said) -> list[str]:
    """The report's tables of words (collector.report.rows.TABLES), each under its heading."""
    out = []
    for title, head, field, num in tables.TABLES:
        if rows := getattr(said, field):
            out += [f"<h3>{title}</h3>", sections.table(list(head), [list(r) for r in rows], num)]
    return out


def _summary_section(view: ScenarioView) -> list[str]:
    """The scenario's heading, its description, the cells' table and their warnings."""
    said = findings(view)
    parts = [f"<h2>Scenario {html.escape(view.info.name)}</h2>"]
    parts += [f"<p class=verdict>verdict: {html.escape(line)}</p>" for line in said.verdicts]
    if view.info.description:
        parts.append(f"<p class=desc>{html.escape(view.info.description.strip())}</p>")
    rows = [
        [
            f"{cv.drive} [{caveat.marks(cv.caveats)}]" if cv.caveats else cv.drive,
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
    head = ["drive", "test", "tps ± CI", f"x {view.baseline}", "pgbench sum", "p95 ms"]
    parts.append(sections.table([*head, "clients", "runs"], rows))
    if said.test_legend:
        parts.append(f"<p class=words>test: {html.escape(said.test_legend)}</p>")
    parts += [f"<p class=legend>[{m}] {html.escape(meaning)}</p>" for m, meaning in said.legend]
    parts += [
        f"<p class=warn>warning: {html.escape(f'{cv.drive} {cv.test}: {w}')}</p>"
        for cv in view.cells
        for w in (*cv.warnings, *([cv.drift] if cv.drift else []))
    ]
    parts += [
        f"<p class=note>{kind}: {html.escape(x)}</p>"
        for kind, lines in (
            ("checkpoint", said.checkpoints),
            ("drive state", said.states),
            ("start", said.starts),
        )
        for x in lines
    ]
    return parts


#: the columns of the runs' table
RUN_COLUMNS = (
    "drive",
    "test",
    "rep",
    "status",
    "tps (window)",
    "pgbench sum",
    "start skew s",
    "p95 ms",
    "reason",
)


def _runs_section(view: ScenarioView) -> list[str]:
    """Every run of every cell, a partial or failed one in its status's colour."""
    trs = []
    for cv in view.cells:
        for r in cv.stats.runs:
            cls = "" if r.status == RunStatus.COMPLETE else r.status.value
            row = [
                cv.drive,
                cv.test,
                str(r.repetition) + (f" (attempt {r.attempt})" if r.attempt > 1 else ""),
                r.status.value,
                "-" if r.tps is None else f"{r.tps:,.1f}" + ("" if r.windowed else " (sum)"),
                "-" if r.tps_reported_sum is None else f"{r.tps_reported_sum:,.1f}",
                "-" if r.start_skew_s is None else f"{r.start_skew_s:.3f}",
                fmt_ms(r.latency_p95_s),
                r.reason or "",
            ]
            tds = "".join(f"<td>{html.escape(v)}</td>" for v in row)
            trs.append(f'<tr class="{cls}">{tds}</tr>')
    head = "".join(f"<th>{h}</th>" for h in RUN_COLUMNS)
    return ["<h3>Runs</h3>", f"<table><tr>{head}</tr>{''.join(trs)}</table>"]


def _series_section(view: ScenarioView) -> list[str]:
    """Each cell's tps per second per client, beside its latency per second if it has one."""
    series = charts.plot_series(view)
    if not series:
        return []
    per_second = {
        f"{cv.drive} {cv.test}": svg
        for cv in view.cells
        if (svg := charts.plot_latency_series(cv)) is not None
    }
    parts = [
        "<h3>tps per second per client"
        + (", and latency per second" if per_second else "")
        + "</h3>"
    ]
    parts += [
        f"<div class=pair><figure>{svg}</figure><figure>{per_second[label]}</figure></div>"
        if label in per_second
        else f"<figure>{svg}</figure>"
        for label, svg in series
    ]
    return parts


def _facts_section(view: ScenarioView) -> list[str]:
    """The stored facts but the runs' (the Database table shows them) and the rate
    searches' (their own section), each distinct one once (device facts repeat per run)."""
    env = dict.fromkeys(
        (f.scope, f.host or "", f.key, str(f.value))
        for f in view.facts
        if f.scope not in ("run", ratesearch.FACT)
    )
    if not env:
        return []
    return [
        "<h3>Environment and device facts</h3>",
        sections.table(["scope", "host", "key", "value"], [list(r) for r in env], 99),
    ]


def _physics(view: ScenarioView) -> str:
    """The physics checks as a short list, as the terminal report words them."""
    items = [
        f"<li{' class=warn' if p.level == 'warning' else ''}>{html.escape(p.text)}</li>"
        for p in findings(view).physics
    ]
    return f"<h3>Physics checks</h3><ul>{''.join(items)}</ul>" if items else ""


def publish(views: list[ScenarioView], path: Path | str) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(render(views), encoding="utf-8")
    tmp.replace(p)
    return p
