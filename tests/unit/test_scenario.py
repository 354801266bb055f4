"""Scenario files: shipped ones load and expand, malformed ones give one exact line."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector import scenario as sc
from collector.errors import DrivelabError
from collector.paths import REPO
from collector.scenario import pgsettings
from collector.scenario.inventory import SHELL_META

SCENARIOS = sorted((REPO / "scenarios").glob("*.yml"))
INVENTORY = sc.load_inventory(REPO / "tests" / "data" / "inventory")

BASE: dict[str, Any] = {
    "name": "t",
    "baseline": "hdd7200",
    "drives": ["nvme", "hdd7200"],
    "workload": {"scale": [5], "duration": 15},
    "hosts": [2],
    "repetitions": 2,
}


def write(tmp_path: Path, doc: Any, name: str = "x.yml") -> Path:
    path = tmp_path / name
    text = doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False)
    path.write_text(text, encoding="utf-8")
    return path


def with_(**changes: Any) -> dict[str, Any]:
    """BASE with top-level keys replaced; a value of None removes the key."""
    doc = copy.deepcopy(BASE)
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


def workload(**changes: Any) -> dict[str, Any]:
    w = {**BASE["workload"], **changes}
    return with_(workload={k: v for k, v in w.items() if v is not None})


# --- shipped scenarios -----------------------------------------------------------------------


def test_scenarios_are_shipped() -> None:
    names = {p.stem for p in SCENARIOS}
    assert {
        "seed-one-million-rows",
        "seed-ten-million-rows",
        "seed-two-clients",
        "raw-pretests",
        "filesystems",
        "raid",
        "client-sweep",
    } <= names


@pytest.mark.parametrize("size", [None, "lab"])
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_shipped_scenario_loads_validates_and_expands(path: Path, size: str | None) -> None:
    s = sc.load(path, size)
    assert s.name == path.stem
    assert s.size == size
    sc.validate_against_inventory(s, INVENTORY, path)
    cells = sc.expand(s, INVENTORY)
    assert cells
    assert len({c.cell_id for c in cells}) == len(cells)
    text = sc.plan_text(s, cells)
    for c in cells:
        assert c.cell_id in text
    assert "estimated duration" in text


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_lab_sizes_are_small(path: Path) -> None:
    s = sc.load(path, "lab")
    # scale 20 (~300 MB per client) at most, but the demo may go above twice the lab DB
    # host's memory so it measures the drive: scale 34 for 2 clients (~1.1 GB on 4 GiB)
    assert max(s.workload.scale) <= (40 if path.stem == "seed-two-clients" else 20)
    assert s.workload.duration == 15
    assert s.repetitions in (2, 3)
    assert max(s.hosts) <= 4


def test_seed_scenarios_match_the_seed() -> None:
    for stem, scale, hosts in [
        ("seed-one-million-rows", 100, 1),
        ("seed-ten-million-rows", 1000, 1),
        ("seed-two-clients", 1000, 2),
    ]:
        s = sc.load(REPO / "scenarios" / f"{stem}.yml")
        assert s.drives == ["nvme", "ssd", "hdd10k", "hdd7200"]
        assert s.baseline == "hdd7200"
        assert (s.workload.scale, s.hosts, s.repetitions) == ([scale], [hosts], 10)
        assert (s.workload.clients_per_host, s.workload.duration) == ([10], 500)


def test_demo_lab_size_takes_about_eight_minutes() -> None:
    s = sc.load(REPO / "scenarios" / "seed-two-clients.yml", "lab")
    cells = sc.expand(s, INVENTORY)
    assert [c.cell.drive for c in cells] == ["nvme", "ssd", "hdd10k", "hdd7200"]
    assert all(c.cell.hosts == ("client1", "client2") for c in cells)
    total = sum(sc.estimate_seconds(c) for c in cells)
    assert 6 * 60 <= total <= 8.5 * 60


# --- malformed scenarios: exactly one line each ----------------------------------------------

BAD: list[tuple[str, Any, str]] = [
    (
        "typo",
        workload(duraton=15, duration=None),
        "workload.duraton: unknown key (did you mean 'duration'?)",
    ),
    ("typo top level", with_(drivez=["ssd"]), "drivez: unknown key (did you mean 'drives'?)"),
    (
        "negative duration",
        workload(duration=-5),
        "workload.duration: must be greater than 0 (got -5)",
    ),
    ("drive listed twice", with_(drives=["nvme", "ssd", "nvme"]), "drives: 'nvme' listed twice"),
    ("empty matrix", with_(drives=[], baseline=None), "empty matrix: no drives and no raid sets"),
    ("scale not a number", workload(scale="big"), "workload.scale: must be a list (got 'big')"),
    (
        "scale item not a number",
        workload(scale=[5, "big"]),
        "workload.scale[1]: must be an integer (got 'big')",
    ),
    ("zero scale", workload(scale=[0]), "workload.scale[0]: must be at least 1 (got 0)"),
    (
        "duration and transactions",
        workload(transactions=1000),
        "workload: give duration (seconds, -T) or transactions (-t), one of them, not both",
    ),
    (
        "neither duration nor transactions",
        workload(duration=None),
        "workload: give duration (seconds, -T) or transactions (-t), one of them",
    ),
    (
        "shell metacharacters in a drive",
        with_(drives=["x; rm -rf /"]),
        "drives[0]: 'x; rm -rf /' is not a valid drive name ([a-z][a-z0-9_]{0,31})",
    ),
    (
        "dotdot script",
        workload(mode="custom", script="../etc/passwd"),
        "workload.script: '../etc/passwd': give a path below the scenario's folder, no '..'",
    ),
    (
        "missing script",
        workload(mode="custom", script="nope.sql"),
        "workload.script: 'nope.sql': no such file next to the scenario",
    ),
    (
        "custom without script",
        workload(mode="custom"),
        "workload: mode: custom needs script: (a pgbench script file)",
    ),
    (
        "bad mode",
        workload(mode="tpcc"),
        "workload.mode: must be one of 'tpcb', 'select-only', 'simple-update' or 'custom' (got 'tpcc')",
    ),
    ("missing name", with_(name=None), "name: required, missing"),
    (
        "name with a slash",
        with_(name="../x"),
        "name: '../x' is not a valid name ([a-z0-9][a-z0-9-]{0,63})",
    ),
    ("missing workload", with_(workload=None), "workload: required, missing"),
    (
        "baseline not a drive",
        with_(baseline="ssd"),
        "baseline: 'ssd' is not one of the drives (have: nvme, hdd7200)",
    ),
    ("zero hosts", with_(hosts=[0]), "hosts[0]: must be at least 1 (got 0)"),
    (
        "raid5 on btrfs",
        with_(raid=[{"name": "r5", "drives": ["raid1", "raid2", "raid3"], "level": "raid5"}]),
        "raid[0]: raid5 only with method: mdadm (Btrfs RAID5 is not used)",
    ),
    (
        "raid member is also a single drive",
        with_(
            filesystems=[{"fs": "btrfs"}],
            raid=[{"name": "r1", "drives": ["raid1", "nvme"], "level": "raid1"}],
        ),
        "raid[0].drives[1]: 'nvme' is also in drives (a RAID member cannot be measured alone in the same scenario)",
    ),
    (
        "btrfs raid without btrfs",
        with_(raid=[{"name": "r1", "drives": ["raid1", "raid2"], "level": "raid1"}]),
        "raid[0]: method btrfs needs fs: btrfs in filesystems (have: ext4)",
    ),
    (
        "raid10 of two",
        with_(
            raid=[{"name": "r", "drives": ["raid1", "raid2"], "level": "raid10", "method": "mdadm"}]
        ),
        "raid[0]: raid10 needs at least 4 drives (got 2)",
    ),
    (
        "write cache maybe",
        with_(write_cache="maybe"),
        "write_cache: must be leave, on or off, or a list of them (got 'maybe')",
    ),
    ("write cache twice", with_(write_cache=["on", "on"]), "write_cache: 'on' listed twice"),
    (
        "adaptive min 1",
        with_(repetitions={"adaptive": {"target_ci_pct": 5, "min": 1, "max": 10}}),
        "repetitions.adaptive.min: must be at least 2 (got 1)",
    ),
    (
        "adaptive max below min",
        with_(repetitions={"adaptive": {"target_ci_pct": 5, "min": 5, "max": 3}}),
        "repetitions.adaptive: max (3) must be at least min (5)",
    ),
    (
        "adaptive typo",
        with_(repetitions={"adaptive": {"target_ci": 5}}),
        "repetitions.adaptive.target_ci_pct: required, missing",
    ),
    ("zero repetitions", with_(repetitions=0), "repetitions: must be at least 1 (got 0)"),
    (
        "repetitions a string",
        with_(repetitions="three"),
        "repetitions: must be an integer (got 'three')",
    ),
    (
        "huge number",
        workload(duration=10**30),
        "workload.duration: must be at most 604800 (got 1000000000000000000000000000000)",
    ),
    (
        "filesystem twice",
        with_(filesystems=[{"fs": "ext4"}, {"fs": "ext4", "mount_options": "relatime"}]),
        "filesystems[1]: ext4 names two entries: give each entry of one fs a name (filesystems[].name) to measure them side by side",
    ),
    (
        "a variant named twice",
        with_(filesystems=[{"fs": "xfs", "name": "v"}, {"fs": "ext4", "name": "v"}]),
        "filesystems[1]: v names two entries: give each entry of one fs a name (filesystems[].name) to measure them side by side",
    ),
    (
        "a variant named as another type",
        with_(filesystems=[{"fs": "xfs", "name": "ext4"}]),
        "filesystems[0].name: 'ext4' is another filesystem's type",
    ),
    (
        "a variant name with a space",
        with_(filesystems=[{"fs": "xfs", "name": "xfs su"}]),
        "filesystems[0].name: 'xfs su' is not a valid filesystem variant name ([a-z][a-z0-9_-]{0,31})",
    ),
    (
        "mount options with a space",
        with_(filesystems=[{"fs": "ext4", "mount_options": "noatime,x y"}]),
        "filesystems[0].mount_options: 'noatime,x y' is not a valid mount option string ([A-Za-z0-9_=,.:/-]{1,200})",
    ),
    (
        "init option with a semicolon",
        workload(init_options=["--foreign-keys;reboot"]),
        "workload.init_options[0]: '--foreign-keys;reboot' is not a valid argument ([A-Za-z0-9_=,.:/+^-]{1,200})",
    ),
    (
        "placement typo",
        with_(placement=["tablespaces"]),
        "placement[0]: must be one of 'tablespace' or 'cluster' (got 'tablespaces')",
    ),
    (
        "pretests typo",
        with_(pretests={"fio": True, "pg_test_sync": True}),
        "pretests.pg_test_sync: unknown key (did you mean 'pg_test_fsync'?)",
    ),
    (
        "pretests runtime 0",
        with_(pretests={"fio": True, "runtime": 0}),
        "pretests.runtime: must be at least 1 (got 0)",
    ),
    (
        "pretests ramp below 0",
        with_(pretests={"fio": True, "ramp": -1}),
        "pretests.ramp: must be at least 0 (got -1)",
    ),
    (
        "pretests a string",
        with_(pretests="yes"),
        "pretests: must be false, true or {fio: bool or a matrix, pg_test_fsync: bool, runtime: s,"
        " ramp: s, fsync_seconds: s, write_cache: both|leave} (got 'yes')",
    ),
    (
        "size typo",
        with_(sizes={"lab": {"workload": {"durration": 5}}}),
        "sizes.lab.workload.durration: unknown key (did you mean 'duration'?)",
    ),
    (
        "size breaks a rule",
        with_(sizes={"lab": {"workload": {"transactions": 5}}}),
        "sizes.lab.workload: give duration (seconds, -T) or transactions (-t), one of them, not both",
    ),
    (
        "size renames",
        with_(sizes={"lab": {"name": "other"}}),
        "sizes.lab.name: a size cannot change name",
    ),
    ("not a mapping", "- a\n- b\n", "must be a mapping of keys (got list)"),
    ("empty file", "", "empty file"),
    (
        "yaml syntax",
        "name: t\ndrives: [nvme\nworkload: {}\n",
        "line 3: not valid YAML (expected ',' or ']', but got ':')",
    ),
    (
        "yaml tab",
        "name: t\n\tdrives: [nvme]\n",
        "line 2: not valid YAML (found character '\\t' that cannot start any token)",
    ),
    ("key twice", "name: t\nname: u\n", "line 2: not valid YAML (key 'name' given twice)"),
    ("non-string key", "name: t\nworkload: {1: 2}\n", "workload: key 1 is not a string"),
    ("yaml on for a name", "name: t\ndrives: [on]\n", "drives[0]: must be a string (got True)"),
]


@pytest.mark.parametrize(
    ("doc", "expected"), [(d, e) for _, d, e in BAD], ids=[n for n, _, _ in BAD]
)
def test_malformed_scenario_gives_one_line(tmp_path: Path, doc: Any, expected: str) -> None:
    path = write(tmp_path, doc)
    with pytest.raises(DrivelabError) as info:
        s = sc.load(path)
        sc.validate_against_inventory(s, INVENTORY, path)
    assert str(info.value) == f"{path}: {expected}"
    assert "\n" not in str(info.value)


INVENTORY_BAD: list[tuple[str, dict[str, Any], str]] = [
    (
        "unknown drive",
        with_(drives=["nvme", "ssd", "hdd5400"], baseline="nvme"),
        "drives[2]: 'hdd5400' is not a drive of dbhost"
        " (have: nvme, ssd, hdd10k, hdd7200, raid1, raid2, raid3, raid4)",
    ),
    ("too many hosts", with_(hosts=[1, 4]), "hosts[1]: 4 client hosts asked, the inventory has 2"),
    (
        "unknown raid member",
        with_(
            filesystems=[{"fs": "btrfs"}],
            raid=[{"name": "r1", "drives": ["raid1", "raid9"], "level": "raid1"}],
        ),
        "raid[0].drives[1]: 'raid9' is not a drive of dbhost"
        " (have: nvme, ssd, hdd10k, hdd7200, raid1, raid2, raid3, raid4)",
    ),
    (
        "raid set named like a drive",
        with_(
            filesystems=[{"fs": "btrfs"}],
            raid=[{"name": "ssd", "drives": ["raid1", "raid2"], "level": "raid1"}],
        ),
        "raid[0].name: 'ssd' is a drive of dbhost; a RAID set needs its own name",
    ),
]


@pytest.mark.parametrize(
    ("doc", "expected"), [(d, e) for _, d, e in INVENTORY_BAD], ids=[n for n, _, _ in INVENTORY_BAD]
)
def test_scenario_against_inventory(tmp_path: Path, doc: dict[str, Any], expected: str) -> None:
    path = write(tmp_path, doc)
    inventory = copy.deepcopy(INVENTORY)
    clients = inventory["all"]["children"]["clients"]["hosts"]
    for name in list(clients)[2:]:
        del clients[name]
    s = sc.load(path)
    with pytest.raises(DrivelabError) as info:
        sc.validate_against_inventory(s, inventory, path)
    assert str(info.value) == f"{path}: {expected}"


def test_missing_file_and_missing_size(tmp_path: Path) -> None:
    with pytest.raises(DrivelabError, match=r"^.*/nope\.yml: no such file$"):
        sc.load(tmp_path / "nope.yml")
    path = write(tmp_path, with_(sizes={"lab": {"repetitions": 2}}))
    with pytest.raises(DrivelabError) as info:
        sc.load(path, "huge")
    assert str(info.value) == f"{path}: sizes: no size 'huge' (have: lab)"


def test_inventory_without_db_host() -> None:
    s = sc.parse(BASE, "x.yml")
    with pytest.raises(DrivelabError, match=r"^inventory: no host in group db$"):
        sc.validate_against_inventory(s, {"all": {"children": {}}}, "x.yml")


# --- sizes and values ------------------------------------------------------------------------


def test_size_merges_mappings_and_replaces_lists(tmp_path: Path) -> None:
    doc = with_(
        workload={"scale": [100, 200], "duration": 500, "clients_per_host": 10},
        sizes={"lab": {"workload": {"scale": [5], "duration": 15}, "repetitions": 3}},
    )
    path = write(tmp_path, doc)
    full, lab = sc.load(path), sc.load(path, "lab")
    assert (full.workload.scale, full.workload.duration, full.repetitions) == ([100, 200], 500, 2)
    assert (lab.workload.scale, lab.workload.duration, lab.repetitions) == ([5], 15, 3)
    assert lab.workload.clients_per_host == [10]  # kept from the document


def test_a_size_says_its_own_description_or_is_said_to_be_one(tmp_path: Path) -> None:
    """The file's description is its full size's: a size that gives none runs with the
    file's words marked as the full size's; a size may give its own."""
    full = "two hosts, pgbench -c 10 -T 500 at scale 1000"
    doc = with_(description=full, sizes={"lab": {"workload": {"scale": [5]}},
                                         "own": {"description": "scale 5, for the lab"}})  # fmt: skip
    path = write(tmp_path, doc)
    assert sc.load(path).description == full
    assert sc.load(path, "lab").description == f"{full} [at full size; its 'lab' size ran]"
    assert sc.load(path, "own").description == "scale 5, for the lab"


def test_scalars_and_yaml_booleans(tmp_path: Path) -> None:
    text = "name: t\ndrives: [ssd]\nworkload: {scale: 7, transactions: 100}\nhosts: 2\nwrite_cache: [on, off]\n"
    s = sc.load(write(tmp_path, text))
    assert (s.workload.scale, s.hosts, s.write_cache) == ([7], [2], ["on", "off"])
    assert not s.pretests.enabled()


def test_custom_script_resolves_next_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "sql").mkdir()
    (tmp_path / "sql" / "mine.sql").write_text("SELECT 1;\n")
    s = sc.load(write(tmp_path, workload(mode="custom", script="sql/mine.sql")))
    cell = sc.expand(s, INVENTORY)[0].cell
    assert cell.pgbench.script == str((tmp_path / "sql" / "mine.sql").resolve())
    assert cell.pgbench.extra_vars()["pgbench_run_script"] == cell.pgbench.script
    assert cell.cell_id.endswith("-custom")


SHELL_SCRIPTS = [
    ("\\set aid random(1, 100000)\n\\shell touch /tmp/x\nSELECT 1;\n", 2, "\\shell"),
    ("SELECT 1;\n  \\SetShell n echo 1\n", 2, "\\SetShell"),
    ("\\set aid 1\nSELECT abalance FROM pgbench_accounts WHERE aid = :aid; \\shell rm x\n", 2, "\\shell"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "line", "word"), SHELL_SCRIPTS)
def test_a_custom_script_that_runs_shell_commands_needs_the_clients_to_allow_it(
    tmp_path: Path, text: str, line: int, word: str
) -> None:
    r"""pgbench's \shell and \setshell run a shell command on the client host at every
    transaction: refused in one line naming the script's line, unless every client's
    inventory sets pgbench_run_allow_shell (its role refuses the same on its own)."""
    script = tmp_path / "mine.sql"
    script.write_text(text)
    path = write(tmp_path, workload(mode="custom", script="mine.sql"))
    s = sc.load(path)
    with pytest.raises(DrivelabError) as info:
        sc.validate_against_inventory(s, INVENTORY, path)
    clients = sc.client_hosts(INVENTORY)
    assert str(info.value) == (
        f"{path}: workload.script: {script.resolve()} line {line} runs a shell command on the"
        f" client hosts (pgbench's {word}): allowed only where the clients' inventory sets"
        f" pgbench_run_allow_shell: true (not set for {clients[0]} and {len(clients) - 1} more)"
    )
    allowing = copy.deepcopy(INVENTORY)
    allowing["all"]["children"]["clients"]["vars"] = {"pgbench_run_allow_shell": True}
    sc.validate_against_inventory(s, allowing, path)


def test_a_custom_script_without_shell_commands_passes(tmp_path: Path) -> None:
    (tmp_path / "mine.sql").write_text("\\set aid random(1, 10)\n\\sleep 1 ms\nSELECT 'shell';\n")
    path = write(tmp_path, workload(mode="custom", script="mine.sql"))
    sc.validate_against_inventory(sc.load(path), INVENTORY, path)


def test_the_clients_role_looks_for_shell_commands_with_the_same_pattern() -> None:
    role_vars = yaml.safe_load((REPO / "roles/pgbench_run/vars/main.yml").read_text())
    pattern = role_vars["__pgbench_run_shell_pattern"]
    assert pattern == "(?i)" + SHELL_META.pattern


# --- expansion -------------------------------------------------------------------------------


def test_expansion_order_and_counts() -> None:
    s = sc.parse(
        with_(
            drives=["ssd", "hdd7200"],
            filesystems=[
                {"fs": "xfs"},
                {"fs": "ext4", "mkfs_options": ["-E", "lazy_itable_init=0"]},
            ],
            placement=["tablespace", "cluster"],
            workload={"scale": [5, 10], "duration": 15},
            hosts=[1, 2],
            write_cache=["on", "off"],
        ),
        "x.yml",
    )
    cells = sc.expand(s, INVENTORY)
    assert len(cells) == 2 * 2 * 2 * 2 * 2 * 2
    assert [c.index for c in cells] == list(range(1, 65))
    assert {c.total for c in cells} == {64}
    keys = [
        (
            c.cell.drive,
            c.cell.filesystem,
            c.cell.placement,
            c.cell.scale,
            len(c.cell.hosts),
            c.write_cache,
        )
        for c in cells
    ]
    order = {
        "ssd": 0,
        "hdd7200": 1,
        "xfs": 0,
        "ext4": 1,
        "tablespace": 0,
        "cluster": 1,
        "on": 0,
        "off": 1,
    }
    assert keys == sorted(
        keys, key=lambda k: (order[k[0]], order[k[1]], order[k[2]], k[3], k[4], order[k[5]])
    )
    # each filesystem is made once: one contiguous run of cells per drive request
    runs = [c.drive_request[0]["name"] + c.drive_request[0]["fs"] for c in cells]
    assert len([r for i, r in enumerate(runs) if i == 0 or runs[i - 1] != r]) == 4
    assert len({c.cell_id for c in cells}) == 64
    assert all(c.cell.cell_dir(Path("/r")).name == c.cell_id for c in cells)
    assert cells[0].cell_id == "ssd-xfs-tablespace-s5-h1-tpcb-wcon"
    assert cells[0].cell.hosts == ("client1",)
    assert cells[2].cell.hosts == ("client1", "client2")
    ext4 = next(c for c in cells if c.cell.filesystem == "ext4")
    assert ext4.drive_request == [
        {
            "name": "ssd",
            "drives": ["ssd"],
            "fs": "ext4",
            "mkfs_options": ["-E", "lazy_itable_init=0"],
            "mount_options": "noatime",
            "raid_level": "none",
            "raid_method": "btrfs",
        }
    ]


def test_two_drives_two_filesystems_two_repetitions() -> None:
    s = sc.parse(
        with_(
            drives=["nvme", "ssd"],
            baseline="nvme",
            filesystems=[{"fs": "ext4"}, {"fs": "xfs"}],
            hosts=[1],
        ),
        "x.yml",
    )
    cells = sc.expand(s, INVENTORY)
    assert [c.cell_id for c in cells] == [
        "nvme-ext4-tablespace-s5-h1-tpcb",
        "nvme-xfs-tablespace-s5-h1-tpcb",
        "ssd-ext4-tablespace-s5-h1-tpcb",
        "ssd-xfs-tablespace-s5-h1-tpcb",
    ]
    assert all(c.repetitions == 2 and c.adaptive is None for c in cells)
    assert all(c.write_cache == "leave" for c in cells)
    assert sc.estimate_seconds(cells[0]) == 2 * (15 + 25) + sc.init_seconds(cells[0])
    text = sc.plan_text(s, cells)
    assert text.splitlines()[0] == "scenario t: 4 cells x 2 repetitions"
    assert text.splitlines()[-1].startswith("estimated duration: about ")


def test_drives_made_together_only_when_every_filesystem_can_stand_at_once() -> None:
    """Two drives with one filesystem each, over two placements: one drives stage for
    both, in run order. The same drive ext4 then xfs, drives shared by RAID sets, a
    write cache to switch, or one filesystem alone: a drives stage per cell, as before."""
    two = sc.parse(
        with_(drives=["nvme", "ssd"], baseline="nvme", placement=["tablespace", "cluster"]),
        "x.yml",
    )
    cells = sc.expand(two, INVENTORY)
    batch = sc.drive_batch(cells)
    assert [r["name"] for r in batch] == ["nvme", "ssd"]
    assert batch == [cells[0].drive_request[0], cells[-1].drive_request[0]]

    reformatted = with_(
        drives=["nvme", "ssd"], baseline="nvme", filesystems=[{"fs": "ext4"}, {"fs": "xfs"}]
    )
    assert sc.drive_batch(sc.expand(sc.parse(reformatted, "x.yml"), INVENTORY)) is None
    raid = sc.expand(sc.load(REPO / "scenarios" / "raid.yml"), INVENTORY)
    assert sc.drive_batch(raid) is None  # r0, r1 and r10 share raid1 and raid2
    assert sc.drive_batch([raid[0], raid[1]]) is not None  # hdd7200 and r0: disjoint
    cached = sc.parse(
        with_(drives=["nvme", "ssd"], baseline="nvme", write_cache=["on", "off"]), "x.yml"
    )
    assert sc.drive_batch(sc.expand(cached, INVENTORY)) is None
    assert sc.drive_batch(cells[:2]) is None  # nvme alone


def test_raid_drive_requests() -> None:
    s = sc.load(REPO / "scenarios" / "raid.yml")
    cells = sc.expand(s, INVENTORY)
    assert [c.cell.drive for c in cells] == ["hdd7200", "r0", "r1", "r10"]
    members = ["raid1", "raid2", "raid3", "raid4"]
    assert cells[3].drive_request == [
        {
            "name": "r10",
            "drives": members,
            "fs": "btrfs",
            "mkfs_options": [],
            "mount_options": "noatime",
            "raid_level": "raid10",
            "raid_method": "btrfs",
        }
    ]
    assert [c.drive_request[0]["raid_level"] for c in cells] == ["none", "raid0", "raid1", "raid10"]
    assert all(c.cell.filesystem == "btrfs" for c in cells)


def test_btrfs_raid_only_with_btrfs_entries() -> None:
    s = sc.parse(
        with_(
            drives=["ssd"],
            baseline="ssd",
            filesystems=[{"fs": "ext4"}, {"fs": "btrfs"}],
            raid=[
                {"name": "r1", "drives": ["raid1", "raid2"], "level": "raid1"},
                {
                    "name": "m5",
                    "drives": ["raid1", "raid2", "raid3"],
                    "level": "raid5",
                    "method": "mdadm",
                },
            ],
        ),
        "x.yml",
    )
    cells = sc.expand(s, INVENTORY)
    assert [(c.cell.drive, c.cell.filesystem) for c in cells] == [
        ("ssd", "ext4"),
        ("ssd", "btrfs"),
        ("r1", "btrfs"),
        ("m5", "ext4"),
        ("m5", "btrfs"),
    ]
    assert cells[3].drive_request[0]["raid_method"] == "mdadm"


def test_adaptive_and_pretests() -> None:
    s = sc.parse(
        with_(
            filesystems=[{"fs": "ext4"}, {"fs": "xfs"}],
            placement=["tablespace", "cluster"],
            repetitions={"adaptive": {"target_ci_pct": 5, "min": 3, "max": 10}},
            pretests={"fio": True},
        ),
        "x.yml",
    )
    cells = sc.expand(s, INVENTORY)
    assert all(c.adaptive == sc.AdaptivePolicy(5.0, 3, 10) and c.repetitions == 3 for c in cells)
    with_pretests = [
        (c.cell.drive, c.cell.filesystem, c.cell.placement) for c in cells if c.pretests
    ]
    assert with_pretests == [
        ("nvme", "ext4", "tablespace"),
        ("nvme", "xfs", "tablespace"),
        ("hdd7200", "ext4", "tablespace"),
        ("hdd7200", "xfs", "tablespace"),
    ]
    assert cells[0].pretests == {
        "fio": True,
        "pg_test_fsync": False,
        "runtime": 30,
        "ramp": 1,
        "fsync_seconds": 5,
        "write_cache": "both",
        "jobs": [],
    }
    assert not cells[1].pretests
    # 12 fio jobs of 30 s + 1 s ramp, plus the layout
    fio = 12 * 31 + sc.PRETEST_SECONDS["fio"]
    assert sc.estimate_seconds(cells[0]) == 10 * 40 + sc.init_seconds(cells[0]) + fio
    assert "3 to 10 repetitions" in sc.plan_text(s, cells)


def test_pretests_without_ramp() -> None:
    """ramp 0: fio's jobs count from their first second, and the estimate says so."""
    s = sc.parse(with_(pretests={"fio": True, "runtime": 2, "ramp": 0}), "x.yml")
    cell = sc.expand(s, INVENTORY)[0]
    assert cell.pretests["ramp"] == 0
    assert sc.pretest_seconds(cell.pretests) == 12 * 2 + sc.PRETEST_SECONDS["fio"]


