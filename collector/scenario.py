"""Scenario files: the schema, its one-line errors, and the matrix of cells they expand to.

A scenario (``scenarios/*.yml``, documented in docs/scenarios.md) names drives and RAID
sets, filesystems, placements, datasets, client host counts and a pgbench workload;
``expand`` crosses them into ``PlannedCell`` s in run order, each carrying the
``runner.Cell`` to measure, the request ``playbooks/drives.yml`` takes for it, and how
many repetitions to run.

Every problem with a file is one ``DrivelabError`` line naming the file, the YAML path
and what is wrong (``scenarios/x.yml: workload.duration: must be greater than 0 (got
-5)``); pydantic's errors are translated, never shown.
"""

from __future__ import annotations

import copy
import difflib
import importlib.util
import re
import stat
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from collector.errors import DrivelabError
from collector.paths import REPO
from collector.runner import Cell, PgbenchOptions

# --- names and arguments -----------------------------------------------------------------

#: drive and RAID set names: what the inventory and playbooks/drives.yml accept
#: (roles/preflight/defaults/main.yml preflight_name_pattern)
DRIVE_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
#: scenario and size names; the scenario name is also its results folder
SCENARIO_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
#: one mkfs or pgbench -i argument: no spaces, quotes or shell metacharacters
ARGUMENT = re.compile(r"[A-Za-z0-9_=,.:/+^-]{1,200}")
#: mount options, as roles/preflight checks them
MOUNT_OPTIONS = re.compile(r"[A-Za-z0-9_=,.:/-]{1,200}")
#: a custom pgbench script path, relative to the scenario file
SCRIPT_PATH = re.compile(r"[A-Za-z0-9_./-]{1,200}")
#: inventory host names. A client's database and role are drivelab_<client>: SQL
#: identifiers (roles/pgbench_database writes one into a query) and folder names.
#: The DB host's name names files and folders.
CLIENT_NAME = re.compile(r"[a-z][a-z0-9_]{0,53}")
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")

#: a scenario or an inventory is a few KB: a bigger file is not one (/dev/zero)
MAX_FILE_BYTES = 1024**2
#: values in a document once YAML aliases are expanded: a "billion laughs" file is a
#: few lines that expand to 10^9 values, refused before anything walks them
MAX_VALUES = 100_000
#: an error line is the file, then at most this many characters
MAX_MESSAGE = 300

#: rough costs for estimate_seconds (see docs/scenarios.md)
OVERHEAD_PER_REPETITION = 25.0  # cold start, synchronized start, fetch, gather
INIT_FIXED = 10.0  # database.yml without pgbench -i
INIT_PER_SCALE_PER_HOST = 0.5  # pgbench -i, one client at a time
TPS_PER_CLIENT_GUESS = 100.0  # only for -t workloads: how long N transactions take
#: fixed part of the pre-tests: fio lays its file out, both connect and clean up
PRETEST_SECONDS = {"fio": 20.0, "pg_test_fsync": 5.0}


