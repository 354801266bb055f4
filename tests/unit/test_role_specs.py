"""Every role's meta/argument_specs.yml and defaults/main.yml agree (STYLE 6):
the same variables, and the same default values."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROLES = sorted(p for p in (Path(__file__).resolve().parents[2] / "roles").iterdir() if p.is_dir())


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_argument_specs_match_defaults(role):
    defaults_file = role / "defaults" / "main.yml"
    spec_file = role / "meta" / "argument_specs.yml"
    assert spec_file.exists(), f"{role.name} has no meta/argument_specs.yml"
    defaults = yaml.safe_load(defaults_file.read_text()) if defaults_file.exists() else {}
    options = yaml.safe_load(spec_file.read_text())["argument_specs"]["main"]["options"]
    assert set(defaults) == {k for k, v in options.items() if "default" in v}
    for name, value in defaults.items():
        assert options[name]["default"] == value, (
            f"{role.name}: {name} default differs from its spec"
        )
        assert name.startswith(role.name + "_"), (
            f"{role.name}: public variable {name} lacks the role prefix"
        )


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_task_file_is_an_entry_point_with_a_spec(role):
    """Any tasks file can be reached with tasks_from: each has an argument spec, so a
    bad value stops at the role boundary whichever file is entered."""
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    files = {p.stem for p in (role / "tasks").glob("*.yml")}
    assert files - set(specs) == set(), f"{role.name}: task files without an argument spec"
    assert set(specs) - files == set(), f"{role.name}: argument specs without a task file"
    for entry, spec in specs.items():
        assert spec.get("options") == specs["main"]["options"], (
            f"{role.name}: entry point {entry} checks other variables than main"
        )


def test_every_tasks_from_names_a_task_file_with_a_spec():
    root = ROLES[0].parent.parent
    used = []
    for path in [*root.glob("playbooks/*.yml"), *root.glob("roles/*/tasks/*.yml")]:
        text = path.read_text()
        for role, entry in re.findall(r"name: (\w+)\n\s+tasks_from: (\w+)", text):
            used.append((path.name, role, entry))
    assert used, "no tasks_from found: the pattern no longer matches the playbooks"
    for where, role, entry in used:
        specs = yaml.safe_load((root / "roles" / role / "meta" / "argument_specs.yml").read_text())
        assert entry in specs["argument_specs"], f"{where}: {role} tasks_from {entry} has no spec"
