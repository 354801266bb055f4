"""A run folder, the one contract between the runner (which writes it, with the
playbooks' outputs fetched into it) and :mod:`collector.gather.folder` (which reads it)::

    <results>/runs/<scenario>/<cell_id>/rep-<N>/   (a retry: rep-<N>-attempt-<K>/)
        run.json                 :class:`RunMeta`: scenario, cell, hosts, options, times
        db/database.json         dataset sizes, DB memory, the "fits in RAM" warning, init
                                 times, PostgreSQL version and settings, WAL placement
        db/<host>-<fs>.json      device facts, one file per filesystem
        pg_stat-before.json      the client databases' buffer counters around the run
        pg_stat-after.json
        environment.json         what the figures came from: PostgreSQL version and settings,
                                 kernel, sysctls, CPU, memory, the storage under the data
        pg_server-before.json    the server's checkpoint, WAL and I/O views around the run
        pg_server-after.json     (and how reading the server log went)
        cold_start.json          the seconds of each step of the cold start (or the settled
                                 start, its mode) before the run
        pg_checkpoints.log       the server log's checkpoint lines of the run, if any
        <client>/                one folder per client host that answered:
            stdout.txt stderr.txt rc.txt command.json pgbench_log.<pid>[.<n>]

``run.json`` is written before the playbook starts (so a crash leaves a record of
what was being run) and again when it ends, atomically each time. Reading it checks
every key with its type: a problem is one line naming the file and the key.
"""

from __future__ import annotations

import functools
import json
import os
import re
import socket
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from collector.cell import LOGS as LOG_MODES
from collector.cell import Cell
from collector.errors import DrivelabError
from collector.records import WRITE_CACHE_STATES, CellSpec

RUN_JSON = "run.json"
DB_DIR = "db"
DATABASE_JSON = "database.json"
PG_STAT = "pg_stat-{}.json"
#: what the run's figures came from (PostgreSQL, kernel, storage): collector.verdicts.environment
ENVIRONMENT_JSON = "environment.json"
#: the server's statistics views around the run, and the log's checkpoint lines of it
PG_SERVER = "pg_server-{}.json"
PG_CHECKPOINTS = "pg_checkpoints.log"
#: the raw files of a client folder, by kind
CLIENT_FILES = {
    "stdout": "stdout.txt",
    "stderr": "stderr.txt",
    "rc": "rc.txt",
    "command": "command.json",
}
#: the CellSpec fields a run.json ``cell`` may carry; any other key goes into params
CELL_FIELDS = (
    "drive", "workload", "filesystem", "placement", "scale", "clients",
    "write_cache", "mkfs_options", "mount_options", "pg_settings_name", "pg_settings",
    "clients_swept", "filesystem_name", "wal_drive", "drive_state", "trim",
)  # fmt: skip


def rep_dir(cell_dir: Path, repetition: int, attempt: int = 1) -> Path:
    """The run folder of one attempt at one repetition: ``rep-N`` for the first,
    ``rep-N-attempt-K`` for a retry, so every attempt's outputs are kept."""
    name = f"rep-{repetition}" if attempt == 1 else f"rep-{repetition}-attempt-{attempt}"
    return cell_dir / name


def write_json(path: Path, doc: Any) -> None:
    """Atomically: a crash leaves the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def load_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DrivelabError(f"{path}: missing (not a run folder?)") from None
    except OSError as err:
        raise DrivelabError(f"{path}: cannot read: {err.strerror}") from None
    except UnicodeDecodeError:
        raise DrivelabError(f"{path}: not JSON (not UTF-8 text)") from None
    try:
        return json.loads(text, parse_int=functools.partial(_bounded_int, path))
    except json.JSONDecodeError as err:
        raise DrivelabError(
            f"{path}: not JSON (line {err.lineno} column {err.colno}: {err.msg})"
        ) from None


#: the integers a store column holds (SQLite's INTEGER, PostgreSQL's bigint)
_INT64 = range(-(2**63), 2**63)


def _bounded_int(path: Path, text: str) -> int:
    """An integer of a run folder's JSON, refused beyond 64 bits: no writer of drivelab's
    makes one, and the store could not hold it (sqlite3 raised OverflowError)."""
    value = int(text)
    if value not in _INT64:
        shown = text if len(text) <= 24 else f"{text[:12]}...({len(text)} digits)"
        raise DrivelabError(f"{path}: a number out of range: {shown} (beyond 64-bit integers)")
    return value


class Checker:
    """Typed look-ups in a JSON object; a problem is one line naming the file and key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, message: str) -> DrivelabError:
        return DrivelabError(f"{self.path}: {message}")

    def obj(self, value: Any, name: str) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            what = "the file" if not name else repr(name)
            raise self.fail(f"{what} must be a JSON object, not {_kind(value)}")
        return value

    def get(  # noqa: PLR0917  (one look-up, spelled out)
        self,
        doc: Mapping[str, Any],
        key: str,
        types: tuple[type, ...],
        prefix: str = "",
        required: bool = True,
        default: Any = None,
    ) -> Any:
        name = f"{prefix}{key}"
        if key not in doc:
            if required:
                raise self.fail(f"missing key {name!r}")
            return default
        value = doc[key]
        if value is None and not required:
            return default
        ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
        if not ok:
            want = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)
            raise self.fail(f"{name!r} must be {want}, not {_kind(value)} {_short(value)}")
        return value


