"""The scenario's ``workload``: pgbench per client host (:class:`Workload`) and the rate
search's target (:class:`RateTarget`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from collector.cell import BUILTINS, LOGS, MIX_SCRIPT, MODES
from collector.scenario.fields import Strict, _axis
from collector.scenario.rules import SCRIPT_PATH, Argument
from collector.scenario.wording import PathError, _show
from collector.stats import ratesearch


class RateTarget(Strict):
    """``workload.target``: search each cell's highest total rate (over all its client
    hosts) whose p99 over the window where all clients ran stays at or under ``p99_ms``
    (:mod:`collector.stats.ratesearch`; ``low`` and ``high`` are totals, rounded to a whole
    ``-R`` per host)."""

    p99_ms: float = Field(gt=0, le=3_600_000)
    low: int | None = Field(None, ge=1, le=ratesearch.MAX_RATE)
    high: int | None = Field(None, ge=2, le=ratesearch.MAX_RATE)
    steps: int = Field(ratesearch.DEFAULT_STEPS, ge=1, le=ratesearch.MAX_STEPS)
    within_pct: float = Field(ratesearch.DEFAULT_WITHIN_PCT, ge=1, le=50)

    @model_validator(mode="after")
    def _order(self) -> RateTarget:
        if self.low is not None and self.high is not None and self.high <= self.low:
            raise ValueError(f"high ({self.high}) must be above low ({self.low})")
        return self


#: a mix's words: pgbench's built-in scripts, and the scenario's own script
MixWord = Literal[(*BUILTINS, MIX_SCRIPT)]  # type: ignore[valid-type]


class Workload(Strict):
    scale: _axis(1, 100_000)
    #: pgbench -c of each client host; a list is an axis (a client sweep: one cell per
    #: count, the report's curve of tps against connections)
    clients_per_host: _axis(1, 1000) = Field(default_factory=lambda: [4])
    #: pgbench -j: one value for every count, or one per count of clients_per_host
    threads: _axis(1, 1000, unique=False) = Field(default_factory=lambda: [2])
    duration: int | None = Field(None, gt=0, le=7 * 86400)
    transactions: int | None = Field(None, gt=0, le=1_000_000_000)
    mode: Literal[MODES] = "tpcb"  # type: ignore[valid-type]
    protocol: Literal["simple", "extended", "prepared"] = "simple"  # pgbench -M
    #: a weighted mix of pgbench's built-in scripts (-b name@weight) and the scenario's
    #: own script (``script: N``: -f file@N), in place of mode
    mix: dict[MixWord, Annotated[int, Field(ge=1, le=1000)]] | None = Field(
        None, min_length=1, max_length=4
    )
    script: str | None = None
    #: pgbench -R (transactions/s), 0: unthrottled; a list is an axis (one cell per value)
    rate: _axis(0, 10_000_000) = Field(default_factory=lambda: [0])
    #: host: each rate is every client host's -R (pgbench's own meaning); total: the
    #: rate of all the cell's client hosts together, split evenly over them
    rate_per: Literal["host", "total"] = "host"
    #: pgbench -L in ms: transactions slower are counted late (and with -R skipped when
    #: already later than it at their turn)
    latency_limit: int | None = Field(None, ge=1, le=3_600_000)
    log: Literal[LOGS] = "full"  # type: ignore[valid-type]
    init_options: list[Argument] = Field(default_factory=list, max_length=32)
    #: the rate search (docs/scenarios.md, "Searching the sustained rate")
    target: RateTarget | None = None

    @field_validator("script")
    @classmethod
    def _script(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if not SCRIPT_PATH.fullmatch(value):
            raise ValueError(f"{_show(value)} is not a valid path ({SCRIPT_PATH.pattern})")
        if value.startswith("/") or ".." in Path(value).parts:
            raise ValueError(f"{_show(value)}: give a path below the scenario's folder, no '..'")
        base = (info.context or {}).get("base")
        if base is not None:
            path = Path(base) / value
            if not path.is_file():
                raise ValueError(f"{_show(value)}: no such file next to the scenario")
            resolved = str(path.resolve())
            if "{" in resolved or "}" in resolved:
                # the path goes to Ansible as an extra variable, which it templates
                raise ValueError(f"{_show(resolved)}: no braces in the script's folder names")
            return resolved
        return value

    @model_validator(mode="after")
    def _length_and_script(self) -> Workload:
        if (self.duration is None) == (self.transactions is None):
            raise ValueError(
                "give duration (seconds, -T) or transactions (-t), one of them"
                + (", not both" if self.duration is not None else "")
            )
        weighted = MIX_SCRIPT in (self.mix or {})
        if self.mode == "custom" and not self.script:
            raise ValueError("mode: custom needs script: (a pgbench script file)")
        if weighted and not self.script:
            raise PathError("mix.script", "needs script: (the pgbench script file it weighs)")
        if self.mode != "custom" and self.script and not weighted:
            raise ValueError(
                f"script is only for mode: custom or a mix that weighs it (mix: {{script: N}};"
                f" mode is {self.mode})"
            )
        if self.mix and self.mode != "tpcb":
            raise PathError("mix", f"a mix is in place of mode: leave mode out (it is {self.mode})")
        return self

    @model_validator(mode="after")
    def _threads_per_count(self) -> Workload:
        """-j pairs with -c: one value for all counts or one per count, and never more
        threads than connections (pgbench refuses -j above -c)."""
        counts, threads = self.clients_per_host, self.threads
        if len(threads) not in (1, len(counts)):
            raise PathError(
                "threads",
                f"{len(threads)} values for {len(counts)} counts of clients_per_host:"
                " give one, or one per count",
            )
        for i, (c, j) in enumerate(self.pairs()):
            if j > c:
                where = "threads" if len(threads) == 1 else f"threads[{i}]"
                raise PathError(
                    where,
                    f"-j {j} with -c {c}: pgbench runs at most one thread per connection"
                    + (" (give threads per count: a list as long as clients_per_host)"
                       if len(threads) == 1 and len(counts) > 1 else ""),
                )  # fmt: skip
        return self

    def pairs(self) -> list[tuple[int, int]]:
        """(-c, -j) of each count of clients_per_host, in its order."""
        counts, threads = self.clients_per_host, self.threads
        return list(zip(counts, threads * len(counts) if len(threads) == 1 else threads,
                        strict=True))  # fmt: skip

    @model_validator(mode="after")
    def _searchable(self) -> Workload:
        """A target searches the rate: no rate given beside it, a per-transaction log of
        every transaction to read the p99 from, and steps of one length (-T)."""
        if self.target is None:
            return self
        rates = self.rate if isinstance(self.rate, list) else [self.rate]
        if any(rates):
            raise PathError(
                "target",
                f"searches the rate itself: remove workload.rate ({_show(self.rate)});"
                " target.low and target.high bound the search",
            )
        if self.log != "full":
            raise PathError(
                "target",
                f"needs the per-transaction log of every transaction (log: full) to read"
                f" the p99 from; log is {self.log}",
            )
        if self.duration is None:
            raise PathError("target", "needs duration (-T): every step of the search runs as long")
        return self
