"""Every report a verb asks for, from one store: the terminal's table always, HTML,
CSV and JSON on request. ``drivelab report`` and the end of ``drivelab run`` both call
:func:`publish`."""

from __future__ import annotations

from pathlib import Path


def publish(
    db,
    scenario: str | None = None,
    baseline: str | None = None,
    *,
    html: Path | None = None,
    csv: Path | None = None,
    json: Path | None = None,
    verbose: bool = False,
) -> int:
    """The report of ``scenario`` (all scenarios when None) from the store ``db`` on the
        terminal, then the files asked for (``json`` ``-``: the JSON document on stdout, alone,
    instead of the terminal's table); 0 (a verb's exit code)."""
    from rich.console import Console  # noqa: PLC0415  (keep --help fast)

    from collector.report import export, load_all, open_store, terminal  # noqa: PLC0415

    with open_store(db) as store:
        views = load_all(store, [scenario] if scenario else None, baseline)
    # JSON to stdout (``--json -``): stdout is the document alone, the rest on stderr
    to_stdout = json is not None and str(json) == "-"
    console = Console(stderr=to_stdout)
    if not to_stdout:
        terminal.publish(views, console, verbose=verbose)
    if html:
        from collector.report import html as html_report  # noqa: PLC0415  (matplotlib: slow)

        console.print(f"HTML report: {html_report.publish(views, html)}")
    if csv:
        files = export.write_csv(views, csv)
        console.print(f"CSV: {len(files)} files in {csv}")
    if json:
        written = export.write_json(views, json)
        if written is not None:
            console.print(f"JSON: {written}")
    return 0
