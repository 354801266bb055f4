"""Gather one fetched run folder into stored results.

The pgbench playbook leaves, on the controller, one folder per repetition; its
layout and ``run.json`` are :mod:`collector.runfolder`'s.

:func:`gather_run` reads such a folder with the parsers and the statistics into a
:class:`GatheredRun` (scenario, cell, :class:`~collector.records.RunRecord`, device
facts) and stores nothing: :func:`collector.run.storing.record` stores it, replacing an
earlier gathering of the same repetition. A folder that is not a run folder (no
``run.json``, not JSON, a key missing or of the wrong type) is a one-line
:class:`DrivelabError` naming the file. A client that left no output, no exit code or
no report is a failed client with its reason, not an error: the run is stored as
partial or failed.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from collector.errors import DrivelabError
from collector.gather import serverstats, startsync
from collector.parse import ParseError, pgbench
from collector.records import (
    AggInterval,
    CellSpec,
    ClientResult,
    LatencySeries,
    PgbenchReport,
    RawOutput,
    RunRecord,
    RunStatus,
    Sample,
    SeriesPoint,
    TxLogSummary,
)
from collector.runfolder import (
    CLIENT_FILES,
    DATABASE_JSON,
    DB_DIR,
    NUMBER,
    PG_CHECKPOINTS,
    PG_SERVER,
    PG_STAT,
    Checker,
    RunMeta,
    load_json,
)
from collector.stats import latency
from collector.stats import tps as stats
from collector.verdicts import environment, physics

_LOG_NAME = re.compile(r"^pgbench_log\.(\d+)(?:\.(\d+))?$")


@dataclass(frozen=True)
class ScopedFacts:
    """Facts outside the run's own scope (``device`` facts of the DB host), stored
    with the run so that gathering the folder again replaces them."""

    scope: str
    host: str | None
    facts: Mapping[str, Any]


@dataclass(frozen=True)
class GatheredRun:
    """One run folder, read: ready for :meth:`Store.record_run`."""

    run_dir: Path
    scenario: str
    cell: CellSpec
    run: RunRecord
    facts: tuple[ScopedFacts, ...] = ()
    cell_id: str = ""
    #: the scenario's description and baseline drive, as run.json carries them
    scenario_info: Mapping[str, Any] = field(default_factory=dict)
    #: each client's per-second latency series (from its per-transaction log)
    latency: Mapping[str, LatencySeries] = field(default_factory=dict)

    @property
    def samples(self) -> tuple[Sample, ...]:
        return self.run.samples

    def stats(self) -> stats.RunStats:
        """The run's aggregate, as the report will compute it from the store."""
        return stats.run_stats(
            self.run.clients,
            self.run.series,
            status=self.run.status,
            reason=self.run.reason,
            repetition=self.run.repetition,
        )


@dataclass(frozen=True)
class _Client:
    result: ClientResult
    series: tuple[SeriesPoint, ...] = ()
    raw: tuple[RawOutput, ...] = ()
    command: Mapping[str, Any] = field(default_factory=dict)
    start_source: str | None = None
    note: str | None = None
    latency: LatencySeries | None = None


# --------------------------------------------------------------------------- database facts


#: database.json key -> the run fact it is stored as
DATABASE_FACTS = {
    "sizes": "db_sizes_bytes",
    "memory_bytes": "db_memory_bytes",
    "memory_source": "db_memory_source",
    "warning": "db_warning",
    "init": "db_init",
    "wal": "wal_placement",
    "lab": "lab",
}


