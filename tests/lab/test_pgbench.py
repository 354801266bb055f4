"""PostgreSQL on the candidate drive and synchronized multi-client pgbench, on the real
lab: each client's database in the drive's tablespace, complete outputs from both
clients, start skew, the environment stored with the run, the demo's scenario telling
nvme from hdd7200 with the caveats marked on its figures, the "fits in RAM" warning, fidelity to pgbench's own tps
line, and access locked down."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from collector.store import Store
from collector.verdicts import caveats as caveat
from tests.lab.conftest import REPO, drivelab

pytestmark = pytest.mark.lab

SECRETS = Path.home() / ".local/share/drivelab/secrets/dbhost"
DB_ADDR = "10.213.0.2"
PORT = 5440
SSH = [
    "ssh", "-i", "/var/lib/drivelab/ssh/id_ed25519", "-o", "UserKnownHostsFile=/var/lib/drivelab/ssh/known_hosts",
    "-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
]  # fmt: skip
DRIVES = [
    {"name": "nvme", "drives": ["nvme"], "fs": "ext4"},
    {"name": "hdd7200", "drives": ["hdd7200"], "fs": "ext4"},
]


def on(host_addr: str, command: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SSH, f"root@{host_addr}", command],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def password(client: str) -> str:
    return (SECRETS / f"{client}.password").read_text().strip()


@pytest.fixture(scope="module")
def pg(lab2, tmp_path_factory):
    """The lab provisioned: PostgreSQL on the DB host, pgbench on the clients, nvme and
    hdd7200 formatted; results in a folder of this module's own."""
    results = tmp_path_factory.mktemp("results")
    old = os.environ.get("DRIVELAB_RESULTS")
    os.environ["DRIVELAB_RESULTS"] = str(results)
    from collector.run import stages as runner  # noqa: PLC0415

    outputs = [runner.provision().log, runner.prepare_drives(DRIVES).log]
    yield {"results": results, "runner": runner, "logs": outputs}
    if old is None:
        os.environ.pop("DRIVELAB_RESULTS", None)
    else:
        os.environ["DRIVELAB_RESULTS"] = old


def measure(
    pg, drive: str, placement: str, scale: int, *, hosts=(), duration=15, scenario="pgbench-test"
):
    runner = pg["runner"]
    cell = runner.Cell(
        scenario, drive, "ext4", placement, scale, hosts=tuple(hosts),
        pgbench=runner.PgbenchOptions(clients_per_host=4, threads=2, duration=duration),
    )  # fmt: skip
    pg["logs"].append(runner.prepare_database(cell).log)
    run_dir = runner.run_pgbench(cell, 0, client_hosts=["client1", "client2"], db_host="dbhost")
    from collector.gather.folder import gather_run  # noqa: PLC0415
    from collector.run.storing import record  # noqa: PLC0415
    from collector.store import Store  # noqa: PLC0415

    gathered = gather_run(run_dir)
    with Store.open(None) as store:  # the conductor's way: gathered, then stored
        pg["last_run_id"] = record(store, gathered)
    pg.setdefault("runs", {})[drive, placement, tuple(hosts)] = (pg["last_run_id"], gathered)
    pg.setdefault("run_dirs", {})[drive, placement, tuple(hosts)] = run_dir
    return run_dir, gathered


def facts(gathered) -> dict:
    return dict(gathered.run.facts)


def tps(gathered) -> float:
    return sum(c.tps for c in gathered.run.clients if c.tps)


def inits_overlapped(f: dict) -> bool:
    """Whether every client's pgbench -i of the cell ran at the same time as the others
    (the latest start before the earliest end), from the init facts' start and end."""
    from datetime import datetime  # noqa: PLC0415

    ran = [v for v in f["db_init"].values() if v["ran"]]
    assert len(ran) >= 2, f["db_init"]
    starts = [datetime.fromisoformat(v["start"]) for v in ran]
    ends = [datetime.fromisoformat(v["end"]) for v in ran]
    return max(starts) < min(ends)


TABLESPACE_QUERY = (
    "SELECT d.datname, t.spcname, pg_tablespace_location(t.oid) FROM pg_database d "
    "JOIN pg_tablespace t ON t.oid = d.dattablespace WHERE d.datname LIKE 'drivelab%'"
)


