"""Start one of drivelab's PostgreSQL clusters and wait only until it accepts
connections (pg_isready every 50 ms).

Debian's ``pg_ctlcluster start`` (which a host's systemd unit ``postgresql@V-C`` runs as
well) sleeps 0.5 s after pg_ctl has the server up and then probes it three more times
0.5 s apart, however soon the server is ready: 2 s of every cold start and of every
cell whose cluster was stopped. Here the start is begun without waiting for it:
- under systemd, ``systemctl start --no-block`` on the unit; the unit turns active a
  little later, on its own; a unit that fails ends the wait (checked every second);
- without systemd (the namespace lab, also on a machine whose systemd runs outside the
  lab host's network namespace: :func:`systemd_runs_here`), ``pg_ctlcluster start
  --skip-systemctl-redirect`` in a session of its own,
  its output to an unlinked file; it ends on its own after its probes; a
  pg_ctlcluster that exits non-zero ends the wait with its last line of output.
The server's own log, pid file and configuration stay Debian's: nothing of
pg_ctlcluster's work is redone here."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

#: seconds a started server may take to accept connections (crash recovery included)
START_TIMEOUT_S = 600
POLL_S = 0.05


def systemd_runs_here():
    """Whether this host's services are systemd's: systemd runs (/run/systemd/system) and
    its PID 1 shares this process's network namespace. A host of the namespace lab is a
    network namespace of a machine that may run systemd itself: a service started through
    that systemd (``systemctl``, or ``pg_ctlcluster``'s redirect to it) would run in the
    machine's network, away from the lab host's address and cgroups."""
    if not os.path.isdir("/run/systemd/system"):
        return False
    try:
        return os.readlink("/proc/1/ns/net") == os.readlink("/proc/self/ns/net")
    except OSError:  # not root: PID 1's namespace is not ours to read; a lab host's is
        return True


def ctl_argv(major, cluster, action, systemd):
    """``pg_ctlcluster``'s argv for ``action``; where systemd does not run this host's
    services, with ``--skip-systemctl-redirect`` (pg_ctlcluster hands start, stop and
    restart to systemctl whenever /run/systemd/system exists)."""
    skip = [] if systemd else ["--skip-systemctl-redirect"]
    return ["pg_ctlcluster", str(major), cluster, action, *skip]


def unit(major, cluster):
    return f"postgresql@{major}-{cluster}"


def isready(major, port):
    argv = [f"/usr/lib/postgresql/{major}/bin/pg_isready", "-q", "-p", str(port)]
    return subprocess.run(argv, capture_output=True, check=False).returncode == 0


def running(major, cluster):
    """Whether the cluster's postmaster runs (pg_ctlcluster status: 0 runs, 3 does not)."""
    argv = ["pg_ctlcluster", str(major), cluster, "status"]
    return subprocess.run(argv, capture_output=True, check=False).returncode == 0


def start(major, cluster, port, systemd, timeout=START_TIMEOUT_S):
    """(rc, stdout, stderr) of starting the cluster, rc 0 once it accepts connections."""
    if systemd:
        return _start_unit(unit(major, cluster), major, port, timeout)
    return _start_ctl(major, cluster, port, timeout)


def _start_unit(name, major, port, timeout):
    started = subprocess.run(
        ["systemctl", "start", "--no-block", name], capture_output=True, text=True, check=False
    )
    if started.returncode != 0:
        return started.returncode, started.stdout, started.stderr
    deadline = time.monotonic() + timeout
    next_check = time.monotonic() + 1
    while time.monotonic() < deadline:
        if isready(major, port):
            return 0, "", ""
        if time.monotonic() >= next_check:
            next_check += 1
            failed = subprocess.run(["systemctl", "is-failed", "-q", name], check=False)
            if failed.returncode == 0:
                return 1, "", f"{name} failed (journalctl -u {name})"
        time.sleep(POLL_S)
    return 1, "", f"not accepting connections {timeout} s after starting {name}"


def _start_ctl(major, cluster, port, timeout):
    argv = ctl_argv(major, cluster, "start", systemd=False)
    with tempfile.TemporaryFile() as out:
        ctl = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rc = ctl.poll()
            if rc is not None and rc != 0:
                out.seek(0)
                return rc, "", out.read().decode("utf-8", "replace")
            # exit 0: pg_ctlcluster's own probes found the server ready
            if rc == 0 or isready(major, port):
                return 0, "", ""
            time.sleep(POLL_S)
    return 1, "", f"not accepting connections {timeout} s after {' '.join(argv)}"
