"""`drivelab check` and `drivelab drives` on the namespace lab (the lab as built, in a real
lab's shape, passes the check in tests/lab/test_containers.py): a copy of its inventory
with one client unreachable, a candidate drive that does not exist and another whose
serial is wrong gets one line per problem, naming the host, exit 1, and nothing on any
drive changes; `drivelab drives` lists the DB host's devices
with the gate's verdict, the lab's drives as its inventory names them."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from collector import documents
from tests.lab.conftest import drivelab, lab_inventory

pytestmark = pytest.mark.lab

DATA = Path(__file__).resolve().parents[1] / "data" / "check"


def signatures(devices: list[str]) -> dict[str, str]:
    """What blkid finds on each device (its filesystem signature), to see nothing changed."""
    out = {}
    for dev in devices:
        probe = subprocess.run(
            ["blkid", "-p", "-o", "export", dev], capture_output=True, text=True, check=False
        )
        out[dev] = probe.stdout
    return out


def test_a_broken_inventory_is_one_line_per_problem_and_touches_nothing(lab2, tmp_path):
    inv = copy.deepcopy(lab_inventory())
    db = inv["all"]["children"]["db"]["hosts"]["dbhost"]
    drives = db["candidate_drives"]
    wrong = dict(drives[0], name="wrongserial", serial="NOSUCHSERIAL")
    # the same device under a second name would be refused as listed twice: another one
    wrong["device"] = drives[1]["device"]
    drives[:] = [drives[0], wrong, {**drives[2], "name": "ghost",
                                    "device": "/dev/disk/by-id/drivelab-missing"}]  # fmt: skip
    drives[1].pop("backing_file", None)
    # an address of the lab's subnet nobody has
    inv["all"]["children"]["clients"]["hosts"]["client2"]["ansible_host"] = "10.213.0.250"
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inv), encoding="utf-8")
    devices = [d["device"] for d in lab2["drives"]]
    before = signatures(devices)
    proc = drivelab("check", "--inventory", str(tmp_path), check=False, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    problems = lines[:-1]
    assert lines[-1].startswith("check: 3 hosts, 3 problems"), lines
    assert any(p.startswith("client2: not reached over SSH as root: ") for p in problems)
    assert any(p.startswith("dbhost: drive ghost (/dev/disk/by-id/drivelab-missing): does not")
               for p in problems), problems  # fmt: skip
    assert any(p.startswith("dbhost: drive wrongserial (") and "NOSUCHSERIAL" in p
               for p in problems), problems  # fmt: skip
    assert signatures(devices) == before
    # the answers the unit tests read (tests/data/check/lab-broken.json) are of this kind
    broken = json.loads((DATA / "lab-broken.json").read_text())
    assert broken["client2"]["ping"].get("unreachable") is True


def test_drives_lists_the_lab_drives_with_the_gates_verdict(lab2):
    doc = json.loads(drivelab("drives", "--json").stdout)
    documents.validate("drives", doc)
    assert doc["host"] == "dbhost"
    listed = {d["listed_as"]: d for d in doc["devices"] if d["listed_as"]}
    assert set(listed) == {d["name"] for d in lab2["drives"]}
    for name, d in listed.items():
        assert d["would_format"] is True, (name, d["refusal"])
        assert d["size_bytes"] > 0 and d["kname"].startswith("loop")
    # the machine's own root device is never one drivelab would format
    root = subprocess.run(["findmnt", "-n", "-o", "SOURCE", "/"], capture_output=True,
                          text=True, check=False).stdout.strip()  # fmt: skip
    others = [d for d in doc["devices"] if not d["listed_as"]]
    assert all(not d["would_format"] for d in others if d["path"] == root or
               d["kname"] in root), others  # fmt: skip
    # what it prints and its --yaml are rendered from this document (tests/unit/test_check.py)
