"""The team store: the PostgreSQL backend beside SQLite. One schema on both; the results
role reaches its own database only; no password on the command line; ``DRIVELAB_DB``;
the same report from either backend; two controllers writing at once lose nothing and
never mix runs; a scenario name is one writer's at a time.

The PostgreSQL here is a real cluster of the session's own (tests/pgcluster.py)."""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psycopg
import pytest

from collector.cli import main as cli
from collector.errors import DrivelabError
from collector.records import CellSpec, ClientResult, RunRecord, RunStatus
from collector.store import Store, claim
from collector.store.schema import SCHEMA_VERSION
from collector.store.target import PostgresTarget, parse_target
from tests import pgcluster
from tests.conftest import SCENARIO, build_store

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ one schema


def _sqlite_schema(path: Path) -> dict[str, tuple]:
    kinds = {"INTEGER": "int", "REAL": "float", "DOUBLE PRECISION": "float", "TEXT": "text"}
    out = {}
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for t in tables:
            info = conn.execute(f"PRAGMA table_info({t})").fetchall()
            columns = tuple((r[1], kinds[r[2]], bool(r[3] or r[5])) for r in info)
            keys = {tuple(r[1] for r in info if r[5])} - {()}
            for idx in conn.execute(f"PRAGMA index_list({t})").fetchall():
                if idx[2]:  # unique
                    cols = conn.execute(f"PRAGMA index_info({idx[1]})").fetchall()
                    keys.add(tuple(c[2] for c in sorted(cols)))
            out[t] = (columns, frozenset(keys))
    return out


def _pg_schema(uri: str) -> dict[str, tuple]:
    kinds = {"bigint": "int", "integer": "int", "double precision": "float", "text": "text"}
    out = {}
    with psycopg.connect(uri) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns"
            " WHERE table_schema = 'public' ORDER BY table_name, ordinal_position"
        ).fetchall()
        keys = conn.execute(
            "SELECT tc.table_name, array_agg(k.column_name::text ORDER BY k.ordinal_position)"
            " FROM information_schema.table_constraints tc"
            " JOIN information_schema.key_column_usage k"
            " ON k.constraint_name = tc.constraint_name AND k.table_name = tc.table_name"
            " WHERE tc.table_schema = 'public' AND tc.constraint_type IN ('UNIQUE', 'PRIMARY KEY')"
            " GROUP BY tc.table_name, tc.constraint_name"
        ).fetchall()
    for t, c, kind, nullable in rows:
        columns, _ = out.get(t, ((), frozenset()))
        out[t] = ((*columns, (c, kinds[kind], nullable == "NO")), frozenset())
    for t, cols in keys:
        out[t] = (out[t][0], out[t][1] | {tuple(cols)})
    return out


def test_one_schema_for_both_backends(pg_cluster, tmp_path):
    """A new SQLite file (its migrations 1 to 4) and a new PostgreSQL store (its baseline,
    then 4): the same tables, the same columns in the same order, of the same kinds,
    NOT NULL alike, the same unique keys."""
    path = tmp_path / "d.db"
    Store.open(path).close()
    uri = pg_cluster.new_database()
    Store.open(uri).close()
    sqlite_schema, pg_schema = _sqlite_schema(path), _pg_schema(uri)
    assert sorted(pg_schema) == sorted(sqlite_schema)
    for table in sqlite_schema:
        assert pg_schema[table] == sqlite_schema[table], table
    assert ("cell_id", "repetition", "attempt") in sqlite_schema["runs"][1]
    assert ("controller", "text", True) in sqlite_schema["runs"][0]


# ------------------------------------------------------------------ security


def test_the_results_role_reaches_only_its_own_database(pg_cluster):
    """The grants docs/collector.md gives: a login role, no superuser, no CREATEDB or
    CREATEROLE, owner of its database; pg_hba lets it into that database only."""
    uri = pg_cluster.new_database()
    with Store.open(uri) as s:  # it may make and change its own tables
        s.add_scenario("mine")
    with psycopg.connect(uri, autocommit=True) as conn:
        attrs = conn.execute(
            "SELECT rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls"
            " FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        assert attrs == (False, False, False, False, False)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE DATABASE other")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE ROLE other")
    with pytest.raises(psycopg.OperationalError, match=r"no pg_hba\.conf entry"):
        psycopg.connect(pg_cluster.uri("postgres")).close()


