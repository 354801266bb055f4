"""The start-at wrapper (roles/pgbench_client/files/pgbench-at), run as a real process
with a real named pipe: armed, it waits for the instant the controller hands over, then
starts its command no earlier than that instant; without an instant it gives up and says
so; an instant already past starts it at once. What it records is what gather reads."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

WRAPPER = REPO / "roles" / "pgbench_client" / "files" / "pgbench-at"


def start(rundir: Path, *opts: str, command=("/bin/sh", "-c", "echo started; exit 7")):
    return subprocess.Popen(
        [sys.executable, str(WRAPPER), *opts, "--dir", str(rundir), "--", *command],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def armed(fifo: Path, proc: subprocess.Popen, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not (fifo.exists() and stat.S_ISFIFO(fifo.stat().st_mode)):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "never armed"
        time.sleep(0.01)


def hand_over(fifo: Path, start_at: float, chosen_at: float) -> None:
    # as the playbook does: one line into the pipe
    with open(fifo, "w", encoding="ascii") as fh:
        fh.write(f"{start_at} {chosen_at}\n")


def test_armed_it_waits_for_the_instant_and_starts_no_earlier(tmp_path):
    rundir, fifo = tmp_path / "run", tmp_path / "run" / ".go"
    rundir.mkdir()
    proc = start(rundir, "--go", str(fifo))
    armed(fifo, proc)
    time.sleep(0.3)
    assert proc.poll() is None, "started before it was handed an instant"
    assert not (rundir / "stdout.txt").exists()
    chosen = time.time()
    at = chosen + 0.4
    hand_over(fifo, at, chosen)
    assert proc.wait(timeout=30) == 7  # the command's exit code
    record = json.loads((rundir / "command.json").read_text())
    assert record["start_at"] == pytest.approx(at) and record["chosen_at"] == pytest.approx(chosen)
    assert record["armed_at"] < chosen <= record["go_at"] < record["start_at"]
    assert record["start_at"] <= record["launched_at"] <= record["ended_at"]
    assert record["rc"] == 7 and record["argv"][0] == "/bin/sh"
    assert (rundir / "rc.txt").read_text() == "rc=7\n"
    assert (rundir / "stdout.txt").read_text() == "started\n"
    assert not fifo.exists(), "the pipe is left in the run folder (it would be fetched)"


def test_an_instant_already_past_starts_it_at_once(tmp_path):
    rundir, fifo = tmp_path / "run", tmp_path / "run" / ".go"
    proc = start(rundir, "--go", str(fifo))
    armed(fifo, proc)
    at = time.time() - 1.0
    hand_over(fifo, at, at - 0.5)
    assert proc.wait(timeout=30) == 7
    record = json.loads((rundir / "command.json").read_text())
    assert record["launched_at"] >= record["go_at"] > record["start_at"]


def test_no_instant_it_gives_up_without_starting_pgbench(tmp_path):
    rundir, fifo = tmp_path / "run", tmp_path / "run" / ".go"
    proc = start(rundir, "--go", str(fifo), "--arm-timeout", "0.5")
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 3
    assert err == "pgbench-at: armed, but no start instant came; pgbench not started\n"
    record = json.loads((rundir / "command.json").read_text())
    assert record["rc"] == 3 and record["error"] == "armed, but no start instant came"
    assert record["start_at"] is None and "launched_at" not in record
    assert (rundir / "rc.txt").read_text() == "rc=3\n"
    assert not (rundir / "stdout.txt").exists() and not fifo.exists()


def test_a_leftover_at_the_pipe_path_is_replaced(tmp_path):
    """An interrupted attempt's leftover where the pipe goes (here a plain file a late
    hand-over made) is replaced by the pipe; the wrapper arms and starts."""
    rundir, fifo = tmp_path / "run", tmp_path / "run" / ".go"
    rundir.mkdir()
    fifo.write_text("1.0 0.5\n")
    proc = start(rundir, "--go", str(fifo))
    armed(fifo, proc)
    hand_over(fifo, time.time() + 0.1, time.time())
    assert proc.wait(timeout=30) == 7
    assert json.loads((rundir / "command.json").read_text())["start_at"] > 1.0


def test_at_zero_starts_at_once_and_bad_usage_is_refused(tmp_path):
    proc = start(tmp_path / "now", "--at", "0")
    assert proc.wait(timeout=30) == 7
    record = json.loads((tmp_path / "now" / "command.json").read_text())
    assert record["start_at"] == 0 and "chosen_at" not in record
    bad = start(tmp_path / "bad")
    _, err = bad.communicate(timeout=30)
    assert bad.returncode == 2 and err.startswith("usage: pgbench-at (--at EPOCH | --go FIFO")


def test_pgbench_itself_runs_in_the_normal_scheduling_class(tmp_path):
    """The wrapper wakes in the real-time class where allowed; what it starts never
    inherits it (a real-time pgbench would starve the host it measures from)."""
    rundir, fifo = tmp_path / "run", tmp_path / "run" / ".go"
    probe = (sys.executable, "-c", "import os; print(os.sched_getscheduler(0))")
    proc = start(rundir, "--go", str(fifo), command=probe)
    armed(fifo, proc)
    hand_over(fifo, time.time() + 0.2, time.time())
    assert proc.wait(timeout=30) == 0
    assert (rundir / "stdout.txt").read_text() == f"{os.SCHED_OTHER}\n"
    # whether the wake-up itself got the real-time class is recorded: as a process here
    # can get it or not
    allowed = subprocess.run(
        [sys.executable, "-c", "import os; os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))"],
        capture_output=True, check=False,
    ).returncode == 0  # fmt: skip
    record = json.loads((rundir / "command.json").read_text())
    assert record["realtime"] is allowed


def test_a_command_that_cannot_be_run_is_recorded_as_not_started(tmp_path):
    """pgbench is exec'd by a process forked ahead of the instant: when the exec fails,
    the wrapper says why, records it and ends with rc 127, as a shell would."""
    proc = start(tmp_path / "run", "--at", "0", command=(str(tmp_path / "no-such-pgbench"),))
    _, err = proc.communicate(timeout=30)
    record = json.loads((tmp_path / "run" / "command.json").read_text())
    assert proc.returncode == 127 and record["rc"] == 127
    what = f"pgbench not started: {tmp_path / 'no-such-pgbench'}: No such file or directory"
    assert record["error"] == what and what in err
    assert record["launched_at"] >= record["start_at"]


def wait_for_file(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"no {path.name}"
        time.sleep(0.02)


def test_in_the_background_the_command_returns_once_armed_and_the_wrapper_goes_on(tmp_path):
    """--background, as the role launches it: the command returns as soon as the pipe is
    there, saying the wrapper's pid; the wrapper, in a session of its own, takes the
    instant, starts the command and records it as in the foreground."""
    rundir, fifo = tmp_path / "run", tmp_path / "run" / ".go"
    proc = start(rundir, "--go", str(fifo), "--background")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and err == "", err
    said = json.loads(out)
    assert said["state"] == "armed" and stat.S_ISFIFO(fifo.stat().st_mode)
    assert os.getsid(said["pid"]) == said["pid"] != os.getsid(0)
    assert not (rundir / "command.json").exists()
    hand_over(fifo, time.time() + 0.2, time.time())
    wait_for_file(rundir / "command.json")
    record = json.loads((rundir / "command.json").read_text())
    assert record["rc"] == 7 and record["start_at"] <= record["launched_at"]
    assert (rundir / "stdout.txt").read_text() == "started\n"
    assert (rundir / "rc.txt").read_text() == "rc=7\n"


def test_in_the_background_a_wrapper_that_cannot_arm_fails_the_command(tmp_path):
    """What goes wrong after the wrapper went to the background and before it armed (here
    its named pipe's folder does not exist) is the command's own failure, on its stderr,
    exit 1: not a silent background process."""
    proc = start(tmp_path / "run", "--go", str(tmp_path / "no-such-folder" / ".go"), "--background")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1 and out == ""
    assert "FileNotFoundError" in err, err
    assert not (tmp_path / "run" / "command.json").exists()


def test_a_command_still_running_at_the_deadline_is_ended_and_recorded(tmp_path):
    """--deadline bounds the wrapper as async's timeout did: a pgbench still running
    then gets SIGTERM; command.json says so and the rc is the signal's."""
    rundir = tmp_path / "run"
    began = time.monotonic()
    proc = start(rundir, "--at", "0", "--deadline", "1", command=("sleep", "30"))
    assert proc.wait(timeout=30) != 0
    assert time.monotonic() - began < 10
    record = json.loads((rundir / "command.json").read_text())
    assert record["rc"] == -15
    assert record["error"] == "pgbench still ran after the wrapper's deadline of 1 s: ended"
