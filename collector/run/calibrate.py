"""The plan's estimate calibrated on what a results store has measured: how long a stored
complete repetition took beyond its pgbench duration (from its run folder's making to its
outputs fetched: the cold start, the synchronized start, the fetch, on this controller and
lab), the median of the latest :data:`LATEST` such runs."""

from __future__ import annotations

import statistics
from typing import Any

from collector.errors import DrivelabError
from collector.records import RunStatus
from collector.store import Store

#: how many of the store's latest complete runs the median is taken over
LATEST = 50


def repetition_overhead(db: Any) -> tuple[float, int] | None:
    """(median seconds beyond pgbench's, runs it is over), or None when the store is
    missing, empty or holds no complete run of a known duration."""
    try:
        return _calibrated(db)
    except Exception:  # a calibration never stops a plan: the 25 s guess then
        return None


def _calibrated(db: Any) -> tuple[float, int] | None:
    try:
        store = Store.open(db, create=False)
    except (DrivelabError, OSError):
        return None
    found: list[tuple[float, float]] = []
    with store:
        for info in store.scenarios():
            for cell_id, spec in store.cells(info.id):
                duration = spec.params.get("duration")
                if not isinstance(duration, int | float) or duration <= 0:
                    continue
                found += [
                    (r.ended_at, r.ended_at - r.started_at - duration)
                    for r in store.runs(cell_id)
                    if r.status == RunStatus.COMPLETE and None not in (r.started_at, r.ended_at)
                ]
    latest = [over for _, over in sorted(found)[-LATEST:] if over >= 0]
    if not latest:
        return None
    return round(statistics.median(latest), 1), len(latest)
