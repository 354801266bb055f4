"""The safety gate refuses, in one line naming the device and the reason, every
device drivelab must not format, and changes nothing: the first and last 16 MiB of
every lab drive, the block devices' mounts and blkid's view are the same before and
after."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.lab.conftest import BIN, REPO, db_drives

pytestmark = pytest.mark.lab
#: blank drives: the refusals are checked by hashing the drives, and a filesystem an
#: earlier module left mounted changes under them by itself (test_faults' last run leaves
#: PostgreSQL's client databases on hdd7200, the server running: its head changed between
#: two snapshots of the "mounted" cases when this module took that lab over)
LAB2_BLANK = True

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
    # the mounts of block devices: what a gate that let a request through could add or
    # take away. Other mounts come and go with whatever else the machine runs (a unit
    # test's tmpfs under pytest's temporary folder, which pytest renames as it rotates).
    with open("/proc/mounts", encoding="utf-8") as fh:
        state["mounts"] = [line for line in fh if line.startswith("/dev/")]
    return state


def run_playbook(path: str, extra: dict) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """ansible-playbook ``path`` with ``extra`` as -e @vars.json; its failures as the
    drivelab_failures callback wrote them (one JSON line each)."""
    with tempfile.TemporaryDirectory(prefix="drivelab-gate-") as tmp:
        vars_file = os.path.join(tmp, "vars.json")
        failures = os.path.join(tmp, "failures.jsonl")
        with open(vars_file, "w", encoding="utf-8") as fh:
            json.dump(extra, fh)
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), DRIVELAB_FAILURES=failures)
        proc = subprocess.run(
            [str(BIN / "ansible-playbook"), path, "-e", f"@{vars_file}"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        lines = []
        if os.path.exists(failures):
            with open(failures, encoding="utf-8") as fh:
                lines = [json.loads(line) for line in fh if line.strip()]
        return proc, lines


def run_gate(request: list[dict], drives: list[dict], **extra) -> tuple[int, list[dict]]:
    proc, lines = run_playbook(
        "playbooks/drives.yml",
        {"candidate_drive_request": request, "candidate_drives": drives, **extra},
    )
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


NODE = "/dev/drivelab-gate-node"


@contextlib.contextmanager
def second_node(name: str = "hdd10k") -> Iterator[None]:
    """A device node of the drive's numbers under another path (not a link: its path
    string resolves to itself)."""
    st = os.stat(device(name))
    os.mknod(NODE, 0o600 | stat.S_IFBLK, st.st_rdev)
    try:
        yield
    finally:
        os.unlink(NODE)


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
    Case("same-device-numbers", "node", f"drive node ({NODE}): listed twice in candidate_drives (also as hdd10k)",
         edit=lambda drives: [*drives, dict(next(d for d in drives if d["name"] == "hdd10k"), name="node", device=NODE)],
         setup=second_node),
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


# --- the drive modules are the one authority (issue 15) -------------------------------------
# Requests through the documented playbook interface (-e @request.json), the roles'
# tasks_from entry point and `drivelab run`: each refused in one line naming the option or
# the device, and nothing changed on any lab drive nor on a loop device outside the
# inventory (the device a bad option would have formatted).

SACRIFICE = "/dev/shm/drivelab-gate-sacrifice"
#: the candidate_drive role entered at tasks_from: format, as an operator's playbook would
ENTRY_POINT = "tests/lab/playbooks/format_entry_point.yml"
PGDATA = "/dev/shm/drivelab-gate-pgdata"


def losetup(path: str) -> str:
    return subprocess.run(
        ["losetup", "--find", "--show", path], capture_output=True, text=True, check=True
    ).stdout.strip()


def detach(dev: str) -> None:
    subprocess.run(["losetup", "-d", dev], capture_output=True, check=False)


@pytest.fixture(scope="module")
def sacrifice(lab2):
    """A loop device in no inventory, holding data: what a bad request would destroy."""
    with open(SACRIFICE, "wb") as fh:
        fh.write(os.urandom(16 * MiB))
        fh.truncate(64 * MiB)
        fh.seek(-16 * MiB, os.SEEK_END)
        fh.write(os.urandom(16 * MiB))
    dev = losetup(SACRIFICE)
    try:
        yield dev
    finally:
        detach(dev)
        os.unlink(SACRIFICE)


def full_snapshot(extra: str) -> dict:
    state = snapshot()
    with open(extra, "rb") as fh:
        state[extra] = hashlib.sha256(fh.read()).hexdigest()
    state["blkid"] = subprocess.run(
        ["blkid", "-p", "-o", "export", extra], capture_output=True, text=True, check=False
    ).stdout
    return state


def refused(request: list[dict], drives: list[dict], sacrificed: str) -> str:
    """The one-line refusal of a drives.yml run; asserts that nothing changed."""
    before = full_snapshot(sacrificed)
    rc, failures = run_gate(request, drives)
    after = full_snapshot(sacrificed)
    assert rc != 0, "the playbook went on"
    assert failures, "no failure was reported"
    msg = failures[0]["msg"]
    assert "\n" not in msg and msg.startswith("refused: "), msg
    assert before == after, "the refused run changed a drive, a mount or a signature"
    return msg


#: (id, request with {S} for the sacrificial device, what the refusal must say)
BAD_REQUESTS = [
    ("device-as-btrfs-option", {"drives": ["raid1"], "fs": "btrfs", "mkfs_options": ["{S}"]},
     "mkfs.btrfs option '{S}': a bare argument is not an option"),
    ("device-as-ext4-option", {"drives": ["raid1"], "fs": "ext4", "mkfs_options": ["{S}"]},
     "mkfs.ext4 option '{S}': a bare argument is not an option"),
    ("device-as-xfs-option", {"drives": ["raid1"], "fs": "xfs", "mkfs_options": ["{S}"]},
     "mkfs.xfs option '{S}': a bare argument is not an option"),
    ("ext4-journal-device", {"drives": ["raid1"], "fs": "ext4", "mkfs_options": ["-J", "device={S}"]},
     "mkfs.ext4 option -J 'device={S}': 'device' is not a suboption drivelab allows"),
    ("ext4-root-directory", {"drives": ["raid1"], "fs": "ext4", "mkfs_options": ["-d", "/etc"]},
     "mkfs.ext4 option '-d': not an option drivelab allows for ext4"),
    ("ext4-undo-file", {"drives": ["raid1"], "fs": "ext4", "mkfs_options": ["-z", "{S}"]},
     "mkfs.ext4 option '-z': not an option drivelab allows for ext4"),
    ("xfs-log-device", {"drives": ["raid1"], "fs": "xfs", "mkfs_options": ["-l", "logdev={S}"]},
     "mkfs.xfs option -l 'logdev={S}': 'logdev' is not a suboption drivelab allows"),
    ("xfs-realtime-device", {"drives": ["raid1"], "fs": "xfs", "mkfs_options": ["-r", "rtdev={S}"]},
     "mkfs.xfs option -r 'rtdev={S}': 'rtdev' is not a suboption drivelab allows"),
    ("xfs-data-file", {"drives": ["raid1"], "fs": "xfs", "mkfs_options": ["-d", "name={S}"]},
     "mkfs.xfs option -d 'name={S}': 'name' is not a suboption drivelab allows"),
    ("xfs-protofile", {"drives": ["raid1"], "fs": "xfs", "mkfs_options": ["-p", "/etc/fstab"]},
     "mkfs.xfs option '-p': not an option drivelab allows for xfs"),
    ("btrfs-rootdir", {"drives": ["raid1"], "fs": "btrfs", "mkfs_options": ["--rootdir", "/etc"]},
     "mkfs.btrfs option '--rootdir': not an option drivelab allows for btrfs"),
    ("btrfs-label-forged", {"drives": ["raid1"], "fs": "btrfs", "mkfs_options": ["-L", "drivelab-x"]},
     "mkfs.btrfs option '-L': not allowed (the label is drivelab's own marker)"),
    ("mount-device-option", {"drives": ["raid1"], "fs": "btrfs", "mount_options": "noatime,device={S}"},
     "mount option 'device={S}' (btrfs): not allowed"),
    ("mount-loop-offset", {"drives": ["raid1"], "fs": "ext4", "mount_options": "loop,offset=0"},
     "mount option 'loop' (ext4): not allowed"),
    ("mount-journal-path", {"drives": ["raid1"], "fs": "ext4", "mount_options": "journal_path={S}"},
     "mount option 'journal_path={S}' (ext4): not allowed"),
]  # fmt: skip


def _fill(value, dev):
    if isinstance(value, str):
        return value.replace("{S}", dev)
    if isinstance(value, list):
        return [_fill(v, dev) for v in value]
    return {k: _fill(v, dev) for k, v in value.items()}


@pytest.mark.parametrize(
    ("request_", "expected"), [b[1:] for b in BAD_REQUESTS], ids=[b[0] for b in BAD_REQUESTS]
)
def test_bad_options_are_refused_by_the_host_and_touch_nothing(sacrifice, request_, expected):
    request = [{"name": "x", **_fill(request_, sacrifice)}]
    msg = refused(request, db_drives(), sacrifice)
    assert _fill(expected, sacrifice) in msg, msg
    print(msg)


@contextlib.contextmanager
def running_cluster() -> Iterator[int]:
    """A real PostgreSQL cluster under /dev/shm/drivelab-..., running; stopped and
    removed afterwards. Yields the postmaster's pid."""
    initdb = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))[-1]
    os.makedirs(PGDATA, mode=0o700)
    shutil.chown(PGDATA, "postgres", "postgres")
    as_pg = ["runuser", "-u", "postgres", "--"]
    try:
        sh(*as_pg, str(initdb), "-D", PGDATA, "-A", "trust", "--no-sync", "-U", "postgres")
        sh(*as_pg, str(initdb.parent / "pg_ctl"), "-D", PGDATA, "-w", "-l", f"{PGDATA}/log",
           "-o", f"-p 5499 -k {PGDATA} -c listen_addresses=''", "start")  # fmt: skip
        yield int(Path(PGDATA, "postmaster.pid").read_text().split()[0])
    finally:
        subprocess.run([*as_pg, str(initdb.parent / "pg_ctl"), "-D", PGDATA, "-m", "immediate",
                        "stop"], capture_output=True, check=False)  # fmt: skip
        shutil.rmtree(PGDATA, ignore_errors=True)