def test_transactions_estimate() -> None:
    s = sc.parse(workload(duration=None, transactions=1000), "x.yml")
    cell = sc.expand(s, INVENTORY)[0]
    assert (cell.cell.pgbench.duration, cell.cell.pgbench.transactions) == (0, 1000)
    assert sc.repetition_seconds(cell) == 1000 / sc.TPS_PER_CLIENT_GUESS + 25


def test_clients_in_numeric_order() -> None:
    inventory = copy.deepcopy(INVENTORY)
    assert sc.client_hosts(inventory)[:3] == ["client1", "client2", "client3"]
    assert sc.client_hosts(inventory)[-1] == "client16"
    s = sc.parse(with_(hosts=[10]), "x.yml")
    assert sc.expand(s, inventory)[0].cell.hosts[-2:] == ("client9", "client10")


# --- hypothesis: nothing but DrivelabError ---------------------------------------------------

TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        ["x; rm -rf /", "$(reboot)", "`id`", "a\nb", "../..", "ü", "🐘", "nvme", "ssd", "raid1", ""]
    ),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(TEXT, st.integers(), st.none()), inner, max_size=4),
    ),
    max_leaves=12,
)
KEYS = st.sampled_from(
    [
        "name",
        "description",
        "baseline",
        "drives",
        "filesystems",
        "raid",
        "placement",
        "write_cache",
        "workload",
        "hosts",
        "repetitions",
        "pretests",
        "postgresql",
        "postgresql.settings",
        "postgresql.settings.fsync",
        "postgresql.sets",
        "postgresql.sets.fast",
        "postgresql.sets.fast.wal_sync_method",
        "sizes",
        "workload.scale",
        "workload.duration",
        "workload.transactions",
        "workload.mode",
        "workload.script",
        "workload.clients_per_host",
        "workload.init_options",
        "repetitions.adaptive",
        "sizes.lab",
        "sizes.lab.workload",
        "raid.0",
        "filesystems.0",
        "bogus",
        "workload.bogus",
    ]
)


