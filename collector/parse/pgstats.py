"""The server's checkpoint, background writer, WAL and I/O counters, as the pgbench_run
role reads them (``pg_server-<when>.json``: the raw rows of the views the server has),
normalized across PostgreSQL 13 to 17, and the deltas of two such snapshots.

Where each figure comes from, by major version (bgwriter: pg_stat_bgwriter,
checkpointer: pg_stat_checkpointer, the views' own column names)::

    figure                  13-16                            17
    checkpoints_timed       bgwriter.checkpoints_timed       checkpointer.num_timed
    checkpoints_requested   bgwriter.checkpoints_req         checkpointer.num_requested
    checkpoint_write_s      bgwriter.checkpoint_write_time   checkpointer.write_time
    checkpoint_sync_s       bgwriter.checkpoint_sync_time    checkpointer.sync_time
    buffers_checkpoint      bgwriter.buffers_checkpoint      checkpointer.buffers_written
    buffers_clean           bgwriter.buffers_clean           (the same)
    buffers_backend         bgwriter.buffers_backend         pg_stat_io: writes } of relations, by
    buffers_backend_fsync   bgwriter.buffers_backend_fsync   pg_stat_io: fsyncs } every backend type
                                                             but checkpointer and background writer
    wal_*                   pg_stat_wal (14+; none in 13: WAL bytes from the LSN then)

Times are milliseconds in the views and seconds here; counters are numbers. A view the
server's version has but the snapshot lacks, or a figure that is not a number, is a
:class:`ParseError` naming the file and the key: the snapshot is not what it claims.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from collector.parse import ParseError

#: figure -> (first major version, view, column, scale to base units); the latest entry
#: whose version is at most the server's is the figure's source
FIELDS: dict[str, tuple[tuple[int, str, str, float], ...]] = {
    "checkpoints_timed": (
        (13, "pg_stat_bgwriter", "checkpoints_timed", 1),
        (17, "pg_stat_checkpointer", "num_timed", 1),
    ),
    "checkpoints_requested": (
        (13, "pg_stat_bgwriter", "checkpoints_req", 1),
        (17, "pg_stat_checkpointer", "num_requested", 1),
    ),
    "checkpoint_write_s": (
        (13, "pg_stat_bgwriter", "checkpoint_write_time", 1e-3),
        (17, "pg_stat_checkpointer", "write_time", 1e-3),
    ),
    "checkpoint_sync_s": (
        (13, "pg_stat_bgwriter", "checkpoint_sync_time", 1e-3),
        (17, "pg_stat_checkpointer", "sync_time", 1e-3),
    ),
    "buffers_checkpoint": (
        (13, "pg_stat_bgwriter", "buffers_checkpoint", 1),
        (17, "pg_stat_checkpointer", "buffers_written", 1),
    ),
    "buffers_clean": ((13, "pg_stat_bgwriter", "buffers_clean", 1),),
    "maxwritten_clean": ((13, "pg_stat_bgwriter", "maxwritten_clean", 1),),
    "buffers_alloc": ((13, "pg_stat_bgwriter", "buffers_alloc", 1),),
    "buffers_backend": ((13, "pg_stat_bgwriter", "buffers_backend", 1),),
    "buffers_backend_fsync": ((13, "pg_stat_bgwriter", "buffers_backend_fsync", 1),),
    "wal_records": ((14, "pg_stat_wal", "wal_records", 1),),
    "wal_fpi": ((14, "pg_stat_wal", "wal_fpi", 1),),
    "wal_bytes": ((14, "pg_stat_wal", "wal_bytes", 1),),
    "wal_buffers_full": ((14, "pg_stat_wal", "wal_buffers_full", 1),),
    "wal_write": ((14, "pg_stat_wal", "wal_write", 1),),
    "wal_sync": ((14, "pg_stat_wal", "wal_sync", 1),),
    "wal_write_s": ((14, "pg_stat_wal", "wal_write_time", 1e-3),),
    "wal_sync_s": ((14, "pg_stat_wal", "wal_sync_time", 1e-3),),
}
#: the first major version with each view
VIEWS = {
    "pg_stat_bgwriter": 13,
    "pg_stat_wal": 14,
    "pg_stat_io": 16,
    "pg_stat_checkpointer": 17,
}
#: pg_stat_io's counters (times in ms become *_s); op_bytes and stats_reset are not counters
IO_COUNTERS = (
    "reads", "read_time", "writes", "write_time", "writebacks", "writeback_time",
    "extends", "extend_time", "hits", "evictions", "reuses", "fsyncs", "fsync_time",
)  # fmt: skip
#: pg_stat_io's backend types that are not backends (their writes are counted apart)
NOT_BACKENDS = ("checkpointer", "background writer")
IoKey = tuple[str, str, str]


@dataclass(frozen=True)
class ServerSnapshot:
    """One snapshot, normalized: ``counters`` by the names of :data:`FIELDS` (None where
    the version has no source), ``io`` pg_stat_io's rows by (backend_type, object,
    context), ``resets`` each view's stats_reset (a changed one voids its deltas)."""

    version: int
    at: float
    wal_lsn_bytes: int | None
    counters: Mapping[str, float | None]
    io: Mapping[IoKey, Mapping[str, float]] = field(default_factory=dict)
    resets: Mapping[str, str | None] = field(default_factory=dict)
    #: where buffers_backend and its fsyncs came from
    backend_source: str = "pg_stat_bgwriter"

    @property
    def major(self) -> int:
        return self.version // 10000


