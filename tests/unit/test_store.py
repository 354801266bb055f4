"""The results store: schema versions, atomic writes, and a realistic round trip."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from collector import store as store_mod
from collector.errors import DrivelabError, one_line
from collector.records import CellSpec, ClientResult, RunRecord, RunStatus, SeriesPoint
from collector.store import SCHEMA_VERSION, Store
from collector.store.backend import Cursor
from collector.store.schema import PG_BASELINE
from tests.conftest import SCENARIO

REPO = Path(__file__).resolve().parents[2]


def _count(target, table: str) -> int:
    """Rows of a table, through the store's own connection (either backend)."""
    with Store.open(target, create=False) as s:
        return s._one(f"SELECT count(*) FROM {table}")[0]  # noqa: S608


def _run(rep: int, *clients: ClientResult, status=RunStatus.COMPLETE) -> RunRecord:
    return RunRecord(
        repetition=rep,
        status=status,
        clients=clients,
        series=tuple(
            SeriesPoint(c.client, 100.0 + i, 1.0, 10.0) for c in clients for i in range(3)
        ),
    )


def test_new_store_has_the_current_schema(store_target):
    with Store.open(store_target) as s:
        assert s.version() == SCHEMA_VERSION == 5
        assert s.scenarios() == []
    with Store.open(store_target) as s:  # reopening migrates nothing
        assert s.version() == SCHEMA_VERSION
    assert _count(store_target, "schema_version") == 1


def test_missing_store_is_a_clear_error(tmp_path):
    with pytest.raises(
        DrivelabError, match=r"no results store at .*nope\.db: run a scenario first"
    ):
        Store.open(tmp_path / "nope.db", create=False)


def test_an_empty_server_store_is_a_clear_error(pg_cluster):
    """A database made for results but never written: report says so in one line."""
    uri = pg_cluster.new_database()
    with pytest.raises(DrivelabError, match=r"empty results store: run a scenario first"):
        Store.open(uri, create=False)


def test_an_unreachable_server_store_is_one_line(pg_cluster):
    uri = pg_cluster.uri("drivelab_results_nope")
    with pytest.raises(DrivelabError) as err:
        Store.open(uri)
    message = str(err.value)
    assert message.startswith(f"results store {uri}: ") and "\n" not in one_line(message)
    assert pg_cluster.role_password not in message


def test_newer_schema_is_refused(store_target):
    Store.open(store_target).close()
    with Store.open(store_target) as s:
        s.conn.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(DrivelabError, match="schema version 99 is newer than this drivelab's"):
        Store.open(store_target)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"this is not sqlite at all, just text" * 100, "not a drivelab results store"),
        (None, "an SQLite file, but not a drivelab store"),
    ],
)
def test_foreign_files_are_refused(tmp_path, content, message):
    path = tmp_path / "x.db"
    if content is None:
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE something (x)")
    else:
        path.write_bytes(content)
    with pytest.raises(DrivelabError, match=message):
        Store.open(path)


