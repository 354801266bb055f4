"""``collector.gather.folder`` and ``drivelab gather``: run folders built in tmp_path from the
real captured pgbench outputs in tests/data/pgbench, laid out as the pgbench playbook
fetches them (run.json, db/, one folder per client host)."""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from collector.cli import main as cli
from collector.errors import DrivelabError
from collector.gather import folder as gather
from collector.records import RunStatus
from collector.report import html, load
from collector.run import storing
from collector.runfolder import RunMeta, rep_dir
from collector.store import Store
from tests.conftest import DATA

PG = DATA / "pgbench"


def _tps_line(fixture: str) -> float:
    """The figure on the ``tps = ...`` line pgbench printed, read without the parser."""
    (m,) = re.findall(r"^tps = ([\d.]+) ", (PG / f"{fixture}.stdout").read_text(), re.M)
    return float(m)


RUN1_TPS = _tps_line("pgbench_run1_log")  # 3929.690542
RUN2_TPS = _tps_line("pgbench_run2_agg")
RUN8_TPS = _tps_line("pgbench_run8_sampling")
RUN9_TPS = _tps_line("pgbench_run9_progress_timestamp")
ABORTED_TPS = _tps_line("pgbench_fail_aborted_clients")
SKEW = 0.25  # client2's logs are shifted this much later than client1's
START_AT = 1795234360.0
WARNING = (
    "datasets (660 MB) fit in twice the DB host's memory: this run measures RAM, not the drive"
)