BIND = "/mnt/drivelab-gate-bind"


def test_a_loop_device_backed_by_a_file_in_pgdata_is_refused(sacrifice):
    """The running cluster's data directory holds the backing file: reached by its own
    path, and through a bind mount of the data directory (another name, same place)."""
    msgs = {}
    with running_cluster():
        os.makedirs(BIND, exist_ok=True)
        sh("mount", "--bind", PGDATA, BIND)
        try:
            for how, folder in (("direct", PGDATA), ("bind", BIND)):
                backing = f"{folder}/base/drivelab-disk-{how}.img"
                with open(backing, "wb") as fh:
                    fh.truncate(256 * MiB)
                dev = losetup(backing)
                try:
                    entry = {"name": "inpg", "device": dev, "allow_loop": True, "wipe": True}
                    request = [{"name": "inpg", "drives": ["inpg"], "fs": "ext4"}]
                    before = hashlib.sha256(Path(backing).read_bytes()).hexdigest()
                    msgs[how] = (dev, backing, refused(request, [*db_drives(), entry], sacrifice))
                    assert hashlib.sha256(Path(backing).read_bytes()).hexdigest() == before
                finally:  # had the gate let it through, it would be mounted there
                    subprocess.run(
                        ["umount", "/srv/drivelab/inpg"], capture_output=True, check=False
                    )
                    detach(dev)
        finally:
            sh("umount", BIND)
            os.rmdir(BIND)
    for dev, backing, msg in msgs.values():
        assert f"drive inpg ({dev}): its backing file {backing} lies inside {PGDATA}" in msg, msg
        assert "(a PostgreSQL data directory or tablespace)" in msg, msg
        print(msg)


