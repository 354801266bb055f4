"""Lab tests where the lab cannot be built fail, in one line that says why; only
DRIVELAB_LAB_TESTS=skip turns them into skips (tests/lab/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def pytest_as_non_root(**env: str) -> subprocess.CompletedProcess:
    """``pytest tests/lab`` as a user who is not root. Run as root, it runs in a user
    namespace of its own (euid 65534 there, no capabilities on this machine's
    namespaces, loops or cgroups), so it still reads a checkout under a 0700 /root."""
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "tests/lab"]
    clean = {k: v for k, v in os.environ.items() if k != "DRIVELAB_LAB_TESTS"}
    full = {**clean, "PYTHONDONTWRITEBYTECODE": "1", **env}
    if os.geteuid() == 0:
        argv = ["unshare", "--user", *argv]
    return subprocess.run(
        argv, cwd=REPO, env=full, capture_output=True, text=True, check=False, timeout=120
    )


def test_lab_tests_fail_in_one_line_where_the_lab_cannot_be_built():
    proc = pytest_as_non_root()
    assert proc.returncode != 0, proc.stdout
    errors = [
        line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("ERROR: ")
    ]
    assert len(errors) == 1, proc.stdout + proc.stderr
    assert "lab tests cannot run: they need root" in errors[0]
    assert "DRIVELAB_LAB_TESTS=skip" in errors[0]
    assert " passed" not in proc.stdout and " skipped" not in proc.stdout


def test_the_documented_variable_turns_them_into_skips():
    proc = pytest_as_non_root(DRIVELAB_LAB_TESTS="skip")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " skipped" in proc.stdout and " passed" not in proc.stdout
    assert "lab tests cannot run: they need root" in proc.stdout
