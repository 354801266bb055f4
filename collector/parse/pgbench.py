"""pgbench output, every format from 8.4 to 17: the final report, stderr (errors,
abort), ``-P`` progress lines, ``--aggregate-interval`` logs and ``-i`` output.
Per-transaction logs are streamed by :mod:`collector.parse.txlog` (re-exported here).

Lines are recognised by their key (``number of clients:``, ``tps =``), never by
position; other tools' lines mixed in (2>&1, progress, server NOTICE/FATAL,
warnings) are skipped as noise. Inside the report block (``transaction type:`` up
to the ``tps`` lines) an unknown line is an error, so a format change is noticed,
not misread.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from collector.parse import ParseError, excerpt
from collector.parse.txlog import summarize_txlog
from collector.records.pgbench import (
    AggInterval,
    PgbenchInit,
    PgbenchReport,
    PgbenchStderr,
    ProgressPoint,
)

__all__ = [
    "parse_agglog",
    "parse_init",
    "parse_progress",
    "parse_rc",
    "parse_report",
    "parse_stderr",
    "summarize_txlog",
]

MS = 1e-3
US = 1e-6
_PCT = r"\(([\d.]+) ?%\)"

# Lines that may appear anywhere (stderr merged into stdout, server messages).
_NOISE = re.compile(
    r"^(?:\s*$"
    r"|progress: "
    r"|\S*pgbench: "
    r"|starting vacuum"
    r"|(?:NOTICE|WARNING|ERROR|FATAL|PANIC|DETAIL|HINT|CONTEXT|STATEMENT|LINE \d+):"
    r"|\s"
    r"|client \d+ "
    r"|Run was aborted"
    r"|(?:dropping|creating|generating|vacuuming)\b"
    r"|done in "
    r"|\d+ of \d+ tuples"
    r")"
)

_VERSION = re.compile(r"^pgbench \((?P<v>[^,()]+(?:\([^)]*\))?)(?:, server (?P<s>.+))?\)\s*$")

# key -> regex; the handler below turns groups into fields.
_LINES: dict[str, re.Pattern[str]] = {
    k: re.compile(v)
    for k, v in {
        "type": r"^transaction type: (.+)$",
        "scale": r"^scaling factor: (\d+)$",
        "partition_method": r"^partition method: (\w+)$",
        "partitions": r"^partitions: (\d+)$",
        "query_mode": r"^query mode: (\w+)$",
        "clients": r"^number of clients: (\d+)$",
        "threads": r"^number of threads: (\d+)$",
        "max_tries": r"^maximum number of tries: (\d+)$",
        "duration": r"^duration: (\d+) s$",
        "per_client": r"^number of transactions per client: (\d+)$",
        "processed": r"^number of transactions actually processed: (\d+)(?:/(\d+))?$",
        "failed": rf"^number of failed transactions: (\d+) {_PCT}$",
        "serialization": rf"^number of serialization failures: (\d+) {_PCT}$",
        "deadlock": rf"^number of deadlock failures: (\d+) {_PCT}$",
        "retried": rf"^number of transactions retried: (\d+) {_PCT}$",
        "retries": r"^total number of retries: (\d+)$",
        "skipped": rf"^number of transactions skipped: (\d+) {_PCT}$",
        "above": r"^number of transactions above the ([\d.]+) ms latency limit: "
        rf"(\d+)(?:/\d+)? {_PCT}$",
        "lat_avg": r"^latency average[ =:]+([\d.]+) ms( \(including failures\))?$",
        "lat_std": r"^latency stddev[ =:]+([\d.]+) ms$",
        "lag": r"^rate limit schedule lag: avg ([\d.]+) \(max ([\d.]+)\) ms$",
        "conn": r"^(initial|average) connection time = ([\d.]+) ms$",
        "tps": r"^tps = ([\d.]+) \((.+)\)$",
    }.items()
}

_INT_FIELDS = {
    "scale": "scaling_factor",
    "partitions": "partitions",
    "clients": "clients",
    "threads": "threads",
    "max_tries": "max_tries",
    "per_client": "transactions_per_client",
    "failed": "failed",
    "serialization": "serialization_failures",
    "deadlock": "deadlock_failures",
    "retried": "retried",
    "retries": "retries",
    "skipped": "skipped",
}


def _number(text: str, where: tuple[str, int, str]) -> float:
    try:
        return float(text)
    except ValueError:  # pragma: no cover - the regexes only let digits through
        raise ParseError(where[0], where[1], f"not a number in {excerpt(where[2])}") from None


#: the largest count a store column holds (SQLite's and PostgreSQL's bigint)
INT64_MAX = 2**63 - 1


def _count(text: str, where: tuple[str, int, str]) -> int:
    """A count pgbench printed: digits, and within what a store can hold (a damaged or
    forged report's 10^23 is the report's fault, not the store's)."""
    value = int(text)
    if value > INT64_MAX:
        raise ParseError(where[0], where[1], f"a count out of range in {excerpt(where[2])}")
    return value


def parse_report(text: str, source: str = "<pgbench stdout>") -> PgbenchReport:
    """The final report in ``text`` (stdout, or stdout and stderr together).

    Raises :class:`ParseError` naming ``source`` and a line when there is no report
    (only errors, or only the version line), when it stops before its ``tps`` line,
    or when a line inside it is not one pgbench prints."""
    if not text.strip():
        raise ParseError(source, None, "empty pgbench output: no report")
    noise = parse_stderr(text, source)
    lines = text.splitlines()
    fields: dict = {}
    start = _find_header(lines, fields)
    if start is None:
        what = "only pgbench's version line" if "pgbench_version" in fields else "no report"
        why = f": {noise.errors[0]}" if noise.errors else ""
        raise ParseError(
            source, len(lines), f"not a pgbench report ({what}, no 'transaction type:'){why}"
        )
    _read_block(lines, start, fields, source)
    for key, name in (("tps", "tps ="), ("processed", "number of transactions actually")):
        if key not in fields:
            raise ParseError(
                source, len(lines), f"pgbench report ends without its '{name}' line (truncated?)"
            )
    if "clients" not in fields:
        raise ParseError(source, len(lines), "pgbench report has no 'number of clients:' line")
    return PgbenchReport(source=source, errors=noise.errors, aborted=noise.aborted, **fields)


def _find_header(lines: list[str], fields: dict) -> int | None:
    """Index of the ``transaction type:`` line; notes the version line on the way."""
    for i, line in enumerate(lines):
        m = _VERSION.match(line)
        if m:
            fields["pgbench_version"] = m["v"].strip()
            fields["server_version"] = (m["s"] or "").strip() or None
            continue
        m = _LINES["type"].match(line)
        if m:
            fields["transaction_type"] = m[1].strip()
            return i
    return None


def _read_block(lines: list[str], start: int, fields: dict, source: str) -> None:
    seen_tps = False
    for lineno in range(start + 2, len(lines) + 1):
        line = lines[lineno - 1].rstrip("\r")
        key, m = _match_report_line(line)
        if m is None:
            if _NOISE.match(line) or line.startswith("Run was aborted"):
                continue
            if seen_tps:  # per-script and per-statement sections follow; not ours
                return
            raise ParseError(source, lineno, f"unrecognised pgbench report line {excerpt(line)}")
        where = (source, lineno, line)
        if key == "tps":
            seen_tps = True
            _take_tps(fields, m, where)
        elif seen_tps:
            raise ParseError(source, lineno, f"report line after 'tps =': {excerpt(line)}")
        else:
            _take(fields, key, m, where)


def _match_report_line(line: str) -> tuple[str, re.Match[str] | None]:
    for key, pattern in _LINES.items():
        m = pattern.match(line)
        if m:
            return key, m
    return "", None


def _take_tps(fields: dict, m: re.Match[str], where: tuple[str, int, str]) -> None:
    value = _number(m[1], where)
    kind = m[2].strip()
    if kind.startswith("including connections"):
        # <=13 prints "including" first, then "excluding": the latter is the result
        fields["tps_including_connections"] = value
        fields.setdefault("tps", value)
        fields.setdefault("tps_kind", kind)
        return
    fields["tps"] = value
    fields["tps_kind"] = kind


def _take(fields: dict, key: str, m: re.Match[str], where: tuple[str, int, str]) -> None:
    if key in _INT_FIELDS:
        fields[_INT_FIELDS[key]] = _count(m[1], where)
    elif key in ("partition_method", "query_mode"):
        fields[key] = m[1]
    elif key == "duration":
        fields["duration_s"] = float(m[1])
    elif key == "processed":
        fields["processed"] = _count(m[1], where)
        if m[2] is not None:
            fields["planned_transactions"] = _count(m[2], where)
    elif key == "above":
        fields["latency_limit_s"] = _number(m[1], where) * MS
        fields["above_latency_limit"] = _count(m[2], where)
    elif key == "lat_avg":
        fields["latency_avg_s"] = _number(m[1], where) * MS
        fields["latency_avg_includes_failures"] = m[2] is not None
    elif key == "lat_std":
        fields["latency_stddev_s"] = _number(m[1], where) * MS
    elif key == "lag":
        fields["lag_avg_s"] = _number(m[1], where) * MS
        fields["lag_max_s"] = _number(m[2], where) * MS
    elif key == "conn":
        fields["connection_time_kind"] = m[1]
        fields["connection_time_s"] = _number(m[2], where) * MS
    elif key == "type":
        raise ParseError(
            where[0], where[1], "a second 'transaction type:' line: two reports in one"
        )


_ERROR = re.compile(r"^\S*pgbench: (?:error|fatal): (.*)$")
_WARNING = re.compile(r"^\S*pgbench: warning: (.*)$")
_OLD_ABORT = re.compile(r"^(client \d+ aborted .*)$")
_BAD_OPTION = re.compile(r"^\S*pgbench: ((?:unrecognized|invalid) option.*)$")


def _error_text(line: str) -> str | None:
    for pattern in (_ERROR, _OLD_ABORT, _BAD_OPTION):
        m = pattern.match(line)
        if m:
            return m[1].strip()
    return None


def parse_stderr(text: str, source: str = "<pgbench stderr>") -> PgbenchStderr:
    """Errors, warnings and the abort flag from pgbench's stderr. Any text is valid
    stderr, so this never raises; progress lines are :func:`parse_progress`'s."""
    errors: list[str] = []
    warnings: list[str] = []
    aborted = False
    for line in text.splitlines():
        err = _error_text(line)
        if err is not None:
            errors.append(err)
        elif line.startswith("Run was aborted"):
            errors.append(line.strip())
        else:
            m = _WARNING.match(line)
            if m:
                warnings.append(m[1].strip())
            continue
        aborted = aborted or errors[-1].startswith("Run was aborted")
    return PgbenchStderr(errors=tuple(errors), warnings=tuple(warnings), aborted=aborted)


def parse_rc(text: str, source: str = "<rc>") -> int:
    """The exit code in a ``rc=N`` file (or a bare number)."""
    m = re.fullmatch(r"\s*(?:rc=)?(-?\d+)\s*", text)
    if not m or abs(int(m[1])) > 255:  # a process's status, or Ansible's -N for signal N
        raise ParseError(source, 1, f"not an exit code: {excerpt(text)}")
    return int(m[1])


_PROGRESS = re.compile(r"^progress: (?P<t>[\d.]+) s, (?P<rest>.*)$")
_PROGRESS_PARTS: dict[str, re.Pattern[str]] = {
    "tps": re.compile(r"^([\d.]+) tps$"),
    "lat": re.compile(r"^lat ([\d.]+) ms(?: stddev ([\d.]+|NaN))?$"),
    "failed": re.compile(r"^(\d+) failed$"),
    "lag": re.compile(r"^lag ([\d.]+) ms$"),
    "skipped": re.compile(r"^(\d+) skipped$"),
    "retried": re.compile(r"^(\d+) retried$"),
    "retries": re.compile(r"^(\d+) retries$"),
}
#: ``--progress-timestamp`` values are epoch seconds; a relative time is never this big.
EPOCH_THRESHOLD = 1e8


def parse_progress(text: str, source: str = "<pgbench stderr>") -> list[ProgressPoint]:
    """Every ``progress:`` line in ``text`` (other lines are skipped). A ``progress:``
    line that does not parse, or is cut short, is an error naming its line."""
    points: list[ProgressPoint] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.startswith("progress:"):
            continue
        m = _PROGRESS.match(line.rstrip())
        if not m:
            raise ParseError(source, lineno, f"unrecognised progress line {excerpt(line)}")
        values: dict[str, tuple[str | None, ...]] = {}
        for part in m["rest"].split(", "):
            for key, pattern in _PROGRESS_PARTS.items():
                pm = pattern.match(part)
                if pm:
                    values[key] = pm.groups()
                    break
            else:
                raise ParseError(
                    source, lineno, f"unrecognised part {part!r} in progress line {excerpt(line)}"
                )
        if "tps" not in values or "lat" not in values:
            raise ParseError(source, lineno, f"progress line without tps or lat {excerpt(line)}")
        t = float(m["t"])
        std = values["lat"][1]

        def count(key: str, values: dict = values) -> int | None:
            return int(values[key][0]) if key in values else None

        points.append(
            ProgressPoint(
                t=t,
                tps=float(values["tps"][0]),
                latency_avg_s=float(values["lat"][0]) * MS,
                latency_stddev_s=float(std) * MS if std not in (None, "NaN") else None,
                failed=count("failed"),
                lag_s=float(values["lag"][0]) * MS if "lag" in values else None,
                skipped=count("skipped"),
                retried=count("retried"),
                retries=count("retries"),
                epoch=t > EPOCH_THRESHOLD,
            )
        )
    return points


#: --aggregate-interval layouts: <=14 writes 6, 10 (--rate) or 11 (--rate -L); 15+ always 15.
AGG_COLUMNS = (
    "start",
    "transactions",
    "latency_sum_s",
    "latency_sum2_s2",
    "latency_min_s",
    "latency_max_s",
    "lag_sum_s",
    "lag_sum2_s2",
    "lag_min_s",
    "lag_max_s",
    "skipped",
    "retried",
    "retries",
    "serialization_failures",
    "deadlock_failures",
)
_AGG_WIDTHS = (6, 10, 11, 15)
_AGG_SCALE = {
    "latency_sum_s": US,
    "latency_sum2_s2": US * US,
    "latency_min_s": US,
    "latency_max_s": US,
    "lag_sum_s": US,
    "lag_sum2_s2": US * US,
    "lag_min_s": US,
    "lag_max_s": US,
}
_AGG_INTS = {
    "transactions",
    "skipped",
    "retried",
    "retries",
    "serialization_failures",
    "deadlock_failures",
}


def parse_agglog(lines: Iterable[str] | str, source: str = "<agglog>") -> list[AggInterval]:
    """An ``--aggregate-interval`` log (one thread's file). Every line must have one of
    the layouts pgbench writes (6, 10, 11 or 15 numbers); µs become seconds.
    Remember pgbench never writes the last, partial interval."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    out: list[AggInterval] = []
    width = None
    for lineno, line in enumerate(lines, 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) not in _AGG_WIDTHS:
            raise ParseError(
                source,
                lineno,
                f"{len(parts)} columns; an aggregate log line has 6, 10, 11 or 15: {excerpt(line)}",
            )
        if width is not None and len(parts) != width:
            raise ParseError(
                source, lineno, f"{len(parts)} columns after lines of {width}: {excerpt(line)}"
            )
        width = len(parts)
        try:
            nums = [_count(p, (source, lineno, line)) for p in parts]
        except ValueError:
            raise ParseError(source, lineno, f"not all numbers: {excerpt(line)}") from None
        kw: dict = {}
        for name, value in zip(AGG_COLUMNS, nums, strict=False):
            kw[name] = value if name in _AGG_INTS else value * _AGG_SCALE.get(name, 1.0)
        kw["start"] = float(nums[0])
        out.append(AggInterval(**kw))
    return out


def read_agglogs(paths: Iterable[Path | str]) -> list[AggInterval]:
    """Every thread file of one pgbench, merged into one interval list by start time."""
    merged: dict[float, list[AggInterval]] = {}
    for path in paths:
        p = Path(path)
        for iv in parse_agglog(p.read_text(encoding="utf-8"), str(p)):
            merged.setdefault(iv.start, []).append(iv)
    return [_merge_intervals(ivs) for _, ivs in sorted(merged.items())]


def _merge_intervals(ivs: list[AggInterval]) -> AggInterval:
    if len(ivs) == 1:
        return ivs[0]

    def total(name: str) -> float | int | None:
        vals = [getattr(i, name) for i in ivs]
        return None if any(v is None for v in vals) else sum(vals)

    def extreme(name: str, fn) -> float | None:
        vals = [getattr(i, name) for i in ivs if getattr(i, name) is not None]
        return fn(vals) if vals else None

    active = [i for i in ivs if i.transactions] or ivs
    kw = {name: total(name) for name in AGG_COLUMNS[1:] if name not in ("start",)}
    kw["latency_min_s"] = min(i.latency_min_s for i in active)
    kw["latency_max_s"] = max(i.latency_max_s for i in active)
    kw["lag_min_s"] = extreme("lag_min_s", min)
    kw["lag_max_s"] = extreme("lag_max_s", max)
    return AggInterval(start=ivs[0].start, **kw)


_INIT_DONE = re.compile(r"^done in ([\d.]+) s \((.*)\)\.?\s*$")
_INIT_STEP = re.compile(r"^(.+?) ([\d.]+) s$")
_INIT_TUPLES = re.compile(r"^(\d+) of (\d+) tuples \(\d+%\) ")


def parse_init(text: str, source: str = "<pgbench -i>") -> PgbenchInit:
    """``pgbench -i`` output (stderr): the ``done in`` line's total and steps."""
    tuples = None
    for lineno, line in enumerate(text.splitlines(), 1):
        m = _INIT_TUPLES.match(line)
        if m:
            tuples = int(m[2])
            continue
        m = _INIT_DONE.match(line)
        if m:
            steps = {}
            for part in m[2].split(", "):
                sm = _INIT_STEP.match(part)
                if not sm:
                    raise ParseError(source, lineno, f"unrecognised init step {part!r}")
                steps[sm[1]] = float(sm[2])
            return PgbenchInit(total_s=float(m[1]), steps=steps, tuples=tuples)
    errors = parse_stderr(text).errors
    why = f": {errors[0]}" if errors else " (truncated?)"
    raise ParseError(source, len(text.splitlines()) or None, f"no 'done in' line{why}")
