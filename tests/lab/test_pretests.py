"""Raw pre-tests through `drivelab run` on the real lab: fio and pg_test_fsync on the
mounted nvme and hdd7200 drives before their databases, stored beside the pgbench
runs and shown in the same report; the test files are gone afterwards."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from collector.pretest import summarize
from collector.report import PRETEST_PREFIXES
from collector.store import Store
from tests.lab.conftest import BIN, REPO

pytestmark = pytest.mark.lab

SCENARIO = """\
    ---
    name: pretest-test
    baseline: hdd7200
    drives: [nvme, hdd7200]
    workload: {scale: [2], clients_per_host: 1, threads: 1, duration: 5}
    hosts: [1]
    repetitions: 1
    pretests: {fio: true, pg_test_fsync: true, runtime: 1, fsync_seconds: 1}
"""


def test_pretests_are_measured_stored_and_reported(lab2, tmp_path):
    scenario = tmp_path / "pretest-test.yml"
    scenario.write_text(textwrap.dedent(SCENARIO))
    env = dict(os.environ, DRIVELAB_RESULTS=str(tmp_path / "results"), COLUMNS="220")
    proc = subprocess.run(
        [str(BIN / "drivelab"), "run", str(scenario), "--no-telemetry", "--no-live"], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "raw drive pre-tests" in proc.stdout
    with Store.open(tmp_path / "results" / "drivelab.db", create=False) as store:
        sid = store.scenario("pretest-test").id
        samples = [s for p in PRETEST_PREFIXES for s in store.samples(sid, metric_prefix=p)]
        runs = store.conn.execute("SELECT status FROM runs").fetchall()
    assert sorted(runs) == [("complete",), ("complete",)]
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
    kept = sorted(
        p.name for p in (tmp_path / "results" / "runs" / "pretest-test").glob("*/pretests/*")
    )
    assert kept == [
        "fio-hdd7200-wcache-unchangeable.json",
        "fio-nvme-wcache-unchangeable.json",
        "pg_test_fsync-hdd7200-wcache-unchangeable.txt",
        "pg_test_fsync-nvme-wcache-unchangeable.txt",
    ]
    assert not list(Path("/srv/drivelab").glob("*/drivelab-pretest.fio"))
    assert not list(Path("/srv/drivelab").glob("*/drivelab-pg_test_fsync.out"))
