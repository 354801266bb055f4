"""The terminal table: :func:`render_table` draws one row per client with rich;
:func:`status_text` says when a running client has gone quiet."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from collector.live.state import ClientRow, RunLabels, Status

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["QUIET_AFTER_S", "render_table", "status_text"]

#: a running client with no new line for this long is shown as quiet
QUIET_AFTER_S = 5.0


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _clock_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"


def status_text(row: ClientRow, now: float) -> str:
    """The status cell: a running client that has gone quiet says for how long."""
    if row.status is Status.RUNNING and row.updated_at is not None:
        quiet = now - row.updated_at
        if quiet >= QUIET_AFTER_S:
            return f"running, quiet {quiet:.0f} s"
    return row.status.value


_STYLES = {
    Status.WAITING: "dim",
    Status.RUNNING: "green",
    Status.DONE: "bold green",
    Status.FAILED: "bold red",
    Status.LOST: "yellow",
}


def render_table(
    rows: Sequence[ClientRow], labels: RunLabels | None = None, *, now: float | None = None
) -> Table:
    """One row per client: status, tps now, tps so far, latency (ms), elapsed /
    remaining. The caption sums tps over the clients and gives every reason."""
    from rich.table import Table  # noqa: PLC0415

    now = time.time() if now is None else now
    table = Table(title=labels.title() if labels else None, title_justify="left")
    table.add_column("client")
    table.add_column("status")
    table.add_column("tps now", justify="right")
    table.add_column("tps so far", justify="right")
    table.add_column("latency ms", justify="right")
    table.add_column("elapsed / remaining", justify="right")
    for row in rows:
        table.add_row(
            row.client,
            f"[{_STYLES[row.status]}]{status_text(row, now)}[/]",
            _num(row.tps_now, ",.1f"),
            _num(row.tps_average, ",.1f"),
            _num(None if row.latency_s is None else row.latency_s * 1e3, ",.3f"),
            f"{_clock_time(row.elapsed_s)} / {_clock_time(row.remaining_s)}",
        )
    notes = []
    now_sum = [r.tps_now for r in rows if r.tps_now is not None and r.status is Status.RUNNING]
    avg_sum = [r.tps_average for r in rows if r.tps_average is not None]
    if now_sum or avg_sum:
        notes.append(f"all clients: {sum(now_sum):,.1f} tps now, {sum(avg_sum):,.1f} tps so far")
    notes += [f"{r.client}: {r.reason}" for r in rows if r.reason]
    if notes:
        table.caption = "\n".join(notes)
        table.caption_justify = "left"
    return table
