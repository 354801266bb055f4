"""The two backends of the results store: an SQLite file (the default: nothing to set
up) and a PostgreSQL database (a team's, :mod:`collector.store.target`).

The store's SQL is one text for both, written with ``?`` placeholders; what differs
lives here and only here: how to connect, how a write transaction begins, how a
placeholder is spelled, how the tables are listed, how a row is locked for the rest of
a transaction, how the schema is locked while it migrates, and which exceptions mean
"not a store" or "a constraint said no".
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from collector.errors import DrivelabError, one_line
from collector.store.target import PostgresTarget

#: pg_advisory_xact_lock key held while a PostgreSQL store migrates, so two controllers
#: opening a new or older store at once do not both create or alter it ("drvl")
SCHEMA_LOCK = 0x6472766C


def claim_key(scenario: str) -> int:
    """A scenario name as a signed 64-bit key (an advisory lock's, a lock file's name)."""
    digest = hashlib.blake2b(f"drivelab claim {scenario}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@dataclass(frozen=True)
class Holder:
    """Who holds a scenario's claim."""

    controller: str
    pid: int
    since: float

    def __str__(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since))
        return f"{self.controller} (pid {self.pid}, since {since})"


class FileClaims:
    """Claims on an SQLite store: ``flock`` on ``<store>.claims/<key>``, the holder
    written in the file. The kernel drops the lock when the process ends, however it
    ends; the store file itself is not needed (nor made) for a claim."""

    def __init__(self, path: Path) -> None:
        self.folder = path.with_name(path.name + ".claims")
        self._fds: dict[str, int] = {}

    def try_claim(self, scenario: str, holder: Holder) -> str | None:
        """None when claimed; else who holds it."""
        self.folder.mkdir(parents=True, exist_ok=True)
        name = self.folder / f"{claim_key(scenario) & (2**64 - 1):016x}"
        fd = os.open(name, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                held = json.loads(os.pread(fd, 4096, 0) or b"null")
                return str(Holder(**held)) if held else "another drivelab"
            except (ValueError, TypeError):
                return "another drivelab"
            finally:
                os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(asdict(holder)).encode(), 0)
        self._fds[scenario] = fd
        return None

    def release(self, scenario: str) -> None:
        fd = self._fds.pop(scenario, None)
        if fd is not None:
            os.ftruncate(fd, 0)
            os.close(fd)

    def release_all(self) -> None:
        for scenario in list(self._fds):
            self.release(scenario)


class Cursor:
    """A cursor of either backend that takes the store's ``?`` placeholders."""

    def __init__(self, raw: Any, placeholder: str) -> None:
        self.raw = raw
        self.placeholder = placeholder

    def _sql(self, sql: str) -> str:
        return sql if self.placeholder == "?" else sql.replace("?", self.placeholder)

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor:
        self.raw.execute(self._sql(sql), tuple(args))
        return self

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = [tuple(r) for r in rows]
        if rows:
            self.raw.executemany(self._sql(sql), rows)

    def fetchone(self) -> Any:
        return self.raw.fetchone()

    def fetchall(self) -> list[Any]:
        return list(self.raw.fetchall())


class SQLiteBackend:
    """One SQLite file: ``BEGIN IMMEDIATE`` takes the file's write lock at once, so two
    writers queue (30 s) rather than fail halfway."""

    kind = "sqlite"
    #: SQLite has no row locks: ``BEGIN IMMEDIATE`` already holds the whole file
    for_update = ""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path
        self.claims = FileClaims(path)

    @classmethod
    def connect(cls, path: Path, create: bool) -> SQLiteBackend:
        conn = sqlite3.connect(path, isolation_level=None, timeout=30)
        conn.execute("PRAGMA foreign_keys = ON")
        if create:
            # a rollback journal, not WAL: WAL's index is a memory-mapped file, and on
            # a full filesystem touching it killed drivelab with SIGBUS (tested); with
            # a rollback journal SQLite reports "database or disk is full" and rolls back
            conn.execute("PRAGMA journal_mode = DELETE")
        return cls(conn, path)

    #: what a file that is not an SQLite database, or is damaged, raises
    not_a_store_errors: tuple[type[BaseException], ...] = (sqlite3.DatabaseError,)
    integrity_errors: tuple[type[BaseException], ...] = (sqlite3.IntegrityError,)

    def cursor(self) -> Cursor:
        return Cursor(self.conn.cursor(), "?")

    def begin(self, cur: Cursor) -> None:
        cur.execute("BEGIN IMMEDIATE")

    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    def tables(self, cur: Cursor | None = None) -> set[str]:
        cur = cur or self.cursor()
        rows = cur.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return {r[0] for r in rows}

    def lock_schema(self, cur: Cursor) -> None:
        """``BEGIN IMMEDIATE`` holds the file already."""

    @contextmanager
    def migrating(self) -> Iterator[None]:
        # a step may make a table anew (SQLite's way to change a constraint): with foreign
        # keys on, dropping the old table would delete every row that refers to it
        self.conn.execute("PRAGMA foreign_keys = OFF")
        try:
            yield
        finally:
            self.conn.execute("PRAGMA foreign_keys = ON")

    def broken_references(self, cur: Cursor) -> list[Any]:
        return cur.execute("PRAGMA foreign_key_check").fetchall()

    def try_claim(self, scenario: str, holder: Holder) -> str | None:
        return self.claims.try_claim(scenario, holder)

    def release_claim(self, scenario: str) -> None:
        self.claims.release(scenario)

    def close(self) -> None:
        self.claims.release_all()
        self.conn.close()


