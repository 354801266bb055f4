"""The rate search (``workload.target``): the highest total rate a cell sustains with
its p99 latency at or under a target, found by bisection. Pure logic: the runner
(:mod:`collector.run.conductor`) runs the rate :func:`next_step` asks for, turns the
stored run into an :class:`Observation` and asks again, until it answers with a
:class:`SearchResult`.

The state is nothing but the observations so far (in the order run): the next
rate is a function of them and the :class:`SearchSpec`, so a search killed mid-way
and started again reads its stored steps back and goes on where it stopped, and a
target changed since re-judges the stored steps against the new one.

The rules (docs/scenarios.md, "Searching the sustained rate"):

* A rate **holds** when the run is complete (no client partial or failed), its p99
  over the window where all clients ran is at or under the target, and the rate was
  sustained (:func:`collector.parse.lag.read_lag`: the schedule lag did not grow,
  at most 1 % skipped under ``-L``, the rate asked scheduled). Anything else **breaks** it.
* The bracket: ``holds_at``, the highest rate that holds below ``breaks_at``, the
  lowest rate that breaks. A rate that holds above a lower one that broke (noise near
  the edge) does not move the bracket: the lowest break wins, and the result says so.
* Confirming a break: the top of a bracket (the lowest break, above a rate that held)
  that broke once, by its p99 alone (complete, the rate sustained), is run again at
  once, before the search builds on it (``why`` "confirm"). The noise of a short step is
  one-sided (an fsync stall, a checkpoint, a neighbour on the CPU only add latency), so
  a rate that held in any of its runs holds; one that broke and then held is named in
  the result as noisy, and the search goes on above it. A break by a growing lag or an
  incomplete run is believed while the search goes on, but the search does not end on
  it: the bracket's top that broke so once is run again before the result (CI, 56bb97e:
  34/s broke with p99 2.6 s, the search ended on it at 26/s, and 40/s then held twice at
  p99 25 and 6 ms). On the lab one 8 s step at 72/s broke at p99 696 ms where 84/s then
  held at 126 ms; in another search 56/s broke and then held.
* A break right after an overload (the run before it fell behind its rate: complete,
  the lag growing) may be the overload's aftermath, not this rate's: the bracket's top
  that broke only in such runs is run again once a step has held (``why`` "confirm";
  the search bisects below it meanwhile, and when the bracket cannot be split a rate
  that held once is run again first, the sustained rate if it can be, ``why`` "again").
  With one step left, or no rate to run again (each run twice already), it is run again
  at once: a search does not end on such a break unconfirmed. On the lab (CI, settled
  steps) 56/s broke right after 160/s fell behind, 34 and 44 held, and 66/s held twice
  later; in another CI search 72/s broke by its p99 right after 94/s fell behind, with
  56/s (the sustained rate) run twice already, and was left unconfirmed: now it is run
  again. Whether a run came right after an overload depends on the order of the runs,
  so the observations are given in the order run.
* Finding a bracket: the first step runs ``low`` (default :data:`DEFAULT_LOW`); while
  nothing broke, the next is ``high`` when given and not run yet, else twice the
  highest hold; while nothing held, half the lowest break, down to one transaction per
  second per client host.
* Bisecting: the geometric mean of the bracket (rates span decades; the stop rule is a
  ratio), rounded to a whole rate per client host.
* Stopping: the bracket is narrow, ``holds_at >= breaks_at x (1 - within_pct / 100)``
  (default 10 %: the sustained rate reported is within 10 % of the rate that broke, so
  it is at most 10 % under the drive's true edge, which lies between them), or the
  bracket cannot be split at a whole rate per host (either: with its top confirmed when
  it broke by its p99), or ``steps`` runs were made (a confirmation is a step; the
  status is then still "converged" if the bracket is narrow)
  (default :data:`DEFAULT_STEPS`, at most :data:`MAX_STEPS`), or the lowest rate
  breaks, or the highest rate drivelab allows holds.

Rates are totals over all client hosts (each host runs ``pgbench -R total/hosts``), in
whole multiples of the host count (``quantum``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: first total rate (transactions/s over all client hosts) when ``low`` is not given
DEFAULT_LOW = 100
#: most steps (runs) of one search when ``steps`` is not given, and the hard bound
DEFAULT_STEPS = 12
MAX_STEPS = 24
#: the search stops when the sustained rate is within this many percent of the break
DEFAULT_WITHIN_PCT = 10.0
#: the highest total rate a search runs (the schema's -R bound per host is 10^7)
MAX_RATE = 10_000_000

#: the scenario fact (its key and scope) a search's result is stored as, one per search
#: (the latest per searched cell counts: ``SearchResult.to_json()`` with the cell's names)
FACT = "rate_search"

#: how a search ended (``SearchResult.status``)
CONVERGED = "converged"  # the bracket within within_pct, or not splittable further
STEPS_EXHAUSTED = "steps exhausted"  # a bracket, wider than asked, after the most steps
NO_BREAK = "no break"  # every rate run held (steps exhausted or the highest rate)
NO_HOLD = "no hold"  # every rate run broke (the lowest rate, or steps exhausted)


@dataclass(frozen=True)
class SearchSpec:
    """What to search for, with the bounds (rates: totals over all client hosts)."""

    p99_ms: float
    low: int | None = None
    high: int | None = None
    steps: int = DEFAULT_STEPS
    within_pct: float = DEFAULT_WITHIN_PCT
    #: rates are whole multiples of this (the number of client hosts)
    quantum: int = 1

    def __post_init__(self) -> None:
        if not self.p99_ms > 0:
            raise ValueError(f"p99_ms must be greater than 0 (got {self.p99_ms})")
        if not 1 <= self.steps <= MAX_STEPS:
            raise ValueError(f"steps must be 1 to {MAX_STEPS} (got {self.steps})")
        if not 0 < self.within_pct <= 100:
            raise ValueError(f"within_pct must be above 0 and at most 100 (got {self.within_pct})")
        if self.quantum < 1:
            raise ValueError(f"quantum must be at least 1 (got {self.quantum})")
        if self.low is not None and self.high is not None and self.high <= self.low:
            raise ValueError(f"high ({self.high}) must be above low ({self.low})")

    @property
    def lowest(self) -> int:
        """The lowest rate a search runs: one transaction per second per host."""
        return self.quantum

    @property
    def highest(self) -> int:
        return MAX_RATE - MAX_RATE % self.quantum

    def rate(self, value: float) -> int:
        """``value`` as a rate the hosts can run: the nearest whole multiple of
        ``quantum`` (halves up), within [lowest, highest]."""
        q = self.quantum
        return min(max(math.floor(value / q + 0.5) * q, self.lowest), self.highest)

    @property
    def start(self) -> int:
        return self.rate(self.low if self.low is not None else DEFAULT_LOW)


@dataclass(frozen=True)
class Observation:
    """One step as stored: the total rate run, its p99 over the window where all clients
    ran (ms; None without a transaction in it), whether the rate was sustained (the lag
    reading; None when it could not tell), whether every client completed, and why not."""

    rate: int
    p99_ms: float | None
    sustained: bool | None
    complete: bool
    reason: str | None = None

    def verdict(self, target_ms: float) -> tuple[bool, str]:
        """(holds, why) against ``target_ms``."""
        if not self.complete:
            return False, f"not complete: {self.reason or 'a client did not finish'}"
        if self.p99_ms is None:
            return False, "no transaction in the window where all clients ran"
        if self.p99_ms > target_ms:
            return False, f"p99 {self.p99_ms:.1f} ms > {target_ms:g} ms"
        if self.sustained is False:
            return False, f"p99 {self.p99_ms:.1f} ms, but {self.reason or 'rate not sustained'}"
        lag = "" if self.sustained else " (lag not read)"
        return True, f"p99 {self.p99_ms:.1f} ms <= {target_ms:g} ms, rate sustained{lag}"


def observation(
    rate: int, window: Mapping[str, Any] | None, complete: bool, reason: str | None = None
) -> Observation:
    """An :class:`Observation` from a run's ``latency_window`` fact (``p99_ms`` and
    ``lag``: the lag reading, ``{"sustained": bool, "reason": str}`` or None) and its
    status. No window (no per-transaction log read): no p99."""
    window = window or {}
    lag = window.get("lag") or {}
    sustained = lag.get("sustained") if isinstance(lag, Mapping) else None
    why = reason
    if complete and sustained is False:
        why = lag.get("reason") or "rate not sustained"
    p99 = window.get("p99_ms")
    return Observation(
        rate=rate,
        p99_ms=float(p99) if isinstance(p99, (int, float)) else None,
        sustained=sustained if isinstance(sustained, bool) else None,
        complete=complete,
        reason=why,
    )


@dataclass(frozen=True)
class Step:
    """One observation as the search judged it."""

    rate: int
    holds: bool
    why: str
    p99_ms: float | None
    #: how many times the rate was run (2: a break confirmed, or one that then held)
    runs: int = 1
    #: it broke, every time by its p99 alone (complete, the rate sustained)
    p99_only: bool = False
    #: it broke, every time in a run right after an overload (a run that fell behind its
    #: rate): a break that may be the overload's aftermath, not this rate's
    after_overload: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "rate": self.rate, "holds": self.holds, "why": self.why, "p99_ms": self.p99_ms,
            "runs": self.runs, "p99_only": self.p99_only, "after_overload": self.after_overload,
        }  # fmt: skip


@dataclass(frozen=True)
class SearchResult:
    """How a search ended: the sustained rate (``holds_at``; None when no rate held),
    the bracket it was found in, the steps run and why it stopped."""

    p99_ms: float
    status: str
    holds_at: int | None
    breaks_at: int | None
    steps: tuple[Step, ...] = field(default_factory=tuple)
    within_pct: float = DEFAULT_WITHIN_PCT
    max_steps: int = DEFAULT_STEPS
    #: rates that held above ``breaks_at`` (noise near the edge; the lowest break wins)
    held_above_break: tuple[int, ...] = ()
    #: rates that broke, then held when run again (noise near the edge; they hold)
    held_when_confirmed: tuple[int, ...] = ()

    @property
    def sustained_rate(self) -> int | None:
        return self.holds_at

    @property
    def runs(self) -> int:
        """The steps run: one per rate, two for a rate run again to confirm it."""
        return sum(s.runs for s in self.steps)

    @property
    def confirmed(self) -> bool:
        """The bracket's top broke in two runs."""
        top = next((s for s in self.steps if s.rate == self.breaks_at), None)
        return top is not None and top.runs > 1 and not top.holds

    @property
    def text(self) -> str:
        """One line: ``sustained 180/s total (holds at 180, breaks at 200; 6 steps)``."""
        n = self.runs
        steps = f"{n} step" + ("s" if n != 1 else "")
        noise = ""
        if self.held_when_confirmed:
            rates = ", ".join(str(r) for r in self.held_when_confirmed)
            noise += f"; {rates} broke once, then held: noisy near the edge"
        if self.held_above_break:
            rates = ", ".join(str(r) for r in self.held_above_break)
            noise += f"; held again at {rates}, above the break: noisy near the edge"
        target = f"p99 <= {self.p99_ms:g} ms"
        if self.status == CONVERGED:
            twice = " twice" if self.confirmed else ""
            return (
                f"sustained {self.holds_at}/s total at {target} (holds at {self.holds_at},"
                f" breaks at {self.breaks_at}{twice}; {steps}{noise})"
            )
        if self.status == STEPS_EXHAUSTED:
            width = 1 - (self.holds_at or 0) / (self.breaks_at or 1)
            return (
                f"sustained {self.holds_at}/s total at {target} (holds at {self.holds_at},"
                f" breaks at {self.breaks_at}; {steps}, the most: bracket {width:.0%} wide,"
                f" wider than {self.within_pct:g} %{noise})"
            )
        if self.status == NO_BREAK:
            return (
                f"sustained at least {self.holds_at}/s total at {target} (held at every rate"
                f" run, up to {self.holds_at}; no break found in {steps})"
            )
        return (
            f"no rate sustained at {target} (breaks at {self.breaks_at}/s total, the lowest"
            f" rate run; {steps})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "p99_ms": self.p99_ms,
            "status": self.status,
            "sustained_rate": self.holds_at,
            "holds_at": self.holds_at,
            "breaks_at": self.breaks_at,
            "steps": [s.to_json() for s in self.steps],
            "within_pct": self.within_pct,
            "max_steps": self.max_steps,
            "held_above_break": list(self.held_above_break),
            "held_when_confirmed": list(self.held_when_confirmed),
            "runs": self.runs,
            "break_confirmed": self.confirmed,
            "text": self.text,
        }


