"""The cold start of a measured run in one module run (roles/pgbench_run/module_utils/
drivelab_coldstart.py, run by the modules drivelab_cold_start and drivelab_environment):
its steps in the order the seeds' cold start needs (FACTS.md), the exit codes it lets
pass, and what it refuses to touch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.hostcode import module_util

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def pgstart():
    return module_util("drivelab", "drivelab_pgstart")


@pytest.fixture(scope="module")
def cold():
    pgstart()  # it imports it from ansible.module_utils
    return module_util("pgbench_run", "drivelab_coldstart")


def test_steps_in_order_for_every_client_database(cold):
    steps = cold.steps("15", "drivelab_nvme", 5440, ["drivelab_client1", "drivelab_client2"])
    names = [name for name, _, _ in steps]
    assert names == [
        "start if down",
        "vacuum drivelab_client1",
        "vacuum drivelab_client2",
        "checkpoint",
        "stop",
        "drop the page cache",
        "start",
        "warm drivelab_client1",
        "warm drivelab_client2",
        "one transaction on drivelab_client1",
        "one transaction on drivelab_client2",
    ]
    # a step per client database, those of a stage at once (vacuum, warm, one transaction)
    stages = cold.stages("15", "drivelab_nvme", 5440, ["drivelab_client1", "drivelab_client2"])
    assert [len(stage) for stage in stages] == [1, 2, 1, 1, 1, 1, 2, 2]
    argv = {name: what for name, what, _ in steps}
    skip = "--skip-systemctl-redirect"  # no systemd of this host's: no redirect to one
    assert argv["start if down"] == ["pg_ctlcluster", "15", "drivelab_nvme", "start", skip]
    assert argv["stop"] == ["pg_ctlcluster", "15", "drivelab_nvme", "stop", skip, "--mode=fast"]
    assert argv["drop the page cache"] is cold.drop_caches
    # what pgbench does before a run unless -n, on the client's own database, as postgres
    vacuum = argv["vacuum drivelab_client2"]
    assert vacuum[:4] == ["runuser", "-u", "postgres", "--"]
    assert vacuum[vacuum.index("-d") + 1] == "drivelab_client2"
    assert [vacuum[i + 1] for i, a in enumerate(vacuum) if a == "-c"] == [
        "VACUUM pgbench_branches", "VACUUM pgbench_tellers", "TRUNCATE pgbench_history"
    ]  # fmt: skip
    assert argv["one transaction on drivelab_client1"][-7:] == [
        "-t", "1", "-c", "1", "-p", "5440", "drivelab_client1"
    ]  # fmt: skip


def test_the_settled_start_keeps_the_server_and_its_caches(cold):
    """A rate search's warm step: what pgbench does before a run unless -n, a CHECKPOINT
    and a sync, so nothing the step before left is written out during this one; no stop,
    no page-cache drop, no start."""
    dbs = ["drivelab_client1", "drivelab_client2"]
    steps = cold.steps("15", "drivelab_nvme", 5440, dbs, mode="settled")
    assert [name for name, _, _ in steps] == [
        "start if down",
        "vacuum drivelab_client1",
        "vacuum drivelab_client2",
        "checkpoint",
        "sync",
    ]
    argv = {name: what for name, what, _ in steps}
    assert argv["sync"] is cold.sync
    assert (
        argv["checkpoint"]
        == dict((n, w) for n, w, _ in cold.steps("15", "drivelab_nvme", 5440, dbs))["checkpoint"]
    )
    assert not {"stop", "drop the page cache", "start"} & set(argv)


def test_a_stages_steps_run_at_once_and_the_first_failure_is_named(cold, tmp_path):
    """Each step of a stage waits for the other's file: they end only if they run at
    once (each gives up after 10 s, and then fails). A failing step is named with its
    last line of stderr; the others of its stage still ran to their end."""
    a, b = tmp_path / "a", tmp_path / "b"
    wait_for = 'touch "$0"; timeout 10 sh -c \'until test -e "$0"; do sleep 0.01; done\' "$1"'
    stage = [
        ("one", ["sh", "-c", wait_for, str(a), str(b)], (0,)),
        ("two", ["sh", "-c", wait_for, str(b), str(a)], (0,)),
    ]
    seconds = {}
    assert cold.run_stage(stage, seconds) is None
    assert set(seconds) == {"one", "two"}
    failing = [
        ("fine", ["true"], (0,)),
        ("broken", ["sh", "-c", "echo first >&2; echo the reason >&2; exit 3"], (0,)),
        ("also fine", ["sh", "-c", "exit 2"], (0, 2)),
    ]
    seconds = {}
    name, rc, err = cold.run_stage(failing, seconds)
    assert (name, rc, err.strip().splitlines()[-1]) == ("broken", 3, "the reason")
    assert set(seconds) == {"fine", "broken", "also fine"}


def test_only_a_dead_server_is_let_pass_and_only_where_it_is_recovered(cold):
    """pg_ctlcluster exit 2 ("already running", "not running") is fine when starting a
    server that may have died and when stopping one; never for the start that follows
    the page-cache drop, nor for any query."""
    fine = {name: codes for name, _, codes in cold.steps("15", "drivelab", 5440, ["drivelab_c1"])}
    assert fine.pop("start if down") == (0, 2)
    assert fine.pop("stop") == (0, 2)
    assert set(fine.values()) == {(0,)}


@pytest.mark.parametrize(
    ("cluster", "ok"),
    [("drivelab", True), ("drivelab_nvme", True), ("main", False), ("drivelab;rm", False),
     ("xdrivelab", False)],
)  # fmt: skip
def test_only_drivelabs_own_clusters_are_restarted(cold, cluster, ok):
    assert bool(cold.CLUSTER.match(cluster)) is ok


@pytest.mark.parametrize(
    ("db", "ok"),
    [("drivelab_client1", True), ("drivelab_db-7.lab", True), ("postgres", False),
     ("template1", False), ("drivelab_", False), ("drivelab_a b", False)],
)  # fmt: skip
def test_only_drivelabs_client_databases_are_vacuumed(cold, db, ok):
    assert bool(cold.DATABASE.match(db)) is ok


def test_the_environment_module_refuses_another_cluster_before_touching_anything():
    """The environment module asked for the cold start first (playbooks/pgbench.yml's
    path) refuses a cluster that is not drivelab's as the cold start module does: one
    line, marked as the cold start's failure (the role fails the run on it), no server
    needed, since nothing is touched."""
    proc = subprocess.run(
        [str(BIN / "ansible"), "localhost", "-c", "local", "-i", "localhost,",
         "-M", str(REPO / "roles/pgbench_run/library"), "-m", "drivelab_environment", "-a",
         json.dumps({"port": 5999, "databases": ["drivelab_client1"],
                     "cold_start": {"cluster": "main", "major": "15"}}), "-o"],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
        env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg")),
    )  # fmt: skip
    assert proc.returncode != 0
    result = json.loads(proc.stdout.split("=>", 1)[1])
    assert result["msg"] == "cold start: main is not a drivelab cluster: not touched"
    assert result["cold_start_failed"] is True and "environment" not in result


def test_the_start_after_the_drop_does_not_wait_for_pg_ctlclusters_sleeps(cold):
    """The start that follows the page-cache drop, under systemd or not, is
    drivelab_pgstart's: it starts the cluster (its unit, or pg_ctlcluster) without
    waiting for pg_ctlcluster's 2 s of sleeps and waits for the server itself; the start
    of a server that may have died, and the stop, stay pg_ctlcluster's."""
    for systemd in (True, False):
        steps = {
            n: what
            for n, what, _ in cold.steps("17", "drivelab_nvme", 5440, ["drivelab_c1"], systemd)
        }
        start = steps["start"]
        assert start.func is pgstart().start
        assert start.args == ("17", "drivelab_nvme", 5440, systemd)
        # under the host's own systemd pg_ctlcluster hands start and stop to its unit;
        # elsewhere (a namespace lab host of a machine that runs systemd) it must not
        skip = [] if systemd else ["--skip-systemctl-redirect"]
        assert steps["start if down"] == ["pg_ctlcluster", "17", "drivelab_nvme", "start", *skip]
        assert steps["stop"] == [
            "pg_ctlcluster", "17", "drivelab_nvme", "stop", *skip, "--mode=fast"
        ]  # fmt: skip