@pytest.mark.parametrize(
    "uri",
    [
        "postgresql://drivelab:s3cret-word@db.example/results",
        "postgresql://drivelab@db.example/results?password=s3cret-word",
        "postgres://drivelab:s3cret-word@/results?host=/tmp",
    ],
)
@pytest.mark.parametrize("how", ["--db", "DRIVELAB_DB"])
def test_a_uri_with_a_password_is_refused_in_one_line(uri, how, capsys, monkeypatch):
    argv = ["report"]
    if how == "--db":
        argv += ["--db", uri]
    else:
        monkeypatch.setenv("DRIVELAB_DB", uri)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"drivelab: {how}: the PostgreSQL URI carries")
    assert "s3cret" not in err and "~/.pgpass" in err


def test_a_path_or_a_uri(monkeypatch, tmp_path):
    monkeypatch.delenv("DRIVELAB_DB", raising=False)
    monkeypatch.setenv("DRIVELAB_RESULTS", str(tmp_path))
    assert parse_target(None) == tmp_path / "drivelab.db"
    assert parse_target("results/x.db") == Path("results/x.db")
    uri = "postgresql://drivelab@db.example/results"
    assert parse_target(uri) == PostgresTarget(uri)
    monkeypatch.setenv("DRIVELAB_DB", uri)
    assert parse_target(None) == PostgresTarget(uri)