@dataclass(frozen=True)
class Decision:
    """The next total rate to run, or (``rate`` None) the result."""

    rate: int | None
    result: SearchResult | None = None
    #: why this rate: "start", "high", "double", "halve", "bisect", "confirm" (the
    #: bracket's top run again), "again" (the sustained rate run again, so that the top's
    #: confirmation follows a hold)
    why: str = ""

    @property
    def again(self) -> bool:
        """A rate run a second time (the step cell's repetition 1)."""
        return self.why in ("confirm", "again")


def overload(obs: Observation) -> bool:
    """A run that fell behind its rate (complete, the lag grew): the drive was overloaded
    and may still be paying for it when the next run starts."""
    return obs.complete and obs.sustained is False


def judge(spec: SearchSpec, observations: Iterable[Observation]) -> list[Step]:
    """The observations (in the order run) as steps, one per rate, in the order first
    run. A rate run more than once holds when any of its runs held (that run's reading),
    and breaks when all broke (the latest reading); its ``why`` says what the other runs
    gave."""
    observations = list(observations)
    by_rate: dict[int, list[Observation]] = {}
    shadowed: dict[int, list[bool]] = {}
    for i, obs in enumerate(observations):
        by_rate.setdefault(obs.rate, []).append(obs)
        shadowed.setdefault(obs.rate, []).append(i > 0 and overload(observations[i - 1]))
    out = []
    for rate, seen in by_rate.items():
        verdicts = [(obs, *obs.verdict(spec.p99_ms)) for obs in seen]
        held = [v for v in verdicts if v[1]]
        obs, holds, why = held[-1] if held else verdicts[-1]
        for other, other_holds, other_why in verdicts:
            if other is not obs:
                said = "also held" if other_holds else "broke once" if holds else "also broke"
                why += f"; {said}: {other_why}"
        p99_only = not holds and all(
            o.complete and o.sustained is not False and o.p99_ms is not None for o in seen
        )
        after = not holds and all(shadowed[rate])
        if after:
            why += " (right after an overload)"
        out.append(
            Step(rate, holds, why, obs.p99_ms, runs=len(seen), p99_only=p99_only,
                 after_overload=after)
        )  # fmt: skip
    return out


