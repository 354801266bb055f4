"""A fresh Debian machine for the bench scripts that time what a new user's first
commands cost: a systemd-nspawn container from a debootstrap image (made by the lab
role's own module `lab_image`, cached), with the committed tree (git archive HEAD)
copied in, sharing the controller's network for Debian's archive and PyPI only (apt,
pip). Used by controller_trixie.py (Debian 13) and demo_timing.py (Debian 12)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def image(release: str, cache: Path, packages: list[str]) -> tuple[Path, dict]:
    """(root tree, image.json) of the Debian ``release`` image with ``packages`` beyond
    minbase, built by the lab role's module when missing from ``cache``."""
    folder = cache / release
    if not (folder / "image.json").exists():
        env = dict(
            os.environ,
            ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
            ANSIBLE_LIBRARY=str(REPO / "roles/lab/library"),
            ANSIBLE_MODULE_UTILS=str(REPO / "roles/lab/module_utils"),
        )
        args = {"release": release, "cache_dir": str(cache), "packages": packages}
        subprocess.run(
            [str(BIN / "ansible"), "localhost", "-c", "local", "-m", "lab_image",
             "-a", json.dumps(args)],
            cwd=REPO, env=env, check=True,
        )  # fmt: skip
    return folder / "rootfs", json.loads((folder / "image.json").read_text())


def nspawn_argv(root: Path, machine: str) -> list[str]:
    """No machined, no unit of its own (--keep-unit: no system bus needed), the
    controller's DNS for the archive and PyPI, output as a plain pipe."""
    return [
        "systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--as-pid2",
        f"--machine={machine}", "--resolv-conf=copy-host", "--timezone=off",
        "--link-journal=no", "--console=pipe", f"--directory={root}",
    ]  # fmt: skip


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


class Machine:
    """A copy of an image with the committed tree in /root/drivelab; ``run`` times one
    command there, its output appended to ``log``."""

    def __init__(self, root: Path, machine: str, log: Path) -> None:
        self.root, self.machine, self.log = root, machine, log

    def run(self, command: str) -> tuple[float, int]:
        argv = [
            *nspawn_argv(self.root, self.machine), "--chdir=/root/drivelab",
            "--setenv=DEBIAN_FRONTEND=noninteractive", "/bin/bash", "-ec", command,
        ]  # fmt: skip
        start = time.monotonic()
        with open(self.log, "ab") as out:
            out.write(f"\n$ {command}\n".encode())
            out.flush()
            rc = subprocess.run(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, check=False
            ).returncode
        return time.monotonic() - start, rc

    def output(self, *argv: str) -> str:
        return subprocess.run(
            [*nspawn_argv(self.root, self.machine), *argv],
            capture_output=True, text=True, check=False,
        ).stdout.strip()  # fmt: skip

    def tail(self, n: int = 3) -> list[str]:
        lines = [x for x in self.log.read_text(errors="replace").splitlines() if x.strip()]
        return lines[-n:]


def lab_is_up() -> bool:
    """A container started beside the lab gets a copy of the mount table with the lab's
    drives in it, which kept two loop devices from detaching at lab down."""
    return Path("/var/lib/drivelab/settings.json").exists()


@contextmanager
def fresh_machine(rootfs: Path, machine: str):
    """A Machine on a copy of ``rootfs`` with the committed tree; removed afterwards,
    even on failure."""
    work = Path(tempfile.mkdtemp(prefix=f"{machine}-", dir="/var/tmp"))
    try:
        root = work / "root"
        subprocess.run(["cp", "-a", "--reflink=auto", str(rootfs), str(root)], check=True)
        (root / "root/drivelab").mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", "HEAD"], cwd=REPO, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(root / "root/drivelab")], input=archive, check=True)
        machine_ = Machine(root, machine, work / "steps.log")
        if site_trust(root) and (root / "usr/sbin/update-ca-certificates").exists():
            # an image made with ca-certificates before the site's certificates were in
            # place: its store takes them now, as a machine of this network has them
            machine_.run("update-ca-certificates >/dev/null")
        yield machine_
    finally:
        shutil.rmtree(work, ignore_errors=True)