def _set(doc: dict[str, Any], dotted: str, value: Any) -> None:
    """Sets doc[a][b]... to value, making (or replacing by) mappings and lists on the way."""
    node: Any = doc
    parts = [int(p) if p.isdigit() else p for p in dotted.split(".")]
    for step, nxt in zip(parts, [*parts[1:], None], strict=True):
        part = step
        if isinstance(step, int):  # the parent is a list here
            node[:] = node or [None]
            part = 0
        if nxt is None:
            node[part] = value
            return
        child = node[part] if isinstance(node, list) else node.get(part)
        want = list if isinstance(nxt, int) else dict
        if not isinstance(child, want):
            child = want()
            node[part] = child
        node = child


def _valid_start() -> dict[str, Any]:
    return with_(
        filesystems=[{"fs": "btrfs"}],
        raid=[{"name": "r1", "drives": ["raid1", "raid2"], "level": "raid1"}],
        sizes={"lab": {"workload": {"scale": [1]}}},
    )


def _survives(doc: Any, tmp: Path) -> None:
    for attempt in (
        lambda: sc.parse(doc, "x.yml", size="lab", base=tmp),
        lambda: _via_file(doc, tmp),
    ):
        try:
            s = attempt()
            sc.validate_against_inventory(s, INVENTORY, "x.yml")
            cells = sc.expand(s, INVENTORY)
            sc.plan_text(s, cells)
        except DrivelabError as exc:
            assert "\n" not in str(exc)


