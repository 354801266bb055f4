# Shared helpers for the lab modules: run a command, read ip's JSON, netns identity.
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time


class LabError(Exception):
    pass


def run(argv, check=True, input_text=None):
    """Runs argv (a list, never a shell string). Returns (rc, stdout, stderr)."""
    proc = subprocess.run(argv, capture_output=True, text=True, input=input_text, check=False)
    if check and proc.returncode != 0:
        raise LabError(f"{' '.join(argv)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.returncode, proc.stdout, proc.stderr


def ip_json(*args, netns=None):
    argv = ["ip"] + (["-n", netns] if netns else []) + ["-j", *args]
    rc, out, _ = run(argv, check=False)
    if rc != 0 or not out.strip():
        return []
    return json.loads(out)


def netns_list():
    rc, out, _ = run(["ip", "-j", "netns", "list"], check=False)
    if rc != 0 or not out.strip():
        return []
    return [entry["name"] for entry in json.loads(out)]


def netns_pids(name):
    rc, out, _ = run(["ip", "netns", "pids", name], check=False)
    if rc != 0:
        return []
    return [int(p) for p in out.split() if p.isdigit()]


def ssh_answers(address, timeout=1.0):
    """Whether an sshd answers on address:22 with its banner."""
    try:
        with socket.create_connection((address, 22), timeout=timeout) as sock:
            sock.settimeout(timeout)
            return sock.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is not alive for our purposes
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def end_pids(pids, grace=5.0):
    """SIGTERM the given pids (ours, by pid), then SIGKILL what is left after grace s."""
    pids = [p for p in pids if p != os.getpid() and pid_alive(p)]
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 30.0)):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            pids = [p for p in pids if pid_alive(p)]
            if not pids:
                return []
            time.sleep(0.1)
    return [p for p in pids if pid_alive(p)]


def same_netns(pid, name):
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return False