def test_a_foreign_database_is_refused_and_left_alone(pg_cluster):
    import psycopg  # noqa: PLC0415

    uri = pg_cluster.new_database()
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("CREATE TABLE something (x int)")
    with pytest.raises(DrivelabError, match="a PostgreSQL database, but not a drivelab store"):
        Store.open(uri)
    with psycopg.connect(uri, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
    assert tables == [("something",)]


def test_migration_brings_an_old_store_up_to_date(store_target, monkeypatch):
    with Store.open(store_target) as s:
        sid = s.add_scenario("old")
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setitem(
        store_mod.MIGRATIONS,
        SCHEMA_VERSION + 1,
        ("ALTER TABLE scenarios ADD COLUMN operator TEXT",),
    )
    with Store.open(store_target) as s:
        assert s.version() == SCHEMA_VERSION + 1
        assert s.scenario("old").id == sid
        assert s.conn.execute("SELECT operator FROM scenarios").fetchone() == (None,)


def test_a_failed_write_leaves_the_previous_state(store_target):
    with Store.open(store_target) as s:
        sid = s.add_scenario("s")
        cid = s.add_cell(sid, CellSpec("ssd", clients=2))
        s.record_run(cid, _run(0, ClientResult("a", tps=1.0), ClientResult("b", tps=2.0)))
        before = {t: _count(store_target, t) for t in ("runs", "client_results", "series")}
        # the same client twice violates UNIQUE(run_id, client) after the run row and
        # the first client went in: the whole run must vanish, and the old one stay
        dup = _run(0, ClientResult("a", tps=5.0), ClientResult("a", tps=6.0))
        with pytest.raises(s.db.integrity_errors):
            s.record_run(cid, dup)
        assert {t: _count(store_target, t) for t in before} == before
        (run,) = s.runs(cid)
        assert [c.tps for c in s.client_results(run.id)] == [1.0, 2.0]


def test_a_killed_writer_leaves_the_previous_state(store_target):
    """A process killed in the middle of record_run (os._exit: no cleanup at all)."""
    with Store.open(store_target) as s:
        sid = s.add_scenario("s")
        cid = s.add_cell(sid, CellSpec("ssd", clients=2))
        s.record_run(cid, _run(0, ClientResult("a", tps=1.0), ClientResult("b", tps=2.0)))
    child = textwrap.dedent(
        f"""
        import os
        from collector.store import Store
        from collector.records import ClientResult, RunRecord, RunStatus
        calls = []
        def dying(cur, run_id, c):
            calls.append(c)
            if len(calls) == 2:
                os._exit(9)
            original(cur, run_id, c)
        original = Store._insert_client
        Store._insert_client = staticmethod(dying)
        s = Store.open({str(store_target)!r})
        s.record_run({cid}, RunRecord(0, RunStatus.COMPLETE,
                     (ClientResult("a", tps=7.0), ClientResult("b", tps=8.0))))
        """
    )
    proc = subprocess.run([sys.executable, "-c", child], cwd=REPO, check=False, timeout=60)
    assert proc.returncode == 9
    with Store.open(store_target) as s:
        (run,) = s.runs(cid)
        assert [c.tps for c in s.client_results(run.id)] == [1.0, 2.0]
        assert len(s.series(run.id)) == 6


def test_resume_and_replace(store_target):
    with Store.open(store_target) as s:
        sid = s.add_scenario("s", {"a": 1}, baseline_drive="hdd")
        assert s.add_scenario("s") == sid
        cid = s.add_cell(sid, CellSpec("ssd", clients=1))
        assert s.add_cell(sid, CellSpec("ssd", clients=1)) == cid
        assert not s.has_run(cid, 0)
        s.record_run(
            cid, _run(0, ClientResult("a", status=RunStatus.FAILED), status=RunStatus.FAILED)
        )
        assert s.has_run(cid, 0) and not s.has_run(cid, 0, complete_only=True)
        with pytest.raises(DrivelabError, match="repetition 0 is already stored"):
            s.record_run(cid, _run(0, ClientResult("a", tps=3.0)), replace=False)
        s.record_run(cid, _run(0, ClientResult("a", tps=3.0)))
        assert s.has_run(cid, 0, complete_only=True)
        (run,) = s.runs(cid)
        assert run.status == RunStatus.COMPLETE
        assert s.scenario("s").baseline_drive == "hdd"
        with pytest.raises(DrivelabError, match=r"no scenario 't' in .* \(stored: s\)"):
            s.scenario("t")


def test_realistic_store_round_trip(results_store):
    """Two drives x 3 repetitions x 2 clients from the fixture outputs, one partial run."""
    with Store.open(results_store, create=False) as s:
        (info,) = s.scenarios()
        assert info.name == SCENARIO and info.baseline_drive == "hdd"
        cells = s.cells(info.id)
        assert [spec.drive for _, spec in cells] == ["hdd", "ssd"]
        statuses = {}
        for cid, spec in cells:
            for run in s.runs(cid):
                statuses[(spec.drive, run.repetition)] = run.status
                clients = s.client_results(run.id)
                assert [c.client for c in clients] == ["client1", "client2"]
                assert all(c.histogram is not None and c.histogram.total == 116 for c in clients)
                assert len(s.series(run.id)) == 10
                assert s.raw_outputs(run.id)[0].kind == "stdout"
                assert run.commands[0].startswith("pgbench -c 4")
        assert statuses.pop(("hdd", 2)) == RunStatus.PARTIAL
        assert set(statuses.values()) == {RunStatus.COMPLETE}
        partial = next(r for r in s.runs(cells[0][0]) if r.repetition == 2)
        assert partial.reason.startswith("client2: client 0 aborted in command 5")
        c2 = s.client_results(partial.id)[1]
        assert c2.status == RunStatus.PARTIAL and c2.exit_code == 2
        assert c2.report["tps"] == pytest.approx(3796.085764)
        fio = s.samples(info.id, metric_prefix="drivelab_fio_iops")
        assert fio[0].value == pytest.approx(123498.167278) and fio[0].labels["drive"] == "ssd"
        assert len(s.samples(info.id, metric_prefix="drivelab_device_")) == 12
        facts = {(f.scope, f.key): f.value for f in s.facts(info.id)}
        assert facts[("device", "rotational")] is True
        assert facts[("environment", "kernel")] == "6.1.0-18-amd64"
        assert facts[("run", "pgbench_version")] == "15.18 (Debian 15.18-0+deb12u1)"


def test_attempts_at_a_repetition_are_kept_apart(store_target):
    """A partial repetition run again (a retry) is a second attempt: both are stored, the
    complete one is what resume and the statistics count."""
    spec = CellSpec("ssd", clients=2)
    with Store.open(store_target) as s:
        cid = s.add_cell(s.add_scenario("retry"), spec)
        first = _run(0, ClientResult("a", tps=1.0), status=RunStatus.PARTIAL)
        s.record_run(cid, first)
        assert s.repetitions("retry", spec) == {0: RunStatus.PARTIAL}
        s.record_run(cid, replace(first, attempt=2, status=RunStatus.COMPLETE))
        assert [(r.repetition, r.attempt, r.status) for r in s.runs(cid)] == [
            (0, 1, RunStatus.PARTIAL),
            (0, 2, RunStatus.COMPLETE),
        ]
        assert s.attempts("retry", spec) == {0: [RunStatus.PARTIAL, RunStatus.COMPLETE]}
        assert s.repetitions("retry", spec) == {0: RunStatus.COMPLETE}
        # gathering an attempt's folder again replaces that attempt only
        s.record_run(cid, replace(first, attempt=2, status=RunStatus.FAILED))
        assert s.attempts("retry", spec) == {0: [RunStatus.PARTIAL, RunStatus.FAILED]}
        with pytest.raises(DrivelabError, match="repetition 0 attempt 2 is already stored"):
            s.record_run(cid, replace(first, attempt=2), replace=False)


def _version_2_store(path: Path) -> None:
    """A store as drivelab made it at schema version 2: a scenario, two cells (one with
    the write cache off), a run each with a client's figures and a fact."""
    conn = sqlite3.connect(path, isolation_level=None)
    cur = conn.cursor()
    for version in (1, 2):
        for step in store_mod.MIGRATIONS[version]:
            step(cur) if callable(step) else cur.execute(step)
    cur.execute("INSERT INTO schema_version VALUES (2)")
    cur.execute(
        "INSERT INTO scenarios (id, name, created_at, description) VALUES (1, 'old', 0, 'd')"
    )
    for cid, drive, wc in ((1, "ssd", "off"), (2, "hdd", "leave")):
        suffix = " wc off" if wc == "off" else ""
        cur.execute(
            "INSERT INTO cells (id, scenario_id, key, drive, workload, filesystem, placement,"
            " scale, clients, params_json, write_cache, filesystem_json)"
            " VALUES (?, 1, ?, ?, 'tpcb', 'ext4', 'tablespace', 20, 2, ?, ?, ?)",
            (cid, f"{drive} tpcb ext4 tablespace s20 2cl c4{suffix}", drive,
             '{"clients_per_host": 4}', wc, '{"mount_options": "noatime"}'),
        )  # fmt: skip
        cur.execute(
            "INSERT INTO runs (id, cell_id, repetition, attempt, status, recorded_at)"
            " VALUES (?, ?, 0, 1, 'complete', 0)",
            (cid, cid),
        )
        cur.execute(
            "INSERT INTO client_results (run_id, client, status, tps) VALUES (?, 'client1',"
            " 'complete', ?)",
            (cid, 100.0 * cid),
        )
        cur.execute(
            "INSERT INTO facts (scenario_id, run_id, scope, key, value_json)"
            " VALUES (1, ?, 'run', 'postgresql_settings', '{\"shared_buffers\": \"128MB\"}')",
            (cid,),
        )
    conn.close()


def test_a_version_2_store_is_upgraded_and_reads_back_the_same(tmp_path):
    path = tmp_path / "v2.db"
    _version_2_store(path)
    expected = [
        CellSpec("ssd", "tpcb", "ext4", "tablespace", 20, 2, {"clients_per_host": 4},
                 write_cache="off", mount_options="noatime"),
        CellSpec("hdd", "tpcb", "ext4", "tablespace", 20, 2, {"clients_per_host": 4},
                 mount_options="noatime"),
    ]  # fmt: skip
    with Store.open(path) as s:
        assert s.version() == SCHEMA_VERSION == 5
        cells = s.cells(1)
        assert [spec for _, spec in cells] == expected
        assert [spec.key for _, spec in cells] == [
            "ssd tpcb ext4 tablespace s20 2cl c4 wc off",
            "hdd tpcb ext4 tablespace s20 2cl c4",
        ]
        assert all(spec.pg_settings_name is None and spec.pg_settings == {} for _, spec in cells)
        assert [c.tps for c in s.client_results(s.runs(cells[1][0])[0].id)] == [200.0]
        assert [f.value for f in s.facts(1, run_id=1)] == [{"shared_buffers": "128MB"}]
        assert s.repetitions("old", expected[0]) == {0: RunStatus.COMPLETE}
        assert s.scenario("old").description == "d"
        # a cell of a set of PostgreSQL settings is a new cell beside the old ones
        with_set = replace(expected[1], pg_settings_name="fast", pg_settings={"fsync": "off"})
        cid = s.add_cell(1, with_set)
        assert cid not in {c for c, _ in cells}
        assert s.cells(1)[-1] == (cid, with_set)
        assert s.add_cell(1, expected[1]) == cells[1][0]
        # version 5: an old cell's WAL was where its placement kept it; a cell with its
        # WAL on a drive of its own is a new cell, its drive read back
        assert all(spec.wal_drive is None for _, spec in cells)
        wal = replace(expected[1], placement="cluster", wal_drive="nvme")
        assert wal.key == "hdd tpcb ext4 cluster-wal-nvme s20 2cl c4"
        wid = s.add_cell(1, wal)
        assert s.cells(1)[-1] == (wid, wal)
        # a client sweep's count read back as it was stored: its folder's name too
        swept = replace(expected[1], clients_swept=True, drive_state="steady", trim="fstrim",
                        params={"clients_per_host": 4, "threads": 2})  # fmt: skip
        sid = s.add_cell(1, swept)
        assert s.cells(1)[-1] == (sid, swept)
        assert s.cells(1)[-1][1].cell_id.endswith("-c4j2-dssteady-trimfstrim")
    with Store.open(path) as s:  # reopened: nothing to migrate, the same cells
        assert s.version() == 5 and len(s.cells(1)) == 5


#: the tables of a version-3 store, parents first
V3_TABLES = ("scenarios", "cells", "runs", "client_results", "series", "samples", "facts",
             "raw_outputs")  # fmt: skip


def _dump(s: Store) -> dict:
    """Everything the read API gives of a store, the run's controller left out."""
    out = {}
    for info in s.scenarios():
        cells = []
        for cid, spec in s.cells(info.id):
            runs = []
            for run in s.runs(cid):
                runs.append(
                    (replace(run, controller=""), s.client_results(run.id), s.series(run.id),
                     s.raw_outputs(run.id), s.samples(info.id, run_id=run.id),
                     s.facts(info.id, run_id=run.id))
                )  # fmt: skip
            cells.append((cid, spec, runs))
        out[info.name] = (info, cells, s.samples(info.id), s.facts(info.id))
    return out


def _version_3_copy(source, target) -> None:
    """``target``: a version-3 store holding ``source``'s rows, as drivelab 3 left it
    (SQLite: the migrations up to 3; PostgreSQL: its baseline, which is version 3)."""
    with Store.open(source, create=False) as src:
        rows = {t: src._all(f"SELECT * FROM {t}") for t in V3_TABLES}  # noqa: S608
        columns = {
            t: [d[0] for d in src.db.cursor().execute(f"SELECT * FROM {t}").raw.description]  # noqa: S608
            for t in V3_TABLES
        }
    if isinstance(target, Path):
        raw = sqlite3.connect(target, isolation_level=None)
        cur = Cursor(raw.cursor(), "?")
        steps = [s for v in (1, 2, 3) for s in store_mod.MIGRATIONS[v]]
    else:
        import psycopg  # noqa: PLC0415

        raw = psycopg.connect(target, autocommit=True)
        cur = Cursor(raw.cursor(), "%s")
        steps = list(PG_BASELINE)
    for step in steps:
        step(cur) if callable(step) else cur.execute(step)
    cur.execute("INSERT INTO schema_version VALUES (3)")
    for table in V3_TABLES:
        keep = [
            i
            for i, c in enumerate(columns[table])
            if c not in ("controller", "wal_drive", "drive_state", "trim", "clients_swept")
        ]
        names = ", ".join(columns[table][i] for i in keep)
        cur.executemany(
            f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(keep))})",  # noqa: S608
            [[row[i] for i in keep] for row in rows[table]],
        )
        if not isinstance(target, Path) and "id" in columns[table] and rows[table]:
            setval = f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), max(id)) FROM {table}"  # noqa: S608
            cur.execute(setval)
    runs = [d[0] for d in cur.execute("SELECT * FROM runs").raw.description]
    assert cur.execute("SELECT version FROM schema_version").fetchall() == [(3,)]
    assert "controller" not in runs and len(cur.execute("SELECT * FROM runs").fetchall()) == 6
    raw.close()