def _via_file(doc: Any, tmp: Path) -> sc.Scenario:
    path = tmp / "h.yml"
    try:
        path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    except (yaml.YAMLError, UnicodeEncodeError):
        path.write_text("name: [\n", encoding="utf-8")
    return sc.load(path)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(changes=st.lists(st.tuples(KEYS, VALUES), max_size=4))
def test_hypothesis_mutated_scenarios(tmp_path: Path, changes: list[tuple[str, Any]]) -> None:
    doc = _valid_start()
    for key, value in changes:
        _set(doc, key, value)
    _survives(doc, tmp_path)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(doc=VALUES)
def test_hypothesis_random_documents(tmp_path: Path, doc: Any) -> None:
    _survives(doc, tmp_path)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(max_size=200))
def test_hypothesis_random_text(tmp_path: Path, text: str) -> None:
    path = tmp_path / "t.yml"
    path.write_text(text, encoding="utf-8")
    try:
        sc.load(path)
    except DrivelabError as exc:
        assert "\n" not in str(exc)


# --- PostgreSQL settings: postgresql.settings and named sets -----------------------------------

PG = {
    "settings": {"checkpoint_timeout": "5min", "full_page_writes": True},
    "sets": {
        "fdatasync": {"wal_sync_method": "fdatasync"},
        "open_datasync": {"wal_sync_method": "open_datasync", "checkpoint_timeout": 600},
    },
}