def test_libpq_keyword_form_is_a_server_store_never_a_file_name():
    keywords = "host=db.example dbname=results user=drivelab"
    assert parse_target(keywords) == PostgresTarget(keywords)
    assert parse_target(" dbname = results") == PostgresTarget(" dbname = results")
    # a file so named is given as a path
    assert parse_target("./host=x.db") == Path("host=x.db")
    assert parse_target(Path("host=x.db")) == Path("host=x.db")
    assert parse_target("results/host=x.db") == Path("results/host=x.db")


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (
            "bogus=1 dbname=results",
            "drivelab: --db: not a PostgreSQL connection string (keyword=value) (invalid"
            ' connection option "bogus"); a file whose name starts so is given as ./NAME\n',
        ),
        (
            "host=db.example password=s3cret-word dbname=results",
            "drivelab: --db: the PostgreSQL connection string (keyword=value) carries a password",
        ),
    ],
    ids=["unknown keyword", "password"],
)
def test_a_bad_keyword_form_is_refused_in_one_line_and_makes_no_file(
    value, said, capsys, monkeypatch, tmp_path
):
    """Before, ``--db 'host=... dbname=...'`` was taken for a file name: ``run`` would
    have made an SQLite file of that name in the working folder."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "--db", value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(said), err
    assert "s3cret" not in err
    assert list(tmp_path.iterdir()) == []


def test_report_reads_a_server_store_given_in_keyword_form(results_pg, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    params = psycopg.conninfo.conninfo_to_dict(results_pg)
    keywords = " ".join(f"{k}={v}" for k, v in params.items())
    assert cli.main(["report", "--db", keywords]) == 0
    assert any(line.startswith("hdd ") for line in capsys.readouterr().out.splitlines())


# ------------------------------------------------------------------ the verbs


def test_report_reads_a_server_store_named_by_drivelab_db(results_pg, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("DRIVELAB_DB", results_pg)
    assert cli.main(["report"]) == 0
    out = capsys.readouterr().out
    hdd = next(line for line in out.splitlines() if line.startswith("hdd "))
    assert "baseline" in hdd and hdd.endswith(" 2/3")


def test_report_json_is_byte_identical_from_either_backend(results_db, results_pg, tmp_path):
    """The same runs stored in SQLite and in PostgreSQL: `drivelab report --json` writes
    the same bytes (floats, orders, text comparisons, JSON values all alike)."""
    for name, db in (("sqlite", results_db), ("pg", results_pg)):
        assert cli.main(["report", "--db", str(db), "--json", str(tmp_path / f"{name}.json")]) == 0
    sqlite_bytes = (tmp_path / "sqlite.json").read_bytes()
    assert (tmp_path / "pg.json").read_bytes() == sqlite_bytes
    assert len(json.loads(sqlite_bytes)["runs"]) == 6


def test_compare_reads_a_server_store(results_pg, capsys):
    assert cli.main(["compare", "hdd", "ssd", "--db", results_pg]) == 0
    assert "ssd" in capsys.readouterr().out


def test_a_server_gone_is_one_line(pg_cluster, capsys):
    uri = pg_cluster.uri("drivelab_results", user="nobody")
    assert cli.main(["report", "--db", uri]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"drivelab: results store {uri}: ")


# ------------------------------------------------------------------ two writers

WRITER = textwrap.dedent(
    """
    import sys, time
    from collector.records import CellSpec, ClientResult, RunRecord, RunStatus, SeriesPoint
    from collector.store import Store, claim
    uri, name, tag, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    with Store.open(uri, controller=f"ctl-{tag}") as s:
        while time.time() < start:
            time.sleep(0.005)
        sid = s.add_scenario(name, {"writer": tag})
        for rep in range(REPS):
            for drive in ("hdd", "ssd"):
                cid = s.add_cell(sid, CellSpec(drive, clients=3))
                clients = tuple(
                    ClientResult(f"client{c}", tps=tag * 1000 + rep * 10 + c) for c in range(3)
                )
                series = tuple(
                    SeriesPoint(f"client{c}", 100.0 + i, 1.0, float(tag)) for c in range(3)
                    for i in range(20)
                )
                s.record_run(cid, RunRecord(rep, RunStatus.COMPLETE, clients, series=series,
                             facts={"writer": tag}))
    """
)


def _writers(uri: str, names: list[str], reps: int) -> list[subprocess.Popen]:
    start = time.time() + 2.0  # both connected and migrated by then: they write together
    code = WRITER.replace("REPS", str(reps))
    return [
        subprocess.Popen(
            [sys.executable, "-c", code, uri, name, str(tag), str(start)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag, name in enumerate(names, start=1)
    ]


def _finish(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]


def test_two_controllers_writing_different_scenarios_at_once(pg_cluster):
    """Two processes, each its own connection and controller name, write 20 runs each
    into one new PostgreSQL store at the same moment (both also create and migrate it):
    every run is there, with its own clients, series and facts, and its controller."""
    uri = pg_cluster.new_database()
    _finish(_writers(uri, ["team-a", "team-b"], reps=10))
    with Store.open(uri, create=False) as s:
        assert s.version() == 5
        assert [i.name for i in sorted(s.scenarios(), key=lambda i: i.name)] == [
            "team-a",
            "team-b",
        ]
        for tag, name in ((1, "team-a"), (2, "team-b")):
            info = s.scenario(name)
            assert info.spec == {"writer": tag}
            cells = s.cells(info.id)
            assert [spec.drive for _, spec in cells] == ["hdd", "ssd"]
            for cid, _ in cells:
                runs = s.runs(cid)
                assert [r.repetition for r in runs] == list(range(10))
                assert {r.controller for r in runs} == {f"ctl-{tag}"}
                for r in runs:
                    tps = [c.tps for c in s.client_results(r.id)]
                    assert tps == [tag * 1000 + r.repetition * 10 + c for c in range(3)]
                    series = s.series(r.id)
                    assert len(series) == 60 and {p.transactions for p in series} == {tag}
                    assert [f.value for f in s.facts(info.id, run_id=r.id)] == [tag]


def test_two_writers_of_one_cell_queue_and_never_mix(pg_cluster):
    """Two processes store the same repetitions of the same cell at once (the same run
    folders gathered from two controllers, say): no error, one run per repetition, and
    each run's clients and series all from one writer, the one its controller names."""
    uri = pg_cluster.new_database()
    _finish(_writers(uri, ["shared", "shared"], reps=15))
    with Store.open(uri, create=False) as s:
        (info,) = s.scenarios()
        for cid, _ in s.cells(info.id):
            runs = s.runs(cid)
            assert [r.repetition for r in runs] == list(range(15))
            for r in runs:
                tag = int(r.controller.removeprefix("ctl-"))
                tps = [c.tps for c in s.client_results(r.id)]
                assert tps == [tag * 1000 + r.repetition * 10 + c for c in range(3)]
                assert {p.transactions for p in s.series(r.id)} == {tag}
                assert len(s.series(r.id)) == 60


