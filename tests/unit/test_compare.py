"""`drivelab compare A B`: two drives of one scenario, or two scenarios."""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import replace

import pytest

from collector.cli import main as cli
from collector.errors import DrivelabError
from collector.records import RunRecord
from collector.report import compare
from collector.store import Store
from tests.conftest import DATA


def scaled(s: Store, run, f: float) -> RunRecord:
    """A stored run again, its tps and transactions times ``f``."""
    return RunRecord(
        repetition=run.repetition,
        status=run.status,
        reason=run.reason,
        clients=tuple(replace(c, tps=c.tps * f) for c in s.client_results(run.id)),
        series=tuple(replace(p, transactions=p.transactions * f) for p in s.series(run.id)),
    )


@pytest.fixture(scope="module")
def two_scenarios(results_db, tmp_path_factory):
    """The realistic store plus a second scenario: the same cells, ssd 2 % faster."""
    path = tmp_path_factory.mktemp("cmp") / "drivelab.db"
    shutil.copy(results_db, path)
    with Store.open(path) as s:
        old = s.scenario("two-drives")
        sid = s.add_scenario("two-drives-tuned", baseline_drive="hdd")
        for cid, spec in s.cells(old.id):
            new_cid = s.add_cell(sid, spec)
            for run in s.runs(cid):
                f = 1.02 if spec.drive == "ssd" else 1.0
                s.record_run(new_cid, scaled(s, run, f))
    return path


def test_two_drives_of_one_scenario(results_db):
    with Store.open(results_db, create=False) as s:
        cmp = compare.compare(s, "hdd", "ssd")
    assert (cmp.baseline_label, cmp.contender_label) == ("two-drives: hdd", "two-drives: ssd")
    (pair,) = cmp.pairs
    assert pair.what == "tpcb s2 2cl"
    w = pair.test
    assert (w.baseline.n, w.contender.n) == (2, 3)  # the partial hdd run is not in
    assert w.diff_pct == pytest.approx((w.contender.mean / w.baseline.mean - 1) * 100)
    assert w.diff_pct == pytest.approx(2944, abs=1)
    assert w.significant is True and w.p_value < 0.01
    assert pair.ratio.ratio == pytest.approx(30.44, abs=0.01)