def _shift_txlog(text: str, seconds: float) -> str:
    """Per-transaction log rows with their epoch (time_epoch, time_us) moved by ``seconds``."""
    out = []
    for line in text.splitlines():
        p = line.split()
        us = int(p[4]) * 1_000_000 + int(p[5]) + round(seconds * 1e6)
        p[4], p[5] = str(us // 1_000_000), str(us % 1_000_000)
        out.append(" ".join(p))
    return "\n".join(out) + "\n"


def _shift_agglog(text: str, seconds: int) -> str:
    return "".join(
        " ".join([str(int(p[0]) + seconds), *p[1:]]) + "\n"
        for p in (line.split() for line in text.splitlines() if line.strip())
    )


def _counted(fixture: str) -> int:
    """The transactions pgbench counted in a fixture's report (processed + failed +
    skipped), read without the parser: a full per-transaction log holds that many rows."""
    text = (PG / f"{fixture}.stdout").read_text()
    total = 0
    for pattern in (r"processed: (\d+)", r"failed transactions: (\d+)", r"skipped: (\d+)"):
        total += sum(int(n) for n in re.findall(pattern, text))
    return total


def _logs_run1(
    shift: float, fixture: str = "pgbench_run1_log", seconds: float = 3.0
) -> dict[str, str]:
    """A full per-transaction log of as many rows as ``fixture``'s report counted, split
    over two thread files: run1's two 20-row log heads repeated, copy k moved by k
    steps of an even spread over ``seconds`` (a 3 s run, so that the clients overlap),
    then all moved by ``shift``. The first copy is the capture itself."""
    total = _counted(fixture)
    out = {}
    for k, suffix in enumerate(("", ".1")):
        head = (PG / f"run1_log__pgbench_log.9435{suffix}.head20.txt").read_text().splitlines()
        n = total // 2 + (total % 2 if k else 0)
        copies = -(-n // len(head))
        rows = []
        for i in range(n):
            p = head[i % len(head)].split()
            at = shift + seconds * (i // len(head)) / copies
            us = int(p[4]) * 1_000_000 + int(p[5]) + round(at * 1e6)
            p[4], p[5] = str(us // 1_000_000), str(us % 1_000_000)
            rows.append(" ".join(p) + "\n")
        out[f"pgbench_log.9435{suffix}"] = "".join(rows)
    return out


def _logs_run2(shift: float) -> dict[str, str]:
    return {
        p.name: _shift_agglog(p.read_text(), int(shift))
        for p in (PG / "run2_agg_full_logs").iterdir()
    }


def _logs_run8(shift: float) -> dict[str, str]:
    return {
        p.name.replace("samp.", "pgbench_log."): _shift_txlog(p.read_text(), shift)
        for p in (PG / "run8_sampling_full_logs").iterdir()
    }


@dataclass
class Client:
    """What one client host's folder holds: a fixture's stdout/stderr/rc, log files."""

    fixture: str = "pgbench_run1_log"
    logs: dict[str, str] = field(default_factory=dict)
    rc: str | None = (
        "fixture"  # "fixture": the fixture's .rc (rc=0 if it has none); None: no rc.txt
    )
    command: bool = True
    launched_delay: float = 0.0


def make_run(
    root: Path,
    clients: dict[str, Client | None],
    *,
    log: str = "full",
    database: dict | None = None,
    run_extra: dict | None = None,
    rep: int = 0,
    failures: list[dict] | None = None,
) -> Path:
    """A run folder as the pgbench playbook leaves it. A client mapped to None is in
    client_hosts but has no folder (it never answered)."""
    run_dir = root / "runs" / "two-client" / "nvme-ext4-tablespace-s20-c2-tpcb" / f"rep-{rep}"
    run_dir.mkdir(parents=True)
    doc = {
        "scenario": "two-client",
        "cell_id": "nvme-ext4-tablespace-s20-c2-tpcb",
        "cell": {
            "drive": "nvme",
            "workload": "tpcb",
            "filesystem": "ext4",
            "placement": "tablespace",
            "scale": 20,
            "clients": 2,
            "params": {"clients_per_host": 4, "threads": 2, "duration": 15},
        },
        "repetition": rep,
        "db_host": "dbhost",
        "client_hosts": list(clients),
        "pgbench": {
            "clients_per_host": 4,
            "threads": 2,
            "duration": 15,
            "transactions": None,
            "mode": "tpcb",
            "rate": None,
            "log": log,
            "sampling_rate": 0.01 if log == "sampled" else None,
            "aggregate_interval": 1 if log == "aggregate" else None,
            "progress": 1,
        },
        "start_at": START_AT,
        "started_at": START_AT - 4,
        "ended_at": START_AT + 22,
        "ansible_failures": failures or [],
        **(run_extra or {}),
    }
    (run_dir / "run.json").write_text(json.dumps(doc), encoding="utf-8")
    db = run_dir / "db"
    db.mkdir()
    (db / "database.json").write_text(
        json.dumps(
            database
            if database is not None
            else {
                "sizes": {"drivelab_client1": 330000000, "drivelab_client2": 330000000},
                "memory_bytes": 536870912,
                "memory_source": "cgroup",
                "warning": WARNING,
                "init": {
                    "client1": {"seconds": 2.4, "scale": 20, "caps_lifted": True},
                    "client2": {"seconds": 2.6, "scale": 20, "caps_lifted": True},
                },
                "postgresql": {"version": "15.18", "settings": {"shared_buffers": "128MB"}},
                "wal": "system disk",
            }
        ),
        encoding="utf-8",
    )
    (db / "dbhost-nvme.json").write_text(
        json.dumps({"filesystem": "nvme", "fs": "ext4", "drives": [{"device": "/dev/loop3"}]}),
        encoding="utf-8",
    )
    for host, c in clients.items():
        if c is None:
            continue
        d = run_dir / host
        d.mkdir()
        for stream in ("stdout", "stderr"):
            src = PG / f"{c.fixture}.{stream}"
            (d / f"{stream}.txt").write_text(src.read_text() if src.exists() else "")
        if c.rc == "fixture":
            rc = PG / f"{c.fixture}.rc"
            (d / "rc.txt").write_text(rc.read_text() if rc.exists() else "rc=0\n")
        elif c.rc is not None:
            (d / "rc.txt").write_text(c.rc)
        if c.command:
            argv = [
                "pgbench",
                "-h",
                "10.213.0.2",
                "-c",
                "4",
                "-j",
                "2",
                "-T",
                "15",
                "drivelab_" + host,
            ]
            (d / "command.json").write_text(
                json.dumps(
                    {
                        "argv": argv,
                        "start_at": START_AT,
                        "launched_at": START_AT + 0.001 + c.launched_delay,
                        "ended_at": START_AT + 16,
                        "pid": 9435,
                    }
                )
            )
        for name, text in c.logs.items():
            (d / name).write_text(text)
    return run_dir


def two(log_maker=_logs_run1, fixture="pgbench_run1_log") -> dict[str, Client]:
    return {
        "client1": Client(fixture, log_maker(0.0)),
        "client2": Client(fixture, log_maker(SKEW if log_maker is not _logs_run2 else 1)),
    }


# --------------------------------------------------------------------------- figures


@dataclass(frozen=True)
class Case:
    clients: dict[str, Client | None]
    log: str
    status: RunStatus
    reason: str | None
    tps: dict[str, float | None]
    skew: float | None = None
    skew_source: str | None = None
    series_source: str | None = None
    failures: list[dict] | None = None


CASES = {
    "full logs: complete, skew from first transactions": Case(
        two(),
        "full",
        RunStatus.COMPLETE,
        None,
        {"client1": RUN1_TPS, "client2": RUN1_TPS},
        skew=SKEW,
        skew_source="first transaction (per-transaction log)",
        series_source="txlog",
    ),
    "aggregate logs: complete, skew from first intervals": Case(
        two(_logs_run2, "pgbench_run2_agg"),
        "aggregate",
        RunStatus.COMPLETE,
        None,
        {"client1": RUN2_TPS, "client2": RUN2_TPS},
        skew=1.0,
        skew_source="first aggregate interval (interval-aligned)",
        series_source="agglog",
    ),
    "sampled logs: complete, skew an estimate": Case(
        two(_logs_run8, "pgbench_run8_sampling"),
        "sampled",
        RunStatus.COMPLETE,
        None,
        {"client1": RUN8_TPS, "client2": RUN8_TPS},
        skew=SKEW,
        skew_source="first sampled transaction (sampled log: an estimate)",
        series_source="txlog sampled",
    ),
    "no logs: series from timestamped progress": Case(
        {
            "client1": Client("pgbench_run9_progress_timestamp"),
            "client2": Client("pgbench_run9_progress_timestamp"),
        },
        "none",
        RunStatus.COMPLETE,
        None,
        {"client1": RUN9_TPS, "client2": RUN9_TPS},
        skew=0.0,
        skew_source="first progress interval (-P)",
        series_source="progress",
    ),
    "one client aborted: partial": Case(
        {
            "client1": Client("pgbench_run1_log", _logs_run1(0.0)),
            "client2": Client(
                "pgbench_fail_aborted_clients", _logs_run1(SKEW, "pgbench_fail_aborted_clients")
            ),
        },
        "full",
        RunStatus.PARTIAL,
        "client2: client 0 aborted in command 5 (SQL) of script 0; "
        "perhaps the backend died while processing",
        {"client1": RUN1_TPS, "client2": ABORTED_TPS},
        skew=SKEW,
    ),
    "client folder missing: partial": Case(
        {"client1": Client("pgbench_run1_log", _logs_run1(0.0)), "client2": None},
        "full",
        RunStatus.PARTIAL,
        "client2: no output fetched from client2",
        {"client1": RUN1_TPS, "client2": None},
        skew=0.0,
    ),
    "client folder missing, ansible says why: partial": Case(
        {"client1": Client("pgbench_run1_log", _logs_run1(0.0)), "client2": None},
        "full",
        RunStatus.PARTIAL,
        "client2: no output fetched from client2 (ansible task 'Run pgbench at the agreed "
        "instant' failed: Failed to connect to the host via ssh: Connection timed out)",
        {"client1": RUN1_TPS, "client2": None},
        failures=[
            {
                "host": "client2",
                "task": "Run pgbench at the agreed instant",
                "msg": "Failed to connect to the host via ssh:\n  Connection timed out",
            }
        ],
    ),
    "client's link cut mid-run, ansible gave up on it: partial, unreachable": Case(
        {"client1": Client("pgbench_run1_log", _logs_run1(0.0)), "client2": None},
        "full",
        RunStatus.PARTIAL,
        "client2: no output fetched from client2 (unreachable over SSH during "
        "'pgbench_run : Wait for pgbench to finish' "
        "(ssh: connect to host 10.213.0.12 port 22: Connection timed out))",
        {"client1": RUN1_TPS, "client2": None},
        failures=[
            {  # as drivelab_failures wrote it in tests/lab/test_faults.py's link cut
                "kind": "unreachable",
                "host": "client2",
                "task": "pgbench_run : Wait for pgbench to finish",
                "msg": "Task failed: Failed to connect to the host via ssh: "
                "mux_client_request_session: read from master failed: Broken pipe "
                "ssh: connect to host 10.213.0.12 port 22: Connection timed out",
            }
        ],
    ),
    "no rc.txt (pgbench never finished): partial": Case(
        {
            "client1": Client("pgbench_run1_log", _logs_run1(0.0)),
            "client2": Client("pgbench_run1_log", rc=None, command=False),
        },
        "full",
        RunStatus.PARTIAL,
        "client2: no exit code fetched from client2 (rc.txt missing)",
        {"client1": RUN1_TPS, "client2": None},
    ),
    "every client failed: failed, reason from stderr": Case(
        {
            "client1": Client("pgbench_fail_wrong_port"),
            "client2": Client("pgbench_fail_too_many_clients"),
        },
        "full",
        RunStatus.FAILED,
        'client1: connection to server at "127.0.0.1", port 54399 failed: Connection refused',
        {"client1": None, "client2": None},
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_gathered_figures(tmp_path, case):
    run_dir = make_run(tmp_path, case.clients, log=case.log, failures=case.failures)
    db = tmp_path / "drivelab.db"
    with Store.open(db) as store:
        run_id = storing.record_run_dir(store, run_dir)
        info = store.scenario("two-client")
        ((cell_id, spec),) = store.cells(info.id)
        (run,) = store.runs(cell_id)
        clients = {c.client: c for c in store.client_results(run_id)}
        facts = {f.key: f.value for f in store.facts(info.id, run_id) if f.scope == "run"}
        series = store.series(run_id)
    assert run.id == run_id and run.repetition == 0
    assert (run.status, run.reason) == (case.status, case.reason)
    assert spec.drive == "nvme" and spec.scale == 20 and spec.clients == 2
    assert spec.params == {"clients_per_host": 4, "threads": 2, "duration": 15}
    assert set(clients) == set(case.tps)
    for host, tps in case.tps.items():
        if tps is None:
            assert clients[host].tps is None and clients[host].status == RunStatus.FAILED
        else:  # pgbench's own figure, unchanged (the fidelity test allows 0.1 %)
            assert clients[host].tps == pytest.approx(tps, rel=1e-9)
            assert clients[host].latency_avg_s is not None
    if case.skew is not None:
        assert facts["start_skew_s"] == pytest.approx(case.skew, abs=1e-6)
    if case.skew_source is not None:
        assert facts["start_skew_source"] == case.skew_source
    if case.series_source is not None:
        # "txlog sampled 0.01" names its rate
        assert {p.source.split(" 0")[0] for p in series} == {case.series_source}
        assert {p.client for p in series} == set(case.tps)
    assert facts["cell_id"] == "nvme-ext4-tablespace-s20-c2-tpcb"


def test_full_logs_give_percentiles_and_a_windowed_tps(tmp_path):
    g = gather.gather_run(make_run(tmp_path, two()))
    c1 = g.run.clients[0]
    assert c1.latency_p50_s <= c1.latency_p95_s <= c1.latency_p99_s <= c1.latency_max_s
    assert c1.failed == 0 and c1.exit_code == 0
    assert c1.start == pytest.approx(1795234360.636219 - 0.001285)  # first row: end - latency
    rs = g.stats()
    assert rs.windowed and rs.start_skew_s == pytest.approx(SKEW, abs=1e-6)
    assert rs.tps_reported_sum == pytest.approx(2 * RUN1_TPS)
    assert g.run.commands[0].startswith("client1: pgbench -h 10.213.0.2 -c 4")
    kinds = {(r.host, r.kind) for r in g.run.raw_outputs}
    assert {("client1", "txlog"), ("client2", "stdout"), ("client2", "rc")} <= kinds
    assert (None, "run_json") in kinds and ("dbhost", "db_json") in kinds
    assert all(Path(r.path).is_file() for r in g.run.raw_outputs)
    assert g.run.started_at == START_AT - 4 and g.run.ended_at == START_AT + 22


def test_launch_skew_from_command_json(tmp_path):
    clients = two()
    clients["client2"].launched_delay = 0.004
    g = gather.gather_run(make_run(tmp_path, clients))
    assert g.run.facts["launch_skew_s"] == pytest.approx(0.004, abs=1e-6)


def test_database_and_device_facts_are_stored(tmp_path):
    db = tmp_path / "d.db"
    with Store.open(db) as store:
        run_id = storing.record_run_dir(store, make_run(tmp_path, two()))
        sid = store.scenario("two-client").id
        facts = store.facts(sid, run_id)
        samples = store.samples(sid, run_id, "drivelab_db_")
    run = {f.key: f.value for f in facts if f.scope == "run"}
    assert run["db_warning"] == WARNING
    assert run["wal_placement"] == "system disk"
    assert run["db_memory_bytes"] == 536870912 and run["db_memory_source"] == "cgroup"
    assert run["db_sizes_bytes"] == {"drivelab_client1": 330000000, "drivelab_client2": 330000000}
    assert run["db_init_seconds"] == {"client1": 2.4, "client2": 2.6}
    assert run["db_caps_lifted"] is True
    assert run["postgresql_version"] == "15.18"
    assert run["postgresql_settings"] == {"shared_buffers": "128MB"}
    assert run["pgbench_version"] == "15.18 (Debian 15.18-0+deb12u1)"
    device = [f for f in facts if f.scope == "device"]
    assert [(f.host, f.key, f.value["fs"]) for f in device] == [("dbhost", "nvme", "ext4")]
    assert {(s.metric, s.labels.get("client", "")) for s in samples} >= {
        ("drivelab_db_memory_bytes", ""),
        ("drivelab_db_init_seconds", "client2"),
    }


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"ended_at": None, "ansible_failures": None}, START_AT + 16),  # controller died
        ({}, START_AT + 22),
    ],
    ids=["no ended_at: the clients' last end", "ended_at from run.json"],
)
def test_missing_ended_at(tmp_path, extra, expected):
    run_dir = make_run(tmp_path, two())
    doc = json.loads((run_dir / "run.json").read_text())
    for k, v in extra.items():
        if v is None:
            doc.pop(k)
    (run_dir / "run.json").write_text(json.dumps(doc))
    g = gather.gather_run(run_dir)
    assert g.run.ended_at == expected
    assert g.run.facts["controller_finished"] is (expected == START_AT + 22)


def test_extra_cell_keys_go_into_params(tmp_path):
    run_dir = make_run(tmp_path, two())
    doc = json.loads((run_dir / "run.json").read_text())
    doc["cell"]["fillfactor"] = 90
    (run_dir / "run.json").write_text(json.dumps(doc))
    assert gather.gather_run(run_dir).cell.params["fillfactor"] == 90


def _cut(text: str, rows: int) -> str:
    """The first ``rows`` rows of a log, as a disk that filled up would leave it (the
    cut falls after a newline: pgbench writes whole lines)."""
    return "".join(text.splitlines(keepends=True)[:rows])


@pytest.mark.parametrize("fixture", ["pgbench_run1_log", "pgbench_run4_failures_log"])
def test_a_full_log_cut_short_makes_the_client_partial_with_the_counts(tmp_path, fixture):
    """pgbench logs one row per transaction it counted (run1: 9,725 + 9,934 rows =
    19,659 processed; run4: 18,494 = 3,128 processed + 15,366 failed). A thread file
    that lost its tail parses cleanly, so only the count tells: the client is partial,
    the reason gives both counts, and the figures of the others still stand."""
    clients = {
        "client1": Client("pgbench_run1_log", _logs_run1(0.0)),
        "client2": Client(fixture, _logs_run1(SKEW, fixture)),
    }
    logs = clients["client2"].logs
    logs["pgbench_log.9435.1"] = _cut(logs["pgbench_log.9435.1"], 1000)
    counted = _counted(fixture)
    rows = counted // 2 + 1000
    g = gather.gather_run(make_run(tmp_path, clients))
    c1, c2 = g.run.clients
    assert c1.status == RunStatus.COMPLETE and c1.reason is None
    assert c2.status == RunStatus.PARTIAL
    assert c2.reason.startswith(
        f"per-transaction log cut short: {rows:,} rows where pgbench counted {counted:,}"
    )
    if fixture == "pgbench_run4_failures_log":
        assert c2.reason.endswith("(3,128 processed + 15,366 failed)")
    assert g.run.status == RunStatus.PARTIAL


def test_a_full_log_with_rows_of_another_run_makes_the_client_partial(tmp_path):
    clients = two()
    logs = clients["client2"].logs
    logs["pgbench_log.9435"] += _cut(logs["pgbench_log.9435"], 5)
    g = gather.gather_run(make_run(tmp_path, clients))
    c2 = g.run.clients[1]
    assert c2.status == RunStatus.PARTIAL
    assert c2.reason == (
        "per-transaction log holds more than this run: 19,664 rows where pgbench "
        "counted 19,659 transactions (19,659 processed)"
    )


def test_unreadable_log_after_a_clean_exit_makes_the_client_partial(tmp_path):
    clients = two()
    clients["client2"].logs["pgbench_log.9435"] += "1 2 3\n"
    g = gather.gather_run(make_run(tmp_path, clients))
    c2 = g.run.clients[1]
    assert c2.status == RunStatus.PARTIAL and c2.tps == RUN1_TPS
    assert (
        c2.reason.startswith("unreadable pgbench log: ") and "pgbench_log.9435:9830:" in c2.reason
    )
    assert g.run.status == RunStatus.PARTIAL


def test_a_count_beyond_64_bits_in_a_report_makes_the_client_partial_and_is_stored(
    tmp_path, capsys
):
    """Before, the count reached the store and sqlite3 raised OverflowError: gather
    ended in a traceback and stored nothing."""
    run_dir = make_run(tmp_path, two())
    stdout = run_dir / "client1" / "stdout.txt"
    stdout.write_text(
        re.sub(r"(actually processed: )\d+", r"\g<1>99999999999999999999999", stdout.read_text())
    )
    assert cli.main(["gather", str(run_dir), "--db", str(tmp_path / "x.db")]) == 0
    out = capsys.readouterr().out
    assert "rep 0: partial (client1: " in out and "a count out of range in" in out, out
    with Store.open(tmp_path / "x.db", create=False) as store:
        (status,) = store.conn.execute("SELECT status FROM runs").fetchone()
    assert status == "partial"


def test_logs_of_two_pgbench_processes_pick_the_pid_of_command_json(tmp_path):
    clients = two()
    clients["client1"].logs["pgbench_log.777"] = "garbage\n"
    g = gather.gather_run(make_run(tmp_path, clients))
    assert g.run.status == RunStatus.COMPLETE
    (
        tmp_path / "runs/two-client/nvme-ext4-tablespace-s20-c2-tpcb/rep-0/client1/command.json"
    ).write_text("{}")
    with pytest.raises(
        DrivelabError, match=r"client1: logs of 2 pgbench processes \(pids 777, 9435\)"
    ):
        gather.gather_run(tmp_path / "runs/two-client/nvme-ext4-tablespace-s20-c2-tpcb/rep-0")


# --------------------------------------------------------------------------- idempotence


def _counts(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as conn:
        return {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa: S608
            for t in (
                "scenarios",
                "cells",
                "runs",
                "client_results",
                "series",
                "facts",
                "samples",
                "raw_outputs",
            )
        }


def test_gathering_twice_replaces(tmp_path):
    run_dir = make_run(tmp_path, two())
    db = tmp_path / "d.db"
    with Store.open(db) as store:
        storing.record_run_dir(store, run_dir)
    once = _counts(db)
    with Store.open(db) as store:
        second = storing.record_run_dir(store, run_dir)
        ((cell_id, _),) = store.cells(store.scenario("two-client").id)
        assert [r.id for r in store.runs(cell_id)] == [second]
    assert _counts(db) == once and once["runs"] == 1 and once["facts"] > 10


def test_a_rerun_that_now_fails_replaces_the_complete_one(tmp_path):
    db = tmp_path / "d.db"
    with Store.open(db) as store:
        storing.record_run_dir(store, make_run(tmp_path / "a", two()))
        storing.record_run_dir(
            store,
            make_run(
                tmp_path / "b", {"client1": Client("pgbench_fail_wrong_port"), "client2": None}
            ),
        )
        ((cell_id, _),) = store.cells(store.scenario("two-client").id)
        (run,) = store.runs(cell_id)
    assert run.status == RunStatus.FAILED


# --------------------------------------------------------------------------- malformed


def _rewrite(run_dir: Path, name: str, text: str | None) -> None:
    path = run_dir / name
    if text is None:
        path.unlink()
    else:
        path.write_text(text)


def _without(key: str) -> str:
    doc = json.loads(_template_run_json())
    parts = key.split(".")
    target = doc
    for p in parts[:-1]:
        target = target[p]
    del target[parts[-1]]
    return json.dumps(doc)


def _with(key: str, value) -> str:
    doc = json.loads(_template_run_json())
    parts = key.split(".")
    target = doc
    for p in parts[:-1]:
        target = target[p]
    target[parts[-1]] = value
    return json.dumps(doc)


_TEMPLATE: dict[str, str] = {}


def _template_run_json() -> str:
    return _TEMPLATE["run.json"]


MALFORMED = {
    "no run.json": ("run.json", None, "run.json: missing (not a run folder?)"),
    "run.json not JSON": ("run.json", "{scenario: two", "run.json: not JSON (line 1 column 2:"),
    "run.json a list": ("run.json", "[]", "run.json: the file must be a JSON object, not a list"),
    "no scenario": ("run.json", lambda: _without("scenario"), "run.json: missing key 'scenario'"),
    "no cell.drive": (
        "run.json",
        lambda: _without("cell.drive"),
        "run.json: missing key 'cell.drive'",
    ),
    "no client_hosts": (
        "run.json",
        lambda: _without("client_hosts"),
        "run.json: missing key 'client_hosts'",
    ),
    "no pgbench.log": (
        "run.json",
        lambda: _without("pgbench.log"),
        "run.json: missing key 'pgbench.log'",
    ),
    "repetition a string": (
        "run.json",
        lambda: _with("repetition", "0"),
        "run.json: 'repetition' must be an integer, not a string \"0\"",
    ),
    "repetition true": (
        "run.json",
        lambda: _with("repetition", True),
        "'repetition' must be an integer",
    ),
    "unknown log mode": (
        "run.json",
        lambda: _with("pgbench.log", "verbose"),
        "run.json: 'pgbench.log' must be one of full, sampled, aggregate, none, not 'verbose'",
    ),
    "empty client_hosts": (
        "run.json",
        lambda: _with("client_hosts", []),
        "'client_hosts' must be a non-empty list",
    ),
    "sampled without a rate": (
        "run.json",
        lambda: _with("pgbench.log", "sampled"),
        "'pgbench.sampling_rate' must be in (0, 1] when log is 'sampled'",
    ),
    "database.json not JSON": ("db/database.json", "{", "db/database.json: not JSON (line 1"),
    "database.json init not an object": (
        "db/database.json",
        '{"init": {"client1": 2.4}}',
        "db/database.json: 'init.client1' must be a JSON object, not a number",
    ),
    "device facts not JSON": ("db/dbhost-nvme.json", "model: x", "db/dbhost-nvme.json: not JSON"),
    "rc.txt garbage": (
        "client1/rc.txt",
        "exit zero",
        "client1/rc.txt:1: not an exit code: 'exit zero'",
    ),
    "command.json not JSON": ("client2/command.json", "{'argv'", "client2/command.json: not JSON"),
    # beyond what a store column holds: sqlite3 raised OverflowError (a traceback) before
    "repetition beyond 64 bits": (
        "run.json",
        lambda: _with("repetition", 10**30),
        "run.json: a number out of range: 100000000000...(31 digits) (beyond 64-bit integers)",
    ),
    "scale beyond 64 bits": (
        "run.json",
        lambda: _with("cell.scale", 2**63),
        "run.json: a number out of range: 9223372036854775808 (beyond 64-bit integers)",
    ),
    "rc.txt beyond a status": ("client1/rc.txt", "99999999999999999999999", "not an exit code"),
}


@pytest.mark.parametrize(("name", "text", "message"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_folder_is_one_line_naming_the_file(tmp_path, name, text, message):
    run_dir = make_run(tmp_path, two())
    _TEMPLATE["run.json"] = (run_dir / "run.json").read_text()
    _rewrite(run_dir, name, text() if callable(text) else text)
    with pytest.raises(DrivelabError) as err:
        gather.gather_run(run_dir)
    text_ = str(err.value)
    assert "\n" not in text_
    assert text_.startswith(str(run_dir / name)), text_
    assert message in text_


def test_not_a_folder(tmp_path):
    with pytest.raises(DrivelabError, match=r"nope: no such run folder$"):
        gather.gather_run(tmp_path / "nope")


# --------------------------------------------------------------------------- CLI and report


@pytest.fixture
def wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


def test_gather_then_report(tmp_path, capsys, wide):
    run_dir = make_run(tmp_path, two())
    db = tmp_path / "d.db"
    assert cli.main(["gather", str(run_dir), "--db", str(db)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    assert out[0].startswith("two-client/nvme-ext4-tablespace-s20-c2-tpcb rep 0: complete, ")
    assert out[0].endswith(" tps (window)")
    assert cli.main(["report", "-v", "--db", str(db)]) == 0
    report = capsys.readouterr().out
    row = next(line for line in report.splitlines() if line.startswith("nvme "))
    assert "test: tpcb ext4 tablespace s20 2cl c4 j2 T15" in report
    assert f"{2 * RUN1_TPS:,.1f}" in row
    flat = " ".join(report.split())
    assert f"warning nvme: {WARNING}" in flat


def test_gather_a_scenario_folder_and_a_bad_one(tmp_path, capsys):
    make_run(tmp_path, two(), rep=0)
    bad = make_run(tmp_path, two(), rep=1)
    (bad / "run.json").write_text("{")
    make_run(
        tmp_path, {"client1": Client("pgbench_run1_log", _logs_run1(0.0)), "client2": None}, rep=2
    )
    db = tmp_path / "d.db"
    assert cli.main(["gather", str(tmp_path / "runs" / "two-client"), "--db", str(db)]) == 2
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "two-client/nvme-ext4-tablespace-s20-c2-tpcb rep 0",
        "two-client/nvme-ext4-tablespace-s20-c2-tpcb rep 2",
    ]
    assert "rep 2: partial (client2: no output fetched from client2), " in lines[1]
    assert lines[1].endswith(f"{RUN1_TPS:,.1f} tps (pgbench sum of 1 of 2 clients)")
    assert (
        err
        == f"drivelab: {bad / 'run.json'}: not JSON (line 1 column 2: Expecting property name enclosed in double quotes)\n"
    )
    with Store.open(db) as store:
        ((cell_id, _),) = store.cells(store.scenario("two-client").id)
        assert [(r.repetition, r.status) for r in store.runs(cell_id)] == [
            (0, RunStatus.COMPLETE),
            (2, RunStatus.PARTIAL),
        ]


def test_html_shows_the_warning_and_the_database(tmp_path):
    db = tmp_path / "d.db"
    with Store.open(db) as store:
        storing.record_run_dir(store, make_run(tmp_path, two()))
        view = load(store, "two-client")
    assert view.cells[0].warnings == (WARNING,)
    assert view.cells[0].database["wal_placement"] == "system disk"
    text = html.render([view])
    assert WARNING.replace("'", "&#x27;") in text
    assert "system disk" in text and "caps lifted" in text


def test_html_says_how_many_clients_initialised_at_once(tmp_path):
    database = {
        "memory_bytes": 536870912,
        "init": {
            "client1": {"ran": True, "seconds": 2.4, "caps_lifted": True},
            "client2": {"ran": True, "seconds": 2.6, "caps_lifted": True},
        },
        "init_at_once": 2,
        "init_memory": {"memory_bytes": 536870912, "shared_buffers_bytes": 134217728},
    }
    db = tmp_path / "d.db"
    with Store.open(db) as store:
        storing.record_run_dir(store, make_run(tmp_path, two(), database=database))
        view = load(store, "two-client")
    assert view.cells[0].database["db_init_at_once"] == 2
    assert "2.6 (2 at once)" in html.render([view])


PG_STAT = Path(__file__).resolve().parents[1] / "data" / "pg_stat"


def test_buffer_counters_become_deltas_and_hit_ratios():
    """pg_stat_database around a real 2-client lab run (nvme, scale 2, 10 s)."""
    facts, samples = gather.read_buffer_counters(PG_STAT)
    c1 = facts["db_buffers"]["drivelab_client1"]
    assert (c1["blks_read"], c1["blks_hit"]) == (14202 - 10273, 387482 - 207172)
    assert c1["hit_ratio"] == pytest.approx(180310 / (180310 + 3929))
    assert c1["block_size"] == 8192 and 15 < c1["seconds"] < 25
    assert {(s.metric, s.labels["database"]) for s in samples} == {
        (m, d)
        for m in ("drivelab_db_blks_read", "drivelab_db_blks_hit")
        for d in ("drivelab_client1", "drivelab_client2")
    }


def test_buffer_counters_missing_or_broken(tmp_path):
    assert gather.read_buffer_counters(tmp_path) == ({}, [])
    (tmp_path / "pg_stat-before.json").write_text('{"when": "before", "databases": {}}')
    (tmp_path / "pg_stat-after.json").write_text('{"when": "after", "databases": []}')
    with pytest.raises(DrivelabError, match=r"pg_stat-before.json: 'databases' must be a list"):
        gather.read_buffer_counters(tmp_path)


def test_a_retry_is_its_own_attempt(tmp_path):
    """A retry's run folder (rep-N-attempt-K) says its attempt in run.json; gathered, it is
    stored beside the first attempt, not over it."""
    first = make_run(tmp_path / "a", two(), rep=0)
    second = make_run(tmp_path / "b", two(), rep=0, run_extra={"attempt": 2})
    assert rep_dir(tmp_path, 0, 1).name == "rep-0"
    assert rep_dir(tmp_path, 0, 2).name == "rep-0-attempt-2"
    db = tmp_path / "d.db"
    with Store.open(db) as store:
        storing.record_run_dir(store, first)
        storing.record_run_dir(store, second)
        ((cid, _),) = store.cells(store.scenario("two-client").id)
        assert [(r.repetition, r.attempt) for r in store.runs(cid)] == [(0, 1), (0, 2)]
    bad = make_run(tmp_path / "c", two(), rep=0, run_extra={"attempt": 0})
    with pytest.raises(DrivelabError, match="'attempt' must be 1 or more, not 0"):
        gather.gather_run(bad)


def test_a_warm_run_says_so(tmp_path):
    """A rate search's steps run without the cold start, settled instead: run.json says
    it, and the stored run carries it as the facts ``cold_start`` and ``settled``;
    run.json without them (written before drivelab recorded them) was a cold start, as
    every run then was."""
    warm = make_run(tmp_path / "w", two(), rep=0, run_extra={"cold_start": False, "settled": True})
    assert RunMeta.read(warm).cold_start is False
    facts = gather.gather_run(warm).run.facts
    assert (facts["cold_start"], facts["settled"]) == (False, True)
    old = make_run(tmp_path / "o", two(), rep=0)
    doc = json.loads((old / "run.json").read_text())
    doc.pop("cold_start", None)
    doc.pop("settled", None)
    (old / "run.json").write_text(json.dumps(doc))
    facts = gather.gather_run(old).run.facts
    assert (facts["cold_start"], facts["settled"]) == (True, False)
    bad = make_run(tmp_path / "b", two(), rep=0, run_extra={"cold_start": "no"})
    with pytest.raises(DrivelabError, match="'cold_start'"):
        gather.gather_run(bad)


def test_the_start_in_three_steps_launch_connections_first_transactions(tmp_path, capsys):
    """The wrapper's launch instants are drivelab's; pgbench's initial connection time
    (5.140 ms and 25.261 ms in these two real outputs) puts each client's connections
    up after its launch, and the first transactions come from the logs (client2's 250 ms
    later). gather stores the three spreads; the report says which are the server's."""
    clients = two()
    clients["client2"] = Client(
        "pgbench_run4_failures_log",
        _logs_run1(SKEW, "pgbench_run4_failures_log"),
        launched_delay=0.003,
    )
    run_dir = make_run(tmp_path, clients)
    facts = gather.gather_run(run_dir).run.facts
    assert facts["launch_skew_s"] == pytest.approx(0.003, abs=1e-6)
    launched = facts["launched_at"]
    assert facts["connected_at"] == pytest.approx(
        {"client1": launched["client1"] + 0.005140, "client2": launched["client2"] + 0.025261},
        abs=1e-6,
    )
    assert facts["connect_spread_s"] == pytest.approx(0.003 + 0.025261 - 0.005140, abs=1e-6)
    assert facts["start_skew_s"] == pytest.approx(SKEW, abs=0.01)

    db = tmp_path / "store.db"
    with Store.open(db) as store:
        storing.record_run_dir(store, run_dir)
    assert cli.main(["report", "--db", str(db)]) == 0
    # by default the start lines in one: the worst of every cell
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "start 1 cells, worst run of each: launches at most 3.0 ms apart,"
        " first transactions at most 250.0 ms apart"
    ) in out, out
    assert "start nvme:" not in out
    assert cli.main(["report", "-v", "--db", str(db), "--json", str(tmp_path / "r.json")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "start nvme: 2 clients, worst of 1 runs: launches 3.0 ms apart (drivelab's);"
        " connections up 23.1 ms apart, first transactions 250.0 ms apart"
        " (the DB host's: it authenticates every connection at once)"
    ) in out, out
    (row,) = json.loads((tmp_path / "r.json").read_text())["runs"]
    assert row["launch_skew_s"] == pytest.approx(0.003, abs=1e-6)
    assert row["connect_spread_s"] == pytest.approx(0.023121, abs=1e-6)
    # one client: nothing to spread
    single = make_run(tmp_path / "one", {"client1": Client("pgbench_run1_log", _logs_run1(0.0))})
    assert gather.gather_run(single).run.facts["connect_spread_s"] == 0.0


def test_the_two_phase_start_stores_its_lead_and_the_handover(tmp_path, capsys):
    """pgbench-at --go records when the instant was chosen (every client armed) and when
    each client received it: gather stores the lead the instant was chosen with, how long
    handing it over took, and how late after the instant the last launch came; the
    report prints the lead beside the launch spread, and names a late client's launch."""

    def two_phase(run_dir, go, launched, realtime=None):
        for host, go_at in go.items():
            path = run_dir / host / "command.json"
            doc = json.loads(path.read_text())
            doc.update(chosen_at=START_AT - 0.6, armed_at=START_AT - 0.9, go_at=go_at)
            doc["launched_at"] = launched[host]
            if realtime is not None:
                doc["realtime"] = realtime[host]
            path.write_text(json.dumps(doc))
        return gather.gather_run(run_dir)

    on_time = make_run(tmp_path / "a", two())
    g = two_phase(
        on_time,
        {"client1": START_AT - 0.55, "client2": START_AT - 0.52},
        {"client1": START_AT + 0.0004, "client2": START_AT + 0.0011},
        realtime={"client1": True, "client2": False},
    )
    facts = g.run.facts
    assert facts["wake_realtime"] == {"client1": True, "client2": False}
    assert facts["start_lead_s"] == pytest.approx(0.6, abs=1e-6)
    assert facts["handover_s"] == pytest.approx(0.08, abs=1e-6)
    assert facts["launch_late_s"] == pytest.approx(0.0011, abs=1e-6)
    assert facts["launch_skew_s"] == pytest.approx(0.0007, abs=1e-6)

    late = make_run(tmp_path / "b", two(), rep=1)
    facts = two_phase(
        late,
        {"client1": START_AT - 0.5, "client2": START_AT + 0.2},
        {"client1": START_AT + 0.0003, "client2": START_AT + 0.2005},
    ).run.facts
    assert facts["handover_s"] == pytest.approx(0.8, abs=1e-6)
    assert facts["launch_late_s"] == pytest.approx(0.2005, abs=1e-6)
    assert facts["wake_realtime"] == {}  # an older wrapper: not recorded

    db = tmp_path / "store.db"
    with Store.open(db) as store:
        storing.record_run_dir(store, on_time)
    assert cli.main(["report", "-v", "--db", str(db), "--json", str(tmp_path / "r.json")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "launches 0.7 ms apart (drivelab's; instant chosen 600.0 ms ahead, all armed)" in out
    (row,) = json.loads((tmp_path / "r.json").read_text())["runs"]
    assert row["start_lead_s"] == pytest.approx(0.6, abs=1e-6)
    with Store.open(db) as store:
        storing.record_run_dir(store, late)
    assert cli.main(["report", "-v", "--db", str(db)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "a client launched 200.5 ms after it" in out, out

    # an old run folder (pgbench-at --at): no two-phase facts, nothing said
    old = gather.gather_run(make_run(tmp_path / "c", two())).run.facts
    assert (old["start_lead_s"], old["handover_s"], old["launch_late_s"]) == (None, None, None)


def test_a_client_clock_ahead_is_put_on_the_controllers_clock(tmp_path, capsys):
    """client2's clock runs 300 ms ahead of the controller's: everything it wrote (its
    wrapper's instants, its logs) is 300 ms later than client1's for the same instant.
    With the offset the start measured (command.json's clock_offset_s), gather puts its
    instants, start, end and series on the controller's clock: the launches and first
    transactions are as together as without the offset, the window is the same, and the
    report names the clock with its bound."""
    ahead = 0.3

    def run(root, offset_known):
        clients = {
            "client1": Client("pgbench_run1_log", _logs_run1(0.0)),
            "client2": Client("pgbench_run1_log", _logs_run1(ahead), launched_delay=ahead + 0.002),
        }
        run_dir = make_run(root, clients)
        for host, offset in (("client1", 0.0), ("client2", ahead)):
            path = run_dir / host / "command.json"
            doc = json.loads(path.read_text())
            doc.update(chosen_at=START_AT - 0.6, go_at=START_AT - 0.5 + offset)
            if offset_known:
                doc.update(clock_offset_s=offset, clock_bound_s=0.0004, clock_measured_s=offset)
            path.write_text(json.dumps(doc))
        return run_dir

    blind = gather.gather_run(run(tmp_path / "blind", offset_known=False))
    assert blind.run.facts["launch_skew_s"] == pytest.approx(ahead + 0.002, abs=1e-6)
    assert blind.run.facts["clock_offsets"] == {}
    run_dir = run(tmp_path / "known", offset_known=True)
    known = gather.gather_run(run_dir)
    facts = known.run.facts
    assert facts["launch_skew_s"] == pytest.approx(0.002, abs=1e-6)
    assert facts["start_skew_s"] == pytest.approx(0.0, abs=0.001)
    assert facts["clock_offsets"]["client2"] == {
        "offset_s": ahead,
        "bound_s": 0.0004,
        "measured_s": ahead,
    }
    c1, c2 = known.run.clients
    assert c2.start == pytest.approx(c1.start, abs=0.001)
    assert c2.end == pytest.approx(c1.end, abs=0.001)
    # the window where both ran is as long as each client's run: nothing lost to the clock
    rs, blind_rs = known.stats(), blind.stats()
    assert rs.window[1] - rs.window[0] == pytest.approx(c1.end - c1.start, abs=0.002)
    assert (blind_rs.window[1] - blind_rs.window[0]) < (rs.window[1] - rs.window[0]) - 0.25

    db = tmp_path / "store.db"
    with Store.open(db) as store:
        storing.record_run_dir(store, run_dir)
    assert cli.main(["report", "-v", "--db", str(db)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "clocks off the controller's, corrected: client2 +300.0 ms (±0.4)" in out, out
    # the start's summary line (no -v) names the corrected clock too
    assert cli.main(["report", "--db", str(db)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "start 1 cells, worst run of each:" in out, out
    assert "; clocks off the controller's, corrected: client2 +300.0 ms (±0.4)" in out, out