def read_database(db_dir: Path) -> tuple[dict[str, Any], list[Sample]]:
    """``db/database.json`` as run facts (``db_*``, ``postgresql_*``, ``wal_placement``)
    and samples (dataset sizes, DB memory, init seconds). Missing file: nothing."""
    path = db_dir / DATABASE_JSON
    if not path.exists():
        return {}, []
    c = Checker(path)
    doc = c.obj(load_json(path), "")
    facts: dict[str, Any] = {}
    for key, value in doc.items():
        if key == "postgresql" and isinstance(value, dict):
            facts["postgresql_version"] = value.get("version")
            facts["postgresql_settings"] = value.get("settings") or {}
            facts.update(
                {f"postgresql_{k}": v for k, v in value.items() if k not in ("version", "settings")}
            )
        else:
            facts[DATABASE_FACTS.get(key, f"db_{key}")] = value
    sizes = c.obj(c.get(doc, "sizes", (dict,), required=False, default={}), "sizes")
    init = c.obj(c.get(doc, "init", (dict,), required=False, default={}), "init")
    memory = c.get(doc, "memory_bytes", NUMBER, required=False)
    c.get(doc, "warning", (str,), required=False)
    samples = [
        Sample("drivelab_db_size_bytes", v, "bytes", {"database": k})
        for k, v in sizes.items()
        if isinstance(v, NUMBER) and not isinstance(v, bool)
    ]
    if memory is not None:
        samples.append(Sample("drivelab_db_memory_bytes", memory, "bytes"))
    lifted = []
    seconds = {}
    for host, step in init.items():
        c.obj(step, f"init.{host}")
        s = c.get(step, "seconds", NUMBER, f"init.{host}.", required=False)
        if s is not None:
            seconds[host] = float(s)
            samples.append(Sample("drivelab_db_init_seconds", s, "seconds", {"client": host}))
        lifted.append(c.get(step, "caps_lifted", (bool,), f"init.{host}.", required=False))
    if init:
        facts["db_init_seconds"] = seconds
        known = [x for x in lifted if x is not None]
        facts["db_caps_lifted"] = all(known) if len(known) == len(lifted) else None
    return facts, samples


def read_buffer_counters(run_dir: Path) -> tuple[dict[str, Any], list[Sample]]:
    """``pg_stat-before.json`` and ``pg_stat-after.json`` (pg_stat_database of each
    client database around the run) as the run fact ``db_buffers`` (per database: the
    deltas of blks_read and blks_hit, and the hit ratio) and samples. Either file
    missing (an older run, a run cut off before the end): nothing."""
    snaps = {}
    for when in ("before", "after"):
        path = run_dir / PG_STAT.format(when)
        if not path.exists():
            return {}, []
        c = Checker(path)
        doc = c.obj(load_json(path), "")
        rows = c.get(doc, "databases", (list,))
        snap = {}
        for i, item in enumerate(rows):
            row = c.obj(item, f"databases[{i}]")
            name = c.get(row, "datname", (str,), f"databases[{i}].")
            snap[name] = {
                k: c.get(row, k, NUMBER, f"databases[{i}].")
                for k in ("blks_read", "blks_hit", "at", "block_size")
            }
        snaps[when] = snap
    out: dict[str, Any] = {}
    samples: list[Sample] = []
    for name, after in snaps["after"].items():
        before = snaps["before"].get(name)
        if before is None:
            continue
        read = after["blks_read"] - before["blks_read"]
        hit = after["blks_hit"] - before["blks_hit"]
        out[name] = {
            "blks_read": read,
            "blks_hit": hit,
            "hit_ratio": hit / (read + hit) if read + hit else None,
            "block_size": after["block_size"],
            "seconds": after["at"] - before["at"],
        }
        labels = {"database": name}
        samples.append(Sample("drivelab_db_blks_read", read, "blocks", labels))
        samples.append(Sample("drivelab_db_blks_hit", hit, "blocks", labels))
    return ({"db_buffers": out} if out else {}), samples


def read_device_facts(db_dir: Path, db_host: str | None) -> list[ScopedFacts]:
    """Every other ``db/*.json``: one ``device`` fact per file, keyed by the filesystem
    (``dbhost-nvme.json`` -> key ``nvme``), the host being the file's prefix."""
    out = []
    if not db_dir.is_dir():
        return out
    for path in sorted(db_dir.glob("*.json")):
        if path.name == DATABASE_JSON:
            continue
        value = load_json(path)
        host, key = db_host, path.stem
        if db_host and path.stem.startswith(f"{db_host}-"):
            key = path.stem.removeprefix(f"{db_host}-")
        elif "-" in path.stem:
            host, key = path.stem.split("-", 1)
        out.append(ScopedFacts("device", host, {key: value}))
    return out


# --------------------------------------------------------------------------- one client


def _one_line(text: str, width: int = 300) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def _ansible_failure(meta: RunMeta, host: str) -> str | None:
    for f in meta.ansible_failures:
        if f.get("host") == host:
            task = f.get("task")
            msg = _one_line(f.get("msg") or "failed")
            if f.get("kind") == "unreachable":
                # Ansible's text leads with its own words; ssh's last line says why
                why = (
                    msg[msg.rfind("ssh: ") :]
                    if "ssh: " in msg
                    else msg.removeprefix("Task failed: ")
                )
                during = f" during {task!r}" if task else ""
                return f"unreachable over SSH{during} ({why})"
            return f"ansible task {task!r} failed: {msg}" if task else f"ansible: {msg}"
    return None


