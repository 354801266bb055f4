"""The environment a run's figures came from, and what differs between two of them.

The DB host writes ``environment.json`` into each run folder (the pgbench_run role's
entry point ``environment``, docs/telemetry.md "The environment of a run"): PostgreSQL's
version and the settings the server was given, kernel and OS release, the ``vm.dirty_*``
sysctls and swappiness, CPU, memory, and the storage under the client databases (mount
as mounted, block device queue, filesystem features), and the WAL's storage the same
way when it has a drive of its own (``wal``).

:func:`read_run` reads it into the run fact ``environment`` (a missing file: nothing,
a malformed one: one line naming the file). :func:`flatten` turns one into
``dotted.key -> value``; :func:`merge` folds the runs of one side into one such mapping
(a key whose value is not the same in every run is a :class:`Varies`); :func:`diff`
lists the keys whose values differ between two sides, leaving out the names that tell
two drives apart by construction (:data:`IDENTITY`: device names, mount points, paths).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from collector.runfolder import ENVIRONMENT_JSON, Checker, load_json
from collector.units import human_size

#: the run fact it is stored as
FACT = "environment"
#: top-level keys that say when and how it was written, not what the run ran on
BOOKKEEPING = ("format", "captured_at")
#: the object sections of an environment.json
SECTIONS = ("postgresql", "kernel", "os", "sysctl", "cpu", "memory", "storage")
#: keys that name or place things (device, mount point, data path, cluster): two drives
#: differ in them by construction, so :func:`diff` leaves them out unless asked
IDENTITY = (
    "host",
    "storage.path",
    "storage.mount.mount_point",
    "storage.mount.source",
    "storage.device.name",
    "storage.device.path",
    "storage.device.disk",
    "storage.device.dm_name",
    "storage.members.*.name",
    "storage.filesystem.tool",
    "wal.path",
    "wal.mount.mount_point",
    "wal.mount.source",
    "wal.device.name",
    "wal.device.path",
    "wal.device.disk",
    "wal.device.dm_name",
    "wal.members.*.name",
    "wal.filesystem.tool",
    # what the fstrim before each run found to trim: a measurement of that run, not
    # what it ran on (trim.policy is)
    "trim.mount_point",
    "trim.trimmed_bytes",
    "trim.seconds",
    "postgresql.data_directory",
    "postgresql.data_paths",
    "postgresql.settings.data_directory",
    "postgresql.settings.config_file",
    "postgresql.settings.hba_file",
    "postgresql.settings.ident_file",
    "postgresql.settings.external_pid_file",
    "postgresql.settings.cluster_name",
    "postgresql.settings.stats_temp_directory",
)
#: display order of the sections
_ORDER = {s: i for i, s in enumerate(("error", "host", *SECTIONS, "wal", "trim"))}


@dataclass(frozen=True)
class Varies:
    """A key whose value is not the same in every run of a side (None: absent)."""

    values: tuple[Any, ...]

    def __str__(self) -> str:
        return self.text()

    def text(self, key: str = "") -> str:
        return "varies: " + " | ".join(show(v, key) for v in self.values)


@dataclass(frozen=True)
class Difference:
    key: str
    left: Any
    right: Any


def show(value: Any, key: str = "") -> str:
    """A flattened value of ``key`` as the reports print it; absent is "-", or for a
    PostgreSQL setting "(default)" (only the settings the server was given are kept)."""
    if isinstance(value, Varies):
        return value.text(key)
    if value is None:
        return "(default)" if key.startswith("postgresql.settings.") else "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Mapping):
        # a nested value in words, not a Python repr ({'firmware': None})
        return ", ".join(f"{k}: {show(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list | tuple):
        return ", ".join(show(v) for v in value) or "-"
    return str(value)


# --------------------------------------------------------------------------- reading


def read_run(run_dir: Path) -> dict[str, Any]:
    """``environment.json`` of a run folder as the run fact ``environment``; a missing
    file (a run from before drivelab recorded it): nothing."""
    path = run_dir / ENVIRONMENT_JSON
    if not path.exists():
        return {}
    return {FACT: check(path, load_json(path))}


def check(path: Path, doc: Any) -> Mapping[str, Any]:
    """The document, if it has the shape :func:`flatten` and the reports read; else a
    one-line DrivelabError naming the file and the key."""
    c = Checker(path)
    doc = c.obj(doc, "")
    c.get(doc, "format", (int,))
    if "error" in doc:  # the DB host could not read it: the run says so
        c.get(doc, "error", (str,))
        return doc
    for section in SECTIONS:
        c.obj(c.get(doc, section, (dict,)), section)
    pg = doc["postgresql"]
    c.get(pg, "version", (str,), "postgresql.")
    settings = c.get(pg, "settings", (dict,), "postgresql.")
    for name, s in settings.items():
        where = f"postgresql.settings.{name}."
        c.obj(s, where.rstrip("."))
        c.get(s, "setting", (str,), where, required=False)
        c.get(s, "unit", (str,), where, required=False)
        c.get(s, "pending_restart", (bool,), where, required=False)
    storage = doc["storage"]
    c.obj(c.get(storage, "mount", (dict,), "storage."), "storage.mount")
    for key in ("device", "queue", "filesystem", "members"):
        if storage.get(key) is not None:
            c.obj(storage[key], f"storage.{key}")
    for name, member in (storage.get("members") or {}).items():
        c.obj(member, f"storage.members.{name}")
    if doc.get("wal") is not None:  # the WAL on a drive of its own: its storage
        c.obj(doc["wal"], "wal")
        c.obj(c.get(doc["wal"], "mount", (dict,), "wal."), "wal.mount")
    return doc


# --------------------------------------------------------------------------- flattening


_SIZE_UNIT = re.compile(r"^(\d*)(B|kB|MB|GB|TB)$")
_SIZE_FACTOR = {"B": 1, "kB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}


def setting_value(s: Mapping[str, Any]) -> str:
    """One pg_settings row as a value: a size in bytes as people read it (``16384`` of
    ``8kB`` -> ``128.0 MiB``), a time with its unit (``2000 ms``), else the setting as
    it is (``on``); ``(pending restart: ...)`` when the file says otherwise."""
    text = str(s.get("setting"))
    unit = s.get("unit") or ""
    size = _SIZE_UNIT.match(unit)
    if size and re.fullmatch(r"\d+", text):
        text = human_size(int(text) * int(size[1] or 1) * _SIZE_FACTOR[size[2]])
    elif unit:
        text += f" {unit}"
    if s.get("pending_restart"):
        text += " (pending restart: the file says otherwise)"
    return text


def flatten(env: Mapping[str, Any]) -> dict[str, Any]:
    """``dotted.key -> value`` of one environment: scalars as they are, lists joined
    with spaces, each PostgreSQL setting one value (:func:`setting_value`), the members
    of a dm/md/Btrfs device numbered in name order; absent and null values left out."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if value is None:
            return
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, list):
            out[prefix] = " ".join(show(v) for v in value)
        else:
            out[prefix] = value

    for key, value in env.items():
        if key in BOOKKEEPING:
            continue
        if key == "postgresql" and isinstance(value, Mapping):
            walk("postgresql", {k: v for k, v in value.items() if k != "settings"})
            for name, s in (value.get("settings") or {}).items():
                out[f"postgresql.settings.{name}"] = setting_value(s)
        elif key in ("storage", "wal") and isinstance(value, Mapping):
            walk(key, {k: v for k, v in value.items() if k != "members"})
            for i, name in enumerate(sorted(value.get("members") or {}), 1):
                walk(f"{key}.members.{i}", {"name": name, **value["members"][name]})
        else:
            walk(key, value)
    return dict(sorted(out.items(), key=lambda kv: _sort_key(kv[0])))