def _number(value: Any, source: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParseError(source, None, f"{key!r} must be a number, not {value!r:.40}")
    return value


def _row(server: Mapping[str, Any], view: str, source: str) -> Mapping[str, Any]:
    row = server.get(view)
    if not isinstance(row, dict):
        what = "missing" if row is None else f"not an object ({type(row).__name__})"
        raise ParseError(
            source,
            None,
            f"'server.{view}' is {what}, and PostgreSQL {server['server_version_num']}"
            f" has that view",
        )
    return row


def _io_rows(server: Mapping[str, Any], source: str) -> tuple[dict[IoKey, dict[str, float]], str]:
    """pg_stat_io's rows by (backend_type, object, context), and their stats_reset
    (the latest: a reset of the view resets every row)."""
    rows = server.get("pg_stat_io")
    if not isinstance(rows, list):
        raise ParseError(source, None, "'server.pg_stat_io' must be a list of rows")
    out: dict[IoKey, dict[str, float]] = {}
    resets = set()
    for i, row in enumerate(rows):
        where = f"server.pg_stat_io[{i}]"
        if not isinstance(row, dict):
            raise ParseError(source, None, f"{where!r} must be an object")
        key = tuple(str(row.get(k)) for k in ("backend_type", "object", "context"))
        resets.add(str(row.get("stats_reset")))
        figures = {}
        for col in IO_COUNTERS:
            value = row.get(col)
            if value is None:  # an operation this backend type never does in this context
                continue
            name = col.removesuffix("_time") + "_s" if col.endswith("_time") else col
            scale = 1e-3 if col.endswith("_time") else 1
            figures[name] = _number(value, source, f"{where}.{col}") * scale
        out[key] = figures  # type: ignore[index]
    return out, max(resets, default="")


def read_snapshot(server: Mapping[str, Any], source: str) -> ServerSnapshot:
    """The raw ``server`` object of a ``pg_server-<when>.json`` (``source``: its file),
    normalized for its server's version (its ``server_version_num``)."""
    if not isinstance(server, dict):
        raise ParseError(source, None, "'server' must be an object")
    version = server.get("server_version_num")
    if isinstance(version, bool) or not isinstance(version, int) or version < 130000:
        raise ParseError(
            source, None, f"'server.server_version_num' must be 130000 or later, not {version!r}"
        )
    major = version // 10000
    at = _number(server.get("at"), source, "server.at")
    lsn = server.get("wal_lsn_bytes")
    if lsn is not None:
        lsn = int(_number(lsn, source, "server.wal_lsn_bytes"))
    rows = {
        v: _row(server, v, source)
        for v, since in VIEWS.items()
        if major >= since and v != "pg_stat_io"
    }
    counters: dict[str, float | None] = {}
    for name, sources in FIELDS.items():
        chosen = [s for s in sources if s[0] <= major]
        if not chosen:
            counters[name] = None
            continue
        _, view, column, scale = chosen[-1]
        value = rows[view].get(column)
        # a later version may drop a column (18 moved wal_write to pg_stat_io): None
        counters[name] = (
            None if value is None else _number(value, source, f"server.{view}.{column}") * scale
        )
    resets = {v: row.get("stats_reset") for v, row in rows.items()}
    io: dict[IoKey, dict[str, float]] = {}
    if major >= VIEWS["pg_stat_io"]:
        io, resets["pg_stat_io"] = _io_rows(server, source)
    backend = "pg_stat_bgwriter"
    if counters["buffers_backend"] is None and io:
        backends = [
            f
            for (btype, obj, _), f in io.items()
            if btype not in NOT_BACKENDS and obj == "relation"
        ]
        counters["buffers_backend"] = sum(f.get("writes", 0) for f in backends)
        counters["buffers_backend_fsync"] = sum(f.get("fsyncs", 0) for f in backends)
        backend = "pg_stat_io"
    return ServerSnapshot(version, at, lsn, counters, io, resets, backend)


#: the keys of the run facts pg_checkpoints and pg_wal -> the snapshot's figure each is
#: the delta of
CHECKPOINT_KEYS = {
    "timed": "checkpoints_timed",
    "requested": "checkpoints_requested",
    "buffers_checkpoint": "buffers_checkpoint",
    "buffers_clean": "buffers_clean",
    "maxwritten_clean": "maxwritten_clean",
    "buffers_backend": "buffers_backend",
    "backend_fsyncs": "buffers_backend_fsync",
    "buffers_alloc": "buffers_alloc",
    "write_s": "checkpoint_write_s",
    "sync_s": "checkpoint_sync_s",
}
WAL_KEYS = {
    "records": "wal_records",
    "fpi": "wal_fpi",
    "bytes": "wal_bytes",
    "buffers_full": "wal_buffers_full",
    "writes": "wal_write",
    "syncs": "wal_sync",
    "write_s": "wal_write_s",
    "sync_s": "wal_sync_s",
}


def _source_view(name: str, major: int) -> str:
    chosen = [s for s in FIELDS[name] if s[0] <= major]
    return chosen[-1][1] if chosen else ""


def _delta(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    d = b - a
    return int(d) if float(d).is_integer() else round(d, 6)


@dataclass(frozen=True)
class ServerDeltas:
    """What the server did between two snapshots: ``checkpoints`` and ``wal`` by the
    keys of :data:`CHECKPOINT_KEYS` and :data:`WAL_KEYS`, ``io`` the pg_stat_io rows
    with a non-zero delta, ``reset`` the views whose statistics were reset in between
    (their figures are None)."""

    seconds: float
    version: int
    checkpoints: Mapping[str, Any]
    wal: Mapping[str, Any]
    io: Sequence[Mapping[str, Any]]
    reset: Sequence[str] = ()


def deltas(before: ServerSnapshot, after: ServerSnapshot) -> ServerDeltas:
    """``after`` minus ``before``. A view whose stats_reset changed gives None figures."""
    reset = sorted(v for v in after.resets if before.resets.get(v) != after.resets[v])
    major = after.major

    def group(keys: Mapping[str, str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, name in keys.items():
            view = _source_view(name, major)
            if name.startswith("buffers_backend") and after.backend_source == "pg_stat_io":
                view = "pg_stat_io"
            void = view in reset
            out[key] = None if void else _delta(before.counters.get(name), after.counters.get(name))
        return out

    checkpoints = group(CHECKPOINT_KEYS)
    checkpoints["source"] = (
        "pg_stat_bgwriter" if major < 17 else "pg_stat_checkpointer, pg_stat_bgwriter, pg_stat_io"
    )
    wal = group(WAL_KEYS)
    lsn = _delta(before.wal_lsn_bytes, after.wal_lsn_bytes)
    wal["lsn_bytes"] = lsn
    if major < VIEWS["pg_stat_wal"]:
        wal["bytes"] = lsn
        wal["source"] = "WAL position (pg_current_wal_lsn)"
    else:
        wal["source"] = "pg_stat_wal"
    io = []
    for key, figures in sorted(after.io.items()):
        if "pg_stat_io" in reset:
            break
        old = before.io.get(key, {})
        row = {n: _delta(old.get(n, 0), v) for n, v in figures.items()}
        row = {n: v for n, v in row.items() if v}
        if row:
            io.append({"backend_type": key[0], "object": key[1], "context": key[2], **row})
    return ServerDeltas(
        seconds=round(after.at - before.at, 6),
        version=after.version,
        checkpoints=checkpoints,
        wal=wal,
        io=io,
        reset=reset,
    )
