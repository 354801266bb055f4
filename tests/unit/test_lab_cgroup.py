"""The lab DB host's cgroup writer (roles/lab/module_utils/drivelab_cgroup.py) on a
temporary tree laid out like cgroupfs: which hierarchy it picks, what files it writes,
with what values, in what order, and how it cleans up. This machine has only cgroup v1
memory and blkio, so the v2 path is shown here and on the lab only through v1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.hostcode import module_util

cg = module_util("lab", "drivelab_cgroup")
PAGE = os.sysconf("SC_PAGE_SIZE")
MEM = 256 * 1024 * 1024


class FakeCgroupfs(cg.Cgroupfs):
    """Behaves as the kernel does where a plain folder would not: a new group comes with
    its interface files, and removing a group removes them."""

    def mkdir(self, path):
        super().mkdir(path)
        files = {
            "cgroup.procs": "",
            "memory.max": "max\n",
            "io.max": "",
            "memory.limit_in_bytes": "9223372036854771712\n",
            "blkio.throttle.read_iops_device": "",
            "blkio.throttle.write_iops_device": "",
        }
        for name, text in files.items():
            Path(path, name).write_text(text)

    def write(self, path, value):
        """Interface files keep state, not the last write: io.max and the blkio files
        merge rules per device; subtree_control adds and drops controllers."""
        self.log.append(("write", path, value))
        p = Path(path)
        if p.name == "cgroup.subtree_control":
            have = set(p.read_text().split())
            for word in value.split():
                (have.add if word[0] == "+" else have.discard)(word[1:])
            p.write_text(" ".join(sorted(have)) + "\n")
        elif p.name == "io.max":
            dev, *pairs = value.split()
            rules = {
                line.split()[0]: dict(x.split("=") for x in line.split()[1:])
                for line in p.read_text().splitlines()
            }
            rules.setdefault(dev, {"rbps": "max", "wbps": "max", "riops": "max", "wiops": "max"})
            rules[dev].update(dict(x.split("=") for x in pairs))
            rules = {d: r for d, r in rules.items() if set(r.values()) != {"max"}}
            p.write_text(
                "".join(
                    f"{d} " + " ".join(f"{k}={v}" for k, v in r.items()) + "\n"
                    for d, r in rules.items()
                )
            )
        elif p.name.startswith("blkio.throttle."):
            dev, val = value.split()
            rules = dict(line.split() for line in p.read_text().splitlines())
            rules[dev] = val
            p.write_text("".join(f"{d} {v}\n" for d, v in rules.items() if v != "0"))
        else:
            p.write_text(value)

    def rmdir(self, path):
        self.log.append(("rmdir", path, None))
        for f in Path(path).iterdir():
            f.unlink()
        os.rmdir(path)


def v2_tree(root: Path, controllers: str = "cpuset cpu io memory hugetlb pids rdma misc",
            enabled: str = "cpu memory pids") -> Path:  # fmt: skip
    """A pure cgroup v2 mount: root/cgroup.controllers, root/cgroup.subtree_control."""
    root.mkdir(exist_ok=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text(enabled + "\n")
    (root / "cgroup.procs").write_text("1\n")
    return root


def v1_tree(root: Path) -> Path:
    """A v1 layout as on this machine: a tmpfs with one folder per controller, the
    name=systemd hierarchy and a unified v2 mount with no controllers beside them."""
    for ctl in ("cpu", "memory", "blkio", "pids", "systemd"):
        (root / ctl).mkdir(parents=True)
        (root / ctl / "cgroup.procs").write_text("1\n")
    (root / "unified").mkdir()
    (root / "unified" / "cgroup.controllers").write_text("\n")
    (root / "unified" / "cgroup.subtree_control").write_text("\n")
    return root


# --- which hierarchy ---------------------------------------------------------------------------


def test_v1_memory_and_blkio_are_used_where_mounted(tmp_path):
    h = cg.choose(str(v1_tree(tmp_path)))
    assert (h.kind, h.root) == ("v1", str(tmp_path))
    assert h.dirs("drivelab-db") == [
        f"{tmp_path}/memory/drivelab-db",
        f"{tmp_path}/blkio/drivelab-db",
    ]


def test_a_pure_v2_machine_uses_the_unified_mount(tmp_path):
    h = cg.choose(str(v2_tree(tmp_path)))
    assert (h.kind, h.root) == ("v2", str(tmp_path))
    assert h.dirs("drivelab-db") == [f"{tmp_path}/drivelab-db"]


def test_a_hybrid_machine_without_v1_memory_uses_unified_when_it_has_memory_and_io(tmp_path):
    (tmp_path / "systemd").mkdir()
    (tmp_path / "systemd" / "cgroup.procs").write_text("1\n")
    v2_tree(tmp_path / "unified")
    h = cg.choose(str(tmp_path))
    assert (h.kind, h.root) == ("v2", f"{tmp_path}/unified")


def test_v1_wins_over_v2_when_both_could_serve_unless_v2_is_asked_for(tmp_path):
    v1_tree(tmp_path)
    (tmp_path / "unified" / "cgroup.controllers").write_text(
        "memory io\n"
    )  # not real, but possible
    assert cg.choose(str(tmp_path)).kind == "v1"
    assert cg.choose(str(tmp_path), "v2").kind == "v2"


@pytest.mark.parametrize(
    ("layout", "prefer", "expected"),
    [
        ("empty", "auto", "cgroup v1 memory and blkio are not mounted at {root}/{{memory,blkio}},"
                          " and no cgroup v2 hierarchy at {root} or {root}/unified"),
        ("v2-no-io", "auto", "the cgroup v2 hierarchy at {root} lacks io (offers: cpu memory pids)"),
        ("v2-nothing", "auto", "the cgroup v2 hierarchy at {root} lacks memory and io (offers: none)"),
        ("v1-only", "v2", "the cgroup v2 hierarchy at {root}/unified lacks memory and io (offers: none)"),
        ("v2", "v1", "cgroup v1 memory and blkio are not mounted at {root}/{{memory,blkio}}, and cgroup v2 was not asked for"),
    ],
)  # fmt: skip
def test_without_a_usable_hierarchy_one_line_says_what_is_missing_and_what_to_do(
    tmp_path, layout, prefer, expected
):
    if layout == "v2-no-io":
        v2_tree(tmp_path, controllers="cpu memory pids")
    elif layout == "v2-nothing":
        v2_tree(tmp_path, controllers="")
    elif layout == "v1-only":
        v1_tree(tmp_path)
    elif layout == "v2":
        v2_tree(tmp_path)
    with pytest.raises(cg.CgroupError) as err:
        cg.choose(str(tmp_path), prefer)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("lab: no usable cgroup for the DB host's memory limit and IOPS caps: ")
    assert expected.format(root=tmp_path) in msg, msg
    assert msg.endswith(cg.WHAT_TO_DO)
    assert list(tmp_path.glob("**/drivelab*")) == []  # nothing made


# --- the v2 writer ------------------------------------------------------------------------------


def test_v2_enables_the_controllers_then_writes_memory_max_and_io_max_in_order(tmp_path):
    root = v2_tree(tmp_path)
    fs = FakeCgroupfs()
    h = cg.choose(str(root))
    caps = {"7:3": 120, "7:1": 5000}
    assert cg.ensure(fs, h, "drivelab-db", MEM + 123, caps) is True
    group = f"{root}/drivelab-db"
    assert fs.log == [
        ("write", f"{root}/cgroup.subtree_control", "+io"),  # memory was on already
        ("mkdir", group, None),
        ("write", f"{group}/memory.max", str(MEM)),  # rounded down to whole pages
        ("write", f"{group}/io.max", "7:1 riops=5000 wiops=5000"),
        ("write", f"{group}/io.max", "7:3 riops=120 wiops=120"),
    ]
    assert set((root / "cgroup.subtree_control").read_text().split()) == {
        "cpu",
        "io",
        "memory",
        "pids",
    }
    assert (root / "drivelab-db" / "memory.max").read_text() == str(MEM)
    assert cg.v2_io_rules((root / "drivelab-db" / "io.max").read_text()) == {
        "7:1": {"riops": 5000, "wiops": 5000},
        "7:3": {"riops": 120, "wiops": 120},
    }


def test_v2_a_second_ensure_with_the_same_request_writes_nothing(tmp_path):
    root = v2_tree(tmp_path)
    h = cg.choose(str(root))
    cg.ensure(FakeCgroupfs(), h, "drivelab-db", MEM, {"7:3": 120})
    again = FakeCgroupfs()
    assert cg.ensure(again, h, "drivelab-db", MEM, {"7:3": 120}) is False
    assert again.log == []


def test_v2_lifting_and_restoring_the_caps_as_init_does(tmp_path):
    """pgbench -i runs with the caps lifted (throttle: []), then they are put back."""
    root = v2_tree(tmp_path)
    h = cg.choose(str(root))
    group = f"{root}/drivelab-db"
    cg.ensure(FakeCgroupfs(), h, "drivelab-db", MEM, {"7:3": 120, "7:4": 180})
    lift = FakeCgroupfs()
    assert cg.ensure(lift, h, "drivelab-db", None, {}) is True
    assert lift.log == [
        ("write", f"{group}/io.max", "7:3 riops=max wiops=max"),
        ("write", f"{group}/io.max", "7:4 riops=max wiops=max"),
    ]
    assert (root / "drivelab-db" / "io.max").read_text() == ""
    assert (root / "drivelab-db" / "memory.max").read_text() == str(MEM)  # untouched
    back = FakeCgroupfs()
    assert cg.ensure(back, h, "drivelab-db", None, {"7:3": 120, "7:4": 180}) is True
    assert [v for _, _, v in back.log] == ["7:3 riops=120 wiops=120", "7:4 riops=180 wiops=180"]


def test_v2_check_mode_writes_nothing_and_says_it_would(tmp_path):
    root = v2_tree(tmp_path)
    fs = FakeCgroupfs()
    assert cg.ensure(fs, cg.choose(str(root)), "drivelab-db", MEM, {"7:3": 120}, check_mode=True)
    assert fs.log == []
    assert not (root / "drivelab-db").exists()


def test_v2_clean_up_ends_the_groups_processes_then_removes_it_and_leaves_the_parent(tmp_path):
    root = v2_tree(tmp_path)
    h = cg.choose(str(root))
    fs = FakeCgroupfs()
    cg.ensure(fs, h, "drivelab-db", MEM, {"7:3": 120})
    (root / "drivelab-db" / "cgroup.procs").write_text("4242\n4243\n")
    ended = []

    def end_pids(pids):
        ended.append(pids)
        (root / "drivelab-db" / "cgroup.procs").write_text("")
        return []

    rm = FakeCgroupfs()
    assert cg.remove(rm, h, "drivelab-db", end_pids) is True
    assert ended == [[4242, 4243]]
    assert rm.log == [("rmdir", f"{root}/drivelab-db", None)]
    assert not (root / "drivelab-db").exists()
    # the parent's controllers stay: other groups of the machine may rely on them
    assert "io" in (root / "cgroup.subtree_control").read_text().split()
    assert cg.remove(FakeCgroupfs(), h, "drivelab-db", end_pids) is False


def test_clean_up_refuses_to_remove_a_group_whose_processes_would_not_end(tmp_path):
    root = v2_tree(tmp_path)
    h = cg.choose(str(root))
    cg.ensure(FakeCgroupfs(), h, "drivelab-db", MEM, {})
    (root / "drivelab-db" / "cgroup.procs").write_text("4242\n")
    with pytest.raises(cg.CgroupError, match=r"drivelab-db: processes \[4242\] did not end"):
        cg.remove(FakeCgroupfs(), h, "drivelab-db", lambda pids: pids)
    assert (root / "drivelab-db").is_dir()


def test_a_parent_that_refuses_its_controllers_is_one_line_naming_the_file(tmp_path):
    """A delegated v2 subtree whose parent holds processes: the kernel refuses the
    subtree_control write (EBUSY); the error names the file and the value."""
    root = v2_tree(tmp_path, enabled="")

    class Busy(FakeCgroupfs):
        def write(self, path, value):
            if path.endswith("cgroup.subtree_control"):
                self.log.append(("write", path, value))
                raise cg.CgroupError(
                    f"cgroup: writing {value!r} to {path} failed (Device or resource busy)"
                )
            super().write(path, value)

    with pytest.raises(cg.CgroupError) as err:
        cg.ensure(Busy(), cg.choose(str(root)), "drivelab-db", MEM, {})
    assert f"writing '+memory +io' to {root}/cgroup.subtree_control failed" in str(err.value)
    assert not (root / "drivelab-db").exists()


# --- v1, the path the lab runs on here --------------------------------------------------------


def test_v1_writes_the_memory_limit_and_both_throttle_files(tmp_path):
    root = v1_tree(tmp_path)
    h = cg.choose(str(root))
    fs = FakeCgroupfs()
    cg.ensure(fs, h, "drivelab-db", MEM, {"7:3": 120})
    mem, blkio = f"{root}/memory/drivelab-db", f"{root}/blkio/drivelab-db"
    assert fs.log == [
        ("mkdir", mem, None),
        ("mkdir", blkio, None),
        ("write", f"{mem}/memory.limit_in_bytes", str(MEM)),
        ("write", f"{blkio}/blkio.throttle.read_iops_device", "7:3 120"),
        ("write", f"{blkio}/blkio.throttle.write_iops_device", "7:3 120"),
    ]
    lift = FakeCgroupfs()
    cg.ensure(lift, h, "drivelab-db", None, {})
    assert [v for _, _, v in lift.log] == ["7:3 0", "7:3 0"]


# --- teardown ----------------------------------------------------------------------------------


def test_teardown_finds_only_the_labs_groups_at_the_top_of_each_hierarchy(tmp_path):
    root = v1_tree(tmp_path / "v1")
    for d in ("memory/drivelab-db", "blkio/drivelab-db", "systemd/drivelab-dbhost",
              "unified/drivelab-client1", "systemd/system.slice/drivelab-x.service", "memory/other"):  # fmt: skip
        (root / d).mkdir(parents=True)
    assert cg.lab_groups(str(root), "drivelab") == [
        f"{root}/blkio/drivelab-db", f"{root}/memory/drivelab-db",
        f"{root}/systemd/drivelab-dbhost", f"{root}/unified/drivelab-client1",
    ]  # fmt: skip
    v2 = v2_tree(tmp_path / "v2")
    for d in ("drivelab-db", "drivelab-client1", "system.slice/drivelab-x.service", "user.slice"):
        (v2 / d).mkdir(parents=True)
    assert cg.lab_groups(str(v2), "drivelab") == [f"{v2}/drivelab-client1", f"{v2}/drivelab-db"]


def test_teardown_lifts_the_caps_of_either_hierarchy_before_ending_processes(tmp_path):
    root = v2_tree(tmp_path)
    h = cg.choose(str(root))
    cg.ensure(FakeCgroupfs(), h, "drivelab-db", MEM, {"7:3": 120})
    fs = FakeCgroupfs()
    cg.lift_caps(fs, f"{root}/drivelab-db")
    assert fs.log == [("write", f"{root}/drivelab-db/io.max", "7:3 riops=max wiops=max")]
    assert (root / "drivelab-db" / "io.max").read_text() == ""
