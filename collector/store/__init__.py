"""The results store: an SQLite file (default ``results/drivelab.db``) or, for a team,
a PostgreSQL database (``--db postgresql://user@host/dbname``): one schema, one SQL
text, the differences kept in :mod:`collector.store.backend`.

It holds scenarios, their cells, the runs of each cell (one per repetition, with
status complete / partial / failed and the reason, and the controller that recorded
it), per-client results, per-second series, samples (fio, pg_test_fsync, device
telemetry), environment and device facts, and the paths of the raw outputs kept beside
it. Reports read only this.

* The schema is versioned (table ``schema_version``); :data:`MIGRATIONS` brings an
  older store up to date on first use, each step in its own transaction. A store
  written by a newer drivelab is refused rather than misread.
* Every write is one transaction (SQLite ``BEGIN IMMEDIATE``, PostgreSQL ``BEGIN`` and
  the rows it depends on locked), so a write that is interrupted (an exception, a kill,
  a power cut) leaves the previous state intact: a run is stored with all its clients,
  series and paths, or not at all; two writers queue, never interleave.

The runner's calls, in order::

    store = Store.open(path_or_uri)                            # creates or migrates
    sid = store.add_scenario("two-client", spec, baseline_drive="hdd", description="...")
    store.add_facts(sid, {"kernel": "6.1.0"}, scope="environment", host="db")
    cid = store.add_cell(sid, CellSpec(drive="ssd", clients=2, scale=20))
    if repetition not in store.repetitions("two-client", spec):  # resume
        store.record_run(cid, RunRecord(repetition, status, clients, ...))
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from collector.errors import DrivelabError
from collector.records import CellSpec, ClientResult, RunRecord, RunStatus, Sample
from collector.store.backend import (
    Backend,
    Cursor,
    FileClaims,
    Holder,
    PostgresBackend,
    SQLiteBackend,
)
from collector.store.reads import Reads
from collector.store.rows import Fact, ScenarioInfo, StoredRun, _dumps, _filesystem_options

# Store._migrate reads SCHEMA_VERSION and MIGRATIONS as globals of this module, so a
# test that patches collector.store.SCHEMA_VERSION (or its MIGRATIONS) reaches it
from collector.store.schema import MIGRATIONS, PG_BASELINE, PG_BASELINE_VERSION, SCHEMA_VERSION
from collector.store.target import PostgresTarget, Target, default_target, parse_target

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Fact",
    "PostgresTarget",
    "Reads",
    "ScenarioInfo",
    "Store",
    "StoredRun",
    "Target",
    "claim",
    "default_path",
    "parse_target",
]


def _claimed(scenario: str, where: Target, held: str) -> str:
    return (
        f"scenario {scenario!r} is being run into {where} by {held}: one scenario name is run"
        " by one controller at a time; wait for it to end, or give this run another scenario name"
    )


@contextmanager
def claim(
    target: Path | str | PostgresTarget | None, scenario: str, controller: str | None = None
) -> Iterator[None]:
    """:meth:`Store.claim` for a whole ``drivelab run``, made before anything else: on
    PostgreSQL through a store connection kept open meanwhile (made and migrated if
    new); on SQLite by the lock file alone, so a run refused later leaves no store."""
    t = parse_target(target)
    if isinstance(t, PostgresTarget):
        with Store.open(t, controller=controller) as store, store.claim(scenario):
            yield
        return
    claims = FileClaims(t)
    me = Holder(controller or socket.gethostname(), os.getpid(), time.time())
    held = claims.try_claim(scenario, me)
    if held is not None:
        raise DrivelabError(_claimed(scenario, t, held))
    try:
        yield
    finally:
        claims.release(scenario)


def default_path() -> Target:
    """``DRIVELAB_DB`` when set, else ``results/drivelab.db``."""
    return default_target()


class Store(Reads):
    """A connection to one results store. Use :meth:`open`; close with :meth:`close`
    or a ``with`` block."""

    def __init__(
        self, db: Backend, path: Target, clock=time.time, controller: str | None = None
    ) -> None:
        self.db = db
        #: the backend's own connection (sqlite3 or psycopg), for tests and tools
        self.conn = db.conn
        self.path = path
        self.clock = clock
        #: recorded with every run this store records: which controller ran it
        self.controller = controller if controller is not None else socket.gethostname()

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def open(
        cls,
        path: Path | str | PostgresTarget | None = None,
        create: bool = True,
        clock=time.time,
        controller: str | None = None,
    ) -> Store:
        """Open (and with ``create``, create or migrate) the store at ``path``: a file
        path or a ``postgresql://`` URI; ``None`` is ``DRIVELAB_DB`` or the default
        file. Without ``create`` a missing or empty store is a :class:`DrivelabError`."""
        target = parse_target(path)
        db: Backend
        if isinstance(target, PostgresTarget):
            db = PostgresBackend.connect(target)
        else:
            p = target
            if not p.exists() and not create:
                raise DrivelabError(f"no results store at {p}: run a scenario first, or give --db")
            if create:
                p.parent.mkdir(parents=True, exist_ok=True)
            try:
                db = SQLiteBackend.connect(p, create)
            except sqlite3.DatabaseError as err:
                raise DrivelabError(f"{p}: not a drivelab results store ({err})") from err
        store = cls(db, target, clock, controller)
        try:
            store._migrate(create)
        except db.not_a_store_errors as err:
            db.close()
            raise DrivelabError(f"{target}: not a drivelab results store ({err})") from err
        except BaseException:
            db.close()
            raise
        return store

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def version(self, cur: Cursor | None = None) -> int:
        cur = cur or self.db.cursor()
        if "schema_version" not in self.db.tables(cur):
            return 0
        row = cur.execute("SELECT max(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    def _steps(self, current: int) -> list[tuple[int, tuple[Any, ...]]]:
        """(version, steps) that bring a store at ``current`` up to :data:`SCHEMA_VERSION`:
        SQLite runs its whole history; a new PostgreSQL store starts at its baseline."""
        if isinstance(self.db, PostgresBackend) and current < PG_BASELINE_VERSION:
            return [
                (PG_BASELINE_VERSION, PG_BASELINE),
                *[(v, MIGRATIONS[v]) for v in range(PG_BASELINE_VERSION + 1, SCHEMA_VERSION + 1)],
            ]
        return [(v, MIGRATIONS[v]) for v in range(current + 1, SCHEMA_VERSION + 1)]

    def _migrate(self, create: bool) -> None:
        current = self.version()
        if current > SCHEMA_VERSION:
            raise DrivelabError(
                f"{self.path}: schema version {current} is newer than this drivelab's "
                f"({SCHEMA_VERSION}); upgrade drivelab"
            )
        if current == 0:
            # another controller may be making this very store: its first migration can
            # commit between any two of our reads. Tables read after "no version" are
            # read again, with the version, behind its schema lock; no decision rests on
            # a read from before that lock and one from after it
            tables = self.db.tables()
            if tables:
                current, tables = self._behind_the_schema_lock()
            if current == 0 and tables:
                what = "an SQLite file" if self.db.kind == "sqlite" else "a PostgreSQL database"
                raise DrivelabError(f"{self.path}: {what}, but not a drivelab store")
            if current == 0 and not create:
                raise DrivelabError(f"{self.path}: empty results store: run a scenario first")
        if current == SCHEMA_VERSION:
            return
        with self.db.migrating():
            for version, steps in self._steps(current):
                with self.transaction() as cur:
                    # another controller may be migrating the same store: the schema lock
                    # queues us behind it, and what it did is not done twice
                    self.db.lock_schema(cur)
                    if self.version(cur) >= version:
                        continue
                    for step in steps:
                        if callable(step):
                            step(cur)
                        else:
                            cur.execute(step)
                    bad = self.db.broken_references(cur)
                    if bad:
                        raise DrivelabError(
                            f"{self.path}: migrating to version {version} broke references"
                            f" ({bad[0]}): the store is left at version {version - 1}"
                        )
                    cur.execute("DELETE FROM schema_version")
                    cur.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))

    def _behind_the_schema_lock(self) -> tuple[int, set[str]]:
        """The schema version and the tables once no other controller is migrating (the
        lock its migrations hold, then released at once), read in one transaction."""
        with self.transaction() as cur:
            self.db.lock_schema(cur)
            return self.version(cur), self.db.tables(cur)

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """One write: ``BEGIN`` (SQLite: ``IMMEDIATE``) ... ``COMMIT``; any exception
        rolls everything back."""
        cur = self.db.cursor()
        self.db.begin(cur)
        try:
            yield cur
            cur.execute("COMMIT")
        except BaseException:
            # SQLite may have rolled back already (a full disk does): then the error to
            # report is that one, not "no transaction is active"
            if self.db.in_transaction():
                cur.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------ claims

    @contextmanager
    def claim(self, scenario: str) -> Iterator[None]:
        """Hold ``scenario`` for this process while it runs into this store; a second
        holder (another controller, or another ``drivelab run`` here) is refused in one
        line naming who holds it. Two runs of one scenario at once would both run the
        repetitions missing from the store and one would replace the other's: a scenario
        name is one team member's at a time (docs/collector.md).

        The claim is the backend's lock, held as long as this connection (PostgreSQL: a
        session advisory lock, the ``claims`` row saying who) or this process (SQLite:
        ``flock`` on a file beside the store, saying who) lives, so a killed run leaves
        nothing to clean up. Keep the store open for the length of the run."""
        held = self.db.try_claim(scenario, Holder(self.controller, os.getpid(), self.clock()))
        if held is not None:
            raise DrivelabError(_claimed(scenario, self.path, held))
        try:
            yield
        finally:
            self.db.release_claim(scenario)

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
                # another controller may add the same name at the same moment: the unique
                # name decides, and the loser takes the winner's row
                made = cur.execute(
                    "INSERT INTO scenarios (name, created_at, baseline_drive, spec_json,"
                    " description) VALUES (?,?,?,?,?) ON CONFLICT (name) DO NOTHING RETURNING id",
                    (name, self.clock(), baseline_drive, _dumps(spec or {}), description or ""),
                ).fetchone()
                if made is not None:
                    return int(made[0])
                row = cur.execute("SELECT id FROM scenarios WHERE name = ?", (name,)).fetchone()
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
            made = cur.execute(
                "INSERT INTO cells (scenario_id, key, drive, workload, filesystem, placement,"
                " scale, clients, params_json, write_cache, filesystem_json, pg_settings_name,"
                " pg_settings_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"
                " ON CONFLICT (scenario_id, key) DO NOTHING RETURNING id",
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
            ).fetchone()
            if made is None:  # another controller added it since the SELECT
                made = cur.execute(
                    "SELECT id FROM cells WHERE scenario_id = ? AND key = ?",
                    (scenario_id, cell.key),
                ).fetchone()
            return int(made[0])

    def attempts(self, scenario: str, cell: CellSpec) -> dict[int, list[RunStatus]]:
        """{repetition: [status of attempt 1, attempt 2, ...]} of the stored runs of one
        cell of a scenario (an attempt never stored is absent from its list)."""
        rows = self._all(
            "SELECT r.repetition, r.attempt, r.status FROM runs r"
            " JOIN cells c ON c.id = r.cell_id JOIN scenarios s ON s.id = c.scenario_id"
            " WHERE s.name = ? AND c.key = ? ORDER BY r.repetition, r.attempt",
            (scenario, cell.key),
        )
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
        row = self._one(sql, (cell_id, repetition))
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
        stored with the run too, so that replacing the run replaces them. The cell's row
        is locked first (PostgreSQL), so two writers of one cell queue."""
        with self.transaction() as cur:
            lock = self.db.for_update  # a fixed clause of the backend's
            cell = cur.execute(
                f"SELECT scenario_id FROM cells WHERE id = ?{lock}",  # noqa: S608
                (cell_id,),
            ).fetchone()
            if cell is None:
                raise DrivelabError(f"{self.path}: no cell {cell_id} to record a run of")
            scenario_id = cell[0]
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
            made = cur.execute(
                "INSERT INTO runs (cell_id, repetition, attempt, status, reason, started_at,"
                " ended_at, commands_json, recorded_at, controller)"
                " VALUES (?,?,?,?,?,?,?,?,?,?) RETURNING id",
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
                    run.controller or self.controller,
                ),
            ).fetchone()
            run_id = int(made[0])
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
    def _insert_client(cur: Cursor, run_id: int, c: ClientResult) -> None:
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
        cur: Cursor, samples: Iterable[Sample], scenario_id: int | None, run_id: int | None
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
        cur: Cursor,
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
