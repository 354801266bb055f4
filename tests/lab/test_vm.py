"""The VM lab: the DB host a qemu VM booting Debian 13's own kernel (an emulated CPU
here: TCG), its candidate drives emulated as a real host's (SATA, SCSI with a WWN, two
namespaces of one NVMe controller, virtio disks), the clients containers. One lab for the
module: the guest is its own kernel with a stock cgroup v2 and every drive where the
inventory says by its by-id path; the gate refuses real device stacks (an md member not
assembled, an LVM physical volume, the sibling namespace under a declared namespace id, a
partition of the root disk) in one line each and writes nothing; md RAID 1 and RAID 10
run end to end through `drivelab run`; `lab down` leaves only the caches."""

from __future__ import annotations

import json
import platform
import sqlite3
from pathlib import Path

import pytest
import yaml

from tests.lab.conftest import (
    REPO,
    assert_no_lab,
    container_image_built_ahead,
    db_drives,
    drivelab,
    lab_inventory,
    on_hosts,
)
from tests.lab.test_gate import run_playbook

pytestmark = pytest.mark.lab

IMAGES = Path("/var/cache/drivelab/images")
MiB = 1024**2
RAID_SCENARIO = """\
---
name: vm-md-raid
baseline: md1
drives: []
raid:
  - {name: md1, drives: [raid1, raid2], level: raid1, method: mdadm}
  - {name: md10, drives: [raid1, raid2, raid3, raid4], level: raid10, method: mdadm}
filesystems: [{fs: ext4, mount_options: noatime}]
placement: [cluster]
workload: {scale: [1], clients_per_host: 2, threads: 1, duration: 5}
hosts: [1]
repetitions: 1
"""


def on_db(command: str) -> str:
    return on_hosts("dbhost", command, timeout=600)["dbhost"]


def heads_and_tails(devices: list[str]) -> dict[str, str]:
    """sha256 of the first and the last 16 MiB of each device, read on the DB host."""
    script = " ; ".join(
        f"echo {dev} $(head -c {16 * MiB} {dev} | sha256sum | cut -c1-16)"
        f" $(tail -c {16 * MiB} {dev} | sha256sum | cut -c1-16)"
        for dev in devices
    )
    out = on_db(f"sudo sh -c '{script}'")
    return {line.split()[0]: line for line in out.splitlines() if line.startswith("/dev/")}


@pytest.fixture(scope="module")
def vm_lab():
    container_image_built_ahead()
    drivelab("lab", "down")
    try:
        yield drivelab("lab", "up", "--hosts", "vm", timeout=1800)
    finally:
        drivelab("lab", "down")


def test_the_db_host_is_its_own_kernel_with_its_drives_by_id(vm_lab):
    status = json.loads(drivelab("lab", "status", "--json").stdout)
    assert status["kind"] == "vm" and status["vm_accel"] in ("kvm", "tcg"), status
    db = next(h for h in status["hosts"] if h["name"] == "dbhost")
    assert db["container"] == "running" and db["ssh_answers"], db
    drives = db_drives()
    out = on_db(
        "uname -r; cat /sys/fs/cgroup/cgroup.controllers; "
        + "; ".join(
            f"echo {d['name']} $(readlink -f {d['device']})"
            f" $(lsblk -dn -o TRAN,SERIAL $(readlink -f {d['device']}))"
            f" $(cat /sys/class/block/$(basename $(readlink -f {d['device']}))/nsid 2>/dev/null)"
            for d in drives
        )
    ).splitlines()
    kernel, controllers, *rows = out
    assert kernel != platform.release(), (kernel, "the guest runs the controller's kernel")
    assert {"io", "memory"} <= set(controllers.split()), controllers
    seen = {row.split()[0]: row.split()[1:] for row in rows}
    for d in drives:
        dev, *rest = seen[d["name"]]
        kind = {
            "ata-": ("/dev/sd", "sata"),
            "wwn-": ("/dev/sd", ""),
            "nvme": ("/dev/nvme0n", "nvme"),
        }
        prefix, transport = next(
            (v for k, v in kind.items() if Path(d["device"]).name.startswith(k)),
            ("/dev/vd", "virtio"),
        )
        assert dev.startswith(prefix), (d, seen[d["name"]])
        if transport:
            assert rest[0] == transport, (d, rest)
        assert d["serial"] in rest, (d, rest)
        if "nsid" in d:
            assert rest[-1] == str(d["nsid"]), (d, rest)


