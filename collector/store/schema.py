"""The store's schema: its version and the migrations that bring a store up to it.

:data:`MIGRATIONS` maps a version to the steps (SQL statements, or functions of a
cursor) that bring the previous version up to it; ``Store._migrate`` (in
:mod:`collector.store`) runs them, each version in its own transaction.

One schema, two backends. Versions 1 to 3 are SQLite's history (files made before
PostgreSQL was a backend). A new PostgreSQL store starts at version 3 with
:data:`PG_BASELINE`, the same tables, columns (in the same order), keys and checks in
PostgreSQL's types: ``DOUBLE PRECISION`` for SQLite's 8-byte ``REAL``, ``BIGINT`` for
its 8-byte ``INTEGER``, identity columns for its row ids, and text compared bytewise
(``COLLATE "C"``, as SQLite's ``BINARY``), so keys and orders are the same on both.
From version 4 on, every step is one SQL text that both run
(``tests/unit/test_store.py`` holds the two schemas to each other).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collector.store.backend import Cursor

SCHEMA_VERSION = 5
#: the version a new PostgreSQL store is made at, by :data:`PG_BASELINE`
PG_BASELINE_VERSION = 3
_STATUSES = "('complete', 'partial', 'failed')"


def _cells_write_cache(cur: Cursor) -> None:
    """Version 2: a cell's write cache is part of its identity. A version-1 cell whose
    runs were all made with the write cache set (their folder, the ``cell_id`` fact,
    ends in ``-wcon`` or ``-wcoff``) gets that state and its key the ``wc`` label; a
    cell holding runs of both states (the version-1 bug) is left as it was stored."""
    rows = cur.execute(
        "SELECT r.cell_id, f.value_json FROM runs r JOIN facts f ON f.run_id = r.id"
        " WHERE f.scope = 'run' AND f.key = 'cell_id'"
    ).fetchall()
    states: dict[int, set[str]] = {}
    for cell_id, value in rows:
        name = json.loads(value) if value else ""
        state = next((w for w in ("on", "off") if str(name).endswith(f"-wc{w}")), "leave")
        states.setdefault(cell_id, set()).add(state)
    for cell_id, seen in states.items():
        if len(seen) == 1 and (state := seen.pop()) != "leave":
            cur.execute(
                "UPDATE cells SET write_cache = ?, key = key || ? WHERE id = ?",
                (state, f" wc {state}", cell_id),
            )


#: version -> the steps (SQL statements, or functions of a cursor) that bring
#: version-1 up to it
MIGRATIONS: dict[int, tuple[str | Callable[[Cursor], None], ...]] = {
    1: (
        "CREATE TABLE schema_version (version INTEGER NOT NULL)",
        """CREATE TABLE scenarios (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            created_at REAL NOT NULL,
            baseline_drive TEXT,
            spec_json TEXT NOT NULL DEFAULT '{}')""",
        """CREATE TABLE cells (
            id INTEGER PRIMARY KEY,
            scenario_id INTEGER NOT NULL REFERENCES scenarios(id) ON DELETE CASCADE,
            key TEXT NOT NULL,
            drive TEXT NOT NULL,
            workload TEXT NOT NULL,
            filesystem TEXT,
            placement TEXT,
            scale INTEGER,
            clients INTEGER NOT NULL,
            params_json TEXT NOT NULL DEFAULT '{}',
            UNIQUE (scenario_id, key))""",
        f"""CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            cell_id INTEGER NOT NULL REFERENCES cells(id) ON DELETE CASCADE,
            repetition INTEGER NOT NULL,
            status TEXT NOT NULL CHECK (status IN {_STATUSES}),
            reason TEXT,
            started_at REAL,
            ended_at REAL,
            commands_json TEXT NOT NULL DEFAULT '[]',
            recorded_at REAL NOT NULL,
            UNIQUE (cell_id, repetition))""",
        f"""CREATE TABLE client_results (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            client TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN {_STATUSES}),
            reason TEXT,
            tps REAL, tps_kind TEXT, processed INTEGER, failed INTEGER, skipped INTEGER,
            latency_avg_s REAL, latency_stddev_s REAL,
            latency_p50_s REAL, latency_p95_s REAL, latency_p99_s REAL, latency_max_s REAL,
            start_ts REAL, end_ts REAL, exit_code INTEGER,
            histogram_json TEXT,
            report_json TEXT NOT NULL DEFAULT '{{}}',
            UNIQUE (run_id, client))""",
        """CREATE TABLE series (
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            client TEXT NOT NULL,
            start_ts REAL NOT NULL,
            duration_s REAL NOT NULL,
            transactions REAL NOT NULL,
            latency_avg_s REAL,
            failed INTEGER,
            source TEXT NOT NULL)""",
        "CREATE INDEX series_by_run ON series (run_id, client, start_ts)",
        """CREATE TABLE samples (
            id INTEGER PRIMARY KEY,
            scenario_id INTEGER REFERENCES scenarios(id) ON DELETE CASCADE,
            run_id INTEGER REFERENCES runs(id) ON DELETE CASCADE,
            metric TEXT NOT NULL,
            value REAL NOT NULL,
            unit TEXT NOT NULL,
            labels_json TEXT NOT NULL DEFAULT '{}',
            timestamp REAL)""",
        "CREATE INDEX samples_by_run ON samples (run_id, metric)",
        "CREATE INDEX samples_by_scenario ON samples (scenario_id, metric)",
        """CREATE TABLE facts (
            id INTEGER PRIMARY KEY,
            scenario_id INTEGER REFERENCES scenarios(id) ON DELETE CASCADE,
            run_id INTEGER REFERENCES runs(id) ON DELETE CASCADE,
            scope TEXT NOT NULL,
            host TEXT,
            key TEXT NOT NULL,
            value_json TEXT NOT NULL)""",
        """CREATE TABLE raw_outputs (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            host TEXT,
            kind TEXT NOT NULL,
            path TEXT NOT NULL)""",
    ),
    2: (
        # a repetition may be attempted more than once (retries): runs are unique per
        # cell, repetition and attempt. SQLite cannot change a UNIQUE constraint in
        # place: the table is made anew and its rows copied, ids kept (Store._migrate
        # turns foreign keys off around it, so no row that refers to a run is touched)
        f"""CREATE TABLE runs_v2 (
            id INTEGER PRIMARY KEY,
            cell_id INTEGER NOT NULL REFERENCES cells(id) ON DELETE CASCADE,
            repetition INTEGER NOT NULL,
            attempt INTEGER NOT NULL DEFAULT 1,
            status TEXT NOT NULL CHECK (status IN {_STATUSES}),
            reason TEXT,
            started_at REAL,
            ended_at REAL,
            commands_json TEXT NOT NULL DEFAULT '[]',
            recorded_at REAL NOT NULL,
            UNIQUE (cell_id, repetition, attempt))""",
        "INSERT INTO runs_v2 (id, cell_id, repetition, status, reason, started_at, ended_at,"
        " commands_json, recorded_at) SELECT id, cell_id, repetition, status, reason,"
        " started_at, ended_at, commands_json, recorded_at FROM runs",
        "DROP TABLE runs",
        "ALTER TABLE runs_v2 RENAME TO runs",
        "ALTER TABLE scenarios ADD COLUMN description TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE cells ADD COLUMN write_cache TEXT NOT NULL DEFAULT 'leave'",
        "ALTER TABLE cells ADD COLUMN filesystem_json TEXT NOT NULL DEFAULT '{}'",
        _cells_write_cache,
    ),
    3: (
        # a cell's PostgreSQL settings: its set's name (spelled in its key) and the
        # settings the scenario gave it (recorded); a version-2 cell had none of its own
        "ALTER TABLE cells ADD COLUMN pg_settings_name TEXT",
        "ALTER TABLE cells ADD COLUMN pg_settings_json TEXT NOT NULL DEFAULT '{}'",
    ),
    4: (
        # a team store has several controllers: the one that recorded each run (its host
        # name; a run recorded before version 4 reads as '', not known)
        "ALTER TABLE runs ADD COLUMN controller TEXT NOT NULL DEFAULT ''",
        # who is running a scenario now on a PostgreSQL store (Store.claim): the row
        # says who, the session advisory lock makes it true, so a claim dies with its
        # connection. An SQLite store's claims are lock files beside it (its rows stay
        # empty: the claim must not make the file)
        """CREATE TABLE claims (
            scenario TEXT NOT NULL PRIMARY KEY,
            controller TEXT NOT NULL,
            pid INTEGER NOT NULL,
            since DOUBLE PRECISION NOT NULL)""",
    ),
    5: (
        # placement cluster with its WAL on a drive of its own: that drive (spelled in the
        # cell's key); a version-4 cell's WAL was where its placement keeps it
        "ALTER TABLE cells ADD COLUMN wal_drive TEXT",
        # the state the drive was brought to first (drive_state's name, in the key); a
        # version-4 cell's drive was measured as found
        "ALTER TABLE cells ADD COLUMN drive_state TEXT",
        # the TRIM policy (in the key unless none); a version-4 cell had none
        "ALTER TABLE cells ADD COLUMN trim TEXT NOT NULL DEFAULT 'none'",
        # one count of a client sweep (its folder named by -c and -j too: -c4j2); a
        # version-4 cell's folder flag was not kept (1: it was one)
        "ALTER TABLE cells ADD COLUMN clients_swept INTEGER NOT NULL DEFAULT 0",
    ),
}

_T = 'TEXT COLLATE "C"'
_ID = "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"

#: a new PostgreSQL store, at :data:`PG_BASELINE_VERSION`: SQLite's version-3 tables
PG_BASELINE: tuple[str, ...] = (
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    f"""CREATE TABLE scenarios (
        id {_ID},
        name {_T} NOT NULL UNIQUE,
        created_at DOUBLE PRECISION NOT NULL,
        baseline_drive {_T},
        spec_json {_T} NOT NULL DEFAULT '{{}}',
        description {_T} NOT NULL DEFAULT '')""",
    f"""CREATE TABLE cells (
        id {_ID},
        scenario_id BIGINT NOT NULL REFERENCES scenarios(id) ON DELETE CASCADE,
        key {_T} NOT NULL,
        drive {_T} NOT NULL,
        workload {_T} NOT NULL,
        filesystem {_T},
        placement {_T},
        scale BIGINT,
        clients BIGINT NOT NULL,
        params_json {_T} NOT NULL DEFAULT '{{}}',
        write_cache {_T} NOT NULL DEFAULT 'leave',
        filesystem_json {_T} NOT NULL DEFAULT '{{}}',
        pg_settings_name {_T},
        pg_settings_json {_T} NOT NULL DEFAULT '{{}}',
        UNIQUE (scenario_id, key))""",
    f"""CREATE TABLE runs (
        id {_ID},
        cell_id BIGINT NOT NULL REFERENCES cells(id) ON DELETE CASCADE,
        repetition BIGINT NOT NULL,
        attempt BIGINT NOT NULL DEFAULT 1,
        status {_T} NOT NULL CHECK (status IN {_STATUSES}),
        reason {_T},
        started_at DOUBLE PRECISION,
        ended_at DOUBLE PRECISION,
        commands_json {_T} NOT NULL DEFAULT '[]',
        recorded_at DOUBLE PRECISION NOT NULL,
        UNIQUE (cell_id, repetition, attempt))""",
    f"""CREATE TABLE client_results (
        id {_ID},
        run_id BIGINT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        client {_T} NOT NULL,
        status {_T} NOT NULL CHECK (status IN {_STATUSES}),
        reason {_T},
        tps DOUBLE PRECISION, tps_kind {_T}, processed BIGINT, failed BIGINT, skipped BIGINT,
        latency_avg_s DOUBLE PRECISION, latency_stddev_s DOUBLE PRECISION,
        latency_p50_s DOUBLE PRECISION, latency_p95_s DOUBLE PRECISION,
        latency_p99_s DOUBLE PRECISION, latency_max_s DOUBLE PRECISION,
        start_ts DOUBLE PRECISION, end_ts DOUBLE PRECISION, exit_code BIGINT,
        histogram_json {_T},
        report_json {_T} NOT NULL DEFAULT '{{}}',
        UNIQUE (run_id, client))""",
    f"""CREATE TABLE series (
        run_id BIGINT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        client {_T} NOT NULL,
        start_ts DOUBLE PRECISION NOT NULL,
        duration_s DOUBLE PRECISION NOT NULL,
        transactions DOUBLE PRECISION NOT NULL,
        latency_avg_s DOUBLE PRECISION,
        failed BIGINT,
        source {_T} NOT NULL)""",
    "CREATE INDEX series_by_run ON series (run_id, client, start_ts)",
    f"""CREATE TABLE samples (
        id {_ID},
        scenario_id BIGINT REFERENCES scenarios(id) ON DELETE CASCADE,
        run_id BIGINT REFERENCES runs(id) ON DELETE CASCADE,
        metric {_T} NOT NULL,
        value DOUBLE PRECISION NOT NULL,
        unit {_T} NOT NULL,
        labels_json {_T} NOT NULL DEFAULT '{{}}',
        timestamp DOUBLE PRECISION)""",
    "CREATE INDEX samples_by_run ON samples (run_id, metric)",
    "CREATE INDEX samples_by_scenario ON samples (scenario_id, metric)",
    f"""CREATE TABLE facts (
        id {_ID},
        scenario_id BIGINT REFERENCES scenarios(id) ON DELETE CASCADE,
        run_id BIGINT REFERENCES runs(id) ON DELETE CASCADE,
        scope {_T} NOT NULL,
        host {_T},
        key {_T} NOT NULL,
        value_json {_T} NOT NULL)""",
    f"""CREATE TABLE raw_outputs (
        id {_ID},
        run_id BIGINT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        host {_T},
        kind {_T} NOT NULL,
        path {_T} NOT NULL)""",
)
