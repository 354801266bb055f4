"""Per-second latency percentiles, skipped and late counts, schedule lag and the lag
reading (collector.parse.txlog) on real ``pgbench -R -l`` logs captured on the lab
(tests/data/txlog-rate/README.md says how each was made).

Every figure is checked against an independent reading of the same rows: a plain
line-by-line parse, numpy's nearest-rank percentile (``method="inverted_cdf"``), and
the totals pgbench itself printed."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from collector.parse import lag, latencyhist, latencyseries, pgbench
from collector.stats.clientstats import percentile

DATA = Path(__file__).resolve().parent.parent / "data" / "txlog-rate"
CLIENTS = ("client1", "client2")

#: run folder -> (latency limit in seconds or None, the rate was sustained)
RUNS = {
    "nvme-tablespace-r400": (None, True),
    "nvme-tablespace-r400-L2": (0.002, False),
    "hdd7200-tablespace-r100": (None, True),
    "hdd7200-cluster-r10": (None, True),
    "hdd7200-cluster-r10-L200": (0.200, True),
    "hdd7200-cluster-r100": (None, False),
    "hdd7200-cluster-r100-L50": (0.050, False),
}
QS = (0.50, 0.95, 0.99)


def _files(run: str, client: str) -> list[Path]:
    files = sorted((DATA / run).glob(f"{client}.[0-9]*"))
    assert files, f"no log of {client} in {run}"
    return files


class Raw:
    """The rows of some log files read line by line, grouped by completion second."""

    def __init__(self, files: list[Path]) -> None:
        self.lat: dict[int, list[int]] = defaultdict(list)
        self.lag: dict[int, list[int]] = defaultdict(list)
        self.skipped: dict[int, int] = defaultdict(int)
        self.width = set()
        for f in files:
            for line in f.read_text().splitlines():
                parts = line.split()
                self.width.add(len(parts))
                sec = int(parts[4])
                if parts[2] == "skipped":
                    self.skipped[sec] += 1
                elif parts[2].isdigit():
                    self.lat[sec].append(int(parts[2]))
                    if len(parts) >= 7:
                        self.lag[sec].append(int(parts[6]))

    def all_latencies(self, lo: int, hi: int) -> np.ndarray:
        return np.array([v for s in range(lo, hi + 1) for v in self.lat.get(s, [])])


def _within_resolution(got: float, exact_us: float) -> bool:
    """The coarse histogram's promise: within 1/64 of the exact value (half a bucket
    of width <= 1/32 of its lower edge), exact below 64 µs."""
    return abs(got * 1e6 - exact_us) <= exact_us / 64 + 1e-6


def _summary(run: str, files: list[Path]):
    limit, _ = RUNS[run]
    return pgbench.summarize_txlog(files, latency_limit_s=limit)


def _printed(run: str, client: str):
    return pgbench.parse_report((DATA / run / f"{client}.stdout").read_text(), client)


def _check_points(points, raw: Raw, limit: float | None) -> int:
    """Every second of ``points`` against the raw rows; returns seconds checked."""
    checked = 0
    for p in points:
        sec = int(p.start)
        lat = np.array(raw.lat.get(sec, []))
        assert p.transactions == lat.size, sec
        assert p.skipped == raw.skipped.get(sec, 0), sec
        if limit is not None:
            assert p.late == int((lat > limit * 1e6).sum()), sec
        else:
            assert p.late is None
        if not lat.size:
            assert (p.p50_s, p.p99_s, p.max_s, p.lag_avg_s) == (None, None, None, None)
            continue
        checked += 1
        assert p.max_s == pytest.approx(lat.max() * 1e-6, abs=1e-12), sec
        assert p.latency_avg_s == pytest.approx(lat.mean() * 1e-6), sec
        for q, got in zip(QS, (p.p50_s, p.p95_s, p.p99_s), strict=True):
            exact = float(np.percentile(lat, q * 100, method="inverted_cdf"))
            assert _within_resolution(got, exact), (sec, q, got, exact)
            assert got <= p.max_s
        lag = np.array(raw.lag[sec])
        assert p.lag_avg_s == pytest.approx(lag.mean() * 1e-6), sec
        assert p.lag_max_s == pytest.approx(lag.max() * 1e-6, abs=1e-12), sec
    return checked


@pytest.mark.parametrize("run", list(RUNS))
@pytest.mark.parametrize("client", CLIENTS)
def test_per_second_figures_of_one_client(run, client):
    files = _files(run, client)
    log = _summary(run, files)
    points = latencyseries.latency_points(log.latency_series, client)
    raw = Raw(files)
    assert raw.width == {7}  # --rate: the lag column
    # every second from the first row to the last, empty ones included
    seconds = [int(p.start) for p in points]
    every = set(raw.lat) | set(raw.skipped)
    assert seconds == list(range(min(every), max(every) + 1))
    assert {p.client for p in points} == {client}
    assert _check_points(points, raw, RUNS[run][0]) >= 6


@pytest.mark.parametrize("run", list(RUNS))
def test_all_clients_merge_is_the_union(run):
    """The all-clients percentile is the percentile of every client's transactions
    together (to the resolution), not a mean of the clients' percentiles: merging the
    clients' series gives exactly what parsing all their files as one log gives, and
    its points match numpy over the union of the rows."""
    limit, _ = RUNS[run]
    parts = [_summary(run, _files(run, c)).latency_series for c in CLIENTS]
    merged = latencyseries.merge_latency_series(parts)
    union_files = [f for c in CLIENTS for f in _files(run, c)]
    assert merged == _summary(run, union_files).latency_series
    points = latencyseries.latency_points(merged)
    assert {p.client for p in points} == {""}
    assert _check_points(points, Raw(union_files), limit) >= 6


@pytest.mark.parametrize("run", list(RUNS))
@pytest.mark.parametrize("client", CLIENTS)
def test_skipped_and_late_match_what_pgbench_printed(run, client):
    limit, _ = RUNS[run]
    log = _summary(run, _files(run, client))
    printed = _printed(run, client)
    series = log.latency_series
    assert log.successful == printed.processed == int(series.transactions.sum())
    assert log.skipped == (printed.skipped or 0) == int(series.skipped.sum())
    if limit is None:
        assert log.late is None and series.late is None
        assert printed.above_latency_limit is None
    else:
        assert printed.latency_limit_s == pytest.approx(limit)
        assert log.late == printed.above_latency_limit == int(series.late.sum())
    # pgbench's average lag is over the processed transactions, as ours; it prints µs
    # and logs each lag rounded to the µs: within 1 µs
    lag_avg = float(series.lag_sum_us.sum()) / log.successful * 1e-6
    assert lag_avg == pytest.approx(printed.lag_avg_s, abs=1e-6)
    assert float(series.lag_max_us.max()) * 1e-6 == pytest.approx(printed.lag_max_s, abs=1e-6)


def test_the_captures_hold_skipped_and_late_rows():
    """The data set exercises what it claims: skipped rows with -L, late ones, and a
    run whose lag grew by seconds."""
    skipped = {r: _summary(r, _files(r, "client1")).skipped for r in RUNS}
    late = {r: _summary(r, _files(r, "client1")).late for r in RUNS}
    assert skipped["nvme-tablespace-r400-L2"] > 100
    assert skipped["hdd7200-cluster-r100-L50"] > 100
    assert late["nvme-tablespace-r400-L2"] > 100
    assert late["hdd7200-cluster-r10-L200"] is not None
    printed = _printed("hdd7200-cluster-r100", "client1")
    assert printed.lag_max_s > 1.0


@pytest.mark.parametrize("run", list(RUNS))
def test_lag_reading(run):
    """The sustained runs read sustained, the overloaded ones not: on each client and
    on all of them, with a reason that names the cause."""
    _, sustained = RUNS[run]
    parts = [_summary(run, _files(run, c)).latency_series for c in CLIENTS]
    for series in (*parts, latencyseries.merge_latency_series(parts)):
        reading = lag.read_lag(latencyseries.latency_points(series))
        assert reading is not None
        assert reading.sustained is sustained, reading.reason
        assert reading.reason.startswith("rate sustained" if sustained else "rate not sustained")
        if run == "hdd7200-cluster-r100":  # no -L: the lag tells
            assert reading.lag_grows
            assert reading.slope > 0.1  # s of lag per s of run
            assert "lag grew" in reading.reason
        if run == "hdd7200-cluster-r100-L50":  # -L skips what is late: lag stays low
            assert not reading.lag_grows
            assert reading.skipped_ratio > 0.3
            assert "skipped" in reading.reason


@pytest.mark.parametrize("run", [r for r, (_, held) in RUNS.items() if held])
def test_lag_reading_holds_the_schedule_to_the_rate_asked(run):
    """The sustained runs, over their whole seconds on all clients: held against the
    rate they were asked (-R per client host x 2); against twice it, which the clients
    never scheduled, not sustained, the reason naming the shortfall."""
    per_host = int(run.split("-r")[1].split("-")[0])
    merged = latencyseries.merge_latency_series(
        _summary(run, _files(run, c)).latency_series for c in CLIENTS
    )
    points = latencyseries.latency_points(merged)[1:-1]  # the partial first and last seconds
    held = lag.read_lag(points, rate=2 * per_host)
    assert held.sustained, held.reason
    assert held.scheduled_ratio > 0.85  # 20/s over 6 s: 0.88, within Poisson's 3 sd
    short = lag.read_lag(points, rate=4 * per_host)
    assert not short.sustained
    assert short.reason.startswith("rate not sustained: the clients scheduled"), short.reason
    assert f"of the {4 * per_host:,}/s asked" in short.reason
    assert lag.read_lag(points).scheduled_ratio is None


def test_lag_reading_needs_the_lag_column():
    plain = DATA.parent / "pgbench" / "run1_log__pgbench_log.9435.head20.txt"
    log = pgbench.summarize_txlog(plain)
    points = latencyseries.latency_points(log.latency_series)
    assert all(p.lag_avg_s is None for p in points)
    assert lag.read_lag(points) is None


def test_lag_reading_ignores_a_lone_spike_at_the_end():
    """A sustained run whose last second caught a stall (a checkpoint): the
    least-squares slope alone would call it growth; the quarter medians do not."""
    run = "hdd7200-cluster-r10"
    points = list(
        latencyseries.latency_points(_summary(run, _files(run, "client1")).latency_series)
    )
    last = points[-1]
    spiked = replace(last, lag_avg_s=0.5, latency_avg_s=0.6)
    reading = lag.read_lag([*points[:-1], spiked])
    assert reading.growth_s > reading.bound_s  # the slope alone would say "grows"
    assert reading.sustained, reading.reason


@pytest.mark.parametrize("run", ["nvme-tablespace-r400", "hdd7200-cluster-r100"])
def test_window_percentiles(run):
    """A percentile over a window of seconds (the window where every client ran) on
    the merged series: against numpy over the rows of that window, and over the whole
    run against the whole-run histogram's percentile."""
    parts = [_summary(run, _files(run, c)) for c in CLIENTS]
    merged = latencyseries.merge_latency_series(p.latency_series for p in parts)
    raw = Raw([f for c in CLIENTS for f in _files(run, c)])
    lo, hi = merged.first_second + 1, merged.first_second + merged.seconds - 2
    got = latencyseries.window_percentiles(merged, lo, hi, QS)
    lat = raw.all_latencies(lo, hi)
    for q in QS:
        exact = float(np.percentile(lat, q * 100, method="inverted_cdf"))
        assert _within_resolution(got[q], exact), (q, got[q], exact)
    whole = latencyseries.window_percentiles(merged, 0, 2**40, QS)
    union = pgbench.summarize_txlog([f for c in CLIENTS for f in _files(run, c)])
    for q in QS:
        fine = percentile(union.histogram, q)  # within 1/2048
        assert abs(whole[q] - fine) <= fine / 64 + fine / 1024
    assert latencyseries.window_percentiles(merged, 0, 10) == dict.fromkeys(QS)


