"""The lab's cliff classes (roles/lab/module_utils/drivelab_cliff.py): a drive's debt
(bytes written and not discarded since the lab made it, from the kernel's counters),
the write cap it gives, the watcher's step on cgroup trees of either hierarchy (a lifted
cap left alone), the action lab_caps putting a fallen drive's caps back at its slow
write cap, and the watcher as the process lab up starts, on a counters folder laid out
as /sys/dev/block. On the lab, tests/lab/test_run.py measures the class itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.unit.hostcode import module_util
from tests.unit.test_lab_caps_action import caps, tree
from tests.unit.test_lab_cgroup import FakeCgroupfs, v2_tree

cliff = module_util("lab", "drivelab_cliff")
cg = module_util("lab", "drivelab_cgroup")
MB = 1 << 20
SIZE = 1024 * MB // 512  # a 1 GiB drive, in sectors
DRIVE = {"name": "ssdcliff", "major_minor": "7:9", "iops": 5000,
         "after_bytes": 768 * MB, "iops_after": 1000}  # fmt: skip
REPO = Path(__file__).resolve().parents[2]


def sectors(mb: int) -> int:
    return mb * MB // 512


def test_a_drive_seen_first_is_fresh_and_its_debt_is_written_minus_discarded():
    e = cliff.advance(None, written=sectors(5000), discarded=0, size=SIZE, inode=11)
    assert e["debt"] == 0  # the counters run on since boot: only what comes after counts
    e = cliff.advance(e, sectors(5000 + 700), 0, SIZE, 11)
    assert e["debt"] == sectors(700) and cliff.write_cap(DRIVE, e) == 5000
    e = cliff.advance(e, sectors(5000 + 800), 0, SIZE, 11)
    assert e["debt"] == sectors(800) and cliff.write_cap(DRIVE, e) == 1000
    # a TRIM of 600 MiB of free space gives that much back: fast again
    e = cliff.advance(e, sectors(5800), sectors(600), SIZE, 11)
    assert e["debt"] == sectors(200) and cliff.write_cap(DRIVE, e) == 5000
    # never above the drive's size: after a precondition of 3x, one whole-drive discard
    # (a purge) leaves it fresh
    e = cliff.advance(e, sectors(5800 + 3072), sectors(600), SIZE, 11)
    assert e["debt"] == SIZE
    e = cliff.advance(e, sectors(5800 + 3072), sectors(600 + 1024), SIZE, 11)
    assert e["debt"] == 0 and cliff.write_cap(DRIVE, e) == 5000


def test_another_file_on_the_loop_device_or_counters_gone_back_start_afresh():
    e = cliff.advance(None, sectors(100), 0, SIZE, 11)
    e = cliff.advance(e, sectors(1000), 0, SIZE, 11)
    assert cliff.write_cap(DRIVE, e) == 1000
    assert cliff.advance(e, sectors(1010), 0, SIZE, 12)["debt"] == 0  # lab down, lab up
    back = cliff.advance(e, sectors(50), 0, SIZE, 11)  # counted from zero again
    assert back["debt"] == sectors(900 + 50)
    assert cliff.write_cap(DRIVE, None) == 5000


def counters_folder(root: Path, written_mb: int, discarded_mb: int = 0) -> Path:
    """/sys/dev/block/7:9 as the kernel lays it out: stat's 17 fields, size."""
    dev = root / "7:9"
    dev.mkdir(parents=True, exist_ok=True)
    fields = [0] * 17
    fields[6], fields[13] = sectors(written_mb), sectors(discarded_mb)
    (dev / "stat").write_text(" ".join(f"{v:8d}" for v in fields) + "\n")
    (dev / "size").write_text(f"{SIZE}\n")
    return root


def config(tmp_path: Path, kind: str, root: Path) -> dict:
    return {"group": "drivelab-t", "hierarchy": {"kind": kind, "root": str(root)},
            "state": str(tmp_path / "state.json"), "drives": [DRIVE],
            "sys_block": str(tmp_path / "sys")}  # fmt: skip


def test_the_watcher_step_sets_the_write_cap_only_while_the_caps_are_in_place(tmp_path):
    root = tmp_path / "cgroup"
    fs = FakeCgroupfs()
    h = cg.Hierarchy("v2", str(v2_tree(root)))
    cg.ensure(fs, h, "drivelab-t", None, {"7:9": 5000})
    conf = config(tmp_path, "v2", root)
    io_max = root / "drivelab-t" / "io.max"

    def look(written, discarded=0):
        counters_folder(tmp_path / "sys", written, discarded)
        with cliff.Locked(conf["state"]) as locked:
            return cliff.step(conf, locked, write=fs.write)

    assert look(2000) == [] and "riops=5000 wiops=5000" in io_max.read_text()  # first sight
    assert look(2000 + 767) == []
    assert look(2000 + 768) == [("ssdcliff", 1000, 768 * MB)]
    assert "riops=5000 wiops=1000" in io_max.read_text()  # reads keep the class's cap
    cg.ensure(fs, h, "drivelab-t", None, {})  # lifted (pgbench -i): left alone
    assert look(2000 + 900) == [] and io_max.read_text() == ""
    cg.ensure(fs, h, "drivelab-t", None, {"7:9": 5000})  # put back without the cliff
    assert look(2000 + 900) == [("ssdcliff", 1000, 900 * MB)]
    assert look(2000 + 900, discarded=1024) == [("ssdcliff", 5000, 0)]  # a purge
    assert json.loads(Path(conf["state"]).read_text())["7:9"]["debt"] == 0