@pytest.mark.parametrize("after_read", [1, 2, 3])
def test_a_store_another_controller_makes_between_our_reads_opens(
    store_target, after_read, monkeypatch
):
    """Two controllers open one new store: the first is inside its first migration, its
    tables made but not committed, when the second starts reading. Wherever among the
    second's reads of the tables that commit lands (after the first, second or third;
    at the latest, when the second begins its own transaction), both open, and the store
    is a drivelab store at the current version: never "not a drivelab store"."""
    from collector.store.backend import PostgresBackend, SQLiteBackend  # noqa: PLC0415

    second = threading.get_ident()
    inside, go, committed = threading.Event(), threading.Event(), threading.Event()
    counts = {"tables": 0, "begin": 0, "first_begin": 0, "checks": 0}
    originals = {}

    def release_the_first() -> None:
        if not go.is_set():
            go.set()
            assert committed.wait(30), "the first controller's migration never committed"

    def tables(self, cur=None):
        found = originals["tables"](self, cur)
        if threading.get_ident() == second:
            counts["tables"] += 1
            if counts["tables"] == after_read:
                release_the_first()
        return found

    def begin(self, cur):
        if threading.get_ident() == second:
            release_the_first()
        else:
            counts["first_begin"] += 1
            if counts["first_begin"] == 2:  # its first migration is committed
                committed.set()
        return originals["begin"](self, cur)

    def broken_references(self, cur):
        if threading.get_ident() != second:
            counts["checks"] += 1
            if counts["checks"] == 1:  # its first migration's tables made, not committed
                inside.set()
                assert go.wait(30)
        return originals["broken_references"](self, cur)

    backend = SQLiteBackend if isinstance(store_target, Path) else PostgresBackend
    for name, patched in (
        ("tables", tables), ("begin", begin), ("broken_references", broken_references)
    ):  # fmt: skip
        originals[name] = getattr(backend, name)
        monkeypatch.setattr(backend, name, patched)

    errors: list[BaseException] = []

    def first() -> None:
        try:
            Store.open(store_target, controller="ctl-1").close()
        except BaseException as err:  # reported by the main thread below
            errors.append(err)
        finally:
            committed.set()

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert inside.wait(30), "the first controller never began migrating"
        Store.open(store_target, controller="ctl-2").close()
    finally:
        go.set()
        thread.join(60)
    assert not errors, errors
    assert go.is_set() and counts["first_begin"] >= 2
    with Store.open(store_target, create=False) as s:
        assert s.version() == SCHEMA_VERSION


# ------------------------------------------------------------------ one writer per scenario

HOLDER = textwrap.dedent(
    """
    import sys
    from collector.store import Store, claim
    with Store.open(sys.argv[1], controller="ctl-a") as s, s.claim(sys.argv[2]):
        print("held", flush=True)
        sys.stdin.read()  # until the test closes it, or kills us
    """
)


def _holder(target, scenario: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(target), scenario], cwd=REPO,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout.readline() == "held\n", proc.stderr.read()
    return proc


