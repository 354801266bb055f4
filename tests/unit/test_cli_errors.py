"""Bad command lines end in one line naming the problem, exit 2, and run nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["lab", "up", "--clients", "0"],
            "argument --clients: '0' is not a number of client hosts",
        ),
        (
            ["lab", "up", "--clients", "abc"],
            "argument --clients: 'abc' is not a number of client hosts",
        ),
        (["lab", "up", "--clients", "201"], "give a whole number from 1 to 200"),
        (["lab", "up", "--clients", "-3"], "argument --clients"),
        (["lab", "up", "--db-memory", "5ZB"], "argument --db-memory: '5ZB': not a size"),
        (["lab", "up", "--db-memory", "64M"], "argument --db-memory: '64M' is outside 128M.."),
        (["lab", "up", "--db-memory", "1P"], "argument --db-memory: '1P' is outside 128M.."),
        (
            ["lab", "up", "--hosts", "vm", "--db-memory", "256M"],
            "--db-memory 256.0 MiB: with --hosts vm it is the VM's RAM, at least 512.0 MiB",
        ),
        (["lab", "up", "--subnet", "8.8.8.0/24"], "must be a private IPv4 /24"),
        (["lab", "up", "--subnet", "10.0.0.0/8"], "must be a private IPv4 /24"),
        (["lab", "up", "--bridge", "eth0"], "a lab bridge is 'drivelab' plus"),
        (["lab", "up", "--bridge", "drivelab0; rm -rf /"], "a lab bridge is 'drivelab' plus"),
        (["lab", "sideways"], "invalid choice: 'sideways'"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        ([], "the following arguments are required: COMMAND"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_bad_arguments_give_one_line_and_run_nothing(tmp_path, args, expected):
    proc = subprocess.run(
        [str(BIN / "drivelab"), *args],
        capture_output=True,
        text=True,
        env={"DRIVELAB_RESULTS": str(tmp_path), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("drivelab: ")
    assert expected in lines[0]
    assert proc.stdout == ""
    # nothing ran: no playbook log was even opened
    assert not any(tmp_path.iterdir())


def test_dry_run_without_a_lab_prints_the_plan_and_what_it_could_not_check(
    tmp_path, monkeypatch, capsys
):
    """An operator checks a scenario file before any lab exists: the plan, hosts by count,
    and one line naming what only an inventory can tell; nothing written."""
    from collector.cli import main as cli  # noqa: PLC0415
    from collector.cli import runcmd  # noqa: PLC0415

    monkeypatch.setattr(runcmd, "LOCAL_INVENTORY", tmp_path / "no-lab")
    monkeypatch.setenv("DRIVELAB_RESULTS", str(tmp_path / "results"))
    repo = Path(__file__).resolve().parents[2]
    argv = ["run", str(repo / "scenarios" / "seed-two-clients.yml"), "--size", "lab", "--dry-run"]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert " nvme-ext4-cluster-s34-h2-tpcb " in out and "2 client hosts" in out
    assert "estimated duration: about" in out
    assert "not checked (no inventory" in out and "the drives are a real lab's" in out
    assert not (tmp_path / "results").exists()
    # with the inventory named and missing, it stays an error: the operator asked for it
    assert cli.main([*argv, "--inventory", str(tmp_path / "nope")]) == 2
    assert "inventory " in capsys.readouterr().err


STOPPED = """
import os, signal, time
from collector.errors import Stopped, stopped_by_signals

before = signal.getsignal(signal.SIGTERM)
try:
    with stopped_by_signals():
        try:
            os.kill(os.getpid(), signal.SIG{first})
            time.sleep(30)
            print("not stopped")
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # a second one while it unwinds
            print("cleaned up")
except Stopped as err:
    print(err, err.exit_status)
print("handlers back:", signal.getsignal(signal.SIGTERM) is before)
"""


@pytest.mark.parametrize(("first", "status"), [("TERM", 143), ("HUP", 129)])
def test_sigterm_and_sighup_unwind_as_ctrl_c_and_a_second_signal_is_ignored(first, status):
    """What `drivelab run` runs inside: the signal raises in the main thread, the clean-up
    (``finally``: the playbook stopped, the lease released) runs to its end even when
    another signal comes meanwhile, and the status is 128 + the signal's number."""
    proc = subprocess.run(
        [sys.executable, "-c", STOPPED.format(first=first)],
        capture_output=True, text=True, timeout=60, check=False,
        cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "cleaned up",
        f"stopped by SIG{first} {status}",
        "handlers back: True",
    ], proc.stdout + proc.stderr
