"""What a cell of a scenario is to run: the pgbench options of each client host, and the
cell itself (scenario, drive, filesystem, placement, dataset, hosts, write cache, load,
PostgreSQL settings).

Plain data, no hosts touched: the scenario layer makes these from a scenario file, the
runner hands them to the playbooks, and :attr:`Cell.spec` gives the cell's identity
(:class:`~collector.records.CellSpec`), the one place where a cell's names are made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from collector.errors import DrivelabError
from collector.paths import results_dir
from collector.records import CellSpec

#: pgbench workloads (-b tpcb-like, select-only, simple-update; -f for custom)
MODES = ("tpcb", "select-only", "simple-update", "custom")
#: pgbench's built-in scripts, as a weighted mix names them (-b name@weight)
BUILTINS = ("tpcb-like", "simple-update", "select-only")
#: a mix's word for the scenario's own script (``workload.script``: -f file@weight)
MIX_SCRIPT = "script"
#: what each client keeps of its transactions: -l, -l --sampling-rate, --aggregate-interval
LOGS = ("full", "sampled", "aggregate", "none")
#: drivelab's own cluster on the system disk: provisioning makes it, a tablespace
#: placement's databases live in it (role postgresql_server's postgresql_server_cluster)
OWN_CLUSTER = "drivelab"


def total_rate(per_host: int | None, hosts: int) -> int | None:
    """The transactions/s asked of ``hosts`` client hosts each running ``-R per_host``
    (None without ``-R``): :meth:`PgbenchOptions.at_rate` the other way."""
    return per_host * max(hosts, 1) if per_host else None


@dataclass(frozen=True)
class PgbenchOptions:
    """What each client host runs: ``pgbench -c clients_per_host -j threads -T duration``."""

    clients_per_host: int = 4
    threads: int = 2
    duration: int = 15
    transactions: int = 0
    mode: str = "tpcb"
    script: str | None = None
    rate: int = 0
    log: str = "full"
    #: how the scenario gave the rate: host (``rate`` is its -R) or total (split over hosts)
    rate_per: str = "host"
    #: pgbench -L in ms; 0: none
    latency_limit: int = 0
    sampling_rate: float | None = None
    aggregate_interval: int | None = None
    progress: int = 1
    #: pgbench -M: simple (its default), extended, prepared
    protocol: str = "simple"
    #: a weighted mix of built-in scripts, ((name, weight), ...): -b name@weight each
    mix: tuple[tuple[str, int], ...] = ()
    #: one count of a client sweep (``workload.clients_per_host`` a list): the cell's
    #: folder is named by its -c and -j too (``-c4j2``)
    clients_swept: bool = False

    def at_rate(self, value: int, per: str, hosts: int) -> PgbenchOptions:
        """These options at one value of ``workload.rate``: ``per`` ``host``, the value is
        each client host's pgbench ``-R``; ``total``, it is split over ``hosts`` (the
        schema made sure a scenario's totals split evenly; a rate search's steps are whole
        multiples of the hosts). The one place a total becomes a per-host rate."""
        rate = value // hosts if per == "total" and hosts else value
        return replace(self, rate=rate, rate_per=per)

    def rate_total(self, hosts: int) -> int | None:
        """The transactions/s asked of all ``hosts`` together (None without ``-R``)."""
        return total_rate(self.rate, hosts)

    def extra_vars(self) -> dict[str, Any]:
        """The pgbench_run role's variables."""
        if self.mode not in MODES:
            raise DrivelabError(f"pgbench mode {self.mode!r}: one of {', '.join(MODES)}")
        if self.log not in LOGS:
            raise DrivelabError(f"pgbench log {self.log!r}: one of {', '.join(LOGS)}")
        out: dict[str, Any] = {
            "pgbench_run_clients": self.clients_per_host,
            "pgbench_run_threads": self.threads,
            "pgbench_run_duration": self.duration,
            "pgbench_run_transactions": self.transactions,
            "pgbench_run_mode": self.mode,
            "pgbench_run_protocol": self.protocol,
            "pgbench_run_mix": [f"{name}@{weight}" for name, weight in self.mix],
            "pgbench_run_rate": self.rate,
            "pgbench_run_latency_limit": self.latency_limit,
            "pgbench_run_log": self.log,
            "pgbench_run_progress": self.progress,
        }
        if self.script:
            out["pgbench_run_script"] = str(Path(self.script).resolve())
        if self.log == "sampled":
            out["pgbench_run_sampling_rate"] = self.sampling_rate or 0.01
        if self.log == "aggregate":
            out["pgbench_run_aggregate_interval"] = self.aggregate_interval or 1
        return out

    def for_run_json(self) -> dict[str, Any]:
        """The options as ``run.json``'s ``pgbench`` (defaults of the log modes filled in)."""
        doc = asdict(self)
        if self.log == "sampled":
            doc["sampling_rate"] = self.sampling_rate or 0.01
        if self.log == "aggregate":
            doc["aggregate_interval"] = self.aggregate_interval or 1
        return doc

    def params(self) -> dict[str, Any]:
        """The options that shape the load, as a cell's identity carries them
        (``latency_limit`` only when given, so cells without it keep their names)."""
        out: dict[str, Any] = {
            "clients_per_host": self.clients_per_host,
            "threads": self.threads,
            "duration": self.duration,
            "transactions": self.transactions,
            "rate": self.rate,
        }
        if self.latency_limit:
            out["latency_limit"] = self.latency_limit
        if self.protocol != "simple":  # pgbench's default: cells without it keep their names
            out["protocol"] = self.protocol
        if self.mix:
            out["mix"] = "+".join(f"{name}@{weight}" for name, weight in self.mix)
        return out


