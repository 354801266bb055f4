"""Physics checks: can the drive really have done what a result says?

Pure rules, no I/O. Each takes figures drivelab already has (the drive's device facts,
the pre-tests' samples, a run's facts, clients and telemetry) and returns
:class:`Flag` s: a code, the drive, one line in words and the rule's figures. The
rules (docs/telemetry.md, "Physics checks"):

**Flush honesty.** A rotating drive completes at most one flush per revolution:
``rpm / 60`` per second (7200 rpm: 120/s, 10k: 166.7/s, 15k: 250/s). A WAL commit is a
flush, and one connection commits one transaction after another, so neither
pg_test_fsync's one-8kB-write figures nor a single-client pgbench run (one client host,
one connection, a writing mode, WAL on the drive, ``fsync`` and ``synchronous_commit``
on) can exceed it. Above :data:`MARGIN` times the ceiling (measured rates are noisy, a
drive at its ceiling is honest) a cache is absorbing flushes: :data:`FLUSH_ABSORBED`,
or :data:`FLUSH_PROTECTED` when the inventory says the drive (or its controller) has
power-loss protection. The rotation rate comes from SMART (``rotation_rate``; an NVMe
drive does not rotate), else from the inventory's ``rpm``; with neither the check is
not made, said once (:data:`FLUSH_UNCHECKED`). A RAID set is rotating when all its
members are, at its fastest member's rate (one connection's commits are serial: each
waits for a revolution of the member it lands on).

**fio against pgbench.** Two checks of a run against the same drive's fio pre-test:

- :data:`IOPS_ABOVE_FIO`: the drive served more reads per second over the run (the DB
  host device's ``drivelab_device_read_iops``, summed over the drive's devices, mean
  over the run's telemetry) than :data:`MARGIN` times the random 4 KiB reads fio got
  at queue depth 32. Writes are not judged: the kernel and the drive merge
  PostgreSQL's sequential writes (WAL, sorted checkpoints) into fewer, larger requests
  than a random-write test makes, so a rotating drive can legitimately exceed them;
  and reads and writes are compared each on its own, never summed (the lab caps them
  as separate budgets).
- :data:`TPS_BELOW_FIO`: a cache-defeated run (:mod:`collector.verdicts.cachedefeat`) did under
  :data:`FAR_BELOW` of the transactions per second fio's random reads allow. Each
  transaction read ``N = blks_read / transactions`` blocks from outside shared
  buffers (the run's own ``pg_stat_database`` counters, ``db_buffers``); ``C``
  connections keep at most ``C`` reads in flight, so the drive can serve at most
  ``min(qd32 IOPS, C x qd1 IOPS)`` reads per second and the run at most that over
  ``N`` transactions per second. ``blks_read`` counts page-cache hits too, so ``N`` is
  at least the drive reads per transaction and the prediction errs low: a flagged run
  is far below an optimistic figure only when something other than the drive's random
  reads (CPU, WAL flushes, locks, the clients) limited it.

Without a fio pre-test of the drive, or without the run's telemetry, the check is not
made, and :data:`IOPS_UNCHECKED` says why.

**Power-loss protection.** For a drive that does not rotate, SMART and identify data
have no field that says whether it has power-loss protection on most drives; the
inventory's ``power_loss_protection: true|false`` states it. Neither:
:data:`PLP_UNKNOWN` ("power-loss protection: unknown"); false: :data:`PLP_NONE`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from collector.records import CellSpec, ClientResult, RunRecord, Sample
from collector.verdicts.drivefacts import Drive, drive_from_facts

#: a measured rate up to this many times the ceiling is within noise (not flagged)
MARGIN = 1.25
#: a cache-defeated run under this share of what fio predicts is flagged
FAR_BELOW = 0.25

FLUSH_ABSORBED = "flush_absorbed"
FLUSH_PROTECTED = "flush_cache_protected"
FLUSH_UNCHECKED = "flush_unchecked"
IOPS_ABOVE_FIO = "iops_above_fio"
TPS_BELOW_FIO = "tps_below_fio"
IOPS_UNCHECKED = "iops_unchecked"
PLP_UNKNOWN = "plp_unknown"
PLP_NONE = "plp_none"
#: codes that say what a drive is, not what a run showed: said once per drive, and no
#: caveat on a figure (collector.verdicts.caveats)
DRIVE_CODES = (FLUSH_UNCHECKED, PLP_UNKNOWN, PLP_NONE)
#: the word a report puts before a flag of each code
KIND = {
    FLUSH_ABSORBED: "flush",
    FLUSH_PROTECTED: "flush",
    FLUSH_UNCHECKED: "flush",
    IOPS_ABOVE_FIO: "fio",
    TPS_BELOW_FIO: "fio",
    IOPS_UNCHECKED: "fio",
    PLP_UNKNOWN: "plp",
    PLP_NONE: "plp",
}
WARNING, NOTE = "warning", "note"
#: pg_test_fsync's section whose lines are one WAL flush each
FSYNC_SECTION = "one 8kB write"
FSYNC_METRIC = "drivelab_fsync_ops_per_second"
READ_IOPS = "drivelab_device_read_iops"
WRITE_IOPS = "drivelab_device_write_iops"
#: pgbench modes whose transactions write (and so flush WAL at commit)
WRITING_MODES = ("tpcb", "simple-update")
WAL_ON_DRIVE = "on the drive"


@dataclass(frozen=True)
class Flag:
    """One finding about a drive: ``code`` (a constant of this module), ``level``
    (:data:`WARNING`: the figure is not what it seems; :data:`NOTE`: a check not made,
    a fact missing), one line in words, and the rule's figures."""

    code: str
    drive: str
    level: str
    message: str
    figures: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return KIND.get(self.code, "physics")

    def as_fact(self) -> dict[str, Any]:
        return {**asdict(self), "figures": dict(self.figures)}

    @classmethod
    def from_fact(cls, value: Mapping[str, Any]) -> Flag:
        return cls(
            code=str(value.get("code", "")),
            drive=str(value.get("drive", "")),
            level=str(value.get("level", NOTE)),
            message=str(value.get("message", "")),
            figures=dict(value.get("figures") or {}),
        )