def _claim_when_free(target, scenario: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with Store.open(target) as s, s.claim(scenario):
                return
        except DrivelabError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_a_scenario_name_is_one_writers_at_a_time(store_target):
    """While one controller runs a scenario into a store, another run of that scenario
    name is refused in one line naming who holds it; other scenarios go on; when the
    holder ends (even killed) the name is free again."""
    Store.open(store_target).close()
    holder = _holder(store_target, "nightly")
    try:
        with Store.open(store_target, controller="ctl-b") as s:
            with pytest.raises(DrivelabError) as err, s.claim("nightly"):
                pass
            message = str(err.value)
            assert f"scenario 'nightly' is being run into {store_target} by ctl-a (pid" in message
            assert f"pid {holder.pid}, since " in message and "\n" not in message
            with s.claim("other"):  # another name is free
                if not isinstance(store_target, Path):
                    assert s._one("SELECT count(*) FROM claims")[0] == 2
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    if not isinstance(store_target, Path):
        with Store.open(store_target) as s:  # the killed holder's row is stale: it only says who
            assert s._all("SELECT controller, pid FROM claims") == [("ctl-a", holder.pid)]
    _claim_when_free(store_target, "nightly")  # its lock died with it: the name is free
    with Store.open(store_target) as s:  # the new claim took the row over, and removed it
        assert s._all("SELECT controller FROM claims") == []


def test_a_claim_released_cleanly_leaves_nothing(store_target):
    holder = _holder(store_target, "nightly")
    holder.stdin.close()
    assert holder.wait(timeout=30) == 0
    if isinstance(store_target, Path):
        (lock,) = store_target.with_name("drivelab.db.claims").iterdir()
        assert lock.read_bytes() == b""
        with claim(store_target, "nightly", controller="ctl-c"):
            assert json.loads(lock.read_bytes())["controller"] == "ctl-c"
        assert lock.read_bytes() == b""
    else:
        with Store.open(store_target) as s, s.claim("nightly"):
            assert s._all("SELECT scenario FROM claims") == [("nightly",)]
    with Store.open(store_target) as s:
        assert s._all("SELECT scenario FROM claims") == []


def test_a_claim_on_sqlite_makes_no_store(tmp_path):
    """A run refused after its claim (bad settings, say) leaves no results store: the
    SQLite claim is a lock file beside where the store would be."""
    db = tmp_path / "results" / "drivelab.db"
    with claim(db, "nightly"), claim(db, "other"):  # two names, side by side
        refused = pytest.raises(DrivelabError, match=r"scenario 'nightly' is being run into")
        with refused, claim(db, "nightly"):
            pass
    assert not db.exists()


def test_the_cluster_is_private(pg_cluster):
    """The test cluster listens on its own Unix socket only: no TCP at all."""
    with psycopg.connect(pg_cluster.uri("postgres", "postgres")) as conn:
        assert conn.execute("SHOW listen_addresses").fetchone() == ("",)
        assert conn.execute("SHOW unix_socket_directories").fetchone() == (str(pg_cluster.folder),)
    assert str(pg_cluster.folder).startswith("/tmp/drivelab-results-pg-")
    assert pgcluster.ROLE == "drivelab_results"


def test_a_run_of_a_scenario_held_elsewhere_is_refused_before_anything_runs(store_target, tmp_path):
    """``drivelab run`` claims its scenario first: held by another controller, the run
    stops in one line before preflight (which, with no inventory here, would fail
    otherwise) and before anything touches a host or the store's runs."""
    from rich.console import Console  # noqa: PLC0415

    from collector import scenario as sc  # noqa: PLC0415
    from collector.run import conductor as scenariorun  # noqa: PLC0415
    from tests.unit.test_cell_identity import INVENTORY, _sets_scenario  # noqa: PLC0415

    scen = _sets_scenario(tmp_path)
    holder = _holder(store_target, scen.name)
    try:
        opts = scenariorun.RunOptions(inventory=tmp_path / "hosts.yml", db=store_target)
        run = scenariorun.ScenarioRun(scen, sc.expand(scen, INVENTORY), INVENTORY, opts, Console())
        with pytest.raises(
            DrivelabError, match=r"scenario 'wal-sync' is being run into .* by ctl-a"
        ):
            run.run()
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    with Store.open(store_target) as s:
        assert s.scenarios() == []


def test_gather_into_a_server_store(pg_cluster, tmp_path, capsys):
    """``drivelab gather --db postgresql://...`` stores a run folder; the run says which
    controller recorded it."""
    from tests.unit.test_gather import make_run, two  # noqa: PLC0415

    uri = pg_cluster.new_database()
    run_dir = make_run(tmp_path, two())
    assert cli.main(["gather", str(run_dir), "--db", uri]) == 0, capsys.readouterr().err
    assert cli.main(["gather", str(run_dir), "--db", uri]) == 0  # again: replaced, not doubled
    with Store.open(uri, create=False) as s:
        (info,) = s.scenarios()
        ((cid, _),) = s.cells(info.id)
        (run,) = s.runs(cid)
        assert run.controller == socket.gethostname()
        assert [c.client for c in s.client_results(run.id)] == ["client1", "client2"]
    # a run folder whose run.json names the controller that ran it (as drivelab run writes
    # it), gathered on another: the store keeps who ran it, not who gathered it
    meta = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps(dict(meta, controller="lab-ctl-b")))
    assert cli.main(["gather", str(run_dir), "--db", uri]) == 0
    with Store.open(uri, create=False) as s:
        (run,) = s.runs(cid)
        assert run.controller == "lab-ctl-b"


