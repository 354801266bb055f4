"""Every role's meta/argument_specs.yml and defaults/main.yml agree (STYLE 6):
the same variables, and the same default values."""

from __future__ import annotations

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
