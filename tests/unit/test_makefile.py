"""The README's two commands install what each needs: `make demo` the demo's Debian
packages and drivelab's own Python dependencies, `make test` those and the tests' own
(Chromium, the container and VM labs', the dev extras). Read from what make would run
(`make -n`, in a copy of the tree's Makefile with no venv beside it), not from the
Makefile's text; every package is in docs/dependencies.md's table."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def dry_run(tmp_path: Path, target: str) -> str:
    """What `make -n <target>` would run in a tree like this one without its venv."""
    for name in ("Makefile", "pyproject.toml", "constraints.txt"):
        shutil.copy2(REPO / name, tmp_path / name)
    proc = subprocess.run(
        ["make", "-n", target], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    return proc.stdout


def variable(name: str) -> list[str]:
    text = (REPO / "Makefile").read_text()
    match = re.search(rf"^{name} := ((?:.*\\\n)*.*)$", text, re.M)
    assert match, name
    return match.group(1).replace("\\\n", " ").split()


def apt_list(dry: str) -> list[str]:
    """The packages of the dry run's `for p in ...; do dpkg -s` loop."""
    (found,) = re.findall(r"for p in ([^;]*); do dpkg -s", dry)
    return found.split()


def test_make_demo_installs_the_demos_packages_and_no_test_tools(tmp_path):
    demo, tests_only = variable("DEMO_PACKAGES"), variable("TEST_PACKAGES")
    assert "chromium" in tests_only and "qemu-system-x86" in tests_only
    assert {"postgresql", "fio", "prometheus", "openssh-server"} <= set(demo)
    dry = dry_run(tmp_path, "demo")
    assert apt_list(dry) == demo
    assert "-e .\n" in dry and "[dev]" not in dry, dry
    assert "drivelab lab up" in dry and "scenarios/seed-two-clients.yml --size lab" in dry


def test_make_test_installs_the_demos_packages_and_the_tests_own(tmp_path):
    dry = dry_run(tmp_path, "test")
    assert apt_list(dry) == variable("DEMO_PACKAGES") + variable("TEST_PACKAGES")
    assert "-e '.[dev]'" in dry, dry


def test_every_package_is_in_the_dependencies_table():
    table = (REPO / "docs" / "dependencies.md").read_text()
    rows = re.findall(r"^\| ([a-z0-9, .+-]+) \|", table, re.M)
    named = {p.strip() for row in rows for p in row.split(",")}
    missing = set(variable("DEMO_PACKAGES") + variable("TEST_PACKAGES")) - named
    assert not missing, missing