def test_the_gate_refuses_real_device_stacks_in_one_line_each_and_writes_nothing(vm_lab):
    drives = db_drives()
    by_name = {d["name"]: d for d in drives}
    raid3, raid4 = by_name["raid3"]["device"], by_name["raid4"]["device"]
    hdd10k = by_name["hdd10k"]["device"]
    # an array made and stopped (its members carry its superblock, nothing holds them), a
    # physical volume of no volume group
    on_db(
        f"sudo mdadm --create /dev/md/gatetest --level=1 --raid-devices=2 --run"
        f" --assume-clean --metadata=1.2 {raid3} {raid4} && sudo mdadm --stop /dev/md/gatetest"
        f" && sudo pvcreate -q {hdd10k}"
    )
    nvme = by_name["nvme"]
    ns1 = on_db(f"readlink -f {nvme['device']}").strip()
    sibling = "/dev/nvme0n1" if ns1 != "/dev/nvme0n1" else "/dev/nvme0n2"
    extra = [
        # the controller's serial and namespace 1 declared, the device the other namespace
        {**nvme, "name": "nvmesib", "device": sibling},
        # the spare partition of the root disk: empty, unmounted, a partition all the same
        {"name": "rootpart", "device": "/dev/disk/by-id/virtio-drivelab-root-part2", "wipe": True},
    ]
    request = [
        {"name": name, "drives": [name], "fs": "ext4"}
        for name in ("raid3", "hdd10k", "nvmesib", "rootpart")
    ]
    devices = [raid3, raid4, hdd10k, sibling, "/dev/vda2"]
    try:
        before = heads_and_tails(devices)
        proc, failures = run_playbook(
            "playbooks/drives.yml",
            # nvme2, the namespace nvmesib's device is, not listed: else "listed twice"
            {
                "candidate_drive_request": request,
                "candidate_drives": [*(d for d in drives if d["name"] != "nvme2"), *extra],
            },
        )
        after = heads_and_tails(devices)
    finally:
        on_db(
            f"sudo mdadm --zero-superblock {raid3} {raid4}; sudo pvremove -q -ff -y {hdd10k};"
            f" sudo wipefs -q -a {raid3} {raid4} {hdd10k}"
        )
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert before == after, "a refused request changed a drive's first or last 16 MiB"
    assert failures and failures[0]["msg"].startswith("refused: "), failures or proc.stdout[-3000:]
    refusals = failures[0]["msg"].removeprefix("refused: ").split("; ")
    assert len(refusals) == 4, refusals
    expected = [
        "carries a linux_raid_member signature, a member of an md array",
        "carries a LVM2_member signature, an LVM physical volume",
        "is namespace 2 of its NVMe controller (serial DLNVME0001), the inventory declares nsid 1",
        "is a partition of vda, not a whole disk",
    ]
    for text, want in zip(refusals, expected, strict=True):
        assert want in text, (want, refusals)


def test_md_raid1_and_raid10_run_end_to_end(vm_lab, tmp_path):
    path = tmp_path / "vm-md-raid.yml"
    path.write_text(RAID_SCENARIO)
    db = tmp_path / "results.db"
    proc = drivelab("run", str(path), "--db", str(db), "--no-check", timeout=1800)
    assert "md10" in proc.stdout, proc.stdout
    con = sqlite3.connect(db)
    try:
        runs = con.execute(
            "SELECT c.drive, r.status FROM runs r JOIN cells c ON c.id = r.cell_id ORDER BY c.drive"
        ).fetchall()
    finally:
        con.close()
    assert runs == [("md1", "complete"), ("md10", "complete")], runs
    # the last cell's array, as the DB host's own kernel has it
    mdstat = on_db("cat /proc/mdstat")
    assert "raid10" in mdstat and "[UUUU]" in mdstat, mdstat


def test_lab_down_leaves_only_the_caches(vm_lab):
    inventory = lab_inventory()
    vm_dir = inventory["all"]["children"]["db"]["hosts"]["dbhost"]["drivelab_lab_vm"]
    drivelab("lab", "down")
    assert_no_lab()
    assert not Path(vm_dir).exists()
    assert (IMAGES / "vm-trixie" / "image.json").exists()
    made = json.loads((IMAGES / "vm-trixie" / "image.json").read_text())
    defaults = yaml.safe_load((REPO / "roles/lab/defaults/main.yml").read_text())
    assert made["packages"] == defaults["lab_vm_image_packages"], made
