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
