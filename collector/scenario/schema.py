"""The scenario file's schema: the pydantic models and their checks.

The models check names and arguments with the patterns and types of
:mod:`collector.scenario.rules`, and mkfs and mount options and PostgreSQL settings
with the DB host's own rules (``HOST_RULES``, ``PG_RULES``) loaded there.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from collector.scenario.drivestate import DriveStates
from collector.scenario.fields import Strict, _axis, _unique
from collector.scenario.fiomatrix import FioMatrix
from collector.scenario.rules import (
    DRIVE_NAME,
    HOST_RULES,
    PG_RULES,
    Argument,
    DriveName,
    FilesystemName,
    MountOptions,
    ScenarioName,
    VariantName,
)
from collector.scenario.wording import PathError, _key, _show
from collector.scenario.workload import Workload


class Filesystem(Strict):
    fs: FilesystemName = "ext4"
    mkfs_options: list[Argument] = Field(default_factory=list, max_length=32)
    mount_options: MountOptions = "noatime"
    #: a variant's name (``xfs-su128``): two entries of one fs measured side by side
    name: VariantName | None = None

    @property
    def label(self) -> str:
        """What names the entry's cells: its name, else its fs."""
        return self.name or self.fs

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


class WalPlacement(Strict):
    """``{data: cluster, wal: <drive>}``: the cell's own cluster, its data directory on
    the drive under test and its WAL on another candidate drive (initdb --waldir), both
    gated and made with the cell's filesystem."""

    data: str
    wal: DriveName

    @field_validator("data")
    @classmethod
    def _cluster_only(cls, value: str) -> str:
        if value != "cluster":
            raise ValueError(
                f"{value!r}: WAL on a drive of its own needs data: cluster (a tablespace's WAL"
                " is drivelab's own cluster's, on the system disk)"
            )
        return value

    def __repr__(self) -> str:  # as the file gives it, in one-line errors
        return f"{{data: {self.data}, wal: {self.wal}}}"


Placement = Annotated[
    Annotated[Literal["tablespace", "cluster"], Tag("<word>")]
    | Annotated[WalPlacement, Tag("<wal>")],
    Discriminator(lambda v: "<wal>" if isinstance(v, dict | WalPlacement) else "<word>"),
]


def placement_of(value: str | WalPlacement) -> tuple[str, str | None]:
    """(where the data lives, the WAL's own drive or None) of a ``placement`` entry."""
    return (value.data, value.wal) if isinstance(value, WalPlacement) else (value, None)


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


#: fio jobs of the default job file (roles/drive_pretest/templates/pretest.fio.j2)
FIO_DEFAULT_JOBS = 12


class Pretests(Strict):
    #: true: the default jobs; a matrix's axes: those and the matrix's (fiomatrix.py)
    fio: Annotated[
        Annotated[bool, Tag("<bool>")] | Annotated[FioMatrix, Tag("<matrix>")],
        Discriminator(lambda v: "<matrix>" if isinstance(v, dict | FioMatrix) else "<bool>"),
    ] = False
    pg_test_fsync: bool = False
    #: seconds per fio job (12 default jobs per write cache state, and a matrix's)
    runtime: int = Field(30, ge=1, le=3600)
    #: seconds of fio ramp-up per job before it counts (fio's ramp_time)
    ramp: int = Field(1, ge=0, le=600)
    #: seconds per pg_test_fsync test (-s; about 16 tests)
    fsync_seconds: int = Field(5, ge=1, le=600)
    #: both: write cache on and off where the drive allows; leave: as it is
    write_cache: Literal["both", "leave"] = "both"

    def enabled(self) -> bool:
        return bool(self.fio) or self.pg_test_fsync

    def fio_jobs(self) -> list[dict[str, Any]]:
        """The matrix's jobs, run after the default ones ([] without a matrix)."""
        return self.fio.jobs() if isinstance(self.fio, FioMatrix) else []


def _pretests(value: Any) -> Any:
    if value is False or value is None:
        return {}
    if value is True:
        return {"fio": True, "pg_test_fsync": True}
    if isinstance(value, dict):
        return value
    raise ValueError(
        "must be false, true or {fio: bool or a matrix, pg_test_fsync: bool, runtime: s, ramp: s,"
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
    placement: Annotated[list[Placement], AfterValidator(_unique())] = Field(
        default_factory=lambda: ["tablespace"], min_length=1, max_length=16
    )
    write_cache: Annotated[
        list[Literal["leave", "on", "off"]],
        BeforeValidator(_write_cache),
        AfterValidator(_unique()),
        Field(min_length=1),
    ] = Field(default_factory=lambda: ["leave"])
    #: the states each drive is brought to before its filesystem is made (an axis;
    #: none: as found)
    drive_state: DriveStates = Field(default_factory=list)
    #: the TRIM policy, an axis: none, the discard mount option, or fstrim of the
    #: filesystem before each repetition
    trim: Annotated[
        list[Literal["none", "discard", "fstrim"]],
        BeforeValidator(lambda v: [v] if isinstance(v, str) else v),
        AfterValidator(_unique()),
        Field(min_length=1, max_length=3),
    ] = Field(default_factory=lambda: ["none"])
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
    def _one_name_per_entry(cls, value: list[Filesystem]) -> list[Filesystem]:
        """Each entry's cells are named by its name or fs: one entry per name; a name is
        no other filesystem's type."""
        seen: set[str] = set()
        for i, entry in enumerate(value):
            if entry.name in HOST_RULES.FILESYSTEMS and entry.name != entry.fs:
                raise PathError(f"[{i}].name", f"{entry.name!r} is another filesystem's type")
            if entry.label in seen:
                raise PathError(
                    f"[{i}]",
                    f"{entry.label} names two entries: give each entry of one fs a name"
                    " (filesystems[].name) to measure them side by side",
                )
            seen.add(entry.label)
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
        members = {m for rset in self.raid for m in rset.drives}
        for i, entry in enumerate(self.placement):
            wal = placement_of(entry)[1]
            if wal in names or wal in members:
                raise ValueError(
                    f"placement[{i}].wal: {wal!r} is a RAID set or one of its members"
                    " (the WAL's own drive is a single candidate drive)"
                )
            if wal is not None and not set(self.drives) - {wal} and not self.raid:
                raise ValueError(
                    f"placement[{i}].wal: {wal!r} is the only drive: its data and WAL would"
                    " share it (that is placement cluster)"
                )
        if self.drive_state and self.raid:
            raise ValueError(
                "drive_state: single drives only (a RAID set's members are not conditioned yet)"
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
