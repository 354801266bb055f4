"""Did the run defeat the caches, or did it measure RAM?

The seeds' point was a dataset too big to cache, so that every client's reads go to
the drive. Two caches stand in the way: PostgreSQL's shared buffers and the DB
host's page cache. This module judges a run from what PostgreSQL and the drive say:

- ``pg_stat_database`` per client database, read before and after the run (role
  pgbench_run's entry point stats: ``pg_stat-before.json``, ``pg_stat-after.json``,
  each row with the server's ``block_size``): ``blks_hit`` are reads served from shared buffers,
  ``blks_read`` reads PostgreSQL had to ask the kernel for. **``blks_read`` counts
  page-cache hits too**: PostgreSQL cannot tell a block that came from the OS page
  cache from one that came from the drive. So ``blks_read`` is "read from outside
  shared buffers", not "read from the drive";
- the drive's own read figures over the run (``drivelab_device_read_bytes_per_second``
  and ``drivelab_device_read_iops`` of :mod:`collector.verdicts.telemetry`): what really
  reached it;
- the datasets' total size and the DB host's memory.

The verdict (:func:`analyse`) is :data:`NOT_DEFEATED` when

1. the datasets fit in the DB host's memory by drivelab's rule (the pgbench_database
   role's warning): total size < 2 x memory, or
2. no block was read from outside shared buffers, or
3. the drive saw (almost) no reads: its read bytes are less than
   :data:`MIN_DRIVE_SHARE` (5 %) of ``blks_read x block_size`` (the server's, from the
   rows; :data:`BLOCK_SIZE` only for rows without one), i.e. the page cache
   served at least 95 % of what shared buffers missed;

:data:`UNKNOWN` when none of those holds but there is no drive telemetry to tell,
and :data:`DEFEATED` otherwise. The reason names every rule that decided.

The drive's share can exceed 1: kernel readahead and filesystem metadata reads
reach the drive without a ``blks_read``. Give the devices that hold the data once:
for md RAID the md device or its members, not both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from collector.errors import DrivelabError
from collector.records import Sample
from collector.units import human_size

#: PostgreSQL's default block size (``SHOW block_size``): for rows that do not carry the
#: server's own
BLOCK_SIZE = 8192
#: below this share of blks_read bytes reaching the drive, the page cache served the reads
MIN_DRIVE_SHARE = 0.05
#: datasets smaller than this many times the DB host's memory fit in it (drivelab's rule)
MEMORY_FACTOR = 2
DEFEATED = "cache defeated"
NOT_DEFEATED = "cache not defeated"
UNKNOWN = "unknown"
DRIVE_READ_BYTES = "drivelab_device_read_bytes_per_second"
DRIVE_READ_IOPS = "drivelab_device_read_iops"


@dataclass(frozen=True)
class BlockCounters:
    """One database's row of pg_stat_database at one instant, with the server's block
    size (bytes)."""

    datname: str
    blks_read: int
    blks_hit: int
    block_size: int = BLOCK_SIZE


@dataclass(frozen=True)
class ClientCache:
    """One client database over the run: blocks read from outside shared buffers
    (page cache or drive), blocks found in shared buffers, and the hit ratio
    ``hit / (hit + read)`` (``None`` when it read nothing)."""

    client: str
    datname: str
    blks_read: int
    blks_hit: int
    hit_ratio: float | None
    read_bytes: int


@dataclass(frozen=True)
class CacheVerdict:
    """The run's figures and verdict. ``drive_share`` is drive read bytes over
    ``blks_read x block_size`` (``None`` without telemetry or without blks_read)."""

    clients: tuple[ClientCache, ...]
    blks_read: int
    blks_hit: int
    hit_ratio: float | None
    read_bytes: int
    drive_read_bytes: float | None
    drive_reads: float | None
    drive_share: float | None
    dataset_bytes: int
    memory_bytes: int
    fits_in_memory: bool
    verdict: str
    reason: str

    @property
    def defeated(self) -> bool:
        return self.verdict == DEFEATED


def counters(rows: Iterable[Mapping[str, Any]]) -> dict[str, BlockCounters]:
    """pg_stat_database rows (dicts with datname, blks_read, blks_hit and optionally
    block_size, as ``community.postgresql.postgresql_query`` returns them; numbers may
    come as strings) by database name."""
    out = {}
    for row in rows:
        try:
            c = BlockCounters(
                str(row["datname"]),
                int(row["blks_read"]),
                int(row["blks_hit"]),
                int(row.get("block_size", BLOCK_SIZE)),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise DrivelabError(f"pg_stat_database row {dict(row)!r}: {err!r}") from None
        out[c.datname] = c
    return out


def integrate(
    samples: Iterable[Sample], metric: str, step: float = 1.0, devices: Iterable[str] | None = None
) -> float | None:
    """The total of a per-second rate over the run: the sum of its samples times
    ``step``, over ``devices`` (every device when ``None``). ``None`` when there is
    no sample of ``metric`` at all."""
    wanted = set(devices) if devices is not None else None
    values = [
        s.value
        for s in samples
        if s.metric == metric and (wanted is None or s.labels.get("device") in wanted)
    ]
    return sum(values) * step if values else None


def analyse(
    before: Mapping[str, BlockCounters],
    after: Mapping[str, BlockCounters],
    *,
    drive_samples: Iterable[Sample],
    dataset_bytes: int,
    memory_bytes: int,
    devices: Iterable[str] | None = None,
    step: float = 1.0,
    min_drive_share: float = MIN_DRIVE_SHARE,
) -> CacheVerdict:
    """The cache verdict of one run (see the module's docstring for the rules).

    ``before``/``after`` come from :func:`counters`; the two must name the same
    databases, and no counter may go down (a statistics reset or a restart without
    a clean shutdown in between would make the difference meaningless: a one-line
    :class:`DrivelabError` says which). A block is the size ``after``'s rows give (the
    server's ``block_size``). ``drive_samples`` are the run's telemetry
    (:func:`collector.verdicts.telemetry.run_telemetry`), filtered to ``devices`` if given,
    at ``step`` seconds apart."""
    if memory_bytes <= 0:
        raise DrivelabError(f"DB host memory {memory_bytes} bytes: must be positive")
    clients = _client_caches(before, after)
    samples = list(drive_samples)
    devs = list(devices) if devices is not None else None
    blks_read = sum(c.blks_read for c in clients)
    blks_hit = sum(c.blks_hit for c in clients)
    read_bytes = sum(c.read_bytes for c in clients)
    drive_bytes = integrate(samples, DRIVE_READ_BYTES, step, devs)
    share = drive_bytes / read_bytes if drive_bytes is not None and read_bytes else None
    fits = dataset_bytes < MEMORY_FACTOR * memory_bytes
    verdict, reason = _verdict(
        fits=fits, blks_read=blks_read, read_bytes=read_bytes, drive_bytes=drive_bytes,
        share=share, dataset_bytes=dataset_bytes, memory_bytes=memory_bytes,
        min_drive_share=min_drive_share,
    )  # fmt: skip
    return CacheVerdict(
        clients=clients,
        blks_read=blks_read,
        blks_hit=blks_hit,
        hit_ratio=_ratio(blks_hit, blks_hit + blks_read),
        read_bytes=read_bytes,
        drive_read_bytes=drive_bytes,
        drive_reads=integrate(samples, DRIVE_READ_IOPS, step, devs),
        drive_share=share,
        dataset_bytes=dataset_bytes,
        memory_bytes=memory_bytes,
        fits_in_memory=fits,
        verdict=verdict,
        reason=reason,
    )


def _client_caches(
    before: Mapping[str, BlockCounters], after: Mapping[str, BlockCounters]
) -> tuple[ClientCache, ...]:
    """Each client database's reads and hits over the run, in bytes of its server's
    block size; a one-line error when the two snapshots do not match."""
    if set(before) != set(after):
        odd = sorted(set(before) ^ set(after))
        raise DrivelabError(
            f"pg_stat_database: {', '.join(odd)} not read both before and after the run"
        )
    clients = []
    for name in sorted(before):
        b, a = before[name], after[name]
        read, hit = a.blks_read - b.blks_read, a.blks_hit - b.blks_hit
        if read < 0 or hit < 0:
            raise DrivelabError(
                f"pg_stat_database {name}: counters went down during the run"
                f" (blks_read {b.blks_read} -> {a.blks_read},"
                f" blks_hit {b.blks_hit} -> {a.blks_hit}); were statistics reset?"
            )
        clients.append(
            ClientCache(
                client=name.removeprefix("drivelab_"),
                datname=name,
                blks_read=read,
                blks_hit=hit,
                hit_ratio=_ratio(hit, hit + read),
                read_bytes=read * a.block_size,
            )
        )
    return tuple(clients)


def _verdict(
    *,
    fits: bool,
    blks_read: int,
    read_bytes: int,
    drive_bytes: float | None,
    share: float | None,
    dataset_bytes: int,
    memory_bytes: int,
    min_drive_share: float,
) -> tuple[str, str]:
    """The verdict and its reason, naming every rule that decided."""
    reasons = []
    if fits:
        reasons.append(
            f"the datasets ({human_size(dataset_bytes)}) fit in twice the DB host's memory"
            f" ({human_size(memory_bytes)})"
        )
    if blks_read == 0:
        reasons.append("no block was read from outside shared buffers")
    elif share is not None and share < min_drive_share:
        reasons.append(
            f"the drive read {human_size(drive_bytes or 0)}, {share:.1%} of the"
            f" {human_size(read_bytes)} read from outside shared buffers"
            f" (under {min_drive_share:.0%}):"
            " the page cache served the rest"
        )
    if reasons:
        return NOT_DEFEATED, "; ".join(reasons)
    if share is None:
        return UNKNOWN, (
            f"{human_size(read_bytes)} read from outside shared buffers, but no drive read"
            " telemetry to tell the page cache from the drive"
        )
    return DEFEATED, (
        f"the drive read {human_size(drive_bytes or 0)}, {share:.1%} of the"
        f" {human_size(read_bytes)} read from outside shared buffers; the datasets"
        f" ({human_size(dataset_bytes)}) are at least twice the DB host's memory"
        f" ({human_size(memory_bytes)})"
    )


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def from_run(
    pg_stat: Mapping[str, Any] | None,
    facts: Mapping[str, Any],
    samples: Iterable[Sample],
    devices: Iterable[str],
) -> dict[str, Any] | None:
    """The verdict of one run as its stored fact ``cache``: from the client databases'
    counters before and after it (``{"before": rows, "after": rows}``), the run's facts
    (dataset sizes, DB memory, client hosts) and its drive telemetry. None when the
    counters or the sizes are missing."""
    sizes = facts.get("db_sizes_bytes") or {}
    memory = facts.get("db_memory_bytes")
    if pg_stat is None or not sizes or not memory:
        return None
    keep = {f"drivelab_{h}" for h in facts.get("client_hosts") or []}
    before = {k: v for k, v in counters(pg_stat["before"]).items() if k in keep}
    after = {k: v for k, v in counters(pg_stat["after"]).items() if k in keep}
    v = analyse(
        before, after, drive_samples=list(samples), devices=list(devices),
        dataset_bytes=int(sum(sizes.values())), memory_bytes=int(memory),
    )  # fmt: skip
    return {
        "verdict": v.verdict,
        "reason": v.reason,
        "hit_ratio": v.hit_ratio,
        "drive_share": v.drive_share,
        "blks_read": v.blks_read,
        "blks_hit": v.blks_hit,
        "drive_read_bytes": v.drive_read_bytes,
        "dataset_bytes": v.dataset_bytes,
        "memory_bytes": v.memory_bytes,
        "clients": {
            c.client: {"hit_ratio": c.hit_ratio, "blks_read": c.blks_read} for c in v.clients
        },
    }
