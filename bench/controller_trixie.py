#!/usr/bin/env python3
"""The controller on Debian 13 (Python 3.13): the README's first step, then `make setup`,
`make unit` and `make lint`, in a systemd-nspawn container made from the lab's Debian 13
image (debootstrap minbase with systemd and python3; built here when it is not cached),
with the committed tree (git archive HEAD) copied in. Prints each step's wall time and
writes them into docs/benchmarks.md (section controller_trixie).

Run as root on the controller: `.venv/bin/python bench/controller_trixie.py`. Network:
the container shares the controller's, for Debian's archive and PyPI only (apt, pip).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from _container import fresh_machine, image, lab_is_up
from _report import machine_note, update_section

REPO = Path(__file__).resolve().parent.parent
CACHE = Path("/var/cache/drivelab/images")
#: what a user types first on a fresh machine (README), then the Makefile's targets
STEPS = [
    (
        "apt-get update && apt-get install -y make",
        "apt-get update -qq && apt-get install -y -qq make",
    ),
    ("make setup", "make setup"),
    ("make unit", "make unit"),
    ("make lint", "make lint"),
]
#: the lab's Debian 13 image (its cache, its packages)
PACKAGES = ["systemd", "systemd-sysv", "dbus", "openssh-server", "python3"]


def main() -> int:
    if os.geteuid() != 0:
        print("controller_trixie: run as root (systemd-nspawn)", file=sys.stderr)
        return 2
    if lab_is_up():
        print("controller_trixie: a lab is up; run drivelab lab down first", file=sys.stderr)
        return 2
    rootfs, meta = image("trixie", CACHE, PACKAGES)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    results = []
    with fresh_machine(rootfs, "drivelab-trixie-controller") as m:
        for shown, command in STEPS:
            seconds, rc = m.run(command)
            results.append((shown, seconds, rc))
            print(f"{shown}: exit {rc}, {seconds:.1f} s", flush=True)
            if rc != 0:
                print("\n".join(m.tail(15)))
                break
        python = m.output("/root/drivelab/.venv/bin/python", "--version")
        text = re.sub(r"\x1b\[[0-9;]*m", "", m.log.read_text(errors="replace"))
        summary = re.findall(r"^=*\s*(\d+ passed[^=\n]* in [0-9.]+s)", text, re.M)

    ok = len(results) == len(STEPS) and all(rc == 0 for _, _, rc in results)
    lines = [
        "## The controller on Debian 13 (`bench/controller_trixie.py`)",
        "",
        f"{machine_note()}; commit {commit}. A systemd-nspawn container from the lab's Debian"
        f" {meta.get('version', '13')} ({meta['release']}) image: debootstrap minbase with"
        f" {', '.join(meta['packages'])}; the committed tree copied in; {python} in its venv."
        " Each step as the README and the Makefile give it, as root, Debian's archive and PyPI"
        " reached directly, with the controller's site CA certificates and /etc/pip.conf.",
        "",
        "| step | exit | wall |",
        "|---|---:|---:|",
        *[f"| `{shown}` | {rc} | {seconds:.1f} s |" for shown, seconds, rc in results],
        "",
        f"All steps passed: {'yes' if ok else 'no'}."
        + (f" `make unit`: {summary[-1]}." if summary else ""),
    ]
    text = "\n".join(lines)
    print(text)
    if not ok:  # docs/benchmarks.md keeps the last whole run
        print("controller_trixie: a step failed; docs/benchmarks.md not written", file=sys.stderr)
        return 1
    update_section("controller_trixie", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
