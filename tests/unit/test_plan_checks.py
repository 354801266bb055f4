"""The plan catches what would fail hours later, before any host is touched: datasets
larger than their drive's declared size, and a drive name that is not the lab's. With an
inventory every size is the inventory's; without one, the lab size (``--size lab``) is
held to the local lab's drives and another size only noted against them (a real lab's
drives are its inventory's)."""

from __future__ import annotations

import json
import subprocess

import pytest

from collector import build
from collector.cli import main as cli
from collector.paths import REPO
from collector.records import CellSpec, RunRecord, RunStatus
from collector.run import calibrate
from collector.store import Store

INVENTORY = REPO / "tests" / "data" / "inventory" / "hosts.yml"
SEED = REPO / "scenarios" / "seed-two-clients.yml"


@pytest.fixture
def no_host_runs(monkeypatch):
    """A dry run runs no playbook and no SSH: any process but ansible-inventory (which
    reads the inventory file) fails the test."""
    real = subprocess.run

    def only_inventory(argv, *a, **kw):
        if "ansible-inventory" not in str(argv[0]):
            raise AssertionError(f"a dry run ran {argv}")
        return real(argv, *a, **kw)

    monkeypatch.setattr(subprocess, "run", only_inventory)


def test_the_full_size_seed_on_4_gib_drives_is_refused_in_one_line(no_host_runs, capsys):
    rc = cli.main(["run", str(SEED), "-i", str(INVENTORY), "--dry-run"])
    out, err = capsys.readouterr()
    assert rc == 2, out + err
    assert err == (
        f"drivelab: {SEED}: plan: dbhost: drive nvme: nvme-ext4-cluster-s1000-h2-tpcb needs"
        " about 29.2 GiB of datasets (1.5 x that with the runs' growth and the WAL), the"
        " drive is 4.0 GiB: use a smaller scale or fewer client hosts (and 3 more drives):"
        " nothing was touched\n"
    )
    assert "about" not in out  # no plan printed: refused before it


def test_its_lab_size_fits_and_is_planned(no_host_runs, capsys):
    assert cli.main(["run", str(SEED), "-i", str(INVENTORY), "--dry-run", "--size", "lab"]) == 0
    assert "cells" in capsys.readouterr().out


def test_without_an_inventory_a_lab_size_drive_typo_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("collector.cli.runcmd.LOCAL_INVENTORY", tmp_path / "no-lab")
    path = tmp_path / "typo.yml"
    path.write_text(
        SEED.read_text(encoding="utf-8").replace("drives: [", "drives: [nvmee, ", 1),
        encoding="utf-8",
    )
    assert "nvmee" in path.read_text(encoding="utf-8")
    assert cli.main(["run", str(path), "--dry-run", "--size", "lab"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"drivelab: {path}: drives[0]: 'nvmee' is not a drive of dbhost")


def test_without_an_inventory_the_full_size_is_noted_not_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("collector.cli.runcmd.LOCAL_INVENTORY", tmp_path / "no-lab")
    assert cli.main(["run", str(SEED), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "note: not the local lab's (its drives):" in out and "29.2 GiB" in out


def test_the_plan_as_json_is_the_document_alone_on_stdout(no_host_runs, capsys):
    argv = ["run", str(SEED), "-i", str(INVENTORY), "--dry-run", "--size", "lab", "--json"]
    assert cli.main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == build.SCHEMA_VERSION and doc["drivelab"] == build.info()
    assert doc["scenario"] == "seed-two-clients" and doc["size"] == "lab"
    assert [c["drive"] for c in doc["cells"]] == ["nvme", "ssd", "hdd10k", "hdd7200"]
    assert doc["cells"][0]["cell"] == "nvme-ext4-cluster-s34-h2-tpcb"
    assert doc["estimated_seconds"] == pytest.approx(
        sum(c["estimated_seconds"] for c in doc["cells"])
    )
    assert doc["estimate_is"] == "about" and doc["hosts_by_count"] is False
    # --json without --dry-run: one line, nothing run
    assert cli.main(["run", str(SEED), "-i", str(INVENTORY), "--json"]) == 2
    assert "--json is the plan's form" in capsys.readouterr().err


def test_the_estimate_is_calibrated_on_the_stores_runs(tmp_path, capsys):
    """Stored complete runs of 15 s that took 19, 20 and 27 s from run folder to outputs:
    the plan's overhead per repetition is their median beyond pgbench's, 5 s (not the
    25 s guessed without a store), said with how many runs it rests on; a partial run
    and a run without a known duration are not counted."""
    db = tmp_path / "drivelab.db"
    with Store.open(db) as store:
        sid = store.add_scenario("earlier")
        timed = store.add_cell(
            sid, CellSpec(drive="nvme", clients=2, scale=2, params={"duration": 15})
        )
        untimed = store.add_cell(sid, CellSpec(drive="ssd", clients=2, scale=2))
        for rep, took, status in ((0, 19, "complete"), (1, 20, "complete"), (2, 27, "complete"),
                                  (3, 90, "partial")):  # fmt: skip
            record = RunRecord(repetition=rep, status=RunStatus(status), reason=None, clients=(),
                               started_at=1000.0 * rep, ended_at=1000.0 * rep + took)  # fmt: skip
            store.record_run(timed, record)
            store.record_run(untimed, record)
    assert calibrate.repetition_overhead(db) == (5.0, 3)
    assert calibrate.repetition_overhead(tmp_path / "none.db") is None
    assert not (tmp_path / "none.db").exists()  # a dry run writes nothing
    argv = ["run", str(SEED), "-i", str(INVENTORY), "--dry-run", "--size", "lab", "--db", str(db)]
    assert cli.main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["overhead_per_repetition_seconds"] == 5.0 and doc["calibrated_on_runs"] == 3
    # 4 cells x 2 repetitions x (15 s + 5 s) + their inits
    inits = sum(c["estimated_seconds"] - 2 * 20 for c in doc["cells"])
    assert doc["estimated_seconds"] == pytest.approx(4 * 2 * 20 + inits)
    assert cli.main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "a repetition beyond pgbench's time: 5.0 s (median of 3 stored runs)" in out