COPY = "/dev/shm/drivelab-gate-copy"


def test_a_loop_device_backed_in_a_stopped_clusters_folder_is_refused(sacrifice):
    """A cluster nobody runs and no cluster list names (a copy, another layout) still
    protects what lies under it: the gate knows the folder by PostgreSQL's own files."""
    os.makedirs(f"{COPY}/global", exist_ok=True)
    os.makedirs(f"{COPY}/base", exist_ok=True)
    Path(COPY, "PG_VERSION").write_text("16\n")
    Path(COPY, "global", "pg_control").write_bytes(os.urandom(8192))
    backing = f"{COPY}/base/drivelab-disk.img"
    with open(backing, "wb") as fh:
        fh.truncate(256 * MiB)
    dev = losetup(backing)
    try:
        entry = {"name": "incopy", "device": dev, "allow_loop": True, "wipe": True}
        request = [{"name": "incopy", "drives": ["incopy"], "fs": "ext4"}]
        msg = refused(request, [*db_drives(), entry], sacrifice)
    finally:
        subprocess.run(["umount", "/srv/drivelab/incopy"], capture_output=True, check=False)
        detach(dev)
        shutil.rmtree(COPY)
    assert f"drive incopy ({dev}): its backing file {backing} lies inside {COPY}" in msg, msg
    assert "laid out as a PostgreSQL data directory" in msg, msg
    print(msg)


