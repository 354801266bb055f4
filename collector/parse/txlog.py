"""pgbench per-transaction logs (``-l`` without ``--aggregate-interval``), streamed.

A row is ``client_id transaction_no time script_no time_epoch time_us
[schedule_lag] [retries]`` (µs); ``time`` may read ``skipped``, ``serialization``,
``deadlock`` or ``failed``. A long run writes tens of millions of rows, so the log
is never held in memory: it is read in big chunks, the words in the time column are
swapped for negative codes with ``bytes.replace``, numpy parses the chunk in one
call, and the rows are folded into fixed-size figures (counts, latency moments, a
latency histogram, per-second series). Memory is flat in the log size: it grows
only with the seconds the run lasted, not with its transactions.

Per-second latency (:class:`~collector.records.LatencySeries`, kept unless
``latency_series=False``): each second (of completion) gets a sparse coarse histogram
of its successful transactions' latencies, plus exact counts, sums and maxima:
skipped rows, transactions slower than a given latency limit ("late"), and with
``--rate`` the schedule lag (sum and max). The coarse histogram is exact below 64 µs,
then has 32 buckets per power of two (bucket width <= 1/32 of its lower edge, so a
percentile reported at its bucket's midpoint is within 1/64, about 1.6 %, of the
exact value). Its buckets are unions of the whole-run histogram's, so both agree.
Memory: 64 bytes per second of run for the dense per-second figures, plus 18 bytes
per non-empty (second, bucket) pair; a second whose latencies span a factor of 10
touches at most about 110 buckets, so about 2 KB per second of run per client (about
7 MB for an hour), at most 21 KB if one second's latencies spread over every bucket.
Several clients' series merge exactly (:func:`merge_latency_series`): the percentile
over all clients is read from the summed histograms, not averaged from each client's.
:func:`latency_points` gives the per-second p50/p95/p99/max, :func:`window_percentiles`
a percentile over a span of seconds, :func:`read_lag` whether the rate was sustained.

Each chunk is checked for shape (every row has the file's column count) and sense
(epoch seconds, µs below a million, non-negative ids); a chunk that fails is re-read
line by line to name the first bad line.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from collector.parse import ParseError, excerpt
from collector.records import (
    LagReading,
    LatencyHistogram,
    LatencyPoint,
    LatencySeries,
    TxLogSummary,
)

CHUNK_BYTES = 8 * 1024 * 1024
US = 1e-6

#: words pgbench writes in the ``time`` column, and the codes they become
_WORDS = {b"skipped": -1, b"serialization": -2, b"deadlock": -3, b"failed": -4}
_FAILURE_NAMES = {-2: "serialization", -3: "deadlock", -4: "other"}
_WIDTHS = (6, 7, 8)
_NUMERIC = b"0123456789 \n-"
_MIN_EPOCH = 10**8

# Latency histogram (µs): exact below 2**EXACT_BITS, then 2**SUB_BITS buckets per
# power of two (relative width <= 1/1024): HDR-histogram style, fixed size.
EXACT_BITS = 11
SUB_BITS = 10
_EXACT = 1 << EXACT_BITS
_SUB = 1 << SUB_BITS
_OCTAVES = 30  # up to 2**41 µs, about 25 days
NBUCKETS = _EXACT + _OCTAVES * _SUB


# Per-second histograms (µs): exact below 2**COARSE_EXACT_BITS, then 2**COARSE_SUB_BITS
# buckets per power of two (relative width <= 1/32), up to the same 2**41 µs.
COARSE_EXACT_BITS = 6
COARSE_SUB_BITS = 5
NCOARSE = (1 << COARSE_EXACT_BITS) + (EXACT_BITS + _OCTAVES - COARSE_EXACT_BITS) * (
    1 << COARSE_SUB_BITS
)
# a chunk's (second, bucket) counts are one dense bincount up to this many cells
_DENSE_CELLS = 1 << 22
# pending (second, bucket) pairs are folded into the kept ones past this many
_PENDING_PAIRS = 1 << 20


def _loglin_index(us: np.ndarray, exact_bits: int, sub_bits: int, n: int) -> np.ndarray:
    us = np.asarray(us, dtype=np.int64)
    idx = us.copy()
    big = us >= (1 << exact_bits)
    if big.any():
        v = us[big]
        _, exp = np.frexp(v.astype(np.float64))
        e = exp.astype(np.int64) - 1  # floor(log2 v) >= exact_bits
        mant = v >> (e - sub_bits)  # in [2**sub_bits, 2**(sub_bits + 1))
        idx[big] = (1 << exact_bits) + (e - exact_bits) * (1 << sub_bits) + mant - (1 << sub_bits)
    return np.minimum(idx, n - 1)


def _loglin_edges(
    index: np.ndarray, exact_bits: int, sub_bits: int
) -> tuple[np.ndarray, np.ndarray]:
    index = np.asarray(index, dtype=np.int64)
    low = index.astype(np.float64)
    width = np.ones_like(low)
    big = index >= (1 << exact_bits)
    k = index[big] - (1 << exact_bits)
    e = exact_bits + k // (1 << sub_bits)
    mant = (1 << sub_bits) + k % (1 << sub_bits)
    shift = e - sub_bits
    low[big] = (mant << shift).astype(np.float64)
    width[big] = (np.int64(1) << shift).astype(np.float64)
    return low, width


def bucket_index(us: np.ndarray) -> np.ndarray:
    """Histogram bucket of each latency in µs (int64 array)."""
    return _loglin_index(us, EXACT_BITS, SUB_BITS, NBUCKETS)


def bucket_edges_us(index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower edge and width (µs) of each bucket index."""
    return _loglin_edges(index, EXACT_BITS, SUB_BITS)