_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    list: "a list",
    dict: "an object",
    bool: "true or false",
}
NUMBER = (int, float)


def _kind(value: Any) -> str:
    return {
        type(None): "null",
        bool: "a boolean",
        str: "a string",
        int: "a number",
        float: "a number",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class RunMeta:
    """``run.json``: what the controller ran for one repetition of one cell.

    ``scenario_info`` carries the scenario's description and baseline drive, so a run
    folder gathered into another store still says what the scenario was for."""

    scenario: str
    cell_id: str
    cell: CellSpec
    repetition: int
    client_hosts: tuple[str, ...]
    pgbench: Mapping[str, Any]
    db_host: str | None = None
    scenario_info: Mapping[str, Any] = field(default_factory=dict)
    start_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    ansible_failures: tuple[Mapping[str, Any], ...] = ()
    path: Path | None = None
    #: 1, or the retry's number (a partial or failed attempt run again)
    attempt: int = 1
    #: checkpoint, restart and dropped caches before the run (False: a rate search's
    #: steps, which run warm)
    cold_start: bool = True
    #: without the cold start, settled first (vacuums, CHECKPOINT, sync; server and caches
    #: kept): a rate search's steps
    settled: bool = False
    #: the host name of the controller that ran it (run.json written before this field
    #: existed: None, and the store records the gathering controller)
    controller: str | None = None

    @property
    def log(self) -> str:
        return str(self.pgbench["log"])

    @property
    def sampling_rate(self) -> float | None:
        rate = self.pgbench.get("sampling_rate")
        return float(rate) if rate is not None else None

    @property
    def aggregate_interval(self) -> float | None:
        interval = self.pgbench.get("aggregate_interval")
        return float(interval) if interval is not None else None

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "scenario_info": dict(self.scenario_info),
            "cell_id": self.cell_id,
            "cell": self.cell.to_json(),
            "repetition": self.repetition,
            "attempt": self.attempt,
            "cold_start": self.cold_start,
            "settled": self.settled,
            "controller": self.controller,
            "db_host": self.db_host,
            "client_hosts": list(self.client_hosts),
            "pgbench": dict(self.pgbench),
            "start_at": self.start_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "ansible_failures": [dict(f) for f in self.ansible_failures],
        }

    def write(self, run_dir: Path) -> None:
        """``run_dir/run.json``, atomically."""
        write_json(run_dir / RUN_JSON, self.to_json())

    @classmethod
    def read(cls, run_dir: Path) -> RunMeta:
        """``run_dir/run.json``, checked: every key gather needs, with its type."""
        path = run_dir / RUN_JSON
        if not run_dir.is_dir():
            raise DrivelabError(f"{run_dir}: no such run folder")
        c = Checker(path)
        doc = c.obj(load_json(path), "")
        scenario = c.get(doc, "scenario", (str,))
        cell_id = c.get(doc, "cell_id", (str,))
        cell = c.obj(c.get(doc, "cell", (dict,)), "cell")
        repetition = c.get(doc, "repetition", (int,))
        if repetition < 0:
            raise c.fail(f"'repetition' must be 0 or more, not {repetition}")
        attempt = c.get(doc, "attempt", (int,), required=False, default=1)
        if attempt < 1:
            raise c.fail(f"'attempt' must be 1 or more, not {attempt}")
        hosts = c.get(doc, "client_hosts", (list,))
        if not hosts or not all(isinstance(h, str) and h for h in hosts):
            raise c.fail(
                f"'client_hosts' must be a non-empty list of host names, not {_short(hosts)}"
            )
        if len(set(hosts)) != len(hosts):
            raise c.fail(f"'client_hosts' names a host twice: {_short(hosts)}")
        opts = c.obj(c.get(doc, "pgbench", (dict,)), "pgbench")
        log = c.get(opts, "log", (str,), "pgbench.")
        if log not in LOG_MODES:
            raise c.fail(f"'pgbench.log' must be one of {', '.join(LOG_MODES)}, not {log!r}")
        rate = c.get(opts, "sampling_rate", NUMBER, "pgbench.", required=False)
        if log == "sampled" and not (rate and 0 < rate <= 1):
            raise c.fail(
                f"'pgbench.sampling_rate' must be in (0, 1] when log is 'sampled', not {rate}"
            )
        interval = c.get(opts, "aggregate_interval", NUMBER, "pgbench.", required=False)
        if interval is not None and interval <= 0:
            raise c.fail(f"'pgbench.aggregate_interval' must be positive, not {interval}")
        failures = c.get(doc, "ansible_failures", (list,), required=False, default=[])
        for f in failures:
            c.obj(f, "ansible_failures[]")
        info = c.obj(c.get(doc, "scenario_info", (dict,), required=False, default={}), "")
        where = "scenario_info."
        return cls(
            scenario=scenario,
            scenario_info={
                "description": c.get(info, "description", (str,), where, False, ""),
                "baseline": c.get(info, "baseline", (str,), where, required=False),
            },
            cell_id=cell_id,
            cell=_cell_spec(c, cell, len(hosts)),
            repetition=repetition,
            attempt=attempt,
            cold_start=c.get(doc, "cold_start", (bool,), required=False, default=True),
            settled=c.get(doc, "settled", (bool,), required=False, default=False),
            controller=c.get(doc, "controller", (str,), required=False) or None,
            db_host=c.get(doc, "db_host", (str,), required=False),
            client_hosts=tuple(hosts),
            pgbench=opts,
            start_at=c.get(doc, "start_at", NUMBER, required=False),
            started_at=c.get(doc, "started_at", NUMBER, required=False),
            ended_at=c.get(doc, "ended_at", NUMBER, required=False),
            ansible_failures=tuple(failures),
            path=path,
        )


