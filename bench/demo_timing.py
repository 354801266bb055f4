"""Wall time of `make demo` from a fresh clone (lab up, the two-client scenario in its
lab size over the four emulated drive classes, the report), and whether its output holds
anything an operator must learn to ignore (a line with WARNING or DEPRECATION).
Target: <= 10 minutes on this machine, no such line.

Clones the committed HEAD into a temporary folder, runs `make demo` there as a new user
would (its `make setup` makes a new venv), then `make down` and removes the clone, even
on failure. Needs root and no lab up.

    .venv/bin/python bench/demo_timing.py     # as root
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
NOISE = re.compile(r"WARNING|DEPRECATION")


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()


def report_lines(lines: list[str]) -> list[str]:
    """The terminal report as printed: from its 'test:' line (or its title) to the
    line naming the HTML report."""
    start = next(
        (i for i, line in enumerate(lines) if line.startswith("test: ")),
        next((i for i, line in enumerate(lines) if ": tps over the window" in line), None),
    )
    if start is None:
        return []
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("HTML report")), None)
    return lines[start : (end + 1 if end is not None else len(lines))]


def main() -> None:
    commit = git("rev-parse", "--short", "HEAD")
    clone = Path(tempfile.mkdtemp(prefix="drivelab-demo-"))
    try:
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        started = time.monotonic()
        proc = subprocess.run(
            ["make", "demo"], cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, check=False,
        )  # fmt: skip
        seconds = time.monotonic() - started
    finally:
        subprocess.run(["make", "down"], cwd=clone, capture_output=True, check=False)
        shutil.rmtree(clone, ignore_errors=True)
    lines = proc.stdout.splitlines()
    noise = [line for line in lines if NOISE.search(line)]
    estimate = next((line for line in lines if line.startswith("estimated duration")), "-")
    report = report_lines(lines)
    print("\n".join(report))
    print(f"make demo: exit {proc.returncode}, {seconds:.0f} s, {len(noise)} WARNING lines")
    body = [
        "## make demo (`bench/demo_timing.py`)",
        "",
        machine_note(),
        "",
        f"`make demo` in a fresh clone of commit {commit} (a new venv: `make setup` included),"
        f" output to a pipe (no terminal, as in a log): exit {proc.returncode},"
        f" **{seconds / 60:.1f} min** ({seconds:.0f} s; target <= 10 min). The plan said:"
        f" {estimate} (the scenario alone). Lines holding WARNING or DEPRECATION:"
        f" **{len(noise)}** (target 0).",
        "",
        *(["```", *noise[:10], "```", ""] if noise else []),
        "The report as printed:",
        "",
        "```",
        *report,
        "```",
    ]
    update_section("demo", "\n".join(body))
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