def test_a_start_that_fails_ends_at_once_with_pg_ctlclusters_own_line():
    """Without systemd a pg_ctlcluster that exits non-zero ends the wait at once, with
    its last line (the real one, for a cluster that does not exist), not with the
    timeout's "not accepting connections"."""
    rc, _out, err = pgstart().start("15", "drivelab_notacluster", 5999, False, timeout=30)
    assert rc != 0
    last = err.strip().splitlines()[-1]
    assert "drivelab_notacluster" in last
    assert "does not exist" in last


def test_a_running_server_is_not_started_and_a_dead_one_is_before_the_vacuums_again(
    cold, tmp_path, monkeypatch
):
    """The vacuums come first: when they pass (a running server) "start if down" is
    never run; when they fail (a server that died) it runs, then the vacuums again, and
    the cold start goes on; vacuums that fail again are the failure named. Stages of
    shell steps that log what ran stand for the real ones (their argv is the tests'
    above)."""
    log, up = tmp_path / "log", tmp_path / "up"

    def step(name, script):
        return (name, ["sh", "-c", f'echo "{name}" >> "$0"; {script}', str(log)], (0,))

    def stages(major, cluster, port, databases, systemd, *, mode):
        return [
            [step("start if down", f'touch "{up}"')],
            [step(f"vacuum {db}", f'test -e "{up}"') for db in databases],
            [step("checkpoint", "true")],
        ]

    monkeypatch.setattr(cold, "_stages", stages)
    dbs = ["drivelab_c1"]
    up.touch()
    seconds, failed = cold.cold_start("15", "drivelab", 5440, dbs)
    assert failed is None
    assert log.read_text().split("\n")[:-1] == ["vacuum drivelab_c1", "checkpoint"]
    assert set(seconds) == {"vacuum drivelab_c1", "checkpoint"}
    log.unlink()
    up.unlink()
    seconds, failed = cold.cold_start("15", "drivelab", 5440, dbs)
    assert failed is None
    assert log.read_text().split("\n")[:-1] == [
        "vacuum drivelab_c1", "start if down", "vacuum drivelab_c1", "checkpoint"
    ]  # fmt: skip
    assert "start if down" in seconds
    log.unlink()
    up.unlink()
    monkeypatch.setattr(cold, "_stages", lambda *a, **k: [[step("start if down", "true")],
                                                          *stages(*a, **k)[1:]])  # fmt: skip
    _seconds, failed = cold.cold_start("15", "drivelab", 5440, dbs)
    assert failed == ("cold start: vacuum drivelab_c1: exit 1", 1)
    assert log.read_text().split("\n")[:-1] == [
        "vacuum drivelab_c1", "start if down", "vacuum drivelab_c1"
    ]  # fmt: skip
