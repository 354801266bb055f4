"""Raw pre-tests of a drive (``playbooks/fio.yml``): their outputs as samples, and the
per-drive summary a report shows beside the pgbench figures.

The playbook leaves, per filesystem and write cache state, ``fio-<fs>-wcache-<state>.json``
(fio ``--output-format=json+``, one job after another: see
``roles/drive_pretest/templates/pretest.fio.j2``) and ``pg_test_fsync-<fs>-wcache-<state>.txt``.
:func:`collect` turns a folder of them into :class:`~collector.records.Sample` s labelled
``drive``, ``filesystem``, ``write_cache`` and ``cell``; :func:`summarize` reads samples
back into one :class:`PretestSummary` per drive and write cache state.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from collector.errors import DrivelabError
from collector.parse import ParseError
from collector.parse.fio import fio_samples, parse_fio_json
from collector.parse.pg_test_fsync import fsync_samples, parse_pg_test_fsync
from collector.records import CellSpec, Sample
from collector.verdicts import drivefacts, physics

#: the metric prefixes of the pre-tests' samples (fio's and pg_test_fsync's)
PRETEST_PREFIXES = ("drivelab_fio_", "drivelab_fsync_")

_NAME = re.compile(
    r"^(?P<kind>fio|pg_test_fsync)-(?P<fs>.+)-wcache-(?P<state>[a-z+]+)\.(json|txt)$"
)

#: fio job names of the job file, and what the summary calls them
SEQ_READ, SEQ_WRITE = "seq-read-1m", "seq-write-1m"
RAND = {
    "rand_read_qd1": ("rand-read-4k-qd1", "read"),
    "rand_read_qd32": ("rand-read-4k-qd32", "read"),
    "rand_write_qd1": ("rand-write-4k-qd1", "write"),
    "rand_write_qd32": ("rand-write-4k-qd32", "write"),
}
#: the block-size sweep: random reads at queue depth 1 (4 KiB is rand-read-4k-qd1)
SWEEP = {
    4096: "rand-read-4k-qd1",
    16384: "sweep-read-16k",
    65536: "sweep-read-64k",
    262144: "sweep-read-256k",
    1048576: "sweep-read-1m",
}
#: the default jobs of PostgreSQL's own patterns: its page read at random, WAL's write
PAGE_READ, WAL_WRITE = "rand-read-8k-qd1", "wal-write-8k-fdatasync"
#: pg_test_fsync's line a WAL flush is closest to (one 8 kB write, Linux's default method)
FSYNC_SECTION, FSYNC_METHOD = "one 8kB write", "fdatasync"


def collect(folder: Path, labels: Mapping[str, str] | None = None) -> list[Sample]:
    """Every pre-test output in ``folder`` as samples. A missing or unreadable output is
    a one-line error naming the file (the playbook succeeded, so it is a drivelab bug
    or a truncated copy)."""
    out: list[Sample] = []
    files = sorted(p for p in folder.iterdir() if _NAME.match(p.name)) if folder.is_dir() else []
    if not files:
        raise DrivelabError(f"{folder}: no pre-test outputs (fio-*.json, pg_test_fsync-*.txt)")
    for path in files:
        m = _NAME.match(path.name)
        assert m is not None  # noqa: S101  (filtered above)
        lab = {**(labels or {}), "drive": m["fs"], "write_cache": m["state"]}
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            if m["kind"] == "fio":
                result = parse_fio_json(text, str(path))
                axes = {j.name: matrix_axes(j.name, j.options) for j in result.jobs}
                out += [
                    replace(s, labels={**s.labels, **(axes.get(s.labels.get("job", "")) or {})})
                    for s in fio_samples(result, lab)
                ]
            else:
                out += fsync_samples(parse_pg_test_fsync(text, str(path))[1], lab)
        except ParseError as err:
            raise DrivelabError(str(err)) from None
    return out


#: what begins the name of a matrix job (collector.scenario.fiomatrix), whose axes are
#: read from the options fio itself reports it ran with (its "job options")
MATRIX_PREFIX = "m-"
_SIZE = re.compile(r"([0-9]+)([km]?)")
_UNIT = {"": 1, "k": 1024, "m": 1048576}


def matrix_axes(name: str, options: Mapping[str, str]) -> dict[str, str] | None:
    """A matrix job's axes from fio's own account of its options (``block_bytes`` in
    bytes; a random mix named ``mixed<read share>``), or None for a job of another kind
    or one whose options do not say them."""
    size = _SIZE.fullmatch(str(options.get("bs", "")).lower())
    if not name.startswith(MATRIX_PREFIX) or size is None:
        return None
    rw = options.get("rw")
    if rw is None or "iodepth" not in options or "numjobs" not in options:
        return None
    pattern = f"mixed{options.get('rwmixread', '50')}" if rw == "randrw" else rw
    return {"pattern": pattern, "block_bytes": str(int(size[1]) * _UNIT[size[2]]),
            "iodepth": options["iodepth"], "numjobs": options["numjobs"],
            "sync": "fdatasync" if options.get("fdatasync") == "1" else "direct"}  # fmt: skip


@dataclass(frozen=True)
class PretestSummary:
    """One drive (drivelab filesystem) in one write cache state. Base units: bytes per
    second, operations per second, seconds. None: not measured."""

    drive: str
    write_cache: str
    seq_read_bps: float | None = None
    seq_write_bps: float | None = None
    rand_read_qd1: float | None = None
    rand_read_qd32: float | None = None
    rand_write_qd1: float | None = None
    rand_write_qd32: float | None = None
    #: completion latency of 4 KiB random reads at queue depth 1: the access time
    latency_mean_s: float | None = None
    latency_p99_s: float | None = None
    #: pg_test_fsync, one 8 kB write, fdatasync: how often WAL can be flushed
    fsync_per_s: float | None = None
    #: block size -> bytes per second of random reads at queue depth 1
    sweep_bps: Mapping[int, float] | None = None
    #: 8 KiB random reads at queue depth 1 (a page), and 8 KiB buffered writes each
    #: followed by fdatasync (WAL's pattern), per second
    page_read_qd1: float | None = None
    wal_writes_per_s: float | None = None


def summarize(samples: Iterable[Sample]) -> list[PretestSummary]:
    """Pre-test samples (any order, other samples ignored) read back into one summary
    per drive and write cache state, in the order the drives first appear."""
    by_key: dict[tuple[str, str], dict[tuple[str, str, str, str], float]] = {}
    for s in samples:
        drive, state = s.labels.get("drive"), s.labels.get("write_cache", "-")
        if drive is None:
            continue
        key = (
            s.metric,
            s.labels.get("job", s.labels.get("method", "")),
            s.labels.get("direction", s.labels.get("section", "")),
            s.labels.get("quantile", ""),
        )
        by_key.setdefault((drive, state), {})[key] = s.value
    out = []
    for (drive, state), v in by_key.items():

        def get(metric: str, job: str, direction: str, quantile: str = "", v=v) -> float | None:
            return v.get((metric, job, direction, quantile))

        iops = "drivelab_fio_iops"
        bw = "drivelab_fio_bandwidth_bytes_per_second"
        sweep = {bs: val for bs, job in SWEEP.items() if (val := get(bw, job, "read")) is not None}
        out.append(
            PretestSummary(
                drive=drive,
                write_cache=state,
                seq_read_bps=get(bw, SEQ_READ, "read"),
                seq_write_bps=get(bw, SEQ_WRITE, "write"),
                **{k: get(iops, job, d) for k, (job, d) in RAND.items()},
                latency_mean_s=get(
                    "drivelab_fio_clat_mean_seconds", RAND["rand_read_qd1"][0], "read"
                ),
                latency_p99_s=get(
                    "drivelab_fio_clat_seconds", RAND["rand_read_qd1"][0], "read", "0.99"
                ),
                fsync_per_s=get("drivelab_fsync_ops_per_second", FSYNC_METHOD, FSYNC_SECTION),
                sweep_bps=sweep or None,
                page_read_qd1=get(iops, PAGE_READ, "read"),
                wal_writes_per_s=get(iops, WAL_WRITE, "write"),
            )
        )
    return out


def for_cell(samples: Iterable[Sample], cell: CellSpec) -> PretestSummary | None:
    """The pre-test a cell's run is judged against: its drive's, on its filesystem
    type, in the cell's write cache state, else (a cell that leaves the cache as it
    is) the drive's first. None: the drive has no pre-test."""
    fs = [s for s in samples if s.labels.get("filesystem", cell.filesystem) == cell.filesystem]
    mine = [p for p in summarize(fs) if p.drive == cell.drive]
    same = [p for p in mine if p.write_cache == cell.write_cache]
    if same:
        return same[0]
    return mine[0] if mine and cell.write_cache == "leave" else None


def physics_facts(samples: Iterable[Sample], facts_dir: Path) -> list[dict]:
    """The pre-tests' physics flags (:func:`collector.verdicts.physics.pretest_flags`: flush
    honesty of pg_test_fsync, the drives' notes), with each drive's rotation rate from
    its device facts in ``facts_dir`` (``<host>-<fs>.json``, as the drives stage left
    them), as the runner stores them with the pre-tests."""
    samples = list(samples)
    names = {s.labels["drive"] for s in samples if "drive" in s.labels}
    drives = {}
    for path in sorted(facts_dir.glob("*.json")) if facts_dir.is_dir() else []:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        name = doc.get("filesystem") if isinstance(doc, dict) else None
        if name in names:
            drives[name] = drivefacts.drive_from_facts(name, doc)
    return physics.as_facts(physics.pretest_flags(samples, drives))