def _sort_key(key: str) -> tuple[int, str]:
    return _ORDER.get(key.split(".", 1)[0], len(_ORDER)), key


def merge(envs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The flattened environments of one side's runs as one: a key whose value is the
    same in every run keeps it; one that differs (or is absent from some) is a
    :class:`Varies`. No environment: an empty mapping."""
    flats = [flatten(e) for e in envs]
    keys = dict.fromkeys(k for f in flats for k in f)
    out: dict[str, Any] = {}
    for key in sorted(keys, key=_sort_key):
        values = list(dict.fromkeys(f.get(key) for f in flats))
        out[key] = values[0] if len(values) == 1 else Varies(tuple(sorted(values, key=show)))
    return out


def is_identity(key: str) -> bool:
    return any(fnmatchcase(key, pattern) for pattern in IDENTITY)


def diff(a: Mapping[str, Any], b: Mapping[str, Any], *, identity: bool = False) -> list[Difference]:
    """The keys of two flattened (or merged) environments whose values differ, in
    section order; a key that varies within a side is listed whatever the other says.
    :data:`IDENTITY` keys are left out unless ``identity``."""
    out = []
    for key in sorted(dict.fromkeys([*a, *b]), key=_sort_key):
        if not identity and is_identity(key):
            continue
        left, right = a.get(key), b.get(key)
        if left != right or isinstance(left, Varies) or isinstance(right, Varies):
            out.append(Difference(key, left, right))
    return out


def shown(d: Difference) -> tuple[str, str]:
    """The two sides of a difference as printed: for a list of words (filesystem
    features) only the words one side has and the other lacks."""
    left, right = d.left, d.right
    if d.key.endswith(".features") and isinstance(left, str) and isinstance(right, str):
        lw, rw = set(left.split()), set(right.split())
        return (
            " ".join(sorted(lw - rw)) or "(no other)",
            " ".join(sorted(rw - lw)) or "(no other)",
        )
    return show(left, d.key), show(right, d.key)


def of_runs(facts: Iterable[Any], run_ids: Sequence[int]) -> list[Mapping[str, Any]]:
    """The ``environment`` run facts (store :class:`~collector.store.Fact` rows) of
    ``run_ids``, in that order; runs without one are skipped."""
    by_run = {f.run_id: f.value for f in facts if f.scope == "run" and f.key == FACT}
    return [by_run[r] for r in run_ids if isinstance(by_run.get(r), Mapping)]
