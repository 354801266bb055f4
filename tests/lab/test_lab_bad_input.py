"""`drivelab lab up` refuses a bridge name or subnet held by something that is not the
lab's, a cgroup hierarchy without its controllers, and more container hosts than the
machine's inotify limit lets boot, in one line naming it, and creates nothing."""

from __future__ import annotations

import subprocess

import pytest

from tests.lab.conftest import assert_no_lab, drivelab, lab_leftovers, playbook

pytestmark = pytest.mark.lab


@pytest.fixture
def foreign_bridge(request):
    """A bridge the lab did not make (no lab alias), optionally holding an address."""
    name, address = request.param
    drivelab("lab", "down")
    subprocess.run(["ip", "link", "add", name, "type", "bridge"], check=True)
    try:
        if address:
            subprocess.run(["ip", "addr", "add", address, "dev", name], check=True)
        yield name
    finally:
        subprocess.run(["ip", "link", "del", name], check=False)


@pytest.mark.parametrize(
    ("foreign_bridge", "expected"),
    [
        (
            ("drivelabt9", "10.213.0.77/24"),
            "subnet 10.213.0.0/24 overlaps 10.213.0.77/24 on drivelabt9",
        ),
        (("drivelab0", None), "bridge name drivelab0 is held by a link that is not the lab's"),
    ],
    indirect=["foreign_bridge"],
    ids=["subnet-held", "bridge-name-held"],
)
def test_lab_up_refuses_what_is_not_the_labs(foreign_bridge, expected):
    proc = drivelab("lab", "up", check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert expected in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    left = lab_leftovers()
    left["links"] = [x for x in left["links"] if x != foreign_bridge]
    assert not any(left.values()), f"lab up created {left}"


def test_lab_up_without_a_usable_hierarchy_stops_in_one_line_before_making_anything():
    """This machine's unified v2 hierarchy has no controllers (memory and blkio are on
    v1): asking the lab for v2 is what a v2-only machine without them would meet."""
    drivelab("lab", "down")
    proc = playbook("lab.yml", {"lab_cgroup_hierarchy": "v2"})
    assert proc.returncode != 0
    fatal = [line for line in proc.stdout.splitlines() if "no usable cgroup" in line]
    assert fatal, proc.stdout[-2000:]
    assert (
        "the cgroup v2 hierarchy at /sys/fs/cgroup/unified lacks memory and io (offers: "
        in fatal[0]
    ), fatal[0]
    assert "boot with cgroup v2" in fatal[0]
    assert_no_lab()


def test_more_containers_than_the_inotify_limit_lets_boot_are_refused_before_anything():
    """On a limit of 128 (Debian's default, given here as the machine's value: this
    machine's own may differ) 23 containers booted and the 24th's systemd did not: 64
    clients and the DB host are refused, with the most this machine takes and the limit
    that would take them."""
    drivelab("lab", "down")
    proc = playbook(
        "lab.yml", {"lab_hosts": "container", "lab_clients": 64, "lab_inotify_instances": 128}
    )
    assert proc.returncode != 0
    fatal = [line for line in proc.stdout.splitlines() if "inotify instances" in line]
    assert fatal, proc.stdout[-2000:]
    assert (
        "lab: 65 container hosts need about 358 inotify instances (their systemd's) and"
        " fs.inotify.max_user_instances is 128: at most 22 clients on this machine;"
        " ask for fewer, or raise the limit (sysctl -w fs.inotify.max_user_instances=384)"
    ) in fatal[0], fatal[0]
    assert_no_lab()


def test_nothing_left_after_refusals():
    assert_no_lab()
