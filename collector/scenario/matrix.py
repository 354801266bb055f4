"""The matrix: a scenario crossed into ``PlannedCell`` s in run order."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from collector.cell import Cell, PgbenchOptions
from collector.scenario.drivestate import DriveState
from collector.scenario.inventory import client_hosts
from collector.scenario.rules import HOST_RULES
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
    #: the most seconds its drive's steady-state rounds take (``drive_state``), on the
    #: first cell of each drive and state (the precondition's writes come on top)
    state_seconds: float = 0.0

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


def nodiscard(fs: str, options: list[str]) -> list[str]:
    """``options`` with mkfs told not to discard the device first (the filesystem's row
    of the DB host's table: mke2fs ``-E nodiscard``, ``-K`` for the others): a drive just
    brought to a state by writing it would otherwise be trimmed back to fresh by its own
    mkfs. A suboption flag (``-E x``) joins the last one given: mke2fs reads only that."""
    flag = list(HOST_RULES.FILESYSTEMS[fs]["nodiscard"])
    out = list(options)
    if len(flag) == 2 and flag[0] in out[:-1]:
        at = len(out) - 1 - out[::-1].index(flag[0])
        out[at + 1] += "," + flag[1]
        return out
    return out if flag[0] in out else [*out, *flag]


def with_discard(options: str) -> str:
    """Mount options with ``discard`` (TRIM as files are freed), once."""
    words = options.split(",")
    return options if "discard" in words else ",".join([*words, "discard"])


def _request(
    name: str,
    rset: RaidSet | None,
    fs: Filesystem,
    state: DriveState | None = None,
    trim: str = "none",
) -> list[dict[str, Any]]:
    writes = state is not None and (state.precondition or state.steady_state) is not None
    item = {
        "name": name,
        "drives": list(rset.drives) if rset else [name],
        "fs": fs.fs,
        "mkfs_options": nodiscard(fs.fs, list(fs.mkfs_options))
        if writes
        else list(fs.mkfs_options),
        "mount_options": with_discard(fs.mount_options) if trim == "discard" else fs.mount_options,
        "raid_level": rset.level if rset else "none",
        "raid_method": rset.method if rset else "btrfs",
    }
    return [item | ({"drive_state": state.request()} if state is not None else {})]


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


def _filesystems(
    s: Scenario,
) -> list[tuple[str, RaidSet | None, Filesystem, DriveState | None, str]]:
    """Each filesystem to make, in run order: drive (drives, then RAID sets), filesystem,
    the drive's state (``drive_state``, none: as found), the TRIM policy (discard is a
    mount option: a filesystem mounted otherwise)."""
    return [
        (name, rset, fs, state, trim)
        for name, rset in s.units()
        for fs in s.filesystems
        # native Btrfs RAID is a Btrfs filesystem
        if rset is None or rset.method != "btrfs" or fs.fs == "btrfs"
        for state in (s.drive_state or [None])
        for trim in s.trim
    ]


def expand(s: Scenario, inventory: dict[str, Any]) -> list[PlannedCell]:
    """The matrix in run order: drive (drives, then RAID sets, as listed), filesystem,
    drive state, placement, scale, hosts, clients per host, write cache, PostgreSQL set,
    rate; so each
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
    rows: list[tuple[Cell, list[dict[str, Any]], str, dict[str, bool], float]] = []
    for name, rset, fs, state, trim in _filesystems(s):
        first = True
        for data, wal in map(placement_of, s.placement):
            if wal == name:
                continue  # data and WAL on one drive: that is placement cluster
            request = _request(name, rset, fs, state, trim) + (
                _request(wal, None, fs) if wal else []
            )
            inner = itertools.product(
                s.workload.scale, s.hosts, loads, s.write_cache, variants, s.workload.rate
            )
            for scale, count, pgbench, wc, (set_name, pg_settings), rate in inner:
                cell = Cell(
                    scenario=s.name,
                    drive=name,
                    filesystem=fs.fs,
                    filesystem_name=fs.name,
                    placement=data,
                    wal_drive=wal,
                    scale=scale,
                    hosts=tuple(clients[:count]),
                    pgbench=pgbench.at_rate(rate, s.workload.rate_per, count),
                    init_options=tuple(s.workload.init_options),
                    write_cache=wc,
                    mkfs_options=tuple(fs.mkfs_options),
                    mount_options=fs.mount_options,
                    pg_settings_name=set_name,
                    pg_settings=pg_settings,
                    drive_state=state.label if state is not None else None,
                    trim=trim,
                )
                ss = state.steady_state if state is not None and first else None
                most = float(ss.max_rounds * ss.round_seconds) if ss is not None else 0.0
                rows.append((cell, request, wc, pretests if first else {}, most))
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
            state_seconds=most,
        )
        for i, (cell, request, wc, pre, most) in enumerate(rows, start=1)
    ]
