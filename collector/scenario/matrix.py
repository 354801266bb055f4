"""The matrix: a scenario crossed into ``PlannedCell`` s in run order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from collector.cell import Cell, PgbenchOptions
from collector.scenario.inventory import client_hosts
from collector.scenario.schema import (
    AdaptiveRepetitions,
    Filesystem,
    RaidSet,
    Scenario,
    Workload,
    placement_of,
)
from collector.stats.ratesearch import SearchSpec


@dataclass(frozen=True)
class AdaptivePolicy:
    """Repeat until the 95% CI half-width of tps is within target_ci_pct % of the mean
    (at least ``min``, at most ``max`` repetitions)."""

    target_ci_pct: float
    min: int
    max: int


@dataclass(frozen=True)
class PlannedCell:
    """One cell of the matrix and how to run it."""

    cell: Cell
    #: candidate_drive_request for playbooks/drives.yml: the cell's filesystem, and the
    #: WAL's own drive's after it (made with the same filesystem) when it has one
    drive_request: list[dict[str, Any]]
    #: candidate_drive_write_cache: leave, on or off
    write_cache: str
    #: repetitions to run (adaptive: the first ``adaptive.min``)
    repetitions: int
    adaptive: AdaptivePolicy | None
    #: the scenario's :class:`Pretests` as a dict on the first cell of each drive and
    #: filesystem (just formatted) when it asks for any, {} on the others
    pretests: dict[str, Any]
    index: int  # 1-based position in the run order
    total: int
    #: how many times a partial or failed repetition is run again in the same run
    retries: int = 1
    #: ``workload.target``: the cell's rate is searched, one run per step (its
    #: ``repetitions`` do not apply); None: the cell is run as it is
    search: SearchSpec | None = None

    @property
    def cell_id(self) -> str:
        return self.cell.cell_id


def drive_batch(cells: list[PlannedCell]) -> list[dict[str, Any]] | None:
    """The filesystems of all ``cells`` as one request for playbooks/drives.yml, made and
    mounted together before the first cell (one drives stage instead of one per drive,
    each a playbook of its own: docs/scaling.md), or None when they cannot all stand at
    once: fewer than two, a write cache to switch (a cell's own state), or a filesystem
    name or a drive asked for in two ways (one drive ext4 in a cell and xfs in another,
    or alone and in a RAID set)."""
    items: dict[str, dict[str, Any]] = {}
    owner: dict[str, str] = {}
    for planned in cells:
        if planned.write_cache != "leave":
            return None
        for item in planned.drive_request:
            name = item["name"]
            if items.setdefault(name, item) != item:
                return None
            for drive in item["drives"]:
                if owner.setdefault(drive, name) != name:
                    return None
    return list(items.values()) if len(items) > 1 else None


def _request(name: str, rset: RaidSet | None, fs: Filesystem) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "drives": list(rset.drives) if rset else [name],
            "fs": fs.fs,
            "mkfs_options": list(fs.mkfs_options),
            "mount_options": fs.mount_options,
            "raid_level": rset.level if rset else "none",
            "raid_method": rset.method if rset else "btrfs",
        }
    ]


def _pgbench(w: Workload, clients: int, threads: int) -> PgbenchOptions:
    return PgbenchOptions(
        clients_per_host=clients,
        threads=threads,
        clients_swept=len(w.clients_per_host) > 1,
        duration=w.duration or 0,
        transactions=w.transactions or 0,
        mode=w.mode,
        protocol=w.protocol,
        mix=tuple((w.mix or {}).items()),
        script=w.script,
        rate=w.rate[0],
        log=w.log,
        rate_per=w.rate_per,
        latency_limit=w.latency_limit or 0,
    )


def search_spec(w: Workload, hosts: int) -> SearchSpec | None:
    """The rate search of a cell with ``hosts`` client hosts (rates in whole multiples
    of them), or None without ``workload.target``."""
    t = w.target
    if t is None:
        return None
    return SearchSpec(p99_ms=t.p99_ms, low=t.low, high=t.high, steps=t.steps,
                      within_pct=t.within_pct, quantum=max(hosts, 1))  # fmt: skip


def expand(s: Scenario, inventory: dict[str, Any]) -> list[PlannedCell]:
    """The matrix in run order: drive (drives, then RAID sets, as listed), filesystem,
    placement, scale, hosts, clients per host, write cache, PostgreSQL set, rate; so each
    filesystem is made
    once for all the cells on it, each database initialised once for the write cache
    variants, the settings, which need only a reload or a restart, change late, and the
    rate, which changes only pgbench's ``-R``, last."""
    clients = client_hosts(inventory)
    loads = [_pgbench(s.workload, c, j) for c, j in s.workload.pairs()]
    if isinstance(s.repetitions, AdaptiveRepetitions):
        a = s.repetitions.adaptive
        adaptive: AdaptivePolicy | None = AdaptivePolicy(a.target_ci_pct, a.min, a.max)
        reps = a.min
    else:
        adaptive, reps = None, s.repetitions
    pretests = (
        {**s.pretests.model_dump(), "jobs": s.pretests.fio_jobs()} if s.pretests.enabled() else {}
    )
    variants = s.postgresql.variants()
    rows: list[tuple[Cell, list[dict[str, Any]], str, dict[str, bool]]] = []
    for name, rset in s.units():
        for fs in s.filesystems:
            if rset is not None and rset.method == "btrfs" and fs.fs != "btrfs":
                continue  # native Btrfs RAID is a Btrfs filesystem
            first = True
            for data, wal in map(placement_of, s.placement):
                if wal == name:
                    continue  # data and WAL on one drive: that is placement cluster
                request = _request(name, rset, fs) + (_request(wal, None, fs) if wal else [])
                for scale in s.workload.scale:
                    for count, pgbench in ((n, p) for n in s.hosts for p in loads):
                        for wc in s.write_cache:
                            for set_name, pg_settings, rate in (
                                (n, st, r) for n, st in variants for r in s.workload.rate
                            ):
                                load = pgbench.at_rate(rate, s.workload.rate_per, count)
                                cell = Cell(
                                    scenario=s.name,
                                    drive=name,
                                    filesystem=fs.fs,
                                    filesystem_name=fs.name,
                                    placement=data,
                                    wal_drive=wal,
                                    scale=scale,
                                    hosts=tuple(clients[:count]),
                                    pgbench=load,
                                    init_options=tuple(s.workload.init_options),
                                    write_cache=wc,
                                    mkfs_options=tuple(fs.mkfs_options),
                                    mount_options=fs.mount_options,
                                    pg_settings_name=set_name,
                                    pg_settings=pg_settings,
                                )
                                rows.append((cell, request, wc, pretests if first else {}))
                                first = False
    ids = [cell.cell_id for cell, *_ in rows]
    # the schema makes every dimension unique, so this is a bug in drivelab, not the file
    assert len(ids) == len(set(ids)), f"cell ids collide in {s.name}: {ids}"  # noqa: S101
    total = len(rows)
    return [
        PlannedCell(
            cell=cell,
            drive_request=request,
            write_cache=wc,
            repetitions=reps,
            adaptive=adaptive,
            pretests=dict(pre),
            index=i,
            total=total,
            retries=s.retries,
            search=search_spec(s.workload, len(cell.hosts)),
        )
        for i, (cell, request, wc, pre) in enumerate(rows, start=1)
    ]