def test_a_loop_device_over_a_block_device_is_refused(sacrifice):
    dev = losetup(sacrifice)
    try:
        drives = [*db_drives(), {"name": "over", "device": dev, "allow_loop": True, "wipe": True}]
        msg = refused([{"name": "over", "drives": ["over"], "fs": "ext4"}], drives, sacrifice)
    finally:
        detach(dev)
    assert f"drive over ({dev}): its backing file {sacrifice} is a block device" in msg, msg


def test_a_missing_mkfs_is_refused_before_wipefs_through_tasks_from(sacrifice, tmp_path):
    """mkfs.xfs hidden from the DB host's PATH: an XFS request on a drive that carries a
    filesystem (wipe: true) is refused before wipefs runs; the signature is still there.
    Entered at tasks_from: format, so the role's entry point gates by itself."""
    path = tmp_path / "bin"
    path.mkdir()
    for folder in ("/usr/sbin", "/usr/bin"):
        for tool in os.listdir(folder):
            if tool != "mkfs.xfs" and not (path / tool).exists():
                (path / tool).symlink_to(os.path.join(folder, tool))
    with foreign_fs("ext4"):
        before = full_snapshot(sacrifice)
        proc, lines = run_playbook(ENTRY_POINT, {
            "candidate_drive_request": [{"name": "hdd10k", "drives": ["hdd10k"], "fs": "xfs"}],
            "candidate_drives": replace("hdd10k", wipe=True)(db_drives()),
            "drivelab_test_path": str(path),
        })  # fmt: skip
        after = full_snapshot(sacrifice)
        assert blkid_type(device("hdd10k")) == "ext4", "the drive's signature is gone"
    assert proc.returncode != 0
    msg = lines[0]["msg"]
    assert msg.startswith("refused: hdd10k (xfs): mkfs.xfs (package xfsprogs) not found on PATH"), (
        msg
    )
    assert "nothing was written" in msg
    assert before == after
    print(msg)


def test_two_filesystems_on_one_drive_are_refused_by_the_role_through_tasks_from(sacrifice):
    """The preflight role's check is not on this path: the candidate_drive role refuses
    a request that puts raid1 in two filesystems itself, before the gate, touching nothing."""
    before = full_snapshot(sacrifice)
    proc, lines = run_playbook(ENTRY_POINT, {
        "candidate_drive_request": [
            {"name": "one", "drives": ["raid1"], "fs": "ext4"},
            {"name": "two", "drives": ["raid2", "raid1"], "fs": "btrfs", "raid_level": "raid1"},
        ],
        "candidate_drives": db_drives(),
    })  # fmt: skip
    assert proc.returncode != 0
    msg = lines[0]["msg"]
    assert msg == (
        "dbhost: candidate_drive_request names raid1 in two filesystems; nothing was touched"
    ), msg
    assert full_snapshot(sacrifice) == before


