"""Statistics with known answers, and hypothesis properties."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.parse import pgbench
from collector.records import CellSpec, ClientResult, LatencyHistogram, RunStatus, SeriesPoint
from collector.stats import tps as stats

PG = Path(__file__).resolve().parents[1] / "data" / "pgbench"


def test_textbook_t_interval():
    """n=5, mean 14, s = sqrt(10); t(0.975, 4) = 2.776 (any t table):
    14 +- 2.776 * 3.1623 / sqrt(5) = 14 +- 3.926."""
    s = stats.summarize([10, 12, 14, 16, 18])
    assert s.n == 5 and s.mean == 14
    assert s.stddev == pytest.approx(math.sqrt(10))
    assert s.half_width == pytest.approx(3.926, abs=1e-3)
    assert (s.ci_low, s.ci_high) == (
        pytest.approx(10.074, abs=1e-3),
        pytest.approx(17.926, abs=1e-3),
    )
    assert s.cv == pytest.approx(math.sqrt(10) / 14)


def test_textbook_t_interval_large_sample():
    """n=10: t(0.975, 9) = 2.262."""
    xs = [106, 98, 110, 102, 104, 96, 108, 100, 94, 112]
    s = stats.summarize(xs)
    sd = s.stddev
    assert s.half_width == pytest.approx(2.262 * sd / math.sqrt(10), rel=1e-3)


def test_one_value_has_no_interval_and_none_is_none():
    s = stats.summarize([1472.0])
    assert (s.mean, s.stddev, s.ci_low, s.cv) == (1472.0, None, None, None)
    assert stats.summarize([]) is None


def _flat(client: str, rates: list[tuple[float, float, float]]) -> list[SeriesPoint]:
    """1-s points from (start, end, tps) segments."""
    out = []
    for start, end, tps in rates:
        t = start
        while t < end:
            out.append(SeriesPoint(client, t, 1.0, tps))
            t += 1
    return out


def test_window_three_clients_one_started_two_seconds_late():
    """A and B run 100..110 s, C runs 102..112 s: the window is exactly 102..110.
    While C had not started, A and B ran faster; after they stopped, C did: those
    seconds are trimmed, so the aggregate is 100 + 200 + 50."""
    series = (
        _flat("A", [(100, 102, 150), (102, 110, 100)])
        + _flat("B", [(100, 102, 250), (102, 110, 200)])
        + _flat("C", [(102, 110, 50), (110, 112, 120)])
    )
    clients = [
        ClientResult("A", tps=110.0, start=100.0, end=110.0, processed=1100),
        ClientResult("B", tps=210.0, start=100.0, end=110.0, processed=2100),
        ClientResult("C", tps=64.0, start=102.0, end=112.0, processed=640),
    ]
    run = stats.run_stats(clients, series)
    assert run.window == (102.0, 110.0)
    assert run.tps_windowed == pytest.approx(350.0)
    assert run.per_client_tps == {
        "A": pytest.approx(100),
        "B": pytest.approx(200),
        "C": pytest.approx(50),
    }
    assert run.tps_reported_sum == pytest.approx(384.0)  # what pgbench said, beside it
    assert run.tps == run.tps_windowed and run.windowed
    assert run.start_skew_s == 2.0
    assert run.status == RunStatus.COMPLETE


def test_window_partial_interval_counts_its_share():
    pts = [SeriesPoint("A", 0.0, 2.0, 200.0)]  # 100 tps over 0..2
    assert stats.transactions_in(pts, 1.5, 2.0) == pytest.approx(50.0)


def test_a_lone_client_windowed_tps_counts_every_logged_transaction():
    """One client: the window is its own first-to-last transaction, so windowed tps is
    every logged transaction over that span. pgbench's per-second buckets start on whole
    seconds, not at the client's first transaction: spreading an edge bucket over the
    whole second lost part of it (bench/fidelity.py saw 0-6 % low on 15 s runs)."""
    log = pgbench.summarize_txlog(sorted((PG / "run8_sampling_full_logs").iterdir()))
    pts = stats.series_from_txlog("c", log)
    assert pts[0].start < log.first_start  # the edge bucket begins before the client
    client = ClientResult("c", tps=1.0, start=log.first_start, end=log.last_end)
    run = stats.run_stats([client], pts)
    total = sum(p.transactions for p in pts)
    assert run.tps_windowed == pytest.approx(total / (log.last_end - log.first_start), rel=1e-9)


def test_no_series_falls_back_to_the_reported_sum():
    clients = [ClientResult("A", tps=100.0), ClientResult("B", tps=50.0)]
    run = stats.run_stats(clients)
    assert run.tps == 150.0 and not run.windowed and run.window is None and run.start_skew_s is None


def test_clients_that_never_overlapped_have_no_window():
    assert stats.concurrent_window({"A": (0.0, 10.0), "B": (10.0, 20.0)}) is None


spans = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=1e6, allow_nan=False),
        st.floats(min_value=0.001, max_value=1e4, allow_nan=False),
    ),
    min_size=1,
    max_size=20,
)


@given(spans)
def test_window_never_exceeds_any_client_span(raw):
    spans_by = {f"c{i}": (s, s + length) for i, (s, length) in enumerate(raw)}
    window = stats.concurrent_window(spans_by)
    if window is None:
        assert max(s for s, _ in spans_by.values()) >= min(e for _, e in spans_by.values())
        return
    for start, end in spans_by.values():
        assert start <= window[0] < window[1] <= end


@given(spans, st.floats(min_value=0.1, max_value=1e5))
@settings(max_examples=50)
def test_windowed_tps_of_steady_clients_is_their_sum(raw, tps):
    """Each client runs at a steady rate over its own span: whatever the skew, the
    windowed aggregate is exactly the sum of the rates."""
    clients, series = [], []
    for i, (s, length) in enumerate(raw):
        name = f"c{i}"
        clients.append(ClientResult(name, tps=tps, start=s, end=s + length))
        series.append(SeriesPoint(name, s, length, tps * length))
    run = stats.run_stats(clients, series)
    if run.window is None:
        assert run.tps == pytest.approx(tps * len(raw))
        return
    assert run.tps_windowed == pytest.approx(tps * len(raw), rel=1e-6)


values = st.lists(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False),
    min_size=2,
    max_size=50,
)


@given(values)
def test_mean_lies_within_its_confidence_interval(xs):
    s = stats.summarize(xs)
    tol = 1e-9 * max(1.0, abs(s.mean))
    assert s.ci_low - tol <= s.mean <= s.ci_high + tol
    assert s.ci_high - s.ci_low >= -tol


positive = st.lists(st.floats(min_value=1, max_value=1e5), min_size=2, max_size=20)


@given(positive, positive)
def test_ratio_lies_within_its_interval(a, b):
    r = stats.ratio(a, b)
    assert r.ratio == pytest.approx(stats.summarize(a).mean / stats.summarize(b).mean)
    if r.ci_low is not None:
        assert r.ci_low <= r.ratio * (1 + 1e-9) and r.ratio <= r.ci_high * (1 + 1e-9)
        assert r.ci_low > 0


def test_ratio_of_the_seeds_table():
    """7200RPM 106 vs SSD100 1472: 13.9x, as the seeds wrote it; with spread, an interval."""
    r = stats.ratio([1472], [106])
    assert r.ratio == pytest.approx(13.887, abs=1e-3) and r.ci_low is None
    r = stats.ratio([1460, 1472, 1484], [104, 106, 108])
    assert r.ci_low < r.ratio < r.ci_high
    assert r.ci_low > 12 and r.ci_high < 16


def test_welch_known_answer():
    """Welch's t for (20.8, 21.5, 22.0, 21.2) vs (19.1, 19.9, 18.7, 19.5, 20.0):
    checked against scipy and the formula; clearly significant."""
    a = [19.1, 19.9, 18.7, 19.5, 20.0]
    b = [20.8, 21.5, 22.0, 21.2]
    w = stats.welch(a, b)
    ma, mb = sum(a) / 5, sum(b) / 4
    va = sum((x - ma) ** 2 for x in a) / 4 / 5
    vb = sum((x - mb) ** 2 for x in b) / 3 / 4
    assert w.t == pytest.approx((mb - ma) / math.sqrt(va + vb))
    assert w.df == pytest.approx((va + vb) ** 2 / (va**2 / 4 + vb**2 / 3))
    assert w.diff_pct == pytest.approx((mb - ma) / ma * 100)
    assert w.p_value < 0.01 and w.significant is True


def test_welch_not_significant_and_not_enough_runs():
    w = stats.welch([100, 110, 90], [101, 95, 108])
    assert w.significant is False and w.p_value > 0.5
    w = stats.welch([100], [200, 210])
    assert w.significant is None and w.p_value is None and w.diff_pct == pytest.approx(105.0)


def test_percentile_nearest_rank():
    h = LatencyHistogram((1e-3, 2e-3, 3e-3), (1e-3 + 1e-6, 2e-3 + 1e-6, 3e-3 + 1e-6), (50, 45, 5))
    assert stats.percentile(h, 0.50) == pytest.approx(1e-3)
    assert stats.percentile(h, 0.95) == pytest.approx(2e-3)
    assert stats.percentile(h, 0.96) == pytest.approx(3e-3)
    assert stats.percentile(None, 0.5) is None


def test_client_result_from_real_outputs():
    report = pgbench.parse_report((PG / "pgbench_run1_log.stdout").read_text())
    txlog = pgbench.summarize_txlog(
        [
            PG / "run1_log__pgbench_log.9435.head20.txt",
            PG / "run1_log__pgbench_log.9435.1.head20.txt",
        ]
    )
    c = stats.client_result("client1", report, txlog=txlog, exit_code=0)
    assert c.status == RunStatus.COMPLETE and c.reason is None
    assert c.tps == pytest.approx(3929.690542)
    assert c.latency_avg_s == pytest.approx(1.009e-3)  # pgbench's own figure wins
    assert c.latency_p95_s is not None and c.latency_p50_s <= c.latency_p95_s <= c.latency_p99_s
    assert c.latency_max_s == pytest.approx(txlog.latency_max_s)
    assert (c.start, c.end) == (txlog.first_start, txlog.last_end)


def test_client_result_aborted_is_partial_failed_is_failed():
    out = (PG / "pgbench_fail_aborted_clients.stdout").read_text()
    err = pgbench.parse_stderr((PG / "pgbench_fail_aborted_clients.stderr").read_text())
    c = stats.client_result("c", pgbench.parse_report(out), stderr=err, exit_code=2)
    assert c.status == RunStatus.PARTIAL and c.reason.startswith("client 0 aborted")
    err = pgbench.parse_stderr((PG / "pgbench_fail_too_many_clients.stderr").read_text())
    c = stats.client_result("c", None, stderr=err, exit_code=1)
    assert c.status == RunStatus.FAILED and "too many clients" in c.reason
    assert c.tps is None  # not zero


def test_run_status():
    ok = ClientResult("a")
    part = ClientResult("b", status=RunStatus.PARTIAL, reason="aborted")
    bad = ClientResult("c", status=RunStatus.FAILED, reason="refused")
    assert stats.run_status([ok, ok]) == (RunStatus.COMPLETE, None)
    assert stats.run_status([ok, part]) == (RunStatus.PARTIAL, "b: aborted")
    assert stats.run_status([ok, bad])[0] == RunStatus.PARTIAL
    assert stats.run_status([bad, bad])[0] == RunStatus.FAILED
    assert stats.run_status([])[0] == RunStatus.FAILED


def test_cell_never_averages_a_partial_run_in():
    def run(tps, status=RunStatus.COMPLETE):
        return stats.run_stats(
            [ClientResult("a", tps=tps, status=status)],
            status=status,
            reason=None if status == RunStatus.COMPLETE else "aborted",
        )

    cell = stats.cell_stats(
        CellSpec("ssd", clients=1),
        [run(100.0), run(110.0), run(5.0, RunStatus.PARTIAL), run(0.0, RunStatus.FAILED)],
    )
    assert (cell.complete, cell.partial, cell.failed) == (2, 1, 1)
    assert cell.tps.n == 2 and cell.tps.mean == 105.0
    assert cell.tps_values == [100.0, 110.0]


def test_series_builders():
    agg = pgbench.read_agglogs(sorted((PG / "run2_agg_full_logs").iterdir()))
    pts = stats.series_from_agglog("c", agg)
    assert [p.duration_s for p in pts] == [1.0] * 5
    assert pts[0].transactions == 833 + 869
    prog = pgbench.parse_progress((PG / "pgbench_run1_log.stderr").read_text())
    pts = stats.series_from_progress("c", prog, start_epoch=1000.0)
    assert [p.start for p in pts] == [1000.0, 1001.0, 1002.0, 1003.0, 1004.0]
    assert pts[0].transactions == pytest.approx(3756.8)
    prog = pgbench.parse_progress((PG / "pgbench_run9_progress_timestamp.stderr").read_text())
    pts = stats.series_from_progress("c", prog)
    assert pts[0].start == pytest.approx(1795234734.260) and pts[1].start == pytest.approx(
        1795234735.260
    )
    log = pgbench.summarize_txlog(sorted((PG / "run8_sampling_full_logs").iterdir()))
    pts = stats.series_from_txlog("c", log, sampling_rate=0.01)
    assert sum(p.transactions for p in pts) == pytest.approx(11600)
    assert pts[0].source == "txlog sampled 0.01"


def test_run_status_failed_when_no_client_completed():
    """Every client cut off mid-run (the server died) is a failed run, not a partial one;
    one client lost while the other completed is partial."""
    cut = [
        ClientResult("client1", RunStatus.PARTIAL, "client 0 aborted: FATAL:  terminating"),
        ClientResult("client2", RunStatus.PARTIAL, "client 1 aborted: FATAL:  terminating"),
    ]
    assert stats.run_status(cut) == (
        RunStatus.FAILED,
        "client1: client 0 aborted: FATAL:  terminating",
    )
    one = [ClientResult("client1"), ClientResult("client2", RunStatus.FAILED, "killed")]
    assert stats.run_status(one) == (RunStatus.PARTIAL, "client2: killed")