def as_facts(flags: Iterable[Flag]) -> list[dict[str, Any]]:
    return [f.as_fact() for f in flags]


# --------------------------------------------------------------------------- the drive


def drive_notes(drive: Drive) -> list[Flag]:
    """What is said once per drive: a flush check that cannot be made (rotation
    unknown), a solid-state drive's power-loss protection unknown or absent."""
    if drive.rpm is None:
        return [
            Flag(
                FLUSH_UNCHECKED,
                drive.name,
                NOTE,
                "not checked: rotation rate unknown ("
                + (drive.rpm_source or "no SMART rotation rate, no rpm in the inventory")
                + ")",
            )
        ]
    if drive.rpm == 0 and drive.power_loss_protection is None:
        return [
            Flag(
                PLP_UNKNOWN,
                drive.name,
                NOTE,
                "power-loss protection: unknown (SMART has no field for it; set"
                " power_loss_protection in the inventory)",
                {"rpm": 0, "rpm_source": drive.rpm_source},
            )
        ]
    if drive.rpm == 0 and drive.power_loss_protection is False:
        return [
            Flag(
                PLP_NONE,
                drive.name,
                NOTE,
                "power-loss protection: none (inventory): durable only if the drive honours"
                " flushes",
                {"rpm": 0, "rpm_source": drive.rpm_source},
            )
        ]
    return []


def _flush_flag(drive: Drive, rate: float, what: str, figures: Mapping[str, Any]) -> Flag | None:
    """A flush rate against the drive's ceiling (None: within it, or not rotating)."""
    ceiling = drive.flush_ceiling
    if ceiling is None or rate <= MARGIN * ceiling:
        return None
    figs = {
        **figures,
        "rate_per_s": rate,
        "rpm": drive.rpm,
        "rpm_source": drive.rpm_source,
        "ceiling_per_s": ceiling,
        "margin": MARGIN,
        "ratio": rate / ceiling,
    }
    head = (
        f"{what} {rate:,.0f}/s, {rate / ceiling:.1f}x the {ceiling:.0f}/s a {drive.rpm} rpm"
        f" drive ({drive.rpm_source}) can flush"
    )
    if drive.power_loss_protection:
        return Flag(
            FLUSH_PROTECTED,
            drive.name,
            NOTE,
            f"{head}: a write cache absorbs flushes; the inventory says it has power-loss"
            " protection",
            figs,
        )
    return Flag(
        FLUSH_ABSORBED,
        drive.name,
        WARNING,
        f"{head}: a volatile write cache is absorbing flushes, results are not durable",
        figs,
    )