def db_tablespaces() -> dict[str, str]:
    proc = on(  # a fixed query, no input in it
        DB_ADDR,
        f'su postgres -c "psql -p {PORT} -At -F\' \' -c \\"{TABLESPACE_QUERY}\\""',
    )
    assert proc.returncode == 0, proc.stderr
    return {line.split()[0]: " ".join(line.split()[1:]) for line in proc.stdout.splitlines()}


def skew_parts(f: dict) -> str:
    """The start skew and its parts, in ms: the launches (drivelab's), the connections up
    (launch plus pgbench's initial connection time: the DB host's), the first transactions;
    per client the connection time, and how late the last launch came."""

    def ms(v) -> str:
        return "-" if v is None else f"{v * 1000:.1f}"

    connect = {
        h: ms(f["connected_at"][h] - f["launched_at"][h])
        for h in sorted(f.get("connected_at") or {})
        if h in (f.get("launched_at") or {})
    }
    return (
        f"start skew {ms(f['start_skew_s'])} ms (launch {ms(f.get('launch_skew_s'))}, "
        f"connections up {ms(f.get('connect_spread_s'))}, connection times {connect}, "
        f"late {ms(f.get('launch_late_s'))}, real-time {f.get('wake_realtime')})"
    )


@pytest.mark.parametrize("drive", ["nvme", "hdd7200"])
def test_tablespace_placement_both_clients_complete_in_step(pg, drive, tmp_path):
    run_dir, gathered = measure(pg, drive, "tablespace", 5)
    assert gathered.run.status.value == "complete", gathered.run.reason
    for client in ("client1", "client2"):
        assert (run_dir / client / "rc.txt").read_text().strip() == "rc=0"
        assert "tps = " in (run_dir / client / "stdout.txt").read_text()
        assert list((run_dir / client).glob("pgbench_log.*"))
    spaces = db_tablespaces()
    for client in ("client1", "client2"):
        assert spaces[f"drivelab_{client}"] == f"drivelab_{drive} /srv/drivelab/{drive}/pg"
    f = facts(gathered)
    print(f"{drive}: {tps(gathered):.1f} tps, {skew_parts(f)}")
    assert f["start_skew_source"].startswith("first transaction")
    # the start's three spreads are measured and stored for every run: drivelab's part
    # (the wrappers' launches, late ones), the DB host's (connections up, first
    # transactions). How small they are is bench/skew.py's to measure, with nothing else
    # on the machine: a timed bound here failed a CI run (first transactions 79 ms apart,
    # connections 5 ms) while other tests loaded both cores.
    for key in ("launch_skew_s", "launch_late_s", "connect_spread_s", "start_skew_s"):
        assert isinstance(f[key], int | float) and f[key] >= 0, (key, f[key])
    # scale 5 x 2 clients (about 170 MB) fits in the 512 MiB DB host: the warning says so
    assert "this run measures RAM, not the drive" in f["db_warning"]
    # the 512 MiB DB host has room for both clients' pgbench -i at once (stock
    # shared_buffers 128 MB, 2 x maintenance_work_mem 64 MB per init), and they ran so
    assert f["db_init_at_once"] == 2, f.get("db_init_memory")
    assert inits_overlapped(f), f["db_init"]
    assert f["wal_placement"] == "system disk"
    # the lab's kind and cgroup hierarchy travel with every run; the memory limit read
    # on the DB host names the hierarchy it came from
    assert f["lab"] == {"hosts": "netns", "cgroup": "v1"}, f.get("lab")
    assert f["db_memory_source"] == "cgroup memory limit (cgroup v1 /drivelab-db)", f[
        "db_memory_source"
    ]
    # the server's activity over the run: WAL written, the log read, and with stock
    # max_wal_size and checkpoint_timeout no checkpoint while the clients ran
    print(f"{drive}: WAL {f['pg_wal']}, checkpoints {f['pg_checkpoints']}")
    assert f["pg_wal"]["bytes"] > 0 and f["pg_wal"]["records"] > 0 and f["pg_wal"]["syncs"] > 0
    assert f["pg_checkpoint_log"]["problem"] is None, f["pg_checkpoint_log"]
    assert f["pg_checkpoint_log"]["log_checkpoints"] == "on"
    assert f["checkpoint_in_window"] is False, f["checkpoints"]
    # a live pgbench's full log holds one row per transaction it counted (the run is
    # complete above); the same folder with one thread file's tail lost (a full disk on
    # the client) is gathered partial, with both counts
    cut_short_log_is_partial(run_dir, tmp_path)


