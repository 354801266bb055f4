"""The gate's rule for signatures that are not filesystems (an md member not assembled,
an LVM physical volume, a LUKS header, a ZFS pool member): wipe: true does not destroy
them; the inventory names each type it accepts in wipe: [...]. And the NVMe write cache's
controller, found in sysfs above the namespace."""

from __future__ import annotations

import os
import threading
import time

import pytest

from collector.ansible_plugins.filter.drivelab import drivelab_preflight_drives
from tests.unit.hostcode import module_util

module_util("candidate_drive", "drivelab_argv")
gate = module_util("candidate_drive", "drivelab_gate")
wc = module_util("candidate_drive", "drivelab_wcache")

WHERE = "drive raid3 (/dev/disk/by-id/virtio-DLRAID3 -> /dev/vde)"


@pytest.mark.parametrize("wipe", [True, False, None, ["ext4"]])
def test_an_md_member_is_refused_unless_its_type_is_named(wipe):
    why = gate.wipe_refusal(WHERE, ["linux_raid_member"], wipe, "")
    assert why.startswith(
        f"{WHERE}: carries a linux_raid_member signature, a member of an md array"
    )
    assert "wipe: [linux_raid_member]" in why
    assert "\n" not in why


@pytest.mark.parametrize("found", [["LVM2_member"], ["crypto_LUKS"], ["zfs_member"]])
def test_volumes_and_pools_are_refused_under_wipe_true(found):
    why = gate.wipe_refusal(WHERE, found, True, "")
    assert f"carries a {found[0]} signature" in why
    assert f"wipe: [{found[0]}]" in why


def test_the_named_type_is_accepted_and_nothing_else():
    assert gate.wipe_refusal(WHERE, ["LVM2_member"], ["LVM2_member"], "") is None
    why = gate.wipe_refusal(WHERE, ["ext4"], ["LVM2_member"], " labelled 'home'")
    assert why == (
        f"{WHERE}: carries a ext4 signature labelled 'home', which wipe: ['LVM2_member'] does not name"
    )


def test_wipe_true_still_wipes_a_filesystem_and_false_refuses_it():
    assert gate.wipe_refusal(WHERE, ["xfs"], True, "") is None
    why = gate.wipe_refusal(WHERE, ["xfs"], False, "")
    assert why.endswith("carries a xfs signature and the inventory does not say wipe: true")


def test_the_inventory_check_takes_a_list_of_types_and_refuses_a_string():
    base = {"name": "raid3", "device": "/dev/vde"}
    assert (
        drivelab_preflight_drives([{**base, "wipe": ["linux_raid_member"]}], "^[a-z0-9_]+$") == []
    )
    assert drivelab_preflight_drives([{**base, "wipe": True}], "^[a-z0-9_]+$") == []
    for bad in ("yes", [], ["no spaces allowed"], [1]):
        (msg,) = drivelab_preflight_drives([{**base, "wipe": bad}], "^[a-z0-9_]+$")
        assert msg.startswith("candidate_drives[0] (raid3):")


def test_the_nvme_controller_is_the_namespace_parent_in_sysfs(tmp_path):
    # as the kernel lays it out: /sys/class/block/nvme0n2/device -> .../nvme/nvme0
    ctrl = tmp_path / "devices/pci0000:00/0000:00:04.0/nvme/nvme0"
    ctrl.mkdir(parents=True)
    (tmp_path / "block/nvme0n2").mkdir(parents=True)
    os.symlink(ctrl, tmp_path / "block/nvme0n2/device")
    assert wc.nvme_controller("nvme0n2", sys_block=str(tmp_path / "block")) == "/dev/nvme0"
    (tmp_path / "block/sda").mkdir()
    os.symlink(tmp_path / "devices", tmp_path / "block/sda/device")
    with pytest.raises(wc.WriteCacheError, match="no NVMe controller"):
        wc.nvme_controller("sda", sys_block=str(tmp_path / "block"))


def _nvme_sysfs(root, namespaces):
    ctrl = root / "devices/pci0000:00/0000:00:05.0/nvme/nvme0"
    ctrl.mkdir(parents=True)
    for kname, nsid in namespaces.items():
        (root / "block" / kname).mkdir(parents=True)
        os.symlink(ctrl, root / "block" / kname / "device")
        (root / "block" / kname / "nsid").write_text(f"{nsid}\n")
    return str(root / "block")


