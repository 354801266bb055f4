"""One client host's output in a run folder, read into its result.

A client's folder (``<run>/<client>/``, :data:`~collector.runfolder.CLIENT_FILES`) holds
pgbench's stdout, stderr and exit code, the wrapper's ``command.json`` and pgbench's log
files. :func:`gather_client` reads them with the parsers and the statistics into a
:class:`GatheredClient`: the client's result, its series on the controller's clock, its
raw files and command. A client that left no output, no exit code or no report is a
failed result with its reason, not an error. :mod:`collector.gather.folder` gathers the
run from its clients.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from collector.errors import DrivelabError
from collector.parse import ParseError, pgbench
from collector.records import ClientResult, RawOutput, RunStatus, SeriesPoint
from collector.records.pgbench import AggInterval, PgbenchReport
from collector.records.txlog import LatencySeries, TxLogSummary
from collector.runfolder import CLIENT_FILES, NUMBER, Checker, RunMeta, load_json
from collector.stats import tps as stats

_LOG_NAME = re.compile(r"^pgbench_log\.(\d+)(?:\.(\d+))?$")


@dataclass(frozen=True)
class GatheredClient:
    """One client host, read: its result, series (controller's clock), raw files,
    command.json, where its start came from, a note on its logs, its latency series."""

    result: ClientResult
    series: tuple[SeriesPoint, ...] = ()
    raw: tuple[RawOutput, ...] = ()
    command: Mapping[str, Any] = field(default_factory=dict)
    start_source: str | None = None
    note: str | None = None
    latency: LatencySeries | None = None


def one_line(text: str, width: int = 300) -> str:
    """``text`` on one line (whitespace runs as one space), cut to ``width``."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def _ansible_failure(meta: RunMeta, host: str) -> str | None:
    for f in meta.ansible_failures:
        if f.get("host") == host:
            task = f.get("task")
            msg = one_line(f.get("msg") or "failed")
            if f.get("kind") == "unreachable":
                # Ansible's text leads with its own words; ssh's last line says why
                why = (
                    msg[msg.rfind("ssh: ") :]
                    if "ssh: " in msg
                    else msg.removeprefix("Task failed: ")
                )
                during = f" during {task!r}" if task else ""
                return f"unreachable over SSH{during} ({why})"
            return f"ansible task {task!r} failed: {msg}" if task else f"ansible: {msg}"
    return None


def log_files(client_dir: Path, pid: int | None = None) -> list[Path]:
    """pgbench's log files of one client (``pgbench_log.<pid>``, then ``.<pid>.<n>`` by n).
    Logs of several pgbench processes are an error unless ``pid`` picks one."""
    by_pid: dict[int, list[tuple[int, Path]]] = {}
    for p in client_dir.iterdir():
        m = _LOG_NAME.match(p.name)
        if m and p.is_file():
            by_pid.setdefault(int(m[1]), []).append((int(m[2] or 0), p))
    if not by_pid:
        return []
    if pid in by_pid:
        chosen = by_pid[pid]
    elif len(by_pid) == 1:
        chosen = next(iter(by_pid.values()))
    else:
        pids = ", ".join(str(p) for p in sorted(by_pid))
        raise DrivelabError(
            f"{client_dir}: logs of {len(by_pid)} pgbench processes (pids {pids}), "
            "and command.json names none of them"
        )
    return [p for _, p in sorted(chosen)]


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None


#: the instants of command.json on the client's own clock (start_at and chosen_at are the
#: controller's once the wrapper was given the client's offset, clock_offset_s)
CLIENT_CLOCK = ("armed_at", "go_at", "launched_at", "ended_at")


def clock_offset(command: Mapping[str, Any]) -> float:
    """The client's clock minus the controller's, as the start measured it (0: unknown,
    or the wrapper was not told it)."""
    offset = command.get("clock_offset_s")
    return float(offset) if isinstance(offset, NUMBER) else 0.0


def _on_controller_clock(command: dict[str, Any]) -> dict[str, Any]:
    """command.json with its client-clock instants put on the controller's clock."""
    offset = clock_offset(command)
    if not offset:
        return command
    return {
        k: (v - offset if k in CLIENT_CLOCK and isinstance(v, NUMBER) else v)
        for k, v in command.items()
    }


def _shifted(result: ClientResult, series: list[SeriesPoint], offset: float):
    """A client's result and series on the controller's clock (its logs are on its own)."""
    if not offset:
        return result, series
    result = replace(
        result,
        start=None if result.start is None else result.start - offset,
        end=None if result.end is None else result.end - offset,
    )
    return result, [replace(p, start=p.start - offset) for p in series]


def gather_client(run_dir: Path, host: str, meta: RunMeta) -> GatheredClient:
    """One client host's result, series and raw files. Failure is a result, not an error."""
    d = run_dir / host
    ansible = _ansible_failure(meta, host)
    if not d.is_dir():
        reason = f"no output fetched from {host}" + (f" ({ansible})" if ansible else "")
        return GatheredClient(ClientResult(host, RunStatus.FAILED, reason))
    files = {kind: d / name for kind, name in CLIENT_FILES.items()}
    command: dict[str, Any] = {}
    if files["command"].exists():
        command = dict(Checker(files["command"]).obj(load_json(files["command"]), ""))
    offset, own_clock = clock_offset(command), command
    command = _on_controller_clock(command)
    pid = command.get("pid") if isinstance(command.get("pid"), int) else None
    logs = log_files(d, pid) if meta.log != "none" else []
    log_kind = "agglog" if meta.log == "aggregate" else "txlog"
    raw = tuple(
        [RawOutput(kind, str(p), host) for kind, p in files.items() if p.exists()]
        + [RawOutput(log_kind, str(p), host) for p in logs]
    )
    stdout = _read_text(files["stdout"])
    stderr_text = _read_text(files["stderr"]) or ""
    err = pgbench.parse_stderr(stderr_text, str(files["stderr"]))
    rc_text = _read_text(files["rc"])
    if rc_text is None:
        reason = err.reason or ansible or f"no exit code fetched from {host} (rc.txt missing)"
        return GatheredClient(
            ClientResult(host, RunStatus.FAILED, reason), raw=raw, command=command
        )
    rc = pgbench.parse_rc(rc_text, str(files["rc"]))
    report = None
    why = None
    if stdout is None:
        why = f"no stdout.txt fetched from {host}"
    else:
        try:
            report = pgbench.parse_report(stdout, str(files["stdout"]))
        except ParseError as e:
            why = str(e)
    if report is None:
        reason = err.reason or (f"pgbench exited {rc}" if rc else why)
        result = ClientResult(host, RunStatus.FAILED, reason, exit_code=rc)
        return GatheredClient(result, raw=raw, command=command)

    txlog, agg, series, source, note = _read_logs(host, logs, meta)
    if not series:  # placed on the client's clock, as the logs are
        series, source = _progress_series(host, stderr_text, files["stderr"], own_clock)
    result = stats.client_result(
        host, report, stderr=err, exit_code=rc, txlog=txlog, agglog=agg, series=series
    )
    # the start, the end and the series on the controller's clock (the per-second
    # latency series stays on the client's: its seconds are bins of its own log)
    result, series = _shifted(result, series, offset)
    if note and result.status == RunStatus.COMPLETE and note.startswith("unreadable"):
        # a log that does not parse after a clean exit: keep the figures, average nothing in
        result = replace(result, status=RunStatus.PARTIAL, reason=note)
    short = _log_count_problem(txlog, report, meta) if txlog is not None else None
    if short and result.status == RunStatus.COMPLETE:
        result = replace(result, status=RunStatus.PARTIAL, reason=short)
    lat = txlog.latency_series if txlog is not None else None
    return GatheredClient(result, tuple(series), raw, command, source, note, lat)


def _log_count_problem(txlog: TxLogSummary, report: PgbenchReport, meta: RunMeta) -> str | None:
    """A full per-transaction log holds one row per transaction pgbench counted
    (processed + failed + skipped, as on every real capture); fewer rows is a log cut
    short (a full disk, a fetch cut off), more is a log that is not this run's."""
    if meta.log != "full":
        return None  # a sampled log holds a share of them; an aggregate log no rows
    counted = report.processed + (report.failed or 0) + (report.skipped or 0)
    if txlog.rows == counted:
        return None
    parts = f"{report.processed:,} processed"
    parts += "".join(
        f" + {n:,} {name}"
        for name, n in (("failed", report.failed), ("skipped", report.skipped))
        if n
    )
    how = "cut short" if txlog.rows < counted else "holds more than this run"
    return (
        f"per-transaction log {how}: {txlog.rows:,} rows where pgbench counted "
        f"{counted:,} transactions ({parts})"
    )


def _read_logs(
    host: str, logs: list[Path], meta: RunMeta
) -> tuple[
    TxLogSummary | None, list[AggInterval] | None, list[SeriesPoint], str | None, str | None
]:
    """The client's pgbench logs, per run.json's ``log``: (txlog, agglog, series,
    series source, a note when they are missing or do not parse)."""
    if meta.log == "none":
        return None, None, [], None, None
    if not logs:
        return None, None, [], None, f"no pgbench_log.* files (log is {meta.log!r})"
    try:
        if meta.log == "aggregate":
            agg = pgbench.read_agglogs(logs)
            series = stats.series_from_agglog(host, agg, meta.aggregate_interval)
            return None, agg, series, "agglog" if agg else None, None
        limit_ms = meta.pgbench.get("latency_limit")
        limit = float(limit_ms) / 1e3 if isinstance(limit_ms, NUMBER) and limit_ms > 0 else None
        txlog = pgbench.summarize_txlog(logs, latency_limit_s=limit)
        rate = meta.sampling_rate if meta.log == "sampled" else 1.0
        series = stats.series_from_txlog(host, txlog, sampling_rate=rate or 1.0)
        return txlog, None, series, "txlog" if meta.log == "full" else "txlog sampled", None
    except ParseError as e:
        return None, None, [], None, f"unreadable pgbench log: {e}"


def _progress_series(
    host: str, stderr_text: str, source: Path, command: Mapping[str, Any]
) -> tuple[list[SeriesPoint], str | None]:
    """The ``-P`` lines as a series: epoch-stamped ones as they are, relative ones
    placed from the wrapper's ``launched_at`` (pgbench's t=0 is a little later)."""
    try:
        points = pgbench.parse_progress(stderr_text, str(source))
    except ParseError:
        return [], None
    if not points:
        return [], None
    launched = command.get("launched_at")
    if not points[0].epoch and not isinstance(launched, NUMBER):
        return [], None
    start = None if points[0].epoch else float(launched)
    return stats.series_from_progress(host, points, start_epoch=start), "progress"
