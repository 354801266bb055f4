"""The container lab: Debian 13 hosts booted with systemd (systemd-nspawn), each with its
own root filesystem and packages, reached over SSH like real hosts, in a real lab's
shape: logins as an unprivileged user with passwordless sudo (root login refused), the
clients connecting to the DB host by name, and client2's clock 300 ms ahead of the
controller's (libfaketime for every process there). One lab for the module: a small
two-client scenario end to end through `drivelab run` (the offset measured within its
bound, the launches together on the controller's clock, the report naming the clock;
pgbench over the benchmark network; the drive by its by-id link; check in the run's
preflight), provisioning again changes nothing, `drivelab check` names client2's clock
and nothing else (the lab's inventory, and inventory/example with the lab's names and
drives in both its forms), a broken copy is one line per problem, the hosts cannot see the controller's files, systemd runs drivelab's units on the
DB host, and `lab down` leaves only the documented caches."""

from __future__ import annotations

import base64
import io
import json
import os
import pickle
import sqlite3
import subprocess
import uuid
import zipfile
from pathlib import Path

import pytest
import yaml

from collector import documents
from tests.lab.conftest import (
    BIN,
    ansible,
    assert_no_lab,
    container_image_built_ahead,
    drivelab,
    lab_inventory,
    lab_leftovers,
    on_hosts,
    playbook,
    recap,
)

pytestmark = pytest.mark.lab

IMAGES = Path("/var/cache/drivelab/images")
CONTAINERS = Path("/var/lib/drivelab/containers")
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory" / "example"
#: the benchmark network's /24 (the lab's default lab_bench_subnet)
BENCH = "10.214.0"
#: client2's clock, ahead of the controller's (and of the other hosts')
AHEAD = 0.3
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


@pytest.fixture(scope="module")
def containers():
    container_image_built_ahead()
    drivelab("lab", "down")
    try:
        drivelab("lab", "up", "--hosts", "container", "--release", "trixie",
                 "--clock-offset", f"client2={AHEAD}", timeout=900)  # fmt: skip
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


