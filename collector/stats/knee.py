"""Where more connections stop paying: the knee of a drive's tps-against-connections
curve (``workload.clients_per_host`` as a list). Pure logic over one point per total
connection count (docs/telemetry.md, "The knee of a client sweep").

The rule: going from one count to the next, the tps gain is scaled to a doubling of the
connections (a step from 4 to 16 is two doublings: a gain g over it is (1 + g)^(1/2) - 1
per doubling). The knee is the first count after which a doubling adds less than
:data:`KNEE_GAIN` of tps while the p99 latency grows: the clients then only queue. A
curve that keeps paying has no knee (None), and neither has one whose p99 is not known.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

__all__ = ["KNEE_GAIN", "Point", "knee"]

#: below this tps gain per doubling of the connections (while the p99 grows), more
#: connections no longer pay
KNEE_GAIN = 0.10


@dataclass(frozen=True)
class Point:
    """One count of a sweep: its total connections (client hosts x ``-c``), the mean tps
    over its complete runs, and its p99 latency in seconds (None: not known)."""

    connections: int
    tps: float
    p99_s: float | None


def gain_per_doubling(a: Point, b: Point) -> float:
    """The tps gain from ``a`` to ``b``, scaled to one doubling of the connections."""
    doublings = math.log2(b.connections / a.connections)
    return (b.tps / a.tps) ** (1 / doublings) - 1


def knee(points: list[Point], gain: float = KNEE_GAIN) -> Point | None:
    """The knee of ``points`` (any order; one per count), or None when there is none."""
    curve = sorted(points, key=lambda p: p.connections)
    if len({p.connections for p in curve}) != len(curve):
        raise ValueError("one point per connection count")
    for a, b in itertools.pairwise(curve):
        if a.tps <= 0 or a.p99_s is None or b.p99_s is None:
            continue
        if gain_per_doubling(a, b) < gain and b.p99_s > a.p99_s:
            return a
    return None
