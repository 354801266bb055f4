"""The records that flow from the parsers through the store to the reports.

One measurement type, :class:`Sample` (metric, value, unit, labels, timestamp), for
anything that is a single number (fio figures, pg_test_fsync figures, device
telemetry), and typed records for what has structure: a pgbench report, a progress
point, a per-transaction-log summary, a client's result, a run, a cell.

Everything is in base units from the moment it is parsed: seconds (latencies, too),
bytes, bytes per second, ratios (0..1, not percent). Display code converts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


def _frozen_labels(labels: Mapping[str, Any] | None) -> Mapping[str, str]:
    return MappingProxyType({str(k): str(v) for k, v in sorted((labels or {}).items())})


@dataclass(frozen=True)
class Sample:
    """One number: ``drivelab_<what>_<unit>`` metric name, its value in base units,
    the unit spelled out, low-cardinality labels, and (for series) an epoch timestamp."""

    metric: str
    value: float
    unit: str
    labels: Mapping[str, str] = field(default_factory=dict)
    timestamp: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", _frozen_labels(self.labels))
        object.__setattr__(self, "value", float(self.value))

    def __hash__(self) -> int:
        return hash(
            (self.metric, self.value, self.unit, tuple(self.labels.items()), self.timestamp)
        )


# --------------------------------------------------------------------------- pgbench


@dataclass(frozen=True)
class PgbenchReport:
    """pgbench's final report (stdout), any version from 8.4 to 17.

    ``None`` means "pgbench did not print this line" (older version, option not
    used), never "zero". Latencies are seconds. ``tps`` is the figure pgbench
    calls the result: "without initial connection time" (14+), "excluding
    connections establishing" (<=13), or "including reconnection times" (-C)."""

    source: str
    tps: float
    tps_kind: str
    processed: int
    clients: int
    pgbench_version: str | None = None
    server_version: str | None = None
    transaction_type: str | None = None
    scaling_factor: int | None = None
    partition_method: str | None = None
    partitions: int | None = None
    query_mode: str | None = None
    threads: int | None = None
    max_tries: int | None = None
    duration_s: float | None = None
    transactions_per_client: int | None = None
    planned_transactions: int | None = None
    failed: int | None = None
    serialization_failures: int | None = None
    deadlock_failures: int | None = None
    retried: int | None = None
    retries: int | None = None
    skipped: int | None = None
    latency_limit_s: float | None = None
    above_latency_limit: int | None = None
    latency_avg_s: float | None = None
    latency_avg_includes_failures: bool = False
    latency_stddev_s: float | None = None
    lag_avg_s: float | None = None
    lag_max_s: float | None = None
    connection_time_s: float | None = None
    connection_time_kind: str | None = None
    tps_including_connections: float | None = None
    errors: tuple[str, ...] = ()
    aborted: bool = False


@dataclass(frozen=True)
class PgbenchStderr:
    """What pgbench said on stderr besides progress: its error lines (``pgbench: error: ...``
    without the prefix), whether the run was aborted, and the warnings."""

    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    aborted: bool = False

    @property
    def reason(self) -> str | None:
        """The one-line cause to store with a failed or partial run."""
        if not self.errors:
            return None
        firsts = [e for e in self.errors if not e.startswith("Run was aborted")]
        return (firsts or list(self.errors))[0]


@dataclass(frozen=True)
class ProgressPoint:
    """One ``-P`` line. ``t`` is seconds since the start, or epoch seconds when
    ``epoch`` is true (``--progress-timestamp``). Values are for the interval."""

    t: float
    tps: float
    latency_avg_s: float
    latency_stddev_s: float | None = None
    failed: int | None = None
    lag_s: float | None = None
    skipped: int | None = None
    retried: int | None = None
    retries: int | None = None
    epoch: bool = False


@dataclass(frozen=True)
class AggInterval:
    """One line of an ``--aggregate-interval`` log. Latencies in seconds. Columns pgbench
    did not write (<=14 layouts) are ``None``."""

    start: float
    transactions: int
    latency_sum_s: float
    latency_sum2_s2: float
    latency_min_s: float
    latency_max_s: float
    lag_sum_s: float | None = None
    lag_sum2_s2: float | None = None
    lag_min_s: float | None = None
    lag_max_s: float | None = None
    skipped: int | None = None
    retried: int | None = None
    retries: int | None = None
    serialization_failures: int | None = None
    deadlock_failures: int | None = None


