"""Telemetry on the real lab (DB host limited to 256 MiB): during a 15 s two-client
run Prometheus has drivelab's live tps of both clients and the candidate drive's
node_disk_* series; the stored run has per-second device figures and the HTML report
plots them; a scale that fits in memory is flagged "cache not defeated", one several
times memory is not, with a lower buffer hit ratio; after the run's own provisioning in
full no cell sets drivelab's cluster up again. Telemetry is set up beside the first
drives stage: when that set-up fails, the run stops there in one line, before any
database stage, and leaves no process behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import textwrap
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

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
    from collector.run import stages as runner  # noqa: PLC0415

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
    """Also the namespace lab as built passing `drivelab check` (this run's preflight runs
    it: a problem would stop the run), as the README's demo runs on it."""
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
    assert "preflight: drivelab check in " in out, out[:3000]

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
    _caveats_marked(out, results / "drivelab.db", tmp_path)
    _rules_and_dashboard_answer(results / "drivelab.db")
    page = (results / "telemetry-test.html").read_text()
    # the plots titled in words (matplotlib keeps each text as a comment beside its paths)
    assert "Device telemetry" in page and "<!-- reads per second, IOPS -->" in page
    # the run provisioned the fresh lab in full, which left drivelab's cluster running
    # with the inventory's settings: no cell (none has settings of its own) set its
    # cluster up again, and each still records the server's version and settings
    skip = "TASK [The drivelab PostgreSQL cluster for this placement] "
    logs = sorted((results / "logs").glob("*-database.log"))
    assert len(logs) == 2, [p.name for p in logs]
    for log in logs:
        task = log.read_text().split(skip, 1)[1].split("TASK [", 1)[0]
        assert "\nskipping: [dbhost]" in task, (log.name, task)
    for cell_dir in (results / "runs" / "telemetry-test").iterdir():
        server = json.loads((cell_dir / "db" / "database.json").read_text())["postgresql"]
        assert server["version"] and server["settings"]["shared_buffers"], server


def query_at(promql: str, at: float) -> list[dict]:
    url = f"{PROMETHEUS}/api/v1/query?" + urllib.parse.urlencode({"query": promql, "time": at})
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310  (loopback)
        doc = json.load(resp)
    assert doc["status"] == "success", (promql, doc)
    return doc["data"]["result"]


def _rules_and_dashboard_answer(db: Path) -> None:
    """Every recording rule drivelab ships and every expression of its Grafana dashboard
    returns series from the lab's Prometheus at an instant in the middle of a run."""
    with Store.open(db, create=False) as store:
        sid = store.scenario("telemetry-test").id
        run = next(r for cid, _ in store.cells(sid) for r in store.runs(cid))
        seconds = [p.start for p in store.series(run.id)]  # pgbench's per-second points
    mid = (min(seconds) + max(seconds)) / 2
    rules = yaml.safe_load((REPO / "roles/prometheus_server/files/drivelab-rules.yml").read_text())
    records = [r["record"] for g in rules["groups"] for r in g["rules"]]
    dashboard = json.loads(
        (REPO / "roles/prometheus_server/files/grafana/drivelab.json").read_text()
    )
    exprs = [
        t["expr"].replace("$scenario", ".*").replace("$db_host", ".*")
        for panel in dashboard["panels"] for t in panel["targets"]
    ]  # fmt: skip
    empty = [e for e in records + exprs if not query_at(e, mid)]
    assert not empty, f"no series at the run's middle ({mid:.0f}) for: {empty}"


