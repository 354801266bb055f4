"""Gather one fetched run folder into stored results.

The pgbench playbook leaves, on the controller, one folder per repetition; its
layout and ``run.json`` are :mod:`collector.runfolder`'s.

:func:`gather_run` reads such a folder with the parsers and the statistics into a
:class:`GatheredRun` (scenario, cell, :class:`~collector.records.RunRecord`, device
facts) and stores nothing: :func:`collector.run.storing.record` stores it, replacing an
earlier gathering of the same repetition. This module reads the run's own files (the
DB host's ``db/`` facts, the buffer counters) and puts the record together; each
client host's folder is :mod:`collector.gather.client`'s. A folder that is not a run
folder (no ``run.json``, not JSON, a key missing or of the wrong type) is a one-line
:class:`DrivelabError` naming the file. A client that left no output, no exit code or
no report is a failed client with its reason, not an error: the run is stored as
partial or failed.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from collector.gather import serverstats, startsync
from collector.gather.client import GatheredClient, gather_client, one_line
from collector.records import CellSpec, ClientResult, RawOutput, RunRecord, RunStatus, Sample
from collector.records.txlog import LatencySeries
from collector.runfolder import (
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
from collector.stats import drift, latency
from collector.stats import tps as stats
from collector.verdicts import environment, physics


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


# --------------------------------------------------------------------------- the run


def gather_run(run_dir: Path | str) -> GatheredRun:
    """Read one run folder (see the module doc) into a :class:`GatheredRun`."""
    run_dir = Path(run_dir).absolute()
    meta = RunMeta.read(run_dir)
    db_dir = run_dir / DB_DIR
    db_facts, samples = _db_host_facts(run_dir, db_dir)
    device = read_device_facts(db_dir, meta.db_host)
    clients = [gather_client(run_dir, host, meta) for host in meta.client_hosts]
    results = tuple(c.result for c in clients)
    status, reason = _run_status(meta, results)
    server_facts, server_samples = serverstats.read_server_counters(run_dir, results)
    db_facts, samples = {**db_facts, **server_facts}, samples + server_samples
    facts = _run_facts(run_dir, meta, clients, db_facts)
    dev = next((f.facts[meta.cell.drive] for f in device if meta.cell.drive in f.facts), None)
    facts["physics"] = physics.gather_facts(
        meta.cell, meta.pgbench.get("mode"), db_facts, dev, results
    )
    series = tuple(p for c in clients for p in c.series)
    window = stats.run_stats(results, series, status=status, reason=reason).window
    spans = {r.client: (r.start, r.end) for r in results if None not in (r.start, r.end)}
    trend = drift.run_trend(series, window, spans)  # still rising or falling through the window
    facts[drift.FACT] = trend.to_fact() if trend is not None else None
    ends = [c.command["ended_at"] for c in clients if isinstance(c.command.get("ended_at"), NUMBER)]
    raw = _run_raw_outputs(run_dir, meta) + [r for c in clients for r in c.raw]
    record = RunRecord(
        repetition=meta.repetition,
        attempt=meta.attempt,
        status=status,
        clients=results,
        reason=reason,
        started_at=meta.started_at if meta.started_at is not None else meta.start_at,
        ended_at=meta.ended_at if meta.ended_at is not None else (max(ends) if ends else None),
        commands=tuple(
            f"{c.result.client}: {shlex.join(str(a) for a in c.command['argv'])}"
            for c in clients
            if isinstance(c.command.get("argv"), list)
        ),
        series=series,
        raw_outputs=tuple(raw),
        samples=tuple(samples),
        facts=facts,
        controller=meta.controller,
    )
    gathered = GatheredRun(
        run_dir, meta.scenario, meta.cell, record, tuple(device), meta.cell_id, meta.scenario_info
    )
    per_client = {c.result.client: c.latency for c in clients if c.latency is not None}
    return latency.add_latency(replace(gathered, latency=per_client))


def _db_host_facts(run_dir: Path, db_dir: Path) -> tuple[dict[str, Any], list[Sample]]:
    """The DB host's run facts and samples read before the clients: ``database.json``,
    the buffer counters and what the figures came from (the environment)."""
    db_facts, samples = read_database(db_dir)
    buffer_facts, buffer_samples = read_buffer_counters(run_dir)
    db_facts.update(buffer_facts)
    db_facts.update(environment.read_run(run_dir))
    return db_facts, samples + buffer_samples


def _run_status(meta: RunMeta, results: Sequence[ClientResult]) -> tuple[RunStatus, str | None]:
    """The run's status and reason from its clients' results, unless the runner says
    the run cannot stand whatever its clients did: measured without the lab to itself
    for part of it (collector.hosts.lease), or cut off by the runner being stopped
    (Ctrl-C, SIGTERM, SIGHUP); the runner's own words are then the reason."""
    status, reason = stats.run_status(tuple(results))
    for kind, said in (("lease", "lab lease lost"), ("stopped", "stopped")):
        failure = next((f for f in meta.ansible_failures if f.get("kind") == kind), None)
        if failure is not None:
            status, reason = RunStatus.FAILED, one_line(str(failure.get("msg") or said))
    return status, reason


def _run_facts(
    run_dir: Path, meta: RunMeta, clients: Sequence[GatheredClient], db_facts: Mapping[str, Any]
) -> dict[str, Any]:
    """The run's facts: run.json's, the clients' start, commands and notes, then the DB
    host's (``db_facts``)."""
    report = next((c.result.report for c in clients if c.result.report), {})
    return {
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


def _run_raw_outputs(run_dir: Path, meta: RunMeta) -> list[RawOutput]:
    """The run's own raw files (run.json, the DB host's facts, the server's counters and
    checkpoint log); each client's are its own."""
    db_dir = run_dir / DB_DIR
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
    return raw
