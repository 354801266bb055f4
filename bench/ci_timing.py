"""Wall time of CI's own command, `bash .ci/run`, from a fresh clone: `make test`'s
set-up (Debian packages, a new venv), lint, unit and lab tests. Targets: `make test`
<= 30 minutes on this machine; CI stops a run at 90.

Clones the committed HEAD into a temporary folder and runs `bash .ci/run` there as CI
does, its output passed through as it comes; afterwards `make down` and the clone
removed, even on failure. Writes the section ``ci`` of docs/benchmarks.md: exit code,
wall time, how much of it went to set-up and lint (until pytest starts) and to pytest,
pytest's summary line, its slowest tests and the lab tests' time by file. Needs root
and no lab up. 45 to 55 minutes on the 2-core lab machine.

    flock /tmp/drivelab-lab.lock .venv/bin/python bench/ci_timing.py   # as root
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine_note, update_section

REPO = Path(__file__).resolve().parent.parent
#: pytest's last line: "==== 1815 passed in 3384.21s (0:56:24) ===="
SUMMARY = re.compile(r"^=+ (?P<what>.*\d+ (passed|failed|error).*) in [\d.]+s.* =+$")
#: a line of --durations: "321.00s setup    tests/lab/test_pretests.py::test_x"
DURATION = re.compile(r"^(?P<sec>\d+\.\d+)s (?P<when>setup|call|teardown)\s+(?P<test>\S+)")
SLOWEST = 10
#: tests/conftest.py's summary: "lab time    412.3 s  tests/lab/test_run.py"
LAB_TIME = re.compile(r"^lab time\s+(?P<sec>\d+\.\d) s  (?P<what>.+)$")


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()


def run_ci(clone: Path) -> tuple[int, float, float | None, list[str]]:
    """`bash .ci/run` in ``clone``: (exit code, seconds, seconds until pytest started or
    None, the output's lines)."""
    lines: list[str] = []
    pytest_at = None
    started = time.monotonic()
    with subprocess.Popen(
        ["bash", ".ci/run"], cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, errors="replace", bufsize=1,
    ) as proc:  # fmt: skip
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line.rstrip("\n"))
            if pytest_at is None and "test session starts" in line:
                pytest_at = time.monotonic() - started
        rc = proc.wait()
    return rc, time.monotonic() - started, pytest_at, lines


def main() -> None:
    commit = git("rev-parse", "--short", "HEAD")
    clone = Path(tempfile.mkdtemp(prefix="drivelab-ci-"))
    try:
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        rc, seconds, pytest_at, lines = run_ci(clone)
    finally:
        subprocess.run(["make", "down"], cwd=clone, capture_output=True, check=False)
        shutil.rmtree(clone, ignore_errors=True)
    summary = next((m["what"] for ln in reversed(lines) if (m := SUMMARY.match(ln))), None)
    slow = [m for ln in lines if (m := DURATION.match(ln))][:SLOWEST]
    by_file = [m for ln in lines if (m := LAB_TIME.match(ln))]
    print(f"\n.ci/run: exit {rc}, {seconds:.0f} s; pytest: {summary or 'no summary line'}")
    split = (
        f" Set-up and lint (until pytest started): {pytest_at:.0f} s; pytest:"
        f" {seconds - pytest_at:.0f} s."
        if pytest_at is not None
        else " pytest never started."
    )
    body = [
        "## CI's command from a fresh clone (`bench/ci_timing.py`)",
        "",
        machine_note(),
        "",
        f"`bash .ci/run` in a fresh clone of commit {commit} (Debian packages already"
        f" installed on this machine; a new venv), output to a pipe: exit {rc},"
        f" **{seconds / 60:.1f} min** ({seconds:.0f} s; target for `make test` <= 30 min,"
        f" CI's limit 90 min).{split} pytest said: {summary or '(no summary line)'}.",
        "",
    ]
    if slow:
        body += [
            f"The {len(slow)} slowest steps of tests:",
            "",
            "| s | step | test |",
            "|---:|---|---|",
            *(f"| {m['sec']} | {m['when']} | `{m['test']}` |" for m in slow),
        ]
    if by_file:
        body += [
            "",
            "Lab tests' time by file (set-up, calls and teardown; lab tests run one at a"
            " time, beside the unit tests):",
            "",
            "| s | file |",
            "|---:|---|",
            *(f"| {m['sec']} | `{m['what']}` |" for m in by_file),
        ]
    update_section("ci", "\n".join(body).rstrip())
    sys.exit(rc)


if __name__ == "__main__":
    main()
