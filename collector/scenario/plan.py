"""Rough time estimates of the cells, and the plan printed before a run."""

from __future__ import annotations

from typing import Any

from collector.scenario.matrix import PlannedCell
from collector.scenario.schema import FIO_DEFAULT_JOBS, AdaptiveRepetitions, Scenario

#: rough costs for estimate_seconds (see docs/scenarios.md)
OVERHEAD_PER_REPETITION = 25.0  # cold start, synchronized start, fetch, gather
INIT_FIXED = 10.0  # database.yml without pgbench -i
INIT_PER_SCALE_PER_HOST = 0.5  # pgbench -i, one client at a time
TPS_PER_CLIENT_GUESS = 100.0  # only for -t workloads: how long N transactions take
#: fixed part of the pre-tests: fio lays its file out, both connect and clean up
PRETEST_SECONDS = {"fio": 20.0, "pg_test_fsync": 5.0}


def init_seconds(cell: PlannedCell) -> float:
    """Rough time to place and initialise the cell's databases (pgbench -i, serially)."""
    hosts = len(cell.cell.hosts) or 1
    return INIT_FIXED + INIT_PER_SCALE_PER_HOST * cell.cell.scale * hosts


def repetition_seconds(cell: PlannedCell, overhead: float | None = None) -> float:
    """Rough time of one repetition: the pgbench run plus the per-run overhead
    (``overhead``: as calibrated on stored runs, else OVERHEAD_PER_REPETITION)."""
    opts = cell.cell.pgbench
    run = float(opts.duration) if opts.duration else opts.transactions / TPS_PER_CLIENT_GUESS
    return run + (OVERHEAD_PER_REPETITION if overhead is None else overhead)


def pretest_seconds(pretests: dict[str, Any]) -> float:
    """Rough time of a drive's pre-tests, one write cache state (layout included)."""
    if not pretests:
        return 0.0
    jobs = FIO_DEFAULT_JOBS + len(pretests.get("jobs") or ())
    fio = jobs * (pretests["runtime"] + pretests["ramp"]) + PRETEST_SECONDS["fio"]
    fio = fio if pretests["fio"] else 0
    fsync = 16 * pretests["fsync_seconds"] + PRETEST_SECONDS["pg_test_fsync"]
    return fio + (fsync if pretests["pg_test_fsync"] else 0)


def runs_at_most(cell: PlannedCell) -> int:
    """The most runs of a cell: its repetitions (adaptive: ``max``), or for a searched
    cell its most steps (one run each)."""
    if cell.search is not None:
        return cell.search.steps
    return cell.adaptive.max if cell.adaptive else cell.repetitions


def estimate_seconds(cell: PlannedCell, overhead: float | None = None) -> float:
    """Rough: repetitions x (duration + overhead, 25 s unless calibrated) + database init
    + pretests + its drive's steady-state rounds at most (adaptive: at most; a searched
    cell: its most steps)."""
    reps = runs_at_most(cell)
    pre = pretest_seconds(cell.pretests) + cell.state_seconds
    return reps * repetition_seconds(cell, overhead) + init_seconds(cell) + pre