@dataclass(frozen=True)
class PgbenchInit:
    """``pgbench -i`` output: total seconds and the seconds of each step."""

    total_s: float
    steps: Mapping[str, float]
    tuples: int | None = None


@dataclass(frozen=True)
class SeriesPoint:
    """One interval of one client's per-second series (epoch seconds)."""

    client: str
    start: float
    duration_s: float
    transactions: float
    latency_avg_s: float | None = None
    failed: int | None = None
    source: str = "txlog"


@dataclass(frozen=True)
class LatencyHistogram:
    """Latency counts in buckets, sparse: ``lows_s[i] <= latency < highs_s[i]`` holds
    ``counts[i]`` transactions; buckets are sorted, disjoint, and only non-empty
    ones are kept."""

    lows_s: tuple[float, ...]
    highs_s: tuple[float, ...]
    counts: tuple[int, ...]

    @property
    def total(self) -> int:
        return sum(self.counts)


def _arrays_equal(a: Any, b: Any) -> bool:
    import numpy as np  # noqa: PLC0415  (records stay importable without numpy loaded)

    if a is None or b is None:
        return a is b
    return bool(np.array_equal(a, b))


@dataclass(frozen=True, eq=False)
class LatencySeries:
    """Per-second latency histograms of one pgbench's per-transaction log (all its
    thread files), or of several clients' merged: what the per-second percentiles,
    and a percentile over any window of seconds, are read from
    (:mod:`collector.parse.txlog`: :func:`~collector.parse.txlog.latency_points`,
    :func:`~collector.parse.txlog.merge_latency_series`,
    :func:`~collector.parse.txlog.window_percentiles`).

    Seconds are epoch seconds of completion (``time_epoch``). The dense arrays hold one
    entry per second from ``first_second`` to the last second with a row, empty seconds
    included (a stall is a second with no transactions). Latencies are integer µs as
    the log writes them (the histogram's bucket numbers are µs-based; the points built
    from it are in seconds). ``hist_*`` are the non-empty (second, bucket) pairs of the
    successful transactions' coarse histogram, sorted by second then bucket.

    * ``transactions``, ``latency_sum_us``, ``max_us``: successful transactions;
    * ``skipped``: rows reading ``skipped`` (``--rate`` with ``-L``);
    * ``late``: successful transactions slower than ``latency_limit_us`` (``None``
      when no limit was given to the parser);
    * ``lag_sum_us``, ``lag_max_us``: schedule lag of the successful transactions
      (``None`` when the log has no lag column, i.e. no ``--rate``).

    With ``--sampling-rate`` every figure is of the sampled transactions only.
    """

    sources: tuple[str, ...]
    first_second: int
    transactions: np.ndarray
    latency_sum_us: np.ndarray
    max_us: np.ndarray
    skipped: np.ndarray
    hist_second: np.ndarray
    hist_bucket: np.ndarray
    hist_count: np.ndarray
    late: np.ndarray | None = None
    latency_limit_us: float | None = None
    lag_sum_us: np.ndarray | None = None
    lag_max_us: np.ndarray | None = None

    @property
    def seconds(self) -> int:
        """Seconds the series spans."""
        return int(self.transactions.size)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LatencySeries):
            return NotImplemented
        return (
            self.sources == other.sources
            and self.first_second == other.first_second
            and self.latency_limit_us == other.latency_limit_us
            and all(
                _arrays_equal(getattr(self, f), getattr(other, f))
                for f in (
                    "transactions", "latency_sum_us", "max_us", "skipped", "hist_second",
                    "hist_bucket", "hist_count", "late", "lag_sum_us", "lag_max_us",
                )
            )
        )  # fmt: skip

    __hash__ = None  # type: ignore[assignment]  # holds arrays