def test_chunk_boundaries_do_not_change_the_series():
    run = "nvme-tablespace-r400-L2"
    files = _files(run, "client2")
    whole = pgbench.summarize_txlog(files, latency_limit_s=0.002)
    small = pgbench.summarize_txlog(files, chunk_bytes=211, latency_limit_s=0.002)
    assert small.latency_series == whole.latency_series
    assert small == whole


def test_series_off_leaves_the_rest_alone():
    run = "hdd7200-cluster-r100-L50"
    files = _files(run, "client1")
    on = pgbench.summarize_txlog(files, latency_limit_s=0.05)
    off = pgbench.summarize_txlog(files, latency_limit_s=0.05, latency_series=False)
    assert off.latency_series is None and on.latency_series is not None
    assert off.late == on.late
    assert replace(on, latency_series=None) == off


def test_resolution_as_documented():
    """Each coarse bucket is at most 1/32 of its lower edge wide (1 µs below 64 µs),
    the buckets tile the µs line, and every whole-run bucket lies in one coarse bucket."""
    idx = np.arange(latencyhist.NCOARSE)
    low, width = latencyhist.coarse_edges_us(idx)
    assert (width[:64] == 1).all()
    assert (width[64:] / low[64:] <= 1 / 32).all()
    assert (low[1:] == low[:-1] + width[:-1]).all()
    fine_low, fine_width = latencyhist.bucket_edges_us(np.arange(latencyhist.NBUCKETS))
    top = fine_low + fine_width - 1
    a = latencyhist.coarse_index(fine_low.astype(np.int64))
    b = latencyhist.coarse_index(top.astype(np.int64))
    assert (a == b).all()