def cut_short_log_is_partial(run_dir: Path, tmp_path: Path) -> None:
    """The copy gathered and stored as drivelab run stores a run: the run partial, with
    client2's reason; client1's figures kept."""
    from collector.run.storing import record_run_dir  # noqa: PLC0415
    from collector.store import Store  # noqa: PLC0415

    copy = tmp_path / "cut" / run_dir.name
    shutil.copytree(run_dir, copy)
    log = max((copy / "client2").glob("pgbench_log.*"), key=lambda p: p.stat().st_size)
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[: len(lines) // 2]))
    with Store.open(tmp_path / "cut.db") as store:
        run_id = record_run_dir(store, copy)
        (cell_id, _), *_ = store.cells(store.scenarios()[0].id)
        (stored,) = [r for r in store.runs(cell_id) if r.id == run_id]
        c1, c2 = store.client_results(run_id)
    assert stored.status.value == "partial" and stored.reason.startswith("client2: "), stored
    assert c1.status.value == "complete" and c1.tps > 0, c1.reason
    assert c2.status.value == "partial", c2.reason
    assert c2.reason.startswith("per-transaction log cut short: "), c2.reason
    assert f"pgbench counted {c2.processed + (c2.failed or 0) + (c2.skipped or 0):,} " in c2.reason


def test_a_checkpoint_inside_the_window_is_flagged_with_its_deltas(pg, monkeypatch):
    """max_wal_size 32MB (-e postgresql_settings, as an operator would give it): the
    full-page images after the cold start's checkpoint fill it within seconds, so the
    server checkpoints while every client runs. The run is flagged, and the checkpoint
    and WAL deltas, the log's checkpoint lines and the events are stored."""
    runner = pg["runner"]
    run_playbook = runner.run_playbook
    small = {"max_wal_size": "32MB", "min_wal_size": "32MB"}

    def with_settings(name, extra=None, **kw):
        if name == "database.yml":
            extra = {**(extra or {}), "postgresql_settings": small}
        return run_playbook(name, extra, **kw)

    monkeypatch.setattr(runner, "run_playbook", with_settings)
    run_dir, gathered = measure(pg, "nvme", "tablespace", 5, duration=10)
    assert gathered.run.status.value == "complete", gathered.run.reason
    f = facts(gathered)
    ckpt, wal = f["pg_checkpoints"], f["pg_wal"]
    print(f"checkpoints {ckpt}, WAL {wal}, events {f['checkpoints']}")
    assert f["checkpoint_in_window"] is True, f["checkpoints"]
    inside = [
        e
        for e in f["checkpoints"]
        if e.get("in_window") in ("started", "ended", "started and ended")
    ]
    assert any(e["reason"] == "wal" for e in inside), inside
    assert ckpt["requested"] >= 1 and ckpt["buffers_checkpoint"] > 0 and ckpt["write_s"] > 0
    assert wal["bytes"] > 16 * 1024**2 and wal["fpi"] > 0 and wal["syncs"] > 0
    assert "checkpoint starting: wal" in (run_dir / "pg_checkpoints.log").read_text()
    # read on the DB host by the start's session once every output was in, no module run
    after = json.loads((run_dir / "pg_server-after.json").read_text())
    assert after["read_by"] == "drivelab_start" and after["log"]["problem"] is None, after
    from collector.store import Store  # noqa: PLC0415

    with Store.open(pg["results"] / "drivelab.db") as store:
        scenario = store.scenario("pgbench-test").id
        stored = {x.key: x.value for x in store.facts(scenario, pg["last_run_id"])}
    assert stored["checkpoint_in_window"] is True
    assert stored["pg_wal"]["bytes"] == wal["bytes"]


def test_a_database_stage_again_finds_the_init_marker_and_does_not_initialise(pg):
    """pgbench -i runs once per drive, placement and scale: the database stage leaves the
    init marker on each database it filled (in the facts module's run on the DB host), so
    the same stage again finds them initialised and leaves them as they are."""
    runner = pg["runner"]
    from collector.runfolder import DATABASE_JSON, DB_DIR  # noqa: PLC0415

    cell = runner.Cell(
        "pgbench-test", "nvme", "ext4", "tablespace", 5,
        pgbench=runner.PgbenchOptions(clients_per_host=4, threads=2, duration=10),
    )  # fmt: skip
    ran = []
    for _ in range(2):
        pg["logs"].append(runner.prepare_database(cell).log)
        doc = json.loads((cell.cell_dir() / DB_DIR / DATABASE_JSON).read_text(encoding="utf-8"))
        ran.append({client: v["ran"] for client, v in doc["init"].items()})
    assert ran[1] == {"client1": False, "client2": False}, ran
    query = (  # a fixed query, no input in it
        "SELECT datname, shobj_description(oid, 'pg_database') FROM pg_database"
        " WHERE datname LIKE 'drivelab_client%' ORDER BY 1"
    )
    proc = on(DB_ADDR, f'su postgres -c "psql -p {PORT} -At -c \\"{query}\\""')
    assert proc.returncode == 0, proc.stderr
    marker = "drivelab: pgbench -i -s 5  on nvme (tablespace)"
    assert proc.stdout.split("\n")[:2] == [
        f"drivelab_client1|{marker}",
        f"drivelab_client2|{marker}",
    ]


def test_a_cell_whose_sessions_do_not_fit_in_max_connections_is_refused_and_changes_nothing(pg):
    """2 client hosts at -c 60 are 120 sessions, and the lab's server takes 97 of its 100
    (3 reserved for superusers): the DB host refuses the cell in one line before its
    databases are touched (64 client hosts at -c 2 ran with 16 clients refused before)."""
    runner = pg["runner"]
    from collector.hosts.playbook import PlaybookFailed  # noqa: PLC0415

    cell = runner.Cell(
        "pgbench-test", "hdd7200", "ext4", "tablespace", 5,
        pgbench=runner.PgbenchOptions(clients_per_host=60, threads=2, duration=10),
    )  # fmt: skip
    before = db_tablespaces()
    with pytest.raises(PlaybookFailed) as failed:
        runner.prepare_database(cell)
    assert (
        "the cell's runs open 120 sessions at once (2 client hosts x 60 connections, -c) and"
        " the server takes 97 from them (max_connections 100 less 3 reserved): ask for fewer"
        " client hosts or connections, or raise max_connections in the cell's PostgreSQL"
        " settings"
    ) in str(failed.value), str(failed.value)
    assert "\n" not in str(failed.value)
    assert db_tablespaces() == before


def test_the_stored_run_carries_its_environment(pg):
    """The environment of the nvme tablespace run above (made here when run alone), as
    stored: the drive's mount as mounted, this machine's kernel, the server's settings."""
    if ("nvme", "tablespace", ()) not in pg.get("runs", {}):
        measure(pg, "nvme", "tablespace", 5)
    run_id, gathered = pg["runs"]["nvme", "tablespace", ()]
    from collector.store import Store  # noqa: PLC0415

    with Store.open(pg["results"] / "drivelab.db") as store:
        scenario = store.scenario("pgbench-test")
        (env,) = [f.value for f in store.facts(scenario.id, run_id) if f.key == "environment"]
    assert "error" not in env, env.get("error")
    mount = env["storage"]["mount"]
    with open("/proc/mounts", encoding="utf-8") as fh:  # the lab's hosts share this machine's
        line = next(x.split() for x in fh if x.split()[1] == "/srv/drivelab/nvme")
    assert (mount["mount_point"], mount["source"], mount["fstype"]) == (line[1], line[0], "ext4")
    assert mount["options"] == line[3] and "noatime" in mount["options"].split(","), mount
    assert env["storage"]["device"]["name"] == Path(line[0]).name  # the loop device
    assert env["storage"]["queue"]["scheduler"], env["storage"]["queue"]
    assert "has_journal" in env["storage"]["filesystem"]["features"], env["storage"]["filesystem"]
    assert env["postgresql"]["data_paths"] == ["/srv/drivelab/nvme/pg"]
    assert env["kernel"]["release"] == os.uname().release
    settings = env["postgresql"]["settings"]
    assert settings["port"]["setting"] == str(PORT), settings.get("port")
    assert env["postgresql"]["version_num"] // 10000 == 15, env["postgresql"]["version"]
    # the DB host's cgroup cap, as the database stage read it
    assert env["memory"]["limit_bytes"] == facts(gathered)["db_memory_bytes"], env["memory"]
    assert set(env["sysctl"]) >= {"vm.dirty_ratio", "vm.swappiness", "vm.dirty_bytes"}
    # and the cold start before it, step by step
    run_dir = pg["run_dirs"]["nvme", "tablespace", ()]
    cold = json.loads((run_dir / "cold_start.json").read_text(encoding="utf-8"))["seconds"]
    assert {"checkpoint", "stop", "drop the page cache", "start"} <= set(cold), cold
    assert all(s >= 0 for s in cold.values()), cold


def test_single_client_fidelity_to_pgbench_tps_line(pg):
    run_dir, _ = measure(pg, "nvme", "tablespace", 5, hosts=["client1"], duration=10)
    printed = float(
        re.search(r"^tps = ([\d.]+)", (run_dir / "client1/stdout.txt").read_text(), re.M).group(1)
    )
    from collector.store import Store  # noqa: PLC0415

    with Store.open(pg["results"] / "drivelab.db") as store:
        stored = [c.tps for c in store.client_results(pg["last_run_id"])]
    assert len(stored) == 1
    assert abs(stored[0] - printed) <= printed * 0.001, (stored, printed)


def test_the_demo_tells_nvme_from_hdd7200_and_marks_what_measured_the_clients(pg, tmp_path):
    """The demo's scenario (seed-two-clients at its lab size: the whole cluster on the
    drive, two client hosts each on its own scale-34 database) on nvme and hdd7200, one
    repetition each, as `drivelab run` runs it. nvme is many times hdd7200; a cell whose
    run measured the clients (the run fact client_bound: the clients' CPU above 90 %
    through the window) carries [c] on its table row, `client_bound: true` in the JSON and
    a caveat in `compare`, and the verdict line says so; a cell without the fact carries
    no mark. On this lab nvme is usually client-bound (the demo's own result: the lab's
    clients share the controller's two cores with the DB host), not in every run."""
    doc = yaml.safe_load((REPO / "scenarios" / "seed-two-clients.yml").read_text())
    doc["drives"] = ["nvme", "hdd7200"]
    doc["sizes"]["lab"]["repetitions"] = 1
    path = tmp_path / "seed-two-clients.yml"
    path.write_text(yaml.safe_dump(doc))
    db = str(tmp_path / "demo.db")
    run = drivelab("run", str(path), "--size", "lab", "--db", db, timeout=900,
                   env={"COLUMNS": "100"})  # fmt: skip
    out = run.stdout
    cells = {c["drive"]: c for c in json.loads(
        drivelab("report", "--db", db, "--json", "-").stdout)["cells"]}  # fmt: skip
    with Store.open(db, create=False) as store:
        sid = store.scenario("seed-two-clients").id
        facts_of = {spec.drive: {f.key: f.value for r in store.runs(cid)
                                 for f in store.facts(sid, r.id) if f.scope == "run"}
                    for cid, spec in store.cells(sid)}  # fmt: skip
    nvme, hdd = cells["nvme"], cells["hdd7200"]
    assert facts_of["nvme"]["wal_placement"] == "on the drive"
    ratio = nvme["tps_mean"] / hdd["tps_mean"]
    print(f"demo: nvme {nvme['tps_mean']:.1f} tps, hdd7200 {hdd['tps_mean']:.1f} tps, {ratio:.1f}x")
    assert ratio >= 3, (nvme["tps_mean"], hdd["tps_mean"])
    # each cell's mark as its run's fact. nvme's run usually measured the clients on this
    # lab (their CPU above 90 % through the window), but not always: at 2,672 tps in one
    # CI run their CPU stayed under it; the marks, the verdict and compare follow the fact
    nvme_bound = bool(facts_of["nvme"].get("client_bound"))
    for drive, cell in cells.items():
        bound = bool(facts_of[drive].get("client_bound"))
        assert cell["client_bound"] is bound, (drive, cell)
        row = next(line for line in out.splitlines()
                   if re.match(rf"{drive}( \[[a-z ]+\])?\s+[\d,]+\.\d\s", line))  # fmt: skip
        marks = re.match(rf"{drive} \[([a-z ]+)\]", row)
        codes = (cell["caveats"] or "").split()  # the JSON's codes, the row's letters
        assert sorted(marks.group(1).split() if marks else []) == sorted(
            caveat.BY_CODE[c].mark for c in codes
        ), (row, cell)
        assert ("c" in (marks.group(1).split() if marks else [])) is bound, row
    assert (caveat.CLIENT_BOUND in (nvme["caveats"] or "").split()) is nvme_bound
    verdict = next(line for line in out.splitlines() if line.startswith("verdict "))
    assert verdict.startswith("verdict nvme vs hdd7200: "), verdict
    assert ("client-bound" in verdict) is nvme_bound, verdict
    assert ("[c] client-bound" in out) is any(c["client_bound"] for c in cells.values())
    compared = json.loads(drivelab("compare", "hdd7200", "nvme", "--db", db, "--json", "-").stdout)
    (pair,) = compared["pairs"]
    assert pair["contender_client_bound"] is nvme_bound, pair
    assert pair["baseline_client_bound"] is bool(facts_of["hdd7200"].get("client_bound"))
    words = drivelab("compare", "hdd7200", "nvme", "--db", db, env={"COLUMNS": "80"}).stdout
    assert ("contender client-bound" in " ".join(words.split())) is nvme_bound, words


def test_a_non_client_address_is_rejected(pg):
    env = dict(os.environ, PGPASSWORD=password("client1"), PGCONNECT_TIMEOUT="5")
    proc = subprocess.run(
        ["psql", "-h", DB_ADDR, "-p", str(PORT), "-U", "drivelab_client1", "-d", "drivelab_client1", "-c", "select 1"],
        env=env, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert 'pg_hba.conf rejects connection for host "10.213.0.1"' in proc.stderr


def test_client_a_with_client_b_credentials_is_rejected(pg):
    proc = on(
        "10.213.0.11",
        f"read -r PGPASSWORD; export PGPASSWORD; psql -h {DB_ADDR} -p {PORT} -U drivelab_client2 -d drivelab_client2 -c 'select 1'",
        stdin=password("client2") + "\n",
    )
    assert proc.returncode != 0
    assert (
        'rejects connection for host "10.213.0.11", user "drivelab_client2", database "drivelab_client2"'
        in proc.stderr
    )


def test_own_credentials_work_from_own_address(pg):
    proc = on(
        "10.213.0.11",
        f"PGPASSFILE=/var/lib/drivelab-client/client1/pgpass psql -h {DB_ADDR} -p {PORT} -U drivelab_client1 "
        "-d drivelab_client1 -Atc 'select current_user'",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "drivelab_client1"


def test_a_plaintext_password_answer_is_rejected(pg):
    script = REPO / "tests/lab/pgwire.py"
    proc = subprocess.run(
        ["ip", "netns", "exec", "drivelab-client1", sys.executable, str(script), DB_ADDR, str(PORT),
         "drivelab_client1", "drivelab_client1"],
        input=password("client1") + "\n", capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["requested"] == "SASL" and answer["mechanisms"] == ["SCRAM-SHA-256"], answer
    assert not answer["authenticated"]
    assert answer["error"], answer


def test_passwords_are_0600_and_never_in_results_or_logs(pg):
    for client in ("client1", "client2"):
        assert (SECRETS / f"{client}.password").stat().st_mode & 0o777 == 0o600
        assert Path(f"/var/lib/drivelab-client/{client}/pgpass").stat().st_mode & 0o777 == 0o600
    secrets = [password(c) for c in ("client1", "client2")]
    places = [pg["results"], *pg["logs"]]
    for place in places:
        files = [place] if place.is_file() else [p for p in place.rglob("*") if p.is_file()]
        for path in files:
            data = path.read_bytes()
            for secret in secrets:
                assert secret.encode() not in data, f"a password is in {path}"


def test_datasets_twice_the_memory_nvme_still_beats_hdd7200(pg):
    # 2 x scale 20 (about 320 MB each) against a 300 MiB DB host
    drivelab("lab", "up", "--db-memory", "300M")
    try:
        _, fast = measure(pg, "nvme", "tablespace", 20)
        _, slow = measure(pg, "hdd7200", "tablespace", 20)
    finally:
        drivelab("lab", "up", "--db-memory", "512M")
    f = facts(fast)
    assert f["db_memory_bytes"] == 300 * 1024**2
    assert sum(f["db_sizes_bytes"].values()) >= 2 * 300 * 1024**2
    assert not f.get("db_warning")
    assert all(v["caps_lifted"] for v in facts(slow)["db_init"].values() if v.get("ran"))
    # 300 MiB leaves room for one init's index builds at a time: they ran one after the other
    for run in (fast, slow):
        assert facts(run)["db_init_at_once"] == 1, facts(run).get("db_init_memory")
        assert not inits_overlapped(facts(run)), facts(run)["db_init"]
    print(
        f"tablespace, datasets >= 2x memory: nvme {tps(fast):.1f} tps, hdd7200 {tps(slow):.1f} tps"
    )
    assert tps(fast) > tps(slow)
