"""The one way drivelab runs a daemon without a service manager
(roles/drivelab/library/drivelab_daemon.py; node_exporter in the namespace lab and the
lab's Prometheus use it), run as Ansible runs it, against the real start-stop-daemon and a
real process: a copy of sleep under a name of its own, so nothing else can match it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

MODULE = Path(__file__).resolve().parents[2] / "roles/drivelab/library/drivelab_daemon.py"

pytestmark = [
    pytest.mark.skipif(shutil.which("start-stop-daemon") is None, reason="no start-stop-daemon"),
    pytest.mark.skipif(os.geteuid() != 0, reason="--chuid needs root"),
]


def run(tmp: Path, check_mode: bool = False, **args) -> dict:
    params = {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check_mode}}
    path = tmp / "args.json"
    path.write_text(json.dumps(params))
    proc = subprocess.run(
        [sys.executable, str(MODULE), str(path)], capture_output=True, text=True, check=False
    )
    return json.loads(proc.stdout)


@pytest.fixture
def daemon(tmp_path):
    exe = tmp_path / "drivelab-test-daemon"
    shutil.copy("/usr/bin/sleep", exe)
    base = {
        "executable": str(exe),
        "pidfile": str(tmp_path / "d.pid"),
        "log": str(tmp_path / "d.log"),
        "args_file": str(tmp_path / "d.args"),
        "user": "root",
        "stop_timeout": 1,
    }
    yield tmp_path, base
    pid = tmp_path / "d.pid"
    if pid.exists():  # whatever the test left running
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid.read_text()), signal.SIGKILL)


def pid_of(tmp: Path) -> int:
    return int((tmp / "d.pid").read_text())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return (
        Path(f"/proc/{pid}").exists()
        and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
    )


def test_started_then_unchanged_then_restarted_with_new_arguments(daemon):
    tmp, base = daemon
    check = run(tmp, check_mode=True, args=["300"], **base)
    assert check["changed"] and not check["running"] and not (tmp / "d.pid").exists()

    first = run(tmp, args=["300"], **base)
    assert first["changed"] and first["started"] and first["args_changed"]
    pid = pid_of(tmp)
    assert alive(pid)
    assert (tmp / "d.args").read_text() == "--chuid=root\n300\n"
    assert oct((tmp / "d.args").stat().st_mode & 0o777) == "0o644"

    again = run(tmp, args=["300"], **base)
    assert not again["changed"] and again["running"] and pid_of(tmp) == pid

    check = run(tmp, check_mode=True, args=["301"], **base)
    assert check["changed"] and check["args_changed"] and pid_of(tmp) == pid
    assert (tmp / "d.args").read_text() == "--chuid=root\n300\n"

    other = run(tmp, args=["301"], **base)
    assert other["changed"] and other["stopped"] and other["started"]
    assert not alive(pid) and alive(pid_of(tmp)) and pid_of(tmp) != pid


def test_a_stale_pidfile_signals_nothing(daemon):
    """The pidfile names a live process that is not the daemon: it is not the daemon's."""
    tmp, base = daemon
    stranger = subprocess.Popen(["sleep", "300"])
    try:
        (tmp / "d.pid").write_text(f"{stranger.pid}\n")
        assert not run(tmp, state="status", **base)["running"]
        assert not run(tmp, state="reloaded", **base)["changed"]
        started = run(tmp, args=["300"], **base)
        assert started["started"] and stranger.poll() is None and pid_of(tmp) != stranger.pid
    finally:
        stranger.kill()
        stranger.wait()


def test_status_and_reload(daemon):
    tmp, base = daemon
    assert run(tmp, state="status", **base) | {"invocation": None} == {
        "changed": False, "running": False, "rc": 3, "invocation": None,
    }  # fmt: skip
    assert not run(tmp, state="reloaded", **base)["changed"]  # not running: nothing to reload
    run(tmp, args=["300"], **base)
    status = run(tmp, state="status", **base)
    assert status["running"] and status["rc"] == 0
    assert run(tmp, state="reloaded", check_mode=True, **base)["changed"]
    assert alive(pid_of(tmp))  # check mode sent nothing
    reloaded = run(tmp, state="reloaded", **base)
    assert reloaded["changed"]  # SIGHUP sent (sleep ends on it)


def test_started_needs_user_log_and_record(daemon):
    tmp, base = daemon
    out = run(tmp, executable=base["executable"], pidfile=base["pidfile"])
    assert out["failed"] and "user" in out["msg"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LISTENER = """
import socket, sys, time
time.sleep(float(sys.argv[2]))  # slow to listen, as a daemon reading its data may be
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
time.sleep(300)
"""


def test_wait_port_returns_once_the_daemon_listens(daemon):
    """A daemon that listens 0.5 s after its start: the one call starts it and returns
    only once its port accepts connections, the daemon still running."""
    tmp, base = daemon
    exe = tmp / "drivelab-test-listener"
    shutil.copy(sys.executable, exe)  # a copy: start-stop-daemon matches no other Python
    port = free_port()
    out = run(tmp, **{**base, "executable": str(exe)}, args=["-c", LISTENER, str(port), "0.5"],
              wait_port=port, wait_timeout=20)  # fmt: skip
    assert out["started"] and out["running"] and not out.get("failed"), out
    assert 0.4 <= out["waited"] < 20, out
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
    assert alive(pid_of(tmp))


def test_wait_port_fails_at_once_when_the_daemon_died(daemon):
    """A daemon that exits right after its start: the call fails within seconds (not
    after the 30 s wait), in one line naming its log."""
    tmp, base = daemon
    began = time.monotonic()
    out = run(tmp, args=["0.2"], wait_port=free_port(), wait_timeout=30, **base)
    assert out["failed"] and time.monotonic() - began < 10, out
    assert out["msg"].endswith(f"not running: it exited after its start (see {base['log']})")
    assert "\n" not in out["msg"]


def test_wait_port_fails_when_nothing_listens_in_time(daemon):
    tmp, base = daemon
    port = free_port()
    out = run(tmp, args=["300"], wait_port=port, wait_timeout=1, **base)
    assert out["failed"], out
    assert f"nothing accepts connections on 127.0.0.1:{port} after 1 s" in out["msg"]


def test_a_daemon_not_yet_execd_is_waited_for_not_taken_for_dead(daemon):
    """start-stop-daemon --background returns before its child has exec'd the daemon: a
    check at that moment finds no daemon behind the pidfile. Started 20 times (stopped
    between), the call waits for it every time (on the lab, 1 start in 6 was taken for a
    daemon that died)."""
    tmp, base = daemon
    exe = tmp / "drivelab-test-listener"
    shutil.copy(sys.executable, exe)
    port = free_port()
    args = {**base, "executable": str(exe)}
    for i in range(20):
        out = run(tmp, **args, args=["-c", LISTENER, str(port), "0", str(i)], wait_port=port)
        assert out["started"] and not out.get("failed"), (i, out)
        os.kill(pid_of(tmp), signal.SIGKILL)
        while alive(pid_of(tmp)):
            time.sleep(0.01)
