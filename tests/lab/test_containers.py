"""The container lab: Debian 13 hosts booted with systemd (systemd-nspawn), each with its
own root filesystem and packages, reached over SSH like real hosts. One lab for the
module: a small two-client scenario end to end through `drivelab run`, provisioning
again changes nothing, the hosts cannot see the controller's files, systemd runs
drivelab's units on the DB host, and `lab down` leaves only the documented caches."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.lab.conftest import (
    ansible,
    assert_no_lab,
    container_image_built_ahead,
    drivelab,
    lab_inventory,
    lab_leftovers,
    playbook,
    recap,
)

pytestmark = pytest.mark.lab

IMAGES = Path("/var/cache/drivelab/images")
SCENARIO = """\
---
name: container-two-clients
baseline: ssd
drives: [ssd]
filesystems: [{fs: ext4, mount_options: noatime}]
placement: [cluster]
workload: {scale: [2], clients_per_host: 2, threads: 1, duration: 5}
hosts: [2]
repetitions: 1
"""


def on_hosts(pattern: str, command: str) -> dict[str, str]:
    """stdout of a shell command on each host matching pattern, over the lab's SSH (the
    command's exit status is not looked at: the output says what the test needs)."""
    proc = ansible(
        "ansible", pattern, "-i", "inventory/local", "-m", "ansible.builtin.shell",
        "-a", f"{command}; true", "-o",
    )  # fmt: skip
    out = {}
    for line in proc.stdout.splitlines():
        host, _, rest = line.partition(" | ")
        if "(stdout) " not in rest:
            raise AssertionError(f"{command!r} on {host}: {rest}")
        out[host.strip()] = rest.split("(stdout) ", 1)[1].replace("\\n", "\n")
    return out


@pytest.fixture(scope="module")
def containers():
    container_image_built_ahead()
    drivelab("lab", "down")
    try:
        drivelab("lab", "up", "--hosts", "container", "--release", "trixie", timeout=900)
        yield lab_inventory()
    finally:
        drivelab("lab", "down")


@pytest.fixture(scope="module")
def scenario_run(containers, tmp_path_factory):
    """drivelab run of a one-drive, two-client scenario, telemetry on; its store."""
    tmp = tmp_path_factory.mktemp("containers")
    path = tmp / "container-two-clients.yml"
    path.write_text(SCENARIO)
    db = tmp / "results.db"
    proc = drivelab("run", str(path), "--db", str(db), timeout=900)
    return proc, db


def test_hosts_are_debian_13_with_their_own_python_and_postgresql(scenario_run):
    versions = on_hosts("all", "cat /etc/debian_version; python3 -V; ls /usr/lib/postgresql")
    assert set(versions) == {"dbhost", "client1", "client2"}, versions
    for host, text in versions.items():
        assert text.startswith("13."), (host, text)
        assert "Python 3.13" in text, (host, text)
        assert text.rstrip().endswith("17"), (host, text)


def test_two_client_scenario_runs_end_to_end(scenario_run):
    proc, db = scenario_run
    assert "ssd" in proc.stdout and "HTML report" in proc.stdout, proc.stdout
    con = sqlite3.connect(db)
    try:
        runs = con.execute(
            "SELECT r.id, c.drive, r.status FROM runs r JOIN cells c ON c.id = r.cell_id"
        ).fetchall()
        clients = con.execute(
            "SELECT client, status FROM client_results ORDER BY client"
        ).fetchall()
        version = con.execute(
            "SELECT value_json FROM facts WHERE key = 'postgresql_version'"
        ).fetchone()
        lab_fact = con.execute("SELECT value_json FROM facts WHERE key = 'lab'").fetchone()
    finally:
        con.close()
    assert [(drive, status) for _, drive, status in runs] == [("ssd", "complete")], runs
    assert clients == [("client1", "complete"), ("client2", "complete")], clients
    assert json.loads(version[0]).startswith("17."), version
    assert json.loads(lab_fact[0]) == {"hosts": "container", "cgroup": "v1"}, lab_fact
    # formatted inside the DB host: its own mount table has the drive, the controller's not
    device = next(d["device"] for d in containers_drives() if d["name"] == "ssd")
    inside = on_hosts("dbhost", "findmnt -n -o SOURCE,FSTYPE /srv/drivelab/ssd")["dbhost"]
    assert inside.split()[:2] == [device, "ext4"], inside
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        assert "/srv/drivelab/ssd" not in fh.read()


def containers_drives() -> list[dict]:
    return lab_inventory()["all"]["children"]["db"]["hosts"]["dbhost"]["candidate_drives"]


def test_systemd_runs_drivelabs_units_on_the_db_host(scenario_run):
    # (the system as a whole says "degraded" in a container: nvme-cli's
    # nvmf-autoconnect.service, pulled in with the drive tools, finds no NVMe fabrics)
    units = on_hosts(
        "dbhost", "systemctl is-active postgresql@17-drivelab_ssd prometheus-node-exporter"
    )["dbhost"].split()
    assert units == ["active", "active"], units
    pid1 = on_hosts("dbhost", "cat /proc/1/comm")["dbhost"].strip()
    assert pid1 == "systemd", pid1


def test_provisioning_again_changes_nothing(scenario_run):
    # the first plain provisioning brings back drivelab's default cluster, which the run
    # stopped for the drive's own (one cluster runs at a time); the second changes nothing
    first = playbook("provision.yml", {}, "-i", "inventory/local")
    assert first.returncode == 0, first.stdout[-3000:]
    second = playbook("provision.yml", {}, "-i", "inventory/local")
    assert second.returncode == 0, second.stdout[-3000:]
    for host in ("dbhost", "client1", "client2"):
        assert recap(second, host)["changed"] == 0, (host, second.stdout[-3000:])


def test_a_controller_file_is_not_on_any_host(containers):
    probe = Path("/var/tmp") / f"drivelab-controller-only-{uuid.uuid4().hex}"
    probe.write_text("the controller's\n")
    try:
        seen = on_hosts("all", f"test -e {probe} && echo present || echo absent")
    finally:
        probe.unlink()
    assert seen == {h: "absent" for h in ("dbhost", "client1", "client2")}, seen


def test_db_host_container_is_inside_the_lab_cgroups(containers):
    pid = int(Path("/var/lib/drivelab/containers/dbhost/nspawn.pid").read_text())
    init = subprocess.run(
        ["pgrep", "-P", str(pid)], capture_output=True, text=True, check=True
    ).stdout.split()[0]
    groups = Path(f"/proc/{init}/cgroup").read_text()
    assert ":memory:/drivelab-db" in groups and ":blkio:/drivelab-db" in groups, groups


def test_down_leaves_only_the_image_cache(containers):
    drivelab("lab", "down")
    assert_no_lab()
    left = lab_leftovers()
    assert not left["processes"], left
    nspawn = subprocess.run(
        ["pgrep", "-x", "systemd-nspawn"], capture_output=True, text=True, check=False
    )
    assert nspawn.stdout == "", nspawn.stdout
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        overlays = [line for line in fh if " - overlay " in line and "drivelab" in line]
    assert overlays == []
    assert not os.path.exists("/var/lib/drivelab/containers")
    assert (IMAGES / "trixie" / "image.json").exists()