# ------------------------------------------------------------------ export / import


def _raw(target) -> dict[str, list]:
    """Every row of every table, ids included, in id order: what 'changes nothing' means."""
    from collector.store.transfer import COLUMNS  # noqa: PLC0415

    with Store.open(target, create=False) as s:
        return {
            t: [tuple(r) for r in s._all(f"SELECT {', '.join(c)} FROM {t} ORDER BY {c[0]}, 2, 3")]  # noqa: S608
            for t, c in COLUMNS.items()
        }


def _report_json(db, path: Path) -> bytes:
    assert cli.main(["report", "--db", str(db), "--json", str(path)]) == 0
    return path.read_bytes()


def test_export_import_sqlite_to_postgresql_and_back(results_db, pg_cluster, tmp_path, capsys):
    """SQLite -> document -> PostgreSQL -> document -> SQLite: `drivelab report --json`
    gives the same bytes from all three; importing a document twice changes no row."""
    want = _report_json(results_db, tmp_path / "sqlite.json")
    doc = tmp_path / "export.json"
    assert cli.main(["export", "--db", str(results_db), "-o", str(doc)]) == 0
    uri = pg_cluster.new_database()
    assert cli.main(["import", str(doc), "--db", uri]) == 0
    assert f"{SCENARIO}: 6 runs added, 0 replaced, 0 already stored" in capsys.readouterr().out
    assert _report_json(uri, tmp_path / "pg.json") == want
    before = _raw(uri)
    assert cli.main(["import", str(doc), "--db", uri]) == 0
    assert f"{SCENARIO}: 0 runs added, 0 replaced, 6 already stored" in capsys.readouterr().out
    assert _raw(uri) == before
    back = tmp_path / "back.json"
    assert cli.main(["export", SCENARIO, "--db", uri, "-o", str(back)]) == 0
    assert cli.main(["import", str(back), "--db", str(tmp_path / "back.db")]) == 0
    assert _report_json(tmp_path / "back.db", tmp_path / "back-report.json") == want
    assert json.loads(back.read_text())["scenarios"] == json.loads(doc.read_text())["scenarios"]


def test_import_merges_runs_into_a_store_that_has_others(results_db, store_target, tmp_path):
    """The store's own runs are kept; a run of the document recorded again elsewhere
    (another recorded_at) replaces the stored one whole."""
    doc = tmp_path / "export.json"
    assert cli.main(["export", "--db", str(results_db), "-o", str(doc)]) == 0
    with Store.open(store_target, controller="ctl-here") as s:
        cid = s.add_cell(s.add_scenario(SCENARIO), CellSpec("nvme", clients=1))
        s.record_run(cid, RunRecord(0, RunStatus.COMPLETE, (ClientResult("c", tps=5.0),)))
    assert cli.main(["import", str(doc), "--db", str(store_target)]) == 0
    data = json.loads(doc.read_text())
    runs = data["scenarios"][0]["runs"]
    runs[0][data["columns"]["runs"].index("recorded_at")] += 60.0
    doc.write_text(json.dumps(data))
    assert cli.main(["import", str(doc), "--db", str(store_target)]) == 0
    with Store.open(store_target) as s:
        cells = s.cells(s.scenario(SCENARIO).id)
        assert [spec.drive for _, spec in cells] == ["nvme", "hdd", "ssd"]
        assert [c.tps for c in s.client_results(s.runs(cells[0][0])[0].id)] == [5.0]
        assert [len(s.runs(cid)) for cid, _ in cells] == [1, 3, 3]
        assert all(len(s.client_results(r.id)) == 2 for cid, _ in cells[1:] for r in s.runs(cid))


