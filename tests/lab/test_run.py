"""`drivelab run` end to end on the real lab: a 2 drives x 2 repetitions scenario (XFS)
killed with SIGKILL after its first stored run and started again finishes with
exactly the expected runs in the store; adaptive repetitions stop within their bounds;
a scenario's PostgreSQL setting the server does not know is refused in seconds with
nothing changed; a setting that runs a command (archive_command) and a custom script
with \\shell are refused by the DB host's and the clients' own roles unless their
inventory allows them; two sets of settings (wal_sync_method) are two stored cells that
`drivelab compare` tells apart by that setting; a three-step rate sweep stores three
runs with their p99 and the report lists them ordered by rate; the rate search on
hdd7200 finds a sustained rate inside its bracket, and a real run at 1.5 times it
breaks the target. The lab's lease (issue #24): the killed run's lease is taken over at
once by the run started again, said and recorded; while one run holds the lab, a second
is refused within seconds naming it, a direct drives.yml is refused, and a second with
--wait runs after it; both runs store into the lab's PostgreSQL results store while
another process writes to it, and a rerun resumes from there."""

from __future__ import annotations

import html
import json
import math
import os
import signal
import socket
import sqlite3
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from collector import documents
from collector.errors import EXIT_BUSY
from collector.hosts import lab
from collector.stats.knee import Point, knee
from tests.lab.conftest import (
    BIN,
    REPO,
    ansible,
    db_drives,
    drivelab,
    lab_inventory,
    on_hosts,
    playbook,
    wait_for,
)

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
        [str(BIN / "drivelab"), "run", "--no-check", str(path), "--no-telemetry"], cwd=REPO, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw,
    )  # fmt: skip


def run_scenario(tmp_path: Path, name: str, text: str) -> tuple[str, dict[str, str]]:
    """`drivelab run` of the scenario ``text`` (as ``<name>.yml``) into its own results
    folder under ``tmp_path``, which must end well: its output, and the environment the
    verbs that read its results take (that folder, 200 columns)."""
    scenario = tmp_path / f"{name}.yml"
    scenario.write_text(textwrap.dedent(text))
    env = dict(os.environ, DRIVELAB_RESULTS=str(tmp_path / "results"), COLUMNS="200")
    proc = drivelab_run(scenario, env)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:]
    return out, env


def lease_status(inventory: Path | None = None) -> dict:
    """`drivelab status --json`: the lease on the DB host, as any controller reads it."""
    args = ["status", "--json"] + (["--inventory", str(inventory)] if inventory else [])
    doc = json.loads(drivelab(*args).stdout)
    documents.validate("status", doc)
    return doc


def test_killed_after_the_first_run_and_started_again_it_finishes_exactly(lab2, tmp_path):
    """Also the lab lease's takeover (issue #24): the killed run's lease, held on the DB
    host by a process that is gone, is taken over at once by the run started again on the
    same controller, which says so and records it in its runs' facts."""
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
        held = lease_status()
        assert held["lease"]["pid"] == first.pid, held
        assert held["lease"]["scenario"] == "resume-test" and held["lease"]["cell"], held
        assert held["lease"]["purpose"] == "drivelab run" and held["lease"]["expected_end"], held
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    left = lease_status()
    assert left["lease"]["pid"] == first.pid, left  # nobody released it
    assert left["text"].endswith(f"(its process {first.pid} is gone: may be taken over)"), left
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
    # the second cell's database stage followed complete runs on the same cluster with the
    # same settings: its cluster's part was left out; its databases were placed and its
    # facts (the server's version and settings) read as always
    skip = "TASK [The drivelab PostgreSQL cluster for this placement] "
    logs = sorted((tmp_path / "results" / "logs").glob("*-database.log"))
    skipped = [p for p in logs if skip in (t := p.read_text()) and "\nskipping: [dbhost]" in
               t.split(skip, 1)[1].split("TASK [", 1)[0]]  # fmt: skip
    assert skipped and len(skipped) < len(logs), [p.name for p in logs]
    for cell_dir in (tmp_path / "results" / "runs" / "resume-test").iterdir():
        doc = json.loads((cell_dir / "db" / "database.json").read_text())
        assert doc["postgresql"]["version"], doc
    # the lease: taken over at once, said in one line, recorded with the new runs
    host = socket.gethostname()
    took = [line for line in out.splitlines() if line.startswith("lab lease: took dbhost over")]
    assert len(took) == 1, out[-3000:]
    assert "from drivelab run of scenario 'resume-test', cell " in took[0], took
    assert f"by root@{host} (pid {first.pid})" in took[0], took
    assert took[0].endswith(f": its process {first.pid} on {host} is gone"), took
    taken = next(line for line in out.splitlines() if "held by this run (taken in" in line)
    print(f"takeover: {took[0]}; {taken}")
    assert float(taken.split("taken in ")[1].split(" s")[0]) < 30, taken
    con = sqlite3.connect(db)
    try:
        facts = [json.loads(v) for (v,) in con.execute(
            "SELECT value_json FROM facts WHERE key = 'lab_lease' ORDER BY run_id")]  # fmt: skip
    finally:
        con.close()
    assert all(fact["db_host"] == "dbhost" for fact in facts), facts
    # the second session's runs say whom their lease took over; the first session's, nobody
    second_facts = [fact for fact in facts if fact["took_over"]]
    assert len(second_facts) == len(runs) - len(kept), facts
    assert len(facts) - len(second_facts) <= len(kept), facts
    for fact in second_facts:
        assert fact["took_over"]["record"]["pid"] == first.pid, fact
        assert fact["took_over"]["why"] == f"its process {first.pid} on {host} is gone", fact
    assert lease_status()["text"] == "free"  # released at the end


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


UNKNOWN_SETTING = """\
    ---
    name: unknown-setting
    drives: [hdd10k]
    workload: {scale: [2], clients_per_host: 1, threads: 1, duration: 5}
    repetitions: 1
    postgresql:
      settings: {checkpoint_timeout: 5min}
      sets:
        fast: {wal_sync_methd: fdatasync}
"""
WAL_SYNC = """\
    ---
    name: wal-sync
    drives: [nvme]
    workload: {scale: [2], clients_per_host: 2, threads: 1, duration: 5}
    hosts: [1]
    repetitions: 1
    retries: 0
    postgresql:
      settings: {shared_buffers: 64MB}
      sets:
        fdatasync: {wal_sync_method: fdatasync}
        open_datasync: {wal_sync_method: open_datasync}
"""
CONF = Path("/etc/postgresql/15/drivelab/conf.d/drivelab.conf")
PIDFILE = Path("/var/lib/postgresql/15/drivelab/postmaster.pid")


