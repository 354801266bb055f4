"""The PTS steady-state rule as the DB host applies it between rounds (module
drive_state): the window of the last ``window`` rounds holds when its range and its
fitted line's excursion are within ``range_pct`` and ``excursion_pct`` of its mean.
The controller judges the stored rounds again with collector/stats/steadystate.py, which
says why; tests/unit/test_drive_state_rules.py holds the two to the same answers."""

from __future__ import annotations


def window_holds(values, window, range_pct, excursion_pct):
    """Whether the last ``window`` of ``values`` holds (False: too few, or a mean not
    above zero)."""
    if window < 2 or len(values) < window:
        return False
    y = [float(v) for v in values[-window:]]
    mean = sum(y) / window
    if mean <= 0:
        return False
    x_mean = (window - 1) / 2
    sxx = sum((i - x_mean) ** 2 for i in range(window))
    slope = sum((i - x_mean) * (v - mean) for i, v in enumerate(y)) / sxx
    return (max(y) - min(y)) / mean <= range_pct / 100 and abs(slope) * (
        window - 1
    ) / mean <= excursion_pct / 100