@dataclass(frozen=True)
class LatencyPoint:
    """One second of a per-second latency series, of one client or of all of them
    (``client`` ``""``): transactions that completed in ``[start, start + 1)`` (epoch).

    Percentiles are nearest-rank over the second's successful transactions, read from
    the coarse histogram (within 1/64 of the exact value, see
    :mod:`collector.parse.txlog`); ``max_s`` and the averages are exact. Every latency
    figure is ``None`` in a second without a successful transaction. With ``--rate``
    pgbench's latency counts from the scheduled start, so it includes the lag.
    ``late`` is ``None`` when no latency limit was given; the lag figures are ``None``
    without ``--rate``."""

    client: str
    start: float
    transactions: int
    latency_avg_s: float | None
    p50_s: float | None
    p95_s: float | None
    p99_s: float | None
    max_s: float | None
    skipped: int = 0
    late: int | None = None
    lag_avg_s: float | None = None
    lag_max_s: float | None = None


@dataclass(frozen=True)
class LagReading:
    """Whether a ``--rate`` run held its rate, read from its per-second schedule lag
    (:func:`collector.parse.txlog.read_lag`; the rule is stated there).

    ``sustained`` is the verdict, ``reason`` one line for a report saying why.
    ``lag_grows``: the lag grew through the run (the drive fell behind the schedule);
    a run can also fail by its skipped share alone (``-L``). ``slope`` is seconds of
    lag gained per second of run (least squares over the per-second mean lag),
    ``growth_s`` that slope over the run's span; ``lag_first_s`` and ``lag_last_s``
    are the medians of the per-second mean lag over the first and the last quarter of
    the seconds; ``bound_s`` is the growth the rule tolerates; ``service_s`` the mean
    latency less the lag (the time a transaction took once started);
    ``skipped_ratio`` is skipped / (successful + skipped); ``scheduled_ratio`` the
    transactions scheduled (successful + skipped) over those the rate asked, where the
    reader was given the rate (else None)."""

    sustained: bool
    reason: str
    lag_grows: bool
    slope: float
    growth_s: float
    lag_first_s: float
    lag_last_s: float
    bound_s: float
    service_s: float
    skipped_ratio: float
    seconds: int
    scheduled_ratio: float | None = None


@dataclass(frozen=True)
class TxLogSummary:
    """What a per-transaction log (``-l``, all thread files of one pgbench) says,
    streamed into fixed-size figures: counts, latency moments of the successful
    transactions, a latency histogram, the span, and the per-second series.

    ``per_second`` rows are ``(epoch_second, successful, failed, latency_sum_s)``
    by completion time. With ``--sampling-rate`` every count is of the sample only.
    ``late`` counts the successful transactions slower than the latency limit the
    parser was given (``None``: none given). ``latency_series`` holds the per-second
    latency histograms, lag and skipped counts (``None`` when the parser was asked not
    to keep them)."""

    sources: tuple[str, ...]
    rows: int
    successful: int
    failed: int
    skipped: int
    failures: Mapping[str, int]
    latency_sum_s: float
    latency_sum2_s2: float
    latency_min_s: float | None
    latency_max_s: float | None
    first_start: float | None
    last_end: float | None
    per_second: tuple[tuple[int, int, int, float], ...]
    histogram: LatencyHistogram
    connections: int
    retries: int | None = None
    lag_sum_s: float | None = None
    late: int | None = None
    latency_series: LatencySeries | None = None

    @property
    def latency_avg_s(self) -> float | None:
        return self.latency_sum_s / self.successful if self.successful else None

    @property
    def latency_stddev_s(self) -> float | None:
        n = self.successful
        if n < 2:
            return None
        var = (self.latency_sum2_s2 - self.latency_sum_s**2 / n) / (n - 1)
        return max(var, 0.0) ** 0.5


# --------------------------------------------------------------------------- fio, fsync


@dataclass(frozen=True)
class LatencyStats:
    """fio's slat/clat/lat block in seconds. ``percentiles`` maps percent (99.0) to
    seconds; ``bins`` (json+ only) maps a latency in seconds to its count."""

    min_s: float
    max_s: float
    mean_s: float
    stddev_s: float
    n: int
    percentiles: Mapping[float, float] = field(default_factory=dict)
    bins: Mapping[float, int] | None = None


