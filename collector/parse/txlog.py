"""pgbench per-transaction logs (``-l`` without ``--aggregate-interval``), streamed.

A row is ``client_id transaction_no time script_no time_epoch time_us
[schedule_lag] [retries]`` (µs); ``time`` may read ``skipped``, ``serialization``,
``deadlock`` or ``failed``. A long run writes tens of millions of rows, so the log
is never held in memory: it is read in big chunks, the words in the time column are
swapped for negative codes with ``bytes.replace``, numpy parses the chunk in one
call, and the rows are folded into fixed-size figures (counts, latency moments, a
latency histogram, per-second series). Memory is flat in the log size: it grows
only with the seconds the run lasted, not with its transactions.

Per-second latency (:class:`~collector.records.txlog.LatencySeries`, kept unless
``latency_series=False``): each second (of completion) gets a sparse coarse histogram
of its successful transactions' latencies (:mod:`collector.parse.latencyhist`), plus
exact counts, sums and maxima: skipped rows, transactions slower than a given latency
limit ("late"), and with ``--rate`` the schedule lag (sum and max). Memory: 64 bytes
per second of run for the dense per-second figures, plus 18 bytes per non-empty
(second, bucket) pair; a second whose latencies span a factor of 10 touches at most
about 110 buckets, so about 2 KB per second of run per client (about 7 MB for an
hour), at most 21 KB if one second's latencies spread over every bucket. The series
is read by :mod:`collector.parse.latencyseries` (merged clients, percentiles) and
:mod:`collector.parse.lag` (whether the rate was sustained).

Each chunk is checked for shape (every row has the file's column count) and sense
(epoch seconds, µs below a million, non-negative ids); a chunk that fails is re-read
line by line to name the first bad line.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from collector.parse import ParseError, excerpt
from collector.parse.latencyhist import (
    FINE_TO_COARSE,
    NBUCKETS,
    NCOARSE,
    US,
    bucket_edges_us,
    bucket_index,
    read_only,
    sum_by_key,
)
from collector.records import LatencyHistogram
from collector.records.txlog import LatencySeries, TxLogSummary

CHUNK_BYTES = 8 * 1024 * 1024

#: words pgbench writes in the ``time`` column, and the codes they become
_WORDS = {b"skipped": -1, b"serialization": -2, b"deadlock": -3, b"failed": -4}
_FAILURE_NAMES = {-2: "serialization", -3: "deadlock", -4: "other"}
_WIDTHS = (6, 7, 8)
_NUMERIC = b"0123456789 \n-"
_MIN_EPOCH = 10**8

# a chunk's (second, bucket) counts are one dense bincount up to this many cells
_DENSE_CELLS = 1 << 22
# pending (second, bucket) pairs are folded into the kept ones past this many
_PENDING_PAIRS = 1 << 20


class _Accumulator:
    """Running figures over every chunk of every thread file of one pgbench."""

    #: per-second arrays grown together (the series ones only with ``series``)
    _BASE = ("sec_ok", "sec_failed", "sec_lat")
    _SERIES = ("sec_max", "sec_skipped", "sec_late", "sec_lag_sum", "sec_lag_max")

    def __init__(self, series: bool = True, latency_limit_s: float | None = None) -> None:
        self.series = series
        self.limit_us = None if latency_limit_s is None else latency_limit_s * 1e6
        self.late: int | None = None if latency_limit_s is None else 0
        self.has_lag = False
        for name in self._BASE + self._SERIES:
            setattr(self, name, np.zeros(0, dtype=np.int64))
        # (epoch second * NCOARSE + bucket, count) of the per-second histograms
        self.keys = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=np.int64)
        self.pending: list[tuple[np.ndarray, np.ndarray]] = []
        self.pending_size = 0
        self.rows = 0
        self.ok = 0
        self.skipped = 0
        self.failures: dict[str, int] = {}
        self.lat_sum = 0
        self.lat_sum2 = 0.0
        self.lat_min: int | None = None
        self.lat_max: int | None = None
        self.first_start_us: int | None = None
        self.last_end_us: int | None = None
        self.hist = np.zeros(NBUCKETS, dtype=np.int64)
        self.sec_base: int | None = None
        self.connections: set[int] = set()
        self.retries: int | None = None
        self.lag_sum: int | None = None

    def _grow(self, lo: int, hi: int) -> None:
        names = self._BASE + (self._SERIES if self.series else ())
        if self.sec_base is None:
            self.sec_base = lo
        if lo < self.sec_base:
            pad = np.zeros(self.sec_base - lo, np.int64)
            for name in names:
                setattr(self, name, np.concatenate([pad, getattr(self, name)]))
            self.sec_base = lo
        need = hi - self.sec_base + 1
        if need > self.sec_ok.size:
            pad = np.zeros(need - self.sec_ok.size, np.int64)
            for name in names:
                setattr(self, name, np.concatenate([getattr(self, name), pad]))

    def add(self, rows: np.ndarray) -> None:
        n = rows.shape[0]
        if n == 0:
            return
        self.rows += n
        self.connections.update(np.flatnonzero(np.bincount(rows[:, 0])).tolist())
        t = rows[:, 2]
        sec = rows[:, 4]
        end_us = sec * 1_000_000 + rows[:, 5]
        ok = t >= 0
        lat = t[ok]
        n_ok = int(lat.size)
        self.ok += n_ok
        codes, counts = np.unique(t[~ok], return_counts=True)
        for code, cnt in zip(codes.tolist(), counts.tolist(), strict=True):
            if code == -1:
                self.skipped += cnt
            else:
                name = _FAILURE_NAMES[code]
                self.failures[name] = self.failures.get(name, 0) + cnt
        start_us = end_us.copy()
        start_us[ok] -= lat
        first, last = int(start_us.min()), int(end_us.max())
        self.first_start_us = (
            first if self.first_start_us is None else min(first, self.first_start_us)
        )
        self.last_end_us = last if self.last_end_us is None else max(last, self.last_end_us)
        fine = self._add_latencies(lat) if n_ok else None
        lo_s, hi_s = int(sec.min()), int(sec.max())
        self._grow(lo_s, hi_s)
        rel = sec - self.sec_base
        size = self.sec_ok.size
        self.sec_ok += np.bincount(rel[ok], minlength=size)
        self.sec_lat += np.bincount(rel[ok], weights=lat, minlength=size).astype(np.int64)
        failed_mask = t <= -2
        if failed_mask.any():
            self.sec_failed += np.bincount(rel[failed_mask], minlength=size)
        width = rows.shape[1]
        if self.series:
            self._add_series(rows, rel, ok, lat, fine)
        if width >= 7:
            lag = int(rows[:, 6].sum())
            self.lag_sum = lag + (self.lag_sum or 0)
        if width >= 8:
            retries = int(rows[:, 7].sum())
            self.retries = retries + (self.retries or 0)

    def _add_latencies(self, lat: np.ndarray) -> np.ndarray:
        """Moments, extremes, histogram and late count of a chunk's successful
        transactions; returns their whole-run histogram buckets."""
        self.lat_sum += int(lat.sum())
        lf = lat.astype(np.float64)
        self.lat_sum2 += float(np.dot(lf, lf))
        lo, hi = int(lat.min()), int(lat.max())
        self.lat_min = lo if self.lat_min is None else min(lo, self.lat_min)
        self.lat_max = hi if self.lat_max is None else max(hi, self.lat_max)
        fine = bucket_index(lat)
        self.hist += np.bincount(fine, minlength=NBUCKETS)
        if self.late is not None:
            self.late += int(np.count_nonzero(lat > self.limit_us))
        return fine

    def _add_series(
        self,
        rows: np.ndarray,
        rel: np.ndarray,
        ok: np.ndarray,
        lat: np.ndarray,
        fine: np.ndarray | None,
    ) -> None:
        """The per-second figures of one chunk (``rel``: each row's second less
        ``sec_base``; ``ok``: the successful rows, whose latencies are ``lat``)."""
        size = self.sec_ok.size
        skipped = rows[:, 2] == -1
        if skipped.any():
            self.sec_skipped += np.bincount(rel[skipped], minlength=size)
        self.has_lag = self.has_lag or rows.shape[1] >= 7
        if fine is None:
            return
        rel_ok = rel[ok]
        np.maximum.at(self.sec_max, rel_ok, lat)
        if self.limit_us is not None:
            late = lat > self.limit_us
            if late.any():
                self.sec_late += np.bincount(rel_ok[late], minlength=size)
        if rows.shape[1] >= 7:
            lag = rows[ok, 6]
            self.sec_lag_sum += np.bincount(rel_ok, weights=lag, minlength=size).astype(np.int64)
            np.maximum.at(self.sec_lag_max, rel_ok, lag)
        coarse = FINE_TO_COARSE[fine]
        lo, hi = int(rel_ok.min()), int(rel_ok.max())
        cells = (hi - lo + 1) * NCOARSE
        if cells <= _DENSE_CELLS:
            counts = np.bincount((rel_ok - lo) * NCOARSE + coarse, minlength=cells)
            nz = np.flatnonzero(counts)
            keys = nz + (lo + self.sec_base) * NCOARSE
            self._pend(keys, counts[nz])
        else:  # a chunk spanning days: sort instead of a dense table
            keys, counts = np.unique(
                (rel_ok + self.sec_base) * NCOARSE + coarse, return_counts=True
            )
            self._pend(keys, counts.astype(np.int64))

    def _pend(self, keys: np.ndarray, counts: np.ndarray) -> None:
        self.pending.append((keys, counts))
        self.pending_size += keys.size
        if self.pending_size > max(_PENDING_PAIRS, self.keys.size):
            self._fold()

    def _fold(self) -> None:
        if not self.pending:
            return
        keys = np.concatenate([self.keys, *(k for k, _ in self.pending)])
        counts = np.concatenate([self.counts, *(c for _, c in self.pending)])
        self.keys, self.counts = sum_by_key(keys, counts)
        self.pending, self.pending_size = [], 0

    def latency_series(self, sources: tuple[str, ...]) -> LatencySeries | None:
        if not self.series or self.sec_base is None:
            return None
        self._fold()
        return LatencySeries(
            sources=sources,
            first_second=self.sec_base,
            transactions=read_only(self.sec_ok),
            latency_sum_us=read_only(self.sec_lat),
            max_us=read_only(self.sec_max),
            skipped=read_only(self.sec_skipped),
            hist_second=read_only(self.keys // NCOARSE),
            hist_bucket=read_only((self.keys % NCOARSE).astype(np.int16)),
            hist_count=read_only(self.counts),
            late=None if self.limit_us is None else read_only(self.sec_late),
            latency_limit_us=self.limit_us,
            lag_sum_us=read_only(self.sec_lag_sum) if self.has_lag else None,
            lag_max_us=read_only(self.sec_lag_max) if self.has_lag else None,
        )

    def summary(self, sources: tuple[str, ...]) -> TxLogSummary:
        nz = np.flatnonzero(self.hist)
        low, width = bucket_edges_us(nz)
        hist = _sparse(low, width, self.hist[nz])
        per_second: list[tuple[int, int, int, float]] = []
        if self.sec_base is not None:
            active = np.flatnonzero((self.sec_ok > 0) | (self.sec_failed > 0))
            per_second = [
                (
                    self.sec_base + int(i),
                    int(self.sec_ok[i]),
                    int(self.sec_failed[i]),
                    float(self.sec_lat[i]) * US,
                )
                for i in active
            ]
        return TxLogSummary(
            sources=sources,
            rows=self.rows,
            successful=self.ok,
            failed=sum(self.failures.values()),
            skipped=self.skipped,
            failures=dict(self.failures),
            latency_sum_s=self.lat_sum * US,
            latency_sum2_s2=self.lat_sum2 * US * US,
            latency_min_s=None if self.lat_min is None else self.lat_min * US,
            latency_max_s=None if self.lat_max is None else self.lat_max * US,
            first_start=None if self.first_start_us is None else self.first_start_us * US,
            last_end=None if self.last_end_us is None else self.last_end_us * US,
            per_second=tuple(per_second),
            histogram=hist,
            connections=len(self.connections),
            retries=self.retries,
            lag_sum_s=None if self.lag_sum is None else self.lag_sum * US,
            late=self.late,
            latency_series=self.latency_series(sources),
        )


def _sparse(low: np.ndarray, width: np.ndarray, counts: np.ndarray) -> LatencyHistogram:
    return LatencyHistogram(
        lows_s=tuple((low * US).tolist()),
        highs_s=tuple(((low + width) * US).tolist()),
        counts=tuple(int(c) for c in counts.tolist()),
    )


def _check_line(parts: list[bytes], width: int) -> str | None:
    if len(parts) != width:
        return f"{len(parts)} columns where this log has {width}"
    t = parts[2]
    if not (t.isdigit() or t in _WORDS):
        return f"time column {t.decode(errors='replace')!r} is neither µs nor a known word"
    try:
        nums = [int(p) for i, p in enumerate(parts) if i != 2]
    except ValueError:
        return "not a number where one belongs"
    problems = (
        (min(nums[:3]) < 0, "negative client, transaction or script number"),
        (nums[3] < _MIN_EPOCH or not 0 <= nums[4] < 1_000_000, "time_epoch/time_us out of range"),
        (any(n < 0 for n in nums[5:]), "negative lag or retries"),
    )
    return next((why for bad, why in problems if bad), None)


def _find_bad_line(chunk: bytes, width: int, source: str, first_line: int) -> ParseError:
    lines = chunk.split(b"\n")
    if chunk.endswith(b"\n"):
        lines.pop()
    for i, line in enumerate(lines):
        why = _check_line(line.split(), width) if line.strip() else "blank line"
        if why:
            text = line.decode(errors="replace")
            return ParseError(source, first_line + i, f"{why}: {excerpt(text)}")
    return ParseError(  # pragma: no cover - the fast path and this one disagree
        source, first_line, "per-transaction log chunk does not parse"
    )


def _parse_chunk(
    chunk: bytes, width: int, source: str, first_line: int, newlines: int
) -> np.ndarray:
    fast = chunk
    letters = chunk.translate(None, _NUMERIC)  # one pass; empty for a log without words
    if letters:
        for word, code in _WORDS.items():
            if word in letters:
                fast = fast.replace(b" " + word + b" ", b" %d " % code)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # older numpy warns and stops, newer raises
            flat = np.fromstring(fast, dtype=np.int64, sep=" ")
    except ValueError:
        raise _find_bad_line(chunk, width, source, first_line) from None
    nlines = newlines + (0 if chunk.endswith(b"\n") else 1)
    if flat.size != nlines * width:
        raise _find_bad_line(chunk, width, source, first_line)
    rows = flat.reshape(nlines, width)
    bad = (
        (rows[:, 0] < 0)
        | (rows[:, 1] < 0)
        | (rows[:, 2] < -4)
        | (rows[:, 3] < 0)
        | (rows[:, 4] < _MIN_EPOCH)
        | (rows[:, 5] < 0)
        | (rows[:, 5] >= 1_000_000)
    )
    if width > 6:
        bad |= (rows[:, 6:] < 0).any(axis=1)
    if bad.any():
        raise _find_bad_line(chunk, width, source, first_line)
    return rows


def _chunks(fh, size: int) -> Iterable[bytes]:
    rest = b""
    while True:
        block = fh.read(size)
        if not block:
            if rest:
                yield rest
            return
        block = rest + block
        cut = block.rfind(b"\n")
        if cut < 0:
            rest = block
            continue
        rest = block[cut + 1 :]
        yield block[: cut + 1]


def summarize_txlog(
    paths: Iterable[Path | str] | Path | str,
    chunk_bytes: int = CHUNK_BYTES,
    *,
    latency_limit_s: float | None = None,
    latency_series: bool = True,
) -> TxLogSummary:
    """Stream every thread file of one pgbench run (``pgbench_log.PID``,
    ``pgbench_log.PID.1`` ...) into one :class:`TxLogSummary`.

    ``latency_limit_s`` (pgbench's ``-L``, in seconds) counts the successful
    transactions slower than it, per second and in all (pgbench's "above the latency
    limit": latency > limit). ``latency_series=False`` skips the per-second latency
    histograms (:class:`LatencySeries`).

    Raises :class:`ParseError` naming the file and line of the first row that is not
    a per-transaction log row (wrong column count, a word pgbench never writes, a
    truncated last line) and for a file with no rows at all."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    acc = _Accumulator(series=latency_series, latency_limit_s=latency_limit_s)
    sources: list[str] = []
    for path in paths:
        p = Path(path)
        source = str(p)
        sources.append(source)
        width: int | None = None
        line_no = 1
        try:
            fh = p.open("rb")
        except OSError as err:
            raise ParseError(
                source, None, f"cannot read per-transaction log: {err.strerror}"
            ) from err
        with fh:
            for chunk in _chunks(fh, chunk_bytes):
                if width is None:
                    first = chunk.split(b"\n", 1)[0].split()
                    if len(first) not in _WIDTHS:
                        raise ParseError(
                            source,
                            1,
                            f"{len(first)} columns; a per-transaction log row has 6, 7 or 8: "
                            f"{excerpt(b' '.join(first).decode(errors='replace'))}",
                        )
                    width = len(first)
                newlines = chunk.count(b"\n")
                rows = _parse_chunk(chunk, width, source, line_no, newlines)
                acc.add(rows)
                line_no += newlines
        if width is None:
            raise ParseError(source, None, "empty per-transaction log")
    return acc.summary(tuple(sources))