def log_files(client_dir: Path, pid: int | None = None) -> list[Path]:
    """pgbench's log files of one client (``pgbench_log.<pid>``, then ``.<pid>.<n>`` by n).
    Logs of several pgbench processes are an error unless ``pid`` picks one."""
    by_pid: dict[int, list[tuple[int, Path]]] = {}
    for p in client_dir.iterdir():
        m = _LOG_NAME.match(p.name)
        if m and p.is_file():
            by_pid.setdefault(int(m[1]), []).append((int(m[2] or 0), p))
    if not by_pid:
        return []
    if pid in by_pid:
        chosen = by_pid[pid]
    elif len(by_pid) == 1:
        chosen = next(iter(by_pid.values()))
    else:
        pids = ", ".join(str(p) for p in sorted(by_pid))
        raise DrivelabError(
            f"{client_dir}: logs of {len(by_pid)} pgbench processes (pids {pids}), "
            "and command.json names none of them"
        )
    return [p for _, p in sorted(chosen)]


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None


#: the instants of command.json on the client's own clock (start_at and chosen_at are the
#: controller's once the wrapper was given the client's offset, clock_offset_s)
CLIENT_CLOCK = ("armed_at", "go_at", "launched_at", "ended_at")


def clock_offset(command: Mapping[str, Any]) -> float:
    """The client's clock minus the controller's, as the start measured it (0: unknown,
    or the wrapper was not told it)."""
    offset = command.get("clock_offset_s")
    return float(offset) if isinstance(offset, NUMBER) else 0.0


def _on_controller_clock(command: dict[str, Any]) -> dict[str, Any]:
    """command.json with its client-clock instants put on the controller's clock."""
    offset = clock_offset(command)
    if not offset:
        return command
    return {
        k: (v - offset if k in CLIENT_CLOCK and isinstance(v, NUMBER) else v)
        for k, v in command.items()
    }


def _shifted(result: ClientResult, series: list[SeriesPoint], offset: float):
    """A client's result and series on the controller's clock (its logs are on its own)."""
    if not offset:
        return result, series
    result = replace(
        result,
        start=None if result.start is None else result.start - offset,
        end=None if result.end is None else result.end - offset,
    )
    return result, [replace(p, start=p.start - offset) for p in series]


def gather_client(run_dir: Path, host: str, meta: RunMeta) -> _Client:
    """One client host's result, series and raw files. Failure is a result, not an error."""
    d = run_dir / host
    ansible = _ansible_failure(meta, host)
    if not d.is_dir():
        reason = f"no output fetched from {host}" + (f" ({ansible})" if ansible else "")
        return _Client(ClientResult(host, RunStatus.FAILED, reason))
    files = {kind: d / name for kind, name in CLIENT_FILES.items()}
    command: dict[str, Any] = {}
    if files["command"].exists():
        command = dict(Checker(files["command"]).obj(load_json(files["command"]), ""))
    offset, own_clock = clock_offset(command), command
    command = _on_controller_clock(command)
    pid = command.get("pid") if isinstance(command.get("pid"), int) else None
    logs = log_files(d, pid) if meta.log != "none" else []
    log_kind = "agglog" if meta.log == "aggregate" else "txlog"
    raw = tuple(
        [RawOutput(kind, str(p), host) for kind, p in files.items() if p.exists()]
        + [RawOutput(log_kind, str(p), host) for p in logs]
    )
    stdout = _read_text(files["stdout"])
    stderr_text = _read_text(files["stderr"]) or ""
    err = pgbench.parse_stderr(stderr_text, str(files["stderr"]))
    rc_text = _read_text(files["rc"])
    if rc_text is None:
        reason = err.reason or ansible or f"no exit code fetched from {host} (rc.txt missing)"
        return _Client(ClientResult(host, RunStatus.FAILED, reason), raw=raw, command=command)
    rc = pgbench.parse_rc(rc_text, str(files["rc"]))
    report = None
    why = None
    if stdout is None:
        why = f"no stdout.txt fetched from {host}"
    else:
        try:
            report = pgbench.parse_report(stdout, str(files["stdout"]))
        except ParseError as e:
            why = str(e)
    if report is None:
        reason = err.reason or (f"pgbench exited {rc}" if rc else why)
        result = ClientResult(host, RunStatus.FAILED, reason, exit_code=rc)
        return _Client(result, raw=raw, command=command)

    txlog, agg, series, source, note = _read_logs(host, logs, meta)
    if not series:  # placed on the client's clock, as the logs are
        series, source = _progress_series(host, stderr_text, files["stderr"], own_clock)
    result = stats.client_result(
        host, report, stderr=err, exit_code=rc, txlog=txlog, agglog=agg, series=series
    )
    # the start, the end and the series on the controller's clock (the per-second
    # latency series stays on the client's: its seconds are bins of its own log)
    result, series = _shifted(result, series, offset)
    if note and result.status == RunStatus.COMPLETE and note.startswith("unreadable"):
        # a log that does not parse after a clean exit: keep the figures, average nothing in
        result = replace(result, status=RunStatus.PARTIAL, reason=note)
    short = _log_count_problem(txlog, report, meta) if txlog is not None else None
    if short and result.status == RunStatus.COMPLETE:
        result = replace(result, status=RunStatus.PARTIAL, reason=short)
    lat = txlog.latency_series if txlog is not None else None
    return _Client(result, tuple(series), raw, command, source, note, lat)


