"""The records of the raw drive pre-tests: fio's JSON output (:mod:`collector.parse.fio`)
and pg_test_fsync's lines (:mod:`collector.parse.pg_test_fsync`). Their figures are
stored as :class:`~collector.records.Sample` s; these are what the parsers return.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


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
    #: fio's own spread of the per-interval IOPS samples (``iops_stddev``)
    iops_stddev: float | None = None


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
