"""The safety gate refuses, in one line naming the device and the reason, every
device drivelab must not format, and changes nothing: the first and last 16 MiB of
every lab drive, /proc/mounts and blkid's view are the same before and after."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from tests.lab.conftest import BIN, REPO, db_drives

pytestmark = pytest.mark.lab

MiB = 1024**2
TEST_MOUNT = "/mnt/drivelab-gate-test"
ALIAS = "/dev/drivelab-gate-alias"
REGULAR_FILE = "/dev/shm/drivelab-gate-file"


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def device(name: str) -> str:
    return next(d["device"] for d in db_drives() if d["name"] == name)


def snapshot() -> dict:
    state = {}
    for d in db_drives():
        dev = d["device"]
        with open(dev, "rb") as fh:
            head = hashlib.sha256(fh.read(16 * MiB)).hexdigest()
            fh.seek(-16 * MiB, os.SEEK_END)
            tail = hashlib.sha256(fh.read(16 * MiB)).hexdigest()
        probe = subprocess.run(
            ["blkid", "-p", "-o", "export", dev], capture_output=True, text=True, check=False
        )
        state[dev] = (head, tail, probe.stdout)
    with open("/proc/mounts", encoding="utf-8") as fh:
        state["mounts"] = fh.read()
    return state


def run_gate(request: list[dict], drives: list[dict], **extra) -> tuple[int, list[dict]]:
    with tempfile.TemporaryDirectory(prefix="drivelab-gate-") as tmp:
        vars_file = os.path.join(tmp, "vars.json")
        failures = os.path.join(tmp, "failures.jsonl")
        with open(vars_file, "w", encoding="utf-8") as fh:
            json.dump({"candidate_drive_request": request, "candidate_drives": drives, **extra}, fh)
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), DRIVELAB_FAILURES=failures)
        proc = subprocess.run(
            [str(BIN / "ansible-playbook"), "playbooks/drives.yml", "-e", f"@{vars_file}"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        lines = []
        if os.path.exists(failures):
            with open(failures, encoding="utf-8") as fh:
                lines = [json.loads(line) for line in fh if line.strip()]
        return proc.returncode, lines


@dataclass
class Case:
    id: str
    drive: str  # the drive requested
    expected: str  # in the one-line reason
    edit: Callable[[list[dict]], list[dict]] = lambda drives: (
        drives
    )  # inventory as the test sees it
    setup: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    extra: dict = field(default_factory=dict)


def replace(name: str, **changes) -> Callable[[list[dict]], list[dict]]:
    return lambda drives: [dict(d, **changes) if d["name"] == name else d for d in drives]


def add(entry: dict) -> Callable[[list[dict]], list[dict]]:
    return lambda drives: [*drives, entry]


@contextlib.contextmanager
def foreign_fs(kind: str, name: str = "hdd10k") -> Iterator[None]:
    dev = device(name)
    if kind == "swap":
        sh("mkswap", "-L", "notours", dev)
    elif kind == "gpt":
        subprocess.run(
            ["sfdisk", "--quiet", dev],
            input="label: gpt\n",
            text=True,
            check=True,
            capture_output=True,
        )
    elif kind == "xfs":
        sh("mkfs.xfs", "-q", "-f", "-L", "notours", dev)
    else:  # no lazy init: nothing may write to the device in the background later
        sh(
            "mkfs.ext4",
            "-q",
            "-L",
            "notours",
            "-E",
            "lazy_itable_init=0,lazy_journal_init=0",
            dev,
        )
    try:
        yield
    finally:
        sh("wipefs", "-a", "-q", dev)


@contextlib.contextmanager
def foreign_mount(name: str = "hdd10k", alias: bool = False) -> Iterator[None]:
    dev = device(name)
    with foreign_fs("ext4", name):
        os.makedirs(TEST_MOUNT, exist_ok=True)
        # read-only: a read-write ext4 mount updates its superblock and journal on its
        # own schedule, which would look like a change the gate made
        sh("mount", "-o", "ro", dev, TEST_MOUNT)
        if alias:
            os.symlink(dev, ALIAS)
        try:
            yield
        finally:
            if alias:
                os.unlink(ALIAS)
            sh("umount", TEST_MOUNT)
            os.rmdir(TEST_MOUNT)


@contextlib.contextmanager
def held_open(name: str = "hdd10k") -> Iterator[None]:
    with open(device(name), "rb") as fh:
        proc = subprocess.Popen(["sleep", "120"], stdin=fh)
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def regular_file() -> Iterator[None]:
    with open(REGULAR_FILE, "wb") as fh:
        fh.truncate(256 * MiB)
    try:
        yield
    finally:
        os.unlink(REGULAR_FILE)


CASES = [
    Case("not-in-inventory", "ghost", "drive ghost of candidate_drive_request is not listed in the inventory's candidate_drives"),
    Case("regular-file", "afile", f"drive afile ({REGULAR_FILE}): is not a block device",
         edit=add({"name": "afile", "device": REGULAR_FILE, "wipe": True, "allow_loop": True}), setup=regular_file),
    Case("missing-path", "gone", "drive gone (/dev/drivelab-no-such-device): does not exist",
         edit=add({"name": "gone", "device": "/dev/drivelab-no-such-device", "wipe": True})),
    Case("root-device", "rootdisk", "drive rootdisk (/dev/vda): is the device behind /",
         edit=add({"name": "rootdisk", "device": "/dev/vda", "wipe": True})),
    Case("alias-to-mounted", "alias", f"drive alias ({ALIAS} -> ", edit=add(
        {"name": "alias", "device": ALIAS, "wipe": True, "allow_loop": True}),
         setup=lambda: foreign_mount(alias=True)),
    Case("mounted", "hdd10k", f"is mounted at {TEST_MOUNT}", setup=foreign_mount),
    Case("partition-table", "hdd10k", "has a partition table (gpt)", setup=lambda: foreign_fs("gpt")),
    Case("foreign-fs-no-wipe", "hdd10k", "carries a xfs signature labelled 'notours' and the inventory does not say wipe: true",
         edit=replace("hdd10k", wipe=False), setup=lambda: foreign_fs("xfs")),
    Case("swap-signed", "hdd10k", "carries a swap signature labelled 'notours' and the inventory does not say wipe: true",
         edit=replace("hdd10k", wipe=False), setup=lambda: foreign_fs("swap")),
    Case("held-open", "hdd10k", "is held open by ", setup=held_open),
    Case("size-mismatch", "hdd10k", "is 4294967296 bytes, the inventory declares 4000000000",
         edit=replace("hdd10k", size_bytes=4000000000)),
    Case("serial-mismatch", "hdd10k", "serial is unreadable, the inventory declares WD-WCAV1234",
         edit=replace("hdd10k", serial="WD-WCAV1234")),
    Case("loop-without-allow-loop", "hdd10k", "is a loop device and the inventory does not say allow_loop: true",
         edit=replace("hdd10k", allow_loop=False)),
    Case("listed-twice", "hdd10k", "listed twice in candidate_drives (also as again)",
         edit=lambda drives: [*drives, dict(next(d for d in drives if d["name"] == "hdd10k"), name="again")]),
    Case("too-small", "hdd10k", "smaller than the 8589934592 the scenario needs",
         extra={"candidate_drive_min_size_bytes": 8 * 1024**3}),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_gate_refuses_and_touches_nothing(lab2, case):
    drives = case.edit(db_drives())
    with case.setup():
        before = snapshot()
        rc, failures = run_gate(
            [{"name": "target", "drives": [case.drive], "fs": "ext4"}], drives, **case.extra
        )
        after = snapshot()
    assert rc != 0, "the playbook went on"
    assert failures, "no failure was reported"
    msg = failures[0]["msg"]
    assert "\n" not in msg
    assert case.expected in msg, msg
    assert case.drive in msg
    assert before == after, "the refused run changed a drive, a mount or a signature"
    print(f"{case.id}: {msg}")