def test_an_unknown_setting_is_refused_in_seconds_and_nothing_changes(lab2, tmp_path, monkeypatch):
    """The DB host's own server refuses the name, after preflight and provisioning (here
    current: stopped at the stamps) and before any drive, setting or store is touched."""
    from collector.run import stages as runner  # noqa: PLC0415

    monkeypatch.setenv("DRIVELAB_RESULTS", str(tmp_path / "results"))
    # the lab provisioned, as a run leaves it, its inventory named by its folder (the
    # runner's default) where drivelab run names its hosts.yml: one inventory, one stamp
    # (they differed once, and drivelab run provisioned again)
    runner.provision_unless_unchanged()
    hdd = next(d for d in db_drives() if d["name"] == "hdd10k")["device"]
    conf, pid = CONF.read_bytes(), PIDFILE.read_text().split()[0]
    scenario = tmp_path / "unknown-setting.yml"
    scenario.write_text(textwrap.dedent(UNKNOWN_SETTING))
    env = dict(os.environ, DRIVELAB_RESULTS=str(tmp_path / "results"))
    started = time.monotonic()
    proc = drivelab_run(scenario, env)
    out, _ = proc.communicate(timeout=300)
    seconds = time.monotonic() - started
    assert proc.returncode == 2, out[-3000:]
    assert out.splitlines()[-1] == (
        f"drivelab: {scenario}: postgresql.sets.fast.wal_sync_methd: PostgreSQL 15 on dbhost"
        " has no setting wal_sync_methd (did you mean 'wal_sync_method'?)"
    ), out[-3000:]
    assert "provisioning skipped: every host is current" in out
    assert seconds < 60, f"refused after {seconds:.0f} s"
    # nothing changed: no filesystem on the drive, the same settings file, the cluster
    # not restarted, nothing stored
    blkid = subprocess.run(["blkid", "-p", hdd], capture_output=True, text=True, check=False)
    assert blkid.returncode == 2 and not blkid.stdout, blkid.stdout  # 2: no signature found
    assert not Path("/srv/drivelab/hdd10k").is_mount()
    assert CONF.read_bytes() == conf
    assert PIDFILE.read_text().split()[0] == pid
    assert not (tmp_path / "results" / "drivelab.db").exists()
    assert not (tmp_path / "results" / "runs").exists()


def own_playbook(book: Path, extra: dict, *args: str) -> subprocess.CompletedProcess:
    """An operator's own playbook ``book`` against the lab, ``extra`` as -e @file (written
    beside the playbook)."""
    doc = book.with_suffix(".extra.json")
    doc.write_text(json.dumps(extra))
    return ansible("ansible-playbook", str(book), "-i", "inventory/local", "-e", f"@{doc}", *args)


SETTINGS_ONLY = """\
    ---
    - name: The settings stage alone, as an operator's own playbook would call it
      hosts: db
      gather_facts: false
      tasks:
        - name: Settings
          ansible.builtin.include_role:
            name: postgresql_server
            tasks_from: settings
"""


def test_a_setting_that_runs_a_command_is_refused_on_the_db_host_unless_its_inventory_allows_it(
    lab2, tmp_path
):
    """What the scenario layer refuses, the DB host's module refuses on its own: given
    with -e (no scenario), archive_command stops the settings stage in one line and the
    settings file is unchanged; the server's verdict (drivelab run's check) says the same;
    with the inventory's allow list (here -e) the same check passes (in check mode: the
    lab's settings file is left as it is)."""
    from collector.run import stages as runner  # noqa: PLC0415

    runner.provision_unless_unchanged()
    marker = Path("/tmp/drivelab-archive-command-ran")
    marker.unlink(missing_ok=True)
    book = tmp_path / "settings.yml"
    book.write_text(textwrap.dedent(SETTINGS_ONLY))
    # the major version, as drivelab run hands it to the stage (the settings entry point
    # does not look it up itself)
    asked = {
        "drivelab_postgresql_settings": {"archive_command": f"touch {marker}"},
        "drivelab_pg_major": 15,
    }
    conf = CONF.read_bytes()

    def settings_stage(extra: dict, *args: str) -> subprocess.CompletedProcess:
        return own_playbook(book, extra, *args)

    refused = settings_stage(asked)
    assert refused.returncode != 0, refused.stdout[-2000:]
    assert (
        "setting archive_command: archive_command runs a shell command the server runs as"
        " postgres for every WAL segment: set only where the DB host's inventory allows it"
        " (postgresql_server_allow_commands: [archive_command])"
    ) in refused.stdout, refused.stdout[-2000:]
    assert CONF.read_bytes() == conf
    verdicts = runner.check_pg_settings([{"name": "ssl_passphrase_command", "value": "/bin/true"}])
    (v,) = verdicts["verdicts"]
    assert v["ok"] is False and "ssl_passphrase_command runs a shell command" in v["message"], v
    allowed = settings_stage(
        {**asked, "postgresql_server_allow_commands": ["archive_command"]}, "--check"
    )
    assert allowed.returncode == 0, allowed.stdout[-2000:]
    assert CONF.read_bytes() == conf
    assert not marker.exists()
    unknown = settings_stage({**asked, "postgresql_server_allow_commands": ["archive_comand"]})
    assert unknown.returncode != 0
    assert "postgresql_server_allow_commands: 'archive_comand' is not a setting that runs code" in (
        unknown.stdout
    ), unknown.stdout[-2000:]


PREPARE_ONLY = """\
    ---
    - name: The clients' preparation alone, as an operator's own playbook would call it
      hosts: clients
      gather_facts: false
      tasks:
        - name: Prepare
          ansible.builtin.include_role:
            name: pgbench_run
            tasks_from: prepare
"""


def test_a_custom_script_with_a_shell_command_is_refused_on_the_clients_unless_allowed(
    lab2, tmp_path
):
    """pgbench's \\shell runs a command on the client at every transaction. Called with
    -e (no scenario), the clients' own role refuses the script in one line each, before
    it is copied; with pgbench_run_allow_shell the same call passes (in check mode)."""
    marker = Path("/tmp/drivelab-shell-ran")
    marker.unlink(missing_ok=True)
    script = tmp_path / "mine.sql"
    script.write_text(f"\\set aid random(1, 10)\n\\SHELL touch {marker}\nSELECT 1;\n")
    book = tmp_path / "prepare.yml"
    book.write_text(textwrap.dedent(PREPARE_ONLY))
    asked = {"pgbench_run_mode": "custom", "pgbench_run_script": str(script),
             "pgbench_run_dir": str(tmp_path / "run")}  # fmt: skip

    def prepare(extra: dict, *args: str) -> subprocess.CompletedProcess:
        return own_playbook(book, extra, *args)

    refused = prepare(asked)
    assert refused.returncode != 0, refused.stdout[-2000:]
    for client in ("client1", "client2"):
        assert (
            f"custom script {script} runs shell commands on {client} (pgbench's \\shell or"
            " \\setshell): allowed only where the client's inventory sets"
            " pgbench_run_allow_shell: true; nothing was run"
        ) in refused.stdout, refused.stdout[-2000:]
    assert "TASK [pgbench_run : Custom script]" not in refused.stdout  # never copied
    allowed = prepare({**asked, "pgbench_run_allow_shell": True}, "--check")
    assert allowed.returncode == 0, allowed.stdout[-2000:]
    assert not marker.exists()


