"""One cell identity from the scenario to the report: cells that differ only in write
cache, or only in their set of PostgreSQL settings, are two cells with their own
repetitions; the scenario's description and baseline are stored and read back; a store
made before the identity carried the write cache is brought up to date."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest
from rich.console import Console

from collector import scenario as sc
from collector import store as store_mod
from collector.errors import DrivelabError
from collector.records import RunStatus
from collector.report import html, load, terminal
from collector.run import conductor as scenariorun
from collector.run.storing import record_run_dir
from collector.runfolder import RunMeta, run_meta
from collector.store import Store
from tests.unit.test_gather import make_run, two

REPO = Path(__file__).resolve().parents[2]
INVENTORY = sc.load_inventory(REPO / "tests" / "data" / "inventory")
SCENARIO = """\
name: wc-study
description: seed 003, write cache on and off
baseline: ssd
drives: [ssd]
workload: {scale: 20, clients_per_host: 4, threads: 2, duration: 15}
hosts: 2
write_cache: [on, off]
repetitions: 2
"""


def _scenario(tmp_path: Path) -> sc.Scenario:
    path = tmp_path / "wc-study.yml"
    path.write_text(SCENARIO, encoding="utf-8")
    return sc.load(path)


def _cells(tmp_path: Path) -> list[sc.PlannedCell]:
    return sc.expand(_scenario(tmp_path), INVENTORY)


def _store_run(tmp_path: Path, store: Store, planned: sc.PlannedCell, rep: int) -> None:
    """A run folder with real pgbench outputs, its run.json as the runner writes it."""
    scen = _scenario(tmp_path)
    run_dir = make_run(tmp_path / f"{planned.cell_id}-{rep}", two(), rep=rep)
    info = {"description": scen.description, "baseline": scen.baseline}
    meta = run_meta(planned.cell, rep, list(planned.cell.hosts), "dbhost", info)
    assert meta.client_hosts == ("client1", "client2")  # make_run's client folders
    meta.write(run_dir)
    record_run_dir(store, run_dir)


def test_write_cache_variants_are_two_cells_with_their_own_repetitions(tmp_path):
    cells = _cells(tmp_path)
    assert [c.cell_id for c in cells] == [
        "ssd-ext4-tablespace-s20-h2-tpcb-wcon",
        "ssd-ext4-tablespace-s20-h2-tpcb-wcoff",
    ]
    with Store.open(tmp_path / "d.db") as store:
        for planned in cells:
            for rep in (0, 1):
                _store_run(tmp_path, store, planned, rep)
        sid = store.scenario("wc-study").id
        stored = store.cells(sid)
        assert [spec.write_cache for _, spec in stored] == ["on", "off"]
        assert [spec.cell_id for _, spec in stored] == [c.cell_id for c in cells]
        for (cid, spec), planned in zip(stored, cells, strict=True):
            assert spec == planned.cell.spec  # run.json -> gather -> store: the same identity
            assert [r.repetition for r in store.runs(cid)] == [0, 1]
            assert store.repetitions("wc-study", planned.cell.spec) == {
                0: RunStatus.COMPLETE,
                1: RunStatus.COMPLETE,
            }
        view = load(store, "wc-study")
    assert sorted(cv.test for cv in view.cells) == [
        "tpcb ext4 tablespace s20 2cl c4 j2 T15 wc off",
        "tpcb ext4 tablespace s20 2cl c4 j2 T15 wc on",
    ]
    assert all(len(cv.stats.runs) == 2 for cv in view.cells)


def test_scenario_description_and_baseline_are_stored_and_read_back(tmp_path):
    with Store.open(tmp_path / "d.db") as store:
        _store_run(tmp_path, store, _cells(tmp_path)[0], 0)
        info = store.scenario("wc-study")
        assert info.description == "seed 003, write cache on and off"
        assert info.baseline_drive == "ssd"
        view = load(store, "wc-study")
    assert view.info.description == info.description
    console = Console(file=io.StringIO(), width=200)
    terminal.publish([view], console)
    assert "wc-study: seed 003, write cache on and off" in console.file.getvalue()
    assert "<p class=desc>seed 003, write cache on and off</p>" in html.publish(
        [view], tmp_path / "r.html"
    ).read_text(encoding="utf-8")


def test_a_version_1_store_gets_the_write_cache_of_its_cells(tmp_path):
    """A version-1 store kept a write-cache cell under the key of its drive and test,
    without the state; its run folder's name (the cell_id fact) still says it."""
    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in store_mod.MIGRATIONS[1]:
        conn.execute(statement)
    conn.execute("INSERT INTO schema_version VALUES (1)")
    conn.execute("INSERT INTO scenarios (id, name, created_at) VALUES (1, 'old', 0)")
    for cid, drive, suffix in ((1, "ssd", "-wcoff"), (2, "hdd", "")):
        conn.execute(
            "INSERT INTO cells (id, scenario_id, key, drive, workload, filesystem, placement,"
            " scale, clients, params_json) VALUES (?, 1, ?, ?, 'tpcb', 'ext4', 'tablespace',"
            " 20, 2, ?)",
            (cid, f"{drive} tpcb ext4 tablespace s20 2cl c4", drive, '{"clients_per_host": 4}'),
        )
        conn.execute(
            "INSERT INTO runs (id, cell_id, repetition, status, recorded_at)"
            " VALUES (?, ?, 0, 'complete', 0)",
            (cid, cid),
        )
        conn.execute(
            "INSERT INTO facts (scenario_id, run_id, scope, key, value_json)"
            " VALUES (1, ?, 'run', 'cell_id', ?)",
            (cid, json.dumps(f"x-ext4-tablespace-s20-h2-tpcb{suffix}")),
        )
        conn.execute(
            "INSERT INTO client_results (run_id, client, status, tps) VALUES (?, 'client1',"
            " 'complete', ?)",
            (cid, 100.0 * cid),
        )
    conn.close()
    with Store.open(path) as store:
        assert store.version() == store_mod.SCHEMA_VERSION
        (c1, wc), (c2, plain) = store.cells(1)
        assert (wc.write_cache, plain.write_cache) == ("off", "leave")
        assert (wc.key, plain.key) == (
            "ssd tpcb ext4 tablespace s20 2cl c4 wc off",
            "hdd tpcb ext4 tablespace s20 2cl c4",
        )
        # the runs table was made anew (attempts): every run and what refers to it kept
        assert [(r.repetition, r.attempt) for r in store.runs(c1)] == [(0, 1)]
        assert [r.repetition for r in store.runs(c2)] == [0]
        assert [c.tps for c in store.client_results(store.runs(c2)[0].id)] == [200.0]
        assert store.conn.execute("PRAGMA foreign_keys").fetchone() == (1,)
        assert store.repetitions("old", wc) == {0: RunStatus.COMPLETE}
        assert store.scenario("old").description == ""