def next_step(spec: SearchSpec, observations: Iterable[Observation]) -> Decision:
    """The next rate to run given the observations so far, or the result (module doc)."""
    observations = list(observations)
    steps = judge(spec, observations)
    breaks = [s.rate for s in steps if not s.holds]
    breaks_at = min(breaks) if breaks else None
    below = [s.rate for s in steps if s.holds and (breaks_at is None or s.rate < breaks_at)]
    holds_at = max(below) if below else None
    noisy = tuple(sorted(s.rate for s in steps if s.holds and breaks_at and s.rate > breaks_at))
    status, nxt = _bracket_next(spec, holds_at, breaks_at)
    top = next((s for s in steps if s.rate == breaks_at), None)
    if holds_at is not None and top is not None and top.runs < 2:
        last_held = bool(observations) and observations[-1].verdict(spec.p99_ms)[0]
        left = spec.steps - len(observations)
        if top.after_overload:
            # its break may be the overload's: run it again once a step has held (the
            # search goes on below it meanwhile; with nothing left below, a rate that held
            # once is run again first, the sustained rate if it can be). The last step
            # left, or no such rate, confirms it at once
            spacer = max(
                (s.rate for s in steps if s.holds and s.rate < top.rate and s.runs < 2),
                default=None,
            )
            if last_held or left < 2 or (nxt is None and spacer is None):
                nxt = Decision(top.rate, why="confirm")
            elif nxt is None:
                nxt = Decision(spacer, why="again")
        elif top.p99_only:
            # the top of the bracket broke once, by its p99 alone: run it again before the
            # search builds on it (the noise of a short step is one-sided)
            nxt = Decision(top.rate, why="confirm")
        elif nxt is None:
            # any other break (its lag grew, a client failed) is believed while the
            # search goes on, but the search does not end on it unconfirmed
            nxt = Decision(top.rate, why="confirm")
    if nxt is not None and len(observations) >= spec.steps:
        nxt = None
        if holds_at is not None and breaks_at is not None:
            narrow = _bisect(spec, holds_at, breaks_at) is None
            status = CONVERGED if narrow else STEPS_EXHAUSTED
        else:
            status = NO_BREAK if holds_at is not None else NO_HOLD
    if nxt is not None:
        return nxt
    broke = {o.rate for o in observations if not o.verdict(spec.p99_ms)[0]}
    result = SearchResult(
        p99_ms=spec.p99_ms, status=status, holds_at=holds_at, breaks_at=breaks_at,
        steps=tuple(steps), within_pct=spec.within_pct, max_steps=spec.steps,
        held_above_break=noisy,
        held_when_confirmed=tuple(s.rate for s in steps if s.holds and s.rate in broke),
    )  # fmt: skip
    return Decision(None, result)