def test_each_set_is_one_more_axis_value_changed_last() -> None:
    s = sc.parse(with_(postgresql=PG, write_cache=["on", "off"], hosts=[1]), "x.yml")
    cells = sc.expand(s, INVENTORY)
    assert [c.cell_id for c in cells[:4]] == [
        "nvme-ext4-tablespace-s5-h1-tpcb-wcon-pgfdatasync",
        "nvme-ext4-tablespace-s5-h1-tpcb-wcon-pgopen_datasync",
        "nvme-ext4-tablespace-s5-h1-tpcb-wcoff-pgfdatasync",
        "nvme-ext4-tablespace-s5-h1-tpcb-wcoff-pgopen_datasync",
    ]
    assert len(cells) == 2 * 2 * 2  # drives x write cache x sets
    first, second = cells[0].cell, cells[1].cell
    # a set's settings go over those of every cell; true is written on, numbers as text
    assert dict(first.pg_settings) == {
        "checkpoint_timeout": "5min",
        "full_page_writes": "on",
        "wal_sync_method": "fdatasync",
    }
    assert dict(second.pg_settings) == {
        "checkpoint_timeout": "600",
        "full_page_writes": "on",
        "wal_sync_method": "open_datasync",
    }
    assert (first.spec.pg_settings_name, second.spec.pg_settings_name) == (
        "fdatasync",
        "open_datasync",
    )
    assert first.spec.test == "tpcb ext4 tablespace s5 1cl c4 j2 T15 wc on pg fdatasync"
    assert first.spec.key == "nvme " + first.spec.test
    # only the drives stage's request changes with the write cache, never with a set
    assert cells[0].drive_request == cells[1].drive_request
    assert cells[0].pretests == {} and cells[1].pretests == {}


def test_settings_without_sets_name_no_cell() -> None:
    s = sc.parse(with_(postgresql={"settings": {"shared_buffers": "256MB"}}), "x.yml")
    cells = sc.expand(s, INVENTORY)
    plain = sc.expand(sc.parse(with_(), "x.yml"), INVENTORY)
    assert [c.cell_id for c in cells] == [c.cell_id for c in plain]
    assert all(dict(c.cell.pg_settings) == {"shared_buffers": "256MB"} for c in cells)
    assert all(c.cell.spec.pg_settings_name is None for c in cells)
    assert all(dict(c.cell.pg_settings) == {} for c in plain)


def test_a_set_without_settings_is_postgresql_as_configured() -> None:
    s = sc.parse(with_(postgresql={"sets": {"stock": {}, "nofpw": {"full_page_writes": False}}}))
    assert [dict(c.cell.pg_settings) for c in sc.expand(s, INVENTORY)[:2]] == [
        {},
        {"full_page_writes": "off"},
    ]


def test_the_plan_lists_the_settings() -> None:
    s = sc.parse(with_(postgresql=PG, drives=["nvme"], baseline=None), "x.yml")
    text = sc.plan_text(s, sc.expand(s, INVENTORY))
    assert "PostgreSQL settings of every cell: checkpoint_timeout=5min, full_page_writes=on" in text
    assert "PostgreSQL set fdatasync: wal_sync_method=fdatasync" in text
    assert (
        "PostgreSQL set open_datasync: checkpoint_timeout=600, wal_sync_method=open_datasync"
        in (text)
    )
    assert "nvme-ext4-tablespace-s5-h2-tpcb-pgopen_datasync" in text


def test_a_size_can_give_other_settings(tmp_path: Path) -> None:
    doc = with_(postgresql=PG, sizes={"lab": {"postgresql": {"sets": {"only": {"fsync": "off"}}}}})
    s = sc.load(write(tmp_path, doc), size="lab")
    # mappings merge key by key: the size adds a set to the file's
    assert list(s.postgresql.sets) == ["fdatasync", "open_datasync", "only"]


#: every setting drivelab keeps for itself, and those that would stop the run
OWNED_NAMES = [
    "listen_addresses", "port", "password_encryption", "tcp_keepalives_idle",
    "tcp_keepalives_interval", "tcp_keepalives_count", "tcp_user_timeout",
    "client_connection_check_interval", "log_checkpoints", "log_line_prefix", "log_timezone",
    "track_io_timing", "track_wal_io_timing",
]  # fmt: skip


@pytest.mark.parametrize("name", OWNED_NAMES)
def test_a_setting_drivelab_owns_is_refused_in_one_line(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, with_(postgresql={"sets": {"fast": {name: "on"}}}))
    with pytest.raises(DrivelabError) as info:
        sc.load(path)
    why = sc.PG_RULES.OWNED[name]
    assert str(info.value) == (
        f"{path}: postgresql.sets.fast.{name}: drivelab sets {name} itself ({why}):"
        " not a setting to give"
    )


#: settings that make the server run a shell command or load code
RUNS_CODE_NAMES = [
    "archive_command", "archive_cleanup_command", "restore_command", "recovery_end_command",
    "ssl_passphrase_command", "archive_library", "jit_provider", "dynamic_library_path",
]  # fmt: skip


def _db_vars(inventory: dict[str, Any]) -> dict[str, Any]:
    hosts = inventory["all"]["children"]["db"]["hosts"]
    return hosts[next(iter(hosts))]


@pytest.mark.parametrize("name", RUNS_CODE_NAMES)
def test_a_setting_that_runs_code_needs_the_db_hosts_inventory_to_allow_it(
    tmp_path: Path, name: str
) -> None:
    """A scenario file may come from anyone; the DB host's operator allows by name. The
    file loads (its names are PostgreSQL's), the inventory check refuses it in one line,
    and the same inventory listing the name lets it through."""
    path = write(tmp_path, with_(postgresql={"sets": {"arch": {name: "touch /tmp/x"}}}))
    s = sc.load(path)
    with pytest.raises(DrivelabError) as info:
        sc.validate_against_inventory(s, INVENTORY, path)
    assert str(info.value) == (
        f"{path}: postgresql.sets.arch.{name}: {name} runs {sc.PG_RULES.RUNS_CODE[name]}: set"
        f" only where the DB host's inventory allows it (postgresql_server_allow_commands:"
        f" [{name}])"
    )
    allowing = copy.deepcopy(INVENTORY)
    _db_vars(allowing)["postgresql_server_allow_commands"] = [name]
    sc.validate_against_inventory(s, allowing, path)
    # allowing one does not allow the others
    other = next(n for n in RUNS_CODE_NAMES if n != name)
    s2 = sc.load(write(tmp_path, with_(postgresql={"settings": {other: "x"}})))
    with pytest.raises(DrivelabError, match=f"postgresql.settings.{other}: {other} runs "):
        sc.validate_against_inventory(s2, allowing, path)


@pytest.mark.parametrize(
    ("allow", "why"),
    [
        ("archive_command", "must be a list of setting names (got 'archive_command')"),
        (["port"], "'port' is not a setting that runs code (those are: archive_cleanup_command,"),
    ],
)
def test_an_allow_list_that_names_no_such_setting_is_refused(tmp_path, allow, why) -> None:
    path = write(tmp_path, with_())
    inventory = copy.deepcopy(INVENTORY)
    _db_vars(inventory)["postgresql_server_allow_commands"] = allow
    with pytest.raises(DrivelabError) as info:
        sc.validate_against_inventory(sc.load(path), inventory, path)
    assert str(info.value).startswith(f"{path}: inventory: dbhost postgresql_server_allow_commands")
    assert why in str(info.value)


def test_the_host_rules_name_every_setting_that_runs_code() -> None:
    assert sorted(sc.PG_RULES.RUNS_CODE) == sorted(RUNS_CODE_NAMES)
    # an owned name stays owned whatever the allow list says
    assert "itself" in sc.PG_RULES.name_problem("port", allowed=["port"])
    assert sc.PG_RULES.name_problem("archive_command", ["archive_command"]) is None