def _log_count_problem(txlog: TxLogSummary, report: PgbenchReport, meta: RunMeta) -> str | None:
    """A full per-transaction log holds one row per transaction pgbench counted
    (processed + failed + skipped, as on every real capture); fewer rows is a log cut
    short (a full disk, a fetch cut off), more is a log that is not this run's."""
    if meta.log != "full":
        return None  # a sampled log holds a share of them; an aggregate log no rows
    counted = report.processed + (report.failed or 0) + (report.skipped or 0)
    if txlog.rows == counted:
        return None
    parts = f"{report.processed:,} processed"
    parts += "".join(
        f" + {n:,} {name}"
        for name, n in (("failed", report.failed), ("skipped", report.skipped))
        if n
    )
    how = "cut short" if txlog.rows < counted else "holds more than this run"
    return (
        f"per-transaction log {how}: {txlog.rows:,} rows where pgbench counted "
        f"{counted:,} transactions ({parts})"
    )


def _read_logs(
    host: str, logs: list[Path], meta: RunMeta
) -> tuple[
    TxLogSummary | None, list[AggInterval] | None, list[SeriesPoint], str | None, str | None
]:
    """The client's pgbench logs, per run.json's ``log``: (txlog, agglog, series,
    series source, a note when they are missing or do not parse)."""
    if meta.log == "none":
        return None, None, [], None, None
    if not logs:
        return None, None, [], None, f"no pgbench_log.* files (log is {meta.log!r})"
    try:
        if meta.log == "aggregate":
            agg = pgbench.read_agglogs(logs)
            series = stats.series_from_agglog(host, agg, meta.aggregate_interval)
            return None, agg, series, "agglog" if agg else None, None
        limit_ms = meta.pgbench.get("latency_limit")
        limit = float(limit_ms) / 1e3 if isinstance(limit_ms, NUMBER) and limit_ms > 0 else None
        txlog = pgbench.summarize_txlog(logs, latency_limit_s=limit)
        rate = meta.sampling_rate if meta.log == "sampled" else 1.0
        series = stats.series_from_txlog(host, txlog, sampling_rate=rate or 1.0)
        return txlog, None, series, "txlog" if meta.log == "full" else "txlog sampled", None
    except ParseError as e:
        return None, None, [], None, f"unreadable pgbench log: {e}"


def _progress_series(
    host: str, stderr_text: str, source: Path, command: Mapping[str, Any]
) -> tuple[list[SeriesPoint], str | None]:
    """The ``-P`` lines as a series: epoch-stamped ones as they are, relative ones
    placed from the wrapper's ``launched_at`` (pgbench's t=0 is a little later)."""
    try:
        points = pgbench.parse_progress(stderr_text, str(source))
    except ParseError:
        return [], None
    if not points:
        return [], None
    launched = command.get("launched_at")
    if not points[0].epoch and not isinstance(launched, NUMBER):
        return [], None
    start = None if points[0].epoch else float(launched)
    return stats.series_from_progress(host, points, start_epoch=start), "progress"


# --------------------------------------------------------------------------- the run