def test_two_sets_of_settings_are_two_stored_cells_with_their_applied_setting(lab2, tmp_path):
    """fdatasync and open_datasync (both valid on Linux; sighup: a reload). Every cell
    also has shared_buffers 64MB (postmaster: the first cell's database stage restarts the
    cluster for it, the second only reloads)."""
    scenario = tmp_path / "wal-sync.yml"
    scenario.write_text(textwrap.dedent(WAL_SYNC))
    env = dict(os.environ, DRIVELAB_RESULTS=str(tmp_path / "results"))
    proc = drivelab_run(scenario, env)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:]
    assert (
        "PostgreSQL settings: 2 checked by PostgreSQL 15 on dbhost; a restart for shared_buffers"
    ) in out
    con = sqlite3.connect(tmp_path / "results" / "drivelab.db")
    try:
        rows = con.execute(
            """SELECT c.key, c.pg_settings_name, c.pg_settings_json, r.status, f.value_json
               FROM cells c JOIN runs r ON r.cell_id = c.id
               JOIN facts f ON f.run_id = r.id AND f.key = 'postgresql_settings_applied'
               ORDER BY c.id"""
        ).fetchall()
    finally:
        con.close()
    assert [(r[0].rsplit(" pg ", 1)[1], r[1], r[3]) for r in rows] == [
        ("fdatasync", "fdatasync", "complete"),
        ("open_datasync", "open_datasync", "complete"),
    ], rows
    for key, name, asked, _, applied in rows:
        want = {"shared_buffers": "64MB", "wal_sync_method": name}
        assert json.loads(asked) == want, key
        assert json.loads(applied) == want, key  # as the server said (SHOW)
    logs = sorted((tmp_path / "results" / "logs").glob("*-database.log"))
    assert len(logs) == 2
    first, second = (log.read_text() for log in logs)
    assert "msg: restarted for shared_buffers" in first
    assert "msg: reloaded" in second
    runs = tmp_path / "results" / "runs" / "wal-sync"
    assert sorted(p.name for p in runs.iterdir()) == [
        "nvme-ext4-tablespace-s2-h1-tpcb-pgfdatasync",
        "nvme-ext4-tablespace-s2-h1-tpcb-pgopen_datasync",
    ]
    # compared, the two sets differ in their environments by the one setting
    cmp = subprocess.run(
        [str(BIN / "drivelab"), "compare", "fdatasync", "open_datasync"],
        cwd=REPO, env=dict(env, COLUMNS="200"), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert cmp.returncode == 0, cmp.stderr
    settings = [line for line in cmp.stdout.splitlines() if "postgresql.settings." in line]
    assert [line.split("│")[1:4] for line in settings] == [
        [" postgresql.settings.wal_sync_method ", " fdatasync ", " open_datasync "]
    ], cmp.stdout
    assert cmp.stdout.index(settings[0]) < cmp.stdout.index("baseline wal-sync: pg fdatasync")


SEARCH = """\
    ---
    name: rate-search
    drives: [hdd7200]
    placement: [cluster]
    workload:
      scale: [5]
      duration: 8
      target: {p99_ms: 200, low: 20, high: 160, steps: 10, within_pct: 25}
    hosts: [2]
"""


def test_the_rate_search_finds_a_sustained_rate_and_one_and_a_half_times_it_breaks(
    lab2, tmp_path, monkeypatch
):
    """hdd7200 (120 IOPS) with its WAL on the drive (placement cluster): 20/s in all holds
    at p99 well under 200 ms, 200/s does not (tests/data/txlog-rate: p99 36 to 61 ms, and
    3.6 s with the lag growing), so 200 ms tells them apart with room for the fsync
    outliers of a short run. The search brackets the edge to within 25 % in at most 10
    steps of -T 8, the bracket's top broken twice if it broke by its p99 alone (CI runs
    had 72/s break at p99 696 ms between 56 and 94, with 84/s then holding, and 56/s
    break and later hold: such a break is run again at once) or right after an overload
    (CI: 56/s broke right after 160/s fell behind, the search reported 44/s, and 66/s
    held twice: such a break is run again after a step holds); then a real run at 1.5
    times the sustained rate, on the same database, breaks the target (a hold there is
    run once more, and one of the two breaks it) unless the search named its edge noisy,
    or the search's break holds when run again right after (the lab's drive moved)."""
    from collector import scenario as sc  # noqa: PLC0415
    from collector.gather.folder import gather_run  # noqa: PLC0415
    from collector.run import stages as runner  # noqa: PLC0415
    from collector.run.search import step_cell  # noqa: PLC0415
    from collector.stats import ratesearch as rs  # noqa: PLC0415

    scenario = tmp_path / "rate-search.yml"
    scenario.write_text(textwrap.dedent(SEARCH))
    results = tmp_path / "results"
    env = dict(os.environ, DRIVELAB_RESULTS=str(results), COLUMNS="200")
    started = time.monotonic()
    proc = drivelab_run(scenario, env)
    out, _ = proc.communicate(timeout=1200)
    searched_s = time.monotonic() - started
    assert proc.returncode == 0, out[-3000:]
    con = sqlite3.connect(results / "drivelab.db")
    try:
        (doc,) = [json.loads(v) for (v,) in con.execute(
            "SELECT value_json FROM facts WHERE scope = 'rate_search'")]  # fmt: skip
        windows = dict(con.execute(
            """SELECT c.key, f.value_json FROM cells c JOIN runs r ON r.cell_id = c.id
               JOIN facts f ON f.run_id = r.id AND f.key = 'latency_window'"""
        ).fetchall())  # fmt: skip
    finally:
        con.close()
    steps = doc["steps"]
    print(f"rate search: {doc['text']} in {searched_s:.0f} s;"
          f" steps {[(s['rate'], round(s['p99_ms'] or -1, 1), s['holds']) for s in steps]}")  # fmt: skip
    assert doc["status"] == rs.CONVERGED, doc["text"]
    assert 2 <= len(steps) <= doc["runs"] <= 10
    held, broke = doc["holds_at"], doc["breaks_at"]
    assert held is not None and broke is not None and held < broke
    assert held >= broke * 0.75  # within 25 %
    # inside its bracket: the rate reported held (p99 under the target, sustained), the
    # bracket's top broke, each as stored with its own run
    by_rate = {s["rate"]: s for s in steps}
    assert by_rate[held]["holds"] and by_rate[held]["p99_ms"] <= 200
    top = by_rate[broke]
    # a break by p99 alone or right after an overload is run again before the search ends
    # (CI, 99287dd: 72/s broke by p99 right after 94/s fell behind and was left at one
    # run), unless it came on the last of the 10 steps; the second run may break by its
    # lag as well (CI: 122/s at p99 876 ms, then not sustained): confirmed all the same
    assert not top["holds"] and top["runs"] in (1, 2)
    # and so is any other break before the search ends on it (CI, 56bb97e: 34/s broke
    # with its lag growing, the search ended on it, and 40/s then held twice)
    assert top["runs"] == 2 or doc["runs"] == 10
    assert doc["break_confirmed"] is (top["runs"] == 2)
    assert (f"breaks at {broke} twice" in doc["text"]) is (top["runs"] == 2)
    assert len(windows) == len(steps)  # one cell per rate searched
    assert sorted(p.name for p in (results / "runs" / "rate-search").iterdir()) == sorted(
        ["hdd7200-ext4-cluster-s5-h2-tpcb"]
        + [f"hdd7200-ext4-cluster-s5-h2-tpcb-r{s['rate'] // 2}" for s in steps]
    )
    # the report says it, per drive and cell
    assert f"rate search hdd7200 tpcb ext4 cluster s5 2cl c4 j2 T8: {doc['text']}" in out
    page = (results / "rate-search.html").read_text()
    assert "<h3>Rate search</h3>" in page and html.escape(doc["text"]) in page

    # a real run at 1.5 times the sustained rate (a whole -R per host, rounded up), warm
    # as the search's steps are
    monkeypatch.setenv("DRIVELAB_RESULTS", str(results))
    inventory = REPO / "inventory" / "local" / "hosts.yml"
    planned = sc.expand(sc.load(scenario), sc.load_inventory(inventory))[0]
    over = 2 * math.ceil(held * 1.5 / 2)
    cell = step_cell(planned.cell, over)
    # repetitions 2 and 3: if 1.5 times is a rate the search ran (and confirmed:
    # repetition 1), its step's folders stay. A hold there is run once more, as the search
    # runs a break by p99 alone again: a CI run had 94/s break twice at p99 340 ms, then
    # 108/s hold at 174 ms in one 8 s run; the rate must break in one of the two
    seen = []
    for rep in (2, 3):
        run_dir = runner.run_pgbench(cell, rep, client_hosts=list(cell.hosts), db_host="dbhost",
                                     inventory=inventory, cold_start=False, settle=True)  # fmt: skip
        gathered = gather_run(run_dir)
        window = gathered.run.facts.get("latency_window")
        complete = gathered.run.status.value == "complete"
        obs = rs.observation(over, window, complete=complete, reason=gathered.run.reason)
        holds, why = obs.verdict(200)
        print(f"1.5 x {held} = {over}/s total, run {rep - 1}: {why}")
        assert complete, gathered.run.reason
        seen.append(why)
        if not holds:
            break
    # the edge of an 8 s step on this lab is wide: a search that saw it (a break that
    # then held, or a hold above the break) says "noisy near the edge", and its sustained
    # rate is then a floor, not the edge (CI, f42711d: 44/s with that note, and 66/s held
    # twice at p99 145 and 85 ms). A search that saw no noise must be right about 1.5 x
    noisy = bool(doc["held_above_break"] or doc["held_when_confirmed"])
    assert ("noisy near the edge" in doc["text"]) is noisy
    if not holds:
        assert obs.p99_ms is not None and obs.p99_ms > 200, seen
        return
    if noisy:
        return
    # 1.5 x held twice after a search that saw no noise. The lab's drive may have moved
    # since (CI, c37448a: 56/s broke twice in the search, 34 and 44 held, then 66/s held
    # twice at p99 87 and 47 ms minutes later): the search's confirmed break is run once
    # more, now. If it holds now, the edge moved between the search and this check, and
    # the search was right about what it measured; if it breaks now, right after 1.5 x
    # held twice, the search's answer is wrong by more than 1.5 x
    again = runner.run_pgbench(step_cell(planned.cell, broke), 2, client_hosts=list(cell.hosts),
                               db_host="dbhost", inventory=inventory, cold_start=False,
                               settle=True)  # fmt: skip
    gathered = gather_run(again)
    obs = rs.observation(broke, gathered.run.facts.get("latency_window"),
                         complete=gathered.run.status.value == "complete",
                         reason=gathered.run.reason)  # fmt: skip
    holds_now, why = obs.verdict(200)
    print(f"{broke}/s total (the search's break) once more, now: {why}")
    assert holds_now, (doc["text"], seen, why)


RATE_SWEEP = """\
    ---
    name: rate-sweep
    drives: [nvme]
    placement: [tablespace]
    workload:
      scale: [5]
      clients_per_host: 4
      threads: 2
      duration: 8
      rate: [400, 100, 200]
      rate_per: total
      latency_limit: 500
    hosts: [2]
    repetitions: 1
    retries: 0
"""


def test_a_rate_sweep_stores_each_step_with_its_p99_and_reports_them_by_rate(lab2, tmp_path):
    """Three total rates (given out of order) split over two client hosts, on nvme (it
    held 800/s in all in tests/data/txlog-rate): three runs, each with its window's p99
    and the -R and -L pgbench ran; the report's latency table lists them by rate. A step
    the report says held was achieved within 15 % of the rate asked; one it says did not
    has its reason printed (CI had 339.2/s at 400/s asked: the clients, sharing 2 cores
    with the unit tests, ran behind their schedule, and the report said nothing)."""
    scenario = tmp_path / "rate-sweep.yml"
    scenario.write_text(textwrap.dedent(RATE_SWEEP))
    env = dict(os.environ, DRIVELAB_RESULTS=str(tmp_path / "results"))
    proc = drivelab_run(scenario, env)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:]
    con = sqlite3.connect(tmp_path / "results" / "drivelab.db")
    try:
        rows = con.execute(
            """SELECT c.key, r.status, w.value_json, k.value_json FROM cells c
               JOIN runs r ON r.cell_id = c.id
               JOIN facts w ON w.run_id = r.id AND w.key = 'latency_window'
               JOIN facts k ON k.run_id = r.id AND k.key = 'commands' ORDER BY r.id"""
        ).fetchall()
    finally:
        con.close()
    assert len(rows) == 3, rows
    totals = []
    for key, status, window_json, commands_json in rows:
        w = json.loads(window_json)
        assert status == "complete", key
        assert w["p99_ms"] > 0 and w["p50_ms"] <= w["p99_ms"], (key, w)
        assert (w["rate_per"], w["rate_per_host"] * 2) == ("total", w["rate_total"]), w
        assert key.endswith(f"R{w['rate_per_host']} L500")
        assert w["late"] is not None and w["skipped"] is not None
        for argv in json.loads(commands_json).values():
            at = argv.index("-R")
            assert argv[at + 1] == str(w["rate_per_host"]), argv
            assert argv[argv.index("-L") + 1] == "500", argv
        totals.append(w["rate_total"])
    assert totals == [400, 100, 200]  # the file's order
    runs = tmp_path / "results" / "runs" / "rate-sweep"
    assert sorted(p.name for p in runs.iterdir()) == [
        f"nvme-ext4-tablespace-s5-h2-tpcb-r{r}" for r in (100, 200, 50)
    ]
    report = subprocess.run(
        [str(BIN / "drivelab"), "report", "rate-sweep"],
        cwd=REPO, env=dict(env, COLUMNS="80"), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    lines = [line.rstrip() for line in report.stdout.splitlines()]
    assert all(len(line) <= 80 for line in lines), report.stdout
    title = "nvme tpcb ext4 tablespace s5 2cl c4 j2 T8 L500: latency under load"
    at = lines.index(title)
    end = next(i for i in range(at, len(lines)) if lines[i].startswith("rate/s: "))
    table = [line.split() for line in lines[at + 3 : end]]
    assert [r[0] for r in table] == ["100", "200", "400"], report.stdout
    text = " ".join(report.stdout.split())
    for r in table:
        assert float(r[4].replace(",", "")) > 0, r  # p99 ms
        if r[7] == "yes":
            assert abs(float(r[1].replace(",", "")) / int(r[0]) - 1) < 0.15, r
        else:
            assert f"R{int(r[0]) // 2} L500: rate not sustained" in text, report.stdout
    # The nvme holds 800/s, so no step may be judged lost by the drive: the lag may not
    # grow and nothing may be skipped. A step may still be judged short because the
    # clients ran behind their own schedule: CI (3348 s run) had its 100/s step at
    # 87.0/s scheduled over 6 s, with the 200 and 400/s steps held beside it.
    assert "lag grew" not in text and "skipped (already later" not in text, report.stdout
    assert any(r[7] == "yes" for r in table), report.stdout
    assert "given total" in text


AXES = """\
    ---
    name: axes-test
    drives: [nvme]
    filesystems:
      - {fs: xfs, name: xfs-su128, mkfs_options: [-d, "sunit=128,swidth=4096", -l, size=128m], mount_options: "noatime,logbufs=8"}
      - {fs: xfs}
    placement: [tablespace]
    workload:
      scale: [2]
      clients_per_host: [4, 1, 2]
      threads: 1
      duration: 5
      protocol: prepared
      mix: {tpcb-like: 8, select-only: 1, script: 1}
      script: reads.sql
    hosts: [2]
    repetitions: 1
    retries: 0
"""
#: the variants' names, in the file's order
VARIANTS = ("xfs-su128", "xfs")
MIX = "btpcb-like@8+select-only@1+script@1"
#: the mix's own script: one account's balance read (select-only's read, by -f)
READS = "\\set aid random(1, 100000 * :scale)\nSELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"


def test_variants_and_a_client_sweep_are_stored_apart_and_reported_with_the_knee(lab2, tmp_path):
    """Two XFS variants on nvme (seed 004's stripe unit and width, 128 MiB log and
    logbufs=8, and a plain one), each with three counts of -c (given out of order) from two
    client hosts, -M prepared, an 8:1:1 mix of the TPC-B-like and select-only scripts and
    the scenario's own (-f reads.sql@1): six cells, each run with its -c, -M prepared and
    the mix on its own
    variant (the drive made again between them, its device facts carrying its options);
    the report tells the variants apart, and each one's curve lists its counts by
    connections (2, 4, 8) with the knee the knee rule makes of the curve."""
    scenario = tmp_path / "axes-test.yml"
    scenario.write_text(textwrap.dedent(AXES))
    (tmp_path / "reads.sql").write_text(READS)
    env = dict(os.environ, DRIVELAB_RESULTS=str(tmp_path / "results"))
    proc = drivelab_run(scenario, env)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:]
    runs = tmp_path / "results" / "runs" / "axes-test"
    assert sorted(p.name for p in runs.iterdir()) == sorted(
        f"nvme-{fs}-tablespace-s2-h2-mix-Mprepared-btpcb-like8-select-only1-script1-c{c}j1"
        for fs in VARIANTS
        for c in (1, 2, 4)
    )
    con = sqlite3.connect(tmp_path / "results" / "drivelab.db")
    try:
        ran = con.execute(
            """SELECT c.key, r.status, k.value_json, d.value_json FROM cells c
               JOIN runs r ON r.cell_id = c.id
               JOIN facts k ON k.run_id = r.id AND k.key = 'commands'
               JOIN facts d ON d.run_id = r.id AND d.scope = 'device' AND d.key = 'nvme'
               ORDER BY r.id"""
        ).fetchall()
    finally:
        con.close()
    assert [key for key, *_ in ran] == [
        f"nvme mix {fs} tablespace s2 2cl c{c} j1 T5 Mprepared {MIX}"
        for fs in VARIANTS
        for c in (4, 1, 2)
    ]
    for key, status, commands, device in ran:
        assert status == "complete", key
        for argv in json.loads(commands).values():
            assert argv[argv.index("-c") + 1] == key.split()[6][1:], (key, argv)
            assert argv[argv.index("-M") + 1] == "prepared", argv
            at = [i for i, w in enumerate(argv) if w == "-b"]
            assert [argv[i + 1] for i in at] == ["tpcb-like@8", "select-only@1"], argv
            assert argv[argv.index("-f") + 1].endswith("/script.sql@1"), argv
        made = json.loads(device)
        striped = key.split()[2] == "xfs-su128"
        assert (
            made.get("mkfs_options") == ["-d", "sunit=128,swidth=4096", "-l", "size=128m"]
        ) is striped, (key, made)
        assert ("logbufs=8" in (made.get("mount_options") or "")) is striped, (key, made)
    report = subprocess.run(
        [str(BIN / "drivelab"), "report", "axes-test", "--json", "-"],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    doc = json.loads(report.stdout)
    assert {c["test"].split()[1] for c in doc["cells"]} == set(VARIANTS)
    words = subprocess.run(
        [str(BIN / "drivelab"), "report", "axes-test"],
        cwd=REPO, env=dict(env, COLUMNS="200"), capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    lines = [line.rstrip() for line in words.splitlines()]
    said = " ".join(words.split())
    for fs in VARIANTS:
        test = f"mix {fs} tablespace s2 2cl T5 Mprepared {MIX}"
        curve = [r for r in doc["client_sweeps"] if r["test"] == test]
        assert [r["connections"] for r in curve] == [2, 4, 8], doc["client_sweeps"]
        points = [Point(r["connections"], r["tps"], r["latency_p99_s"]) for r in curve]
        found = knee(points)
        assert [r["knee"] for r in curve] == [p == found for p in points], curve
        at = lines.index(f"nvme {test}: tps against connections")
        assert [line.split()[0] for line in lines[at + 3 : at + 6]] == ["2", "4", "8"], words
        expected = "no knee" if found is None else f"knee at {found.connections} connections"
        assert f"nvme ({test}): {expected}" in said, words
        print(f"{fs}: {[(p.connections, round(p.tps), p.p99_s) for p in points]}, knee {found}")


WAL = """\
    ---
    name: wal-test
    baseline: nvme
    drives: [nvme]
    filesystems: [{fs: ext4}]
    placement: [{data: cluster, wal: hdd7200}]
    trim: fstrim
    workload: {scale: [2], clients_per_host: 2, threads: 1, duration: 5}
    hosts: [1]
    repetitions: 1
"""


def test_wal_on_a_drive_of_its_own_lives_there_and_holds_that_drive_until_released(lab2, tmp_path):
    """placement {data: cluster, wal: hdd7200} on nvme: both drives made in one drives
    stage, the cell's cluster's data on nvme and its WAL on hdd7200, as the DB host's
    kernel saw them (database.json's device, the run's environment, the report's row and
    its words). TRIM policy fstrim: the data's filesystem trimmed before the run, its bytes
    in the run's environment. While that cluster stands, hdd7200 is PostgreSQL's data to
    the gate: a reformat is refused by its code; the release of hdd7200 drops the cluster
    and its WAL folder, and the drive can be made again."""
    out, env = run_scenario(tmp_path, "wal-test", WAL)
    assert "drives nvme, hdd7200: made and mounted together" in out, out[-3000:]
    devices = {d["name"]: os.path.realpath(d["device"]) for d in db_drives()}
    (cell,) = (p for p in (tmp_path / "results" / "runs" / "wal-test").iterdir() if p.is_dir())
    assert cell.name == "nvme-ext4-cluster-wal-hdd7200-s2-h1-tpcb-trimfstrim"
    database = json.loads((cell / "db" / "database.json").read_text())
    assert database["wal"] == "on hdd7200 (a drive of its own)", database["wal"]
    assert database["wal_device"]["device"] == devices["hdd7200"], database["wal_device"]
    assert database["wal_device"]["mount"].endswith("/hdd7200"), database["wal_device"]
    assert database["cluster"] == "drivelab_nvme_wal_hdd7200"
    (rep,) = cell.glob("rep-*")
    environment = json.loads((rep / "environment.json").read_text())
    assert environment["storage"]["device"]["path"] == devices["nvme"], environment["storage"]
    assert environment["wal"]["device"]["path"] == devices["hdd7200"], environment["wal"]
    trim = environment["trim"]
    assert trim["policy"] == "fstrim" and trim["mount_point"].endswith("/nvme"), trim
    assert trim["trimmed_bytes"] > 0 and trim["seconds"] >= 0, trim
    doc = json.loads(drivelab("report", "wal-test", "--json", "-", env=env).stdout)
    documents.validate("report", doc)
    (row,) = doc["cells"]
    assert (row["drive"], row["wal_drive"], row["wal_device"]) == (
        "nvme", "hdd7200", devices["hdd7200"],
    )  # fmt: skip
    assert row["test"].split()[2] == "cluster-wal-hdd7200" and row["tps_mean"] > 0, row
    print(f"wal: nvme data, WAL on {row['wal_device']}: {row['tps_mean']:.1f} tps")
    words = " ".join(drivelab("report", "wal-test", env=env).stdout.split())
    assert "cluster-wal-hdd7200: the cluster's data on the drive, its WAL on hdd7200" in words
    # the gate: hdd7200 holds the cluster's WAL, whatever the request says
    again = [{"name": "hdd7200", "drives": ["hdd7200"], "fs": "xfs"}]
    refused = playbook("drives.yml", {"candidate_drive_request": again})
    assert refused.returncode != 0
    assert "hdd7200: holds PostgreSQL data" in refused.stdout, refused.stdout[-2000:]
    assert "holds_postgresql_data" in refused.stdout
    released = playbook("release.yml", {"pgbench_database_release": ["hdd7200"]})
    assert released.returncode == 0, released.stdout[-2000:]
    left = on_hosts("db", "pg_lsclusters --no-header; ls -A /srv/drivelab/hdd7200")["dbhost"]
    assert "drivelab_nvme_wal_hdd7200" not in left and "pg_wal_of_nvme" not in left, left
    made = playbook("drives.yml", {"candidate_drive_request": again})
    assert made.returncode == 0, made.stdout[-2000:]


STATES = """\
    ---
    name: state-test
    drives: [ssdcliff]
    placement: [cluster]
    filesystems: [{fs: ext4}]
    drive_state:
      - {name: fresh, purge: discard}
      - name: steady
        purge: discard
        precondition: {multiple: 1}
        steady_state: {round_seconds: 2, max_rounds: 8, window: 3}
    workload: {scale: [2], clients_per_host: 2, threads: 1, duration: 5}
    hosts: [1]
    repetitions: 1
    retries: 0
"""


def test_a_drive_off_its_cliff_is_slower_preconditioned_than_fresh_and_the_report_says_so(
    lab2, tmp_path
):
    """The lab's cliff class (ssdcliff: writes at 5,000 IOPS until 768 MiB of its 1 GiB
    have been written and not discarded since, 1,000 after; the lab's watcher sets the
    cap from the kernel's counts) in two states of one scenario, the cluster on the drive:
    purged by a discard through the gate (fresh); and purged, preconditioned with its
    whole capacity in 128 KiB writes, then 2 s rounds of 4 KiB random writes at qd32
    until three rounds hold the PTS rule (steady). Each state is its own cell, the drive
    made anew for each; the device facts of its run keep every step's figures and every
    round; the rounds run at the slow cap, the preconditioned cell's tps fall below the
    fresh one's as the write cap does, and the report says each cell's state. The host
    refuses a drive that is no candidate before anything is written."""
    _, env = run_scenario(tmp_path, "state-test", STATES)
    runs = tmp_path / "results" / "runs" / "state-test"
    doc = json.loads(drivelab("report", "state-test", "--json", "-", env=env).stdout)
    states, tps = {}, {}
    for name in ("fresh", "steady"):
        cell = runs / f"ssdcliff-ext4-cluster-s2-h1-tpcb-ds{name}"
        states[name] = json.loads((cell / "db" / "dbhost-ssdcliff.json").read_text())["state"]
        (row,) = (r for r in doc["cells"] if r["test"].endswith(f"ds {name}"))
        tps[name] = row["tps_mean"]
    fresh, steady = states["fresh"], states["steady"]
    assert fresh["purge"]["how"] == "discard" and "precondition" not in fresh, fresh
    assert steady["precondition"]["io_bytes"] >= steady["size_bytes"], steady["precondition"]
    ss = steady["steady_state"]
    iops = [r["iops"] for r in ss["rounds"]]
    assert ss["steady"] and ss["steady_round"] == len(iops) <= 8, ss
    assert all(0 < v <= 1000 * 1.1 for v in iops), iops  # off the cliff: the slow cap
    # 5x fewer writes per second: the commits (WAL on the drive) slow with them. The
    # steady cell is held by the slow cap (497.8-510.7 tps on two days); the fresh one,
    # not held by its drive, by the machine's CPU (2,132.8 tps on 2026-12-06, 733-986 on
    # the slower 2026-12-07 machine): so the factor between them is the CPU's, not 5
    assert tps["steady"] < tps["fresh"] / 1.25, tps
    words = " ".join(drivelab("report", "state-test", env=env).stdout.split())
    assert (
        "drive state ssdcliff tpcb ext4 cluster s2 1cl c2 j1 T5 ds fresh: purged (discard" in words
    )
    assert "ds steady: purged (discard" in words, words
    assert f"steady after {len(iops)} rounds" in words, words
    print(f"state: precondition {steady['precondition']['seconds']:.1f} s, rounds {iops}, "
          f"tps fresh {tps['fresh']:.1f} steady {tps['steady']:.1f}")  # fmt: skip
    refused = ansible(
        "ansible-playbook", "tests/lab/playbooks/state_entry_point.yml", "-e",
        json.dumps({"candidate_drive_request": [
            {"name": "sysdisk", "drives": ["sysdisk"], "drive_state": {"purge": "discard"}}
        ]}),
    )  # fmt: skip
    assert refused.returncode != 0
    assert "drive sysdisk: not listed in the inventory's candidate_drives" in refused.stdout


def test_a_client_added_to_a_provisioned_lab_is_provisioned_once(lab2, tmp_path, monkeypatch):
    """`lab up --clients 3` on the two-client lab the tests above provisioned: the first
    provisioning runs in full (client3 is new) and makes client3's password; every host
    then keeps the stamp of what it has, so the next provisioning stops at the stamps.
    (Before: the stamp was computed before the password existed, so two runs in a row
    provisioned in full.) drivelab run makes this very call (ScenarioRun.provision)."""
    from collector.run import stages as runner  # noqa: PLC0415

    monkeypatch.setenv("DRIVELAB_RESULTS", str(tmp_path / "results"))
    drivelab("lab", "up", "--clients", "3")
    result, skipped = runner.provision_unless_unchanged()
    assert not skipped
    # the stamps read over SSH: client3 has none, so none is removed there first; the
    # others' (another inventory's) are
    # (strategy free: Ansible prints a task's banner again before each of its results
    # that follows another task's lines)
    task = "".join(
        part for part in result.log.read_text().split("TASK [")[1:]
        if part.startswith("Remove a stamp that is not current]")
    )  # fmt: skip
    assert "skipping: [client3]" in task and "changed: [client1]" in task, task
    assert sorted(p.name for p in STAMPS.iterdir()) == ["client1", "client2", "client3", "dbhost"]
    _, skipped = runner.provision_unless_unchanged()
    assert skipped, "the second provisioning after adding a client did not stop at the stamps"
    # where the stamps cannot be read over SSH first (no key or known_hosts file in the
    # inventory), the playbook reads them: all current, it stops there; one gone, every
    # host is provisioned again, and the missing stamp written: nothing else changes (the
    # current stamps are kept, not removed and written again)
    result, skipped = runner._provision(None, stream=False, skip_unchanged=True)
    assert skipped and result.recap["client3"]["changed"] == 0, result.recap
    (STAMPS / "client3").unlink()
    result, skipped = runner._provision(None, stream=False, skip_unchanged=True)
    assert not skipped
    changed = {host: counts["changed"] for host, counts in result.recap.items()}
    assert changed == {"dbhost": 0, "client1": 0, "client2": 0, "client3": 1}, result.recap
    assert sorted(p.name for p in STAMPS.iterdir()) == ["client1", "client2", "client3", "dbhost"]
    assert runner.stamps_current(None)


TEAM = """\
    ---
    name: {name}
    baseline: {drive}
    drives: [{drive}]
    placement: [cluster]
    workload: {{scale: [2], clients_per_host: 1, threads: 1, duration: 5}}
    hosts: [1]
    repetitions: 2
"""


def pg_runs(uri: str) -> list[tuple]:
    import psycopg  # noqa: PLC0415

    with psycopg.connect(uri) as conn:
        try:
            return conn.execute(
                """SELECT s.name, c.key, r.repetition, r.status, r.controller, r.recorded_at,
                          r.started_at, r.ended_at
                   FROM runs r JOIN cells c ON c.id = r.cell_id
                   JOIN scenarios s ON s.id = c.scenario_id
                   ORDER BY s.name, c.key, r.repetition"""
            ).fetchall()
        except psycopg.errors.UndefinedTable:
            return []


def one_client_inventory(path: Path, client: str) -> Path:
    """The lab's inventory with one client host: each run keeps to its own client (its
    pgbench and its folders) and, placement cluster, its own PostgreSQL cluster on its
    own drive."""
    inv = lab_inventory()
    clients = inv["all"]["children"]["clients"]["hosts"]
    inv["all"]["children"]["clients"]["hosts"] = {client: clients[client]}
    path.write_text(yaml.safe_dump(inv), encoding="utf-8")
    return path


def test_two_runs_share_the_lab_by_its_lease_into_one_postgresql_store_and_a_rerun_resumes(
    lab2, tmp_path, monkeypatch
):
    """`lab up --results-store` starts the lab's results cluster on the controller; a
    `drivelab run` of team-a (nvme) holds the lab's lease on the DB host, so while it runs
    (issue #24): `lab status` names it; team-b's run without --wait is refused within
    seconds in one line naming team-a, touching nothing; a direct `ansible-playbook
    playbooks/drives.yml` is refused in one line before its drive play; another process
    (`drivelab import` of a third scenario) writes into the same store; team-b's run with
    --wait says it waits, starts after team-a ends and completes. All land whole in the
    one PostgreSQL store; the report shows each with its run count; running one again
    resumes from it (every repetition found stored, none run twice); lab down saves the
    store to the results folder before it removes the cluster. Two controllers' runs
    writing at the same time (two labs) are tests/unit/test_store_team.py's two writer
    processes on a real PostgreSQL. Last in the module: it ends with lab down."""
    from collector.run import stages as runner  # noqa: PLC0415
    from tests.conftest import build_store  # noqa: PLC0415

    monkeypatch.setenv("DRIVELAB_RESULTS", str(tmp_path / "logs"))  # playbook logs
    drivelab("lab", "up", "--results-store")
    runner.provision_unless_unchanged()  # skipped when the tests above did it
    status = json.loads(drivelab("lab", "status", "--json").stdout)
    uri = status["results_store"]
    assert uri.startswith("postgresql://drivelab_results@/drivelab_results?"), uri
    assert status["results_store_answers"], status
    assert status["lease"]["text"] == "free", status["lease"]

    # the other writer's document: a realistic two-drive scenario (6 runs), from SQLite
    build_store(tmp_path / "other.db").close()
    doc = tmp_path / "two-drives.json"
    drivelab("export", "--db", str(tmp_path / "other.db"), "-o", str(doc))

    env = dict(os.environ, DRIVELAB_DB=uri)
    runs = {}
    for name, drive, client in (("team-a", "nvme", "client1"), ("team-b", "ssd", "client2")):
        scenario = tmp_path / f"{name}.yml"
        scenario.write_text(textwrap.dedent(TEAM.format(name=name, drive=drive)), encoding="utf-8")
        inventory = one_client_inventory(tmp_path / f"{name}-hosts.yml", client)
        runs[name] = (scenario, inventory)

    def start(name: str, *more: str) -> subprocess.Popen:
        scenario, inventory = runs[name]
        return subprocess.Popen(
            [str(BIN / "drivelab"), "run", "--no-check", str(scenario), "--inventory", str(inventory),
             "--no-telemetry", *more],
            cwd=REPO, env=dict(env, DRIVELAB_RESULTS=str(tmp_path / name)), start_new_session=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    procs = {"team-a": start("team-a")}
    try:
        held = wait_for(
            lambda: (d := lease_status(runs["team-b"][1]))["lease"] and d, 300, "team-a's lease", 1
        )
        assert held["lease"]["scenario"] == "team-a" and held["lease"]["pid"] == procs["team-a"].pid
        lab_status = json.loads(drivelab("lab", "status", "--json").stdout)["lease"]
        assert lab_status["text"].startswith("drivelab run of scenario 'team-a'"), lab_status

        # refused: team-b without --wait, within seconds, one line naming team-a, nothing run
        started = time.monotonic()
        refused = start("team-b")
        out_refused, _ = refused.communicate(timeout=120)
        refused_s = time.monotonic() - started
        last = out_refused.strip().splitlines()[-1]
        print(f"team-b refused in {refused_s:.1f} s: {last}")
        assert refused.returncode == EXIT_BUSY, out_refused[-3000:]  # retry later
        assert last.startswith(
            "drivelab: lab lease: dbhost is in use: drivelab run of scenario 'team-a'"
        ), last
        assert f"(pid {procs['team-a'].pid}), since " in last and "expected to end about" in last
        assert last.endswith("nothing was touched (--wait waits for it; drivelab status shows it)")
        assert refused_s < 30, f"refused after {refused_s:.0f} s"
        assert not (tmp_path / "team-b" / "runs").exists()

        # refused: a playbook called directly, before its drive play, in one line
        failures = tmp_path / "direct-failures.jsonl"
        monkeypatch.setenv("DRIVELAB_FAILURES", str(failures))
        hdd = next(d for d in db_drives() if d["name"] == "hdd10k")["device"]
        started = time.monotonic()
        request = [{"name": "hdd10k", "drives": ["hdd10k"], "fs": "ext4"}]
        direct = playbook("drives.yml", {"candidate_drive_request": request})
        direct_s = time.monotonic() - started
        monkeypatch.delenv("DRIVELAB_FAILURES")
        assert direct.returncode != 0, direct.stdout[-3000:]
        (failure,) = [json.loads(line) for line in failures.read_text().splitlines()]
        print(f"direct drives.yml refused in {direct_s:.1f} s: {failure['msg']}")
        assert failure["refusal"] == "lease_held", failure
        assert "\n" not in failure["msg"]
        assert failure["msg"].startswith("dbhost is in use: drivelab run of scenario 'team-a'")
        assert "PLAY [Candidate drives]" not in direct.stdout
        blkid = subprocess.run(["blkid", "-p", hdd], capture_output=True, text=True, check=False)
        assert blkid.returncode == 2 and not blkid.stdout, blkid.stdout  # 2: no signature found

        # another writer into the same store while team-a runs
        first = procs["team-a"]
        wait_for(lambda: pg_runs(uri) or first.poll() is not None, 600, "team-a's first run")
        assert first.poll() is None, "team-a ended before its second run"
        imported = drivelab("import", str(doc), "--db", uri)
        imported_at = time.time()
        assert first.poll() is None, "team-a ended before the import was done: no overlap"
        assert "6 runs added" in imported.stdout, imported.stdout

        # team-b with --wait: waits, then runs after team-a
        procs["team-b"] = start("team-b", "--wait")
        outs = {name: proc.communicate(timeout=1200)[0] for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    for name, proc in procs.items():
        assert proc.returncode == 0, f"{name}: {outs[name][-3000:]}"
    assert "lab lease: dbhost is in use: drivelab run of scenario 'team-a'" in outs["team-b"]
    assert "; waiting for it (--wait)" in outs["team-b"]

    rows = pg_runs(uri)
    by = {name: [r for r in rows if r[0] == name] for name in (*runs, "two-drives")}
    for name, drive in (("team-a", "nvme"), ("team-b", "ssd")):
        assert [(r[2], r[3]) for r in by[name]] == [(0, "complete"), (1, "complete")], rows
        assert all(drive in r[1] for r in by[name]), rows  # never the other's cell
        assert {r[4] for r in by[name]} == {os.uname().nodename}, rows
    assert len(by["two-drives"]) == 6, rows
    assert by["team-a"][1][5] > imported_at, "team-a's second run was stored before the import"
    # one at a time: team-b measured only after team-a's last run ended
    assert min(r[6] for r in by["team-b"]) > max(r[7] for r in by["team-a"]), rows

    report = drivelab("report", "--db", uri, "--json", str(tmp_path / "report.json"))
    assert "team-a" in report.stdout and "team-b" in report.stdout
    reported = json.loads((tmp_path / "report.json").read_text())["runs"]
    counts = {n: sum(r["scenario"] == n for r in reported) for n in by}
    assert counts == {"team-a": 2, "team-b": 2, "two-drives": 6}, counts

    scenario, inventory = runs["team-a"]
    again = subprocess.run(
        [str(BIN / "drivelab"), "run", "--no-check", str(scenario), "--inventory", str(inventory), "--no-telemetry"],
        cwd=REPO, env=dict(env, DRIVELAB_RESULTS=str(tmp_path / "team-a")), capture_output=True,
        text=True, timeout=600, check=False,
    )  # fmt: skip
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]
    assert "all 2 repetitions stored, skipped" in again.stdout, again.stdout[-3000:]
    assert pg_runs(uri) == rows

    monkeypatch.setenv("DRIVELAB_RESULTS", str(tmp_path / "saved"))
    down = drivelab("lab", "down")
    saved = sorted((tmp_path / "saved").glob("lab-results-store-*.json"))
    assert len(saved) == 1, down.stdout
    assert "(3 scenarios, 10 runs) saved to" in " ".join(down.stdout.split()), down.stdout
    doc = json.loads(saved[0].read_text())
    assert sorted(sc["scenarios"][0][1] for sc in doc["scenarios"]) == [
        "team-a",
        "team-b",
        "two-drives",
    ]
    assert not lab.RESULTS_STORE.exists()
