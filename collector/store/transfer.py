"""Moving scenarios between stores (``drivelab export`` / ``drivelab import``): SQLite to
PostgreSQL and back, through one JSON document.

The document holds, per scenario, the rows of every table that belongs to it (the
scenario, its cells, runs, client results, series, samples, facts and raw-output
paths), every column as stored, in the store's id order. Importing it merges it into a
store in one transaction per scenario:

* the scenario is found by name (made if new; its spec, baseline and description
  take the document's), a cell by its key;
* a run by (cell, repetition, attempt): one already stored with the same recording
  (recorded_at, controller, status) is left as it is; another is replaced whole; runs
  the store has and the document does not are kept;
* the scenario's own facts and samples (those of no run) take the document's when
  they differ;
* rows are inserted in the document's order, so what the reports list in store order
  (facts, samples) comes out in the same order.

So importing a document twice changes nothing (not even an id), and a report of the
imported scenarios reads the same from either store (the raw-output paths are copied
as they are: relative to the exporting controller's results folder).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collector.errors import DrivelabError

if TYPE_CHECKING:
    from collector.store import Store
    from collector.store.backend import Cursor

#: the document's own format version
FORMAT = 1
#: a scenario's tables, parents first, and the columns a document carries (ids included,
#: to keep order and to tie children to parents; they are not kept on import)
COLUMNS: dict[str, tuple[str, ...]] = {
    "scenarios": ("id", "name", "created_at", "baseline_drive", "spec_json", "description"),
    "cells": ("id", "scenario_id", "key", "drive", "workload", "filesystem", "placement",
              "scale", "clients", "params_json", "write_cache", "filesystem_json",
              "pg_settings_name", "pg_settings_json", "wal_drive",
              "drive_state", "trim", "clients_swept"),
    "runs": ("id", "cell_id", "repetition", "attempt", "status", "reason", "started_at",
             "ended_at", "commands_json", "recorded_at", "controller"),
    "client_results": ("id", "run_id", "client", "status", "reason", "tps", "tps_kind",
                       "processed", "failed", "skipped", "latency_avg_s", "latency_stddev_s",
                       "latency_p50_s", "latency_p95_s", "latency_p99_s", "latency_max_s",
                       "start_ts", "end_ts", "exit_code", "histogram_json", "report_json"),
    "series": ("run_id", "client", "start_ts", "duration_s", "transactions", "latency_avg_s",
               "failed", "source"),
    "samples": ("id", "scenario_id", "run_id", "metric", "value", "unit", "labels_json",
                "timestamp"),
    "facts": ("id", "scenario_id", "run_id", "scope", "host", "key", "value_json"),
    "raw_outputs": ("id", "run_id", "host", "kind", "path"),
}  # fmt: skip

#: columns added to a table since the document format was made, and what a document
#: without them (exported by an older drivelab) means by their absence
LATER: dict[str, dict[str, Any]] = {
    "cells": {"wal_drive": None, "drive_state": None, "trim": "none", "clients_swept": 0}
}

_RUNS_OF = "SELECT r.id FROM runs r JOIN cells c ON c.id = r.cell_id WHERE c.scenario_id = ?"


def _select(table: str, where: str, order: str = "id") -> str:
    return f"SELECT {', '.join(COLUMNS[table])} FROM {table} WHERE {where} ORDER BY {order}"  # noqa: S608  (fixed names)


def export(store: Store, names: Iterable[str] | None = None) -> dict[str, Any]:
    """The document of the named scenarios (all without names)."""
    from collector.store import SCHEMA_VERSION  # noqa: PLC0415

    infos = store.scenarios()
    if names:
        infos = [store.scenario(n) for n in dict.fromkeys(names)]
    out = []
    for info in infos:
        in_runs = f"run_id IN ({_RUNS_OF})"
        where = {
            "scenarios": "id = ?",
            "cells": "scenario_id = ?",
            "runs": "cell_id IN (SELECT id FROM cells WHERE scenario_id = ?)",
            "client_results": in_runs,
            "series": in_runs,
            "samples": "scenario_id = ?",
            "facts": "scenario_id = ?",
            "raw_outputs": in_runs,
        }
        q = {
            t: _select(t, w, "run_id, client, start_ts" if t == "series" else "id")
            for t, w in where.items()
        }
        out.append({t: [list(r) for r in store._all(sql, (info.id,))] for t, sql in q.items()})
    return {
        "drivelab_export": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "columns": {t: list(c) for t, c in COLUMNS.items()},
        "scenarios": out,
    }


def export_postgresql(uri: str, where: str) -> dict[str, Any] | None:
    """The export document of the PostgreSQL store at ``uri`` (named ``where`` in its
    errors), or None when it holds no drivelab tables or no scenario. A store newer than
    this drivelab is an error: a caller about to remove the store keeps it."""
    import psycopg  # noqa: PLC0415

    from collector.store import Store  # noqa: PLC0415
    from collector.store.target import parse_target  # noqa: PLC0415

    with psycopg.connect(uri) as conn:
        if conn.execute("SELECT to_regclass('scenarios')").fetchone()[0] is None:
            return None  # no drivelab tables yet: nothing was stored
    with Store.open(parse_target(uri, where=where), create=False) as store:
        doc = export(store)
    return doc if doc["scenarios"] else None


def import_document(target: Any, doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, int]]]:
    """A checked document (:func:`check`) merged into the store at ``target`` (made if
    new), one transaction per scenario: each scenario's name and counts as it is done."""
    from collector.store import Store  # noqa: PLC0415

    with Store.open(target) as store:
        for rows in doc["scenarios"]:
            yield rows["scenarios"][0][1], import_scenario(store, rows)


