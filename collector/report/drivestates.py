"""What a report says of the state each cell's drive was brought to first
(``drive_state``, docs/drives.md): from the device facts its runs stored (the module
drive_state's figures: the purge, the precondition, every steady-state round), each
state's rounds judged again by the PTS rule (:mod:`collector.stats.steadystate`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collector.report import ScenarioView
from collector.stats.steadystate import Rule, first_steady
from collector.units import human_size


def state_words(state: Mapping[str, Any]) -> str:
    """``purged (discard), preconditioned (8.0 GiB written in 12 s, 690.0 MiB/s), steady
    after 7 rounds (range 2.5 % and excursion 1.3 % of the mean 6,016 over rounds 3-7)``."""
    said = []
    purge = state.get("purge")
    if isinstance(purge, Mapping):
        said.append(f"purged ({purge.get('how')}, {float(purge.get('seconds') or 0):.1f} s)")
    pre = state.get("precondition")
    if isinstance(pre, Mapping):
        rate = human_size(float(pre.get("bw_bytes") or 0))
        said.append(
            f"preconditioned ({human_size(float(pre.get('io_bytes') or 0))} written in"
            f" {float(pre.get('seconds') or 0):.0f} s, {rate}/s)"
        )
    ss = state.get("steady_state")
    if isinstance(ss, Mapping):
        iops = [float(r.get("iops") or 0) for r in ss.get("rounds") or () if isinstance(r, Mapping)]
        given = ss.get("rule") if isinstance(ss.get("rule"), Mapping) else {}
        rule = Rule(**{k: v for k, v in given.items() if k in Rule.__annotations__})
        said.append(first_steady(iops, rule).words() + f"; IOPS by round {_rounds(iops)}")
    return ", ".join(said) or "as found (nothing written to it first)"


def _rounds(iops: list[float]) -> str:
    return " ".join(f"{v:,.0f}" for v in iops)


def state_lines(view: ScenarioView) -> list[str]:
    """One line per cell whose drive was brought to a state: the state's name and what
    its latest run's device facts say of it."""
    by_run = {r.run_id: cv for cv in view.cells for r in cv.stats.runs if r.run_id is not None}
    latest: dict[int, tuple[int, Mapping[str, Any]]] = {}
    for f in view.facts:
        cv = by_run.get(f.run_id)
        if f.scope != "device" or cv is None or not cv.stats.spec.drive_state:
            continue
        state = f.value.get("state") if isinstance(f.value, Mapping) else None
        if isinstance(state, Mapping) and f.key == cv.drive:
            latest[id(cv)] = max(latest.get(id(cv), (-1, {})), (f.run_id or 0, state),
                                 key=lambda pair: pair[0])  # fmt: skip
    return [
        f"{cv.drive} {cv.test}: {state_words(latest[id(cv)][1])}"
        for cv in view.cells
        if id(cv) in latest
    ]
