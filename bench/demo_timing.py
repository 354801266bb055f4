"""Wall time of `make demo` on a fresh machine, in its parts, and whether its output
holds anything an operator must learn to ignore (a line with WARNING or DEPRECATION).
Target: <= 6 minutes in all, no such line.

1. The fresh machine's set-up: a Debian 12 container (systemd-nspawn, debootstrap
   minbase with ca-certificates and openssh-server, as a server reached over SSH has;
   no other of the Makefile's packages) with the committed tree, timed for the
   README's first step (`apt-get install make`) and `make setup-demo` (the Debian
   packages the demo needs and the venv, as `make demo` runs it); then whether the
   tests' own packages (Chromium, the container and VM labs') were left out.
2. On this machine, in a fresh clone: `make setup-demo` (the packages are here: the
   venv alone), `drivelab lab up`, and the two-client scenario in its lab size with its
   report, each timed; then `make down` and the clone removed, even on failure.

The fresh-machine total is 1's two steps plus 2's lab and scenario. Needs root and no
lab up.

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
from _container import fresh_machine, image, lab_is_up
from _report import machine_note, update_section

REPO = Path(__file__).resolve().parent.parent
NOISE = re.compile(r"WARNING|DEPRECATION")
#: its own cache: the lab's images carry the lab's packages
CACHE = Path("/var/cache/drivelab/bench-images")
FIRST = "apt-get update -qq && apt-get install -y -qq make"
TARGET_S = 360


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


def fresh_setup() -> tuple[list[tuple[str, float, int]], list[str], str]:
    """Part 1: [(step, seconds, exit)], the tests' packages found installed, the image."""
    rootfs, meta = image("bookworm", CACHE, ["ca-certificates", "openssh-server"])
    steps = []
    with fresh_machine(rootfs, "drivelab-demo-bookworm") as m:
        for shown, command in (
            ("apt-get install make", FIRST),
            ("make setup-demo", "make setup-demo"),
        ):
            seconds, rc = m.run(command)
            steps.append((shown, seconds, rc))
            print(f"fresh Debian {meta.get('version', '12')}: {shown}: exit {rc}, {seconds:.1f} s")
            if rc != 0:
                print("\n".join(m.tail(15)))
                break
        makefile = (REPO / "Makefile").read_text()
        tests_only = re.search(r"^TEST_PACKAGES := ((?:.*\\\n)*.*)$", makefile, re.M)
        names = tests_only.group(1).replace("\\\n", " ").split() if tests_only else []
        found = m.output("dpkg-query", "-W", "-f=${Package} ${db:Status-Status}\\n", *names)
        installed = [line.split()[0] for line in found.splitlines() if line.endswith(" installed")]
    return steps, installed, f"Debian {meta.get('version', '12')} ({meta['release']})"


def timed(argv: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    proc = subprocess.run(
        argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False
    )
    return time.monotonic() - started, proc


def on_this_machine() -> list[tuple[str, float, subprocess.CompletedProcess]]:
    """Part 2: [(step, seconds, process)] in a fresh clone; stops at a failed step."""
    clone = Path(tempfile.mkdtemp(prefix="drivelab-demo-"))
    steps = []
    try:
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        for shown, argv in (
            ("make setup-demo", ["make", "setup-demo"]),
            ("drivelab lab up", [".venv/bin/drivelab", "lab", "up"]),
            ("drivelab run scenarios/seed-two-clients.yml --size lab",
             [".venv/bin/drivelab", "run", "scenarios/seed-two-clients.yml", "--size", "lab"]),
        ):  # fmt: skip
            seconds, proc = timed(argv, clone)
            steps.append((shown, seconds, proc))
            print(f"this machine: {shown}: exit {proc.returncode}, {seconds:.1f} s")
            if proc.returncode != 0:
                print(proc.stdout[-3000:])
                break
    finally:
        subprocess.run(["make", "down"], cwd=clone, capture_output=True, check=False)
        shutil.rmtree(clone, ignore_errors=True)
    return steps


def main() -> None:
    if lab_is_up():
        sys.exit("demo_timing: a lab is up; run drivelab lab down first")
    commit = git("rev-parse", "--short", "HEAD")
    fresh, installed, system = fresh_setup()
    here = on_this_machine()
    ok = all(rc == 0 for _, _, rc in fresh) and len(fresh) == 2
    ok = ok and len(here) == 3 and all(p.returncode == 0 for _, _, p in here)
    lines = [line for _, _, p in here[1:] for line in p.stdout.splitlines()]
    noise = [line for line in lines if NOISE.search(line)]
    estimate = next((line for line in lines if line.startswith("estimated duration")), "-")
    report = report_lines(lines)
    parts = [(f"`{shown}` in a fresh {system} container", s) for shown, s, _ in fresh]
    parts += [(f"`{shown}` on this machine", s) for shown, s, _ in here[1:]]
    total = sum(s for _, s in parts)
    print("\n".join(report))
    print(f"fresh machine: {total:.0f} s in all; {len(noise)} WARNING lines")
    body = [
        "## make demo on a fresh machine (`bench/demo_timing.py`)",
        "",
        f"{machine_note()}; commit {commit}.",
        "",
        f"`make demo` on a machine without the packages: **{total / 60:.1f} min** in all"
        f" ({total:.0f} s; target <= {TARGET_S // 60} min:"
        f" {'met' if total <= TARGET_S and ok else 'not met'}). Its set-up timed in a fresh"
        f" {system} container (debootstrap minbase, ca-certificates and openssh-server;"
        " the committed tree; Debian's archive and PyPI reached directly); the lab and the"
        " scenario timed on this machine in a fresh clone, output to a pipe (no terminal, as"
        " in a log). Every"
        f" step passed: {'yes' if ok else 'no'}.",
        "",
        "| part | wall |",
        "|---|---:|",
        *[f"| {what} | {s:.1f} s |" for what, s in parts],
        f"| **total** | **{total:.1f} s** |",
        "",
        f"Not in the total: `make setup-demo` on this machine, where the packages were"
        f" already installed (the venv alone): {here[0][1]:.1f} s. The tests' own packages"
        f" (the Makefile's TEST_PACKAGES) that `make setup-demo` installed in the container:"
        f" {', '.join(installed) or 'none'} (target: none). The plan said: {estimate} (the"
        f" scenario alone). Lines holding WARNING or DEPRECATION: **{len(noise)}** (target 0).",
        "",
        *(["```", *noise[:10], "```", ""] if noise else []),
        "The report as printed:",
        "",
        "```",
        *report,
        "```",
    ]
    if not ok:
        print("demo_timing: a step failed; docs/benchmarks.md not written", file=sys.stderr)
        sys.exit(1)
    update_section("demo", "\n".join(body))


if __name__ == "__main__":
    main()