def _cell_spec(c: Checker, cell: Mapping[str, Any], hosts: int) -> CellSpec:
    params = dict(c.obj(c.get(cell, "params", (dict,), "cell.", required=False, default={}), ""))
    params.update({k: v for k, v in cell.items() if k not in (*CELL_FIELDS, "params")})
    write_cache = c.get(cell, "write_cache", (str,), "cell.", required=False, default="leave")
    if write_cache not in WRITE_CACHE_STATES:
        raise c.fail(
            f"'cell.write_cache' must be one of {', '.join(WRITE_CACHE_STATES)},"
            f" not {_short(write_cache)}"
        )
    mkfs = c.get(cell, "mkfs_options", (list,), "cell.", required=False, default=[])
    if not all(isinstance(o, str) for o in mkfs):
        raise c.fail(f"'cell.mkfs_options' must be a list of strings, not {_short(mkfs)}")
    pg = c.obj(c.get(cell, "pg_settings", (dict,), "cell.", required=False, default={}), "")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in pg.items()):
        raise c.fail(f"'cell.pg_settings' must map names to strings, not {_short(pg)}")
    return CellSpec(
        drive=c.get(cell, "drive", (str,), "cell."),
        workload=c.get(cell, "workload", (str,), "cell.", required=False, default="tpcb"),
        filesystem=c.get(cell, "filesystem", (str,), "cell.", required=False),
        placement=c.get(cell, "placement", (str,), "cell.", required=False),
        scale=c.get(cell, "scale", (int,), "cell.", required=False),
        clients=c.get(cell, "clients", (int,), "cell.", required=False, default=hosts),
        params=params,
        write_cache=write_cache,
        mkfs_options=tuple(mkfs),
        mount_options=c.get(cell, "mount_options", (str,), "cell.", required=False),
        pg_settings_name=c.get(cell, "pg_settings_name", (str,), "cell.", required=False),
        pg_settings=dict(pg),
        clients_swept=c.get(cell, "clients_swept", (bool,), "cell.", required=False, default=False),
        filesystem_name=c.get(cell, "filesystem_name", (str,), "cell.", required=False),
        wal_drive=c.get(cell, "wal_drive", (str,), "cell.", required=False),
        drive_state=c.get(cell, "drive_state", (str,), "cell.", required=False),
        trim=c.get(cell, "trim", (str,), "cell.", required=False, default="none"),
    )


def find_run_dirs(paths: Sequence[Path | str]) -> list[Path]:
    """Each path that is a run folder, or, for a folder holding none itself, every
    run folder below it (``runs/<scenario>`` -> its ``<cell>/rep-N``), sorted."""
    out: list[Path] = []
    for p in map(Path, paths):
        if (p / RUN_JSON).exists() or not p.is_dir():
            out.append(p)
            continue
        below = sorted(f.parent for f in p.rglob(RUN_JSON))
        out += below or [p]
    return out


def pg_major(database_json: Path) -> str | None:
    """The PostgreSQL major version ("15"; "9.6" before 10) of the server whose
    ``database.json`` this is (its ``postgresql.version``, as the server reports it),
    or None when the file or the figure is missing or unreadable."""
    try:
        version = json.loads(database_json.read_text(encoding="utf-8"))["postgresql"]["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    m = re.match(r"(\d+)(?:\.(\d+))?", version) if isinstance(version, str) else None
    if not m:
        return None
    return m[1] if int(m[1]) >= 10 or m[2] is None else f"{m[1]}.{m[2]}"


def run_meta(
    cell: Cell,
    repetition: int,
    hosts: list[str],
    db_host: str,
    scenario_info: Mapping[str, Any] | None = None,
) -> RunMeta:
    """run.json of one repetition of ``cell`` on ``hosts``, as written when it starts."""
    return RunMeta(
        scenario=cell.scenario,
        scenario_info=dict(scenario_info or {}),
        cell_id=cell.cell_id,
        cell=replace(cell, hosts=tuple(hosts)).spec,
        repetition=repetition,
        db_host=db_host,
        client_hosts=tuple(hosts),
        pgbench=cell.pgbench.for_run_json(),
        started_at=time.time(),
        controller=socket.gethostname(),
    )
