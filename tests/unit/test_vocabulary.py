"""One table per vocabulary: the filesystems drivelab makes are the rows of
``drivelab_argv.FILESYSTEMS`` (candidate_drive's module_utils). Everything else that
must name them (the scenario schema, drive_format's and the role's argument specs, the
preflight filter, the allow-lists, the packages installed, docs/scenarios.md) either
reads the table or is held to it here, and no other code lists them. The lab's drive
classes are the keys of role lab's ``lab_drive_classes`` (its defaults), held the same
way: its argument spec, the drives that name a class, docs/lab.md's table."""

from __future__ import annotations

import ast
import re
import typing

import yaml

from collector.paths import REPO
from collector.scenario.schema import Filesystem
from tests.unit.hostcode import module_util

argv = module_util("candidate_drive", "drivelab_argv")
TABLE = tuple(argv.FILESYSTEMS)
ROLES = REPO / "roles"

#: where the filesystems may be spelled out, because a test below holds each to the table
CHECKED = {
    ("roles/candidate_drive/library/drive_format.py", "choices: ["),
    ("roles/candidate_drive/meta/argument_specs.yml", "choices: ["),
}


def listings(text: str, names: typing.Sequence[str]) -> list[str]:
    """The lines of ``text`` that enumerate two names or more of ``names`` (``ext4, xfs``,
    ``"xfs", "btrfs"``, ``ext4|xfs``, ``xfs or btrfs``, ``mkfs.ext4/xfs``)."""
    word = "|".join(map(re.escape, names))
    pattern = re.compile(
        rf"(?<![\w-])({word})[\"']?\s*(,|\||/| or | and )\s*[\"']?(mkfs\.)?({word})(?![\w-])"
    )
    return [line.strip() for line in text.splitlines() if pattern.search(line)]


def test_the_scan_finds_a_list_and_passes_prose():
    names = ("ext4", "xfs", "btrfs")
    found = listings(
        'fs in ("ext4", "xfs", "btrfs")\n# ext4 or xfs\nmode ext4|btrfs\n'
        "one drive ext4 in a cell and xfs in another\nxfs_info on the mount; btrfs: sysfs\n",
        names,
    )
    assert found == ['fs in ("ext4", "xfs", "btrfs")', "# ext4 or xfs", "mode ext4|btrfs"]