def test_a_document_from_before_the_wal_drive_column_imports_the_same(results_db, tmp_path):
    """A document exported by a drivelab of schema version 4 has no cells.wal_drive: it
    imports, its cells' WAL where their placement kept it, and reports as today's does."""
    doc = tmp_path / "export.json"
    assert cli.main(["export", "--db", str(results_db), "-o", str(doc)]) == 0
    data = json.loads(doc.read_text())
    for column in ("clients_swept", "trim", "drive_state", "wal_drive"):
        at = data["columns"]["cells"].index(column)
        data["columns"]["cells"].pop(at)
        for row in data["scenarios"][0]["cells"]:
            row.pop(at)
    data["schema_version"] = 4
    doc.write_text(json.dumps(data))
    assert cli.main(["import", str(doc), "--db", str(tmp_path / "old.db")]) == 0
    with Store.open(tmp_path / "old.db") as s:
        cells = s.cells(s.scenario(SCENARIO).id)
        assert len(cells) == 2 and all(spec.wal_drive is None for _, spec in cells)
    want = _report_json(results_db, tmp_path / "want.json")
    assert _report_json(tmp_path / "old.db", tmp_path / "old-report.json") == want


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not a drivelab export (Expecting value"),
        ('{"a": 1}', "not a drivelab export (no 'drivelab_export' key)"),
        ('{"drivelab_export": 9}', "export format 9, this drivelab reads 1"),
        ('{"drivelab_export": 1, "schema_version": 9, "columns": {}}', "schema version 9"),
    ],
)
def test_a_bad_document_is_one_line_and_imports_nothing(text, message, tmp_path, capsys):
    doc = tmp_path / "x.json"
    doc.write_text(text)
    assert cli.main(["import", str(doc), "--db", str(tmp_path / "d.db")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and str(doc) in err
    assert not (tmp_path / "d.db").exists()


def test_a_test_cluster_that_cannot_start_raises_and_leaves_nothing(monkeypatch):
    """The session's cluster failing to start is an error (the store tests then fail, they
    do not skip), with the server's own words, and its folder is removed."""
    monkeypatch.setattr(pgcluster, "PORT", 0)  # the server refuses to start on port 0
    made: list[str] = []
    mkdtemp = pgcluster.tempfile.mkdtemp

    def recording(**kwargs) -> str:
        made.append(mkdtemp(**kwargs))
        return made[-1]

    monkeypatch.setattr(pgcluster.tempfile, "mkdtemp", recording)
    failing = pytest.raises(RuntimeError, match=r"the results test cluster exited \(1\): .*port")
    with failing, pgcluster.started():
        pass
    (folder,) = made
    assert folder.startswith("/tmp/drivelab-results-pg-") and not Path(folder).exists()


def test_lab_down_saves_the_lab_results_store_only_when_it_holds_something(
    pg_cluster, tmp_path, monkeypatch
):
    """`drivelab lab down` exports the lab's results store before removing it: nothing
    for a database without drivelab's tables, every scenario and run otherwise, in a
    document `drivelab import` takes back."""
    from collector.hosts.lab import save_results_store  # noqa: PLC0415

    monkeypatch.setenv("DRIVELAB_RESULTS", str(tmp_path / "results"))
    uri = pg_cluster.new_database()
    assert save_results_store(uri) is None
    build_store(uri).close()
    out, scenarios, runs = save_results_store(uri)
    assert (scenarios, runs) == (1, 6)
    assert out.parent == tmp_path / "results" and out.name.startswith("lab-results-store-")
    assert cli.main(["import", str(out), "--db", str(tmp_path / "back.db")]) == 0
    with Store.open(tmp_path / "back.db", create=False) as s:
        (info,) = s.scenarios()
        assert sum(len(s.runs(cid)) for cid, _ in s.cells(info.id)) == 6


def test_lab_down_refuses_while_the_lab_results_store_does_not_answer(
    tmp_path, monkeypatch, capsys
):
    """A lab results store whose server is down cannot be saved, and lab down would
    remove its folder: lab down stops in one line before it runs anything."""
    from collector.hosts import lab  # noqa: PLC0415

    folder = tmp_path / "drivelab-results-pg"
    folder.mkdir()
    # a URI like the lab's, for a socket folder where no server listens
    (folder / "uri").write_text(
        f"postgresql://drivelab_results@/drivelab_results?host={folder}&port=5432\n"
    )
    monkeypatch.setattr(lab, "RESULTS_STORE", folder)
    assert lab.results_store_uri()
    assert cli.main(["lab", "down"]) == 2
    err = capsys.readouterr().err
    assert "does not answer" in err and "--discard-results" in err and "\n" not in err.strip()
    assert (folder / "uri").exists()
