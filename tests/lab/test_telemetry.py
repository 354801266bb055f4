"""Telemetry on the real lab (DB host limited to 256 MiB): during a 15 s two-client
run Prometheus has drivelab's live tps of both clients and the candidate drive's
node_disk_* series; the stored run has per-second device figures and the HTML report
plots them; a scale that fits in memory is flagged "cache not defeated", one several
times memory is not, with a lower buffer hit ratio."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from collector.store import Store
from tests.lab.conftest import BIN, REPO, drivelab

pytestmark = pytest.mark.lab

PROMETHEUS = "http://127.0.0.1:9490"
SCENARIO = """\
    ---
    name: telemetry-test
    baseline: nvme
    drives: [nvme]
    placement: [tablespace]
    workload: {scale: [2, 20], clients_per_host: 2, threads: 1, duration: 15}
    hosts: [2]
    repetitions: 1
"""


@pytest.fixture(scope="module")
def lab256():
    drivelab("lab", "down")
    try:
        drivelab("lab", "up", "--db-memory", "256M")
        yield
    finally:
        drivelab("lab", "down")


def query(promql: str) -> list[dict]:
    url = f"{PROMETHEUS}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310  (loopback)
            return json.load(resp)["data"]["result"]
    except OSError:
        return []


def loop_device(name: str) -> str:
    inv = json.loads(drivelab("lab", "status", "--json").stdout)
    for d in inv["drives"]:
        if d["name"] == name:
            return d["device"].rsplit("/", 1)[1]
    raise AssertionError(f"no lab drive {name}: {inv}")


def test_telemetry_set_up_again_only_when_something_does_not_answer(lab256):
    """Set up once (the live target `drivelab run` uses by default), the next set-up
    with the same roles, inventory and live target finds Prometheus and every
    node_exporter answering: the playbook is not run. A client's node_exporter stopped
    (Prometheus scrapes it as down): it is run, and brings the exporter back. First in
    the module, while the 256 MiB DB host has room for apt."""
    from collector import runner  # noqa: PLC0415

    hosts = ["dbhost", "client1", "client2"]
    live_target = "127.0.0.1:9479"  # drivelab run's --metrics-addr and --metrics-port

    def not_up() -> list[str]:
        return runner.hosts_not_up(runner.Prometheus(PROMETHEUS).targets(), hosts)

    def until(want: list[str], what: str) -> None:
        deadline = time.monotonic() + 30
        while not_up() != want:
            assert time.monotonic() < deadline, f"Prometheus never saw {what}: {not_up()}"
            time.sleep(0.5)

    assert runner.telemetry(live_target=live_target) is not None
    until([], "every node_exporter up")
    started = time.monotonic()
    assert runner.telemetry(live_target=live_target) is None
    skipped_s = time.monotonic() - started

    pidfile = Path("/var/lib/drivelab/node_exporter/node-exporter-client1.pid")
    os.kill(int(pidfile.read_text().split()[0]), signal.SIGTERM)  # the lab's, started above
    until(["client1"], "client1's node_exporter down")
    assert runner.telemetry(live_target=live_target) is not None
    until([], "client1's node_exporter up again")
    print(f"telemetry set-up skipped in {skipped_s:.2f} s")


def test_telemetry_and_the_cache_defeat_verdicts(lab256, tmp_path):
    nvme = loop_device("nvme")
    path = tmp_path / "telemetry-test.yml"
    path.write_text(textwrap.dedent(SCENARIO))
    results = tmp_path / "results"
    env = dict(os.environ, DRIVELAB_RESULTS=str(results), COLUMNS="200")
    proc = subprocess.Popen(
        [str(BIN / "drivelab"), "run", str(path)], cwd=REPO, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    seen_tps: set[str] = set()
    seen_disk = False
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            tps = query('drivelab_client_tps{scenario="telemetry-test"}')
            seen_tps |= {s["metric"]["client"] for s in tps}
            disk = query(
                f'node_disk_reads_completed_total{{device="{nvme}",drivelab_host="dbhost"}}'
            )
            seen_disk = seen_disk or bool(disk)
            if seen_tps == {"client1", "client2"} and seen_disk:
                break
            time.sleep(1)
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert seen_tps == {"client1", "client2"}, "Prometheus never had both clients' live tps"
    assert seen_disk, f"Prometheus never had node_disk_* of {nvme}"
    assert proc.returncode == 0, out[-4000:]

    with Store.open(results / "drivelab.db", create=False) as store:
        sid = store.scenario("telemetry-test").id
        verdicts = {}
        for cid, spec in store.cells(sid):
            (run,) = store.runs(cid)
            facts = {f.key: f.value for f in store.facts(sid, run.id) if f.scope == "run"}
            device = [s for s in store.samples(run_id=run.id, metric_prefix="drivelab_device_")]
            reads = [s for s in device if s.metric == "drivelab_device_read_iops"]
            # one point per second of the 15 s run, for the candidate drive
            assert len(reads) >= 14 and {s.labels["device"] for s in reads} == {nvme}
            assert len({s.timestamp for s in reads}) == len(reads)
            verdicts[spec.scale] = facts["cache"]
    small, large = verdicts[2], verdicts[20]
    assert small["verdict"] == "cache not defeated", small
    assert large["verdict"] == "cache defeated", large
    assert large["hit_ratio"] < small["hit_ratio"], (small, large)
    assert large["dataset_bytes"] >= 2 * large["memory_bytes"]
    assert "cache not defeated" in out and "cache defeated" in out
    page = (results / "telemetry-test.html").read_text()
    assert "Device telemetry" in page and "drivelab_device_read_iops" in page