SETS = """\
name: wal-sync
description: fdatasync against open_datasync
baseline: ssd
drives: [ssd]
workload: {scale: 20, clients_per_host: 4, threads: 2, duration: 15}
hosts: 2
repetitions: 1
postgresql:
  settings: {checkpoint_timeout: 5min}
  sets:
    fdatasync: {wal_sync_method: fdatasync}
    open_datasync: {wal_sync_method: open_datasync}
"""


def _sets_scenario(tmp_path: Path, text: str = SETS) -> sc.Scenario:
    path = tmp_path / "wal-sync.yml"
    path.write_text(text, encoding="utf-8")
    return sc.load(path)


def _store_set_run(tmp_path: Path, store: Store, planned: sc.PlannedCell) -> Path:
    """A run folder as the runner and the database stage leave it: run.json with the
    cell, database.json with the cell's settings as the server reported them."""
    scen = _sets_scenario(tmp_path)
    database = {
        "sizes": {"drivelab_client1": 330000000, "drivelab_client2": 330000000},
        "postgresql": {
            "version": "15.18",
            "settings": {"shared_buffers": "128MB"},
            "settings_applied": dict(planned.cell.pg_settings),
        },
    }
    run_dir = make_run(tmp_path / planned.cell_id, two(), database=database)
    info = {"description": scen.description, "baseline": scen.baseline}
    run_meta(planned.cell, 0, list(planned.cell.hosts), "dbhost", info).write(run_dir)
    record_run_dir(store, run_dir)
    return run_dir


def test_cells_that_differ_only_by_their_postgresql_set_are_two_cells(tmp_path):
    cells = sc.expand(_sets_scenario(tmp_path), INVENTORY)
    ids = [c.cell_id for c in cells]
    assert ids == [
        "ssd-ext4-tablespace-s20-h2-tpcb-pgfdatasync",
        "ssd-ext4-tablespace-s20-h2-tpcb-pgopen_datasync",
    ]
    # two run folders
    folders = {c.cell.cell_dir(tmp_path / "results") for c in cells}
    assert len(folders) == 2 and {f.name for f in folders} == set(ids)
    with Store.open(tmp_path / "d.db") as store:
        run_dirs = [_store_set_run(tmp_path, store, planned) for planned in cells]
        # run.json carries the set and the settings, and reads them back
        for run_dir, planned in zip(run_dirs, cells, strict=True):
            meta = RunMeta.read(run_dir)
            assert meta.cell == planned.cell.spec
            assert dict(meta.cell.pg_settings)["wal_sync_method"] == planned.cell.pg_settings_name
        sid = store.scenario("wal-sync").id
        stored = store.cells(sid)
        assert [spec for _, spec in stored] == [c.cell.spec for c in cells]  # two store cells
        assert [dict(spec.pg_settings) for _, spec in stored] == [
            {"checkpoint_timeout": "5min", "wal_sync_method": "fdatasync"},
            {"checkpoint_timeout": "5min", "wal_sync_method": "open_datasync"},
        ]
        # each run records the settings as the server reported them
        applied = [
            next(
                f.value
                for f in store.facts(sid, run_id=store.runs(cid)[0].id)
                if f.key == "postgresql_settings_applied"
            )
            for cid, _ in stored
        ]
        assert [a["wal_sync_method"] for a in applied] == ["fdatasync", "open_datasync"]
        view = load(store, "wal-sync")
    # two report rows
    assert sorted(cv.test for cv in view.cells) == [
        "tpcb ext4 tablespace s20 2cl c4 j2 T15 pg fdatasync",
        "tpcb ext4 tablespace s20 2cl c4 j2 T15 pg open_datasync",
    ]
    console = Console(file=io.StringIO(), width=200)
    terminal.publish([view], console)
    out = console.file.getvalue()
    assert "pg fdatasync" in out and "pg open_datasync" in out


