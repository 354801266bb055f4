"""The server's checkpoint, WAL and I/O activity over one run, from its run folder.

The pgbench_run role leaves, beside the buffer counters (``pg_stat-<when>.json``):

* ``pg_server-before.json``, ``pg_server-after.json``: the raw rows of the server's
  statistics views just before the clients start and after they end
  (:mod:`collector.parse.pgstats` reads each version's), the WAL position, the clock,
  and in ``after`` how reading the server log went (``log``: path, problem, lines);
* ``pg_checkpoints.log``: the log's checkpoint lines of that span
  (:mod:`collector.parse.pglog`), when there were any.

:func:`read_server_counters` turns them into run facts (``pg_checkpoints``, ``pg_wal``,
``pg_io``, ``checkpoints``, ``checkpoint_in_window``, ``pg_checkpoint_log``,
``pg_stats_span``) and samples. Missing files (older runs, a run cut off) give nothing;
a malformed one is a one-line :class:`DrivelabError` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from collector.errors import DrivelabError
from collector.parse import pglog, pgstats
from collector.records import ClientResult, Sample
from collector.runfolder import NUMBER, PG_CHECKPOINTS, PG_SERVER, Checker, load_json
from collector.stats import tps as stats

#: pg_checkpoints key -> (sample metric, unit, labels)
CHECKPOINT_SAMPLES = {
    "timed": ("drivelab_pg_checkpoints", "checkpoints", {"kind": "timed"}),
    "requested": ("drivelab_pg_checkpoints", "checkpoints", {"kind": "requested"}),
    "buffers_checkpoint": ("drivelab_pg_buffers_written", "buffers", {"by": "checkpointer"}),
    "buffers_clean": ("drivelab_pg_buffers_written", "buffers", {"by": "background writer"}),
    "buffers_backend": ("drivelab_pg_buffers_written", "buffers", {"by": "backends"}),
    "backend_fsyncs": ("drivelab_pg_backend_fsyncs", "fsyncs", {}),
    "write_s": ("drivelab_pg_checkpoint_write_seconds", "seconds", {}),
    "sync_s": ("drivelab_pg_checkpoint_sync_seconds", "seconds", {}),
}
#: pg_wal key -> (sample metric, unit)
WAL_SAMPLES = {
    "records": ("drivelab_pg_wal_records", "records"),
    "fpi": ("drivelab_pg_wal_fpi", "records"),
    "bytes": ("drivelab_pg_wal_bytes", "bytes"),
    "buffers_full": ("drivelab_pg_wal_buffers_full", "events"),
    "writes": ("drivelab_pg_wal_writes", "writes"),
    "syncs": ("drivelab_pg_wal_syncs", "syncs"),
    "write_s": ("drivelab_pg_wal_write_seconds", "seconds"),
    "sync_s": ("drivelab_pg_wal_sync_seconds", "seconds"),
}


def window_of(clients: Sequence[ClientResult]) -> tuple[float, float] | None:
    """The window in which every client ran (:func:`stats.concurrent_window`), or None."""
    spans = {
        c.client: (c.start, c.end) for c in clients if c.start is not None and c.end is not None
    }
    return stats.concurrent_window(spans) if clients and len(spans) == len(clients) else None


def in_window(event: pglog.CheckpointEvent, window: tuple[float, float]) -> str | None:
    """How a checkpoint met the window: ``started``, ``ended``, ``started and ended``
    inside it, ``ran through`` it (began before, ended after or never), or None."""
    lo, hi = window
    started = event.start is not None and lo <= event.start <= hi
    ended = event.end is not None and lo <= event.end <= hi
    if started and ended:
        return "started and ended"
    if started or ended:
        return "started" if started else "ended"
    if event.start is not None and event.start < lo and (event.end is None or event.end > hi):
        return "ran through"
    return None


def _snapshot(path: Path) -> tuple[Mapping[str, Any], pgstats.ServerSnapshot]:
    c = Checker(path)
    doc = c.obj(load_json(path), "")
    server = c.obj(c.get(doc, "server", (dict,)), "server")
    return doc, pgstats.read_snapshot(server, str(path))


def _log(
    run_dir: Path, doc: Mapping[str, Any], timezone: str | None
) -> tuple[dict[str, Any], pglog.CheckpointLog | None]:
    """What the host said about reading the server log, and its checkpoint lines (None
    when it could not read them)."""
    path = run_dir / PG_SERVER.format("after")
    c = Checker(path)
    meta = c.get(doc, "log", (dict,), required=False)
    if meta is None:
        return {"problem": "the server log was not read"}, None
    out = {
        "path": c.get(meta, "path", (str,), "log.", required=False),
        "problem": c.get(meta, "problem", (str,), "log.", required=False),
        "lines": c.get(meta, "lines", (int,), "log.", required=False),
    }
    if out["problem"]:
        return out, None
    lines = run_dir / PG_CHECKPOINTS
    text = lines.read_text(encoding="utf-8", errors="replace") if lines.exists() else ""
    parsed = pglog.parse_checkpoint_log(text, str(lines), timezone)
    out["too_frequent"] = parsed.too_frequent
    return out, parsed


def read_server_counters(
    run_dir: Path, clients: Sequence[ClientResult] = ()
) -> tuple[dict[str, Any], list[Sample]]:
    """The run facts and samples of the server's activity over the run (module doc);
    ``clients`` give the window where all of them ran, for ``checkpoint_in_window``."""
    docs, snaps = {}, {}
    for when in ("before", "after"):
        path = run_dir / PG_SERVER.format(when)
        if not path.exists():
            return {}, []
        docs[when], snaps[when] = _snapshot(path)
    before, after = snaps["before"], snaps["after"]
    if before.version != after.version:
        raise DrivelabError(
            f"{run_dir / PG_SERVER.format('after')}: server_version_num {after.version}, but"
            f" {before.version} before the run"
        )
    d = pgstats.deltas(before, after)
    server = docs["after"]["server"]
    timezone = server.get("log_timezone") if isinstance(server.get("log_timezone"), str) else None
    log_meta, log = _log(run_dir, docs["after"], timezone)
    logging = {docs[w]["server"].get("log_checkpoints") for w in docs}
    log_meta["log_checkpoints"] = "on" if logging == {"on"} else "off" if "off" in logging else None
    window = window_of(clients)
    events = []
    for e in log.events if log else ():
        item = e.to_json()
        if window is not None and (how := in_window(e, window)):
            item["in_window"] = how
        events.append(item)
    flag = None
    if window is not None and log is not None and log_meta["log_checkpoints"] == "on":
        flag = any(e.get("in_window") in ("started", "ended", "started and ended") for e in events)
    facts: dict[str, Any] = {
        "pg_checkpoints": dict(d.checkpoints),
        "pg_wal": dict(d.wal),
        "pg_io": [dict(r) for r in d.io],
        "pg_stats_span": {
            "server_version_num": d.version,
            "seconds": d.seconds,
            "before_at": before.at,
            "after_at": after.at,
            "reset": list(d.reset),
        },
        "pg_checkpoint_log": log_meta,
        "checkpoints": events,
        "checkpoint_in_window": flag,
    }
    return facts, _samples(d, events, flag)


def _samples(
    d: pgstats.ServerDeltas, events: list[dict[str, Any]], flag: bool | None
) -> list[Sample]:
    out = []
    for key, (metric, unit, labels) in CHECKPOINT_SAMPLES.items():
        if isinstance(v := d.checkpoints.get(key), NUMBER):
            out.append(Sample(metric, v, unit, labels))
    for key, (metric, unit) in WAL_SAMPLES.items():
        if isinstance(v := d.wal.get(key), NUMBER):
            out.append(Sample(metric, v, unit))
    for row in d.io:
        labels = {k: row[k] for k in ("backend_type", "object", "context")}
        for name, v in row.items():
            if name in labels or not isinstance(v, NUMBER):
                continue
            seconds = name.endswith("_s")
            metric = f"drivelab_pg_io_{name.removesuffix('_s')}{'_seconds' if seconds else ''}"
            out.append(Sample(metric, v, "seconds" if seconds else "operations", labels))
    out.append(Sample("drivelab_pg_checkpoints_logged", len(events), "checkpoints"))
    if flag is not None:
        out.append(Sample("drivelab_pg_checkpoint_in_window", int(flag), "flag"))
    return out
