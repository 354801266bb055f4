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

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import machine_note, update_section

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CACHE = Path("/var/cache/drivelab/images")
IMAGE = CACHE / "trixie"
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


def image() -> Path:
    """The lab's Debian 13 image, built by the lab role's own module when missing."""
    if not (IMAGE / "image.json").exists():
        env = dict(
            os.environ,
            ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
            ANSIBLE_LIBRARY=str(REPO / "roles/lab/library"),
            ANSIBLE_MODULE_UTILS=str(REPO / "roles/lab/module_utils"),
        )
        args = {
            "release": "trixie",
            "cache_dir": str(CACHE),
            "packages": ["systemd", "systemd-sysv", "dbus", "openssh-server", "python3"],
        }
        subprocess.run(
            [
                str(BIN / "ansible"),
                "localhost",
                "-c",
                "local",
                "-m",
                "lab_image",
                "-a",
                json.dumps(args),
            ],
            cwd=REPO,
            env=env,
            check=True,
        )
    return IMAGE / "rootfs"


def nspawn_argv(root: Path) -> list[str]:
    """No machined, no unit of its own (--keep-unit: no system bus needed), the
    controller's DNS for the archive and PyPI, output as a plain pipe."""
    return [
        "systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--as-pid2",
        "--machine=drivelab-trixie-controller", "--resolv-conf=copy-host", "--timezone=off",
        "--link-journal=no", "--console=pipe", f"--directory={root}",
    ]  # fmt: skip


def nspawn(root: Path, command: str, log: Path) -> tuple[float, int]:
    argv = [
        *nspawn_argv(root),
        "--chdir=/root/drivelab",
        "--setenv=DEBIAN_FRONTEND=noninteractive",
        "/bin/bash",
        "-ec",
        command,
    ]
    start = time.monotonic()
    with open(log, "ab") as out:
        out.write(f"\n$ {command}\n".encode())
        out.flush()
        rc = subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, check=False
        ).returncode
    return time.monotonic() - start, rc


def site_trust(root: Path) -> list[str]:
    """What any machine on the controller's network carries, as the controller does: its
    local CA certificates (ca-certificates adds them to the store when apt installs it)
    and pip's site configuration. Nothing of drivelab's."""
    copied = []
    local = Path("/usr/local/share/ca-certificates")
    if local.is_dir():
        dest = root / "usr/local/share/ca-certificates"
        dest.mkdir(parents=True, exist_ok=True)
        for crt in local.glob("*.crt"):
            shutil.copy2(crt, dest / crt.name)
            copied.append(str(crt))
    if Path("/etc/pip.conf").is_file():
        shutil.copy2("/etc/pip.conf", root / "etc/pip.conf")
        copied.append("/etc/pip.conf")
    return copied


def tail(log: Path, n: int = 3) -> list[str]:
    lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()]
    return lines[-n:]


def main() -> int:
    if os.geteuid() != 0:
        print("controller_trixie: run as root (systemd-nspawn)", file=sys.stderr)
        return 2
    if Path("/var/lib/drivelab/settings.json").exists():
        # a container started beside the lab gets a copy of the mount table with the
        # lab's drives in it, which kept two loop devices from detaching at lab down
        print("controller_trixie: a lab is up; run drivelab lab down first", file=sys.stderr)
        return 2
    rootfs = image()
    meta = json.loads((IMAGE / "image.json").read_text())
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="drivelab-trixie-controller-", dir="/var/tmp"))
    log = work / "steps.log"
    results = []
    try:
        root = work / "root"
        subprocess.run(["cp", "-a", "--reflink=auto", str(rootfs), str(root)], check=True)
        (root / "root/drivelab").mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", "HEAD"], cwd=REPO, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(root / "root/drivelab")], input=archive, check=True)
        site_trust(root)
        for shown, command in STEPS:
            seconds, rc = nspawn(root, command, log)
            results.append((shown, seconds, rc))
            print(f"{shown}: exit {rc}, {seconds:.1f} s", flush=True)
            if rc != 0:
                print("\n".join(tail(log, 15)))
                break
        python = subprocess.run(
            [*nspawn_argv(root), "/root/drivelab/.venv/bin/python", "--version"],
            capture_output=True, text=True, check=False,
        ).stdout.strip()  # fmt: skip
        text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace"))
        summary = re.findall(r"^=*\s*(\d+ passed[^=\n]* in [0-9.]+s)", text, re.M)
    finally:
        shutil.rmtree(work, ignore_errors=True)

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