def _duration_text(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def _settings_text(settings: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items()) or "PostgreSQL's defaults"


def _settings_lines(s: Scenario) -> list[str]:
    """The PostgreSQL settings of every cell, and each set (its cells are named -pg<set>)."""
    pg = s.postgresql
    out = []
    if pg.settings:
        base = {k: v for k, v in pg.variants()[0][1].items() if k in pg.settings}
        out.append(f"PostgreSQL settings of every cell: {_settings_text(base)}")
    for name, items in pg.sets.items():
        given = {k: v for k, v in dict(pg.variants())[name].items() if k in items}
        out.append(f"PostgreSQL set {name}: {_settings_text(given)}")
    return out


def _search_lines(s: Scenario, cells: list[PlannedCell]) -> list[str]:
    """What a searched cell does, its most steps and its longest time."""
    t = s.workload.target
    searched = [c for c in cells if c.search is not None]
    if t is None or not searched:
        return []
    first = searched[0].search
    assert first is not None  # noqa: S101  (filtered above)
    start = f"from {t.low}/s" if t.low is not None else f"from {first.start}/s (default)"
    up = f", then {t.high}/s" if t.high is not None else ""
    longest = max(c.search.steps * repetition_seconds(c) for c in searched if c.search is not None)
    return [
        f"rate search per cell: the highest total rate with p99 <= {t.p99_ms:g} ms over",
        "  the window where all clients ran, the rate sustained, every client complete;",
        f"  {start}{up}; double or halve to a bracket, bisect to within {t.within_pct:g} %;",
        f"  at most {t.steps} steps of one run each (repetitions do not apply),",
        f"  at most {_duration_text(longest)} per cell (reps <=N: the most steps)",
    ]


def _rate_lines(s: Scenario) -> list[str]:
    """The rate steps and the latency limit, as the scenario gives them."""
    w = s.workload
    out = []
    if any(w.rate):
        steps = ", ".join(f"{r:,}" if r else "unthrottled" for r in w.rate)
        how = (
            "in all, split evenly over each cell's client hosts"
            if w.rate_per == "total"
            else "per client host"
        )
        out.append(
            f"rate (pgbench -R, transactions/s): {steps} {how}; cells are named by -R per host"
        )
    if w.latency_limit:
        out.append(f"latency limit (pgbench -L): {w.latency_limit} ms")
    return out


def plan_text(
    s: Scenario,
    cells: list[PlannedCell],
    hosts_by_count: bool = False,
    calibration: tuple[float, int] | None = None,
) -> str:
    """The plan as printed before a run: every cell in order, its repetitions and estimate.
    ``hosts_by_count``: the hosts column says how many (a plan made without an inventory).
    ``calibration``: (seconds per repetition beyond pgbench's, runs it was measured on)."""
    overhead = calibration[0] if calibration else None
    size = f" (size {s.size})" if s.size else ""
    w = s.workload
    length = f"-T {w.duration}" if w.duration else f"-t {w.transactions}"
    if isinstance(s.repetitions, AdaptiveRepetitions):
        a = s.repetitions.adaptive
        reps = f"{a.min} to {a.max} repetitions (until the 95% CI is within {a.target_ci_pct:g}%)"
    else:
        reps = f"{s.repetitions} repetition" + ("s" if s.repetitions != 1 else "")
    if w.target is not None:
        reps = f"a rate search of at most {w.target.steps} steps"
    total = sum(estimate_seconds(c, overhead) for c in cells)
    searched = w.target is not None
    bound = "at most " if isinstance(s.repetitions, AdaptiveRepetitions) or searched else "about "
    lines = [
        f"scenario {s.name}{size}: {len(cells)} cells x {reps}",
        f"pgbench {' | '.join(f'-c {c} -j {j}' for c, j in w.pairs())} {length} ({w.mode})"
        + " per client host"
        + (f", baseline {s.baseline}" if s.baseline else "")
        + f", {s.retries} retr{'y' if s.retries == 1 else 'ies'}",
    ]
    lines += _rate_lines(s)
    lines += _settings_lines(s)
    lines += _search_lines(s, cells)
    width = max((len(c.cell_id) for c in cells), default=4)
    lines.append(f"{'#':>5}  {'cell':<{width}}  {'hosts':<18}  {'reps':>4}  estimate")
    for c in cells:
        extra = []
        hosts = ",".join(c.cell.hosts)
        if hosts_by_count:
            n = len(c.cell.hosts)
            hosts = f"{n} client host" + ("s" if n != 1 else "")
        hosts = hosts if len(hosts) <= 18 else f"{hosts[:15]}..."
        rep = f"{c.adaptive.min}-{c.adaptive.max}" if c.adaptive else str(c.repetitions)
        if c.search is not None:
            rep = f"<={c.search.steps}"
        req = c.drive_request[0]
        if req["raid_level"] != "none":
            extra.append(f"{req['raid_method']} {req['raid_level']} of {'+'.join(req['drives'])}")
        if c.write_cache != "leave":
            extra.append(f"write cache {c.write_cache}")
        if c.pretests:
            extra.append(
                "pretests " + "+".join(k for k in ("fio", "pg_test_fsync") if c.pretests[k])
            )
        note = f"  ({'; '.join(extra)})" if extra else ""
        lines.append(
            f"{c.index:>2}/{c.total:<2}  {c.cell_id:<{width}}  {hosts:<18}  {rep:>4}  "
            f"{_duration_text(estimate_seconds(c, overhead))}{note}"
        )
    lines.append(
        f"a repetition beyond pgbench's time: {calibration[0]:.1f} s (median of"
        f" {calibration[1]} stored runs)"
        if calibration
        else f"a repetition beyond pgbench's time: {OVERHEAD_PER_REPETITION:g} s (no stored runs)"
    )
    lines.append(f"estimated duration: {bound}{_duration_text(total)}")
    return "\n".join(lines)


def plan_doc(
    s: Scenario, cells: list[PlannedCell], calibration: tuple[float, int] | None = None
) -> dict[str, Any]:
    """The plan as data (``drivelab run --dry-run --json``): every cell in run order with
    what it is and its estimate in seconds, and the total."""
    overhead = calibration[0] if calibration else None
    bounded = isinstance(s.repetitions, AdaptiveRepetitions) or s.workload.target is not None
    return {
        "scenario": s.name,
        "size": s.size,
        "estimated_seconds": round(sum(estimate_seconds(c, overhead) for c in cells), 1),
        "overhead_per_repetition_seconds": OVERHEAD_PER_REPETITION
        if overhead is None
        else overhead,
        "calibrated_on_runs": calibration[1] if calibration else 0,
        "estimate_is": "at most" if bounded else "about",
        "cells": [
            {
                "index": c.index,
                "cell": c.cell_id,
                "drive": c.cell.drive,
                "scale": c.cell.scale,
                "hosts": list(c.cell.hosts),
                "repetitions": c.repetitions,
                "repetitions_at_most": runs_at_most(c),
                "rate_search": c.search is not None,
                "write_cache": c.write_cache,
                "raid": c.drive_request[0]["raid_level"],
                "pretests": sorted(k for k in ("fio", "pg_test_fsync") if c.pretests.get(k)),
                "estimated_seconds": round(estimate_seconds(c, overhead), 1),
            }
            for c in cells
        ],
    }