def _bracket_next(
    spec: SearchSpec, holds_at: int | None, breaks_at: int | None
) -> tuple[str, Decision | None]:
    """(how the search ends if it ends here, the next step or None)."""
    if holds_at is not None and breaks_at is not None:
        return CONVERGED, _bisect(spec, holds_at, breaks_at)
    if holds_at is not None:
        return NO_BREAK, _up(spec, holds_at)
    if breaks_at is not None:
        return NO_HOLD, _down(spec, breaks_at)
    return NO_HOLD, Decision(spec.start, why="start")


def _bisect(spec: SearchSpec, holds_at: int, breaks_at: int) -> Decision | None:
    """The bracket's geometric mean; None when it is narrow (``within_pct``) or holds
    no whole rate per host."""
    if holds_at >= breaks_at * (1 - spec.within_pct / 100) - 1e-9:
        return None
    mid = spec.rate(math.sqrt(holds_at * breaks_at))
    mid = min(max(mid, holds_at + spec.quantum), breaks_at - spec.quantum)
    return Decision(mid, why="bisect") if mid > holds_at else None


def _up(spec: SearchSpec, holds_at: int) -> Decision | None:
    """Everything run held: ``high`` (once), else twice the highest hold."""
    if holds_at >= spec.highest:
        return None
    high = None if spec.high is None else spec.rate(spec.high)
    if high is not None and high > holds_at:
        return Decision(high, why="high")
    return Decision(spec.rate(holds_at * 2), why="double")


def _down(spec: SearchSpec, breaks_at: int) -> Decision | None:
    """Nothing held below the lowest break: half of it, down to the lowest rate."""
    if breaks_at <= spec.lowest:
        return None
    return Decision(min(spec.rate(breaks_at / 2), breaks_at - spec.quantum), why="halve")