def gather_run(run_dir: Path | str) -> GatheredRun:
    """Read one run folder (see the module doc) into a :class:`GatheredRun`."""
    run_dir = Path(run_dir).absolute()
    meta = RunMeta.read(run_dir)
    db_dir = run_dir / DB_DIR
    db_facts, samples = read_database(db_dir)
    buffer_facts, buffer_samples = read_buffer_counters(run_dir)
    db_facts.update(buffer_facts)
    db_facts.update(environment.read_run(run_dir))
    samples += buffer_samples
    device = read_device_facts(db_dir, meta.db_host)
    clients = [gather_client(run_dir, host, meta) for host in meta.client_hosts]
    results = tuple(c.result for c in clients)
    status, reason = stats.run_status(results)
    # a run that cannot stand whatever its clients did: measured without the lab to
    # itself for part of it (collector.hosts.lease), or cut off by the runner being stopped
    # (Ctrl-C, SIGTERM, SIGHUP); the runner's own words are the reason
    for kind, said in (("lease", "lab lease lost"), ("stopped", "stopped")):
        failure = next((f for f in meta.ansible_failures if f.get("kind") == kind), None)
        if failure is not None:
            status, reason = RunStatus.FAILED, _one_line(str(failure.get("msg") or said))
    server_facts, server_samples = serverstats.read_server_counters(run_dir, results)
    db_facts, samples = {**db_facts, **server_facts}, samples + server_samples

    commands = tuple(
        f"{c.result.client}: {shlex.join(str(a) for a in c.command['argv'])}"
        for c in clients
        if isinstance(c.command.get("argv"), list)
    )
    ends = [c.command["ended_at"] for c in clients if isinstance(c.command.get("ended_at"), NUMBER)]
    report = next((c.result.report for c in clients if c.result.report), {})
    facts: dict[str, Any] = {
        "cell_id": meta.cell_id,
        "run_dir": str(run_dir),
        "db_host": meta.db_host,
        "client_hosts": list(meta.client_hosts),
        "pgbench_options": dict(meta.pgbench),
        "pgbench_version": report.get("pgbench_version"),
        "server_version": report.get("server_version"),
        "start_at": meta.start_at,
        "controller_finished": meta.ended_at is not None,
        "cold_start": meta.cold_start,
        "settled": meta.settled,
        "ansible_failures": [dict(f) for f in meta.ansible_failures],
        **startsync.start_facts(clients, meta.start_at),
        "series_source": {c.result.client: c.start_source for c in clients},
        "commands": {
            c.result.client: c.command["argv"]
            for c in clients
            if isinstance(c.command.get("argv"), list)
        },
        "client_notes": {c.result.client: c.note for c in clients if c.note},
        **db_facts,
    }
    dev = next((f.facts[meta.cell.drive] for f in device if meta.cell.drive in f.facts), None)
    facts["physics"] = physics.gather_facts(
        meta.cell, meta.pgbench.get("mode"), db_facts, dev, results
    )
    raw = [RawOutput("run_json", str(meta.path))]
    raw += [RawOutput("db_json", str(p), meta.db_host) for p in sorted(db_dir.glob("*.json"))]
    raw += [
        RawOutput(kind, str(p), meta.db_host)
        for kind, name in (("pg_stat_json", PG_STAT), ("pg_server_json", PG_SERVER))
        for w in ("before", "after")
        if (p := run_dir / name.format(w)).exists()
    ]
    if (p := run_dir / PG_CHECKPOINTS).exists():
        raw.append(RawOutput("pg_checkpoints_log", str(p), meta.db_host))
    record = RunRecord(
        repetition=meta.repetition,
        attempt=meta.attempt,
        status=status,
        clients=results,
        reason=reason,
        started_at=meta.started_at if meta.started_at is not None else meta.start_at,
        ended_at=meta.ended_at if meta.ended_at is not None else (max(ends) if ends else None),
        commands=commands,
        series=tuple(p for c in clients for p in c.series),
        raw_outputs=tuple(raw) + tuple(r for c in clients for r in c.raw),
        samples=tuple(samples),
        facts=facts,
        controller=meta.controller,
    )
    gathered = GatheredRun(
        run_dir, meta.scenario, meta.cell, record, tuple(device), meta.cell_id, meta.scenario_info
    )
    per_client = {c.result.client: c.latency for c in clients if c.latency is not None}
    return latency.add_latency(replace(gathered, latency=per_client))
