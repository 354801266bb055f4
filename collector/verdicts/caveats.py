"""The caveats a figure carries: what, of a cell's complete runs, says that its tps is not
(only) the drive's. Each kind has a one-letter mark that the reports put on the figure
itself (the table's row, the bar, the JSON's booleans) and a legend line that says what it
means for the figure; the prose lines of the reports say the details.

Read from a run's stored facts (``drivelab gather``'s run facts), nothing else:

- ``client_bound``: a client's CPU above 90 % through the window (run fact
  ``client_bound``, :func:`collector.verdicts.telemetry.client_bound`);
- ``cache_not_defeated``: the run's cache verdict (run fact ``cache``,
  :mod:`collector.verdicts.cachedefeat`);
- ``checkpoint``: a checkpoint started or ended inside the window (run fact
  ``checkpoint_in_window``, :mod:`collector.gather.serverstats`);
- ``physics``: a physics check of the run at warning level (run facts ``physics`` and
  ``physics_iops``, :mod:`collector.verdicts.physics`): the figure is beyond what the
  drive can do, or below what its pre-test showed;
- ``emulated_cpu``: the DB host a qemu VM without acceleration (run fact ``lab``);
- ``unsteady``: the run's per-second tps still rising or falling through its window
  (run fact ``tps_trend``, :mod:`collector.stats.drift`): too short a run to show the
  drive's steady rate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from collector.verdicts import physics

CLIENT_BOUND = "client_bound"
CACHE_NOT_DEFEATED = "cache_not_defeated"
CHECKPOINT = "checkpoint"
PHYSICS = "physics"
EMULATED_CPU = "emulated_cpu"
UNSTEADY = "unsteady"


@dataclass(frozen=True)
class Kind:
    code: str
    #: one letter, on the figure
    mark: str
    #: a few words, in a verdict line ("but client-bound")
    short: str
    #: the legend line: what the mark means for the figure
    meaning: str


#: every kind, in the order the marks are shown
KINDS: tuple[Kind, ...] = (
    Kind(
        CLIENT_BOUND,
        "c",
        "client-bound",
        "client-bound: a client's CPU was the limit, so the drive may be faster",
    ),
    Kind(
        CACHE_NOT_DEFEATED,
        "m",
        "cache not defeated",
        "cache not defeated: the data fit the DB host's memory: this measured RAM",
    ),
    Kind(
        CHECKPOINT,
        "k",
        "a checkpoint in the window",
        "checkpoint in the window: its writes competed with the clients' for the drive",
    ),
    Kind(
        PHYSICS,
        "p",
        "a physics check failed",
        "physics: the figure is not what the drive can do (the physics lines say why)",
    ),
    Kind(
        EMULATED_CPU,
        "e",
        "emulated CPU",
        "emulated CPU: the DB host was a VM under TCG: this measured the emulation",
    ),
    Kind(
        UNSTEADY,
        "t",
        "tps still changing through the run",
        "trend: tps was still rising or falling through the run's window: the run was too"
        " short to show the drive's steady rate",
    ),
)
BY_CODE = {k.code: k for k in KINDS}


def run_caveats(facts: Mapping[str, Any]) -> tuple[str, ...]:
    """The caveat codes of one run, from its run facts, in :data:`KINDS` order."""
    found = set()
    if facts.get("client_bound"):
        found.add(CLIENT_BOUND)
    cache = facts.get("cache")
    if isinstance(cache, Mapping) and cache.get("verdict") == "cache not defeated":
        found.add(CACHE_NOT_DEFEATED)
    if facts.get("checkpoint_in_window") is True:
        found.add(CHECKPOINT)
    for key in ("physics", "physics_iops"):
        for value in facts.get(key) or ():
            if not isinstance(value, Mapping):
                continue
            flag = physics.Flag.from_fact(value)
            if flag.level == physics.WARNING and flag.code not in physics.DRIVE_CODES:
                found.add(PHYSICS)
    lab = facts.get("lab")
    if isinstance(lab, Mapping) and lab.get("accel") == "tcg":
        found.add(EMULATED_CPU)
    if isinstance(facts.get("tps_trend"), Mapping):
        found.add(UNSTEADY)
    return tuple(k.code for k in KINDS if k.code in found)


@dataclass(frozen=True)
class Caveat:
    """One kind of caveat on a cell's figure: in how many of its complete runs."""

    kind: Kind
    runs: int
    of: int

    @property
    def code(self) -> str:
        return self.kind.code

    @property
    def mark(self) -> str:
        return self.kind.mark


def cell_caveats(per_run: Sequence[Iterable[str]]) -> tuple[Caveat, ...]:
    """The caveats of a cell from those of its complete runs (``per_run``, one entry per
    run): a kind seen in any run, with how many."""
    counts = {k.code: 0 for k in KINDS}
    for codes in per_run:
        for code in set(codes):
            if code in counts:
                counts[code] += 1
    return tuple(Caveat(k, counts[k.code], len(per_run)) for k in KINDS if counts[k.code])


def marks(caveats: Iterable[Caveat]) -> str:
    """The marks of ``caveats`` as shown beside a figure: ``"c m"``, or ``""``."""
    return " ".join(c.mark for c in caveats)


def legend(caveats: Iterable[Caveat]) -> list[tuple[str, str]]:
    """The legend of the kinds among ``caveats``: (mark, meaning), each kind once, in
    :data:`KINDS` order."""
    codes = {c.code for c in caveats}
    return [(k.mark, k.meaning) for k in KINDS if k.code in codes]
