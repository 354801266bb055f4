"""The results store: one SQLite file (default ``results/drivelab.db``).

It holds scenarios, their cells, the runs of each cell (one per repetition, with
status complete / partial / failed and the reason), per-client results, per-second
series, samples (fio, pg_test_fsync, device telemetry), environment and device facts,
and the paths of the raw outputs kept beside it. Reports read only this.

* The schema is versioned (table ``schema_version``); :data:`MIGRATIONS` brings an
  older file up to date, each step in its own transaction. A file written by a
  newer drivelab is refused rather than misread.
* Every write is one transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``), so a write
  that is interrupted (an exception, a kill, a power cut) leaves the previous state
  intact: a run is stored with all its clients, series and paths, or not at all.

The runner's calls, in order::

    store = Store.open(path)                                   # creates or migrates
    sid = store.add_scenario("two-client", spec, baseline_drive="hdd", description="...")
    store.add_facts(sid, {"kernel": "6.1.0"}, scope="environment", host="db")
    cid = store.add_cell(sid, CellSpec(drive="ssd", clients=2, scale=20))
    if repetition not in store.repetitions("two-client", spec):  # resume
        store.record_run(cid, RunRecord(repetition, status, clients, ...))
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from collector.errors import DrivelabError
from collector.paths import results_dir
from collector.records import CellSpec, ClientResult, RunRecord, RunStatus, Sample
from collector.store.reads import Reads
from collector.store.rows import Fact, ScenarioInfo, StoredRun, _dumps, _filesystem_options

# Store._migrate reads SCHEMA_VERSION and MIGRATIONS as globals of this module, so a
# test that patches collector.store.SCHEMA_VERSION (or its MIGRATIONS) reaches it
from collector.store.schema import MIGRATIONS, SCHEMA_VERSION

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Fact",
    "Reads",
    "ScenarioInfo",
    "Store",
    "StoredRun",
    "default_path",
]


def default_path() -> Path:
    return results_dir() / "drivelab.db"


class Store(Reads):
    """A connection to one results file. Use :meth:`open`; close with :meth:`close`
    or a ``with`` block."""

    def __init__(self, conn: sqlite3.Connection, path: Path, clock=time.time) -> None:
        self.conn = conn
        self.path = path
        self.clock = clock

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def open(cls, path: Path | str | None = None, create: bool = True, clock=time.time) -> Store:
        """Open (and with ``create``, create or migrate) the store at ``path``.
        Without ``create`` a missing file is a :class:`DrivelabError`."""
        p = Path(path) if path is not None else default_path()
        if not p.exists() and not create:
            raise DrivelabError(f"no results store at {p}: run a scenario first, or give --db")
        if create:
            p.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(p, isolation_level=None, timeout=30)
            conn.execute("PRAGMA foreign_keys = ON")
            if create:
                # a rollback journal, not WAL: WAL's index is a memory-mapped file, and on
                # a full filesystem touching it killed drivelab with SIGBUS (tested); with
                # a rollback journal SQLite reports "database or disk is full" and rolls back
                conn.execute("PRAGMA journal_mode = DELETE")
        except sqlite3.DatabaseError as err:
            raise DrivelabError(f"{p}: not a drivelab results store ({err})") from err
        store = cls(conn, p, clock)
        try:
            store._migrate(create)
        except sqlite3.DatabaseError as err:
            conn.close()
            raise DrivelabError(f"{p}: not a drivelab results store ({err})") from err
        except DrivelabError:
            conn.close()
            raise
        return store

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def version(self) -> int:
        has = self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
        ).fetchone()
        if not has:
            return 0
        row = self.conn.execute("SELECT max(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    def _migrate(self, create: bool) -> None:
        current = self.version()
        if current > SCHEMA_VERSION:
            raise DrivelabError(
                f"{self.path}: schema version {current} is newer than this drivelab's "
                f"({SCHEMA_VERSION}); upgrade drivelab"
            )
        if current == 0:
            tables = self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if tables:
                raise DrivelabError(f"{self.path}: an SQLite file, but not a drivelab store")
            if not create:
                raise DrivelabError(f"{self.path}: empty results store: run a scenario first")
        # a step may make a table anew (SQLite's way to change a constraint): with foreign
        # keys on, dropping the old table would delete every row that refers to it
        self.conn.execute("PRAGMA foreign_keys = OFF")
        try:
            for version in range(current + 1, SCHEMA_VERSION + 1):
                with self.transaction() as cur:
                    for step in MIGRATIONS[version]:
                        if callable(step):
                            step(cur)
                        else:
                            cur.execute(step)
                    bad = cur.execute("PRAGMA foreign_key_check").fetchall()
                    if bad:
                        raise DrivelabError(
                            f"{self.path}: migrating to version {version} broke references"
                            f" ({bad[0]}): the store is left at version {version - 1}"
                        )
                    cur.execute("DELETE FROM schema_version")
                    cur.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
        finally:
            self.conn.execute("PRAGMA foreign_keys = ON")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``; any exception rolls everything back."""
        cur = self.conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
            cur.execute("COMMIT")
        except BaseException:
            # SQLite may have rolled back already (a full disk does): then the error to
            # report is that one, not "no transaction is active"
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------ writes

    def add_scenario(
        self,
        name: str,
        spec: Mapping[str, Any] | None = None,
        baseline_drive: str | None = None,
        description: str | None = None,
    ) -> int:
        """The scenario's id, creating it if new. The spec (the validated scenario
        file), the baseline drive and the description are updated when given."""
        with self.transaction() as cur:
            row = cur.execute("SELECT id FROM scenarios WHERE name = ?", (name,)).fetchone()
            if row is None:
                cur.execute(
                    "INSERT INTO scenarios (name, created_at, baseline_drive, spec_json,"
                    " description) VALUES (?,?,?,?,?)",
                    (name, self.clock(), baseline_drive, _dumps(spec or {}), description or ""),
                )
                return int(cur.lastrowid)
            updates = {
                "spec_json": _dumps(spec) if spec is not None else None,
                "baseline_drive": baseline_drive,
                "description": description,
            }
            for column, value in updates.items():
                if value is not None:
                    cur.execute(f"UPDATE scenarios SET {column} = ? WHERE id = ?", (value, row[0]))  # noqa: S608  (a fixed column name)
            return int(row[0])

    def add_cell(self, scenario_id: int, cell: CellSpec) -> int:
        """The cell's id within the scenario, creating it if new (keyed by :attr:`CellSpec.key`)."""
        with self.transaction() as cur:
            row = cur.execute(
                "SELECT id FROM cells WHERE scenario_id = ? AND key = ?", (scenario_id, cell.key)
            ).fetchone()
            if row:
                return int(row[0])
            cur.execute(
                "INSERT INTO cells (scenario_id, key, drive, workload, filesystem, placement,"
                " scale, clients, params_json, write_cache, filesystem_json, pg_settings_name,"
                " pg_settings_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    scenario_id,
                    cell.key,
                    cell.drive,
                    cell.workload,
                    cell.filesystem,
                    cell.placement,
                    cell.scale,
                    cell.clients,
                    _dumps(dict(cell.params)),
                    cell.write_cache,
                    _dumps(_filesystem_options(cell)),
                    cell.pg_settings_name,
                    _dumps(dict(cell.pg_settings)),
                ),
            )
            return int(cur.lastrowid)

    def attempts(self, scenario: str, cell: CellSpec) -> dict[int, list[RunStatus]]:
        """{repetition: [status of attempt 1, attempt 2, ...]} of the stored runs of one
        cell of a scenario (an attempt never stored is absent from its list)."""
        rows = self.conn.execute(
            "SELECT r.repetition, r.attempt, r.status FROM runs r"
            " JOIN cells c ON c.id = r.cell_id JOIN scenarios s ON s.id = c.scenario_id"
            " WHERE s.name = ? AND c.key = ? ORDER BY r.repetition, r.attempt",
            (scenario, cell.key),
        ).fetchall()
        out: dict[int, list[RunStatus]] = {}
        for rep, _attempt, status in rows:
            out.setdefault(int(rep), []).append(RunStatus(status))
        return out

    def repetitions(self, scenario: str, cell: CellSpec) -> dict[int, RunStatus]:
        """{repetition: status} of one cell of a scenario: complete when any attempt of it
        is, else its last attempt's status. What a resumed run skips."""
        return {
            rep: RunStatus.COMPLETE if RunStatus.COMPLETE in seen else seen[-1]
            for rep, seen in self.attempts(scenario, cell).items()
        }

    def has_run(self, cell_id: int, repetition: int, complete_only: bool = False) -> bool:
        """Whether this repetition is stored (and, with ``complete_only``, complete):
        the runner's resume test."""
        sql = "SELECT status FROM runs WHERE cell_id = ? AND repetition = ?"
        row = self.conn.execute(sql, (cell_id, repetition)).fetchone()
        return bool(row) and (not complete_only or row[0] == RunStatus.COMPLETE.value)

    def record_run(
        self,
        cell_id: int,
        run: RunRecord,
        replace: bool = True,
        scoped_facts: Iterable[tuple[str, str | None, Mapping[str, Any]]] = (),
    ) -> int:
        """Store one repetition with its clients, series, samples, facts and raw-output
        paths, all in one transaction. An existing run of the same repetition is
        replaced (``replace``) or refused. ``run.facts`` get scope ``run``;
        ``scoped_facts`` (scope, host, facts), such as the DB host's device facts, are
        stored with the run too, so that replacing the run replaces them."""
        with self.transaction() as cur:
            old = cur.execute(
                "SELECT id FROM runs WHERE cell_id = ? AND repetition = ? AND attempt = ?",
                (cell_id, run.repetition, run.attempt),
            ).fetchone()
            if old:
                if not replace:
                    attempt = f" attempt {run.attempt}" if run.attempt > 1 else ""
                    raise DrivelabError(
                        f"cell {cell_id} repetition {run.repetition}{attempt} is already stored"
                    )
                cur.execute("DELETE FROM runs WHERE id = ?", (old[0],))
            cur.execute(
                "INSERT INTO runs (cell_id, repetition, attempt, status, reason, started_at,"
                " ended_at, commands_json, recorded_at) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    cell_id,
                    run.repetition,
                    run.attempt,
                    RunStatus(run.status).value,
                    run.reason,
                    run.started_at,
                    run.ended_at,
                    _dumps(list(run.commands)),
                    self.clock(),
                ),
            )
            run_id = int(cur.lastrowid)
            for c in run.clients:
                self._insert_client(cur, run_id, c)
            cur.executemany(
                "INSERT INTO series (run_id, client, start_ts, duration_s, transactions,"
                " latency_avg_s, failed, source) VALUES (?,?,?,?,?,?,?,?)",
                [
                    (
                        run_id,
                        p.client,
                        p.start,
                        p.duration_s,
                        p.transactions,
                        p.latency_avg_s,
                        p.failed,
                        p.source,
                    )
                    for p in run.series
                ],
            )
            cur.executemany(
                "INSERT INTO raw_outputs (run_id, host, kind, path) VALUES (?,?,?,?)",
                [(run_id, r.host, r.kind, r.path) for r in run.raw_outputs],
            )
            scenario_id = cur.execute(
                "SELECT scenario_id FROM cells WHERE id = ?", (cell_id,)
            ).fetchone()[0]
            self._insert_samples(cur, run.samples, scenario_id, run_id)
            self._insert_facts(
                cur, facts=run.facts, scenario_id=scenario_id, run_id=run_id, scope="run", host=None
            )
            for scope, host, facts in scoped_facts:
                self._insert_facts(
                    cur, facts=facts, scenario_id=scenario_id, run_id=run_id, scope=scope, host=host
                )
            return run_id

    @staticmethod
    def _insert_client(cur: sqlite3.Cursor, run_id: int, c: ClientResult) -> None:
        hist = None
        if c.histogram is not None:
            hist = _dumps(
                {
                    "lows_s": c.histogram.lows_s,
                    "highs_s": c.histogram.highs_s,
                    "counts": c.histogram.counts,
                }
            )
        cur.execute(
            "INSERT INTO client_results (run_id, client, status, reason, tps, tps_kind, processed,"
            " failed, skipped, latency_avg_s, latency_stddev_s, latency_p50_s, latency_p95_s,"
            " latency_p99_s, latency_max_s, start_ts, end_ts, exit_code, histogram_json,"
            " report_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                run_id,
                c.client,
                RunStatus(c.status).value,
                c.reason,
                c.tps,
                c.tps_kind,
                c.processed,
                c.failed,
                c.skipped,
                c.latency_avg_s,
                c.latency_stddev_s,
                c.latency_p50_s,
                c.latency_p95_s,
                c.latency_p99_s,
                c.latency_max_s,
                c.start,
                c.end,
                c.exit_code,
                hist,
                _dumps(dict(c.report)),
            ),
        )

    @staticmethod
    def _insert_samples(
        cur: sqlite3.Cursor, samples: Iterable[Sample], scenario_id: int | None, run_id: int | None
    ) -> None:
        cur.executemany(
            "INSERT INTO samples (scenario_id, run_id, metric, value, unit, labels_json, timestamp)"
            " VALUES (?,?,?,?,?,?,?)",
            [
                (
                    scenario_id,
                    run_id,
                    s.metric,
                    s.value,
                    s.unit,
                    _dumps(dict(s.labels)),
                    s.timestamp,
                )
                for s in samples
            ],
        )

    @staticmethod
    def _insert_facts(
        cur: sqlite3.Cursor,
        *,
        facts: Mapping[str, Any],
        scenario_id: int | None,
        run_id: int | None,
        scope: str,
        host: str | None,
    ) -> None:
        cur.executemany(
            "INSERT INTO facts (scenario_id, run_id, scope, host, key, value_json)"
            " VALUES (?,?,?,?,?,?)",
            [(scenario_id, run_id, scope, host, k, _dumps(v)) for k, v in facts.items()],
        )

    def add_samples(
        self, samples: Iterable[Sample], scenario_id: int | None = None, run_id: int | None = None
    ) -> None:
        """Samples (fio and pg_test_fsync pre-tests, device telemetry series) of a
        scenario or of one run, in one transaction."""
        with self.transaction() as cur:
            if run_id is not None and scenario_id is None:
                scenario_id = cur.execute(
                    "SELECT c.scenario_id FROM runs r JOIN cells c ON c.id = r.cell_id"
                    " WHERE r.id = ?",
                    (run_id,),
                ).fetchone()[0]
            self._insert_samples(cur, samples, scenario_id, run_id)

    def add_facts(
        self,
        scenario_id: int,
        facts: Mapping[str, Any],
        scope: str = "environment",
        host: str | None = None,
        run_id: int | None = None,
    ) -> None:
        """Environment facts (kernel, PostgreSQL settings), device facts (model,
        serial, rotational, write cache) and the like; values are any JSON."""
        with self.transaction() as cur:
            self._insert_facts(
                cur, facts=facts, scenario_id=scenario_id, run_id=run_id, scope=scope, host=host
            )