def _show(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _key(part: Any, limit: int = 40) -> str:
    """A mapping key as an error's YAML path shows it (a long one cut)."""
    text = str(part)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _matching(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{_show(value)} is not a valid {what} ({pattern.pattern})")
        return value

    return check


DriveName = Annotated[str, AfterValidator(_matching(DRIVE_NAME, "drive name"))]
ScenarioName = Annotated[str, AfterValidator(_matching(SCENARIO_NAME, "name"))]
Argument = Annotated[str, AfterValidator(_matching(ARGUMENT, "argument"))]


def _host_rules() -> Any:
    """The DB host's own allow-lists for mkfs and mount options (the module drive_format
    builds its argv with them): loaded from the role, so a scenario is refused with the
    very line the host would give, before anything runs."""
    path = REPO / "roles" / "candidate_drive" / "module_utils" / "drivelab_argv.py"
    spec = importlib.util.spec_from_file_location("drivelab_argv", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOST_RULES = _host_rules()


MountOptions = Annotated[str, AfterValidator(_matching(MOUNT_OPTIONS, "mount option string"))]


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


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# --- the schema ----------------------------------------------------------------------------


class Filesystem(Strict):
    fs: Literal["ext4", "xfs", "btrfs"] = "ext4"
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


class Workload(Strict):
    scale: Annotated[
        list[Annotated[int, Field(ge=1, le=100_000)]],
        BeforeValidator(_scalar_to_list),
        AfterValidator(_unique()),
        Field(min_length=1, max_length=32),
    ]
    clients_per_host: int = Field(4, ge=1, le=1000)
    threads: int = Field(2, ge=1, le=1000)
    duration: int | None = Field(None, gt=0, le=7 * 86400)
    transactions: int | None = Field(None, gt=0, le=1_000_000_000)
    mode: Literal["tpcb", "select-only", "simple-update", "custom"] = "tpcb"
    script: str | None = None
    rate: int = Field(0, ge=0, le=10_000_000)
    log: Literal["full", "sampled", "aggregate", "none"] = "full"
    init_options: list[Argument] = Field(default_factory=list, max_length=32)

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
        "must be false, true or {fio: bool, pg_test_fsync: bool, runtime: s, fsync_seconds: s,"
        f" write_cache: both|leave}} (got {_show(value)})"
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
    hosts: Annotated[
        list[Annotated[int, Field(ge=1, le=1000)]],
        BeforeValidator(_scalar_to_list),
        AfterValidator(_unique()),
        Field(min_length=1, max_length=32),
    ] = Field(default_factory=lambda: [1])
    repetitions: Repetitions = 3
    pretests: Annotated[Pretests, BeforeValidator(_pretests)] = Field(default_factory=Pretests)
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

    def units(self) -> list[tuple[str, RaidSet | None]]:
        """The filesystems to measure on, in order: single drives, then RAID sets."""
        return [(d, None) for d in self.drives] + [(r.name, r) for r in self.raid]


# --- pydantic's errors, as one line ----------------------------------------------------------


def _unwrap(annotation: Any) -> list[Any]:
    """The model classes an annotation may hold (through Annotated, list, dict, unions)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (list, dict, typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _unwrap(arg)]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return []


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = Scenario
    for part in loc:
        if isinstance(part, int) or (isinstance(part, str) and part.startswith("<")):
            continue
        if model is None or part not in model.model_fields:
            return None
        models = _unwrap(model.model_fields[part].annotation)
        model = models[0] if models else None
    return model


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part.startswith("<"):
            continue  # a union tag, not a key of the file
        else:
            out += f".{_key(part)}" if out else _key(part)
    return out


#: pydantic error types, by prefix, and the line they become ({got} is the input)
_MESSAGES = {
    "greater_than_equal": "must be at least {ge} (got {got})",
    "greater_than": "must be greater than {gt} (got {got})",
    "less_than_equal": "must be at most {le} (got {got})",
    "less_than": "must be less than {lt} (got {got})",
    "literal_error": "must be one of {expected} (got {got})",
    "too_long": "at most {max_length} items",
    "string_too_long": "at most {max_length} characters",
    "int_": "must be an integer (got {got})",
    "float_": "must be a number (got {got})",
    "string_": "must be a string (got {got})",
    "bool_": "must be true or false (got {got})",
    "list_": "must be a list (got {got})",
    "dict_": "must be a mapping (got {got})",
    "model_": "must be a mapping (got {got})",
    "missing": "required, missing",
}


def _unknown_key(loc: tuple[Any, ...]) -> str:
    model = _model_at(loc[:-1])
    known = list(model.model_fields) if model else []
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    if close:
        return f"unknown key (did you mean {close[0]!r}?)"
    return f"unknown key (allowed: {', '.join(known)})" if known else "unknown key"


def _message(err: Any) -> str:
    kind, ctx = err["type"], dict(err.get("ctx") or {})
    got = _show(err.get("input"))
    if kind == "extra_forbidden":
        return _unknown_key(tuple(err["loc"]))
    if kind in ("value_error", "assertion_error"):
        return str(ctx.get("error", err["msg"]))
    if kind == "too_short":
        if ctx.get("min_length") == 1:
            return "must not be empty"
        return f"needs at least {ctx['min_length']} items (got {ctx.get('actual_length')})"
    for prefix, text in _MESSAGES.items():
        if kind.startswith(prefix):
            try:
                return text.format(got=got, **ctx)
            except (KeyError, IndexError):
                break
    msg = str(err["msg"])
    return f"{msg[:1].lower()}{msg[1:]} (got {got})"


def _first_error(exc: ValidationError, prefix: str = "") -> str:
    err = exc.errors(include_url=False)[0]
    where = _path(tuple(err["loc"]))
    message = _message(err)
    if not where and re.match(r"[a-z_]+(\[\d+\])?(\.[a-z_]+(\[\d+\])?)*: ", message):
        # a model-level check names its own path ("raid[0].name: ...")
        where, message = message.split(": ", 1)
    index = re.match(r"\[(\d+)\]: ", message)
    if index:  # a list check names the item at fault
        where, message = f"{where}[{index.group(1)}]", message[index.end() :]
    where = ".".join(p for p in (prefix, where) if p)
    return f"{where}: {message}" if where else message


def _printable(text: str) -> str:
    """``text`` with control and line-separating characters (newline, NUL, ESC, U+2028...)
    escaped, so an error stays one line on a terminal and in a log."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _fail(source: str, message: str) -> DrivelabError:
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    return DrivelabError(_printable(f"{source}: {message}"))


# --- reading files ---------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *anchor`: SafeLoader merges it (explicit keys win, as in YAML)
        key = loader.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:
            continue  # an unhashable key: construct_mapping reports it
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {_show(key)} given twice", key_node.start_mark
            )
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _TooLarge(Exception):
    pass


def _count_values(doc: Any) -> int:
    """Values in ``doc`` with YAML aliases expanded (a shared list counts once per use),
    counted without expanding them; _TooLarge past MAX_VALUES or on a cycle."""
    done: dict[int, int] = {}

    def count(node: Any) -> int:
        if not isinstance(node, dict | list):
            return 1
        if id(node) in done:
            if done[id(node)] < 0:
                raise _TooLarge("an alias refers to the value that holds it")
            return done[id(node)]
        done[id(node)] = -1
        total = 1
        for child in node.values() if isinstance(node, dict) else node:
            total += count(child)
            if total > MAX_VALUES:
                raise _TooLarge(
                    f"too large: more than {MAX_VALUES} values once YAML aliases are expanded"
                )
        done[id(node)] = total
        return total

    return count(doc)


def _stat(path: Path, source: str) -> int:
    """st_mode of ``path``; a NUL byte in it is said in drivelab's words (os.stat's own
    differ between Python versions)."""
    if "\x00" in str(path):
        raise _fail(source, "cannot read (a NUL byte in the path)")
    return path.stat().st_mode


def _read_yaml(path: Path, source: str) -> Any:
    try:
        mode = _stat(path, source)
        if stat.S_ISDIR(mode):
            raise _fail(source, "is a folder, not a file")
        if not stat.S_ISREG(mode):
            raise _fail(source, "not a regular file (a device, pipe or socket)")
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise _fail(source, "no such file") from None
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise _fail(source, f"cannot read ({exc.__class__.__name__}: {why})") from None
    if len(data) > MAX_FILE_BYTES:
        raise _fail(source, f"too large (over {MAX_FILE_BYTES // 1024**2} MiB): not a YAML file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(source, f"cannot read (UnicodeDecodeError: {exc})") from None
    try:
        doc = yaml.load(text, Loader=_Loader)  # noqa: S506  # _Loader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f"line {mark.line + 1}: " if mark else ""
        problem = exc.problem or exc.context or "syntax error"
        raise _fail(source, f"{line}not valid YAML ({problem})") from None
    except yaml.YAMLError as exc:
        first = (str(exc).splitlines() or ["syntax error"])[0]
        raise _fail(source, f"not valid YAML ({first})") from None
    except (ValueError, OverflowError) as exc:  # a date like 2020-02-30, a 5000-digit number
        raise _fail(source, f"not valid YAML ({str(exc).split(';')[0]})") from None
    except RecursionError:
        raise _fail(source, "not valid YAML (nested too deep)") from None
    try:
        _count_values(doc)
    except _TooLarge as exc:
        raise _fail(source, str(exc)) from None
    except RecursionError:
        raise _fail(source, "not valid YAML (nested too deep)") from None
    return doc


def _check_keys(doc: Any, where: str = "") -> None:
    """Every mapping key is a string (YAML also allows numbers, null, dates, lists...)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if not isinstance(key, str):
                raise ValueError(f"{where or 'document'}: key {_show(key)} is not a string")
            _check_keys(value, f"{where}.{_key(key)}" if where else _key(key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            _check_keys(value, f"{where}[{i}]")


def _merge(base: Any, override: Any) -> Any:
    """Mappings merge key by key; anything else (lists included) replaces."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = _merge(base.get(key), value) if key in base else copy.deepcopy(value)
        return out
    return copy.deepcopy(override)


def _validate(doc: Any, source: str, base: Path | None, prefix: str = "") -> Scenario:
    try:
        return Scenario.model_validate(doc, context={"base": base})
    except ValidationError as exc:
        raise _fail(source, _first_error(exc, prefix)) from None
    except (RecursionError, OverflowError) as exc:
        where = f"{prefix}: " if prefix else ""
        raise _fail(source, f"{where}cannot be read ({exc.__class__.__name__})") from None


def parse(
    doc: Any, source: str = "<scenario>", size: str | None = None, base: Path | None = None
) -> Scenario:
    """Validates an already-read document (what ``load`` does after reading the YAML).

    ``base`` is the folder a custom ``script`` is relative to (None: not checked)."""
    if doc is None:
        raise _fail(source, "empty file")
    if not isinstance(doc, dict):
        raise _fail(source, f"must be a mapping of keys (got {type(doc).__name__})")
    try:
        _check_keys(doc)
    except ValueError as exc:
        raise _fail(source, str(exc)) from None
    except RecursionError:
        raise _fail(source, "nested too deep") from None
    scenario = _validate(doc, source, base)
    sizes = doc.get("sizes") or {}
    for name, override in sizes.items():
        if not SCENARIO_NAME.fullmatch(name):
            raise _fail(
                source, f"sizes: {_show(name)} is not a valid size name ({SCENARIO_NAME.pattern})"
            )
        for key in ("name", "sizes"):
            if key in override:
                raise _fail(source, f"sizes.{name}.{key}: a size cannot change {key}")
        _validate(_merge(doc, override), source, base, prefix=f"sizes.{name}")
    if size is not None:
        if size not in sizes:
            have = ", ".join(sizes) or "none"
            raise _fail(source, f"sizes: no size {size!r} (have: {have})")
        scenario = _validate(_merge(doc, sizes[size]), source, base, prefix=f"sizes.{size}")
    scenario._source = source
    scenario._size = size
    return scenario


def load(path: Path | str, size: str | None = None) -> Scenario:
    """Reads and validates a scenario file, with ``sizes[size]`` merged over it.

    Every size of the file is validated, whichever is asked for. Raises DrivelabError
    (one line: file, YAML path, problem)."""
    source = str(path)
    path = Path(path)
    doc = _read_yaml(path, source)
    return parse(doc, source, size=size, base=path.parent)


# --- the inventory ---------------------------------------------------------------------------


def load_inventory(path: Path | str) -> dict[str, Any]:
    """The parsed inventory: ``path`` is its hosts.yml or the folder holding it."""
    path = Path(path)
    if path.is_dir():
        path = path / "hosts.yml"
    doc = _read_yaml(path, str(path))
    if not isinstance(doc, dict):
        raise _fail(str(path), "not an inventory (no 'all' mapping)")
    return doc


def _group_hosts(inventory: dict[str, Any], group: str) -> dict[str, Any]:
    try:
        hosts = inventory["all"]["children"][group]["hosts"]
    except (KeyError, TypeError):
        return {}
    return hosts if isinstance(hosts, dict) else {}


def _natural(name: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdecimal() else p for p in re.split(r"(\d+)", name))


def db_host(inventory: dict[str, Any]) -> tuple[str, list[str]]:
    """The DB host's name and the names of its candidate drives, in inventory order."""
    hosts = _group_hosts(inventory, "db")
    if not hosts:
        raise DrivelabError("inventory: no host in group db")
    name = sorted(hosts, key=str)[0]
    host_vars = hosts[name] if isinstance(hosts[name], dict) else {}
    drives = host_vars.get("candidate_drives") or []
    drives = drives if isinstance(drives, list) else []
    return str(name), [str(d.get("name")) for d in drives if isinstance(d, dict)]


def client_hosts(inventory: dict[str, Any]) -> list[str]:
    """The inventory's client hosts, client1..clientN in numeric order."""
    return sorted(map(str, _group_hosts(inventory, "clients")), key=_natural)


def validate_against_inventory(s: Scenario, inventory: dict[str, Any], path: Path | str) -> None:
    """Drives and RAID members are candidate drives of the DB host, a RAID set is not
    named like one, no host count exceeds the inventory's clients, and host names are
    safe in the SQL identifiers, file names and folders they become."""
    source = str(path)
    host, have = db_host(inventory)
    clients = client_hosts(inventory)
    if not HOST_NAME.fullmatch(host):
        raise _fail(
            source,
            f"inventory: DB host {_show(host)} is not a valid host name ({HOST_NAME.pattern})",
        )
    for name in clients:
        if not CLIENT_NAME.fullmatch(name):
            raise _fail(
                source,
                f"inventory: client host {_show(name)} is not a valid client name"
                f" ({CLIENT_NAME.pattern}; its database is drivelab_<name>)",
            )
    have_text = ", ".join(have) or "none"
    for i, drive in enumerate(s.drives):
        if drive not in have:
            raise _fail(
                source, f"drives[{i}]: {drive!r} is not a drive of {host} (have: {have_text})"
            )
    for i, rset in enumerate(s.raid):
        if rset.name in have:
            raise _fail(
                source,
                f"raid[{i}].name: {rset.name!r} is a drive of {host};"
                " a RAID set needs its own name",
            )
        for j, member in enumerate(rset.drives):
            if member not in have:
                raise _fail(
                    source,
                    f"raid[{i}].drives[{j}]: {member!r} is not a drive of {host}"
                    f" (have: {have_text})",
                )
    for i, count in enumerate(s.hosts):
        if count > len(clients):
            raise _fail(
                source, f"hosts[{i}]: {count} client hosts asked, the inventory has {len(clients)}"
            )


# --- the matrix ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdaptivePolicy:
    """Repeat until the 95% CI half-width of tps is within target_ci_pct % of the mean
    (at least ``min``, at most ``max`` repetitions)."""

    target_ci_pct: float
    min: int
    max: int


@dataclass(frozen=True)
class ScenarioCell(Cell):
    """A runner.Cell that also knows the write cache state it is measured with, so two
    cells differing only in write cache get two cell ids (and two run folders)."""

    write_cache: str = "leave"

    @property
    def cell_id(self) -> str:
        base = super().cell_id
        return base if self.write_cache == "leave" else f"{base}-wc{self.write_cache}"


@dataclass(frozen=True)
class PlannedCell:
    """One cell of the matrix and how to run it."""

    cell: Cell
    #: candidate_drive_request for playbooks/drives.yml (one filesystem)
    drive_request: list[dict[str, Any]]
    #: candidate_drive_write_cache: leave, on or off
    write_cache: str
    #: repetitions to run (adaptive: the first ``adaptive.min``)
    repetitions: int
    adaptive: AdaptivePolicy | None
    #: the scenario's :class:`Pretests` as a dict on the first cell of each drive and
    #: filesystem (just formatted) when it asks for any, {} on the others
    pretests: dict[str, Any]
    index: int  # 1-based position in the run order
    total: int

    @property
    def cell_id(self) -> str:
        return self.cell.cell_id


def _request(name: str, rset: RaidSet | None, fs: Filesystem) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "drives": list(rset.drives) if rset else [name],
            "fs": fs.fs,
            "mkfs_options": list(fs.mkfs_options),
            "mount_options": fs.mount_options,
            "raid_level": rset.level if rset else "none",
            "raid_method": rset.method if rset else "btrfs",
        }
    ]


def _pgbench(w: Workload) -> PgbenchOptions:
    return PgbenchOptions(
        clients_per_host=w.clients_per_host,
        threads=w.threads,
        duration=w.duration or 0,
        transactions=w.transactions or 0,
        mode=w.mode,
        script=w.script,
        rate=w.rate,
        log=w.log,
    )


def expand(s: Scenario, inventory: dict[str, Any]) -> list[PlannedCell]:
    """The matrix in run order: drive (drives, then RAID sets, as listed), filesystem,
    placement, scale, hosts, write cache; so each filesystem is made once for all the
    cells on it, and each database initialised once for the write cache variants."""
    clients = client_hosts(inventory)
    pgbench = _pgbench(s.workload)
    if isinstance(s.repetitions, AdaptiveRepetitions):
        a = s.repetitions.adaptive
        adaptive: AdaptivePolicy | None = AdaptivePolicy(a.target_ci_pct, a.min, a.max)
        reps = a.min
    else:
        adaptive, reps = None, s.repetitions
    pretests = s.pretests.model_dump() if s.pretests.enabled() else {}
    rows: list[tuple[ScenarioCell, list[dict[str, Any]], str, dict[str, bool]]] = []
    for name, rset in s.units():
        for fs in s.filesystems:
            if rset is not None and rset.method == "btrfs" and fs.fs != "btrfs":
                continue  # native Btrfs RAID is a Btrfs filesystem
            first = True
            for placement in s.placement:
                for scale in s.workload.scale:
                    for count in s.hosts:
                        for wc in s.write_cache:
                            cell = ScenarioCell(
                                scenario=s.name,
                                drive=name,
                                filesystem=fs.fs,
                                placement=placement,
                                scale=scale,
                                hosts=tuple(clients[:count]),
                                pgbench=pgbench,
                                init_options=tuple(s.workload.init_options),
                                write_cache=wc,
                            )
                            rows.append(
                                (
                                    cell,
                                    _request(name, rset, fs),
                                    wc,
                                    pretests if first else {},
                                )
                            )
                            first = False
    ids = [cell.cell_id for cell, *_ in rows]
    # the schema makes every dimension unique, so this is a bug in drivelab, not the file
    assert len(ids) == len(set(ids)), f"cell ids collide in {s.name}: {ids}"  # noqa: S101
    total = len(rows)
    return [
        PlannedCell(
            cell=cell,
            drive_request=request,
            write_cache=wc,
            repetitions=reps,
            adaptive=adaptive,
            pretests=dict(pre),
            index=i,
            total=total,
        )
        for i, (cell, request, wc, pre) in enumerate(rows, start=1)
    ]


def init_seconds(cell: PlannedCell) -> float:
    """Rough time to place and initialise the cell's databases (pgbench -i, serially)."""
    hosts = len(cell.cell.hosts) or 1
    return INIT_FIXED + INIT_PER_SCALE_PER_HOST * cell.cell.scale * hosts


def repetition_seconds(cell: PlannedCell) -> float:
    """Rough time of one repetition: the pgbench run plus the fixed per-run overhead."""
    opts = cell.cell.pgbench
    run = float(opts.duration) if opts.duration else opts.transactions / TPS_PER_CLIENT_GUESS
    return run + OVERHEAD_PER_REPETITION


def pretest_seconds(pretests: dict[str, Any]) -> float:
    """Rough time of a drive's pre-tests, one write cache state (layout included)."""
    if not pretests:
        return 0.0
    fio = 10 * (pretests["runtime"] + 1) + PRETEST_SECONDS["fio"] if pretests["fio"] else 0
    fsync = 16 * pretests["fsync_seconds"] + PRETEST_SECONDS["pg_test_fsync"]
    return fio + (fsync if pretests["pg_test_fsync"] else 0)


def estimate_seconds(cell: PlannedCell) -> float:
    """Rough: repetitions x (duration + 25 s) + database init + pretests (adaptive: at most)."""
    reps = cell.adaptive.max if cell.adaptive else cell.repetitions
    pre = pretest_seconds(cell.pretests)
    return reps * repetition_seconds(cell) + init_seconds(cell) + pre


def _duration_text(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def plan_text(s: Scenario, cells: list[PlannedCell]) -> str:
    """The plan as printed before a run: every cell in order, its repetitions and estimate."""
    size = f" (size {s.size})" if s.size else ""
    w = s.workload
    length = f"-T {w.duration}" if w.duration else f"-t {w.transactions}"
    if isinstance(s.repetitions, AdaptiveRepetitions):
        a = s.repetitions.adaptive
        reps = f"{a.min} to {a.max} repetitions (until the 95% CI is within {a.target_ci_pct:g}%)"
    else:
        reps = f"{s.repetitions} repetition" + ("s" if s.repetitions != 1 else "")
    total = sum(estimate_seconds(c) for c in cells)
    bound = "at most " if isinstance(s.repetitions, AdaptiveRepetitions) else "about "
    lines = [
        f"scenario {s.name}{size}: {len(cells)} cells x {reps}",
        f"pgbench -c {w.clients_per_host} -j {w.threads} {length} ({w.mode}) per client host"
        + (f", baseline {s.baseline}" if s.baseline else ""),
    ]
    width = max((len(c.cell_id) for c in cells), default=4)
    lines.append(f"{'#':>5}  {'cell':<{width}}  {'hosts':<18}  {'reps':>4}  estimate")
    for c in cells:
        hosts = ",".join(c.cell.hosts)
        hosts = hosts if len(hosts) <= 18 else f"{hosts[:15]}..."
        rep = f"{c.adaptive.min}-{c.adaptive.max}" if c.adaptive else str(c.repetitions)
        extra = []
        req = c.drive_request[0]
        if req["raid_level"] != "none":
            extra.append(f"{req['raid_method']} {req['raid_level']} of {'+'.join(req['drives'])}")
        if c.write_cache != "leave":
            extra.append(f"write cache {c.write_cache}")
        if c.pretests:
            extra.append(
                "pretests " + "+".join(k for k in ("fio", "pg_test_fsync") if c.pretests[k])
            )
        note = f"  ({'; '.join(extra)})" if extra else ""
        lines.append(
            f"{c.index:>2}/{c.total:<2}  {c.cell_id:<{width}}  {hosts:<18}  {rep:>4}  "
            f"{_duration_text(estimate_seconds(c))}{note}"
        )
    lines.append(f"estimated duration: {bound}{_duration_text(total)}")
    return "\n".join(lines)
