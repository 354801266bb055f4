"""``pg_test_fsync`` output: one :class:`FsyncResult` per measured line, by section.

Sections open with a line ending in ``:`` ("Compare file sync methods using one 8kB
write:"); measurement lines read ``<method>  <N> ops/sec  <M> usecs/op`` (the
usecs column arrived in 9.x) or ``<method>  n/a`` (``n/a*`` where direct I/O is
not supported).
"""

from __future__ import annotations

import re

from collector.parse import ParseError, excerpt
from collector.records import Sample
from collector.records.pretest import FsyncResult

_SECONDS = re.compile(r"^(\d+) seconds? per test$")
_SECTION = re.compile(r"^(\S.*):$")
_MEASURE = re.compile(
    r"^\s+(?P<method>\S.*?)\s+(?P<ops>[\d.]+) ops/sec(?:\s+(?P<us>\d+) usecs/op)?\s*$"
)
_NA = re.compile(r"^\s+(?P<method>\S.*?)\s+n/a(?P<star>\*)?\s*$")
_SHORT = {
    "Compare file sync methods using one 8kB write": "one 8kB write",
    "Compare file sync methods using two 8kB writes": "two 8kB writes",
    "Compare open_sync with different write sizes": "open_sync write sizes",
    "Test if fsync on non-write file descriptor is honored": "fsync on non-write descriptor",
    "Non-sync'ed 8kB writes": "non-synced 8kB write",
}


def parse_pg_test_fsync(
    text: str, source: str = "<pg_test_fsync>"
) -> tuple[float | None, list[FsyncResult]]:
    """Seconds per test (``None`` if not printed) and every measured line. A
    measurement-looking line that does not parse, or output with no measurements
    (truncated), raises :class:`ParseError`."""
    seconds = None
    section: str | None = None
    results: list[FsyncResult] = []
    lines = text.splitlines()
    for lineno, line in enumerate(lines, 1):
        m = _SECONDS.match(line)
        if m:
            seconds = float(m[1])
            continue
        m = _SECTION.match(line)
        if m:
            section = _SHORT.get(m[1], m[1])
            continue
        if not line.startswith((" ", "\t")) or not line.strip():
            continue  # notes: "(in wal_sync_method preference order ...)", "O_DIRECT ..."
        m = _MEASURE.match(line)
        na = _NA.match(line) if m is None else None
        if m is None and na is None:
            raise ParseError(source, lineno, f"unrecognised pg_test_fsync line {excerpt(line)}")
        if section is None:
            raise ParseError(source, lineno, "a measurement before any section header")
        if m is not None:
            us = m["us"]
            ops = float(m["ops"])
            results.append(
                FsyncResult(
                    section=section,
                    method=" ".join(m["method"].split()),
                    ops_per_s=ops,
                    seconds_per_op=int(us) * 1e-6 if us is not None else (1 / ops if ops else None),
                )
            )
        else:
            results.append(
                FsyncResult(
                    section=section,
                    method=" ".join(na["method"].split()),
                    ops_per_s=None,
                    seconds_per_op=None,
                    note="not supported (direct I/O)" if na["star"] else "not supported",
                )
            )
    if not results:
        raise ParseError(source, len(lines) or None, "no pg_test_fsync measurements (truncated?)")
    return seconds, results


def fsync_samples(results: list[FsyncResult], labels: dict[str, str] | None = None) -> list[Sample]:
    """Ops per second of every supported method, as samples."""
    return [
        Sample(
            "drivelab_fsync_ops_per_second",
            r.ops_per_s,
            "operations/second",
            {**(labels or {}), "section": r.section, "method": r.method},
        )
        for r in results
        if r.ops_per_s is not None
    ]