def _run_options(tmp_path: Path) -> scenariorun.RunOptions:
    return scenariorun.RunOptions(inventory=tmp_path / "hosts.yml", db=tmp_path / "d.db")


def test_a_cell_stored_with_other_settings_is_refused_before_anything_runs(tmp_path):
    """The file edited since: the same cell (same set name, or none) with other settings
    would mix two configurations under one store key."""
    first = sc.expand(_sets_scenario(tmp_path), INVENTORY)
    with Store.open(tmp_path / "d.db") as store:
        _store_set_run(tmp_path, store, first[0])
    same = scenariorun.ScenarioRun(
        _sets_scenario(tmp_path), first, INVENTORY, _run_options(tmp_path), Console()
    )
    same.check_stored_settings()  # the same settings: resumed, not refused
    edited = _sets_scenario(tmp_path, SETS.replace("5min", "30s"))
    run = scenariorun.ScenarioRun(
        edited, sc.expand(edited, INVENTORY), INVENTORY, _run_options(tmp_path), Console()
    )
    with pytest.raises(DrivelabError) as info:
        run.check_stored_settings()
    assert str(info.value) == (
        f"{tmp_path / 'wal-sync.yml'}: postgresql: ssd-ext4-tablespace-s20-h2-tpcb-pgfdatasync"
        f" is stored in {tmp_path / 'd.db'} with other PostgreSQL settings"
        " (checkpoint_timeout=5min, wal_sync_method=fdatasync; now checkpoint_timeout=30s,"
        " wal_sync_method=fdatasync): give the new ones a set of their own, or use another"
        " scenario name or --db"
    )


VARIANTS = """\
name: xfs-variants
drives: [ssd]
filesystems:
  - {fs: xfs, name: xfs-su128, mkfs_options: [-d, "sunit=128,swidth=4096"], mount_options: "noatime,logbufs=8"}
  - {fs: xfs}
workload: {scale: 20, clients_per_host: [2, 4], threads: 2, duration: 15, protocol: prepared}
hosts: 2
repetitions: 1
"""


def test_variants_counts_and_protocol_go_from_the_scenario_to_the_report(tmp_path):
    """Two XFS variants x two client counts with -M prepared: four cells, each through
    run.json, gather and the store with its variant's name, its counts and -M in its
    names; the report tells the variants apart."""
    path = tmp_path / "xfs-variants.yml"
    path.write_text(VARIANTS, encoding="utf-8")
    cells = sc.expand(sc.load(path), INVENTORY)
    assert [c.cell_id for c in cells] == [
        f"ssd-{fs}-tablespace-s20-h2-tpcb-Mprepared-c{c}j2"
        for fs in ("xfs-su128", "xfs") for c in (2, 4)
    ]  # fmt: skip
    with Store.open(tmp_path / "d.db") as store:
        for planned in cells:
            run_dir = make_run(tmp_path / planned.cell_id, two(), rep=0)
            run_meta(planned.cell, 0, ["client1", "client2"], "dbhost").write(run_dir)
            assert RunMeta.read(run_dir).cell == planned.cell.spec  # run.json, read back
            record_run_dir(store, run_dir)
        sid = store.scenario("xfs-variants").id
        stored = [spec for _, spec in store.cells(sid)]
        view = load(store, "xfs-variants")
    assert [(s.key, s.filesystem, s.filesystem_name) for s in stored] == [
        (c.cell.spec.key, "xfs", c.cell.filesystem_name) for c in cells
    ]
    assert {cv.test for cv in view.cells} == {
        f"tpcb {fs} tablespace s20 2cl c{c} j2 T15 Mprepared"
        for fs in ("xfs-su128", "xfs") for c in (2, 4)
    }  # fmt: skip