def test_two_scenarios(two_scenarios, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(["compare", "two-drives", "two-drives-tuned", "--db", str(two_scenarios)]) == 0
    out = capsys.readouterr().out
    assert "baseline two-drives  vs  contender two-drives-tuned" in out
    ssd = next(line for line in out.splitlines() if "ssd tpcb" in line)
    hdd = next(line for line in out.splitlines() if "hdd tpcb" in line)
    assert "+2.0%" in ssd and "+0.0%" in hdd
    assert "│ no " in ssd  # 2 % with this spread over 3 runs is not significant


def test_compare_json(two_scenarios, tmp_path, capsys):
    out = tmp_path / "cmp.json"
    assert (
        cli.main(
            [
                "compare",
                "hdd",
                "ssd",
                "--scenario",
                "two-drives-tuned",
                "--db",
                str(two_scenarios),
                "--json",
                str(out),
            ]
        )
        == 0
    )
    doc = json.loads(out.read_text())
    assert doc["baseline"] == "two-drives-tuned: hdd"
    (pair,) = doc["pairs"]
    assert pair["significant"] is True and pair["ratio"] == pytest.approx(30.44 * 1.02, abs=0.02)


def test_compare_errors(two_scenarios):
    with Store.open(two_scenarios, create=False) as s:
        with pytest.raises(DrivelabError, match="scenario 'two-drives' has no drive 'floppy'"):
            compare.compare(s, "hdd", "floppy", scenario="two-drives")
        with pytest.raises(DrivelabError, match="no scenario 'nope'"):
            compare.compare(s, "hdd", "ssd", scenario="nope")


# --------------------------------------------------------------------------- environments

LAB_ENV = json.loads((DATA / "environment" / "lab-nvme.json").read_text(encoding="utf-8"))


def _with(env: dict, name: str, value: str) -> dict:
    out = copy.deepcopy(env)
    out["postgresql"]["settings"][name] = {
        "setting": value, "unit": None, "source": "configuration file", "pending_restart": False,
    }  # fmt: skip
    return out


@pytest.fixture(scope="module")
def with_environments(results_db, tmp_path_factory):
    """The realistic store, its runs carrying the lab's captured environment: hdd's with
    wal_sync_method fdatasync, ssd's with open_datasync; hdd's partial run (which the
    comparison leaves out) with a kernel of its own."""
    path = tmp_path_factory.mktemp("cmp-env") / "drivelab.db"
    shutil.copy(results_db, path)
    with Store.open(path) as s:
        sid = s.scenario("two-drives").id
        for cid, spec in s.cells(sid):
            env = _with(
                LAB_ENV, "wal_sync_method", {"hdd": "fdatasync"}.get(spec.drive, "open_datasync")
            )
            for run in s.runs(cid):
                if run.status.value != "complete":
                    env = copy.deepcopy(env)
                    env["kernel"]["release"] = "6.1.0-partial"
                s.add_facts(sid, {"environment": env}, scope="run", run_id=run.id)
    return path


def test_compare_lists_the_environment_differences_first(with_environments, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(["compare", "hdd", "ssd", "--db", str(with_environments)]) == 0
    out = capsys.readouterr().out
    assert out.index("environment differences") < out.index("baseline two-drives: hdd")
    (row,) = [line for line in out.splitlines() if "wal_sync_method" in line]
    assert row.split("│")[1:4] == [
        " postgresql.settings.wal_sync_method ", " fdatasync ", " open_datasync ",
    ]  # fmt: skip
    assert "6.1.0-partial" not in out  # a partial run's environment is not compared
    assert "loop" not in out  # the device names differ by construction: not listed


def test_compare_json_carries_the_environment_differences(with_environments, tmp_path):
    out = tmp_path / "cmp.json"
    assert (
        cli.main(["compare", "hdd", "ssd", "--db", str(with_environments), "--json", str(out)]) == 0
    )
    env = json.loads(out.read_text())["environment"]
    assert env == {
        "pairs_known": 1,
        "differences": [
            {
                "setting": "postgresql.settings.wal_sync_method",
                "baseline": "fdatasync",
                "contender": "open_datasync",
                "tests": [],
            }
        ],
    }


def test_compare_says_when_environments_agree_or_are_unknown(results_db, tmp_path, capsys):
    with Store.open(results_db, create=False) as s:
        unknown = compare.compare(s, "hdd", "ssd")
    assert compare.environment_table(unknown).startswith("environments: not recorded")
    path = tmp_path / "drivelab.db"
    shutil.copy(results_db, path)
    with Store.open(path) as s:
        sid = s.scenario("two-drives").id
        for cid, _ in s.cells(sid):
            for run in s.runs(cid):
                s.add_facts(sid, {"environment": LAB_ENV}, scope="run", run_id=run.id)
        same = compare.compare(s, "hdd", "ssd")
    assert (same.environment, same.environment_pairs) == ((), 1)
    compare.publish(same)
    assert capsys.readouterr().out.startswith("environments: no difference\n")


# --------------------------------------------------------------------------- setting sets


@pytest.fixture(scope="module")
def two_sets(results_db, tmp_path_factory):
    """A scenario of one drive and two PostgreSQL setting sets (wal_sync_method
    fdatasync, open_datasync), its runs the realistic store's ssd runs, each carrying the
    lab's captured environment with its set's wal_sync_method."""
    path = tmp_path_factory.mktemp("cmp-sets") / "drivelab.db"
    shutil.copy(results_db, path)
    with Store.open(path) as s:
        old = s.scenario("two-drives")
        ((cid, spec),) = [(c, sp) for c, sp in s.cells(old.id) if sp.drive == "ssd"]
        sid = s.add_scenario("wal-sync", baseline_drive="ssd")
        for name, f in (("fdatasync", 1.0), ("open_datasync", 0.9)):
            new_cid = s.add_cell(
                sid, replace(spec, pg_settings_name=name, pg_settings={"wal_sync_method": name})
            )
            for run in s.runs(cid):
                run_id = s.record_run(new_cid, scaled(s, run, f))
                env = _with(LAB_ENV, "wal_sync_method", name)
                s.add_facts(sid, {"environment": env}, scope="run", run_id=run_id)
    return path


def test_two_setting_sets_of_one_scenario_differ_in_their_setting(two_sets, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    with Store.open(two_sets, create=False) as s:
        cmp = compare.compare(s, "fdatasync", "open_datasync")
    assert (cmp.baseline_label, cmp.contender_label) == (
        "wal-sync: pg fdatasync", "wal-sync: pg open_datasync",
    )  # fmt: skip
    (pair,) = cmp.pairs
    assert pair.what == "ssd tpcb s2 2cl"  # matched without the set's name
    assert pair.test.diff_pct == pytest.approx(-10, abs=0.01)
    assert [(d.setting, d.baseline, d.contender) for d in cmp.environment] == [
        ("postgresql.settings.wal_sync_method", "fdatasync", "open_datasync")
    ]
    assert cli.main(["compare", "fdatasync", "open_datasync", "--db", str(two_sets)]) == 0
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if "wal_sync_method" in line]
    assert out.index(row) < out.index("baseline wal-sync: pg fdatasync")


def test_a_setting_set_the_scenario_lacks_is_named(two_sets):
    with (
        Store.open(two_sets, create=False) as s,
        pytest.raises(
            DrivelabError,
            match=r"scenario 'wal-sync' has no setting set 'fsync' \(sets: fdatasync,",
        ),
    ):
        compare.compare(s, "fdatasync", "fsync", scenario="wal-sync")
