"""Shared by the collector tests: the fixture folder, and a realistic results store
built from real captured outputs (two drives x 3 repetitions x 2 clients, one
partial run), as the runner will build it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"


@pytest.hookimpl(optionalhook=True)  # a hook of xdist's, absent under -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Under ``pytest -n`` (make test): every test in tests/lab/ is one unit of work,
    run by one worker in the order tests/lab/conftest.py's ORDER gives, since there is one
    lab per machine (a module takes over the lab the one before left where it can); the
    other workers take the unit tests' modules
    meanwhile. (xdist's own ``loadgroup`` relies on rewriting node ids, which pytest 9
    no longer allows.)"""
    from xdist.scheduler import LoadScopeScheduling  # noqa: PLC0415

    class LabTestsTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "lab" if nodeid.startswith("tests/lab/") else super()._split_scope(nodeid)

    return LabTestsTogether(config, log)


#: seconds spent in each lab test file (set-up, call and teardown), for the summary
_lab_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.nodeid.startswith("tests/lab/"):
        path = report.nodeid.split("::", 1)[0]
        _lab_seconds[path] = _lab_seconds.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    """Where the lab tests' time went, by file (make test's 30 minutes are mostly
    theirs); bench/ci_timing.py keeps these lines in docs/benchmarks.md."""
    if not _lab_seconds:
        return
    tr = terminalreporter
    tr.section("lab time by file")
    for path, sec in sorted(_lab_seconds.items(), key=lambda kv: -kv[1]):
        tr.write_line(f"lab time {sec:8.1f} s  {path}")
    tr.write_line(f"lab time {sum(_lab_seconds.values()):8.1f} s  all lab tests")


SCENARIO = "two-drives"
#: hdd runs at 1/30 of the captured figures, the way a 120-IOPS drive did in the lab
HDD_FACTOR = 1 / 30


