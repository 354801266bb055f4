"""Bad input sweep (issue #8, item 7): hypothesis-made scenario files, inventories,
raw bytes and command lines end in one clean line, or succeed with names that are safe
wherever they go (paths, argv, SQL); nothing is run on the way.

* Scenario documents: the shipped scenarios and a few valid documents, mutated (any
  value replaced by None, booleans, huge or negative numbers, nan/inf, long strings,
  unicode, shell metacharacters, ``..``, newlines, NUL; keys added, deleted, renamed;
  values wrapped in lists...), written with yaml.safe_dump, then load + validate
  against the sample inventory + expand.
* Inventories: the sample inventory mutated the same way (host and drive names too).
* Raw files: bytes, YAML-ish garbage, and a table of named nasties (billion laughs,
  recursive aliases, invalid UTF-8, tabs, /dev/zero...).
* Command lines: ``run --dry-run``, ``report``, ``compare``, ``gather``, ``watch``
  (non-http URLs only), and ``lab up`` with at least one value its argparse type
  functions refuse, in-process with every way of running a command replaced by a
  failure; a few through the installed ``drivelab`` script.
* Static: which Ansible shell, free-form command and SQL strings interpolate what.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import (
    HealthCheck,
    assume,
    currently_in_test_context,
    event,
    example,
    given,
    settings,
)
from hypothesis import strategies as st

from collector import scenario as sc
from collector.cli import labcmd
from collector.cli import main as cli
from collector.errors import EXIT_CONTROLLER, DrivelabError
from collector.paths import REPO
from collector.run import conductor as scenariorun
from collector.scenario.rules import HOST_RULES

SCENARIOS = sorted((REPO / "scenarios").glob("*.yml"))
INVENTORY_DIR = REPO / "tests" / "data" / "inventory"
INVENTORY = sc.load_inventory(INVENTORY_DIR)
BIN = Path(sys.executable).parent

SETTINGS = {
    "deadline": None,
    "derandomize": True,
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
}

# --- what "safe" means -------------------------------------------------------------------

SAFE_ID = re.compile(r"[A-Za-z0-9_.-]+")
#: characters a shell, a Jinja template or SQL would read as more than text
META = set(";&|$`<>(){}[]*?!~'\"\\#% \t\r\n\x00")
FS_TYPES = set(HOST_RULES.FILESYSTEMS)
MKFS_ARG = re.compile(r"[A-Za-z0-9_=,.:+^-]{1,200}")  # no '/': the host's allow-list


def assert_clean_error(message: str, source: str | None = None) -> None:
    """One printable line, starting with the file when there is one, of bounded length."""
    assert "Traceback" not in message
    assert len(message.splitlines()) == 1, message
    assert message.isprintable(), repr(message)
    if source is not None:
        assert message.startswith(f"{source}: "), message
        assert len(message) <= len(source) + 2 + sc.MAX_MESSAGE, message


def assert_safe_cells(cells: list[sc.PlannedCell], root: Path) -> None:
    """Every name in the matrix is one a path, an argv and an SQL identifier can take."""
    assert cells
    for planned in cells:
        cell = planned.cell
        assert sc.SCENARIO_NAME.fullmatch(cell.scenario)
        assert sc.DRIVE_NAME.fullmatch(cell.drive)
        assert cell.filesystem in FS_TYPES
        assert cell.placement in {"tablespace", "cluster"}
        assert planned.write_cache in {"leave", "on", "off"}
        assert all(sc.CLIENT_NAME.fullmatch(h) for h in cell.hosts)
        assert SAFE_ID.fullmatch(planned.cell_id)
        assert planned.cell_id not in {".", ".."}
        assert cell.cell_dir(root).resolve().is_relative_to(root.resolve())
        assert SAFE_ID.fullmatch(cell.cluster)
        for request in planned.drive_request:
            assert sc.DRIVE_NAME.fullmatch(request["name"])
            assert all(sc.DRIVE_NAME.fullmatch(d) for d in request["drives"])
            assert request["fs"] in FS_TYPES
            assert all(MKFS_ARG.fullmatch(a) for a in request["mkfs_options"])
            assert sc.MOUNT_OPTIONS.fullmatch(request["mount_options"])
        assert all(sc.ARGUMENT.fullmatch(a) for a in cell.init_options)
        for key, value in cell.pgbench.extra_vars().items():
            if isinstance(value, str):
                assert not META & set(value), (key, value)
            elif isinstance(value, list):  # the mix: words of pgbench's argv
                assert all(re.fullmatch(r"[a-z-]+@[0-9]+", v) for v in value), (key, value)
            else:
                assert isinstance(value, int | float) and 0 <= value <= 10**9, (key, value)
        # PostgreSQL settings go into a settings file between quotes, and to Ansible as an
        # extra variable (which it would template)
        assert cell.pg_settings_name is None or sc.DRIVE_NAME.fullmatch(cell.pg_settings_name)
        for name, value in cell.pg_settings.items():
            assert sc.PG_RULES.NAME.fullmatch(name) and sc.PG_RULES.name_problem(name) is None
            assert isinstance(value, str) and value.isprintable(), (name, value)
            assert not set("'\\{}") & set(value), (name, value)


def note(what: str) -> None:
    """A hypothesis event (the share of each outcome, with --hypothesis-show-statistics)."""
    if currently_in_test_context():
        event(what)


# --- strategies ----------------------------------------------------------------------------

NASTY = [
    "",
    " ",
    ";",
    "x; rm -rf /",
    "$(touch /tmp/pwned)",
    "`id`",
    "a'b",
    'drivelab_x"; DROP DATABASE postgres; --',
    "{{ lookup('pipe', 'id') }}",
    "%(marker)s",
    "../../etc/passwd",
    "..",
    "/",
    "a\nb",
    "a\r\nb",
    "a\x00b",
    "a\u2028b",
    "\x1b[2J",
    "\t",
    "ü",
    "🐘",
    "\uff4e\uff56\uff4d\uff45",  # fullwidth nvme
    "x" * 5000,
    "nvme",
    "ssd",
    "hdd7200",
    "raid1",
    "r0",
    "ext4",
    "btrfs",
    "mdadm",
    "raid10",
    "cluster",
    "custom",
    "on",
    "off",
    "leave",
    "both",
    "lab",
    "null",
    "~",
    "1e999",
    "0x10",
    "-E",
    "lazy_itable_init=0",
    "/dev/sda",
    "device=/dev/sdb",
    "bench.sql",
    "sql/bench.sql",
    "sql/../../bench.sql",
    "/etc/passwd",
]
STRINGS = st.one_of(st.sampled_from(NASTY), st.text(max_size=30))
NUMBERS = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, -1, 1, 2, 3, 4, 1000, 1001, 100_000, 2**31, 2**63, 10**30, -(10**30)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([float("nan"), float("inf"), -float("inf"), -0.0, 0.5, 1e308, 5.0]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, STRINGS)
KEYS = st.one_of(STRINGS, st.sampled_from([1, None, True, 2.5]))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)),
    max_leaves=10,
)
FIELDS = sorted(
    {
        name
        for model in (
            sc.Scenario,
            sc.Workload,
            sc.Filesystem,
            sc.RaidSet,
            sc.Pretests,
            sc.AdaptiveSpec,
            sc.AdaptiveRepetitions,
            sc.Postgresql,
        )
        for name in model.model_fields
    }
)
NEW_KEYS = st.one_of(
    st.sampled_from(FIELDS),
    st.sampled_from(["drivez", "duraton", "scales", "Name", "workload ", "sizes", "lab"]),
    KEYS,
)


#: values a scenario may hold, so a change often leaves it valid (or invalid in only
#: one subtle way): the success path's property is exercised as well
PLAUSIBLE = st.one_of(
    st.sampled_from(
        ["nvme", "ssd", "hdd10k", "hdd7200", "raid1", "raid2", "raid3", "raid4", "r9", "x_1"]
    ),
    st.sampled_from(["ext4", "xfs", "btrfs", "tablespace", "cluster", "on", "off", "leave"]),
    st.sampled_from(["tpcb", "select-only", "simple-update", "custom", "full", "none"]),
    st.sampled_from(["-E", "lazy_itable_init=0", "-m", "0", "--foreign-keys", "noatime,nobarrier"]),
    st.sampled_from(["sql/bench.sql", "lab", "t", "mdadm", "raid0", "raid5", "raid10", "both"]),
    st.integers(min_value=1, max_value=20),
    st.booleans(),
    st.lists(st.sampled_from(["nvme", "ssd", "raid1", "raid2", "raid3", "raid4"]), max_size=4),
    st.lists(st.integers(min_value=1, max_value=16), max_size=3),
)


def places(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every position in a document (the root too), as a path of keys and indexes."""
    out = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            out += places(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += places(value, (*path, i))
    return out


def get(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def put(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    """The document with the value at ``path`` replaced (the root: the value itself)."""
    if not path:
        return value
    get(doc, path[:-1])[path[-1]] = value
    return doc


def mutate(doc: Any, data: st.DataObject) -> Any:  # noqa: PLR0911  (one return per change)
    """One random change to a document, anywhere in it."""
    op = data.draw(
        st.sampled_from(
            [
                "plausible",
                "plausible",
                "plausible",
                "replace",
                "replace",
                "scalar",
                "add",
                "delete",
                "rename",
                "wrap",
                "unwrap",
                "dup",
            ]
        ),
        label="op",
    )
    where = places(doc)
    maps = [p for p in where if isinstance(get(doc, p), dict)]
    lists = [p for p in where if isinstance(get(doc, p), list) and get(doc, p)]
    leaves = [p for p in where if not isinstance(get(doc, p), dict | list)]
    if op == "replace":
        return put(doc, data.draw(st.sampled_from(where)), data.draw(VALUES, label="value"))
    if op == "plausible" and where[1:]:
        return put(doc, data.draw(st.sampled_from(where[1:])), data.draw(PLAUSIBLE, label="value"))
    if op == "scalar" and leaves:
        return put(doc, data.draw(st.sampled_from(leaves)), data.draw(SCALARS, label="value"))
    if op in ("add", "delete", "rename") and maps:
        node = get(doc, data.draw(st.sampled_from(maps)))
        if op == "add" or not node:
            node[data.draw(NEW_KEYS, label="key")] = data.draw(VALUES, label="value")
            return doc
        key = data.draw(st.sampled_from(list(node)), label="key")
        value = node.pop(key)
        if op == "rename":
            node[data.draw(NEW_KEYS, label="new key")] = value
        return doc
    if op == "wrap":
        path = data.draw(st.sampled_from(where))
        return put(doc, path, [get(doc, path)])
    if op == "unwrap" and lists:
        path = data.draw(st.sampled_from(lists))
        return put(doc, path, get(doc, path)[0])
    if op == "dup" and lists:
        node = get(doc, data.draw(st.sampled_from(lists)))
        node.append(copy.deepcopy(node[0]))
    return doc


def dump(doc: Any) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


# --- scenario documents --------------------------------------------------------------------

MINIMAL: dict[str, Any] = {"name": "t", "drives": ["ssd"], "workload": {"scale": 1, "duration": 1}}
RICH: dict[str, Any] = {
    "name": "rich",
    "description": "every feature once",
    "baseline": "ssd",
    "drives": ["ssd", "nvme"],
    "filesystems": [
        {"fs": "ext4", "mkfs_options": ["-E", "lazy_itable_init=0"], "mount_options": "noatime"},
        {"fs": "btrfs"},
    ],
    "raid": [
        {"name": "r1", "drives": ["raid1", "raid2"], "level": "raid1"},
        {"name": "m5", "drives": ["raid1", "raid2", "raid3"], "level": "raid5", "method": "mdadm"},
    ],
    "placement": ["tablespace", "cluster"],
    "write_cache": ["on", "off"],
    "workload": {
        "scale": [1, 2],
        "clients_per_host": 2,
        "threads": 1,
        "transactions": 10,
        "mode": "custom",
        "script": "sql/bench.sql",
        "rate": 100,
        "log": "aggregate",
        "init_options": ["--foreign-keys"],
    },
    "hosts": [1, 3],
    "repetitions": {"adaptive": {"target_ci_pct": 5, "min": 2, "max": 4}},
    "pretests": {"fio": True, "runtime": 5, "write_cache": "leave"},
    "sizes": {"lab": {"workload": {"scale": [1]}, "hosts": [1]}},
}
STARTS = {p.stem: yaml.safe_load(p.read_text(encoding="utf-8")) for p in SCENARIOS}
STARTS.update(minimal=MINIMAL, rich=RICH)


@pytest.fixture
def scen_dir(tmp_path: Path) -> Path:
    """A scenario folder with the custom script the documents may name."""
    (tmp_path / "sql").mkdir()
    (tmp_path / "sql" / "bench.sql").write_text("SELECT 1;\n", encoding="utf-8")
    return tmp_path


def check_file(path: Path, size: str | None = None, inventory: dict | None = None) -> list:
    """load + validate + expand: [] for a clean one-line error, else the (safe) cells."""
    inventory = INVENTORY if inventory is None else inventory
    try:
        s = sc.load(path, size)
        sc.validate_against_inventory(s, inventory, path)
        cells = sc.expand(s, inventory)
        sc.plan_text(s, cells)
    except DrivelabError as err:
        assert_clean_error(str(err), str(path))
        note("refused")
        return []
    assert_safe_cells(cells, path.parent)
    note("expanded")
    return cells


def test_starting_documents_are_valid(scen_dir: Path) -> None:
    for name, doc in STARTS.items():
        path = scen_dir / f"{name}.yml"
        path.write_text(dump(doc), encoding="utf-8")
        assert check_file(path), name
        if "lab" in doc.get("sizes", {}):
            assert check_file(path, "lab"), name


@settings(max_examples=500, **SETTINGS)
@given(start=st.sampled_from(sorted(STARTS)), data=st.data())
def test_mutated_scenarios_fail_cleanly_or_expand_safely(
    scen_dir: Path, start: str, data: st.DataObject
) -> None:
    doc = copy.deepcopy(STARTS[start])
    for _ in range(data.draw(st.integers(min_value=1, max_value=4), label="changes")):
        doc = mutate(doc, data)
    path = scen_dir / "x.yml"
    path.write_text(dump(doc), encoding="utf-8")
    size = data.draw(st.sampled_from([None, None, "lab", "nope"]), label="size")
    check_file(path, size)


MIN_TEXT = "name: t\ndrives: [ssd]\nworkload: {scale: 1, duration: 1}\n"
# Found while building this sweep (by hypothesis or by hand); each kept as a plain case.
FOUND: list[tuple[str, str, str]] = [
    (
        "a date that is no date (was a ValueError traceback)",
        "name: 2020-02-30\n",
        "not valid YAML (day is out of range for month)",
    ),
    (
        "a 5000-digit number (was a ValueError traceback)",
        "name: t\nworkload: {scale: 1" + "0" * 5000 + "}\n",
        "not valid YAML (Exceeds the limit (4300 digits) for integer string conversion:"
        " value has 5001 digits)",
    ),
    (
        "a line separator in a key (was printed raw: two lines on some terminals)",
        MIN_TEXT + '"a\\u2028b": 1\n',
        "a\\u2028b: unknown key (allowed: name, description, baseline, drives, filesystems,"
        " raid, placement, write_cache, drive_state, trim, workload, hosts, repetitions, retries, pretests, postgresql, sizes)",
    ),
    (
        "an escape sequence in a key (was sent to the terminal)",
        MIN_TEXT + '"\\e[2J": 1\n',
        "\\x1b[2J: unknown key (allowed: name, description, baseline, drives, filesystems,"
        " raid, placement, write_cache, drive_state, trim, workload, hosts, repetitions, retries, pretests, postgresql, sizes)",
    ),
    (
        "a long unknown key (was shown whole)",
        MIN_TEXT + "? " + "k" * 2000 + "\n: 1\n",
        "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...: unknown key (allowed: name, description,"
        " baseline, drives, filesystems, raid, placement, write_cache, drive_state, trim, workload, hosts,"
        " repetitions, retries, pretests, postgresql, sizes)",
    ),
    (
        "a long list of drives in a message (was 2000 characters)",
        dump({**MINIMAL, "drives": [f"d{i:030d}" for i in range(64)], "baseline": "nvme"}),
        "baseline: 'nvme' is not one of the drives (have: d000000000000000000000000000000,"
        " d000000000000000000000000000001, d000000000000000000000000000002,"
        " d000000000000000000000000000003, d000000000000000000000000000004,"
        " d000000000000000000000000000005, d000000000000000000000000000006, d0000000000000000...",
    ),
    (
        "a device among the mkfs arguments (mkfs.btrfs would have formatted it too)",
        dump({**MINIMAL, "filesystems": [{"fs": "btrfs", "mkfs_options": ["/dev/sda"]}]}),
        "filesystems[0].mkfs_options[0]: mkfs.btrfs option '/dev/sda': a bare argument is not"
        " an option (mkfs takes its devices from the gate, never from the options)",
    ),
    (
        "an external log device for XFS",
        dump(
            {**MINIMAL, "filesystems": [{"fs": "xfs", "mkfs_options": ["-l", "logdev=/dev/sdb"]}]}
        ),
        "filesystems[0].mkfs_options[1]: mkfs.xfs option -l 'logdev=/dev/sdb': 'logdev' is not"
        " a suboption drivelab allows (allowed: size, version, sunit, su, lazy-count, agnum)",
    ),
]


@pytest.mark.parametrize(("text", "expected"), [f[1:] for f in FOUND], ids=[f[0] for f in FOUND])
def test_found_by_the_sweep(scen_dir: Path, text: str, expected: str) -> None:
    path = scen_dir / "x.yml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DrivelabError) as info:
        check_file_raising(path)
    assert str(info.value) == f"{path}: {expected}"
    assert_clean_error(str(info.value), str(path))


def check_file_raising(path: Path) -> None:
    s = sc.load(path)
    sc.validate_against_inventory(s, INVENTORY, path)
    sc.expand(s, INVENTORY)


def test_merge_keys_are_read(scen_dir: Path) -> None:
    """``<<: *anchor`` was refused ("could not determine a constructor for the tag
    'tag:yaml.org,2002:merge'"): a valid YAML file, now merged as YAML says."""
    path = scen_dir / "x.yml"
    path.write_text(
        "name: t\ndrives: [ssd]\nworkload: &w {scale: 5, duration: 10}\n"
        "sizes:\n  lab:\n    workload:\n      <<: *w\n      duration: 2\n",
        encoding="utf-8",
    )
    lab = sc.load(path, "lab")
    assert (lab.workload.scale, lab.workload.duration) == ([5], 2)
    path.write_text("name: t\nname: u\n", encoding="utf-8")
    with pytest.raises(DrivelabError, match=r"key 'name' given twice"):
        sc.load(path)


def test_script_in_a_folder_with_braces(tmp_path: Path) -> None:
    """The resolved script path goes to Ansible as an extra variable, which Ansible
    templates: a folder named like a template is refused."""
    folder = tmp_path / "{{ lookup('pipe', 'id') }}"
    folder.mkdir()
    (folder / "bench.sql").write_text("SELECT 1;\n", encoding="utf-8")
    doc = {
        **MINIMAL,
        "workload": {"scale": 1, "duration": 1, "mode": "custom", "script": "bench.sql"},
    }
    path = folder / "x.yml"
    path.write_text(dump(doc), encoding="utf-8")
    with pytest.raises(DrivelabError) as info:
        sc.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: workload.script: ")
    assert message.endswith(": no braces in the script's folder names")


# --- names that would reach a shell, SQL or a path ------------------------------------------

EVIL = [
    "x; rm -rf /",
    "$(touch /tmp/pwned)",
    "`touch /tmp/pwned`",
    "a'b",
    'drivelab_x"; DROP DATABASE postgres; --',
    "../../etc",
    "{{ lookup('pipe', 'id') }}",
    "nvme\nssd",
]

PLACES: list[tuple[str, Any]] = [
    ("drives[0]", lambda v: {**MINIMAL, "drives": [v]}),
    ("baseline", lambda v: {**MINIMAL, "baseline": v}),
    ("name", lambda v: {**MINIMAL, "name": v}),
    (
        "raid[0].name",
        lambda v: {
            **MINIMAL,
            "filesystems": [{"fs": "btrfs"}],
            "raid": [{"name": v, "drives": ["raid1", "raid2"], "level": "raid1"}],
        },
    ),
    (
        "raid[0].drives[1]",
        lambda v: {
            **MINIMAL,
            "filesystems": [{"fs": "btrfs"}],
            "raid": [{"name": "r", "drives": ["raid1", v], "level": "raid1"}],
        },
    ),
    ("filesystems[0].fs", lambda v: {**MINIMAL, "filesystems": [{"fs": v}]}),
    (
        "filesystems[0].mkfs_options[0]",
        lambda v: {**MINIMAL, "filesystems": [{"mkfs_options": [v]}]},
    ),
    ("filesystems[0].mount_options", lambda v: {**MINIMAL, "filesystems": [{"mount_options": v}]}),
    (
        "workload.init_options[0]",
        lambda v: {**MINIMAL, "workload": {**MINIMAL["workload"], "init_options": [v]}},
    ),
    (
        "workload.script",
        lambda v: {**MINIMAL, "workload": {**MINIMAL["workload"], "mode": "custom", "script": v}},
    ),
    ("workload.mode", lambda v: {**MINIMAL, "workload": {**MINIMAL["workload"], "mode": v}}),
    ("placement[0]", lambda v: {**MINIMAL, "placement": [v]}),
    ("write_cache", lambda v: {**MINIMAL, "write_cache": v}),
]


#: accepted, and harmless where they go: '..' is no path in a pgbench -i argument (an
#: argv item; pgbench refuses a second database name)
HARMLESS = {
    ("workload.init_options[0]", "../../etc"),
}


@pytest.mark.parametrize("value", EVIL, ids=repr)
@pytest.mark.parametrize(("where", "make"), PLACES, ids=[p[0] for p in PLACES])
def test_evil_names_in_a_scenario_are_refused(
    scen_dir: Path, where: str, make: Any, value: str
) -> None:
    path = scen_dir / "x.yml"
    path.write_text(dump(make(value)), encoding="utf-8")
    if (where, value) in HARMLESS:
        assert check_file(path)  # and the cells are safe
        return
    with pytest.raises(DrivelabError) as info:
        check_file_raising(path)
    message = str(info.value)
    assert_clean_error(message, str(path))
    assert message.startswith(f"{path}: {where}: ")
    # the culprit is named (cut to 40 characters, unprintable characters escaped)
    assert sc._printable(sc._show(value)) in message or sc._printable(value[:20]) in message


def test_evil_size_name(scen_dir: Path) -> None:
    path = scen_dir / "x.yml"
    path.write_text(dump({**MINIMAL, "sizes": {"x; rm -rf /": {}}}), encoding="utf-8")
    with pytest.raises(DrivelabError) as info:
        sc.load(path)
    assert str(info.value) == (
        f"{path}: sizes: 'x; rm -rf /' is not a valid size name ([a-z0-9][a-z0-9-]{{0,63}})"
    )


def inventory_with(clients: list[str] | None = None, db: str = "dbhost") -> dict[str, Any]:
    inv = copy.deepcopy(INVENTORY)
    children = inv["all"]["children"]
    children["db"]["hosts"] = {db: children["db"]["hosts"]["dbhost"]}
    if clients is not None:
        children["clients"]["hosts"] = {c: {"ansible_host": "10.0.0.9"} for c in clients}
    return inv


@pytest.mark.parametrize("value", [*EVIL, "Client1", "client-1", "1client", "x" * 60], ids=repr)
def test_evil_client_host_names_are_refused(scen_dir: Path, value: str) -> None:
    """A client's name becomes drivelab_<name>: its database, its role, an SQL identifier
    in roles/pgbench_database/tasks/init.yml, and folders on the controller."""
    path = scen_dir / "x.yml"
    path.write_text(dump(MINIMAL), encoding="utf-8")
    s = sc.load(path)
    with pytest.raises(DrivelabError) as info:
        sc.validate_against_inventory(s, inventory_with(["client1", value]), path)
    message = str(info.value)
    assert_clean_error(message, str(path))
    assert message.startswith(
        f"{path}: inventory: client host {sc._printable(sc._show(value))} is not a valid client"
        " name ([a-z][a-z0-9_]{0,53}; its database is drivelab_<name>)"
    )


@pytest.mark.parametrize("value", [*EVIL, ".", "-db", "db host"], ids=repr)
def test_evil_db_host_names_are_refused(scen_dir: Path, value: str) -> None:
    path = scen_dir / "x.yml"
    path.write_text(dump(MINIMAL), encoding="utf-8")
    s = sc.load(path)
    with pytest.raises(DrivelabError) as info:
        sc.validate_against_inventory(s, inventory_with(db=value), path)
    assert_clean_error(str(info.value), str(path))
    assert str(info.value).startswith(f"{path}: inventory: DB host ")


@pytest.mark.parametrize("clients", [["client1", "client2"], ["web_1", "pg_client"]])
def test_plain_host_names_pass(scen_dir: Path, clients: list[str]) -> None:
    path = scen_dir / "x.yml"
    path.write_text(dump(MINIMAL), encoding="utf-8")
    s = sc.load(path)
    inv = inventory_with(clients, db="pg-db1.lab.example.org")
    sc.validate_against_inventory(s, inv, path)
    assert sc.expand(s, inv)[0].cell.hosts == (sorted(clients)[0],)


# --- inventories ---------------------------------------------------------------------------


@settings(max_examples=150, **SETTINGS)
@given(data=st.data())
def test_mutated_inventories_fail_cleanly_or_expand_safely(
    scen_dir: Path, data: st.DataObject
) -> None:
    inv = copy.deepcopy(INVENTORY)
    for _ in range(data.draw(st.integers(min_value=1, max_value=3), label="changes")):
        inv = mutate(inv, data)
    inv_path = scen_dir / "hosts.yml"
    inv_path.write_text(dump(inv), encoding="utf-8")
    path = scen_dir / "x.yml"
    path.write_text(dump({**MINIMAL, "drives": ["nvme", "hdd7200"], "hosts": [1, 2]}), "utf-8")
    try:
        loaded = sc.load_inventory(scen_dir)
    except DrivelabError as err:
        assert_clean_error(str(err), str(inv_path))
        return
    try:
        s = sc.load(path)
        sc.validate_against_inventory(s, loaded, path)
        cells = sc.expand(s, loaded)
    except DrivelabError as err:
        assert_clean_error(str(err))
        return
    assert_safe_cells(cells, scen_dir)


def test_a_candidate_drive_named_by_a_list_is_a_clean_error_or_ignored(scen_dir: Path) -> None:
    """Found by the test above: a candidate drive whose name is a list raised
    TypeError (unhashable) while its declared fields were checked."""
    inv = copy.deepcopy(INVENTORY)
    db = inv["all"]["children"]["db"]["hosts"]
    drives = next(iter(db.values()))["candidate_drives"]
    drives.append({**drives[0], "name": ["nvme"], "rpm": "fast"})
    (scen_dir / "hosts.yml").write_text(dump(inv), encoding="utf-8")
    path = scen_dir / "x.yml"
    path.write_text(dump({**MINIMAL, "drives": ["nvme", "hdd7200"], "hosts": [1, 2]}), "utf-8")
    try:
        loaded = sc.load_inventory(scen_dir)
        s = sc.load(path)
        sc.validate_against_inventory(s, loaded, path)
        cells = sc.expand(s, loaded)
    except DrivelabError as err:
        assert_clean_error(str(err))
        return
    assert_safe_cells(cells, scen_dir)


# --- raw files -----------------------------------------------------------------------------


def billion_laughs(levels: int = 9, indent: str = "") -> str:
    lines = [
        f'{indent}a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]'
    ]
    for i in range(1, levels):
        lines.append(f"{indent}a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]")
    return "\n".join(lines) + "\n"


GARBAGE: list[tuple[str, bytes | str, str]] = [
    (
        "billion laughs",
        billion_laughs(),
        "too large: more than 100000 values once YAML aliases are expanded",
    ),
    (
        "billion laughs in a size",
        "name: t\ndrives: [ssd]\nworkload: {scale: 1, duration: 1}\nsizes:\n  lab:\n"
        + billion_laughs(indent="    "),
        "too large: more than 100000 values once YAML aliases are expanded",
    ),
    ("a list that holds itself", "name: &a [*a]\n", "an alias refers to the value that holds it"),
    (
        "a mapping that holds itself",
        "&a {name: t, x: *a}\n",
        "line 1: not valid YAML (found unconstructable recursive node)",
    ),
    ("deep brackets", "[" * 5000 + "]" * 5000, "not valid YAML (nested too deep)"),
    (
        "invalid UTF-8",
        b"name: \xff\xfe\n",
        "cannot read (UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 6:"
        " invalid start byte)",
    ),
    (
        "a tab",
        "name: t\n\tdrives: [ssd]\n",
        "line 2: not valid YAML (found character '\\t' that cannot start any token)",
    ),
    (
        "unbalanced",
        "name: t\ndrives: [ssd\n",
        "line 3: not valid YAML (expected ',' or ']', but got '<stream end>')",
    ),
    (
        "a NUL",
        "name: t\x00\n",
        "not valid YAML (unacceptable character #x0000: special characters are not allowed)",
    ),
    (
        "a Python tag",
        "name: !!python/object/apply:os.system ['touch /tmp/pwned']\n",
        "line 1: not valid YAML (could not determine a constructor for the tag"
        " 'tag:yaml.org,2002:python/object/apply:os.system')",
    ),
    ("binary", "name: !!binary aGVsbG8=\n", "name: must be a string (got b'hello')"),
    ("a set as a key", "? [a, b]\n: 1\n", "line 1: not valid YAML (found unhashable key)"),
    (
        "two documents",
        "name: t\n---\nname: u\n",
        "line 2: not valid YAML (but found another document)",
    ),
    ("only a comment", "# nothing\n", "empty file"),
    ("a bare string", "x; rm -rf /\n", "must be a mapping of keys (got str)"),
    ("two megabytes", "#" * (2 * 1024**2), "too large (over 1 MiB): not a YAML file"),
]


@pytest.mark.parametrize(
    ("content", "expected"), [g[1:] for g in GARBAGE], ids=[g[0] for g in GARBAGE]
)
def test_garbage_files(tmp_path: Path, content: bytes | str, expected: str) -> None:
    path = tmp_path / "x.yml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    started = time.monotonic()
    with pytest.raises(DrivelabError) as info:
        sc.load(path)
    if "aliases" in expected:
        # refused before anything walks the 10^9 values (before: no answer in 20 s)
        assert time.monotonic() - started < 5
    assert str(info.value) == f"{path}: {expected}"


def test_billion_laughs_inventory(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text("all:\n" + billion_laughs(indent="  "), encoding="utf-8")
    with pytest.raises(DrivelabError, match=r"hosts\.yml: too large: more than 100000 values"):
        sc.load_inventory(tmp_path)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/dev/zero", "not a regular file (a device, pipe or socket)"),
        ("/dev/null", "not a regular file (a device, pipe or socket)"),
        ("/etc", "is a folder, not a file"),
        ("/nonexistent/x.yml", "no such file"),
        ("a\x00b.yml", "cannot read (a NUL byte in the path)"),
        ("x" * 300, "cannot read (OSError: File name too long)"),
    ],
    ids=["/dev/zero", "/dev/null", "a folder", "missing", "NUL", "long name"],
)
def test_weird_scenario_paths(path: str, expected: str) -> None:
    with pytest.raises(DrivelabError) as info:
        sc.load(path)
    assert str(info.value) == f"{sc._printable(path)}: {expected}"


YAMLISH = st.text(
    alphabet=st.sampled_from(list("{}[]:,-&*!|>'\"%@`#?\t\n  abn01.~<=")), max_size=200
)


@settings(max_examples=300, **SETTINGS)
@given(content=st.one_of(st.binary(max_size=300), YAMLISH, st.text(max_size=200)))
@example(content=b"\xef\xbb\xbfname: t\n")
@example(content="name: t\nworkload: {scale: 1, duration: 2020-02-30}\n")
def test_raw_bytes_fail_cleanly(tmp_path: Path, content: bytes | str) -> None:
    path = tmp_path / "raw.yml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    check_file(path)


# --- command lines -------------------------------------------------------------------------


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """cwd three folders down in tmp_path (so '../../..' stays inside), results in
    tmp_path/results, and every way of running a command or playbook a failure."""
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("DRIVELAB_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("COLUMNS", "200")

    def ran(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"bad input ran something: {args!r}")

    popen = subprocess.Popen

    def reads_only(argv: Any, *args: Any, **kwargs: Any) -> Any:
        """ansible-inventory reads an inventory (how drivelab reads one); nothing else runs."""
        if isinstance(argv, list) and Path(str(argv[0])).name == "ansible-inventory":
            return popen(argv, *args, **kwargs)
        return ran(argv, *args)

    monkeypatch.setattr(subprocess, "Popen", reads_only)
    monkeypatch.setattr(labcmd, "cmd_up", ran)
    monkeypatch.setattr(labcmd, "run_playbook", ran)
    monkeypatch.setattr(scenariorun, "preflight", ran)
    monkeypatch.setattr(scenariorun.runner, "provision", ran)
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "garbage").write_bytes(b"\x00\xffnot yaml or sqlite\n" * 10)
    (tmp_path / "files" / "empty").write_bytes(b"")
    (tmp_path / "files" / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (tmp_path / "files" / "dir").mkdir()
    garbage_run = tmp_path / "runs_garbage" / "rep-0"
    garbage_run.mkdir(parents=True)
    (garbage_run / "run.json").write_text('{"scenario": "x; rm -rf /", "cell_id": "../..",')
    return tmp_path


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    note(f"{argv[0]}: exit {rc}")
    return rc, out, err


def assert_refused(rc: int, out: str, err: str, *, quiet: bool = True, status: int = 2) -> None:
    assert rc == status, (rc, out, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("drivelab: ") and len(lines[0]) > len("drivelab: ")
    assert lines[0].isprintable(), repr(lines[0])
    assert "Traceback" not in out + err
    if quiet:
        assert out == ""


PRINTABLE = st.characters(exclude_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"))
COMPONENT = st.one_of(
    st.sampled_from(
        [
            "..",
            ".",
            "x",
            "x.yml",
            "x; rm -rf",
            "$(touch pwned)",
            "`id`",
            "a'b",
            'b"c',
            "ü",
            "🐘",
            " ",
            "x" * 300,
            "a\tb",
            "a\nb",
            "*",
            "~",
            "hosts.yml",
            "{{ x }}",
        ]
    ),
    st.text(min_size=1, max_size=20).map(lambda s: s.replace("/", "_")),
)
RELATIVE = st.lists(COMPONENT, min_size=1, max_size=5).map("/".join)


def no_dash(s: str) -> bool:
    return not s.startswith("-")  # "-h" would be --help


def weird_path(files: Path, system: bool = True) -> st.SearchStrategy[str]:
    """Paths that are not what was asked for: missing, folders, garbage, too long, with
    NUL, unicode, metacharacters and '..'; with ``system``, system files and devices
    (for paths that are only read: a results store is opened read-write)."""
    fixed = [
        "/",
        "/etc",
        "a\x00b",
        "x" * 5000,
        f"{files}/garbage",
        f"{files}/empty",
        f"{files}/passwd",
        f"{files}/dir",
    ]
    if system:
        fixed += [
            "../../etc/passwd",
            "../../../../../../../../etc/passwd",
            "/etc/passwd",
            "/dev/null",
            "/dev/zero",
            "/proc/self/status",
        ]
    return st.one_of(
        RELATIVE,
        RELATIVE.map(lambda p: f"/nonexistent/{p}"),
        RELATIVE.map(lambda p: f"{files}/{p}"),
        st.sampled_from(fixed),
    ).filter(no_dash)


NAMES = st.one_of(STRINGS, st.sampled_from(["two-drives", "hdd", "ssd", "lab"])).map(
    lambda s: s if s and no_dash(s) else f"x{s}"
)


def test_cli_run_dry_run_plain(sandbox: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The sandbox lets a good command line through: a shipped scenario runs dry."""
    argv = [
        "run",
        str(SCENARIOS[0]),
        "--size",
        "lab",
        "--dry-run",
        "--inventory",
        str(INVENTORY_DIR),
    ]
    rc, out, err = run_main(argv, capsys)
    assert (rc, err) == (0, "") and "estimated duration" in out


PG_SCENARIO = """\
name: wal-sync
drives: [nvme]
workload: {scale: 2, duration: 5}
postgresql:
  sets:
    fdatasync: {wal_sync_method: fdatasync}
    open_datasync: {wal_sync_method: open_datasync}
"""


@pytest.mark.parametrize("inventory", [False, True], ids=["no lab", "an inventory"])
def test_cli_run_dry_run_says_the_settings_were_not_checked(
    sandbox: Path, capsys: pytest.CaptureFixture[str], inventory: bool
) -> None:
    """A dry run asks no host: the settings' names and values are the server's to judge."""
    path = sandbox / "files" / "wal-sync.yml"
    path.write_text(PG_SCENARIO, encoding="utf-8")
    argv = ["run", str(path), "--dry-run"] + (
        ["--inventory", str(INVENTORY_DIR)] if inventory else []
    )
    rc, out, err = run_main(argv, capsys)
    assert (rc, err) == (0, "")
    assert "nvme-ext4-tablespace-s2-h1-tpcb-pgopen_datasync" in out
    assert (
        "NOT checked against a server: the PostgreSQL settings' names and values (the DB host's"
        " server checks them when the run starts, before any drive is touched)"
    ) in out
    path.write_text(PG_SCENARIO.split("postgresql:", maxsplit=1)[0], encoding="utf-8")
    rc, out, err = run_main(argv, capsys)
    assert rc == 0 and "NOT checked against a server" not in out  # nothing to check


def test_run_json_with_bad_postgresql_settings_is_one_line(tmp_path: Path) -> None:
    from collector.runfolder import RunMeta  # noqa: PLC0415
    from tests.unit.test_gather import make_run, two  # noqa: PLC0415

    run_dir = make_run(tmp_path, two())
    doc = json.loads((run_dir / "run.json").read_text())
    doc["cell"]["pg_settings"] = {"shared_buffers": 1024}
    (run_dir / "run.json").write_text(json.dumps(doc))
    with pytest.raises(DrivelabError) as info:
        RunMeta.read(run_dir)
    assert str(info.value) == (
        f"{run_dir / 'run.json'}: 'cell.pg_settings' must map names to strings,"
        ' not {"shared_buffers": 1024}'
    )
    doc["cell"]["pg_settings"], doc["cell"]["pg_settings_name"] = {}, 3
    (run_dir / "run.json").write_text(json.dumps(doc))
    with pytest.raises(
        DrivelabError, match=r"'cell\.pg_settings_name' must be a string, not a number 3"
    ):
        RunMeta.read(run_dir)


@settings(max_examples=200, **SETTINGS)
@given(data=st.data())
def test_cli_run_dry_run(
    sandbox: Path, capsys: pytest.CaptureFixture[str], data: st.DataObject
) -> None:
    files = sandbox / "files"
    scenario = data.draw(
        st.one_of(weird_path(files), st.sampled_from([str(p) for p in SCENARIOS])), label="scenario"
    )
    argv = ["run", scenario, "--dry-run"]
    options = {
        "--size": NAMES,
        "--inventory": st.one_of(weird_path(files), st.just(str(INVENTORY_DIR))),
        "--db": weird_path(files, system=False),
        "--metrics-port": st.one_of(NAMES, st.integers(min_value=0).map(str)),
        "--metrics-addr": NAMES,
    }
    for flag in data.draw(st.lists(st.sampled_from(sorted(options)), max_size=3), label="flags"):
        argv += [flag, data.draw(options[flag], label=flag)]
    rc, out, err = run_main(argv, capsys)
    if rc == 0:
        assert err == "" and "estimated duration" in out
    else:
        assert_refused(rc, out, err)
    assert not (sandbox / "results").exists()


@pytest.fixture
def store_copy(sandbox: Path, results_db: Path) -> Path:
    path = sandbox / "files" / "drivelab.db"
    shutil.copy(results_db, path)
    return path


@pytest.mark.parametrize("verb", [["report"], ["compare", "hdd", "ssd"]], ids=["report", "compare"])
def test_a_damaged_store_is_one_line_naming_it_and_left_as_it_was(
    store_copy: Path, verb: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A store whose header is sound but whose runs table's page is not (a disk that
    lost a write): SQLite opens it and finds the damage only when a read reaches the
    page; the verb names the file in one line and writes nothing to it."""
    import sqlite3  # noqa: PLC0415

    con = sqlite3.connect(f"file:{store_copy}?mode=ro", uri=True)
    try:
        page_size = con.execute("PRAGMA page_size").fetchone()[0]
        (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchone()
    finally:
        con.close()
    data = bytearray(store_copy.read_bytes())
    start = (root - 1) * page_size
    data[start + 8 : start + page_size] = b"\xff" * (page_size - 8)
    store_copy.write_bytes(data)
    rc, out, err = run_main([*verb, "--db", str(store_copy)], capsys)
    assert_refused(rc, out, err, status=EXIT_CONTROLLER)  # the controller's store, not the input
    assert err == f"drivelab: results store {store_copy}: database disk image is malformed\n"
    assert store_copy.read_bytes() == data


@settings(max_examples=100, **SETTINGS)
@given(data=st.data())
def test_cli_report_and_compare(
    sandbox: Path, store_copy: Path, capsys: pytest.CaptureFixture[str], data: st.DataObject
) -> None:
    files = sandbox / "files"
    db = data.draw(st.one_of(weird_path(files, system=False), st.just(str(store_copy))), label="db")
    if data.draw(st.booleans(), label="report"):
        argv = ["report", *data.draw(st.lists(NAMES, max_size=1), label="scenario"), "--db", db]
        if data.draw(st.booleans(), label="with baseline"):
            argv += ["--baseline", data.draw(NAMES, label="baseline")]
    else:
        argv = ["compare", data.draw(NAMES, label="a"), data.draw(NAMES, label="b"), "--db", db]
        if data.draw(st.booleans(), label="with scenario"):
            argv += ["--scenario", data.draw(NAMES, label="scenario")]
    rc, out, err = run_main(argv, capsys)
    if rc != 0:
        assert_refused(rc, out, err)
    else:
        assert err == ""


@pytest.mark.parametrize(
    "make",
    [
        lambda files, db: ["report", "two-drives", "--db", db, "--json", str(files / "dir")],
        lambda files, db: ["report", "two-drives", "--db", db, "--csv", str(files / "passwd")],
        lambda files, db: ["compare", "hdd", "ssd", "--db", db, "--json", str(files / "dir")],
    ],
    ids=["--json a folder", "--csv a file", "compare --json a folder"],
)
def test_cli_report_outputs_where_they_cannot_go(
    sandbox: Path, store_copy: Path, capsys: pytest.CaptureFixture[str], make: Any
) -> None:
    """Was an IsADirectoryError / FileExistsError traceback after the table: now the
    path and why, one line (collector/cli/main.py turns any OSError into that)."""
    rc, out, err = run_main(make(sandbox / "files", str(store_copy)), capsys)
    assert_refused(rc, out, err, quiet=False)
    assert err.startswith(f"drivelab: {sandbox / 'files'}/")


PRINTABLE_COMPONENT = st.one_of(
    st.sampled_from(["x", "x; rm -rf", "$(touch pwned)", "`id`", "a'b", "ü", "🐘", "x" * 300]),
    st.text(alphabet=PRINTABLE, min_size=1, max_size=20).map(lambda s: s.replace("/", "_")),
).filter(lambda c: c not in {".", ".."} and no_dash(c))
GATHER_DB = st.lists(PRINTABLE_COMPONENT, min_size=1, max_size=3).map("/".join)


@settings(max_examples=60, **SETTINGS)
@given(data=st.data())
def test_cli_gather(sandbox: Path, capsys: pytest.CaptureFixture[str], data: st.DataObject) -> None:
    """One folder that is not a run folder: one line, exit 2. The store is created where
    --db says (that is what gather does), so --db stays inside the sandbox."""
    files = sandbox / "files"
    run_dir = data.draw(
        st.one_of(
            st.lists(st.one_of(PRINTABLE_COMPONENT, st.just("..")), min_size=1, max_size=4)
            .filter(lambda parts: parts.count("..") <= 2)
            .map("/".join),
            st.sampled_from(
                [
                    str(files / "garbage"),
                    str(files / "dir"),
                    str(sandbox / "runs_garbage" / "rep-0"),
                ]
            ),
        ),
        label="run dir",
    )
    db = data.draw(
        st.one_of(
            GATHER_DB,
            st.sampled_from([str(files / "garbage"), str(files / "dir"), str(files / "passwd")]),
        ),
        label="db",
    )
    rc, out, err = run_main(["gather", run_dir, "--db", db], capsys)
    assert_refused(rc, out, err)


LAB_BAD = {
    "--clients": ["0", "201", "-3", "1e3", "abc", "", " ", "2; rm -rf /", "9" * 400, "1.5", "\x00"],
    "--db-memory": ["9" * 400 + "P", "64M", "1P", "5ZB", "nan", "inf", "-1G", "1.5.5G", "", "1e3"],
    "--subnet": ["8.8.8.0/24", "10.0.0.0/8", "10.0.0.1/24", "::1/128", "fd00::/64", "x;y", ""],
    "--bridge": [
        "eth0",
        "drivelab0; rm -rf /",
        "drivelab" + "x" * 8,
        "DRIVELAB0",
        "",
        "drivelab0\n",
    ],
}
LAB_GOOD = {
    "--clients": ["1", "2", "200"],
    "--db-memory": ["512M", "128M"],
    "--subnet": ["10.213.0.0/24", "192.168.7.0/24"],
    "--bridge": ["drivelab0", "drivelab_t"],
}
LAB_TYPES = {
    "--clients": labcmd.clients_arg,
    "--db-memory": labcmd.memory_arg,
    "--subnet": labcmd.subnet_arg,
    "--bridge": labcmd.bridge_arg,
}


def refused_by_type(flag: str, value: str) -> bool:
    """True when argparse's type function for ``flag`` refuses ``value``: argparse then
    stops before ``cmd_up`` (the only caller of playbooks/lab.yml) is reached."""
    try:
        LAB_TYPES[flag](value)
    except argparse.ArgumentTypeError:
        return True
    return False


@settings(max_examples=100, **SETTINGS)
@given(data=st.data())
def test_cli_lab_up_refuses_before_anything_is_made(
    sandbox: Path, capsys: pytest.CaptureFixture[str], data: st.DataObject
) -> None:
    """Only command lines with at least one value a type function refuses (checked here,
    and cmd_up and every subprocess are replaced by failures as well)."""
    flags = data.draw(st.lists(st.sampled_from(sorted(LAB_TYPES)), min_size=1, max_size=4))
    argv = ["lab", "up"]
    bad = False
    for flag in flags:
        value = data.draw(
            st.one_of(
                st.sampled_from(LAB_BAD[flag]),
                st.sampled_from(LAB_GOOD[flag]),
                st.text(max_size=12).filter(no_dash),
            ),
            label=flag,
        )
        bad = bad or refused_by_type(flag, value)
        argv += [flag, value]
    assume(bad)
    rc, out, err = run_main(argv, capsys)
    assert_refused(rc, out, err)
    assert err.startswith("drivelab: lab up: argument --")


@pytest.mark.parametrize(
    ("flag", "value"), [(f, v) for f, vs in LAB_BAD.items() for v in vs], ids=repr
)
def test_lab_bad_values_are_bad(flag: str, value: str) -> None:
    """Each of the sweep's bad values is refused by its flag's type function ('9' * 400
    + 'P' for --db-memory was an OverflowError traceback in units.parse_size)."""
    assert refused_by_type(flag, value)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://x", "x; rm -rf /", "", "gopher://"])
def test_cli_watch_non_http(sandbox: Path, capsys: pytest.CaptureFixture[str], url: str) -> None:
    rc, out, err = run_main(["watch", "--once", "--url", url], capsys)
    assert_refused(rc, out, err)
    assert "is not an http:// URL" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "x", "y\nz"],
        ["run", "x.yml", "--dry-run", "--inventory", "a\nb"],
        ["run", "a\x1b[2Jb", "--dry-run"],
        ["frobnicate\u2028x"],
    ],
    ids=["unrecognized argument", "inventory path (runcmd)", "escape sequence", "U+2028"],
)
def test_cli_messages_are_one_line(
    sandbox: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """argparse quotes unrecognized arguments raw and runcmd names the inventory path
    raw: two lines, or a cleared screen, before cli.main escaped what it prints."""
    assert_refused(*run_main(argv, capsys))


SUBPROCESS = [
    ["run", "../../etc/passwd", "--dry-run"],
    ["run", "/dev/zero", "--dry-run"],
    ["run", "x; rm -rf /", "--dry-run", "--size", "$(touch pwned)"],
    ["run", str(SCENARIOS[0]), "--dry-run", "--inventory", "/etc"],
    ["run", str(SCENARIOS[0]), "--dry-run", "--size", "`id`", "--inventory", str(INVENTORY_DIR)],
    ["report", "--db", "/etc"],
    ["compare", "a'b", 'drivelab_x"; DROP DATABASE postgres; --', "--db", "/nonexistent/x.db"],
    ["lab", "up", "--db-memory", "9" * 400 + "P"],
    ["lab", "up", "--clients", "2", "--subnet", "10.0.0.1/24"],
]


@pytest.mark.parametrize("args", SUBPROCESS, ids=lambda a: " ".join(a)[:60])
def test_installed_script_prints_one_line(tmp_path: Path, args: list[str]) -> None:
    if args[:2] == ["lab", "up"]:  # never a command line that could reach the playbook
        pairs = zip(args[2::2], args[3::2], strict=True)
        assert any(refused_by_type(flag, value) for flag, value in pairs)
    proc = subprocess.run(
        [str(BIN / "drivelab"), *args],
        capture_output=True,
        text=True,
        env={"DRIVELAB_RESULTS": str(tmp_path / "results"), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert_refused(proc.returncode, proc.stdout, proc.stderr)
    assert not (tmp_path / "results").exists()  # no playbook log was even opened
    assert not (tmp_path / "pwned").exists()


# --- reported by the sweep, fixed since -----------------------------------------------


def test_gather_folder_with_a_newline(sandbox: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert_refused(*run_main(["gather", "a\nb", "--db", "x.db"], capsys))


def test_metrics_port_out_of_range() -> None:
    with pytest.raises(DrivelabError):
        cli.build_parser().parse_args(["run", "x.yml", "--metrics-port", "70000"])


# --- static: what Ansible's shell, command and SQL strings interpolate ----------------------

SHELL = {
    "ansible.builtin.shell",
    "shell",
    "ansible.builtin.raw",
    "raw",
    "ansible.builtin.script",
    "script",
}
COMMAND = {"ansible.builtin.command", "command"}
#: modules that run SQL, and the argument that holds it (drivelab's own read with psql)
SQL = {
    "community.postgresql.postgresql_query": "query",
    "community.postgresql.postgresql_script": "query",
    "drivelab_pg_snapshot": "sql",
    "drivelab_environment": "snapshot_sql",
}
TASK_FILES = sorted(
    [
        *REPO.glob("roles/*/tasks/*.yml"),
        *REPO.glob("roles/*/handlers/*.yml"),
        *REPO.glob("playbooks/*.yml"),
    ]
)
JINJA = re.compile(r"{{(.*?)}}|{%(.*?)%}", re.S)

#: free-form command strings (split on spaces, no shell) and what each expression is:
#: none comes from a scenario unchecked
COMMAND_VARS = {
    # PostgreSQL major version, set by roles/drivelab/tasks/version.yml: drivelab_pg_version,
    # or the last line of postgresql-common's supported-versions
    "drivelab_pg_major": "drivelab_pg_version or supported-versions",
    # drivelab or drivelab_<filesystem>: scenario.DRIVE_NAME, preflight_name_pattern
    "postgresql_server_cluster": "drivelab[_<drive>]",
    # release.yml: filesystem names from the runner's drive requests (DRIVE_NAME)
    "item": "filesystem name",
    # service.yml: pg_lsclusters' own output, clusters matching ^drivelab
    "item.version": "pg_lsclusters",
    "item.cluster": "pg_lsclusters",
}
#: SQL with an interpolated expression (the init marker's COMMENT ON DATABASE, which
#: interpolated the client's database name, is now drivelab_db_facts', with the names
#: as psql variables)
SQL_VARS = {
    # pgbench_run's stats query, a constant of its vars/main.yml in which only the
    # major version chooses which views are read (test_the_stats_query_is_a_constant)
    "__pgbench_run_stats_sql": "constant SQL",
}


def tasks(node: Any) -> list[dict[str, Any]]:
    """Every task in a task file or playbook, blocks and handlers included."""
    out: list[dict[str, Any]] = []
    if isinstance(node, list):
        for item in node:
            out += tasks(item)
    elif isinstance(node, dict):
        if "hosts" in node:  # a play
            for key in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                out += tasks(node.get(key) or [])
            return out
        out.append(node)
        for key in ("block", "rescue", "always"):
            out += tasks(node.get(key) or [])
    return out


#: a value a shell may be given: quoted for it, or a number
#: a value made safe for the shell: quoted, a number, or a list whose every word is quoted
#: and joined with spaces (a command line)
SHELL_SAFE = re.compile(
    r"\|\s*(quote|int|float)\s*$|\|\s*map\(\s*'quote'\s*\)\s*\|\s*join\(\s*' '\s*\)\s*$"
)


def interpolated(text: Any) -> list[str]:
    return [(a or b).strip() for a, b in JINJA.findall(str(text))]


def found(modules: set[str]) -> list[tuple[str, str, Any]]:
    out = []
    for path in TASK_FILES:
        for task in tasks(yaml.safe_load(path.read_text(encoding="utf-8"))):
            for module in modules & set(task):
                out.append((str(path.relative_to(REPO)), task.get("name", "?"), task[module]))
    return out


def test_shell_tasks_interpolate_nothing_unquoted() -> None:
    """No variable, from a scenario, an inventory or anywhere else, reaches a shell
    (shell, raw, script) as shell text: every value in a shell task's command line is
    quoted for the shell (``| quote``, or a list of words ``| map('quote') | join(' ')``)
    or made a number (``| int``, ``| float``). The shell tasks are the reviewed raw
    commands: on the clients of every repetition the wrapper's launch and the run
    folder's removal, on the DB host the checkpoint after a cell's pgbench -i (raw rather
    than Ansible's Python module, for their cost); any new one needs review. (The cold start's page-cache drop is done by the module drivelab_cold_start;
    the two-phase start's sessions by the action drivelab_start, whose script is a
    constant given its values as arguments: tests/unit/test_start_action.py.)"""
    assert found(COMMAND), "the walker finds the command tasks"
    shells = found(SHELL)
    for where, name, args in shells:
        text = args.get("cmd", args.get("_raw_params")) if isinstance(args, dict) else args
        for value in interpolated(text):
            assert SHELL_SAFE.search(value), (where, name, value)
    assert sorted((w, n) for w, n, _ in shells) == [
        (
            "roles/pgbench_database/tasks/init.yml",
            "Flush what the init wrote to the drive while the caps are lifted (a checkpoint)",
        ),
        (
            "roles/pgbench_run/tasks/arm.yml",
            "Launch the wrapper (armed, it waits for the start instant)",
        ),
        (
            "roles/pgbench_run/tasks/fetch.yml",
            "Remove the run folder and its archive on the client",
        ),
    ]


def test_the_shell_safety_check_refuses_an_unquoted_value() -> None:
    """The check above can fail: a bare or otherwise filtered value is not shell-safe."""
    assert [bool(SHELL_SAFE.search(v)) for v in interpolated(
        "a {{ x }} b {{ y | upper }} c {{ z | quote }} d {{ n | int }} e {{ f | float }}"
        " g {{ w | map('quote') | join(' ') }} h {{ w | join(' ') }}"
        " i {{ w | map('quote') | join(';') }} j {{ w | map('upper') | join(' ') }}"
    )] == [False, False, True, True, True, True, False, False, False]  # fmt: skip


def test_command_strings_interpolate_only_checked_names() -> None:
    """Free-form commands are split on spaces (no shell), so a space in a name would add
    an argument: they only interpolate versions and names drivelab checks."""
    seen = set()
    for where, name, args in found(COMMAND):
        if isinstance(args, dict) and "argv" in args:
            continue  # an argv list: each item one argument, whatever it holds
        text = args.get("cmd", args.get("_raw_params")) if isinstance(args, dict) else args
        for expr in interpolated(text):
            assert expr in COMMAND_VARS, (where, name, expr)
            seen.add(expr)
    assert seen == set(COMMAND_VARS), "COMMAND_VARS lists only what is used"


def test_sql_interpolates_only_the_client_database_name() -> None:
    seen = set()
    for module, key in SQL.items():
        for where, name, args in found({module}):
            for expr in interpolated(args.get(key, "")):
                assert expr in SQL_VARS, (where, name, expr)
                seen.add(expr)
    assert seen == set(SQL_VARS)


def test_the_stats_query_is_a_constant() -> None:
    """Its only expressions compare the major version to pick constant SQL text."""
    sql = yaml.safe_load((REPO / "roles/pgbench_run/vars/main.yml").read_text())
    exprs = interpolated(sql["__pgbench_run_stats_sql"])
    assert exprs
    for expr in exprs:
        assert re.fullmatch(r'"[^"{}]*" if drivelab_pg_major \| int >= 1\d else \'\'', expr), expr


def test_no_shell_in_python() -> None:
    """collector/, bench/ and the roles' modules run commands as argv lists only."""
    files = [
        *REPO.glob("collector/**/*.py"),
        *REPO.glob("bench/**/*.py"),
        *REPO.glob("roles/*/library/*.py"),
        *REPO.glob("roles/*/module_utils/*.py"),
    ]
    assert files
    for path in files:
        text = path.read_text(encoding="utf-8")
        for bad in ("shell=True", "os.system(", "os.popen(", "use_unsafe_shell=True"):
            assert bad not in text, (path, bad)