PG_BAD: list[tuple[str, Any, str]] = [
    (
        "owned, for every cell",
        {"settings": {"port": 5433}},
        "postgresql.settings.port: drivelab sets port itself (where the clients and drivelab's"
        " own tasks reach the server): not a setting to give",
    ),
    (
        "a data directory elsewhere",
        {"settings": {"data_directory": "/tmp/x"}},
        "postgresql.settings.data_directory: data_directory would stop the run (pg_ctlcluster"
        " and drivelab find the cluster's files where Debian's layout puts them): not a setting"
        " to give",
    ),
    (
        "a library to preload",
        {"sets": {"pgss": {"shared_preload_libraries": "pg_stat_statements"}}},
        "postgresql.sets.pgss.shared_preload_libraries: shared_preload_libraries would stop the"
        " run (a library the server cannot load stops it (or every connection), and drivelab"
        " installs none): not a setting to give",
    ),
    (
        "a set named like no drive",
        {"sets": {"Fast-1": {"fsync": "off"}}},
        "postgresql.sets.Fast-1: 'Fast-1' is not a valid set name ([a-z][a-z0-9_]{0,31})",
    ),
    (
        "an extension's setting",
        {"settings": {"pg_stat_statements.max": 1000}},
        "postgresql.settings.pg_stat_statements.max: 'pg_stat_statements.max' is not a setting"
        " name ([a-z_][a-z0-9_]{0,62})",
    ),
    (
        "an upper-case name",
        {"settings": {"Shared_Buffers": "1GB"}},
        "postgresql.settings.Shared_Buffers: write Shared_Buffers in lower case: shared_buffers"
        " (PostgreSQL ignores the case)",
    ),
    (
        "no value",
        {"sets": {"fast": {"wal_sync_method": None}}},
        "postgresql.sets.fast.wal_sync_method: must be a string, a number or true/false (got None)",
    ),
    (
        "a list for a value",
        {"settings": {"search_path": ["a", "b"]}},
        "postgresql.settings.search_path: must be a string, a number or true/false (got ['a', 'b'])",
    ),
    (
        "a quote in a value",
        {"settings": {"application_name": "x' ; y"}},
        'postgresql.settings.application_name: "x\' ; y": no quotes, backslashes, braces or'
        " control characters",
    ),
    (
        "a newline in a value",
        {"settings": {"application_name": "x\nport = 1"}},
        "postgresql.settings.application_name: 'x\\nport = 1': no quotes, backslashes, braces or"
        " control characters",
    ),
    (
        "a template in a value (Ansible would render it)",
        {"settings": {"application_name": "{{ lookup('pipe', 'id') }}"}},
        "postgresql.settings.application_name: \"{{ lookup('pipe', 'id') }}\": no quotes,"
        " backslashes, braces or control characters",
    ),
    (
        "a set that is not a mapping",
        {"sets": {"fast": "fsync=off"}},
        "postgresql.sets.fast: must be a mapping of setting: value (got 'fsync=off')",
    ),
    (
        "settings as a list",
        {"settings": ["fsync"]},
        "postgresql.settings: must be a mapping of setting: value (got ['fsync'])",
    ),
    ("a misspelt key", {"set": {}}, "postgresql.set: unknown key (did you mean 'sets'?)"),
    (
        "sets: null",
        {"sets": None},
        "postgresql.sets: must be a mapping of set name: settings (got None)",
    ),
]


@pytest.mark.parametrize(
    ("pg", "expected"), [(d, e) for _, d, e in PG_BAD], ids=[n for n, _, _ in PG_BAD]
)
def test_bad_postgresql_settings_give_one_line(tmp_path: Path, pg: Any, expected: str) -> None:
    path = write(tmp_path, with_(postgresql=pg))
    with pytest.raises(DrivelabError) as info:
        sc.load(path)
    assert str(info.value) == f"{path}: {expected}"


def test_too_many_sets(tmp_path: Path) -> None:
    sets = {f"s{i}": {} for i in range(33)}
    with pytest.raises(DrivelabError, match=r"postgresql\.sets: at most 32 sets$"):
        sc.load(write(tmp_path, with_(postgresql={"sets": sets})))


# --- the server's own verdict: postgres -C of the installed PostgreSQL 15, captured -------------
# (tests/data/pgsettings/README.md says how; the DB host's module and drivelab run read
# these outputs with the same functions, roles/postgresql_server/module_utils/drivelab_pgsettings.py)

PGDATA = REPO / "tests" / "data" / "pgsettings"
CAPTURED = json.loads((PGDATA / "pg15-cases.json").read_text(encoding="utf-8"))
KNOWN = sc.PG_RULES.describe_config((PGDATA / "pg15-describe-config.txt").read_text())
CASES = {(c["name"], c["value"]): c for c in CAPTURED["cases"]}
RULES = sc.PG_RULES


def _verdict(name: str, value: str) -> dict[str, Any]:
    """What the host module answers for (name, value): the captured output, read."""
    case = CASES[(name, value)]
    out = RULES.verdict(name, value, case["rc"], case["stdout"], case["stderr"], KNOWN)
    return {**out, "context": KNOWN.get(name, {}).get("context")}


def _answer(s: sc.Scenario) -> dict[str, Any]:
    asked = pgsettings.to_ask(s)
    assert all((p["name"], p["value"]) in CASES for p in asked), "capture these cases first"
    return {"host": "dbhost", "version": "15", "verdicts": [_verdict(**p) for p in asked]}


def test_the_capture_is_of_postgresql_15() -> None:
    assert CAPTURED["server"].startswith("PostgreSQL 15.")
    assert len(KNOWN) > 300 and KNOWN["shared_buffers"]["context"] == "postmaster"
    assert KNOWN["wal_sync_method"] == {"context": "sighup", "vartype": "enum"}


def test_the_names_drivelab_keeps_are_postgresql_15s() -> None:
    """A misspelt name in the lists would let the real one through."""
    rows = json.loads((PGDATA / "pg15-pg_settings.json").read_text(encoding="utf-8"))
    names = {r["name"] for r in rows}
    assert set(RULES.OWNED) | set(RULES.STOPS_THE_RUN) <= names
    # every setting fits the pattern, written in lower case (PostgreSQL ignores the case)
    assert all(RULES.NAME.fullmatch(n.lower()) for n in names)
    assert RULES.name_problem("TimeZone") == (
        "write TimeZone in lower case: timezone (PostgreSQL ignores the case)"
    )


def test_describe_config_gives_the_contexts_pg_settings_has() -> None:
    rows = json.loads((PGDATA / "pg15-pg_settings.json").read_text(encoding="utf-8"))
    contexts = {r["name"]: r["context"] for r in rows}
    assert {n: KNOWN[n]["context"] for n in KNOWN} == {n: contexts[n] for n in KNOWN}


@pytest.mark.parametrize("case", CAPTURED["cases"], ids=lambda c: f"{c['name']}={c['value']}")
def test_the_servers_verdict_is_read_as_it_gave_it(case: dict[str, Any]) -> None:
    v = _verdict(case["name"], case["value"])
    assert v["ok"] == (case["rc"] == 0)
    if v["ok"]:
        assert v["setting"] == case["stdout"].strip()
    else:
        assert v["message"] and "\n" not in v["message"]
        assert ("FATAL" in v["message"]) is False  # the prefix and level are cut


@pytest.mark.parametrize(
    ("name", "near"),
    [("wal_sync_methd", "wal_sync_method"), ("shared_buffer", "shared_buffers"),
     ("checkpoint_timout", "checkpoint_timeout")],
)  # fmt: skip
def test_an_unknown_name_is_said_with_the_closest_known(name: str, near: str) -> None:
    value = next(v for (n, v) in CASES if n == name)
    v = _verdict(name, value)
    assert v["unknown"] and v["message"] == f"has no setting {name} (did you mean {near!r}?)"


@pytest.mark.parametrize(
    "case",
    [c for c in CAPTURED["cases"] if "server" in c],
    ids=lambda c: f"{c['name']}={c['value']}",
)
def test_every_accepted_value_took_once_the_server_restarted(case: dict[str, Any]) -> None:
    """The after-apply check on the real pg_settings rows: what -C said the value is, is
    what the server has (wal_buffers -1: the server's own choice, source override)."""
    row = case["server"]
    expected = case["stdout"].strip()
    assert RULES.took(case["name"], expected, row, row["sourcefile"]) is None
    assert row["source"] in ("configuration file", "override")


def test_a_value_the_server_starts_without_is_recorded() -> None:
    """-C reads one setting; the server checks some against others only when it starts:
    max_wal_size 10MB is a valid value, but not with 16 MB WAL segments. drivelab's
    database stage fails then (the start's FATAL line), the runner goes on."""
    case = CASES[("max_wal_size", "10MB")]
    assert case["rc"] == 0 and case["start_failed"] == (
        '"max_wal_size" must be at least twice "wal_segment_size"'
    )


def test_after_a_reload_a_postmaster_setting_waits_for_a_restart() -> None:
    reload = CAPTURED["reload"]
    rows = {r["name"]: r for r in reload["rows_after_reload"]}
    conf = rows["wal_sync_method"]["sourcefile"]
    assert RULES.took("wal_sync_method", "open_datasync", rows["wal_sync_method"], conf) is None
    assert rows["shared_buffers"]["context"] == "postmaster"
    assert RULES.took("shared_buffers", "32768", rows["shared_buffers"], conf) == (
        "changed in the file, but the server still waits for a restart (pending_restart)"
    )
    # before the reload, the old value is not the one asked
    before = {r["name"]: r for r in reload["rows_before"]}
    assert RULES.took("wal_sync_method", "open_datasync", before["wal_sync_method"], conf) == (
        f"asked open_datasync, the server has fdatasync (from {conf} line 1)"
    )


