"""Wall time of CI's own command, `bash .ci/run`, from a fresh clone: `make test`'s
set-up (Debian packages, a new venv), lint, unit and lab tests. Targets: `make test`
<= 30 minutes on this machine; CI stops a run at 90.

Clones the committed HEAD into a temporary folder and runs `bash .ci/run` there as CI
does, its output passed through as it comes; afterwards `make down` and the clone
removed, even on failure. Writes the section ``ci`` of docs/benchmarks.md: exit code,
wall time, how much of it went to set-up and lint (until pytest starts) and to pytest,
pytest's summary line, its slowest tests and the lab tests' time by file, and where the
machine's CPU went while pytest ran: the whole machine's busy time (/proc/stat) against
the part of it spent in CI's own process tree as it waited for it (pytest, its workers,
drivelab, ansible-playbook and its forks: the controller's side), the rest being the lab
hosts' (their sshd and every module Ansible runs there, PostgreSQL, pgbench), SSH's
connection masters (they detach from the tree) and the kernel's. Needs root
and no lab up. 45 to 55 minutes on the 2-core lab machine.

    flock /tmp/drivelab-lab.lock .venv/bin/python bench/ci_timing.py   # as root
"""

from __future__ import annotations

import os
import re
import resource
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


def busy_seconds() -> float:
    """CPU seconds the whole machine has been busy since boot (/proc/stat: all but idle
    and iowait), summed over its cores."""
    with open("/proc/stat", encoding="ascii") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def tree_seconds(root: int) -> float:
    """CPU seconds of ``root`` and its live descendants so far, each with the children it
    has waited for (/proc/<pid>/stat: utime, stime, cutime, cstime)."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        rest = text[text.rindex(")") + 2 :].split()
        stats[int(entry)] = (int(rest[1]), sum(int(x) for x in rest[11:15]))
    tick = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0))[1] / tick
        todo += [child for child, (parent, _) in stats.items() if parent == pid]
    return total


def children_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run_ci(clone: Path) -> tuple[int, float, float | None, list[str], dict]:
    """`bash .ci/run` in ``clone``: (exit code, seconds, seconds until pytest started or
    None, the output's lines, CPU seconds while pytest ran: "machine" and "tree")."""
    lines: list[str] = []
    pytest_at = None
    cpu: dict[str, float] = {}
    before = children_seconds()
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
                cpu = {"machine": -busy_seconds(), "tree": -tree_seconds(proc.pid)}
        rc = proc.wait()
    if cpu:
        cpu["machine"] += busy_seconds()
        cpu["tree"] += children_seconds() - before
    return rc, time.monotonic() - started, pytest_at, lines, cpu


def main() -> None:
    commit = git("rev-parse", "--short", "HEAD")
    clone = Path(tempfile.mkdtemp(prefix="drivelab-ci-"))
    try:
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        rc, seconds, pytest_at, lines, cpu = run_ci(clone)
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
    if cpu and pytest_at is not None:
        span = seconds - pytest_at
        ncpu = os.cpu_count() or 1
        rest = cpu["machine"] - cpu["tree"]
        split += (
            f" While pytest ran, the machine was busy {cpu['machine']:.0f} CPU-seconds"
            f" ({cpu['machine'] / span:.2f} of its {ncpu} cores on average): CI's own process"
            f" tree (pytest and its workers, drivelab, ansible-playbook and its forks)"
            f" {cpu['tree']:.0f} s ({cpu['tree'] / max(cpu['machine'], 1e-9):.0%}), the rest"
            f" (the lab hosts' sshd and module runs, PostgreSQL, pgbench, SSH's connection"
            f" masters, the kernel) {rest:.0f} s."
        )
        print(f"CPU while pytest ran: machine {cpu['machine']:.0f} s, tree {cpu['tree']:.0f} s")
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