def blkid_type(dev: str) -> str:
    return subprocess.run(
        ["blkid", "-p", "-s", "TYPE", "-o", "value", dev],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()


def test_a_bad_value_stops_at_the_entry_points_argument_spec(sacrifice):
    before = full_snapshot(sacrifice)
    proc, _ = run_playbook(ENTRY_POINT, {
        "candidate_drive_request": [{"name": "x", "drives": ["raid1"], "fs": "ntfs"}],
        "candidate_drives": db_drives(),
    })  # fmt: skip
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert "argument_spec_name: format" in out, out[-2000:]
    assert "value of fs must be one of: ext4, xfs, btrfs, got: ntfs" in out, out[-2000:]
    assert "Gate (refuses" not in out, "the role went past its boundary"
    assert full_snapshot(sacrifice) == before


#: scenario filesystems for `drivelab run` and the refusal the host gives the same request
RUN_CASES = [
    ({"fs": "btrfs", "mkfs_options": ["{S}"]}, "mkfs.btrfs option '{S}': a bare argument is not an option"),
    ({"fs": "xfs", "mkfs_options": ["-l", "logdev={S}"]}, "mkfs.xfs option -l 'logdev={S}': 'logdev' is not a suboption"),
    ({"fs": "ext4", "mkfs_options": ["-J", "device={S}"]}, "mkfs.ext4 option -J 'device={S}': 'device' is not a suboption"),
    ({"fs": "btrfs", "mount_options": "noatime,device={S}"}, "mount option 'device={S}' (btrfs): not allowed"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("fs", "expected"),
    RUN_CASES,
    ids=["btrfs-device", "xfs-logdev", "ext4-journal", "mount-device"],
)
def test_drivelab_run_gives_the_hosts_refusal_and_touches_nothing(
    sacrifice, tmp_path, fs, expected
):
    import yaml  # noqa: PLC0415

    scen = tmp_path / "bad.yml"
    scen.write_text(yaml.safe_dump({
        "name": "gate-probe", "drives": ["raid1"], "filesystems": [_fill(fs, sacrifice)],
        "placement": ["tablespace"], "workload": {"scale": [1], "duration": 5}, "hosts": [1],
        "repetitions": 1,
    }))  # fmt: skip
    host = refused(
        [{"name": "raid1", "drives": ["raid1"], **_fill(fs, sacrifice)}], db_drives(), sacrifice
    )
    before = full_snapshot(sacrifice)
    proc = subprocess.run(
        [str(BIN / "drivelab"), "run", "--no-check", str(scen)], cwd=REPO, capture_output=True, text=True,
        timeout=120, check=False, env=dict(os.environ, DRIVELAB_RESULTS=str(tmp_path / "results")),
    )  # fmt: skip
    assert proc.returncode != 0
    line = proc.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, line
    reason = _fill(expected, sacrifice)
    assert reason in line and reason in host
    # the very words of the host's refusal, after its "refused: "
    assert host.removeprefix("refused: ") in line, (line, host)
    assert full_snapshot(sacrifice) == before
    assert not (tmp_path / "results").exists()


def test_drivelab_run_refuses_a_loop_device_backed_in_pgdata(sacrifice, tmp_path):
    """The PGDATA case through `drivelab run` with an inventory that lists the loop
    device: SSH check and provisioning run, then the DB host's gate refuses the drive in
    the line the playbook gives, and nothing was written to it. Last in the module: it
    leaves drivelab's provisioned cluster running until the lab goes down."""
    import yaml  # noqa: PLC0415

    with running_cluster():
        backing = f"{PGDATA}/base/drivelab-disk-run.img"
        with open(backing, "wb") as fh:
            fh.truncate(256 * MiB)
        dev = losetup(backing)
        try:
            inv = lab_inventory_with(
                {"name": "inpg", "device": dev, "allow_loop": True, "wipe": True}
            )
            (tmp_path / "inv").mkdir()
            (tmp_path / "inv" / "hosts.yml").write_text(yaml.safe_dump(inv))
            scen = tmp_path / "pgdata.yml"
            scen.write_text(yaml.safe_dump({
                "name": "gate-pgdata", "drives": ["inpg"], "placement": ["tablespace"],
                "workload": {"scale": [1], "duration": 5}, "hosts": [1], "repetitions": 1,
            }))  # fmt: skip
            before = full_snapshot(sacrifice)
            content = hashlib.sha256(Path(backing).read_bytes()).hexdigest()
            proc = subprocess.run(
                [str(BIN / "drivelab"), "run", "--no-check", str(scen), "--inventory", str(tmp_path / "inv"),
                 "--no-telemetry"],
                cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                env=dict(os.environ, DRIVELAB_RESULTS=str(tmp_path / "results")),
            )  # fmt: skip
            after = full_snapshot(sacrifice)
            assert hashlib.sha256(Path(backing).read_bytes()).hexdigest() == content
        finally:
            subprocess.run(["umount", "/srv/drivelab/inpg"], capture_output=True, check=False)
            detach(dev)
    assert proc.returncode != 0, proc.stdout[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr
    expected = (
        f"drive inpg ({dev}): its backing file {backing} lies inside {PGDATA}"
        " (a PostgreSQL data directory or tablespace)"
    )
    assert expected in line, proc.stderr[-2000:]
    assert before == after, "drivelab run changed a drive, a mount or a signature"
    print(line)


def lab_inventory_with(entry: dict) -> dict:
    from tests.lab.conftest import lab_inventory  # noqa: PLC0415

    inv = lab_inventory()
    inv["all"]["children"]["db"]["hosts"]["dbhost"]["candidate_drives"].append(entry)
    return inv