def write_export(doc: dict, out: Path) -> None:
    """The export document at ``out``, atomically: a reader never sees half of it, and a
    crash leaves the old file or the new one (flushed to disk before the rename, as
    :func:`collector.runfolder.write_json` does; compact, in store order, and readable by
    the team, unlike run folders' files)."""
    text = json.dumps(doc, separators=(",", ":")) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent if str(out.parent) else ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # results, no secrets: the team reads it (mkstemp made it 0600)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check(doc: Any, where: str) -> None:
    """A document this drivelab can import, or one line saying why not."""
    if not isinstance(doc, dict) or "drivelab_export" not in doc:
        raise DrivelabError(f"{where}: not a drivelab export (no 'drivelab_export' key)")
    if doc["drivelab_export"] != FORMAT:
        raise DrivelabError(
            f"{where}: export format {doc['drivelab_export']!r}, this drivelab reads {FORMAT}"
        )
    if doc.get("columns") not in (
        {t: list(c) for t, c in COLUMNS.items()},
        {t: [n for n in c if n not in LATER.get(t, {})] for t, c in COLUMNS.items()},
    ):
        raise DrivelabError(
            f"{where}: made by a drivelab of schema version {doc.get('schema_version')!r}"
            " with other columns: import it with that version, or export it again"
        )


def _columns(table: str, row: list[Any]) -> list[str]:
    """The columns of a document's row: all of today's, or those of a document made
    before the :data:`LATER` ones (:func:`check` let only those two through)."""
    if len(row) == len(COLUMNS[table]):
        return list(COLUMNS[table])
    return [n for n in COLUMNS[table] if n not in LATER.get(table, {})]


def import_scenario(store: Store, rows: dict[str, list[list[Any]]]) -> dict[str, int]:
    """Merge one scenario of a document (see the module); one transaction. Returns how
    many runs were added, replaced and left as they were."""
    dicts = {
        t: [LATER.get(t, {}) | dict(zip(_columns(t, r), r, strict=True)) for r in rows[t]]
        for t in COLUMNS
    }
    (scenario,) = dicts["scenarios"]
    counts = {"added": 0, "replaced": 0, "kept": 0}
    with store.transaction() as cur:
        sid = _scenario(cur, scenario)
        # two imports of one scenario at once queue here (PostgreSQL; SQLite's file lock)
        lock = store.db.for_update  # a fixed clause of the backend's
        cur.execute(f"SELECT id FROM scenarios WHERE id = ?{lock}", (sid,))  # noqa: S608
        cells = {c["id"]: _cell(cur, sid, scenario["name"], c) for c in dicts["cells"]}
        runs: dict[int, int] = {}  # the document's run id -> the store's, for new runs only
        for r in dicts["runs"]:
            new = _run(cur, cells[r["cell_id"]], r)
            counts[new[1]] += 1
            if new[1] != "kept":
                runs[r["id"]] = new[0]
        own = _scenario_rows_differ(cur, sid, dicts)
        if own:
            cur.execute("DELETE FROM facts WHERE scenario_id = ? AND run_id IS NULL", (sid,))
            cur.execute("DELETE FROM samples WHERE scenario_id = ? AND run_id IS NULL", (sid,))
        for table in ("client_results", "series", "raw_outputs", "samples", "facts"):
            for row in dicts[table]:
                if row["run_id"] is None:
                    if not own:
                        continue
                elif row["run_id"] not in runs:
                    continue
                _insert(cur, table, row, sid, runs)
    return counts