def _caveats_marked(out: str, db: Path, tmp_path: Path) -> None:
    """The cell that did not defeat the cache (scale 2) carries the mark [m] on its row
    and `cache_defeated: false` in the JSON, and its verdict line says so; the one that
    did (scale 20) carries no [m]; each cell's client-bound mark is as its runs' facts."""
    json_path = tmp_path / "report.json"
    drivelab("report", "--db", str(db), "--json", str(json_path))
    cells = {c["test"].split()[3]: c for c in json.loads(json_path.read_text())["cells"]}
    assert set(cells) == {"s2", "s20"}, cells.keys()
    assert cells["s2"]["cache_defeated"] is False and cells["s20"]["cache_defeated"] is True
    with Store.open(db, create=False) as store:
        sid = store.scenario("telemetry-test").id
        bound, trend = (
            {
                spec.test.split()[3]: any(
                    f.value for r in store.runs(cid) for f in store.facts(sid, r.id)
                    if f.scope == "run" and f.key == key
                )
                for cid, spec in store.cells(sid)
            }
            for key in ("client_bound", "tps_trend")
        )  # fmt: skip
    for scale, cell in cells.items():
        assert cell["client_bound"] is bound[scale], (scale, cell)
        # a run still rising or falling through its window (the cache warming) carries [t]
        marks = ["c"] * bound[scale] + ["m"] * (scale == "s2") + ["t"] * trend[scale]
        # the table's row: the drive, its marks, the test's own word (the scale)
        row = next(
            line
            for line in out.splitlines()
            if re.match(rf"\s*nvme( \[[a-z ]+\])?\s+{scale}\s", line)
        )
        assert (f"[{' '.join(marks)}]" in row) if marks else ("[" not in row), (scale, row)
    verdicts = [line for line in out.splitlines() if line.startswith("verdict ")]
    assert any("s2" in v and "cache not defeated" in v for v in verdicts), verdicts
    assert not any("s20" in v and "cache not defeated" in v for v in verdicts), verdicts
    assert "  [m] cache not defeated: the data fit the DB host's memory: this measured RAM" in out


FAILING = """\
    ---
    name: telemetry-fails
    drives: [nvme]
    placement: [tablespace]
    workload: {scale: [2], clients_per_host: 2, threads: 1, duration: 5}
    hosts: [2]
    repetitions: 1
"""


def session_processes(sid: int) -> list[str]:
    """The command lines of the processes still in session ``sid``."""
    left = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:
                left.append((stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return left


def test_a_telemetry_set_up_that_fails_stops_the_run_before_any_database(lab256, tmp_path):
    """Last in the module (its inventory is provisioned with the lab's stamps changed).
    Telemetry runs beside the drives stage; its failure (a node_exporter_port no host
    can listen on, which only the telemetry role checks) is the run's one-line error, as
    it was when telemetry came before the drives: no cell goes on to its database stage
    or stores a run, and no ansible-playbook of the run outlives it."""
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    doc = yaml.safe_load((REPO / "inventory/local/hosts.yml").read_text())
    doc["all"]["vars"]["node_exporter_port"] = 70000
    (inventory / "hosts.yml").write_text(yaml.safe_dump(doc))
    path = tmp_path / "telemetry-fails.yml"
    path.write_text(textwrap.dedent(FAILING))
    results = tmp_path / "results"
    env = dict(os.environ, DRIVELAB_RESULTS=str(results), COLUMNS="200")
    proc = subprocess.Popen(
        [str(BIN / "drivelab"), "run", "--no-check", str(path), "--inventory", str(inventory)], cwd=REPO,
        env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=300)
        left = session_processes(proc.pid)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 2, out[-3000:]
    last = out.splitlines()[-1]
    # every host fails the same check; the line names the first whose failure came in
    # (dbhost or a client: CI, 2026-12-02, had client1's first)
    host = re.match(r"drivelab: telemetry: (dbhost|client[12]): \1: ", last)
    assert host, out[-3000:]
    assert "node_exporter_port 70000 must be 1..65535" in last, last
    # the drives stage ran beside it (its device facts), the database stage did not
    assert list(results.glob("runs/telemetry-fails/*/db/dbhost-nvme.json")), out[-3000:]
    assert not list(results.glob("runs/telemetry-fails/*/db/database.json")), "a database stage ran"
    with Store.open(results / "drivelab.db", create=False) as store:
        sid = store.scenario("telemetry-fails").id
        assert all(not store.runs(cid) for cid, _ in store.cells(sid))
    assert not left, f"left running after the run ended: {left}"
