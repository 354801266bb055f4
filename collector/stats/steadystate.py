"""Steady state as SNIA's Solid State Storage Performance Test Specification (PTS)
defines it, on a series of rounds of one tracking figure (IOPS of a fixed workload).

The drive is in steady state at the first round that ends a *measurement window* (the
last ``window`` rounds, five in the PTS) in which both hold:

- **range**: the largest and the smallest figure of the window differ by no more than
  ``range_pct`` (20) % of the window's mean;
- **slope**: the least-squares line fitted through the window's figures (round number
  against figure) moves across the window, from its first round to its last, by no
  more than ``excursion_pct`` (10) % of the window's mean.

Pure: figures in, a verdict out. The rounds themselves are the drive stage's
(``drive_state.steady_state``, docs/drives.md); fio's own ``steadystate=iops:20%`` is
the range rule alone, its ``iops_slope`` a slope per second, so drivelab judges the
stored rounds itself, the PTS way, and keeps every round's figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """The PTS rule: a window of ``window`` rounds, ``range_pct`` and ``excursion_pct``
    of the window's mean."""

    window: int = 5
    range_pct: float = 20.0
    excursion_pct: float = 10.0


@dataclass(frozen=True)
class Window:
    """One measurement window judged: its last round (1-based), mean, range and the
    fitted line's excursion (both as fractions of the mean)."""

    last_round: int
    mean: float
    range_frac: float
    excursion_frac: float
    rule: Rule

    @property
    def range_ok(self) -> bool:
        return self.range_frac <= self.rule.range_pct / 100

    @property
    def slope_ok(self) -> bool:
        return self.excursion_frac <= self.rule.excursion_pct / 100

    @property
    def holds(self) -> bool:
        return self.range_ok and self.slope_ok

    def words(self) -> str:
        """``range 8.1 % and excursion 3.0 % of the mean 5,120`` (what was measured)."""
        return (
            f"range {self.range_frac * 100:.1f} % and excursion {self.excursion_frac * 100:.1f} %"
            f" of the mean {self.mean:,.0f} over rounds {self.last_round - self.rule.window + 1}"
            f"-{self.last_round}"
        )


def judge(values: Sequence[float], last_round: int, rule: Rule = Rule()) -> Window:
    """The window of ``rule.window`` rounds ending at ``last_round`` (1-based) of
    ``values``. Raises ValueError when there are not that many rounds, or the window's
    mean is not above zero (a drive that did nothing is in no state)."""
    n = rule.window
    if n < 2 or last_round < n or last_round > len(values):
        raise ValueError(f"a window of {n} rounds needs rounds {last_round - n + 1}-{last_round}")
    y = [float(v) for v in values[last_round - n : last_round]]
    mean = sum(y) / n
    if mean <= 0:
        raise ValueError(f"rounds {last_round - n + 1}-{last_round}: mean {mean}, not above 0")
    x_mean = (n - 1) / 2
    sxx = sum((i - x_mean) ** 2 for i in range(n))
    slope = sum((i - x_mean) * (v - mean) for i, v in enumerate(y)) / sxx
    return Window(
        last_round=last_round,
        mean=mean,
        range_frac=(max(y) - min(y)) / mean,
        excursion_frac=abs(slope) * (n - 1) / mean,
        rule=rule,
    )


@dataclass(frozen=True)
class Verdict:
    """Steady at ``round`` (the first window that holds), or not steady after all the
    rounds given; ``last`` is the window that decided (None: fewer rounds than a window)."""

    steady: bool
    round: int | None
    rounds: int
    last: Window | None

    def words(self) -> str:
        if self.steady and self.last is not None:
            return f"steady after {self.round} rounds ({self.last.words()})"
        if self.last is None:
            return f"not steady: {self.rounds} rounds, fewer than a window"
        why = [] if self.last.range_ok else ["range"]
        why += [] if self.last.slope_ok else ["slope"]
        return (
            f"not steady after {self.rounds} rounds (the last window fails on"
            f" {' and '.join(why)}: {self.last.words()})"
        )


def first_steady(values: Sequence[float], rule: Rule = Rule()) -> Verdict:
    """The first round at which the window ending there holds, or the verdict on the
    last window when none does."""
    last = None
    for end in range(rule.window, len(values) + 1):
        last = judge(values, end, rule)
        if last.holds:
            return Verdict(True, end, len(values), last)
    return Verdict(False, None, len(values), last)
