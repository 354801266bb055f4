"""The preflight role's checks of the inventory's candidate_drives and of a drive request
(filters drivelab_preflight_drives and drivelab_preflight_request, one run each where
asserts looped over the entries): the example inventory passes; each kind of wrong entry
is named by its index and name; and a real ansible-playbook with the role refuses a
wrong entry in one line naming the host and the entry, before anything else runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from collector.ansible_plugins.filter import drivelab as filters

REPO = Path(__file__).resolve().parents[2]
PATTERN = yaml.safe_load((REPO / "roles/preflight/defaults/main.yml").read_text())[
    "preflight_name_pattern"
]
EXAMPLE = yaml.safe_load((REPO / "inventory/example/hosts.yml").read_text())


def example_drives() -> list[dict]:
    db = EXAMPLE["all"]["children"]["db"]["hosts"]
    return next(iter(db.values()))["candidate_drives"]


def good_drive(**over) -> dict:
    return {"name": "nvme", "device": "/dev/loop0", "wipe": True, "allow_loop": True, **over}


def test_the_example_inventory_passes() -> None:
    drives = example_drives()
    assert len(drives) >= 2
    assert filters.drivelab_preflight_drives(drives, PATTERN) == []
    request = [{"name": d["name"], "drives": [d["name"]], "fs": "xfs"} for d in drives]
    assert filters.drivelab_preflight_request(request, drives, PATTERN) == []


@pytest.mark.parametrize(
    "entry",
    [
        "nvme",  # not a mapping
        {"device": "/dev/loop0"},  # no name
        good_drive(name="NVMe"),  # not the pattern
        good_drive(device="loop0"),  # not under /dev
        good_drive(wipe="yes"),  # a string, not a bool
        good_drive(allow_loop=1),
        good_drive(power_loss_protection="false"),
        good_drive(size_bytes="4G"),
        good_drive(size_bytes=True),  # a bool is not a whole number
        good_drive(serial=1234),
        good_drive(rpm=-1),
        good_drive(rpm=7200.0),
    ],
)
def test_each_wrong_drive_is_named_by_index_and_name(entry) -> None:
    drives = [good_drive(name="ok"), entry]
    (msg,) = filters.drivelab_preflight_drives(drives, PATTERN)
    name = entry.get("name", "no name") if isinstance(entry, dict) else "no name"
    assert msg.startswith(f"candidate_drives[1] ({name}): needs name (matching {PATTERN})"), msg


def test_a_drives_entry_that_is_not_a_list_is_refused() -> None:
    assert filters.drivelab_preflight_drives("nvme", PATTERN) == [
        "candidate_drives must be a list of drives in the inventory"
    ]


@pytest.mark.parametrize(
    "fs",
    [
        {"name": "ok2", "drives": ["b"], "fs": "zfs"},
        {"name": "Bad", "drives": ["b"]},
        {"name": "ok2", "drives": []},
        {"name": "ok2", "drives": "b"},  # a string, not a list
        {"name": "ok2", "drives": ["ghost"]},
        {"name": "ok2", "drives": ["b"], "raid_level": "raid6"},
        {"name": "ok2", "drives": ["b"], "raid_method": "zfs"},
        {"name": "ok2", "drives": ["b"], "mkfs_options": "-m 0"},
        {"name": "ok2", "drives": ["b"], "mount_options": "noatime;reboot"},
        {"name": "ok", "drives": ["b"]},  # the name twice
    ],
)
def test_each_wrong_filesystem_of_a_request_is_named(fs) -> None:
    drives = [good_drive(name="a"), good_drive(name="b", device="/dev/loop1")]
    request = [
        {"name": "ok", "drives": ["a"], "fs": "ext4", "mount_options": "noatime,nobarrier"},
        fs,
    ]
    bad = filters.drivelab_preflight_request(request, drives, PATTERN)
    assert bad[-1].startswith(f"candidate_drive_request[1] ({fs['name']}): needs a unique name"), (
        bad
    )
    assert "drives out of candidate_drives (a, b)" in bad[-1]
    # the first is wrong too only when the second took its name
    assert len(bad) == (2 if fs["name"] == "ok" else 1), bad


BOOK = """\
- name: Preflight
  hosts: db
  gather_facts: false
  roles:
    - role: preflight
"""


def run_role(tmp_path: Path, drives: list, request: list | None = None):
    inventory = {"all": {"children": {"db": {"hosts": {"dbhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "candidate_drives": drives,
    }}}}}}  # fmt: skip
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "book.yml").write_text(BOOK)
    extra = ["-e", yaml.safe_dump({"candidate_drive_request": request}, default_flow_style=True)]
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
         str(tmp_path / "book.yml"), *(extra if request is not None else [])],
        cwd=REPO, env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg")),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_the_role_refuses_a_wrong_drive_naming_host_and_entry(tmp_path) -> None:
    drives = [good_drive(name="a"), good_drive(name="b", wipe="no")]
    ok = run_role(tmp_path, drives[:1], [{"name": "a", "drives": ["a"]}])
    assert ok.returncode == 0, ok.stdout[-2000:]
    proc = run_role(tmp_path, drives)
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert "dbhost: candidate_drives[1] (b): needs name" in proc.stdout, proc.stdout[-2000:]
    proc = run_role(tmp_path, drives[:1], [{"name": "a", "drives": ["a"], "fs": "zfs"}])
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert "dbhost: candidate_drive_request[0] (a): needs a unique name" in proc.stdout