def test_v1_the_write_file_alone_changes(tmp_path):
    root = tmp_path / "cgroup"
    fs = FakeCgroupfs()
    for c in ("memory", "blkio"):
        (root / c).mkdir(parents=True)
    h = cg.Hierarchy("v1", str(root))
    conf = config(tmp_path, "v1", root)
    # a put-back of a fallen drive: read and write caps differ
    assert cg.ensure(fs, h, "drivelab-t", None, {"7:9": (5000, 1000)}) is True
    blkio = root / "blkio" / "drivelab-t"
    assert (blkio / "blkio.throttle.read_iops_device").read_text() == "7:9 5000\n"
    assert (blkio / "blkio.throttle.write_iops_device").read_text() == "7:9 1000\n"
    assert cg.ensure(fs, h, "drivelab-t", None, {"7:9": (5000, 1000)}) is False
    counters_folder(tmp_path / "sys", 100)
    with cliff.Locked(conf["state"]) as locked:  # first sight: fresh, the fast cap
        assert cliff.step(conf, locked, write=fs.write) == [("ssdcliff", 5000, 0)]
    assert (blkio / "blkio.throttle.write_iops_device").read_text() == "7:9 5000\n"


def test_lab_caps_puts_a_fallen_drive_back_at_its_slow_write_cap(tmp_path):
    """The action, through ansible-playbook: without the cliff config both caps are the
    class's; with it, the write cap its debt says, and the debt kept in the state."""
    root = tree(tmp_path)
    sysdir = tmp_path / "sys"
    dev = os.stat("/dev/null").st_rdev
    mm = f"{os.major(dev)}:{os.minor(dev)}"
    conf = config(tmp_path, "v1", root) | {"drives": [DRIVE | {"major_minor": mm}]}
    (sysdir / mm).mkdir(parents=True)
    Path(conf["state"]).write_text(json.dumps({mm: {"inode": 0, "written": 0, "discarded": 0,
                                                    "debt": sectors(800)}}))  # fmt: skip
    (sysdir / mm / "stat").write_text(" ".join(["0"] * 17))
    (sysdir / mm / "size").write_text(f"{SIZE}\n")
    path = tmp_path / "cliff.json"
    path.write_text(json.dumps(conf))
    throttle = [{"device": "/dev/null", "iops_cap": 5000}]
    blkio = root / "blkio" / "drivelab-t"
    res = caps(tmp_path, root, throttle, cliff=str(path))
    assert res["changed"] is True and not res.get("failed"), res
    assert (blkio / "blkio.throttle.read_iops_device").read_text() == f"{mm} 5000"
    assert (blkio / "blkio.throttle.write_iops_device").read_text() == f"{mm} 1000"
    assert caps(tmp_path, root, throttle, cliff=str(path))["changed"] is False
    assert caps(tmp_path, root, [], cliff=str(path))["changed"] is True  # a lift lifts both
    assert (blkio / "blkio.throttle.write_iops_device").read_text() == f"{mm} 0"


def test_the_watcher_process_follows_the_counters_and_ends_on_sigterm(tmp_path):
    """The program lab up runs (argv0 drivelab-cliff, /usr/bin/python3, the module_utils
    file itself): on a v1 tree whose write file it finds capped, a debt past the mark
    brings the slow cap within a few polls, and SIGTERM ends it at once."""
    root = tmp_path / "cgroup"
    blkio = root / "blkio" / "drivelab-t"
    blkio.mkdir(parents=True)
    wfile = blkio / "blkio.throttle.write_iops_device"
    wfile.write_text("7:9 5000\n")
    counters_folder(tmp_path / "sys", 10)
    conf = tmp_path / "config.json"
    conf.write_text(json.dumps(config(tmp_path, "v1", root)))
    program = REPO / "roles/lab/module_utils/drivelab_cliff.py"
    proc = subprocess.Popen(
        ["drivelab-cliff", str(program), str(conf)], executable="/usr/bin/python3",
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not Path(tmp_path / "state.json").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        counters_folder(tmp_path / "sys", 10 + 800)
        while wfile.read_text() != "7:9 1000" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert wfile.read_text() == "7:9 1000"  # a plain file: the last write
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=5)
    assert proc.returncode == 0, out
    assert "ssdcliff: write cap 1000, debt 838860800 bytes" in out, out