@dataclass(frozen=True)
class FioDirection:
    """One direction (read, write, trim, mixed) of one fio job, with I/O done."""

    direction: str
    iops: float
    bw_bytes_per_s: float
    io_bytes: int
    runtime_s: float
    total_ios: int
    clat: LatencyStats | None = None
    lat: LatencyStats | None = None
    slat: LatencyStats | None = None


@dataclass(frozen=True)
class FioJob:
    """A job (or, in client/server mode, one client's stats; ``aggregate`` marks
    fio's "All clients" sum). CPU figures are ratios."""

    name: str
    groupid: int
    error: int
    directions: Mapping[str, FioDirection]
    options: Mapping[str, str] = field(default_factory=dict)
    host: str | None = None
    port: int | None = None
    aggregate: bool = False
    usr_cpu: float | None = None
    sys_cpu: float | None = None


@dataclass(frozen=True)
class DiskUtil:
    """fio's ``disk_util`` entry: I/O counts, busy times in seconds, util as a ratio."""

    name: str
    read_ios: int
    write_ios: int
    read_merges: int
    write_merges: int
    read_ticks_s: float
    write_ticks_s: float
    in_queue_s: float
    util: float
    host: str | None = None


@dataclass(frozen=True)
class FioResult:
    source: str
    fio_version: str | None
    timestamp: float | None
    jobs: tuple[FioJob, ...]
    disk_util: tuple[DiskUtil, ...] = ()
    global_options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FsyncResult:
    """One pg_test_fsync line: the section (``one 8kB write`` ...), the method, and
    ops/s and seconds per op, or ``None`` for both where it printed ``n/a``."""

    section: str
    method: str
    ops_per_s: float | None
    seconds_per_op: float | None
    note: str | None = None


# --------------------------------------------------------------------------- results


class RunStatus(StrEnum):
    COMPLETE = "complete"
    PARTIAL = "partial"
    FAILED = "failed"


@dataclass(frozen=True)
class ClientResult:
    """One client host's figures for one run. ``start``/``end`` (epoch) bound the
    time it was running transactions; both are ``None`` when no log or timestamped
    progress was kept."""

    client: str
    status: RunStatus = RunStatus.COMPLETE
    reason: str | None = None
    tps: float | None = None
    tps_kind: str | None = None
    processed: int | None = None
    failed: int | None = None
    skipped: int | None = None
    latency_avg_s: float | None = None
    latency_stddev_s: float | None = None
    latency_p50_s: float | None = None
    latency_p95_s: float | None = None
    latency_p99_s: float | None = None
    latency_max_s: float | None = None
    start: float | None = None
    end: float | None = None
    exit_code: int | None = None
    histogram: LatencyHistogram | None = None
    report: Mapping[str, Any] = field(default_factory=dict)


#: cell params shown as the pgbench flag they set (-c 4 -> "c4"); 0 or None: not given
PGBENCH_FLAGS = {
    "clients_per_host": "c",
    "threads": "j",
    "duration": "T",
    "transactions": "t",
    "rate": "R",
    "latency_limit": "L",
}
#: write cache states a cell can be measured with; "leave" (as the drive is) names nothing
WRITE_CACHE_STATES = ("leave", "on", "off")


