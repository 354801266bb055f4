"""The server log's checkpoint lines of one run's time span, read from the end of the
log backwards (never the whole file). Where the log is: the file the logging collector
writes (pg_current_logfile(), relative to the data directory), else the file Debian's
pg_ctlcluster hands to the server (the link /etc/postgresql/<major>/<cluster>/log, else
/var/log/postgresql/postgresql-<major>-<cluster>.log), with or without systemd.

Never fails for a log it cannot read: ``problem`` says why, and the run goes on (module
drivelab_pg_snapshot, after the run)."""

from __future__ import annotations

import datetime as dt
import os
import re

#: the log_line_prefix's %m at the start of a line: "2025-01-31 12:00:00.123 UTC"
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) (\S+) ")
#: checkpoint lines (and a standby's restartpoints, and the "too frequently" warning)
CHECKPOINT = re.compile(r"\b(?:checkpoint|restartpoint)s? (?:starting|complete|are occurring)")
STARTING = re.compile(r"\b(?:checkpoint|restartpoint) starting")
COMPLETE = re.compile(r"\b(?:checkpoint|restartpoint) complete")
#: a server (re)start: no checkpoint runs across it
READY = re.compile(r"database system is ready to accept|database system is shut down")
#: how far before the span to look for the start of a checkpoint running at its start
LOOKBACK_S = 86400.0
BLOCK = 65536


def log_path(major, cluster, logfile=None, data_directory=None):
    """Where the server writes its log, as pg_ctlcluster and the logging collector decide."""
    if logfile:
        return logfile if os.path.isabs(logfile) else os.path.join(data_directory or "", logfile)
    link = f"/etc/postgresql/{major}/{cluster}/log"
    if os.path.islink(link):
        return os.path.realpath(link)
    return f"/var/log/postgresql/postgresql-{major}-{cluster}.log"


def zone_of(name):
    """A tzinfo for log_timezone's name; UTC for UTC and its aliases."""
    if name.upper() in ("UTC", "GMT", "ETC/UTC", "ETC/GMT", "UCT", "ZULU", "ETC/ZULU"):
        return dt.timezone.utc  # noqa: UP017  (datetime.UTC is 3.11+; Debian 11 hosts have 3.9)
    from zoneinfo import ZoneInfo  # noqa: PLC0415  (Python 3.9+ hosts; UTC needs none)

    return ZoneInfo(name)


def stamp(line, zone):
    """The epoch of a line's %m timestamp, or None for a line without one."""
    m = STAMP.match(line)
    if not m:
        return None
    when = dt.datetime.fromisoformat(m[1])
    if m[2] in ("UTC", "GMT"):
        return when.replace(tzinfo=dt.timezone.utc).timestamp()  # noqa: UP017  (as above)
    return when.replace(tzinfo=zone).timestamp()


def lines_backwards(fh, max_bytes):
    """(line, bytes read so far) of a binary file from its last line to its first, at
    most ``max_bytes`` from the end (the first, partial line there is dropped)."""
    fh.seek(0, os.SEEK_END)
    size = pos = fh.tell()
    stop = max(pos - max_bytes, 0)
    rest = b""
    while pos > stop:
        step = min(BLOCK, pos - stop)
        pos -= step
        fh.seek(pos)
        chunk = fh.read(step) + rest
        parts = chunk.split(b"\n")
        rest = parts[0]
        for part in reversed(parts[1:]):
            if part:
                yield part.decode("utf-8", "replace"), size - pos
    if rest and stop == 0:
        yield rest.decode("utf-8", "replace"), size


def select(fh, since, until, zone, max_bytes=16 * 1024 * 1024):
    """The checkpoint lines stamped within [since, until], oldest first, and the start
    line of a checkpoint that was running at ``since``. Returns (lines, bytes read,
    whether the read reached back before ``since``)."""
    found = []
    before = None  # the last checkpoint line before since: is one running at since?
    reached = False
    read = 0
    for line, upto in lines_backwards(fh, max_bytes):
        read = upto
        at = stamp(line, zone)
        if at is None:
            continue
        if at > until:
            continue
        if at >= since:
            if CHECKPOINT.search(line):
                found.append(line)
            continue
        reached = True
        if STARTING.search(line) or COMPLETE.search(line):
            before = line
            break
        if READY.search(line) or at < since - LOOKBACK_S:
            break
    if before is not None and STARTING.search(before):
        found.append(before)
    return list(reversed(found)), read, reached


def checkpoint_lines(major, cluster, since, until, *, logfile=None, data_directory=None,
                     timezone="UTC", line_prefix=None, max_bytes=16 * 1024 * 1024):  # fmt: skip
    """The checkpoint lines within [since, until] as a dict: ``path`` (the log read),
    ``lines``, ``bytes_read`` and ``problem`` (None, or why the lines are missing or
    may be incomplete)."""
    path = log_path(major, cluster, logfile, data_directory)
    out = {"path": path, "lines": [], "bytes_read": 0, "problem": None}
    if since is None:
        return {**out, "problem": "no before snapshot: the span's start is unknown"}
    if line_prefix is not None and not line_prefix.startswith(("%m", "%t")):
        problem = f"log_line_prefix {line_prefix!r} does not start with a timestamp (%m)"
        return {**out, "problem": problem}
    try:
        zone = zone_of(timezone)
    except Exception as err:  # any zone the host cannot place: a problem, not a failure
        return {**out, "problem": f"log_timezone {timezone!r}: {err}"}
    try:
        with open(path, "rb") as fh:
            lines, read, reached = select(fh, since, until, zone, max_bytes)
    except OSError as err:
        return {**out, "problem": f"cannot read {path}: {err.strerror}"}
    out.update(lines=lines, bytes_read=read)
    if not reached and read >= max_bytes:
        out["problem"] = (
            f"only the last {read} bytes of {path} were read: the span's start is earlier"
        )
    return out