def test_module_runs_on_the_hosts_use_bytecode_their_own_python_compiled(scenario_run):
    """The hosts run Python 3.13, the controller 3.11: the inventory names the hosts'
    Python in their image, and the payloads kept for this lab carry its bytecode (the
    controller's would be passed over for the sources on every module run)."""
    argv = lab_inventory()["all"]["vars"]["drivelab_bytecode_python"]
    magic = on_hosts(
        "dbhost", "python3 -c 'import importlib.util; print(importlib.util.MAGIC_NUMBER.hex())'"
    )["dbhost"].strip()
    key = subprocess.run(
        [str(BIN / "python"), "-c",
         "import json, sys\n"
         "from collector.ansible_plugins.callback.drivelab_module_cache import cache_key\n"
         "print(cache_key(sys.argv[1], json.loads(sys.argv[2])))",
         str(REPO / "playbooks"), json.dumps(argv)],
        cwd=REPO, env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg")),
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    kept = Path.home() / ".ansible" / "drivelab-module-cache" / key
    magics = set()
    for payload in sorted(kept.glob("*-ZIP_DEFLATED-none")):
        with open(payload, "rb") as fh:
            zip_data = pickle.load(fh).zip_data  # noqa: S301 - the payload this lab's runs kept
        with zipfile.ZipFile(io.BytesIO(base64.b64decode(zip_data))) as z:
            magics |= {z.read(n)[:4].hex() for n in z.namelist() if n.endswith(".pyc")}
    assert magics == {magic}, (kept, magics, magic)


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
    # the drive named by its stable path, a link of the DB host's own /dev/disk/by-id
    device = next(d["device"] for d in containers_drives() if d["name"] == "ssd")
    assert device == "/dev/disk/by-id/drivelab-lab-ssd", device
    inside = on_hosts(
        "dbhost", f"readlink -f {device}; findmnt -n -o SOURCE,FSTYPE /srv/drivelab/ssd"
    )["dbhost"].split()
    assert inside[0].startswith("/dev/loop") and inside[1:3] == [inside[0], "ext4"], inside
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        assert "/srv/drivelab/ssd" not in fh.read()


def test_the_clock_ahead_is_measured_and_the_start_lands_on_the_controllers(scenario_run):
    proc, db = scenario_run
    con = sqlite3.connect(db)
    try:
        facts = dict(con.execute(
            "SELECT key, value_json FROM facts WHERE key IN"
            " ('clock_offsets', 'launch_skew_s', 'commands')"
        ).fetchall())  # fmt: skip
    finally:
        con.close()
    offsets = json.loads(facts["clock_offsets"])
    ahead = offsets["client2"]
    assert abs(ahead["measured_s"] - AHEAD) <= ahead["bound_s"] + 0.005, offsets
    assert ahead["offset_s"] == ahead["measured_s"]  # applied: it is beyond its bound
    assert offsets["client1"]["offset_s"] == 0.0, offsets  # within its bound: not corrected
    # launched together on the controller's clock (on its own, client2 launched 300 ms later)
    assert json.loads(facts["launch_skew_s"]) <= 0.010, facts["launch_skew_s"]
    out = " ".join(proc.stdout.split())
    assert "clocks off the controller's, corrected: client2 +" in out, proc.stdout[-3000:]
    # and named before anything was touched: the run's preflight ran drivelab check
    assert "preflight: drivelab check in " in out, proc.stdout[:3000]
    assert "preflight: client2: clock +" in out and "start corrects each client" in out, out
    # the clients connected to the DB host by its name on the benchmark network, resolved
    # on each of them, and pg_hba lets in each from its address there, nothing else
    commands = json.loads(facts["commands"])
    assert all("dbhost.bench.lab.drivelab.test" in argv for argv in commands.values()), commands
    hba = on_hosts("dbhost", "grep '^host' /etc/postgresql/17/drivelab_ssd/pg_hba.conf")["dbhost"]
    allowed = sorted({line.split()[3] for line in hba.splitlines() if "scram" in line})
    assert allowed == [f"{BENCH}.11/32", f"{BENCH}.12/32"], hba


def test_hosts_are_reached_as_an_unprivileged_user_with_sudo_and_root_is_refused(containers):
    hv = containers["all"]["vars"]
    assert (hv["ansible_user"], hv["ansible_become"]) == ("drivelab", True)
    plain = ansible(
        "ansible", "all", "-i", "inventory/local", "-m", "ansible.builtin.command",
        "-a", "id -un", "-e", "ansible_become=false", "-o",
    )  # fmt: skip
    assert plain.stdout.count("(stdout) drivelab") == 3, plain.stdout
    key = hv["ansible_ssh_private_key_file"]
    root = subprocess.run(
        ["ssh", "-i", key, *hv["ansible_ssh_common_args"].split(), "-o", "BatchMode=yes",
         "root@" + containers["all"]["children"]["db"]["hosts"]["dbhost"]["ansible_host"],
         "true"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert root.returncode == 255 and "Permission denied" in root.stderr, root.stderr


def example_as_the_lab(folder: Path, *, split: bool) -> Path:
    """inventory/example with only its names and drives replaced by the lab's (and the
    lab's SSH key and known_hosts, which an operator's own SSH set-up gives): one
    hosts.yml beside group_vars/, or, split, hosts.ini with group_vars/ and host_vars/."""
    lab = lab_inventory()["all"]
    example = yaml.safe_load((EXAMPLE / "hosts.yml").read_text(encoding="utf-8"))
    common = yaml.safe_load((EXAMPLE / "group_vars" / "all.yml").read_text(encoding="utf-8"))
    common["ansible_ssh_common_args"] += " " + lab["vars"]["ansible_ssh_common_args"]
    common["ansible_ssh_private_key_file"] = lab["vars"]["ansible_ssh_private_key_file"]
    lab_db = lab["children"]["db"]["hosts"]["dbhost"]
    pgbox = example["all"]["children"]["db"]["hosts"]["pgbox"]
    pgbox["ansible_host"] = lab_db["ansible_host"]
    pgbox["drivelab_db_address"] = lab_db["drivelab_db_address"]
    pgbox["db_memory_bytes"] = lab_db["db_memory_bytes"]
    by_class = {d["name"]: d for d in lab_db["candidate_drives"]}
    for d in pgbox["candidate_drives"]:
        mine = by_class[d["class"]]
        d.pop("serial")  # a loop device has none
        # its backing file lies outside the container, where the DB host's gate cannot
        # examine it: the inventory vouches for it, as the lab's does
        d.update(device=mine["device"], size_bytes=mine["size_bytes"], allow_loop=True,
                 backing_file=mine["backing_file"])  # fmt: skip
    for name, hv in example["all"]["children"]["clients"]["hosts"].items():
        hv["ansible_host"] = lab["children"]["clients"]["hosts"][name]["ansible_host"]
    (folder / "group_vars").mkdir(parents=True)
    (folder / "group_vars" / "all.yml").write_text(yaml.safe_dump(common), encoding="utf-8")
    if not split:
        (folder / "hosts.yml").write_text(yaml.safe_dump(example), encoding="utf-8")
        return folder
    gv = yaml.safe_load((folder / "group_vars" / "all.yml").read_text(encoding="utf-8"))
    gv.update(example["all"]["vars"])
    (folder / "group_vars" / "all.yml").write_text(yaml.safe_dump(gv), encoding="utf-8")
    (folder / "host_vars").mkdir()
    lines = []
    for group in ("db", "clients"):
        lines.append(f"[{group}]")
        for name, hv in example["all"]["children"][group]["hosts"].items():
            lines.append(name)
            (folder / "host_vars" / f"{name}.yml").write_text(yaml.safe_dump(hv), "utf-8")
        lines.append("")
    (folder / "hosts.ini").write_text("\n".join(lines), encoding="utf-8")
    return folder


def test_check_names_the_clock_ahead_and_nothing_else_and_so_does_the_example(
    scenario_run, tmp_path
):
    """The lab's own inventory, and inventory/example (YAML, and split as INI +
    group_vars + host_vars) with the lab's names and drives: all hosts reached as the
    sudo login, the candidate drives through the gate, and one problem: client2's clock,
    which the lab runs ahead on purpose."""
    proc = drivelab("check", "--json", check=False, timeout=300)
    doc = json.loads(proc.stdout)
    documents.validate("check", doc)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert [(p["host"], p["check"]) for p in doc["problems"]] == [("client2", "clock")], doc
    assert doc["problems"][0]["message"].startswith("clock +")
    assert abs(doc["hosts"]["client2"]["clock"]["offset_s"] - AHEAD) < 0.01, doc["hosts"]
    db = doc["hosts"]["dbhost"]
    assert db["host"]["uid"] == 0  # sudo worked
    assert {g["name"] for g in db["gate"]["drives"]} == {d["name"] for d in containers_drives()}
    # what the unit tests read (tests/data/check/lab-good.json): the answers' shape
    good = json.loads((REPO / "tests" / "data" / "check" / "lab-good.json").read_text())
    assert set(db) - {"clock"} == set(good["dbhost"]), sorted(db)
    for name, h in doc["hosts"].items():
        assert h["host"]["packages"], name
        if name != "client2":  # one clock: within the exchange's bound of the controller's
            assert abs(h["clock"]["offset_s"]) <= h["clock"]["bound_s"] + 0.002, (name, h)
    for split in (False, True):
        folder = example_as_the_lab(tmp_path / f"split-{split}", split=split)
        proc = drivelab("check", "-i", str(folder), "--json", check=False, timeout=300)
        doc = json.loads(proc.stdout)
        assert [(p["host"], p["check"]) for p in doc["problems"]] == [("client2", "clock")], (
            split, doc["problems"])  # fmt: skip
        assert sorted(doc["hosts"]) == ["client1", "client2", "pgbox"]
        gate = doc["hosts"]["pgbox"]["gate"]["drives"]
        assert sorted(g["name"] for g in gate) == ["hdd7200", "ssd100"], gate


def test_check_on_a_broken_copy_is_one_line_each_and_touches_nothing(scenario_run, tmp_path):
    """The example as the lab, broken: client1's login without sudo (its sudoers entry
    moved aside, put back after), a drive whose device does not exist, one declared with
    a serial it does not have, a loop device whose backing file (outside the container)
    no entry vouches for, and client2's clock ahead: one line each, exit 1, and no
    drive's signature changes."""
    folder = example_as_the_lab(tmp_path / "broken", split=False)
    doc = yaml.safe_load((folder / "hosts.yml").read_text(encoding="utf-8"))
    drives = doc["all"]["children"]["db"]["hosts"]["pgbox"]["candidate_drives"]
    drives.append(dict(drives[0], name="ghost", device="/dev/disk/by-id/drivelab-missing"))
    drives[1]["serial"] = "NOSUCHSERIAL"
    # a lab drive the example does not use, its backing file not vouched for
    spare = next(d for d in containers_drives() if d["device"] not in {e["device"] for e in drives})
    drives.append({"name": "unvouched", "device": spare["device"],
                   "size_bytes": spare["size_bytes"], "allow_loop": True})  # fmt: skip
    (folder / "hosts.yml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    signatures = "blkid -p -o export /dev/disk/by-id/drivelab-lab-* | sort"
    before = on_hosts("dbhost", signatures)["dbhost"]
    # moved aside in client1's own tree (the lab's overlay, seen from here): no SSH needed
    # to put it back
    sudoers = CONTAINERS / "client1" / "root" / "etc" / "sudoers.d" / "drivelab"
    aside = sudoers.with_name("drivelab.aside")
    sudoers.rename(aside)
    try:
        proc = drivelab("check", "-i", str(folder), check=False, timeout=300)
    finally:
        aside.rename(sudoers)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1].startswith("check: 3 hosts, 5 problems"), lines
    problems = sorted(lines[:-1])
    assert problems[0].startswith("client1: sudo as drivelab failed: "), problems
    assert "give drivelab passwordless sudo" in problems[0], problems
    assert problems[1].startswith("client2: clock +"), problems
    assert problems[2].startswith("pgbox: drive ghost (/dev/disk/by-id/drivelab-missing): does"), (
        problems)  # fmt: skip
    assert problems[3].startswith("pgbox: drive ssd100 (") and "NOSUCHSERIAL" in problems[3]
    assert problems[4].startswith(f"pgbox: drive unvouched ({spare['device']}"), problems
    assert (
        f"its backing file {spare['backing_file']} lies outside this container, where it"
        " cannot be examined, and the inventory declares none"
    ) in problems[4], problems
    assert on_hosts("dbhost", signatures)["dbhost"] == before


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