class PostgresBackend:
    """One PostgreSQL database, through psycopg 3 (libpq: the password from
    ``~/.pgpass``, ``PGPASSFILE`` or ``PGPASSWORD``). Autocommit, with the store's own
    ``BEGIN`` ... ``COMMIT``: read committed, and the rows a write depends on locked
    (``SELECT ... FOR UPDATE``) so two controllers' writes queue, never interleave."""

    kind = "postgresql"
    for_update = " FOR UPDATE"

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self._held: dict[str, Holder] = {}

    @classmethod
    def connect(cls, target: PostgresTarget) -> PostgresBackend:
        import psycopg  # noqa: PLC0415  (SQLite users never load it)

        try:
            conn = psycopg.connect(target.uri, autocommit=True, application_name="drivelab")
        except psycopg.Error as err:
            raise DrivelabError(f"results store {target}: {one_line(str(err))}") from None
        return cls(conn)

    @property
    def not_a_store_errors(self) -> tuple[type[BaseException], ...]:
        import psycopg  # noqa: PLC0415

        return (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn)

    @property
    def integrity_errors(self) -> tuple[type[BaseException], ...]:
        import psycopg  # noqa: PLC0415

        return (psycopg.errors.IntegrityError,)

    def cursor(self) -> Cursor:
        return Cursor(self.conn.cursor(), "%s")

    def begin(self, cur: Cursor) -> None:
        cur.execute("BEGIN")

    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus  # noqa: PLC0415

        return self.conn.info.transaction_status != TransactionStatus.IDLE

    def tables(self, cur: Cursor | None = None) -> set[str]:
        cur = cur or self.cursor()
        rows = cur.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
        ).fetchall()
        return {r[0] for r in rows}

    def lock_schema(self, cur: Cursor) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(?)", (SCHEMA_LOCK,))

    @contextmanager
    def migrating(self) -> Iterator[None]:
        """PostgreSQL checks references as each statement runs: nothing to turn off."""
        yield

    def broken_references(self, cur: Cursor) -> list[Any]:
        return []

    def try_claim(self, scenario: str, holder: Holder) -> str | None:
        """A session advisory lock: the server drops it when this connection ends,
        however it ends (a killed controller's connection is closed by the kernel). The
        ``claims`` row says who holds it, for the refusal."""
        cur = self.cursor()
        if not cur.execute("SELECT pg_try_advisory_lock(?)", (claim_key(scenario),)).fetchone()[0]:
            row = cur.execute(
                "SELECT controller, pid, since FROM claims WHERE scenario = ?", (scenario,)
            ).fetchone()
            return str(Holder(*row)) if row else "another drivelab"
        cur.execute(
            "INSERT INTO claims (scenario, controller, pid, since) VALUES (?,?,?,?)"
            " ON CONFLICT (scenario) DO UPDATE SET controller = excluded.controller,"
            " pid = excluded.pid, since = excluded.since",
            (scenario, holder.controller, holder.pid, holder.since),
        )
        self._held[scenario] = holder
        return None

    def release_claim(self, scenario: str) -> None:
        holder = self._held.pop(scenario, None)
        if holder is None:
            return
        cur = self.cursor()
        cur.execute(
            "DELETE FROM claims WHERE scenario = ? AND controller = ? AND pid = ?",
            (scenario, holder.controller, holder.pid),
        )
        cur.execute("SELECT pg_advisory_unlock(?)", (claim_key(scenario),)).fetchone()

    def close(self) -> None:
        self.conn.close()


Backend = SQLiteBackend | PostgresBackend