def test_a_setting_another_file_overrides_did_not_take() -> None:
    row = {"name": "shared_buffers", "setting": "16384", "unit": "8kB", "pending_restart": False,
           "source": "configuration file", "sourceline": 3,
           "sourcefile": "/var/lib/postgresql/15/drivelab/postgresql.auto.conf"}  # fmt: skip
    conf = "/etc/postgresql/15/drivelab/conf.d/drivelab.conf"
    assert RULES.took("shared_buffers", "32768", row, conf) == (
        "asked 32768 8kB, the server has 16384 8kB (from /var/lib/postgresql/15/drivelab/"
        "postgresql.auto.conf line 3, read after /etc/postgresql/15/drivelab/conf.d/drivelab.conf)"
    )
    assert (
        RULES.took("shared_buffers", "32768", None) == "the server does not list it in pg_settings"
    )


SERVER_REFUSES: list[tuple[str, Any, str]] = [
    (
        "unknown name, in a set",
        {"sets": {"fast": {"wal_sync_methd": "fdatasync"}}},
        "postgresql.sets.fast.wal_sync_methd: PostgreSQL 15 on dbhost has no setting"
        " wal_sync_methd (did you mean 'wal_sync_method'?)",
    ),
    (
        "a unit PostgreSQL does not parse",
        {"settings": {"shared_buffers": "12XB"}},
        "postgresql.settings.shared_buffers: PostgreSQL 15 on dbhost refuses '12XB': invalid"
        ' value for parameter "shared_buffers": "12XB" (Valid units for this parameter are'
        ' "B", "kB", "MB", "GB", and "TB".)',
    ),
    (
        "units are case-sensitive",
        {"settings": {"shared_buffers": "128mb"}},
        "postgresql.settings.shared_buffers: PostgreSQL 15 on dbhost refuses '128mb': invalid"
        ' value for parameter "shared_buffers": "128mb" (Valid units for this parameter are'
        ' "B", "kB", "MB", "GB", and "TB".)',
    ),
    (
        "below the minimum",
        {"sets": {"short": {"checkpoint_timeout": "29s"}}},
        "postgresql.sets.short.checkpoint_timeout: PostgreSQL 15 on dbhost refuses '29s': 29 s"
        ' is outside the valid range for parameter "checkpoint_timeout" (30 .. 86400)',
    ),
    (
        "a time for a size",
        {"settings": {"checkpoint_timeout": "5MB"}},
        "postgresql.settings.checkpoint_timeout: PostgreSQL 15 on dbhost refuses '5MB': invalid"
        ' value for parameter "checkpoint_timeout": "5MB" (Valid units for this parameter are'
        ' "us", "ms", "s", "min", "h", and "d".)',
    ),
    (
        "not one of the enum's values on this platform",
        {"sets": {"wt": {"wal_sync_method": "fsync_writethrough"}}},
        "postgresql.sets.wt.wal_sync_method: PostgreSQL 15 on dbhost refuses"
        " 'fsync_writethrough': invalid value for parameter \"wal_sync_method\":"
        ' "fsync_writethrough" (Available values: fsync, fdatasync, open_sync, open_datasync.)',
    ),
    (
        "not a boolean",
        {"settings": {"fsync": "maybe"}},
        "postgresql.settings.fsync: PostgreSQL 15 on dbhost refuses 'maybe': parameter"
        ' "fsync" requires a Boolean value',
    ),
    (
        "a real above its maximum",
        {"settings": {"checkpoint_completion_target": 1.5}},
        "postgresql.settings.checkpoint_completion_target: PostgreSQL 15 on dbhost refuses"
        " '1.5': 1.5 is outside the valid range for parameter \"checkpoint_completion_target\""
        " (0 .. 1)",
    ),
    (
        "fixed when built",
        {"settings": {"block_size": 8192}},
        "postgresql.settings.block_size: PostgreSQL 15 on dbhost will not change it: parameter"
        ' "block_size" cannot be changed (fixed when PostgreSQL was built or the cluster made)',
    ),
]


@pytest.mark.parametrize(
    ("pg", "expected"),
    [(d, e) for _, d, e in SERVER_REFUSES],
    ids=[n for n, _, _ in SERVER_REFUSES],
)
def test_what_the_server_refuses_is_one_line_with_the_yaml_path(pg: Any, expected: str) -> None:
    s = sc.parse(with_(postgresql=pg), "x.yml")
    with pytest.raises(DrivelabError) as info:
        pgsettings.check(s, _answer(s))
    assert str(info.value) == f"x.yml: {expected}"


def test_the_first_refused_setting_in_the_files_order_is_named() -> None:
    pg = {
        "settings": {"fsync": "off"},
        "sets": {"a": {"fsync": "maybe"}, "b": {"shared_buffers": "8"}},
    }
    s = sc.parse(with_(postgresql=pg), "x.yml")
    with pytest.raises(DrivelabError, match=r"^x\.yml: postgresql\.sets\.a\.fsync: "):
        pgsettings.check(s, _answer(s))


def test_settings_the_server_takes_are_said_with_what_needs_a_restart() -> None:
    pg = {
        "settings": {"checkpoint_timeout": "5min", "fsync": True},
        "sets": {
            "fdatasync": {"wal_sync_method": "fdatasync"},
            "open_datasync": {"wal_sync_method": "open_datasync", "shared_buffers": "256MB"},
        },
    }
    s = sc.parse(with_(postgresql=pg), "x.yml")
    assert [p["name"] for p in pgsettings.to_ask(s)] == [
        "checkpoint_timeout", "fsync", "wal_sync_method", "wal_sync_method", "shared_buffers",
    ]  # fmt: skip
    assert pgsettings.check(s, _answer(s)) == (
        "PostgreSQL settings: 4 checked by PostgreSQL 15 on dbhost; a restart for shared_buffers"
    )


def test_a_verdict_missing_from_the_answer_is_not_taken_as_a_yes() -> None:
    s = sc.parse(with_(postgresql={"settings": {"fsync": "off"}}), "x.yml")
    with pytest.raises(DrivelabError, match=r"postgresql\.settings\.fsync: .* gave no verdict"):
        pgsettings.check(s, {"host": "dbhost", "version": "15", "verdicts": []})


def test_the_query_protocol_is_pgbench_m_and_names_the_cell(tmp_path: Path) -> None:
    doc = with_(workload={"scale": [5], "duration": 15, "protocol": "prepared"})
    cell = sc.expand(sc.load(write(tmp_path, doc)), INVENTORY)[0].cell
    assert cell.pgbench.extra_vars()["pgbench_run_protocol"] == "prepared"
    assert cell.cell_id == "nvme-ext4-tablespace-s5-h2-tpcb-Mprepared"
    assert cell.spec.test == "tpcb ext4 tablespace s5 2cl c4 j2 T15 Mprepared"
    plain = sc.expand(sc.load(write(tmp_path, with_())), INVENTORY)[0].cell
    assert "protocol" not in plain.spec.params and plain.cell_id.endswith("-tpcb")
    bad = with_(workload={"scale": [5], "duration": 15, "protocol": "binary"})
    with pytest.raises(
        DrivelabError, match=r"workload\.protocol: .*'simple', 'extended' or 'prepared'"
    ):
        sc.load(write(tmp_path, bad))


def test_two_variants_of_one_filesystem_are_cells_of_their_own(tmp_path: Path) -> None:
    """Seed study 004's XFS (stripe unit and width, a 128 MiB log, logbufs=8) beside a
    plain XFS on one drive: two cells named by their variants, each asking the drive
    stage for its own mkfs and mount options."""
    doc = with_(drives=["ssd"], baseline=None, filesystems=[
        {"fs": "xfs", "name": "xfs-su128", "mkfs_options": ["-d", "sunit=128,swidth=4096",
                                                            "-l", "size=128m"],
         "mount_options": "noatime,logbufs=8"},
        {"fs": "xfs"},
    ])  # fmt: skip
    cells = sc.expand(sc.load(write(tmp_path, doc)), INVENTORY)
    assert [c.cell_id for c in cells] == [
        "ssd-xfs-su128-tablespace-s5-h2-tpcb", "ssd-xfs-tablespace-s5-h2-tpcb"
    ]  # fmt: skip
    assert [c.cell.spec.test.split()[1] for c in cells] == ["xfs-su128", "xfs"]
    assert [(r["fs"], r["mkfs_options"], r["mount_options"]) for c in cells
            for r in c.drive_request] == [
        ("xfs", ["-d", "sunit=128,swidth=4096", "-l", "size=128m"], "noatime,logbufs=8"),
        ("xfs", [], "noatime"),
    ]  # fmt: skip
    assert sc.drive_batch(cells) is None  # one drive made two ways: a drives stage each


