"""``drive_state``: the state a drive is brought to before a cell's filesystem is made
(docs/drives.md, "Drive state"): purged (a discard of the whole device, or a secure
one), preconditioned (sequential writes of a multiple of its capacity), then written in
rounds until the PTS steady-state rule holds (:mod:`collector.stats.steadystate`) or a
round limit is hit. A list is an axis: each state its own cells (``-ds<name>``), the
drive made anew for each."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from collector.scenario.fields import Strict, _unique
from collector.scenario.fiomatrix import BlockSize

STATE_NAME = re.compile(r"[a-z][a-z0-9]{0,15}")


def _name(text: str) -> str:
    if not STATE_NAME.fullmatch(text):
        raise ValueError(f"{text!r} is not a state name ({STATE_NAME.pattern})")
    return text


class Precondition(Strict):
    """Sequential writes over the whole device, ``multiple`` times its capacity (the
    PTS: twice, in 128 KiB blocks)."""

    multiple: float = Field(2.0, gt=0, le=10)
    block_size: BlockSize = "128k"
    iodepth: int = Field(32, ge=1, le=256)


class SteadyState(Strict):
    """Rounds of ``round_seconds`` of one fio workload on the whole device, its IOPS the
    tracking figure, until the PTS rule holds over ``window`` rounds (range within
    ``range_pct``, fitted excursion within ``excursion_pct`` of their mean) or
    ``max_rounds`` have run."""

    pattern: Literal["randwrite", "write", "randrw"] = "randwrite"
    block_size: BlockSize = "4k"
    iodepth: int = Field(32, ge=1, le=256)
    round_seconds: int = Field(60, ge=1, le=3600)
    max_rounds: int = Field(25, ge=2, le=100)
    window: int = Field(5, ge=2, le=25)
    range_pct: float = Field(20.0, gt=0, le=100)
    excursion_pct: float = Field(10.0, gt=0, le=100)

    @model_validator(mode="after")
    def _enough_rounds(self) -> SteadyState:
        if self.max_rounds < self.window:
            raise ValueError(
                f"max_rounds ({self.max_rounds}) must be at least the window ({self.window})"
            )
        return self


def _defaults(value: Any) -> Any:
    """``precondition: {}`` or ``true`` takes the defaults; ``false``, none."""
    if value is True:
        return {}
    return None if value is False else value


class DriveState(Strict):
    name: Annotated[str, AfterValidator(_name)] | None = None
    purge: Literal["none", "discard", "secure"] = "none"
    precondition: Annotated[Precondition | None, BeforeValidator(_defaults)] = None
    steady_state: Annotated[SteadyState | None, BeforeValidator(_defaults)] = None

    @property
    def label(self) -> str:
        """Its name, else what it does: ``steady``, ``preconditioned``, ``purged``, ``asfound``."""
        if self.name:
            return self.name
        if self.steady_state is not None:
            return "steady"
        if self.precondition is not None:
            return "preconditioned"
        return "purged" if self.purge != "none" else "asfound"

    def request(self) -> dict[str, Any]:
        """As the drives stage's request carries it (role candidate_drive's ``drive_state``)."""
        return {"name": self.label, **self.model_dump(exclude={"name"})}


def _as_list(value: Any) -> Any:
    """One mapping is a list of one state."""
    return [value] if isinstance(value, dict) else value


def _unique_labels(states: list[DriveState]) -> list[DriveState]:
    return _unique(" (give each state a name)")([s.label for s in states]) and states


DriveStates = Annotated[
    list[DriveState],
    BeforeValidator(_as_list),
    AfterValidator(_unique_labels),
    Field(max_length=8),
]