@dataclass(frozen=True)
class CellSpec:
    """The identity of one cell of a scenario (one point of its matrix, without the
    repetition), defined here once and used everywhere a cell is named:

    * :attr:`cell_id`, the run folder's name (``runs/<scenario>/<cell_id>/rep-N``), in
      ``run.json`` and the console;
    * :attr:`key`, the store's key of the cell within its scenario;
    * :attr:`test` and :attr:`drive`, the report's label (what is compared across drives,
      and the drive it ran on).

    ``clients`` is the number of client hosts (0: all of them, not yet counted).
    ``params`` are the pgbench options that shape the load (``clients_per_host``,
    ``threads``, ``duration``, ``transactions``, ``rate``). ``mkfs_options`` and
    ``mount_options`` are the filesystem's as asked: a scenario holds one entry per
    filesystem type, so they never tell two of its cells apart and are recorded with
    the cell, not spelled in its names.

    ``pg_settings`` are the PostgreSQL settings the scenario gave the cell (its
    ``postgresql.settings`` with its set's over them, as the settings file holds them),
    and ``pg_settings_name`` the name of its set (None without sets): the name is spelled
    in every name of the cell (``-pg<name>``, ``pg <name>``), so two sets are two cells;
    the settings are recorded with it."""

    drive: str
    workload: str = "tpcb"
    filesystem: str | None = None
    placement: str | None = None
    scale: int | None = None
    clients: int = 1
    params: Mapping[str, Any] = field(default_factory=dict)
    write_cache: str = "leave"
    mkfs_options: tuple[str, ...] = ()
    mount_options: str | None = None
    pg_settings_name: str | None = None
    pg_settings: Mapping[str, str] = field(default_factory=dict)

    @property
    def cell_id(self) -> str:
        """``nvme-ext4-tablespace-s20-h2-tpcb``, ``-r<rate>`` with a rate (pgbench -R per
        client host), ``-wcon``/``-wcoff`` when the write cache is set, ``-pg<set>`` for a
        set of PostgreSQL settings: the run folder's name."""
        parts = [self.drive, self.filesystem, self.placement, f"s{self.scale}"]
        parts += [f"h{self.clients or 'all'}", self.workload]
        base = "-".join(str(p) for p in parts)
        if self.params.get("rate"):
            base += f"-r{self.params['rate']}"  # a rate sweep's cells (per host -R)
        if self.write_cache != "leave":
            base += f"-wc{self.write_cache}"
        return base if self.pg_settings_name is None else f"{base}-pg{self.pg_settings_name}"

    @property
    def test(self) -> str:
        """The cell without the drive: what is compared across drives."""
        parts = [self.workload]
        if self.filesystem:
            parts.append(self.filesystem)
        if self.placement:
            parts.append(self.placement)
        if self.scale is not None:
            parts.append(f"s{self.scale}")
        parts.append(f"{self.clients}cl")
        order = list(PGBENCH_FLAGS)
        for k, v in sorted(
            self.params.items(),
            key=lambda kv: (order.index(kv[0]) if kv[0] in order else 99, kv[0]),
        ):
            flag = PGBENCH_FLAGS.get(k)
            if flag and v in (None, 0, ""):
                continue  # an option not given: pgbench's default
            parts.append(f"{flag}{v}" if flag else f"{k}={v}")
        if self.write_cache != "leave":
            parts.append(f"wc {self.write_cache}")
        if self.pg_settings_name is not None:
            parts.append(f"pg {self.pg_settings_name}")
        return " ".join(parts)

    @property
    def key(self) -> str:
        """The store's key of the cell within its scenario."""
        return f"{self.drive} {self.test}"

    def to_json(self) -> dict[str, Any]:
        """The cell as ``run.json`` carries it (:meth:`from_json` reads it back)."""
        return {
            "drive": self.drive,
            "workload": self.workload,
            "filesystem": self.filesystem,
            "placement": self.placement,
            "scale": self.scale,
            "clients": self.clients,
            "params": dict(self.params),
            "write_cache": self.write_cache,
            "mkfs_options": list(self.mkfs_options),
            "mount_options": self.mount_options,
            "pg_settings_name": self.pg_settings_name,
            "pg_settings": dict(self.pg_settings),
        }


@dataclass(frozen=True)
class RawOutput:
    """Where a raw output file was kept, and what it is (``stdout``, ``stderr``,
    ``txlog``, ``agglog``, ``fio_json`` ...)."""

    kind: str
    path: str
    host: str | None = None


@dataclass(frozen=True)
class RunRecord:
    """One attempt at one repetition of one cell, as the runner hands it to the store
    (``attempt`` 1, or the retry's number when a partial or failed one was run again)."""

    repetition: int
    status: RunStatus
    clients: tuple[ClientResult, ...] = ()
    reason: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    commands: tuple[str, ...] = ()
    series: tuple[SeriesPoint, ...] = ()
    raw_outputs: tuple[RawOutput, ...] = ()
    samples: tuple[Sample, ...] = ()
    facts: Mapping[str, Any] = field(default_factory=dict)
    attempt: int = 1
    #: the controller that ran it, when the run folder says (else the store's own)
    controller: str | None = None