def test_a_version_3_store_is_upgraded_and_reads_back_the_same(results_store, tmp_path, request):
    """The realistic store as schema version 3 held it (no controller, no claims), on
    either backend: opened by this drivelab it is version 5, every read gives what it
    gave, its runs' controller is '' (not known), and a run recorded now has this host."""
    if isinstance(results_store, Path):
        v3 = tmp_path / "v3.db"
    else:
        v3 = request.getfixturevalue("pg_cluster").new_database()
    _version_3_copy(results_store, v3)
    with Store.open(results_store, create=False) as original:
        expected = _dump(original)
    with Store.open(v3, controller="ctl-b") as s:
        assert s.version() == SCHEMA_VERSION == 5
        assert _dump(s) == expected
        cells = s.cells(s.scenario(SCENARIO).id)
        assert {r.controller for cid, _ in cells for r in s.runs(cid)} == {""}
        new = s.record_run(cells[0][0], _run(7, ClientResult("client1", tps=1.0)))
        assert s.runs(cells[0][0])[-1].id == new
        assert s.runs(cells[0][0])[-1].controller == "ctl-b"
    with Store.open(v3) as s:  # reopened: nothing to migrate
        assert s.version() == 5 and _count(v3, "schema_version") == 1


def test_samples_by_prefix_are_exact_on_both_backends(store_target):
    """A metric prefix is compared as given: case counts and '_' or '%' are characters."""
    from collector.records import Sample  # noqa: PLC0415

    with Store.open(store_target) as s:
        sid = s.add_scenario("p")
        names = ["drivelab_fio_iops", "DRIVELAB_fio_iops", "drivelabXfio_iops", "drivelab_%x"]
        s.add_samples([Sample(n, 1.0, "ops", {}) for n in names], sid)
        assert [x.metric for x in s.samples(sid, metric_prefix="drivelab_fio")] == [names[0]]
        assert [x.metric for x in s.samples(sid, metric_prefix="drivelab_%")] == [names[3]]
        assert len(s.samples(sid)) == 4
