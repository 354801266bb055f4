"""The records that flow from the parsers through the store to the reports.

One measurement type, :class:`Sample` (metric, value, unit, labels, timestamp), for
anything that is a single number (fio figures, pg_test_fsync figures, device
telemetry), and typed records for what has structure. This module holds the ones a
run is stored and reported as: a client's result, a run, a cell, a per-second series
point, a latency histogram. The records of one tool's output are in the submodules,
beside their parsers: :mod:`collector.records.pgbench` (a pgbench report, stderr,
progress and aggregate lines), :mod:`collector.records.txlog` (a per-transaction-log
summary, its per-second latency series and the lag reading),
:mod:`collector.records.pretest` (fio and pg_test_fsync).

Everything is in base units from the moment it is parsed: seconds (latencies, too),
bytes, bytes per second, ratios (0..1, not percent). Display code converts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any


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
    "protocol": "M",
    "mix": "b",
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
    #: one count of a client sweep: its folder is named by its -c and -j too (its test
    #: always is); False keeps the names of cells made before sweeps
    clients_swept: bool = False
    #: a filesystem variant's name (``xfs-su128``), which names the cell in place of
    #: its type; None: the type names it
    filesystem_name: str | None = None
    #: placement cluster with its WAL on a drive of its own: that drive's name, spelled
    #: after the placement in every name of the cell (``cluster-wal-hdd7200``); None:
    #: the WAL is where the placement keeps it
    wal_drive: str | None = None
    #: the state the drive was brought to before its filesystem was made
    #: (``drive_state``: its name, spelled ``-ds<name>`` and ``ds <name>``); None: as found
    drive_state: str | None = None
    #: the TRIM policy (``trim``): none (not spelled), discard (mount option), fstrim
    #: (before each repetition); spelled ``-trim<policy>`` and ``trim <policy>``
    trim: str = "none"

    @property
    def placement_label(self) -> str | None:
        """The placement as the cell's names spell it: ``cluster-wal-hdd7200`` when its
        WAL has a drive of its own."""
        if self.wal_drive and self.placement:
            return f"{self.placement}-wal-{self.wal_drive}"
        return self.placement

    @property
    def fs_label(self) -> str | None:
        """What names the cell's filesystem: the variant's name, else its type."""
        return self.filesystem_name or self.filesystem

    @property
    def cell_id(self) -> str:
        """``nvme-ext4-tablespace-s20-h2-tpcb``, ``-r<rate>`` with a rate (pgbench -R per
        client host), ``-wcon``/``-wcoff`` when the write cache is set, ``-pg<set>`` for a
        set of PostgreSQL settings: the run folder's name."""
        parts = [self.drive, self.fs_label, self.placement_label, f"s{self.scale}"]
        parts += [f"h{self.clients or 'all'}", self.workload]
        base = "-".join(str(p) for p in parts)
        if self.params.get("rate"):
            base += f"-r{self.params['rate']}"  # a rate sweep's cells (per host -R)
        if self.write_cache != "leave":
            base += f"-wc{self.write_cache}"
        if self.params.get("protocol"):  # pgbench -M other than its default
            base += f"-M{self.params['protocol']}"
        if self.params.get("mix"):  # a mix of built-in scripts: tpcb-like@9+select-only@1
            base += "-b" + str(self.params["mix"]).replace("@", "").replace("+", "-")
        if self.clients_swept:  # a client sweep's counts
            base += f"-c{self.params.get('clients_per_host')}j{self.params.get('threads')}"
        if self.drive_state:
            base += f"-ds{self.drive_state}"
        if self.trim != "none":
            base += f"-trim{self.trim}"
        return base if self.pg_settings_name is None else f"{base}-pg{self.pg_settings_name}"

    @property
    def test(self) -> str:
        """The cell without the drive: what is compared across drives."""
        parts = [self.workload]
        if self.fs_label:
            parts.append(self.fs_label)
        if self.placement:
            parts.append(self.placement_label)
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
        if self.drive_state:
            parts.append(f"ds {self.drive_state}")
        if self.trim != "none":
            parts.append(f"trim {self.trim}")
        if self.pg_settings_name is not None:
            parts.append(f"pg {self.pg_settings_name}")
        return " ".join(parts)

    @property
    def key(self) -> str:
        """The store's key of the cell within its scenario."""
        return f"{self.drive} {self.test}"

    def to_json(self) -> dict[str, Any]:
        """The cell as ``run.json`` carries it (:meth:`from_json` reads it back)."""
        return (
            {
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
            | ({"clients_swept": True} if self.clients_swept else {})
            | ({"filesystem_name": self.filesystem_name} if self.filesystem_name else {})
            | ({"wal_drive": self.wal_drive} if self.wal_drive else {})
            | ({"drive_state": self.drive_state} if self.drive_state else {})
            | ({"trim": self.trim} if self.trim != "none" else {})
        )


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
