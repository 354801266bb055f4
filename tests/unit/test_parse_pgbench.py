"""pgbench parsers on every captured fixture (tests/data/pgbench, from ../shared/fixtures)
and on hand-written 8.4 / 9.4 / 9.6 / 16 / 17 reports; expected figures written out."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from collector.parse import ParseError, pgbench
from collector.stats.tps import percentile

PG = Path(__file__).resolve().parents[1] / "data" / "pgbench"
HW = PG / "handwritten"

# file, expected fields (latencies in seconds)
REPORTS = {
    "pgbench_run1_log.stdout": dict(
        pgbench_version="15.18 (Debian 15.18-0+deb12u1)",
        transaction_type="<builtin: TPC-B (sort of)>",
        scaling_factor=2,
        query_mode="simple",
        clients=4,
        threads=2,
        max_tries=1,
        duration_s=5.0,
        processed=19659,
        failed=0,
        latency_avg_s=1.009e-3,
        latency_stddev_s=0.426e-3,
        connection_time_kind="initial",
        connection_time_s=5.140e-3,
        tps=3929.690542,
        tps_kind="without initial connection time",
        aborted=False,
    ),
    "pgbench_run2_agg.stdout": dict(processed=19910, tps=3980.568588, latency_stddev_s=0.701e-3),
    "pgbench_run3_rate_log.stdout": dict(
        max_tries=3,
        processed=9716,
        failed=0,
        serialization_failures=0,
        deadlock_failures=0,
        retried=0,
        retries=0,
        skipped=114,
        latency_limit_s=2.0e-3,
        above_latency_limit=766,
        latency_avg_s=1.136e-3,
        lag_avg_s=0.236e-3,
        lag_max_s=2.329e-3,
        tps=1943.983425,
    ),
    "pgbench_run4_failures_log.stdout": dict(
        clients=8,
        scaling_factor=1,
        duration_s=3.0,
        processed=3128,
        failed=15366,
        serialization_failures=15366,
        deadlock_failures=0,
        latency_avg_s=1.292e-3,
        latency_avg_includes_failures=True,
        latency_stddev_s=None,
        tps=1047.487203,
    ),
    "pgbench_run5_agg_all.stdout": dict(
        processed=3691,
        failed=7905,
        retried=7266,
        retries=11399,
        skipped=178,
        latency_limit_s=5.0e-3,
        above_latency_limit=633,
        lag_max_s=4.981e-3,
        tps=923.350178,
    ),
    "pgbench_run6_t_mode.stdout": dict(
        clients=2,
        threads=1,
        duration_s=None,
        transactions_per_client=500,
        processed=1000,
        planned_transactions=1000,
        latency_avg_s=0.784e-3,
        latency_stddev_s=None,
        tps=2552.511544,
    ),
    "pgbench_run7_connect.stdout": dict(
        transaction_type="<builtin: select only>",
        processed=988,
        connection_time_kind="average",
        connection_time_s=1.940e-3,
        tps=493.710439,
        tps_kind="including reconnection times",
    ),
    "pgbench_run8_sampling.stdout": dict(processed=12848, tps=4281.326611, duration_s=3.0),
    "pgbench_run9_progress_timestamp.stdout": dict(
        processed=68218, latency_avg_s=0.057e-3, tps=34147.860265
    ),
    "pgbench_fail_aborted_clients.stdout": dict(
        processed=22754, tps=3796.085764, duration_s=6.0, aborted=False
    ),
    "handwritten/pg84_report.txt": dict(
        pgbench_version=None,
        transaction_type="TPC-B (sort of)",
        scaling_factor=10,
        clients=10,
        threads=None,
        transactions_per_client=1000,
        processed=10000,
        planned_transactions=10000,
        failed=None,
        latency_avg_s=None,
        tps=85.296346,
        tps_kind="excluding connections establishing",
        tps_including_connections=85.184871,
    ),
    "handwritten/pg94_rate_report.txt": dict(
        query_mode="prepared",
        clients=8,
        threads=4,
        duration_s=60.0,
        processed=5987,
        skipped=13,
        latency_limit_s=10.0e-3,
        above_latency_limit=41,
        latency_avg_s=3.305e-3,
        latency_stddev_s=1.113e-3,
        lag_avg_s=0.131e-3,
        lag_max_s=9.870e-3,
        tps=99.781223,
        tps_including_connections=99.764510,
    ),
    "handwritten/pg96_report_statements.txt": dict(
        transaction_type="<builtin: TPC-B (sort of)>",
        processed=10000,
        latency_avg_s=15.844e-3,
        latency_stddev_s=8.418e-3,
        tps=622.977698,
    ),
    "handwritten/pg16_report.txt": dict(
        pgbench_version="16.4 (Ubuntu 16.4-1.pgdg22.04+1)",
        server_version="15.8",
        scaling_factor=100,
        partition_method="range",
        partitions=4,
        query_mode="extended",
        clients=32,
        threads=8,
        duration_s=600.0,
        processed=871234,
        latency_avg_s=22.036e-3,
        tps=1452.117821,
    ),
    "handwritten/pg17_report_retries.txt": dict(
        pgbench_version="17.2 (Debian 17.2-1.pgdg120+1)",
        transaction_type="multiple scripts",
        max_tries=10,
        processed=118022,
        failed=37,
        serialization_failures=30,
        deadlock_failures=7,
        retried=2210,
        retries=2689,
        skipped=11,
        above_latency_limit=95,
        latency_limit_s=50.0e-3,
        latency_avg_s=8.107e-3,
        lag_max_s=31.007e-3,
        tps=983.412207,
        aborted=True,
    ),
}


@pytest.mark.parametrize(("name", "expected"), REPORTS.items(), ids=list(REPORTS))
def test_report(name, expected):
    report = pgbench.parse_report((PG / name).read_text(), name)
    for key, value in expected.items():
        got = getattr(report, key)
        if isinstance(value, float):
            assert got == pytest.approx(value, rel=1e-9), key
        else:
            assert got == value, key


def test_report_with_stderr_merged_in():
    """2>&1: progress lines, warnings and the abort line around and inside the report."""
    text = (PG / "pgbench_fail_aborted_clients.stderr").read_text()
    text += (PG / "pgbench_fail_aborted_clients.stdout").read_text()
    text += "pgbench: error: Run was aborted; the above results are incomplete.\n"
    report = pgbench.parse_report(text, "merged")
    assert report.tps == pytest.approx(3796.085764)
    assert report.aborted
    assert report.errors[0].startswith("client 0 aborted in command 5")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("pgbench_fail_wrong_port.stdout", "empty pgbench output"),
        ("pgbench_fail_no_db.stdout", "empty pgbench output"),
        ("pgbench_fail_no_tables.stdout", ":1: not a pgbench report (only pgbench's version line"),
        ("pgbench_fail_too_many_clients.stdout", ":1: not a pgbench report"),
        ("pgbench_init_s2.stdout", ":12: not a pgbench report (no report"),
        ("handwritten/truncated_report.txt", ":10: pgbench report ends without its 'tps =' line"),
        ("handwritten/unknown_line_report.txt", ":5: unrecognised pgbench report line"),
    ],
)
def test_not_a_report_names_file_and_line(name, message):
    with pytest.raises(ParseError) as err:
        pgbench.parse_report((PG / name).read_text(), name)
    assert str(err.value).startswith(name)
    assert message in str(err.value)


def test_error_output_merged_is_named_in_the_parse_error():
    text = (PG / "pgbench_fail_no_tables.stdout").read_text()
    text += (PG / "pgbench_fail_no_tables.stderr").read_text()
    with pytest.raises(ParseError, match="could not count number of branches"):
        pgbench.parse_report(text, "x")


def test_garbled_number_is_an_error_not_zero():
    text = (PG / "pgbench_run1_log.stdout").read_text().replace("tps = 3929.690542", "tps = ???")
    with pytest.raises(ParseError, match=r"x:14: unrecognised pgbench report line 'tps = \?\?\?"):
        pgbench.parse_report(text, "x")


STDERR = {
    "pgbench_fail_aborted_clients.stderr": (
        True,
        "client 0 aborted in command 5 (SQL) of script 0; perhaps the backend died while processing",
    ),
    "pgbench_fail_bad_option.stderr": (False, "unrecognized option '--bogus'"),
    "pgbench_fail_init_wrong_port.stderr": (
        False,
        'connection to server at "127.0.0.1", port 54399 failed: Connection refused',
    ),
    "pgbench_fail_no_db.stderr": (
        False,
        'connection to server at "127.0.0.1", port 54329 failed: FATAL:  database "nosuchdb" does not exist',
    ),
    "pgbench_fail_no_tables.stderr": (
        False,
        'could not count number of branches: ERROR:  relation "pgbench_branches" does not exist',
    ),
    "pgbench_fail_too_many_clients.stderr": (
        False,
        'connection to server at "127.0.0.1", port 54329 failed: FATAL:  sorry, too many clients already',
    ),
    "pgbench_fail_wrong_port.stderr": (
        False,
        'connection to server at "127.0.0.1", port 54399 failed: Connection refused',
    ),
    "pgbench_fail_wrong_port_socket.stderr": (
        False,
        'connection to server on socket "/srv/bench/run/.s.PGSQL.54399" failed: No such file or directory',
    ),
    "pgbench_run1_log.stderr": (False, None),
    "pgbench_run4_failures_log.stderr": (False, None),
    "pgbench_init_s1_streams.stderr": (False, None),
}


@pytest.mark.parametrize(("name", "expected"), STDERR.items(), ids=list(STDERR))
def test_stderr(name, expected):
    aborted, reason = expected
    err = pgbench.parse_stderr((PG / name).read_text(), name)
    assert err.aborted is aborted
    assert err.reason == reason


def test_stderr_warning():
    err = pgbench.parse_stderr((PG / "pgbench_run1_log.stderr").read_text())
    assert err.warnings == ("scale option ignored, using count from pgbench_branches table (2)",)


RC = {
    "pgbench_run1_log.rc": 0,
    "pgbench_fail_aborted_clients.rc": 2,
    "pgbench_fail_wrong_port.rc": 1,
    "pgbench_fail_bad_option.rc": 1,
}


@pytest.mark.parametrize(("name", "rc"), RC.items(), ids=list(RC))
def test_rc(name, rc):
    assert pgbench.parse_rc((PG / name).read_text(), name) == rc


@pytest.mark.parametrize("text", ["99999999999999999999999", "256", "rc=-300"])
def test_an_exit_code_out_of_range_is_not_one(text):
    with pytest.raises(ParseError, match=r"rc\.txt:1: not an exit code"):
        pgbench.parse_rc(text, "rc.txt")


def test_a_signal_as_ansible_gives_it_is_an_exit_code():
    assert pgbench.parse_rc("rc=-9\n", "rc.txt") == -9


@pytest.mark.parametrize(
    ("line", "forged"),
    [
        ("number of transactions actually processed: ", "99999999999999999999999"),
        ("scaling factor: ", "9223372036854775808"),
    ],
)
def test_a_count_beyond_64_bits_is_refused_with_its_line(line, forged):
    """A damaged or forged report: its count could not be stored (sqlite3 raised
    OverflowError in the store, a traceback), so the parser refuses it by its line."""
    text = (PG / "pgbench_run1_log.stdout").read_text()
    at = text.index(line) + len(line)
    end = text.index("\n", at)
    lineno = text[:at].count("\n") + 1
    digits = re.match(r"\d+", text[at:end])[0]
    forged_text = text[:at] + forged + text[at + len(digits) :]
    with pytest.raises(ParseError, match=rf"^stdout:{lineno}: a count out of range in "):
        pgbench.parse_report(forged_text, "stdout")
    edge = text[:at] + "9223372036854775807" + text[at + len(digits) :]
    assert pgbench.parse_report(edge, "stdout")


def test_all_rc_fixtures_parse():
    for p in PG.glob("*.rc"):
        assert pgbench.parse_rc(p.read_text(), p.name) in (0, 1, 2)


# name -> (points, first point fields, last t)
PROGRESS = {
    "pgbench_run1_log.stderr": (
        5,
        dict(
            t=1.0,
            tps=3756.8,
            latency_avg_s=1.050e-3,
            latency_stddev_s=0.456e-3,
            failed=0,
            lag_s=None,
        ),
        5.0,
    ),
    "pgbench_run2_agg.stderr": (5, dict(tps=4114.7, latency_stddev_s=0.662e-3), 5.0),
    "pgbench_run3_rate_log.stderr": (
        5,
        dict(tps=1953.8, lag_s=0.239e-3, skipped=22, retried=0, retries=0),
        5.0,
    ),
    "pgbench_run5_agg_all.stderr": (
        4,
        dict(tps=983.0, failed=1923, lag_s=1.490e-3, skipped=25, retried=1878, retries=3035),
        4.0,
    ),
    "pgbench_run9_progress_timestamp.stderr": (
        2,
        dict(t=1795234735.260, tps=32039.4, epoch=True),
        1795234736.260,
    ),
    "pgbench_fail_aborted_clients.stderr": (6, dict(tps=4048.6), 6.0),
    "pgbench_run4_failures_log.stderr": (0, {}, None),
    "pgbench_run6_t_mode.stderr": (0, {}, None),
}


@pytest.mark.parametrize(("name", "expected"), PROGRESS.items(), ids=list(PROGRESS))
def test_progress(name, expected):
    n, first, last_t = expected
    points = pgbench.parse_progress((PG / name).read_text(), name)
    assert len(points) == n
    for key, value in first.items():
        got = getattr(points[0], key)
        assert got == (pytest.approx(value) if isinstance(value, float) else value), key
    if n:
        assert points[-1].t == pytest.approx(last_t)


@pytest.mark.parametrize(
    "line",
    [
        "progress: 5.0 s, 99.8 tps, lat 3.210 ms stddev 1.020",  # <= 14: ends after stddev
        "progress: 5.0 s, 99.8 tps, lat 3.210 ms stddev NaN",
        "progress: 5.0 s, 99.8 tps, lat 3.210 ms stddev 1.020, lag 0.120 ms, 3 skipped",
    ],
)
def test_progress_older_formats(line):
    (point,) = pgbench.parse_progress(line)
    assert point.tps == 99.8 and point.latency_avg_s == pytest.approx(3.21e-3)


@pytest.mark.parametrize(
    "line",
    [
        "progress: 5.0 s, 99.8 tps, lat 3.210 ms stddev 1.020, 2 unicorns",
        "progress: 5.0 s, 99.8 tps",
        "progress: 5.0 s, 99.8 tp",
    ],
)
def test_progress_bad_line_names_it(line):
    with pytest.raises(ParseError, match=r"^err.txt:2: "):
        pgbench.parse_progress("starting vacuum...end.\n" + line + "\n", "err.txt")


AGG = {
    "run2_agg_full_logs/pgbench_log.12188": (
        5,
        dict(
            start=1795234444.0,
            transactions=833,
            latency_sum_s=0.772531,
            latency_sum2_s2=839214979e-12,
            latency_min_s=342e-6,
            latency_max_s=3199e-6,
            skipped=0,
            serialization_failures=0,
        ),
    ),
    "run2_agg_full_logs/pgbench_log.12188.1": (5, dict(transactions=869, latency_max_s=3005e-6)),
    "run2_agg__pgbench_log.12188.head20.txt": (5, dict(transactions=833)),
    "run2_agg__pgbench_log.12188.1.head20.txt": (5, dict(transactions=869)),
    "run5_agg_all_full_logs/run5.13053": (
        4,
        dict(
            transactions=160,
            lag_sum_s=0.326665,
            lag_sum2_s2=951172727e-12,
            lag_min_s=24e-6,
            lag_max_s=4819e-6,
            skipped=8,
            retried=556,
            retries=870,
            serialization_failures=629,
            deadlock_failures=0,
        ),
    ),
    "run5_agg_all_full_logs/run5.13053.1": (4, dict(transactions=373, retries=811)),
    "run5_agg_all__run5.13053.head20.txt": (4, dict(transactions=160)),
    "run5_agg_all__run5.13053.1.head20.txt": (4, dict(transactions=373)),
}


@pytest.mark.parametrize(("name", "expected"), AGG.items(), ids=list(AGG))
def test_agglog(name, expected):
    n, first = expected
    rows = pgbench.parse_agglog((PG / name).read_text(), name)
    assert len(rows) == n
    for key, value in first.items():
        got = getattr(rows[0], key)
        assert got == (pytest.approx(value) if isinstance(value, float) else value), key
    assert [r.start for r in rows] == [rows[0].start + i for i in range(n)]


@pytest.mark.parametrize(
    ("line", "fields"),
    [
        (
            "1345828501 5601 1542744 483552416 61 2573",
            dict(transactions=5601, lag_sum_s=None, skipped=None),
        ),
        (
            "1345828503 7884 1979812 565806736 60 1479 120 3000 0 99",
            dict(lag_sum_s=120e-6, lag_max_s=99e-6, skipped=None),
        ),
        (
            "1345828505 7208 1979422 567277552 59 1391 120 3000 0 99 4",
            dict(skipped=4, retried=None),
        ),
    ],
    ids=["<=14 plain", "<=14 --rate", "<=14 --rate -L"],
)
def test_agglog_older_layouts(line, fields):
    (row,) = pgbench.parse_agglog(line)
    for key, value in fields.items():
        assert getattr(row, key) == (pytest.approx(value) if isinstance(value, float) else value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1795234444 833 772531 839214979 342\n", "agg:1: 5 columns"),
        (
            "1795234444 833 772531 839214979 342 3199\n1795234445 1 2 3 4 5 0 0 0 0\n",
            "agg:2: 10 columns after lines of 6",
        ),
        ("1795234444 833 772531 839214979 342 x\n", "agg:1: not all numbers"),
        (
            "1795234444 833 99999999999999999999999 839214979 342 3199\n",
            "agg:1: a count out of range",
        ),
    ],
)
def test_agglog_errors(text, message):
    with pytest.raises(ParseError, match=message):
        pgbench.parse_agglog(text, "agg")


def test_agglogs_of_two_threads_merge():
    merged = pgbench.read_agglogs(sorted((PG / "run2_agg_full_logs").iterdir()))
    assert [m.transactions for m in merged] == [
        833 + 869,
        1540 + 1566,
        2059 + 2087,
        2015 + 2054,
        2133 + 2153,
    ]
    assert merged[1].latency_max_s == pytest.approx(26813e-6)
    assert merged[0].latency_min_s == pytest.approx(320e-6)
    # FACTS 1.5: the last, partial interval is never written: 17,309 of 19,910
    assert sum(m.transactions for m in merged) == 17309


# name(s) -> rows, successful, failed, skipped, failures, connections, retries
TXLOGS = {
    "run1_log": (
        ["run1_log__pgbench_log.9435.head20.txt", "run1_log__pgbench_log.9435.1.head20.txt"],
        40,
        40,
        0,
        0,
        {},
        4,
        None,
    ),
    "run3_rate_log": (
        ["run3_rate_log__run3.12542.head20.txt", "run3_rate_log__run3.12542.1.head20.txt"],
        40,
        38,
        0,
        2,
        {},
        4,
        0,
    ),
    "run3_skipped": (["run3_rate_log__skipped_rows_excerpt.txt"], 10, 0, 0, 10, {}, 2, 0),
    "run4_failures": (
        ["run4_failures__run4.12873.head20.txt", "run4_failures__run4.12873.1.head20.txt"],
        40,
        7,
        33,
        0,
        {"serialization": 33},
        8,
        None,
    ),
    "run8_sampling": (
        ["run8_sampling_full_logs/samp.14175", "run8_sampling_full_logs/samp.14175.1"],
        116,
        116,
        0,
        0,
        {},
        4,
        None,
    ),
    "run8_sampling_heads": (
        ["run8_sampling__samp.14175.head20.txt", "run8_sampling__samp.14175.1.head20.txt"],
        40,
        40,
        0,
        0,
        {},
        4,
        None,
    ),
}


def _exact_rows(paths):
    rows = []
    for p in paths:
        for line in (PG / p).read_text().splitlines():
            rows.append(line.split())
    return rows


@pytest.mark.parametrize(("case", "expected"), TXLOGS.items(), ids=list(TXLOGS))
def test_txlog(case, expected):
    names, rows, ok, failed, skipped, failures, connections, retries = expected
    log = pgbench.summarize_txlog([PG / n for n in names])
    assert (log.rows, log.successful, log.failed, log.skipped) == (rows, ok, failed, skipped)
    assert dict(log.failures) == failures
    assert log.connections == connections
    assert log.retries == retries
    # against a plain line-by-line reading of the same files
    raw = _exact_rows(names)
    lat = np.array([int(r[2]) for r in raw if r[2].isdigit()], dtype=float) * 1e-6
    ends = [int(r[4]) + int(r[5]) * 1e-6 for r in raw]
    assert log.last_end == pytest.approx(max(ends))
    assert sum(s[1] for s in log.per_second) == ok
    if ok:
        assert log.latency_avg_s == pytest.approx(lat.mean())
        assert log.latency_max_s == pytest.approx(lat.max())
        assert log.latency_stddev_s == pytest.approx(lat.std(ddof=1))
        assert log.histogram.total == ok
        for q in (0.5, 0.95, 0.99):
            exact = np.sort(lat)[math.ceil(q * lat.size) - 1]
            assert percentile(log.histogram, q) == pytest.approx(exact, rel=1e-3)


def test_txlog_first_run1_figures():
    log = pgbench.summarize_txlog(PG / "run1_log__pgbench_log.9435.head20.txt")
    # first row "1 1 1285 0 1795234360 636219": started 1285 µs before it ended
    assert log.first_start == pytest.approx(1795234360.636219 - 1285e-6)
    assert log.latency_min_s == pytest.approx(405e-6)
    assert log.per_second == ((1795234360, 20, 0, pytest.approx(log.latency_sum_s)),)


def test_txlog_lag_column():
    log = pgbench.summarize_txlog(PG / "run3_rate_log__run3.12542.head20.txt")
    lags = [int(r[6]) for r in _exact_rows(["run3_rate_log__run3.12542.head20.txt"])]
    assert log.lag_sum_s == pytest.approx(sum(lags) * 1e-6)


def test_txlog_chunking_does_not_change_the_answer(tmp_path):
    """Many small chunks (boundaries mid-file) give exactly what one big read gives."""
    names = ["run8_sampling_full_logs/samp.14175", "run8_sampling_full_logs/samp.14175.1"]
    whole = pgbench.summarize_txlog([PG / n for n in names])
    small = pgbench.summarize_txlog([PG / n for n in names], chunk_bytes=97)
    assert small == whole


@pytest.mark.parametrize(
    ("content", "line", "message"),
    [
        (
            "1 1 1285 0 1795234360 636219\n1 2 405 0 1795234360\n",
            2,
            "5 columns where this log has 6",
        ),
        (
            "1 1 1285 0 1795234360 636219\n1 2 sideways 0 1795234360 636631\n",
            2,
            "'sideways' is neither",
        ),
        ("1 1 1285 0 1795234360 636219\n1 2 405 0 1795234360 6366310\n", 2, "time_us out of range"),
        ("1 1 1285 0 1795234360 636219\n\n1 2 405 0 1795234360 636631\n", 2, "blank line"),
        ("1 1 1285 0 1795234360 636219\n1 2 405 0 1795234360 6366", 2, None),
        (
            "1 1 1285 0 1795234360 636219 7 0 9\n",
            1,
            "9 columns; a per-transaction log row has 6, 7 or 8",
        ),
        (
            "1 1 1285 0 1795234360 63\n1 2 405 0 1795234360 636631 12\n",
            2,
            "7 columns where this log has 6",
        ),
    ],
    ids=[
        "truncated row",
        "unknown word",
        "bad µs",
        "blank",
        "cut last line is fine",
        "too wide",
        "width change",
    ],
)
def test_txlog_bad_input_names_file_and_line(tmp_path, content, line, message):
    path = tmp_path / "pgbench_log.1234"
    path.write_text(content)
    if message is None:  # a last line without its newline, but whole, is read
        assert pgbench.summarize_txlog(path).rows == 2
        return
    with pytest.raises(ParseError) as err:
        pgbench.summarize_txlog(path, chunk_bytes=16)
    assert str(err.value).startswith(f"{path}:{line}: ")
    assert message in str(err.value)


def test_txlog_empty_and_missing(tmp_path):
    empty = tmp_path / "pgbench_log.1"
    empty.write_text("")
    with pytest.raises(ParseError, match="empty per-transaction log"):
        pgbench.summarize_txlog(empty)
    with pytest.raises(ParseError, match="cannot read"):
        pgbench.summarize_txlog(tmp_path / "nope")


def test_linecounts_fixture_matches_rows_per_file():
    """FACTS 1.4: row count = processed + failed + skipped (full logs were deleted; the
    capture kept their line counts)."""
    counts = {}
    for line in (PG / "logfile_linecounts.txt").read_text().splitlines():
        name, n = line.split(" lines=")
        counts[name] = int(n)
    assert counts["run1_log/pgbench_log.9435"] + counts["run1_log/pgbench_log.9435.1"] == 19659
    assert counts["run3_rate_log/run3.12542"] + counts["run3_rate_log/run3.12542.1"] == 9716 + 114
    assert counts["run4_failures/run4.12873"] + counts["run4_failures/run4.12873.1"] == 3128 + 15366


INIT = {
    "pgbench_init_s1.txt": (0.30, 100000, {"client-side generate": 0.14, "primary keys": 0.09}),
    "pgbench_init_s10.txt": (1.18, 1000000, {"client-side generate": 0.86}),
    "pgbench_init_s100_quiet.txt": (13.22, 10000000, {"primary keys": 2.62}),
    "pgbench_init_s2.stdout": (0.17, 200000, {"vacuum": 0.03}),
    "pgbench_init_s1_streams.stderr": (0.12, 100000, {"drop tables": 0.0}),
}


@pytest.mark.parametrize(("name", "expected"), INIT.items(), ids=list(INIT))
def test_init(name, expected):
    total, tuples, steps = expected
    init = pgbench.parse_init((PG / name).read_text(), name)
    assert init.total_s == pytest.approx(total)
    assert init.tuples == tuples
    for k, v in steps.items():
        assert init.steps[k] == pytest.approx(v)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("pgbench_init_s1_streams.stdout", "no 'done in' line (truncated?)"),
        ("pgbench_fail_init_wrong_port.stderr", "no 'done in' line: connection to server"),
    ],
)
def test_init_failures(name, message):
    with pytest.raises(ParseError, match=re.escape(message)):
        pgbench.parse_init((PG / name).read_text(), name)
