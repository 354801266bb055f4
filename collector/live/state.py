"""What one client looks like right now: its :class:`Status`, the :class:`RunLabels`
of the run it belongs to, a :class:`ClientRow` snapshot, and the :class:`LiveState`
that pgbench's stderr lines feed. No SSH, no HTTP, no terminal here."""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from collector.parse import ParseError
from collector.parse.pgbench import parse_progress, parse_stderr

__all__ = ["LATENCY_BUCKETS_S", "ClientRow", "LiveState", "RunLabels", "Status"]

#: upper bounds of the live latency histogram's buckets, seconds (+Inf beyond): a
#: transaction of a write-cached NVMe drive (0.5 ms) to one queued behind a seek storm
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5,
                     1.0, 2.0, 5.0, 10.0)  # fmt: skip


class Status(StrEnum):
    WAITING = "waiting"  # connected (or connecting); pgbench has not started
    RUNNING = "running"
    DONE = "done"  # pgbench exited 0
    FAILED = "failed"  # pgbench exited non-zero
    LOST = "stream lost"  # the SSH stream ended before pgbench did

    @property
    def final(self) -> bool:
        return self in (Status.DONE, Status.FAILED, Status.LOST)


@dataclass(frozen=True)
class RunLabels:
    """Which run the clients belong to: the Prometheus labels besides ``client``."""

    scenario: str
    cell: str
    run: int | str  # the repetition
    drive: str

    def as_labels(self) -> dict[str, str]:
        return {
            "scenario": self.scenario,
            "cell": self.cell,
            "run": str(self.run),
            "drive": self.drive,
        }

    def title(self) -> str:
        return f"{self.scenario} / {self.cell} / rep {self.run} / {self.drive}"


@dataclass(frozen=True)
class ClientRow:
    """One client at one instant: what the table and the gauges show. Seconds and
    transactions/second; ``None`` when not known yet."""

    client: str
    status: Status
    reason: str | None = None
    tps_now: float | None = None
    tps_average: float | None = None
    latency_s: float | None = None
    elapsed_s: float | None = None
    remaining_s: float | None = None
    updated_at: float | None = None  # controller epoch of the last line or event
    up: bool = False  # the SSH stream is open and following
    #: transactions since pgbench started, from its progress lines (tps x interval): a
    #: counter that only grows; ``None`` before the first line
    transactions: float | None = None
    #: the latencies of the transactions its log has shown so far (followed when the
    #: log is per transaction): count per bucket of LATENCY_BUCKETS_S (not cumulative),
    #: then beyond the last; their sum in seconds; None when its log is not followed
    latency_buckets: tuple[int, ...] | None = None
    latency_sum_s: float = 0.0


