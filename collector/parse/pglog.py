"""The server log's checkpoint lines (``log_checkpoints = on``), PostgreSQL 13 to 17,
as the pgbench_run role keeps them (``pg_checkpoints.log``): one
:class:`CheckpointEvent` per checkpoint, its start and end from the lines' timestamps.

A line starts with ``log_line_prefix``'s ``%m`` (drivelab sets
``'%m [%p] %q%u@%d '`` and ``log_timezone = 'UTC'``)::

    2025-01-31 12:00:00.123 UTC [41] LOG:  checkpoint starting: wal
    2025-01-31 12:00:03.456 UTC [41] LOG:  checkpoint complete: wrote 296 buffers (14.5%);
        0 WAL file(s) added, 2 removed, 1 recycled; write=2.628 s, sync=0.130 s,
        total=2.808 s; sync files=41, longest=0.010 s, average=0.004 s;
        distance=49229 kB, estimate=49229 kB[; lsn=0/5E2B9C8, redo lsn=0/5DD1F30]   (16+)

(one line in the log). ``starting:`` names the reasons (``time``, ``wal``,
``immediate force wait``, ``shutdown``, ...). A standby logs ``restartpoint`` lines of
the same shape. A complete line without its start (the checkpoint began before the
lines kept) gets its start from ``total=``; a start without its end (still running
when the run ended) has no end.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import asdict, dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from collector.parse import ParseError, excerpt

_LINE = re.compile(
    r"^(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) (?P<zone>\S+) .*?"
    r"\b(?P<level>LOG|WARNING):\s+(?P<message>.*)$"
)
_EVENT = re.compile(
    r"^(?P<kind>checkpoint|restartpoint) (?P<what>starting|complete): ?(?P<rest>.*)$"
)
_TOO_OFTEN = re.compile(r"^checkpoints are occurring too frequently")
#: figures of a complete line, each by its own words (never by position)
_FIGURES = (
    (re.compile(r"wrote (\d+) buffers \(([\d.]+)%\)"), ("buffers", "buffers_pct")),
    (
        re.compile(r"(\d+) (?:WAL|transaction log) file\(s\) added, (\d+) removed, (\d+) recycled"),
        ("wal_added", "wal_removed", "wal_recycled"),
    ),
    (
        re.compile(r"write=([\d.]+) s, sync=([\d.]+) s, total=([\d.]+) s"),
        ("write_s", "sync_s", "total_s"),
    ),
    (
        re.compile(r"sync files=(\d+), longest=([\d.]+) s, average=([\d.]+) s"),
        ("sync_files", "longest_sync_s", "average_sync_s"),
    ),
    (re.compile(r"distance=(\d+) kB, estimate=(\d+) kB"), ("distance_bytes", "estimate_bytes")),
    (
        re.compile(r"\blsn=([0-9A-F]+/[0-9A-F]+), redo lsn=([0-9A-F]+/[0-9A-F]+)"),
        ("lsn", "redo_lsn"),
    ),
)
_KB = ("distance_bytes", "estimate_bytes")
_TEXT = ("lsn", "redo_lsn")
_UTC = ("UTC", "GMT", "Etc/UTC", "Etc/GMT", "UCT", "Zulu", "Etc/Zulu")


@dataclass(frozen=True)
class CheckpointEvent:
    """One checkpoint (or a standby's restartpoint) as the log tells it. ``start`` and
    ``end`` are epoch seconds; ``start_from_total``: the start line was not among the
    lines, so ``start`` is ``end - total_s``."""

    start: float | None
    end: float | None
    reason: str | None
    kind: str = "checkpoint"
    start_from_total: bool = False
    buffers: int | None = None
    buffers_pct: float | None = None
    wal_added: int | None = None
    wal_removed: int | None = None
    wal_recycled: int | None = None
    write_s: float | None = None
    sync_s: float | None = None
    total_s: float | None = None
    sync_files: int | None = None
    longest_sync_s: float | None = None
    average_sync_s: float | None = None
    distance_bytes: int | None = None
    estimate_bytes: int | None = None
    lsn: str | None = None
    redo_lsn: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v is not False}


@dataclass(frozen=True)
class CheckpointLog:
    events: tuple[CheckpointEvent, ...]
    #: "checkpoints are occurring too frequently" warnings
    too_frequent: int = 0


def zone(name: str | None) -> dt.tzinfo:
    """The tzinfo of the server's log_timezone (UTC when unknown)."""
    if not name or name in _UTC:
        return dt.UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ParseError(name, None, "unknown log_timezone") from None


def _stamp(text: str, abbrev: str, tz: dt.tzinfo) -> float:
    when = dt.datetime.fromisoformat(text)
    return when.replace(tzinfo=dt.UTC if abbrev in ("UTC", "GMT") else tz).timestamp()


def _figures(rest: str, source: str, lineno: int, line: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pattern, names in _FIGURES:
        m = pattern.search(rest)
        if m is None:
            continue
        for name, value in zip(names, m.groups(), strict=True):
            if name in _TEXT:
                out[name] = value
            elif name in _KB:
                out[name] = int(value) * 1024
            else:
                out[name] = float(value) if "." in value else int(value)
    if "buffers" not in out or "total_s" not in out:
        raise ParseError(
            source, lineno, f"a checkpoint complete line without its figures {excerpt(line)}"
        )
    return out


def parse_checkpoint_log(
    text: str, source: str = "<log>", timezone: str | None = "UTC"
) -> CheckpointLog:
    """Every checkpoint of ``text`` (log lines; others are skipped), oldest first. A
    checkpoint line without a timestamp prefix, or a complete line without its figures,
    raises :class:`ParseError` naming the file and line."""
    tz = zone(timezone)
    events: list[CheckpointEvent] = []
    pending: tuple[float, str, str] | None = None  # start, kind, reason
    too_frequent = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        m = _LINE.match(line)
        if m is None:
            if "checkpoint" in line and ("starting:" in line or "complete:" in line):
                raise ParseError(
                    source, lineno, f"a checkpoint line without a timestamp {excerpt(line)}"
                )
            continue
        message = m["message"]
        if _TOO_OFTEN.match(message):
            too_frequent += 1
            continue
        e = _EVENT.match(message)
        if e is None:
            continue
        at = _stamp(m["stamp"], m["zone"], tz)
        if e["what"] == "starting":
            if pending is not None:  # its end was not logged (a crash): keep what is known
                events.append(CheckpointEvent(pending[0], None, pending[2], pending[1]))
            pending = (at, e["kind"], e["rest"].strip() or None)
            continue
        figures = _figures(e["rest"], source, lineno, line)
        if pending is not None and pending[1] == e["kind"]:
            events.append(CheckpointEvent(pending[0], at, pending[2], e["kind"], **figures))
        else:
            start = round(at - figures["total_s"], 3)
            events.append(CheckpointEvent(start, at, None, e["kind"], True, **figures))
        pending = None
    if pending is not None:
        events.append(CheckpointEvent(pending[0], None, pending[2], pending[1]))
    return CheckpointLog(tuple(events), too_frequent)
