"""`drivelab run` end to end on the real lab: a 2 drives x 2 repetitions scenario (XFS)
killed with SIGKILL after its first stored run and started again finishes with
exactly the expected runs in the store; adaptive repetitions stop within their bounds."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from tests.lab.conftest import BIN, REPO, drivelab

pytestmark = pytest.mark.lab

STAMPS = Path("/var/lib/drivelab/provisioned")

MATRIX = """\
    ---
    name: resume-test
    baseline: ssd
    drives: [nvme, ssd]
    filesystems: [{fs: xfs}]
    placement: [tablespace]
    workload: {scale: [2], clients_per_host: 2, threads: 1, duration: 5}
    hosts: [2]
    repetitions: 2
"""
ADAPTIVE = """\
    ---
    name: adaptive-test
    baseline: nvme
    drives: [nvme]
    workload: {scale: [2], clients_per_host: 2, threads: 1, duration: 5}
    hosts: [2]
    repetitions: {adaptive: {target_ci_pct: 50, min: 2, max: 4}}
"""


def stored(db) -> list[tuple[str, int, str]]:
    if not db.exists():
        return []
    con = sqlite3.connect(db)
    try:
        return con.execute(
            """SELECT c.key, r.repetition, r.status FROM runs r JOIN cells c ON c.id = r.cell_id
               ORDER BY c.key, r.repetition"""
        ).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


def drivelab_run(path, env, **kw):
    return subprocess.Popen(
        [str(BIN / "drivelab"), "run", str(path), "--no-telemetry"], cwd=REPO, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw,
    )  # fmt: skip


def test_killed_after_the_first_run_and_started_again_it_finishes_exactly(lab2, tmp_path):
    scenario = tmp_path / "resume-test.yml"
    scenario.write_text(textwrap.dedent(MATRIX))
    env = dict(os.environ, DRIVELAB_RESULTS=str(tmp_path / "results"))
    db = tmp_path / "results" / "drivelab.db"
    first = drivelab_run(scenario, env)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not stored(db) and first.poll() is None:
            time.sleep(1)
        assert stored(db), f"no run stored before the deadline: {first.poll()}"
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    # a fresh lab (no stamps): provisioned in full, and every host stamped afterwards
    assert sorted(p.name for p in STAMPS.iterdir()) == ["client1", "client2", "dbhost"]
    kept = stored(db)
    assert len(kept) >= 1
    second = drivelab_run(scenario, env)
    out, _ = second.communicate(timeout=1500)
    assert second.returncode == 0, out[-3000:]
    assert "all 2 repetitions stored, skipped" in out or "rep 1" in out
    # nothing drivelab provisions with changed since: provisioning stopped at the stamps
    assert "provisioning skipped: every host is current" in out
    runs = stored(db)
    assert len(runs) == 4, runs
    assert len({(key, rep) for key, rep, _ in runs}) == 4
    assert all(status == "complete" for _, _, status in runs), runs
    assert {rep for _, rep, _ in runs} == {0, 1}
    for run in kept:  # what the first attempt stored is still there, not duplicated
        assert run[:2] in {(key, rep) for key, rep, _ in runs}
    assert "resume-test" in out and "tps" in out


def test_adaptive_repetitions_stop_within_bounds_and_report_the_ci(lab2, tmp_path):
    scenario = tmp_path / "adaptive-test.yml"
    scenario.write_text(textwrap.dedent(ADAPTIVE))
    env = dict(os.environ, DRIVELAB_RESULTS=str(tmp_path / "results"))
    proc = drivelab_run(scenario, env)
    out, _ = proc.communicate(timeout=1200)
    assert proc.returncode == 0, out[-3000:]
    runs = stored(tmp_path / "results" / "drivelab.db")
    assert 2 <= len(runs) <= 4, runs
    assert "complete runs, 95% CI ±" in out


def test_a_client_added_to_a_provisioned_lab_is_provisioned_once(lab2, tmp_path, monkeypatch):
    """`lab up --clients 3` on the two-client lab the tests above provisioned: the first
    provisioning runs in full (client3 is new) and makes client3's password; every host
    then keeps the stamp of what it has, so the next provisioning stops at the stamps.
    (Before: the stamp was computed before the password existed, so two runs in a row
    provisioned in full.) drivelab run makes this very call (ScenarioRun.provision)."""
    from collector import runner  # noqa: PLC0415

    monkeypatch.setenv("DRIVELAB_RESULTS", str(tmp_path / "results"))
    drivelab("lab", "up", "--clients", "3")
    _, skipped = runner.provision_unless_unchanged()
    assert not skipped
    assert sorted(p.name for p in STAMPS.iterdir()) == ["client1", "client2", "client3", "dbhost"]
    _, skipped = runner.provision_unless_unchanged()
    assert skipped, "the second provisioning after adding a client did not stop at the stamps"
