"""The environment of a run: the DB host's module (its parsers on real tool outputs, and
the module itself on this machine), reading environment.json into the run fact,
flattening, and what differs between two sides (tests/data/environment/README.md)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from collector.errors import DrivelabError
from collector.gather import folder as gather
from collector.report import html, load
from collector.run import storing
from collector.store import Store
from collector.verdicts import environment
from tests.conftest import DATA
from tests.unit.hostcode import library_module, module_util
from tests.unit.test_gather import make_run, two

ENV = DATA / "environment"
REPO = Path(__file__).resolve().parents[2]
MODULE = REPO / "roles/pgbench_run/library/drivelab_environment.py"
BIN = Path(sys.executable).parent


def captured(name: str) -> dict:
    return json.loads((ENV / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def host_module():
    """The module's file as Ansible ships it (its parsers are plain functions)."""
    module_util("drivelab", "drivelab_memory")  # it imports them from ansible.module_utils
    module_util("drivelab", "drivelab_psql")
    module_util("drivelab", "drivelab_pgstart")
    module_util("pgbench_run", "drivelab_coldstart")
    return library_module("pgbench_run", "drivelab_environment")


# --------------------------------------------------------------------------- the host side


def test_ext4_features_from_dumpe2fs(host_module):
    fs = host_module.parse_dumpe2fs((ENV / "dumpe2fs-h.txt").read_text())
    assert {"has_journal", "extent", "metadata_csum", "64bit"} <= set(fs["features"])
    # a mounted ext4's journal is in use: a state of the moment, not a feature
    assert "needs_recovery" not in fs["features"]
    assert fs["block_size"] == 4096


def test_xfs_key_fields_from_xfs_info(host_module):
    fs = host_module.parse_xfs_info((ENV / "xfs_info.txt").read_text())
    assert fs["features"] == ["bigtime", "crc", "finobt", "inobtcount", "reflink", "sparse"]
    f = fs["fields"]
    assert (f["data.bsize"], f["meta-data.sectsz"], f["data.sunit"]) == (4096, 512, 0)
    assert (f["log.log"], f["log.lazy-count"], f["naming.ftype"]) == ("internal log", 1, 1)
    assert "meta-data.agcount" not in f  # a property of the size, not of the format


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("none [mq-deadline] kyber bfq", "mq-deadline"),
        ("[none] mq-deadline kyber bfq", "none"),
        ("none", "none"),  # dm and md devices: no choice
        ("", None),
    ],
    ids=["disk", "loop", "dm", "missing"],
)
def test_the_active_scheduler(host_module, text, expected):
    assert host_module.active(text) == expected


def test_the_mount_a_path_lives_on(host_module):
    # hand-made table: an escaped space in a mount point, and two mounts stacked on one point
    table = host_module.parse_mounts(
        "/dev/vda / ext4 rw,relatime 0 0\n"
        "/dev/loop0 /srv/drivelab/fast\\040disk ext4 rw,noatime 0 0\n"
        "tmpfs /dev/shm tmpfs rw 0 0\n"
        "tmpfs /dev/shm tmpfs rw,size=1k 0 0\n"
    )
    m = host_module.mount_of("/srv/drivelab/fast disk/pg", table)
    assert (m["source"], m["options"]) == ("/dev/loop0", "rw,noatime")
    assert host_module.mount_of("/srv/drivelab/fast diskette", table)["mount_point"] == "/"
    assert host_module.mount_of("/dev/shm/x", table)["options"] == "rw,size=1k"  # the top one


def ansible_module(path: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "ansible"), "localhost", "-c", "local", "-i", "localhost,",
         "-M", str(MODULE.parent), "-m", "drivelab_environment", "-a", f"path={path}",
         "-o"],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
        env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg")),
    )  # fmt: skip


