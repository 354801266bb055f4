"""The store's schema: its version and the migrations that bring a file up to it.

:data:`MIGRATIONS` maps a version to the steps (SQL statements, or functions of a
cursor) that bring the previous version up to it; ``Store._migrate`` (in
:mod:`collector.store`) runs them, each version in its own transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

SCHEMA_VERSION = 3
_STATUSES = "('complete', 'partial', 'failed')"


def _cells_write_cache(cur: sqlite3.Cursor) -> None:
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
MIGRATIONS: dict[int, tuple[str | Callable[[sqlite3.Cursor], None], ...]] = {
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
}