def _insert(cur: Cursor, table: str, row: dict[str, Any], sid: int, runs: dict[int, int]) -> None:
    values = dict(row)
    values.pop("id", None)
    if values.get("run_id") is not None:
        values["run_id"] = runs[values["run_id"]]
    if "scenario_id" in values and values["scenario_id"] is not None:
        values["scenario_id"] = sid
    names = ", ".join(values)
    cur.execute(
        f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(values))})",  # noqa: S608  (fixed names)
        list(values.values()),
    )


def _scenario(cur: Cursor, s: dict[str, Any]) -> int:
    made = cur.execute(
        "INSERT INTO scenarios (name, created_at, baseline_drive, spec_json, description)"
        " VALUES (?,?,?,?,?) ON CONFLICT (name) DO NOTHING RETURNING id",
        (s["name"], s["created_at"], s["baseline_drive"], s["spec_json"], s["description"]),
    ).fetchone()
    if made is not None:
        return int(made[0])
    sid, *have = cur.execute(
        "SELECT id, baseline_drive, spec_json, description FROM scenarios WHERE name = ?",
        (s["name"],),
    ).fetchone()
    want = [s["baseline_drive"], s["spec_json"], s["description"]]
    if have != want:
        cur.execute(
            "UPDATE scenarios SET baseline_drive = ?, spec_json = ?, description = ? WHERE id = ?",
            (*want, sid),
        )
    return int(sid)


def _cell(cur: Cursor, sid: int, scenario: str, c: dict[str, Any]) -> int:
    row = cur.execute(
        "SELECT id, pg_settings_json FROM cells WHERE scenario_id = ? AND key = ?",
        (sid, c["key"]),
    ).fetchone()
    if row is not None:
        if row[1] != c["pg_settings_json"]:
            raise DrivelabError(
                f"scenario {scenario!r}: cell {c['key']!r} is stored with other PostgreSQL"
                " settings: nothing of this scenario imported"
            )
        return int(row[0])
    names = [n for n in COLUMNS["cells"] if n != "id"]
    values = [sid if n == "scenario_id" else c[n] for n in names]
    return int(
        cur.execute(
            f"INSERT INTO cells ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"  # noqa: S608
            " RETURNING id",
            values,
        ).fetchone()[0]
    )


def _run(cur: Cursor, cell_id: int, r: dict[str, Any]) -> tuple[int, str]:
    """The store's run for the document's: (id, 'kept' | 'replaced' | 'added')."""
    old = cur.execute(
        "SELECT id, recorded_at, controller, status FROM runs"
        " WHERE cell_id = ? AND repetition = ? AND attempt = ?",
        (cell_id, r["repetition"], r["attempt"]),
    ).fetchone()
    if old is not None and list(old[1:]) == [r["recorded_at"], r["controller"], r["status"]]:
        return int(old[0]), "kept"
    if old is not None:
        cur.execute("DELETE FROM runs WHERE id = ?", (old[0],))
    names = [n for n in COLUMNS["runs"] if n != "id"]
    values = [cell_id if n == "cell_id" else r[n] for n in names]
    new = cur.execute(
        f"INSERT INTO runs ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"  # noqa: S608
        " RETURNING id",
        values,
    ).fetchone()
    return int(new[0]), "replaced" if old is not None else "added"


def _scenario_rows_differ(cur: Cursor, sid: int, dicts: dict[str, list[dict]]) -> bool:
    """Whether the scenario's own facts and samples (of no run) differ from the document's."""
    for table in ("facts", "samples"):
        cols = [c for c in COLUMNS[table] if c not in ("id", "scenario_id", "run_id")]
        have = cur.execute(
            f"SELECT {', '.join(cols)} FROM {table}"  # noqa: S608
            " WHERE scenario_id = ? AND run_id IS NULL ORDER BY id",
            (sid,),
        ).fetchall()
        want = [tuple(r[c] for c in cols) for r in dicts[table] if r["run_id"] is None]
        if [tuple(h) for h in have] != want:
            return True
    return False
