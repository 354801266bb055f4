"""Raw pre-tests through `drivelab run` on the real lab: fio and pg_test_fsync on the
mounted nvme, hdd7200 and hdd7200wc drives before their databases, stored beside the
pgbench runs and shown in the same report; the test files are gone afterwards. The
same run shows the flush-honesty check on real measurements: hdd7200wc (7200 rpm in
the inventory, RAM in fact) is flagged as absorbing flushes, the honest hdd7200 is not."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from collector.report import PRETEST_PREFIXES
from collector.store import Store
from collector.verdicts import physics
from collector.verdicts.pretest import summarize
from tests.lab.conftest import BIN, REPO, drivelab

pytestmark = pytest.mark.lab

SCENARIO = """\
    ---
    name: pretest-test
    baseline: hdd7200
    drives: [nvme, hdd7200, hdd7200wc]
    workload: {scale: [2], clients_per_host: 1, threads: 1, duration: 5}
    hosts: [1]
    repetitions: 1
    pretests: {fio: true, pg_test_fsync: true, runtime: 1, ramp: 0, fsync_seconds: 1}
"""


@pytest.fixture(scope="module")
def pretest_run(lab2, tmp_path_factory):
    """One `drivelab run` of SCENARIO: its output and its results folder."""
    tmp_path = tmp_path_factory.mktemp("pretests")
    scenario = tmp_path / "pretest-test.yml"
    scenario.write_text(textwrap.dedent(SCENARIO))
    env = dict(os.environ, DRIVELAB_RESULTS=str(tmp_path / "results"), COLUMNS="220")
    proc = subprocess.run(
        [str(BIN / "drivelab"), "run", "--no-check", str(scenario), "--no-telemetry", "--no-live"], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc, tmp_path / "results"


def test_pretests_are_measured_stored_and_reported(pretest_run):
    proc, results = pretest_run
    assert "raw drive pre-tests" in proc.stdout
    with Store.open(results / "drivelab.db", create=False) as store:
        sid = store.scenario("pretest-test").id
        samples = [s for p in PRETEST_PREFIXES for s in store.samples(sid, metric_prefix=p)]
        runs = store.conn.execute("SELECT status FROM runs").fetchall()
    assert sorted(runs) == [("complete",)] * 3
    by = {p.drive: p for p in summarize(samples)}
    hdd, nvme = by["hdd7200"], by["nvme"]
    # loop devices: the write cache is not drivelab's to change, tested as it is
    assert hdd.write_cache == nvme.write_cache == "unchangeable"
    # the emulated 7200 rpm class: 120 IOPS at queue depth 1, several ms per access
    assert 100 <= hdd.rand_read_qd1 <= 135, hdd
    assert hdd.latency_mean_s > 0.005
    assert nvme.rand_read_qd1 >= 20 * hdd.rand_read_qd1, (nvme, hdd)
    assert nvme.fsync_per_s >= 10 * hdd.fsync_per_s, (nvme, hdd)
    # outputs kept beside the runs; test files removed from the drives
    kept = sorted(p.name for p in (results / "runs" / "pretest-test").glob("*/pretests/*"))
    assert kept == [
        "fio-hdd7200-wcache-unchangeable.json",
        "fio-hdd7200wc-wcache-unchangeable.json",
        "fio-nvme-wcache-unchangeable.json",
        "pg_test_fsync-hdd7200-wcache-unchangeable.txt",
        "pg_test_fsync-hdd7200wc-wcache-unchangeable.txt",
        "pg_test_fsync-nvme-wcache-unchangeable.txt",
    ]
    assert not list(Path("/srv/drivelab").glob("*/drivelab-pretest.fio"))
    assert not list(Path("/srv/drivelab").glob("*/drivelab-pg_test_fsync.out"))


def test_rotating_but_fast_drive_is_flagged_and_the_honest_one_is_not(pretest_run):
    """pg_test_fsync on both 7200 rpm drives (the inventory's rpm: 7200; loop devices
    have no SMART): the honest one flushes under its 120/s ceiling, the one whose
    "cache" is RAM far above it, and the store and the report say so."""
    proc, results = pretest_run
    with Store.open(results / "drivelab.db", create=False) as store:
        sid = store.scenario("pretest-test").id
        facts = [f for f in store.facts(sid) if f.key == "physics"]
        fsync = {
            p.drive: p.fsync_per_s
            for p in summarize(store.samples(sid, metric_prefix="drivelab_fsync_"))
        }
    pre = [physics.Flag.from_fact(v) for f in facts if f.scope == "pretest" for v in f.value]
    flags = {(f.drive, f.code): f for f in pre}
    print(f"pg_test_fsync fdatasync/s: {fsync}; flags: {sorted(flags)}")
    fast = flags[("hdd7200wc", physics.FLUSH_ABSORBED)]
    assert fast.level == physics.WARNING
    assert fast.figures["rpm"] == 7200 and fast.figures["rpm_source"] == "inventory"
    assert fast.figures["ceiling_per_s"] == 120
    assert fast.figures["rate_per_s"] > 1.25 * 120 and fsync["hdd7200wc"] > 1.25 * 120
    # the honest class: capped at 120 IOPS, a flush costs it two of them
    assert fsync["hdd7200"] <= 120
    assert not [f for f in pre if f.drive == "hdd7200"], pre
    # nvme (rpm 0 in the lab's inventory) is solid state, and nothing states its protection
    assert flags[("nvme", physics.PLP_UNKNOWN)].level == physics.NOTE
    # the report says it in words, per drive; the honest drive gets no flush line
    lines = [line.strip() for line in proc.stdout.splitlines()]
    assert any(
        line.startswith("flush hdd7200wc:")
        and "a volatile write cache is absorbing flushes" in line
        for line in lines
    ), proc.stdout[-3000:]
    assert not [line for line in lines if line.startswith("flush hdd7200:")]
    # what a drive is (a note, not a flag on a figure): counted in the run's report, said
    # with report -v
    assert any(line.startswith("physics ") and " notes (" in line for line in lines), lines
    verbose = drivelab("report", "-v", "pretest-test", "--db", str(results / "drivelab.db"))
    lines = [line.strip() for line in verbose.stdout.splitlines()]
    assert any(line.startswith("plp nvme: power-loss protection: unknown") for line in lines)
