"""A throwaway sshd on 127.0.0.1 for the unit tests that need a real one (the live
view's Fabric follower, the SSH preflight), started and stopped by its own PID."""

from __future__ import annotations

import contextlib
import getpass
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from collector.live import ClientTarget

SSHD = Path("/usr/sbin/sshd")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sshd:
    """One sshd on 127.0.0.1, started and stopped by its own PID only."""

    def __init__(self, root: Path) -> None:
        if not SSHD.exists() or not shutil.which("ssh-keygen"):
            pytest.skip("needs /usr/sbin/sshd and ssh-keygen")
        # sshd's privilege separation folder, which its service unit makes at boot: on a
        # machine where sshd never ran as a service (a CI container) it is missing, and
        # made here as the lab makes it (roles/lab), so that these tests run there too
        with contextlib.suppress(PermissionError):
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        if not Path("/run/sshd").is_dir():
            pytest.skip("sshd's privilege separation folder /run/sshd is missing")
        self.root = root
        self.user = getpass.getuser()
        for name in ("host_key", "client_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / name)],
                check=True,
                capture_output=True,
            )
        (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
        self.port = free_port()
        host_pub = " ".join((root / "host_key.pub").read_text().split()[:2])
        # a pattern, as the lab writes it ("10.213.0.* ..."), here with the port
        self.known_hosts = root / "known_hosts"
        self.known_hosts.write_text(f"[127.0.0.*]:{self.port} {host_pub}\n")
        self.config = root / "sshd_config"
        self.config.write_text(
            f"ListenAddress 127.0.0.1:{self.port}\n"
            f"HostKey {root / 'host_key'}\n"
            f"AuthorizedKeysFile {root / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "UsePAM no\n"
            "StrictModes no\n"  # the keys live under /tmp
            "PidFile none\n"
            "LogLevel ERROR\n"
        )
        self.log = (root / "sshd.log").open("w")
        self.proc = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(self.config)], stdout=self.log, stderr=self.log
        )
        deadline = time.monotonic() + 5
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    log = (root / "sshd.log").read_text()
                    raise AssertionError(f"sshd did not start: {log}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)
        self.log.close()

    def target(self, name: str, folder: Path, **changes) -> ClientTarget:
        return ClientTarget(
            name,
            "127.0.0.1",
            str(folder / "stderr.txt"),
            key_filename=str(self.root / "client_key"),
            known_hosts=str(changes.get("known_hosts", self.known_hosts)),
            port=self.port,
            user=self.user,
            connect_timeout_s=5,
        )
