"""The scenario file's schema: the pydantic models and their checks.

The models check names and arguments with the patterns and types of
:mod:`collector.scenario.rules`, and mkfs and mount options and PostgreSQL settings
with the DB host's own rules (``HOST_RULES``, ``PG_RULES``) loaded there.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from collector.cell import LOGS, MODES
from collector.scenario.rules import (
    DRIVE_NAME,
    HOST_RULES,
    PG_RULES,
    SCRIPT_PATH,
    Argument,
    DriveName,
    FilesystemName,
    MountOptions,
    ScenarioName,
)
from collector.scenario.wording import PathError, _key, _show
from collector.stats import ratesearch

# --- the models' building blocks ---------------------------------------------------------


def _unique(what: str = "") -> Callable[[list[Any]], list[Any]]:
    def check(values: list[Any]) -> list[Any]:
        seen: set[Any] = set()
        for value in values:
            if value in seen:
                raise ValueError(f"{_show(value)} listed twice{what}")
            seen.add(value)
        return values

    return check


def _scalar_to_list(value: Any) -> Any:
    """``scale: 20`` means ``scale: [20]`` (an integer only: a string stays an error)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    return value


def _axis(low: int, high: int, *, unique: bool = True) -> Any:
    """A list of integers in [low, high], 1 to 32 of them, a scalar taken as a list of
    one: an axis of the matrix (each value a cell), unique unless said otherwise."""
    checks = [BeforeValidator(_scalar_to_list), Field(min_length=1, max_length=32)]
    checks += [AfterValidator(_unique())] if unique else []
    return Annotated[(list[Annotated[int, Field(ge=low, le=high)]], *checks)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# --- the schema ----------------------------------------------------------------------------


class Filesystem(Strict):
    fs: FilesystemName = "ext4"
    mkfs_options: list[Argument] = Field(default_factory=list, max_length=32)
    mount_options: MountOptions = "noatime"

    @field_validator("mkfs_options")
    @classmethod
    def _mkfs_allowed(cls, value: list[str], info: ValidationInfo) -> list[str]:
        try:
            HOST_RULES.mkfs_options(info.data.get("fs", "ext4"), value)
        except HOST_RULES.Refusal as err:
            raise ValueError(
                f"[{err.index}]: {err}" if err.index is not None else str(err)
            ) from None
        return value

    @field_validator("mount_options")
    @classmethod
    def _mount_allowed(cls, value: str, info: ValidationInfo) -> str:
        try:
            HOST_RULES.mount_options(info.data.get("fs", "ext4"), value)
        except HOST_RULES.Refusal as err:
            raise ValueError(str(err)) from None
        return value


class RaidSet(Strict):
    name: DriveName
    drives: Annotated[list[DriveName], AfterValidator(_unique())] = Field(max_length=32)
    level: Literal["raid0", "raid1", "raid5", "raid10"]
    method: Literal["btrfs", "mdadm"] = "btrfs"

    @model_validator(mode="after")
    def _levels(self) -> RaidSet:
        if self.level == "raid5" and self.method != "mdadm":
            raise ValueError("raid5 only with method: mdadm (Btrfs RAID5 is not used)")
        least = {"raid0": 2, "raid1": 2, "raid5": 3, "raid10": 4}[self.level]
        if len(self.drives) < least:
            raise ValueError(f"{self.level} needs at least {least} drives (got {len(self.drives)})")
        return self


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
        if self.mode == "custom" and not self.script:
            raise ValueError("mode: custom needs script: (a pgbench script file)")
        if self.mode != "custom" and self.script:
            raise ValueError(f"script is only for mode: custom (mode is {self.mode})")
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


class AdaptiveSpec(Strict):
    target_ci_pct: float = Field(gt=0, le=100)
    min: int = Field(3, ge=2, le=1000)
    max: int = Field(10, ge=2, le=1000)

    @model_validator(mode="after")
    def _order(self) -> AdaptiveSpec:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be at least min ({self.min})")
        return self


class AdaptiveRepetitions(Strict):
    adaptive: AdaptiveSpec


def _repetitions_tag(value: Any) -> str:
    return "<adaptive>" if isinstance(value, dict) else "<fixed>"


Repetitions = Annotated[
    Annotated[int, Tag("<fixed>"), Field(ge=1, le=1000)]
    | Annotated[AdaptiveRepetitions, Tag("<adaptive>")],
    Discriminator(_repetitions_tag),
]


class Pretests(Strict):
    fio: bool = False
    pg_test_fsync: bool = False
    #: seconds per fio job (10 jobs per write cache state)
    runtime: int = Field(30, ge=1, le=3600)
    #: seconds of fio ramp-up per job before it counts (fio's ramp_time)
    ramp: int = Field(1, ge=0, le=600)
    #: seconds per pg_test_fsync test (-s; about 16 tests)
    fsync_seconds: int = Field(5, ge=1, le=600)
    #: both: write cache on and off where the drive allows; leave: as it is
    write_cache: Literal["both", "leave"] = "both"

    def enabled(self) -> bool:
        return self.fio or self.pg_test_fsync


def _pretests(value: Any) -> Any:
    if value is False or value is None:
        return {}
    if value is True:
        return {"fio": True, "pg_test_fsync": True}
    if isinstance(value, dict):
        return value
    raise ValueError(
        "must be false, true or {fio: bool, pg_test_fsync: bool, runtime: s, ramp: s,"
        f" fsync_seconds: s, write_cache: both|leave}} (got {_show(value)})"
    )


WRITE_CACHE = ("leave", "on", "off")


def _write_cache(value: Any) -> Any:
    """A single value means a list of one; YAML 1.1 reads a bare on/off as true/false."""

    def one(item: Any) -> Any:
        if isinstance(item, bool):
            return "on" if item else "off"
        return item

    if isinstance(value, list):
        return [one(v) for v in value]
    value = one(value)
    if value in WRITE_CACHE:
        return [value]
    raise ValueError(f"must be leave, on or off, or a list of them (got {_show(value)})")


#: at most this many settings in one mapping, and this many named sets
MAX_PG_SETTINGS = 200
MAX_PG_SETS = 32


def _pg_settings(value: Any) -> Any:
    """``{name: value}``: names PostgreSQL's (the server checks each when the run starts),
    none that drivelab keeps for itself or that would stop the run; values strings,
    numbers or true/false (written on/off)."""
    if not isinstance(value, dict):
        raise ValueError(f"must be a mapping of setting: value (got {_show(value)})")
    if len(value) > MAX_PG_SETTINGS:
        raise ValueError(f"at most {MAX_PG_SETTINGS} settings")
    for name, item in value.items():
        # a setting that runs code waits for the inventory (validate_against_inventory)
        problem = PG_RULES.name_problem(name, allowed=PG_RULES.RUNS_CODE)
        if problem:
            raise PathError(_key(name), problem)
        try:
            PG_RULES.value_text(item)
        except PG_RULES.Refusal as err:
            raise PathError(_key(name), str(err)) from None
    return value


def _pg_sets(value: Any) -> Any:
    """``{set name: {name: value}}``: each set one more value of the matrix's last axis."""
    if not isinstance(value, dict):
        raise ValueError(f"must be a mapping of set name: settings (got {_show(value)})")
    if len(value) > MAX_PG_SETS:
        raise ValueError(f"at most {MAX_PG_SETS} sets")
    for name, settings in value.items():
        if not DRIVE_NAME.fullmatch(name):
            raise PathError(
                _key(name), f"{_show(name)} is not a valid set name ({DRIVE_NAME.pattern})"
            )
        try:
            _pg_settings(settings)
        except PathError as err:
            raise PathError(f"{_key(name)}.{err.path}", str(err)) from None
        except ValueError as err:
            raise PathError(_key(name), str(err)) from None
    return value


class Postgresql(Strict):
    """PostgreSQL settings: ``settings`` for every cell, and named ``sets``, each one
    value of an axis of the matrix (a set's settings go over ``settings``)."""

    settings: Annotated[dict[str, Any], BeforeValidator(_pg_settings)] = Field(default_factory=dict)
    sets: Annotated[dict[str, dict[str, Any]], BeforeValidator(_pg_sets)] = Field(
        default_factory=dict
    )

    def variants(self) -> list[tuple[str | None, dict[str, str]]]:
        """(set name, effective settings as the settings file holds them) per value of
        the axis, in the file's order; one unnamed variant when there are no sets."""
        base = {k: PG_RULES.value_text(v) for k, v in self.settings.items()}
        if not self.sets:
            return [(None, base)]
        return [
            (name, base | {k: PG_RULES.value_text(v) for k, v in items.items()})
            for name, items in self.sets.items()
        ]

    def given(self) -> bool:
        return bool(self.settings or any(self.sets.values()))


class Scenario(Strict):
    name: ScenarioName
    description: str = Field("", max_length=10_000)
    baseline: DriveName | None = None
    drives: Annotated[list[DriveName], AfterValidator(_unique())] = Field(
        default_factory=list, max_length=64
    )
    filesystems: list[Filesystem] = Field(
        default_factory=lambda: [Filesystem()], min_length=1, max_length=8
    )
    raid: list[RaidSet] = Field(default_factory=list, max_length=16)
    placement: Annotated[list[Literal["tablespace", "cluster"]], AfterValidator(_unique())] = Field(
        default_factory=lambda: ["tablespace"], min_length=1
    )
    write_cache: Annotated[
        list[Literal["leave", "on", "off"]],
        BeforeValidator(_write_cache),
        AfterValidator(_unique()),
        Field(min_length=1),
    ] = Field(default_factory=lambda: ["leave"])
    workload: Workload
    hosts: _axis(1, 1000) = Field(default_factory=lambda: [1])
    repetitions: Repetitions = 3
    #: a partial or failed repetition is run again up to this many times in the same run
    retries: int = Field(1, ge=0, le=10)
    pretests: Annotated[Pretests, BeforeValidator(_pretests)] = Field(default_factory=Pretests)
    postgresql: Postgresql = Field(default_factory=Postgresql)
    sizes: dict[str, dict[str, Any]] = Field(default_factory=dict)

    _source: str = PrivateAttr("")
    _size: str | None = PrivateAttr(None)

    @property
    def source(self) -> str:
        """The file it was read from, as given to ``load``."""
        return self._source

    @property
    def size(self) -> str | None:
        """The size merged in by ``load(..., size=...)``, if any."""
        return self._size

    @field_validator("filesystems")
    @classmethod
    def _one_entry_per_fs(cls, value: list[Filesystem]) -> list[Filesystem]:
        seen: set[str] = set()
        for entry in value:
            if entry.fs in seen:
                raise ValueError(
                    f"{entry.fs} listed twice (one entry per filesystem type: cells are named"
                    " by it; compare mount options in two scenarios)"
                )
            seen.add(entry.fs)
        return value

    @model_validator(mode="after")
    def _matrix(self) -> Scenario:
        if not self.drives and not self.raid:
            raise ValueError("empty matrix: no drives and no raid sets")
        singles = set(self.drives)
        names: set[str] = set()
        for i, rset in enumerate(self.raid):
            if rset.name in singles or rset.name in names:
                raise ValueError(
                    f"raid[{i}].name: {rset.name!r} is already the name of a drive or set"
                )
            names.add(rset.name)
            for j, member in enumerate(rset.drives):
                if member in singles:
                    raise ValueError(
                        f"raid[{i}].drives[{j}]: {member!r} is also in drives"
                        " (a RAID member cannot be measured alone in the same scenario)"
                    )
            if rset.method == "btrfs" and not any(f.fs == "btrfs" for f in self.filesystems):
                have = ", ".join(f.fs for f in self.filesystems)
                raise ValueError(
                    f"raid[{i}]: method btrfs needs fs: btrfs in filesystems (have: {have})"
                )
        if self.baseline is not None and self.baseline not in singles | names:
            have = ", ".join([*self.drives, *(r.name for r in self.raid)])
            raise ValueError(f"baseline: {self.baseline!r} is not one of the drives (have: {have})")
        return self

    @model_validator(mode="after")
    def _rate_split(self) -> Scenario:
        """``rate_per: total``: every total rate splits into a whole ``-R`` of at least 1
        per client host for every host count (no rounding: the rate run is the one asked)."""
        if self.workload.rate_per != "total":
            return self
        for i, rate in enumerate(self.workload.rate):
            for count in self.hosts:
                if rate and rate % count:
                    raise ValueError(
                        f"workload.rate[{i}]: a total of {rate} does not split evenly over "
                        f"{count} client hosts (rate_per: total; give a multiple of {count})"
                    )
        return self

    def units(self) -> list[tuple[str, RaidSet | None]]:
        """The filesystems to measure on, in order: single drives, then RAID sets."""
        return [(d, None) for d in self.drives] + [(r.name, r) for r in self.raid]