def test_a_weighted_mix_of_built_in_scripts_is_pgbench_b_and_names_the_cell(tmp_path: Path) -> None:
    doc = with_(workload={"scale": [5], "duration": 15,
                          "mix": {"tpcb-like": 9, "select-only": 1}})  # fmt: skip
    cell = sc.expand(sc.load(write(tmp_path, doc)), INVENTORY)[0].cell
    assert cell.pgbench.extra_vars()["pgbench_run_mix"] == ["tpcb-like@9", "select-only@1"]
    assert cell.cell_id == "nvme-ext4-tablespace-s5-h2-mix-btpcb-like9-select-only1"
    assert cell.spec.test == "mix ext4 tablespace s5 2cl c4 j2 T15 btpcb-like@9+select-only@1"
    for bad, says in [
        ({"mix": {"tpcb-like": 1}, "mode": "select-only"},
         "workload.mix: a mix is in place of mode: leave mode out (it is select-only)"),
        ({"mix": {"tpcb": 1}}, "workload.mix.tpcb"),
        ({"mix": {"select-only": 0}}, "workload.mix.select-only: must be at least 1 (got 0)"),
    ]:  # fmt: skip
        with pytest.raises(DrivelabError) as err:
            sc.load(write(tmp_path, with_(workload={"scale": [5], "duration": 15, **bad})))
        assert says in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_wal_on_a_drive_of_its_own_is_a_cell_that_makes_both_drives(tmp_path: Path) -> None:
    """placement {data: cluster, wal: hdd7200}: nvme's cell keeps its cluster's data on
    nvme and its WAL on hdd7200, both made with the cell's filesystem in one drives
    stage, named in every name of the cell; hdd7200's own cell of that placement would
    be placement cluster, so there is none; the cluster has a name of its own, the same
    the playbooks' filter gives it."""
    from collector.ansible_plugins.filter.drivelab import drivelab_pg_cluster  # noqa: PLC0415

    doc = with_(placement=["cluster", {"data": "cluster", "wal": "hdd7200"}])
    cells = sc.expand(sc.load(write(tmp_path, doc)), INVENTORY)
    assert [c.cell_id for c in cells] == [
        "nvme-ext4-cluster-s5-h2-tpcb",
        "nvme-ext4-cluster-wal-hdd7200-s5-h2-tpcb",
        "hdd7200-ext4-cluster-s5-h2-tpcb",
    ]
    wal = cells[1]
    assert wal.cell.spec.test == "tpcb ext4 cluster-wal-hdd7200 s5 2cl c4 j2 T15"
    assert [(r["name"], r["drives"], r["fs"]) for r in wal.drive_request] == [
        ("nvme", ["nvme"], "ext4"), ("hdd7200", ["hdd7200"], "ext4"),
    ]  # fmt: skip
    assert wal.cell.spec.wal_drive == "hdd7200" and wal.cell.placement == "cluster"
    # the filesystems stand together for every cell: one drives stage
    assert [r["name"] for r in sc.drive_batch(cells)] == ["nvme", "hdd7200"]
    for c in cells:
        assert c.cell.cluster == drivelab_pg_cluster(
            c.cell.drive, c.cell.placement, c.cell.wal_drive or ""
        )
    assert wal.cell.cluster == "drivelab_nvme_wal_hdd7200"


@pytest.mark.parametrize(
    ("placement", "says"),
    [
        ([{"data": "tablespace", "wal": "hdd7200"}],
         "placement[0].data: 'tablespace': WAL on a drive of its own needs data: cluster"),
        ([{"data": "cluster"}], "placement[0].wal: required, missing"),
        ([{"data": "cluster", "wal": "hdd7200", "size": 1}], "placement[0].size"),
        ([{"data": "cluster", "wal": "ssd"}, {"data": "cluster", "wal": "ssd"}],
         "placement: {data: cluster, wal: ssd} listed twice"),
        ([{"data": "cluster", "wal": "sata9"}],
         "placement[0].wal: 'sata9' is not a drive of dbhost"),
    ],
)  # fmt: skip
def test_a_wal_drive_out_of_shape_is_one_line_with_its_path(tmp_path, placement, says) -> None:
    with pytest.raises(DrivelabError) as err:
        path = write(tmp_path, with_(placement=placement))
        sc.validate_against_inventory(sc.load(path), INVENTORY, path)
    assert says in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_wal_drive_that_is_the_only_drive_or_a_raid_member_is_refused(tmp_path) -> None:
    for doc, says in [
        (with_(drives=["nvme"], baseline=None, placement=[{"data": "cluster", "wal": "nvme"}]),
         "placement[0].wal: 'nvme' is the only drive: its data and WAL would share it"),
        (with_(drives=["nvme"], baseline=None, filesystems=[{"fs": "btrfs"}],
               raid=[{"name": "r1", "drives": ["ssd", "hdd7200"], "level": "raid1"}],
               placement=[{"data": "cluster", "wal": "ssd"}]),
         "placement[0].wal: 'ssd' is a RAID set or one of its members"),
    ]:  # fmt: skip
        with pytest.raises(DrivelabError) as err:
            sc.load(write(tmp_path, doc))
        assert says in str(err.value), str(err.value)


def test_the_playbooks_name_a_wal_cluster_and_find_it_on_either_of_its_drives() -> None:
    """The DB host's side, called with -e as operators do: a WAL drive beside a
    tablespace or on the data's own drive is refused in one line; a release of either
    drive finds the cluster (its data on one, its WAL on the other), and nothing but
    drivelab's clusters."""
    from ansible.errors import AnsibleFilterError  # noqa: PLC0415

    from collector.ansible_plugins.filter import drivelab as f  # noqa: PLC0415

    for args, says in [
        (("nvme", "tablespace", "hdd7200"), "WAL drive hdd7200: needs placement cluster"),
        (("nvme", "cluster", "nvme"), "WAL drive nvme: is the data's own drive"),
        (("nvme", "cluster", "../etc"), "WAL drive '../etc': not a drivelab filesystem name"),
    ]:
        with pytest.raises(AnsibleFilterError, match=re.escape(says)):
            f.drivelab_pg_cluster(*args)
    clusters = [
        {"cluster": "drivelab_nvme_wal_hdd7200", "pgdata": "/srv/drivelab/nvme/pgdata_wal_hdd7200",
         "waldir": "/srv/drivelab/hdd7200/pg_wal_of_nvme"},
        {"cluster": "drivelab_nvme", "pgdata": "/srv/drivelab/nvme/pgdata"},
        {"cluster": "main", "pgdata": "/srv/drivelab/hdd7200/x"},  # not drivelab's
        {"cluster": "drivelab", "pgdata": "/var/lib/postgresql/17/drivelab"},
    ]  # fmt: skip
    assert f.drivelab_clusters_on(clusters, ["hdd7200"], "/srv/drivelab") == [
        "drivelab_nvme_wal_hdd7200"
    ]
    assert f.drivelab_clusters_on(clusters, ["nvme"], "/srv/drivelab/") == [
        "drivelab_nvme", "drivelab_nvme_wal_hdd7200",
    ]  # fmt: skip
    assert f.drivelab_clusters_on(clusters, ["hdd"], "/srv/drivelab") == []


def test_a_mix_may_weigh_the_scenarios_own_script_beside_built_in_ones(tmp_path: Path) -> None:
    """mix {tpcb-like: 4, script: 1} with workload.script: -b tpcb-like@4 and -f the
    file@1, the file resolved beside the scenario and named by the word in the cell; a
    script weighed by no mix and not mode custom, or a mix's script with no file, is
    one line with its path."""
    (tmp_path / "reads.sql").write_text("\\set aid random(1, 100000 * :scale)\nSELECT 1;\n")
    doc = with_(workload={"scale": [5], "duration": 15, "script": "reads.sql",
                          "mix": {"tpcb-like": 4, "script": 1}})  # fmt: skip
    cell = sc.expand(sc.load(write(tmp_path, doc)), INVENTORY)[0].cell
    extra = cell.pgbench.extra_vars()
    assert extra["pgbench_run_mix"] == ["tpcb-like@4", "script@1"]
    assert extra["pgbench_run_script"] == str((tmp_path / "reads.sql").resolve())
    assert extra["pgbench_run_mode"] == "tpcb"
    assert cell.cell_id == "nvme-ext4-tablespace-s5-h2-mix-btpcb-like4-script1"
    for bad, says in [
        ({"mix": {"script": 1}}, "workload.mix.script: needs script:"),
        ({"script": "reads.sql"}, "script is only for mode: custom or a mix that weighs it"),
    ]:  # fmt: skip
        with pytest.raises(DrivelabError) as err:
            sc.load(write(tmp_path, with_(workload={"scale": [5], "duration": 15, **bad})))
        assert says in str(err.value) and "\n" not in str(err.value), str(err.value)