def test_no_code_lists_the_filesystems_but_the_table():
    table_file = ROLES / "candidate_drive" / "module_utils" / "drivelab_argv.py"
    found = []
    for folder in ("collector", "roles", "playbooks", "inventory", "scenarios"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix not in {".py", ".yml", ".yaml", ".j2", ".sh"} or path == table_file:
                continue
            rel = str(path.relative_to(REPO))
            for line in listings(path.read_text(encoding="utf-8"), TABLE):
                if not any(rel == f and mark in line for f, mark in CHECKED):
                    found.append(f"{rel}: {line}")
    assert found == []


def test_the_schema_takes_the_table():
    assert typing.get_args(Filesystem.model_fields["fs"].annotation) == TABLE


def test_the_allow_lists_have_a_row_per_filesystem():
    assert tuple(argv.MKFS) == TABLE
    assert tuple(argv.MOUNT) == TABLE
    assert argv.filesystem_names() == "ext4, xfs or btrfs"


def _fs_choices(node) -> list[list[str]]:
    """Every ``fs: {choices: [...]}`` in a parsed argument spec."""
    out = []
    if isinstance(node, dict):
        fs = node.get("fs")
        if isinstance(fs, dict) and "choices" in fs:
            out.append(fs["choices"])
        for value in node.values():
            out += _fs_choices(value)
    elif isinstance(node, list):
        for value in node:
            out += _fs_choices(value)
    return out


def test_the_argument_specs_offer_the_table():
    module = ROLES / "candidate_drive" / "library" / "drive_format.py"
    tree = ast.parse(module.read_text(encoding="utf-8"))
    doc = next(
        n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "DOCUMENTATION"
    )
    specs = yaml.safe_load((ROLES / "candidate_drive" / "meta" / "argument_specs.yml").read_text())
    choices = _fs_choices(yaml.safe_load(doc)) + _fs_choices(specs)
    assert len(choices) >= 2
    assert all(tuple(c) == TABLE for c in choices), choices


def test_the_preflight_filter_takes_the_table():
    import importlib.util  # noqa: PLC0415

    path = REPO / "collector" / "ansible_plugins" / "filter" / "drivelab.py"
    spec = importlib.util.spec_from_file_location("drivelab_filters_vocabulary", path)
    assert spec and spec.loader
    filters = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(filters)
    assert filters.FILESYSTEMS == TABLE
    request = [{"name": "n", "drives": ["nvme"], "fs": "ntfs"}]
    (message,) = filters.drivelab_preflight_request(request, [{"name": "nvme"}], "^[a-z]+$")
    assert "fs ext4|xfs|btrfs," in message


def test_every_filesystem_package_is_installed():
    defaults = yaml.safe_load((ROLES / "candidate_drive" / "defaults" / "main.yml").read_text())
    lab = yaml.safe_load((ROLES / "lab" / "defaults" / "main.yml").read_text())
    for row in argv.FILESYSTEMS.values():
        assert row["package"] in defaults["candidate_drive_packages"], row
        assert row["package"] in lab["lab_image_packages"] + lab["lab_vm_image_packages"], row
        assert argv.PACKAGE[row["mkfs"]] == row["package"]


def test_the_scenario_docs_list_the_table():
    row = next(
        line
        for line in (REPO / "docs" / "scenarios.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| `filesystems[].fs` |")
    )
    allowed = row.split("|")[3]
    assert tuple(re.findall(r"`([^`]+)`", allowed)) == TABLE


LAB_DEFAULTS = yaml.safe_load((ROLES / "lab" / "defaults" / "main.yml").read_text())
CLASSES = LAB_DEFAULTS["lab_drive_classes"]


def test_no_code_lists_the_drive_classes():
    """The lab's code reads the classes from the table (the preflight, the loop devices'
    caps, the VM's drives, the inventory's rpm); a list of them anywhere else in the code
    is a second table that a new class would miss. Tests and benches name drives, which
    the lab names after their classes, and are not scanned."""
    found = []
    for folder in ("collector", "roles", "playbooks"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix not in {".py", ".yml", ".yaml", ".j2", ".sh"}:
                continue
            rel = str(path.relative_to(REPO))
            found += [
                f"{rel}: {line}" for line in listings(path.read_text("utf-8"), tuple(CLASSES))
            ]
    assert found == []


def test_the_lab_argument_spec_offers_the_drive_class_table():
    spec = yaml.safe_load((ROLES / "lab" / "meta" / "argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    assert options["lab_drive_classes"]["default"] == CLASSES
    for key in ("lab_drives", "lab_vm_drives"):
        assert options[key]["default"] == LAB_DEFAULTS[key], key


def test_every_lab_drive_is_of_a_class_in_the_table():
    drives = LAB_DEFAULTS["lab_drives"] + LAB_DEFAULTS["lab_vm_drives"]
    assert {d["class"] for d in drives} <= set(CLASSES)
    # every class is made by the default lab, so a class no drive uses is not dead weight
    assert {d["class"] for d in LAB_DEFAULTS["lab_drives"]} == set(CLASSES)
    preflight = (ROLES / "lab" / "tasks" / "preflight.yml").read_text()
    assert preflight.count("item.class in lab_drive_classes") == 2


def test_the_lab_docs_table_is_the_drive_class_table():
    """docs/lab.md's "Emulated classes" table: a row per class, in the table's order,
    with its backing, cap (a cliff class's write cap past its mark beside it) and
    rotation rate."""
    lines = (REPO / "docs" / "lab.md").read_text(encoding="utf-8").splitlines()
    start = lines.index("| class | backing | IOPS cap | `rpm` in the inventory "
                        "| measured (fio randread 4 KiB qd1, 5 s, in the DB host) |")  # fmt: skip
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        name, backing, cap, rpm = (cell.strip() for cell in line.split("|")[1:5])
        rows.append((name, backing, cap, rpm))
    assert rows == [
        (
            name,
            {"shm": "RAM", "disk": "disk"}[row["backing"]],
            (str(row["iops"]) if row["iops"] else "none") + cliff(row),
            str(row["rpm"]),
        )
        for name, row in CLASSES.items()
    ]


def cliff(row: dict) -> str:
    if "cliff" not in row:
        return ""
    mib = row["cliff"]["after_bytes"] // 2**20
    return (
        f" (writes past {mib} MiB: {row['cliff']['iops']},"
        " [below](#a-drive-that-falls-off-a-cliff))"
    )


def test_a_drive_requests_defaults_are_spelled_once_and_documented_as_such():
    """format, facts and remove read the request through role vars that fill each
    filesystem's unset keys (no ``item.fs | default(...)`` of their own); the argument
    spec documents the same defaults."""
    role_vars = yaml.safe_load((ROLES / "candidate_drive" / "vars" / "main.yml").read_text())
    defaults = role_vars["__candidate_drive_request_defaults"]
    spec = yaml.safe_load((ROLES / "candidate_drive" / "meta" / "argument_specs.yml").read_text())
    for entry in spec["argument_specs"].values():
        request = entry.get("options", {}).get("candidate_drive_request")
        if request:
            documented = {k: v["default"] for k, v in request["options"].items() if "default" in v}
            assert documented == defaults
    for task_file in ("format", "facts", "remove"):
        text = (ROLES / "candidate_drive" / "tasks" / f"{task_file}.yml").read_text()
        assert "__candidate_drive_requests" in text and "| default(" not in text.replace(
            "candidate_drives | default([])", ""
        ).replace("__candidate_drive_reg_wcache.results | default([])", ""), task_file