def build_store(
    path: Path,
    *,
    scenario: str = SCENARIO,
    drives: tuple[tuple[str, float], ...] = (("hdd", HDD_FACTOR), ("ssd", 1.0)),
    spec: dict | None = None,
    repetitions: int = 3,
    partial: tuple[str, int] = ("hdd", 2),
):
    """A store as the runner will leave it, from tests/data outputs only: each drive's
    figures are the captured ones times its factor; ``partial`` names the drive and
    repetition whose second client aborted (hdd's third run)."""
    from collector.parse import fio, pg_test_fsync, pgbench  # noqa: PLC0415
    from collector.records import CellSpec, LatencyHistogram, RawOutput, RunRecord, Sample  # noqa: PLC0415
    from collector.stats import tps as stats  # noqa: PLC0415
    from collector.store import Store  # noqa: PLC0415

    pg = DATA / "pgbench"
    report = pgbench.parse_report((pg / "pgbench_run2_agg.stdout").read_text(), "run2.stdout")
    agg = pgbench.read_agglogs(sorted((pg / "run2_agg_full_logs").iterdir()))
    txlog = pgbench.summarize_txlog(sorted((pg / "run8_sampling_full_logs").iterdir()))
    aborted_out = (pg / "pgbench_fail_aborted_clients.stdout").read_text()
    aborted_err = (pg / "pgbench_fail_aborted_clients.stderr").read_text()
    aborted_rc = pgbench.parse_rc((pg / "pgbench_fail_aborted_clients.rc").read_text())

    store = Store.open(path, clock=lambda: 1795234000.0)
    names = [d for d, _ in drives]
    sid = store.add_scenario(scenario, {"drives": names, "repetitions": repetitions}, names[0])
    store.add_facts(sid, {"kernel": "6.1.0-18-amd64", "shared_buffers": "128MB"}, host="db")
    store.add_facts(sid, {"model": "lab loop 120 IOPS", "rotational": True}, "device", "db")
    result = fio.parse_fio_json((DATA / "fio" / "fio_randread_4k.json").read_text(), "randread")
    store.add_samples(fio.fio_samples(result, {"drive": "ssd"}), sid)
    _, fsync = pg_test_fsync.parse_pg_test_fsync(
        (DATA / "pg_test_fsync" / "pg_test_fsync_15_s1.txt").read_text()
    )
    store.add_samples(pg_test_fsync.fsync_samples(fsync, {"drive": "ssd"}), sid)

    for drive, factor in drives:
        cid = store.add_cell(sid, CellSpec(drive=drive, **(spec or {"clients": 2, "scale": 2})))
        for rep in range(repetitions):
            clients, series, samples = [], [], []
            t_shift = rep * 100.0
            for ci, name in enumerate(("client1", "client2")):
                f = factor * (1 + 0.03 * rep + 0.01 * ci)
                offset = t_shift + 0.5 * ci  # client2 starts half a second late
                pts = [
                    replace(p, start=p.start + offset, transactions=p.transactions * f)
                    for p in stats.series_from_agglog(name, agg)
                ]
                if (drive, rep) == partial and ci == 1:
                    cr = stats.client_result(
                        name,
                        pgbench.parse_report(aborted_out, "aborted.stdout"),
                        stderr=pgbench.parse_stderr(aborted_err),
                        exit_code=aborted_rc,
                        series=pts,
                    )
                else:
                    cr = stats.client_result(name, replace(report, tps=report.tps * f), series=pts)
                h = txlog.histogram
                hist = LatencyHistogram(
                    tuple(x / f for x in h.lows_s), tuple(x / f for x in h.highs_s), h.counts
                )
                cr = replace(
                    cr,
                    histogram=hist,
                    latency_p95_s=stats.percentile(hist, 0.95),
                    latency_p99_s=stats.percentile(hist, 0.99),
                )
                clients.append(cr)
                series += pts
            if rep == 0:
                t0 = min(p.start for p in series)
                samples = [
                    Sample(
                        "drivelab_device_iops",
                        (120 if drive == "hdd" else 8000) * (1 + 0.1 * (i % 3)),
                        "operations/second",
                        {"drive": drive, "host": "db"},
                        t0 + i,
                    )
                    for i in range(6)
                ]
            status, reason = stats.run_status(clients)
            store.record_run(
                cid,
                RunRecord(
                    repetition=rep,
                    status=status,
                    reason=reason,
                    clients=tuple(clients),
                    started_at=1795234444.0 + t_shift,
                    ended_at=1795234450.0 + t_shift,
                    commands=("pgbench -c 4 -j 2 -T 5 -P 1 --log --aggregate-interval=1 bench",),
                    series=tuple(series),
                    raw_outputs=(
                        RawOutput("stdout", f"runs/{drive}/{rep}/client1.stdout", "client1"),
                    ),
                    samples=tuple(samples),
                    facts={"pgbench_version": report.pgbench_version},
                ),
            )
    return store


@pytest.fixture(scope="session")
def results_db(tmp_path_factory) -> Path:
    """The realistic store, built once per session: tests only read it."""
    path = tmp_path_factory.mktemp("results") / "drivelab.db"
    build_store(path).close()
    return path


@pytest.fixture(scope="session")
def pg_cluster():
    """The results-store tests' PostgreSQL: a real cluster of this session's own
    (tests/pgcluster.py), stopped and removed at the end. If it cannot start, every test
    that needs it fails: a team-store test is never skipped."""
    from tests import pgcluster  # noqa: PLC0415

    with pgcluster.started() as cluster:
        yield cluster


@pytest.fixture(params=["sqlite", "postgresql"])
def store_target(request, tmp_path):
    """A new, empty results store on each backend: an SQLite file's path, or the URI of
    a new database of the session's PostgreSQL cluster (no password in it)."""
    if request.param == "sqlite":
        return tmp_path / "results" / "drivelab.db"
    return request.getfixturevalue("pg_cluster").new_database()


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def results_store(request, tmp_path_factory):
    """The realistic store (:func:`build_store`) on each backend, built once per session:
    tests only read it."""
    return request.getfixturevalue("results_db" if request.param == "sqlite" else "results_pg")


@pytest.fixture(scope="session")
def results_pg(pg_cluster) -> str:
    """The realistic store in a database of the session's PostgreSQL: its URI."""
    target = pg_cluster.new_database()
    build_store(target).close()
    return target