def test_the_module_on_this_machine(tmp_path):
    """The module itself, on this machine's /proc and /sys: the mount it names is the
    one findmnt (util-linux) names, with the options as mounted."""
    proc = ansible_module(str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    env = json.loads(proc.stdout.split("=>", 1)[1])["environment"]
    assert env["kernel"]["release"] == os.uname().release
    target, options, fstype = subprocess.run(
        ["findmnt", "-n", "-o", "TARGET,OPTIONS,FSTYPE", "--target", str(tmp_path)],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    mount = env["storage"]["mount"]
    assert (mount["mount_point"], mount["options"], mount["fstype"]) == (target, options, fstype)
    assert set(env["sysctl"]) == set(environment_sysctls())
    assert env["cpu"]["count"] == os.cpu_count()
    assert env["cpu"]["governor"]  # a governor, or that there is none


def environment_sysctls() -> list[str]:
    return [
        "vm.dirty_ratio", "vm.dirty_background_ratio", "vm.dirty_bytes",
        "vm.dirty_background_bytes", "vm.dirty_expire_centisecs",
        "vm.dirty_writeback_centisecs", "vm.swappiness",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("path", "message"),
    [("relative/path", "is not absolute"), ("/nonexistent/drivelab", "does not exist")],
)
def test_the_module_refuses_a_bad_path(path, message):
    proc = ansible_module(path)
    assert proc.returncode != 0
    assert message in proc.stdout, proc.stdout


# --------------------------------------------------------------------------- reading


def run_folder(tmp_path: Path, env_text: str | None) -> Path:
    run_dir = make_run(tmp_path, two())
    if env_text is not None:
        (run_dir / "environment.json").write_text(env_text, encoding="utf-8")
    return run_dir


def test_gathered_and_stored_as_the_run_fact(tmp_path):
    text = (ENV / "lab-nvme.json").read_text()
    run_dir = run_folder(tmp_path, text)
    g = gather.gather_run(run_dir)
    assert g.run.facts["environment"] == json.loads(text)
    with Store.open(tmp_path / "drivelab.db") as store:
        run_id = storing.record(store, g)
        sid = store.scenario(g.scenario).id
        (fact,) = [f for f in store.facts(sid, run_id) if f.key == "environment"]
    assert fact.scope == "run" and fact.value == json.loads(text)


def test_a_run_without_one_has_none(tmp_path):
    assert "environment" not in gather.gather_run(run_folder(tmp_path, None)).run.facts


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "environment.json: not JSON"),
        ("[]", "environment.json: the file must be a JSON object, not a list"),
        ('{"format": 1}', "environment.json: missing key 'postgresql'"),
        (
            json.dumps({**captured("lab-nvme.json"), "kernel": "6.1"}),
            "environment.json: 'kernel' must be an object, not a string",
        ),
        (
            json.dumps(
                {**captured("lab-nvme.json"), "postgresql": {"version": "15", "settings": []}}
            ),
            "environment.json: 'postgresql.settings' must be an object, not a list",
        ),
    ],
    ids=["not-json", "a-list", "no-sections", "kernel-a-string", "settings-a-list"],
)
def test_a_malformed_one_is_one_line_naming_the_file(tmp_path, text, message):
    with pytest.raises(DrivelabError, match=message) as err:
        gather.gather_run(run_folder(tmp_path, text))
    assert "\n" not in str(err.value)


def test_what_the_db_host_could_not_read_is_kept():
    env = {"format": 1, "host": "dbhost", "error": "Kernel, sysctls: path: /x does not exist"}
    assert environment.check(Path("environment.json"), env) == env
    assert environment.flatten(env) == {"error": env["error"], "host": "dbhost"}


# --------------------------------------------------------------------------- flatten, diff


def test_flatten():
    flat = environment.flatten(captured("throwaway-pg15-tmpfs.json"))
    # ALTER SYSTEM then a reload: the file says 64MB, the server still runs 128MB
    assert flat["postgresql.settings.shared_buffers"] == (
        "128.0 MiB (pending restart: the file says otherwise)"
    )
    assert flat["postgresql.settings.max_wal_size"] == "1.0 GiB"  # 1024 of MB
    assert flat["postgresql.settings.wal_sync_method"] == "open_datasync"
    assert flat["postgresql.version_num"] == 150018
    assert flat["storage.mount.fstype"] == "tmpfs"
    assert "captured_at" not in flat and "format" not in flat
    assert "storage.device" not in flat  # no block device under tmpfs: null, left out
    nvme = environment.flatten(captured("lab-nvme.json"))
    assert "noatime" in nvme["storage.mount.options"].split(",")
    assert "has_journal" in nvme["storage.filesystem.features"].split()
    assert nvme["postgresql.settings.client_connection_check_interval"] == "2000 ms"
    assert nvme["sysctl.vm.dirty_ratio"] == captured("lab-nvme.json")["sysctl"]["vm.dirty_ratio"]
    # sections in a fixed order, PostgreSQL first
    assert next(k for k in nvme if k != "host").startswith("postgresql.")


