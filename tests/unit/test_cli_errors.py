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
    from collector import cli, runcmd  # noqa: PLC0415

    monkeypatch.setattr(runcmd, "LOCAL_INVENTORY", tmp_path / "no-lab")
    monkeypatch.setenv("DRIVELAB_RESULTS", str(tmp_path / "results"))
    repo = Path(__file__).resolve().parents[2]
    argv = ["run", str(repo / "scenarios" / "seed-two-clients.yml"), "--size", "lab", "--dry-run"]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert " nvme-ext4-cluster-s34-h2-tpcb " in out and "2 client hosts" in out
    assert "estimated duration: about" in out
    assert "not checked (no inventory" in out and "candidate drives of the DB host" in out
    assert not (tmp_path / "results").exists()
    # with the inventory named and missing, it stays an error: the operator asked for it
    assert cli.main([*argv, "--inventory", str(tmp_path / "nope")]) == 2
    assert "inventory " in capsys.readouterr().err