# --------------------------------------------------------------------------- pre-tests


def pretest_flags(samples: Iterable[Sample], drives: Mapping[str, Drive]) -> list[Flag]:
    """pg_test_fsync's one-8kB-write figures (every sync method) of each drive and write
    cache state against the drive's flush ceiling; then the notes of every drive the
    samples name. ``drives`` by the samples' ``drive`` label (a drive missing there is
    of unknown rotation)."""
    rates: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    seen: dict[str, None] = {}
    for s in samples:
        if "drive" in s.labels:
            seen[s.labels["drive"]] = None
        if s.metric == FSYNC_METRIC and s.labels.get("section") == FSYNC_SECTION:
            key = (s.labels.get("drive", "?"), s.labels.get("write_cache", "-"))
            rates[key][s.labels.get("method", "?")] = s.value
    out: list[Flag] = []
    for (name, state), by_method in rates.items():
        drive = drives.get(name) or Drive(name)
        method, rate = max(by_method.items(), key=lambda kv: kv[1])
        flag = _flush_flag(
            drive,
            rate,
            f"pg_test_fsync {method} (write cache {state})",
            {"source": "pg_test_fsync", "method": method, "write_cache": state},
        )
        if flag is not None:
            out.append(flag)
    for name in seen:
        out += drive_notes(drives.get(name) or Drive(name))
    return out


# --------------------------------------------------------------------------- a run


def connections(cell: CellSpec) -> int | None:
    """Total pgbench connections of a cell: client hosts x connections per host."""
    per_host = cell.params.get("clients_per_host")
    if not cell.clients or not isinstance(per_host, int):
        return None
    return cell.clients * per_host


def run_flags(
    drive: Drive,
    cell: CellSpec,
    *,
    mode: str | None,
    db_facts: Mapping[str, Any],
    clients: Sequence[ClientResult],
) -> list[Flag]:
    """The flags a run folder alone gives (at gather time): a single-client writing run
    with WAL on the drive committing faster than the drive turns, then the drive's
    notes."""
    out: list[Flag] = []
    settings = db_facts.get("postgresql_settings")
    settings = settings if isinstance(settings, Mapping) else {}
    wal = db_facts.get("wal_placement") or (WAL_ON_DRIVE if cell.placement == "cluster" else None)
    tps = [c.tps for c in clients if c.tps is not None]
    if (
        connections(cell) == 1
        and (mode or cell.workload) in WRITING_MODES
        and wal == WAL_ON_DRIVE
        and settings.get("fsync") == "on"
        and settings.get("synchronous_commit") not in (None, "off")
        and len(tps) == 1
    ):
        flag = _flush_flag(
            drive,
            tps[0],
            "single-client pgbench commits",
            {"source": "pgbench", "connections": 1, "write_cache": cell.write_cache},
        )
        if flag is not None:
            out.append(flag)
    return out + drive_notes(drive)


def mean_iops(samples: Iterable[Sample], metric: str, devices: Iterable[str]) -> float | None:
    """Mean over the run's seconds of ``metric`` summed over ``devices`` (None: no
    sample of it)."""
    wanted = set(devices)
    per_second: dict[float | None, float] = defaultdict(float)
    for s in samples:
        if s.metric == metric and s.labels.get("device") in wanted:
            per_second[s.timestamp] += s.value
    return sum(per_second.values()) / len(per_second) if per_second else None