def test_a_namespace_knows_its_siblings_and_its_id(tmp_path):
    # as the VM lab shows it: the kernel named namespace 2 nvme0n1
    block = _nvme_sysfs(tmp_path, {"nvme0n1": 2, "nvme0n2": 1})
    assert gate.nvme_namespace("nvme0n1", sys_block=block) == (2, ["nvme0n2"])
    assert gate.nvme_namespace("sda", sys_block=block) is None


def test_a_sibling_namespace_under_the_declared_id_is_refused():
    entry = {"name": "nvme", "device": "/dev/nvme0n1", "serial": "DLNVME0001", "nsid": 1}
    why = gate.namespace_refusal(
        WHERE, entry, "nvme0n1", nsid=2, siblings=["nvme0n2"], serial="DLNVME0001"
    )
    assert why == (
        f"{WHERE}: is namespace 2 of its NVMe controller (serial DLNVME0001), the inventory"
        " declares nsid 1 (namespaces beside it: nvme0n2)"
    )
    assert (
        gate.namespace_refusal(
            WHERE, {**entry, "nsid": 2}, "nvme0n1", nsid=2, siblings=["nvme0n2"], serial="S"
        )
        is None
    )


def test_a_serial_alone_does_not_name_one_of_several_namespaces():
    entry = {"name": "nvme", "device": "/dev/nvme0n1", "serial": "DLNVME0001"}
    why = gate.namespace_refusal(
        WHERE, entry, "nvme0n1", nsid=2, siblings=["nvme0n2"], serial="DLNVME0001"
    )
    assert "with 2 namespaces (nvme0n1 and nvme0n2)" in why
    assert why.endswith("(the inventory must declare nsid or wwn)")
    assert (
        gate.namespace_refusal(
            WHERE, {**entry, "wwn": "eui.1"}, "nvme0n1", nsid=2, siblings=["x"], serial="S"
        )
        is None
    )
    assert (
        gate.namespace_refusal(WHERE, entry, "nvme0n1", nsid=1, siblings=[], serial="DLNVME0001")
        is None
    )


def test_a_wal_directory_on_another_drive_is_postgresql_data_as_the_data_directory_is(tmp_path):
    """initdb --waldir leaves pg_wal a link to a folder on another drive: that folder is
    PostgreSQL's data as much as the data directory and its tablespaces are, so the
    gate's protected paths hold it (a WAL drive is never reformatted under its cluster)."""
    datadir, wal, space = tmp_path / "data", tmp_path / "other" / "wal", tmp_path / "space"
    for folder in (datadir / "pg_tblspc", wal, space):
        folder.mkdir(parents=True)
    (datadir / "pg_wal").symlink_to(wal)
    (datadir / "pg_tblspc" / "16384").symlink_to(space)
    plain = tmp_path / "plain"
    (plain / "pg_wal").mkdir(parents=True)  # WAL inside its data directory: nothing more
    assert gate.data_paths([str(datadir), str(plain), str(datadir)]) == [
        str(datadir), str(space), str(wal), str(plain),
    ]  # fmt: skip


def test_the_probes_run_at_once_and_have_all_ended_when_it_returns():
    # the drives' probes overlap (a capped drive's take 0.2-0.4 s each), and none is
    # still running when the checks begin: a check counts any process holding a member
    # of the drive's family open, so a sibling's probe beside it would be a refusal
    paths = [f"/dev/vd{c}" for c in "bcdef"]
    meet = threading.Barrier(len(paths), timeout=10)
    ended = []

    def probe(path):
        meet.wait()  # passes only when every probe is running at the same time
        time.sleep(0.05 if path.endswith("b") else 0)
        ended.append(path)
        return [{"type": "ext4"}], {"TYPE": "ext4", "DEV": path}

    found = gate.probe_all(paths, probe)
    assert sorted(ended) == paths
    assert found == {p: ([{"type": "ext4"}], {"TYPE": "ext4", "DEV": p}) for p in paths}


def test_a_failed_probe_is_its_own_drives_refusal_and_nothing_else():
    def probe(path):
        if path == "/dev/vdc":
            raise gate.Refusal("wipefs --no-act failed: Input/output error")
        return [], {}

    found = gate.probe_all(["/dev/vdb", "/dev/vdc"], probe)
    assert gate._signatures_of("/dev/vdb", found) == ([], {})
    with pytest.raises(gate.Refusal, match=r"^wipefs --no-act failed: Input/output error$"):
        gate._signatures_of("/dev/vdc", found)
    assert gate.probe_all([], probe) == {}