def test_xfs_and_a_multi_device_btrfs_of_the_lab():
    """The module's own output on the lab's xfs and Btrfs RAID10 mounts: xfs's options
    as mounted (its defaults spelled out), every Btrfs member's queue, numbered."""
    xfs = environment.flatten(captured("lab-module-xfs.json"))
    assert xfs["storage.mount.options"] == "rw,noatime,inode64,logbufs=8,logbsize=32k,noquota"
    assert xfs["storage.filesystem.features"] == "bigtime crc finobt inobtcount reflink sparse"
    r10 = environment.flatten(captured("lab-module-btrfs-raid10.json"))
    assert [r10[f"storage.members.{i}.name"] for i in (1, 2, 3, 4)] == [
        "loop4", "loop5", "loop6", "loop7",
    ]  # fmt: skip
    assert r10["storage.members.4.read_ahead_kb"] == 2560
    assert "free_space_tree" in r10["storage.filesystem.features"].split()
    # against itself on other devices: the names are identity, nothing else differs
    moved = json.loads(
        json.dumps(captured("lab-module-btrfs-raid10.json"))
        .replace("loop", "sd")
        .replace("eed8dbf0", "0000aaaa")
    )
    assert environment.diff(r10, environment.flatten(moved)) == []


def test_two_drives_of_the_lab():
    """Real captures of two lab drives (one machine, one server): the lab gives its
    hdd7200 class a rotating queue and a larger read-ahead; the device and path names
    differ too, and diff leaves those out unless asked."""
    a, b = (environment.flatten(captured(f"lab-{d}.json")) for d in ("nvme", "hdd7200"))
    found = [(d.key, d.left, d.right) for d in environment.diff(a, b)]
    assert found == [
        ("storage.queue.read_ahead_kb", 128, 2560),
        ("storage.queue.rotational", 0, 1),
    ]
    named = {d.key for d in environment.diff(a, b, identity=True)} - {k for k, _, _ in found}
    assert {"storage.mount.source", "storage.mount.mount_point", "storage.path"} <= named
    assert all(environment.is_identity(k) for k in named)


def test_diff_names_each_setting_that_differs():
    lab = environment.flatten(captured("lab-nvme.json"))
    mine = environment.flatten(captured("throwaway-pg15-tmpfs.json"))
    found = {d.key: (d.left, d.right) for d in environment.diff(lab, mine)}
    assert found["storage.mount.fstype"] == ("ext4", "tmpfs")
    assert found["postgresql.settings.wal_sync_method"][1] == "open_datasync"
    assert "kernel.release" not in found  # one machine
    assert not any(environment.is_identity(k) for k in found)


def with_setting(env: dict, name: str, value: str) -> dict:
    out = copy.deepcopy(env)
    out["postgresql"]["settings"][name] = {
        "setting": value, "unit": None, "source": "configuration file", "pending_restart": False,
    }  # fmt: skip
    return out


def test_a_setting_that_differs_within_a_side_varies():
    lab = captured("lab-nvme.json")
    one = with_setting(lab, "wal_sync_method", "fdatasync")
    other = with_setting(lab, "wal_sync_method", "open_datasync")
    side = environment.merge([one, one, other])
    value = side["postgresql.settings.wal_sync_method"]
    assert isinstance(value, environment.Varies)
    assert str(value) == "varies: fdatasync | open_datasync"
    # the same runs on the other side: still listed, that side is not one environment
    (d,) = environment.diff(side, environment.merge([one, one, other]))
    assert d.key == "postgresql.settings.wal_sync_method"
    assert environment.diff(environment.merge([one, one]), environment.flatten(one)) == []
    # a key only some runs have varies too, with "-" for the runs without it
    only = environment.merge([lab, with_setting(lab, "drivelab_test_only", "x")])
    assert str(only["postgresql.settings.drivelab_test_only"]) == "varies: - | x"


# --------------------------------------------------------------------------- the HTML report


def test_the_html_report_has_an_environment_table_per_drive(tmp_path):
    with Store.open(tmp_path / "drivelab.db") as store:
        for drive, name in (("nvme", "lab-nvme.json"), ("hdd7200", "lab-hdd7200.json")):
            run_dir = run_folder(tmp_path / drive, (ENV / name).read_text())
            meta = json.loads((run_dir / "run.json").read_text())
            meta["cell"]["drive"] = drive
            (run_dir / "run.json").write_text(json.dumps(meta))
            storing.record_run_dir(store, run_dir)
        view = load(store, meta["scenario"])
    page = html.render([view])
    section = page[page.index("<h3>Environment per drive") :]
    # first the rows that differ between the drives, then every row folded in <details>
    first = section[: section.index("</table>")]
    rows = first.split("<tr>")[2:]
    assert rows and all(r.endswith("<td>differs</td></tr>") for r in rows), rows
    section = section[: section.index("</details>")]
    assert "<summary>every setting (" in section
    nvme = captured("lab-nvme.json")
    assert "<th>nvme</th><th>hdd7200</th>" in section
    assert "noatime" in section and nvme["kernel"]["release"] in section
    assert "PostgreSQL port" in section and "vm.dirty_ratio" in section
    assert "differs" in section  # the mount's source: /dev/loopN, one per drive