@dataclass(frozen=True)
class Cell:
    """One cell of a scenario: a filesystem on a drive, a placement, a dataset, a load.

    ``hosts`` are the client hosts taking part. Empty means every host of group clients
    (a direct call; a scenario always names them): the folder is then named ``hall``
    and ``run.json`` records the hosts that ran."""

    scenario: str
    drive: str  # the drivelab filesystem name (mount point /srv/drivelab/<drive>)
    filesystem: str  # a row of drivelab_argv.FILESYSTEMS
    placement: str = "tablespace"  # or cluster
    scale: int = 10
    hosts: tuple[str, ...] = ()
    pgbench: PgbenchOptions = field(default_factory=PgbenchOptions)
    init_options: tuple[str, ...] = ()
    write_cache: str = "leave"  # leave, on, off
    mkfs_options: tuple[str, ...] = ()
    mount_options: str | None = None
    #: the set of PostgreSQL settings (its name, None without sets) and the settings the
    #: database stage gives the cluster (the scenario's, a set's over them)
    pg_settings_name: str | None = None
    pg_settings: Mapping[str, str] = field(default_factory=dict)
    #: the filesystem variant's name (``filesystems[].name``), None: named by its type
    filesystem_name: str | None = None
    #: placement cluster only: the drivelab filesystem on another drive that holds the
    #: cluster's WAL (made with the cell's filesystem); None: the WAL is in the data directory
    wal_drive: str | None = None
    #: the drive's state before its filesystem was made (``drive_state``'s name); None: as found
    drive_state: str | None = None
    #: the TRIM policy: none, discard (the mount option), fstrim (before each repetition)
    trim: str = "none"

    @property
    def spec(self) -> CellSpec:
        """The cell's identity: its names (folder, store key, report label) come from it."""
        return CellSpec(
            drive=self.drive,
            workload="mix" if self.pgbench.mix else self.pgbench.mode,
            filesystem=self.filesystem,
            placement=self.placement,
            scale=self.scale,
            clients=len(self.hosts),
            params=self.pgbench.params(),
            write_cache=self.write_cache,
            mkfs_options=tuple(self.mkfs_options),
            mount_options=self.mount_options,
            pg_settings_name=self.pg_settings_name,
            pg_settings=dict(self.pg_settings),
            clients_swept=self.pgbench.clients_swept,
            filesystem_name=self.filesystem_name,
            wal_drive=self.wal_drive,
            drive_state=self.drive_state,
            trim=self.trim,
        )

    @property
    def cell_id(self) -> str:
        """The run folder's name (:attr:`CellSpec.cell_id`)."""
        return self.spec.cell_id

    @property
    def cluster(self) -> str:
        """The cluster its databases live in: the same name the playbooks' filter
        ``drivelab_pg_cluster`` gives it (a unit test holds the two together)."""
        if self.placement != "cluster":
            return OWN_CLUSTER
        return f"drivelab_{self.drive}" + (f"_wal_{self.wal_drive}" if self.wal_drive else "")

    def cell_dir(self, root: Path | None = None) -> Path:
        return (root or results_dir()) / "runs" / self.scenario / self.cell_id