def coarse_index(us: np.ndarray) -> np.ndarray:
    """Per-second histogram bucket of each latency in µs (int64 array)."""
    return _loglin_index(us, COARSE_EXACT_BITS, COARSE_SUB_BITS, NCOARSE)


def coarse_edges_us(index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower edge and width (µs) of each per-second histogram bucket."""
    return _loglin_edges(index, COARSE_EXACT_BITS, COARSE_SUB_BITS)


#: the coarse bucket holding each whole-run bucket (every fine bucket lies in one)
_FINE_TO_COARSE = coarse_index(bucket_edges_us(np.arange(NBUCKETS))[0].astype(np.int64)).astype(
    np.int16
)


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
        coarse = _FINE_TO_COARSE[fine]
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
        self.keys, self.counts = _sum_by_key(keys, counts)
        self.pending, self.pending_size = [], 0

    def latency_series(self, sources: tuple[str, ...]) -> LatencySeries | None:
        if not self.series or self.sec_base is None:
            return None
        self._fold()
        return LatencySeries(
            sources=sources,
            first_second=self.sec_base,
            transactions=_frozen(self.sec_ok),
            latency_sum_us=_frozen(self.sec_lat),
            max_us=_frozen(self.sec_max),
            skipped=_frozen(self.sec_skipped),
            hist_second=_frozen(self.keys // NCOARSE),
            hist_bucket=_frozen((self.keys % NCOARSE).astype(np.int16)),
            hist_count=_frozen(self.counts),
            late=None if self.limit_us is None else _frozen(self.sec_late),
            latency_limit_us=self.limit_us,
            lag_sum_us=_frozen(self.sec_lag_sum) if self.has_lag else None,
            lag_max_us=_frozen(self.sec_lag_max) if self.has_lag else None,
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


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


def _sum_by_key(keys: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct keys and the sum of the counts of each (exact integers)."""
    if keys.size == 0:
        return keys.astype(np.int64), counts.astype(np.int64)
    order = np.argsort(keys, kind="stable")
    keys, counts = keys[order], counts[order].astype(np.int64)
    starts = np.concatenate([[0], np.flatnonzero(np.diff(keys)) + 1])
    return keys[starts], np.add.reduceat(counts, starts)


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


# --------------------------------------------------------------------------- per second


def merge_latency_series(series: Iterable[LatencySeries]) -> LatencySeries:
    """Several clients' per-second series as one (the all-clients series): counts and
    histograms summed second by second, maxima taken, so that its percentiles are
    those of the union of the clients' transactions (to the histogram's resolution).
    ``late`` is kept only when every series counted it against the same limit, the lag
    only when every series has it."""
    parts = list(series)
    if not parts:
        raise ValueError("no latency series to merge")
    first = min(p.first_second for p in parts)
    last = max(p.first_second + p.seconds - 1 for p in parts)
    size = last - first + 1

    def dense(name: str, combine: str = "add") -> np.ndarray:
        out = np.zeros(size, dtype=np.int64)
        for p in parts:
            at = slice(p.first_second - first, p.first_second - first + p.seconds)
            if combine == "add":
                out[at] += getattr(p, name)
            else:
                np.maximum(out[at], getattr(p, name), out=out[at])
        return out

    limits = {p.latency_limit_us for p in parts}
    same_limit = len(limits) == 1 and None not in limits and all(p.late is not None for p in parts)
    lag = all(p.lag_sum_us is not None for p in parts)
    keys = np.concatenate([p.hist_second.astype(np.int64) * NCOARSE + p.hist_bucket for p in parts])
    keys, counts = _sum_by_key(keys, np.concatenate([p.hist_count for p in parts]))
    return LatencySeries(
        sources=tuple(s for p in parts for s in p.sources),
        first_second=first,
        transactions=_frozen(dense("transactions")),
        latency_sum_us=_frozen(dense("latency_sum_us")),
        max_us=_frozen(dense("max_us", "max")),
        skipped=_frozen(dense("skipped")),
        hist_second=_frozen(keys // NCOARSE),
        hist_bucket=_frozen((keys % NCOARSE).astype(np.int16)),
        hist_count=_frozen(counts),
        late=_frozen(dense("late")) if same_limit else None,
        latency_limit_us=limits.pop() if same_limit else None,
        lag_sum_us=_frozen(dense("lag_sum_us")) if lag else None,
        lag_max_us=_frozen(dense("lag_max_us", "max")) if lag else None,
    )


def _ranks(q: float, n: np.ndarray) -> np.ndarray:
    """Nearest rank (1-based) of the q-quantile among n values: the smallest r with
    r >= q*n (q*n a hair above a whole number from float rounding counts as it)."""
    return np.maximum(1, np.ceil(q * n.astype(np.float64) - 1e-9)).astype(np.int64)


def _midpoints_s(buckets: np.ndarray) -> np.ndarray:
    """Where a percentile falling in each coarse bucket is reported (seconds): the
    value itself for 1-µs buckets, else the bucket's midpoint."""
    low, width = coarse_edges_us(buckets)
    return np.where(width <= 1, low, low + width / 2) * US


def _percentiles_per_second(series: LatencySeries, qs: Sequence[float]) -> np.ndarray:
    """(len(qs), seconds) array of nearest-rank percentiles in seconds; NaN where a
    second has no successful transaction."""
    out = np.full((len(qs), series.seconds), np.nan)
    n = np.asarray(series.transactions, dtype=np.int64)
    have = np.flatnonzero(n)
    if have.size == 0:
        return out
    cum = np.cumsum(series.hist_count)
    before = np.cumsum(n) - n  # transactions in earlier seconds
    for i, q in enumerate(qs):
        target = before[have] + _ranks(q, n[have])
        idx = np.searchsorted(cum, target, side="left")
        # a midpoint past the second's (exact) max is reported as that max
        out[i, have] = np.minimum(_midpoints_s(series.hist_bucket[idx]), series.max_us[have] * US)
    return out


def latency_points(series: LatencySeries, client: str = "") -> tuple[LatencyPoint, ...]:
    """One :class:`LatencyPoint` per second of ``series`` (``client`` ``""`` for the
    all-clients series), empty seconds included: p50, p95 and p99 from the second's
    histogram (nearest rank, within 1/64 of the exact value, never above the second's
    max), max, average latency,
    skipped and late counts, lag average and max (exact)."""
    pct = _percentiles_per_second(series, (0.50, 0.95, 0.99))
    n = np.asarray(series.transactions)
    out = []
    for i in range(series.seconds):
        k = int(n[i])
        lag_avg = lag_max = None
        if series.lag_sum_us is not None and series.lag_max_us is not None and k:
            lag_avg = float(series.lag_sum_us[i]) / k * US
            lag_max = float(series.lag_max_us[i]) * US
        out.append(
            LatencyPoint(
                client=client,
                start=float(series.first_second + i),
                transactions=k,
                latency_avg_s=float(series.latency_sum_us[i]) / k * US if k else None,
                p50_s=float(pct[0, i]) if k else None,
                p95_s=float(pct[1, i]) if k else None,
                p99_s=float(pct[2, i]) if k else None,
                max_s=float(series.max_us[i]) * US if k else None,
                skipped=int(series.skipped[i]),
                late=None if series.late is None else int(series.late[i]),
                lag_avg_s=lag_avg,
                lag_max_s=lag_max,
            )
        )
    return tuple(out)


def window_percentiles(
    series: LatencySeries,
    first_second: int,
    last_second: int,
    qs: Sequence[float] = (0.50, 0.95, 0.99),
) -> dict[float, float | None]:
    """Percentiles (nearest rank, seconds, within 1/64) of the successful transactions
    that completed in the whole seconds ``first_second`` to ``last_second`` (epoch,
    both included): e.g. the p99 over the window where every client ran, on the
    merged series. ``None`` for a window without a transaction."""
    sel = (series.hist_second >= first_second) & (series.hist_second <= last_second)
    counts = series.hist_count[sel]
    total = int(counts.sum())
    if total == 0:
        return {q: None for q in qs}
    # the window's histogram: the selected pairs summed by bucket
    hist = np.bincount(series.hist_bucket[sel], weights=counts, minlength=NCOARSE)
    cum = np.cumsum(hist.astype(np.int64))
    lo = max(first_second - series.first_second, 0)
    top = float(series.max_us[lo : max(last_second - series.first_second + 1, 0)].max()) * US
    out: dict[float, float | None] = {}
    for q in qs:
        rank = int(_ranks(q, np.array([total]))[0])
        mid = float(_midpoints_s(np.searchsorted(cum, [rank], side="left"))[0])
        out[q] = min(mid, top)
    return out


# --------------------------------------------------------------------------- lag reading

#: lag growth tolerated whatever the transactions' own time (seconds)
LAG_FLOOR_S = 0.010
#: lag growth tolerated, in units of the mean service time (latency less lag)
LAG_SERVICE_FACTOR = 2.0
#: share of the schedule skipped (``-L``) above which the rate was not delivered
SKIPPED_TOLERANCE = 0.01
#: share of the asked rate the clients may fall short of scheduling in a window
#: (beside Poisson's noise: :func:`read_lag`)
SCHEDULED_TOLERANCE = 0.10


def read_lag(points: Sequence[LatencyPoint], rate: float | None = None) -> LagReading | None:
    """Whether the rate of a ``--rate`` run was sustained, from its per-second points
    (one client's or all clients'); ``None`` without lag figures (no ``--rate``) or
    with fewer than 3 seconds holding transactions. ``rate`` is the rate asked of
    those points' clients together (per second), when the caller knows it.

    The rule. Over the seconds with transactions, take each second's mean schedule lag,
    and the mean service time (latency less lag, weighted by transactions: the time a
    transaction took once started). The growth tolerated is ``bound = max(10 ms,
    2 x service time)``. The lag *grows* when both

    * its least-squares slope times the run's span exceeds ``bound``, and
    * the median lag of the last quarter of the seconds (at least 3) exceeds that of
      the first quarter by more than ``bound`` (a lone spike at the end, a checkpoint,
      moves the slope but not the medians).

    The rate was sustained when the lag does not grow and at most 1 % of the scheduled
    transactions (successful + skipped) were skipped. With ``-L`` pgbench skips the
    transactions already later than the limit when their turn comes, which keeps the
    lag below the limit however overloaded the drive is: there the skipped share
    tells. It also tells when the limit is tight for the drive's latency although the
    drive keeps up (the rate was then not held *within the limit*: the reason says
    which). A rate just above what the drive holds grows the lag slowly: a short run
    may not reach ``bound``; a longer run tells better.

    With ``rate`` a third test: the clients must have scheduled (successful + skipped)
    the rate asked over the points' seconds, short by at most the larger of
    :data:`SCHEDULED_TOLERANCE` and three standard deviations of a Poisson count
    (pgbench draws its schedule from one). A client starved of CPU falls behind its
    schedule and catches up on it while the lag stays flat, and what it misses when
    the duration ends is never counted (CI, 2738 s run: 339.2/s of 400/s asked over a
    window whose lag did not grow, on the lab's nvme that holds 800/s)."""
    pts = [p for p in points if p.transactions and p.lag_avg_s is not None]
    if len(pts) < 3:
        return None
    t = np.array([p.start for p in pts]) - pts[0].start
    lag = np.array([p.lag_avg_s for p in pts], dtype=np.float64)
    n = np.array([p.transactions for p in pts], dtype=np.float64)
    lat = np.array([p.latency_avg_s for p in pts], dtype=np.float64)
    service = max(float(np.dot(n, lat - lag) / n.sum()), 0.0)
    slope = float(np.polyfit(t, lag, 1)[0])
    span = float(t[-1] - t[0])
    growth = slope * span
    quarter = min(max(3, math.ceil(len(pts) / 4)), len(pts))
    first, last = float(np.median(lag[:quarter])), float(np.median(lag[-quarter:]))
    bound = max(LAG_FLOOR_S, LAG_SERVICE_FACTOR * service)
    skipped = sum(p.skipped for p in points)
    done = sum(p.transactions for p in points)
    skipped_ratio = skipped / (done + skipped) if done + skipped else 0.0
    grows = growth > bound and last - first > bound
    scheduled_ratio = None
    short = False
    if rate:
        expected = float(rate) * len(points)
        scheduled_ratio = (done + skipped) / expected
        allowed = max(SCHEDULED_TOLERANCE, 3.0 / math.sqrt(expected))
        short = scheduled_ratio < 1.0 - allowed
    if grows:
        reason = (
            f"rate not sustained: schedule lag grew {growth * 1e3:.0f} ms over {span:.0f} s "
            f"({slope * 1e3:.1f} ms/s, {first * 1e3:.1f} -> {last * 1e3:.1f} ms), "
            f"more than the {bound * 1e3:.0f} ms tolerated"
        )
    elif skipped_ratio > SKIPPED_TOLERANCE:
        reason = (
            f"rate not sustained within the latency limit: {skipped_ratio:.1%} of the "
            f"scheduled transactions skipped (already later than the limit), more than "
            f"{SKIPPED_TOLERANCE:.0%}"
        )
    elif short:
        reason = (
            f"rate not sustained: the clients scheduled {(done + skipped) / len(points):,.1f}/s"
            f" of the {rate:,g}/s asked ({scheduled_ratio:.0%}) over {len(points)} s with a"
            f" bounded lag: they ran behind their schedule (a client short of CPU?)"
        )
    else:
        reason = (
            f"rate sustained: schedule lag bounded ({first * 1e3:.1f} -> {last * 1e3:.1f} ms "
            f"over {span:.0f} s, within {bound * 1e3:.0f} ms)"
        )
    return LagReading(
        sustained=not grows and skipped_ratio <= SKIPPED_TOLERANCE and not short,
        reason=reason,
        lag_grows=grows,
        slope=slope,
        growth_s=growth,
        lag_first_s=first,
        lag_last_s=last,
        bound_s=bound,
        service_s=service,
        skipped_ratio=skipped_ratio,
        seconds=len(pts),
        scheduled_ratio=scheduled_ratio,
    )
