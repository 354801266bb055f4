"""The lab role's action ``lab_caps`` (its entry point ``caps``, run in the controller's
own process) through a real ansible-playbook, on a temporary tree laid out like cgroup v1
(memory and blkio): the caps are written as their classes say, a second run changes
nothing, a lift writes 0 for every capped device, check mode writes nothing, and a group
that is not the lab's own is refused. On the lab the same entry point is exercised by
tests/lab (the caps held by the drive classes, lifted for init, put back)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DEV = os.stat("/dev/null").st_rdev
NULL = f"{os.major(DEV)}:{os.minor(DEV)}"


def tree(tmp_path: Path) -> Path:
    root = tmp_path / "cgroup"
    for c in ("memory", "blkio"):
        (root / c / "drivelab-t").mkdir(parents=True)
        (root / c / "cgroup.procs").write_text("")
    for d in ("read", "write"):
        (root / "blkio" / "drivelab-t" / f"blkio.throttle.{d}_iops_device").write_text("")
    return root


def caps(tmp_path: Path, root: Path, throttle: list, *, name="drivelab-t", check=False,
         cliff: str = "") -> dict:  # fmt: skip
    task = {"name": "Caps", "lab_caps": {
        "name": name, "root": str(root), "hierarchy": "v1", "throttle": throttle}}  # fmt: skip
    if cliff:
        task["lab_caps"]["cliff"] = cliff
    book = tmp_path / "caps.yml"
    book.write_text(
        yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [task]}])
    )
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_ACTION_PLUGINS=str(REPO / "roles/lab/action_plugins"),
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
    )
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(book)]
    proc = subprocess.run(
        argv + (["--check"] if check else []),
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    doc, _ = json.JSONDecoder().raw_decode(proc.stdout, proc.stdout.index("{"))
    return doc["plays"][0]["tasks"][0]["hosts"]["localhost"]


def files(root: Path) -> list[str]:
    blkio = root / "blkio" / "drivelab-t"
    return [(blkio / f"blkio.throttle.{d}_iops_device").read_text() for d in ("read", "write")]


def test_caps_set_kept_lifted_and_put_back(tmp_path):
    root = tree(tmp_path)
    capped = [{"device": "/dev/null", "iops_cap": 120}, {"device": "/dev/zero", "iops_cap": 0}]
    res = caps(tmp_path, root, capped)
    assert res["changed"] is True and not res.get("failed"), res
    assert res["hierarchy"] == {"kind": "v1", "root": str(root)}
    assert files(root) == [f"{NULL} 120", f"{NULL} 120"]
    assert caps(tmp_path, root, capped)["changed"] is False
    res = caps(tmp_path, root, [])  # lifted
    assert res["changed"] is True and files(root) == [f"{NULL} 0", f"{NULL} 0"]
    assert caps(tmp_path, root, [])["changed"] is False
    res = caps(tmp_path, root, capped, check=True)
    assert res["changed"] is True and files(root) == [f"{NULL} 0", f"{NULL} 0"], res
    assert caps(tmp_path, root, capped)["changed"] is True
    assert files(root) == [f"{NULL} 120", f"{NULL} 120"]


def test_a_group_that_is_not_the_labs_is_refused(tmp_path):
    root = tree(tmp_path)
    res = caps(tmp_path, root, [], name="system.slice")
    assert res["failed"] is True
    assert res["msg"] == "cgroup system.slice: not a lab name (must start with drivelab)"
    res = caps(tmp_path, root, [{"device": "/dev/null", "iops_cap": 5}], name="drivelab-missing")
    assert res["failed"] is True and "drivelab-missing" in res["msg"], res