def iops_flags(
    drive: str,
    cell: CellSpec,
    *,
    pretest: Any | None,
    samples: Sequence[Sample] | None,
    devices: Sequence[str],
    tps: float | None,
    transactions: int | None,
    db_buffers: Mapping[str, Any] | None,
    cache_verdict: str | None,
) -> list[Flag]:
    """fio against pgbench for one run (see the module's docstring). ``pretest``: the
    drive's :class:`~collector.verdicts.pretest.PretestSummary`
    (:func:`collector.verdicts.pretest.for_cell`),
    None without one; ``samples``: the run's telemetry, None without it."""
    if pretest is None:
        why = "no fio pre-test of this drive" + (
            "" if cell.write_cache == "leave" else f" with its write cache {cell.write_cache}"
        )
        return [Flag(IOPS_UNCHECKED, drive, NOTE, f"not checked: {why}")]
    if pretest.rand_read_qd32 is None:
        return [Flag(IOPS_UNCHECKED, drive, NOTE, "not checked: the pre-test ran no fio")]
    if samples is None:
        return [Flag(IOPS_UNCHECKED, drive, NOTE, "not checked: no telemetry of the run")]
    fio32 = pretest.rand_read_qd32
    reads = mean_iops(samples, READ_IOPS, devices)
    writes = mean_iops(samples, WRITE_IOPS, devices)
    if reads is None:
        return [Flag(IOPS_UNCHECKED, drive, NOTE, "not checked: no read figures of the drive")]
    out: list[Flag] = []
    if fio32 > 0 and reads > MARGIN * fio32:
        out.append(
            Flag(
                IOPS_ABOVE_FIO,
                drive,
                WARNING,
                f"the drive served {reads:,.0f} reads/s over the run, {reads / fio32:.1f}x"
                f" the {fio32:,.0f} random 4k reads/s fio got at queue depth 32: a cache the"
                " pre-test did not reach served them",
                {
                    "read_iops": reads,
                    "write_iops": writes,
                    "fio_rand_read_qd32": fio32,
                    "margin": MARGIN,
                    "ratio": reads / fio32,
                    "write_cache": pretest.write_cache,
                },
            )
        )
    blks = sum(
        int(v.get("blks_read") or 0) for v in (db_buffers or {}).values() if isinstance(v, dict)
    )
    if cache_verdict == "cache defeated" and tps and transactions and blks > 0:
        below = _tps_below_fio(
            drive, cell, pretest, tps=tps, per_tx=blks / transactions, reads=reads
        )
        out.extend([below] if below else [])
    return out


def _tps_below_fio(
    drive: str, cell: CellSpec, pretest: Any, *, tps: float, per_tx: float, reads: float
) -> Flag | None:
    """:data:`TPS_BELOW_FIO` for a cache-defeated run that read ``per_tx`` blocks per
    transaction from outside shared buffers, or None."""
    conns = connections(cell)
    if not conns:
        return None
    fio32 = pretest.rand_read_qd32
    allowed = fio32
    if pretest.rand_read_qd1:
        allowed = min(fio32, conns * pretest.rand_read_qd1)
    predicted = allowed / per_tx
    if tps >= FAR_BELOW * predicted:
        return None
    return Flag(
        TPS_BELOW_FIO,
        drive,
        WARNING,
        f"{tps:,.0f} tps, {tps / predicted:.0%} of the {predicted:,.0f} tps fio's"
        f" random reads allow ({allowed:,.0f} reads/s at {conns} connections,"
        f" {per_tx:.2f} blocks read per transaction): something other than the"
        " drive's random reads limited this cache-defeated run",
        {
            "tps": tps,
            "predicted_tps": predicted,
            "ratio": tps / predicted,
            "far_below": FAR_BELOW,
            "blocks_read_per_transaction": per_tx,
            "allowed_read_iops": allowed,
            "fio_rand_read_qd1": pretest.rand_read_qd1,
            "fio_rand_read_qd32": fio32,
            "connections": conns,
            "read_iops": reads,
        },
    )


# --------------------------------------------------------------------------- as stored


def gather_facts(
    cell: CellSpec,
    mode: str | None,
    db_facts: Mapping[str, Any],
    device_facts: Mapping[str, Any] | None,
    clients: Sequence[ClientResult],
) -> list[dict[str, Any]]:
    """The run fact ``physics`` of a run folder (:func:`run_flags` with the cell's
    device facts), as :func:`collector.gather.folder.gather_run` stores it."""
    drive = drive_from_facts(cell.drive, device_facts)
    return as_facts(run_flags(drive, cell, mode=mode, db_facts=db_facts, clients=clients))


def telemetry_facts(
    cell: CellSpec,
    run: RunRecord,
    *,
    tps: float | None,
    samples: Sequence[Sample] | None,
    devices: Sequence[str],
    pretest: Any | None,
    cache: Mapping[str, Any] | None,
) -> list[dict[str, Any]]:
    """The run fact ``physics_iops`` (:func:`iops_flags`), as the runner stores it with
    the run's telemetry."""
    processed = [c.processed for c in run.clients if c.processed is not None]
    return as_facts(
        iops_flags(
            cell.drive,
            cell,
            pretest=pretest,
            samples=samples,
            devices=devices,
            tps=tps,
            transactions=sum(processed) if processed else None,
            db_buffers=run.facts.get("db_buffers"),
            cache_verdict=(cache or {}).get("verdict"),
        )
    )
