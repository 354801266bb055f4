"""The records of pgbench's own output (:mod:`collector.parse.pgbench`): the final
report, what stderr said, ``-P`` progress lines, ``--aggregate-interval`` lines and
``pgbench -i`` timings. A per-transaction log's are in :mod:`collector.records.txlog`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


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