class LiveState:
    """One client's live figures, fed line by line from pgbench's stderr. Thread-safe:
    a follower thread feeds it while the display and the exporter read snapshots.

    tps now and latency are the last progress line's (one interval). tps so far is
    the transactions counted from every progress line (tps times interval) over the
    elapsed time, which is pgbench's own clock: from its start to the last line. With
    ``--progress-timestamp`` the start is not printed; it is taken as one progress
    interval before the first line, when pgbench prints it."""

    def __init__(
        self,
        client: str,
        planned_s: float | None = None,
        *,
        progress_interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.planned_s = planned_s
        self.progress_interval_s = progress_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._status = Status.WAITING
        self._reason: str | None = None
        self._up = False
        self._start: float | None = None  # pgbench's t of its start
        self._last_t: float | None = None
        self._transactions = 0.0
        self._tps_now: float | None = None
        self._latency_s: float | None = None
        self._errors: list[str] = []
        self._bad_lines = 0
        self._updated_at: float | None = None
        self._buckets: list[int] | None = None  # the log's latencies, once followed
        self._latency_sum = 0.0

    @property
    def status(self) -> Status:
        with self._lock:
            return self._status

    @property
    def errors(self) -> tuple[str, ...]:
        """pgbench's error lines seen so far."""
        with self._lock:
            return tuple(self._errors)

    @property
    def bad_lines(self) -> int:
        """``progress:`` lines that did not parse (skipped)."""
        with self._lock:
            return self._bad_lines

    def feed(self, text: str) -> None:
        """Any amount of stderr text, whole lines."""
        for line in text.splitlines():
            self.feed_line(line)

    def feed_line(self, line: str) -> None:
        """One line of pgbench's stderr: a progress line updates the figures, an
        error line is kept for the reason, anything else is ignored."""
        line = line.rstrip("\r\n")
        if line.startswith("progress:"):
            try:
                points = parse_progress(line, f"{self.client} stderr")
            except ParseError:
                with self._lock:
                    self._bad_lines += 1
                return
            for point in points:
                self._add_point(point.t, point.tps, point.latency_avg_s, point.epoch)
            return
        errors = parse_stderr(line).errors
        if errors:
            with self._lock:
                self._errors.extend(errors)
                self._updated_at = self._clock()

    def feed_transaction(self, line: str) -> None:
        """One line of pgbench's per-transaction log (``client_id transaction_no time
        script_no time_epoch time_us [schedule_lag ...]``, time in µs): its latency
        counted in the histogram. A failed or skipped transaction (no latency), or a
        line that is not one, is left out."""
        fields = line.split()
        if len(fields) < 6 or not fields[2].isdigit():
            return
        seconds = int(fields[2]) / 1e6
        with self._lock:
            if self._buckets is None:
                self._buckets = [0] * (len(LATENCY_BUCKETS_S) + 1)
            self._buckets[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
            self._latency_sum += seconds

    def _add_point(self, t: float, tps: float, latency_s: float, epoch: bool) -> None:
        with self._lock:
            if self._last_t is not None and t <= self._last_t:
                return  # a line seen twice (a replayed tail) counts once
            if self._start is None:
                self._start = t - self.progress_interval_s if epoch else 0.0
            previous = self._last_t if self._last_t is not None else self._start
            self._transactions += tps * (t - previous)
            self._last_t = t
            self._tps_now = tps
            self._latency_s = latency_s
            if not self._status.final:
                self._status = Status.RUNNING
            self._updated_at = self._clock()

    def mark_connected(self) -> None:
        with self._lock:
            if not self._status.final:
                self._up = True
                self._updated_at = self._clock()

    def mark_started(self) -> None:
        """pgbench's stderr file has appeared: pgbench is running."""
        with self._lock:
            if not self._status.final:
                self._status = Status.RUNNING
                self._updated_at = self._clock()

    def mark_ended(self, rc: int) -> None:
        """``rc.txt`` has appeared: done on 0, failed otherwise (with pgbench's first
        error as the reason)."""
        with self._lock:
            if self._status.final:
                return
            self._up = False
            self._updated_at = self._clock()
            if rc == 0:
                self._status = Status.DONE
                return
            self._status = Status.FAILED
            first = f": {self._errors[0]}" if self._errors else ""
            self._reason = f"pgbench exited {rc}{first}"

    def mark_lost(self, reason: str) -> None:
        """The stream ended before pgbench did; the figures so far stay."""
        with self._lock:
            if self._status.final:
                return
            self._status = Status.LOST
            self._reason = reason
            self._up = False
            self._updated_at = self._clock()

    def snapshot(self) -> ClientRow:
        with self._lock:
            elapsed = None
            if self._last_t is not None and self._start is not None:
                elapsed = self._last_t - self._start
            remaining = None
            if self._status in (Status.DONE, Status.FAILED):
                remaining = 0.0
            elif self.planned_s is not None:
                remaining = max(0.0, self.planned_s - (elapsed or 0.0))
            average = self._transactions / elapsed if elapsed else None
            return ClientRow(
                client=self.client,
                status=self._status,
                reason=self._reason,
                tps_now=self._tps_now,
                tps_average=average,
                transactions=self._transactions if self._last_t is not None else None,
                latency_s=self._latency_s,
                elapsed_s=elapsed,
                remaining_s=remaining,
                updated_at=self._updated_at,
                up=self._up and not self._status.final,
                latency_buckets=None if self._buckets is None else tuple(self._buckets),
                latency_sum_s=self._latency_sum,
            )
