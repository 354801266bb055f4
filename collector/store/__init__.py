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

Here are :class:`Store`'s lifecycle (open, migrate, close), its transactions and its
claims, and :func:`claim`; its writes are in :mod:`collector.store.writes`, its reads in
:mod:`collector.store.reads`.

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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from collector.errors import DrivelabError
from collector.store.backend import (
    Backend,
    Cursor,
    FileClaims,
    Holder,
    PostgresBackend,
    SQLiteBackend,
)
from collector.store.reads import Reads
from collector.store.rows import Fact, ScenarioInfo, StoredRun

# Store._migrate reads SCHEMA_VERSION and MIGRATIONS as globals of this module, so a
# test that patches collector.store.SCHEMA_VERSION (or its MIGRATIONS) reaches it
from collector.store.schema import MIGRATIONS, PG_BASELINE, PG_BASELINE_VERSION, SCHEMA_VERSION
from collector.store.target import PostgresTarget, Target, default_target, parse_target
from collector.store.writes import Writes

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


class Store(Writes):
    """A connection to one results store. Use :meth:`open`; close with :meth:`close`
    or a ``with`` block. Its lifecycle (open, migrate, close), transactions and claims
    are here; its writes and reads are its base classes'
    (:class:`~collector.store.writes.Writes`, :class:`~collector.store.reads.Reads`)."""

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
