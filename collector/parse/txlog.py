"""pgbench per-transaction logs (``-l`` without ``--aggregate-interval``), streamed.

A row is ``client_id transaction_no time script_no time_epoch time_us
[schedule_lag] [retries]`` (µs); ``time`` may read ``skipped``, ``serialization``,
``deadlock`` or ``failed``. A long run writes tens of millions of rows, so the log
is never held in memory: it is read in big chunks, the words in the time column are
swapped for negative codes with ``bytes.replace``, numpy parses the chunk in one
call, and the rows are folded into fixed-size figures (counts, latency moments, a
latency histogram, per-second series). Memory is flat in the log size.

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
from collector.records import LatencyHistogram, TxLogSummary

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


def bucket_index(us: np.ndarray) -> np.ndarray:
    """Histogram bucket of each latency in µs (int64 array)."""
    us = np.asarray(us, dtype=np.int64)
    idx = us.copy()
    big = us >= _EXACT
    if big.any():
        v = us[big]
        _, exp = np.frexp(v.astype(np.float64))
        e = exp.astype(np.int64) - 1  # floor(log2 v) >= EXACT_BITS
        mant = v >> (e - SUB_BITS)  # in [1024, 2048)
        idx[big] = _EXACT + (e - EXACT_BITS) * _SUB + (mant - _SUB)
    return np.minimum(idx, NBUCKETS - 1)


def bucket_edges_us(index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower edge and width (µs) of each bucket index."""
    index = np.asarray(index, dtype=np.int64)
    low = index.astype(np.float64)
    width = np.ones_like(low)
    big = index >= _EXACT
    k = index[big] - _EXACT
    e = EXACT_BITS + k // _SUB
    mant = _SUB + k % _SUB
    shift = e - SUB_BITS
    low[big] = (mant << shift).astype(np.float64)
    width[big] = (np.int64(1) << shift).astype(np.float64)
    return low, width


class _Accumulator:
    """Running figures over every chunk of every thread file of one pgbench."""

    def __init__(self) -> None:
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
        self.sec_ok = np.zeros(0, dtype=np.int64)
        self.sec_failed = np.zeros(0, dtype=np.int64)
        self.sec_lat = np.zeros(0, dtype=np.int64)
        self.connections: set[int] = set()
        self.retries: int | None = None
        self.lag_sum: int | None = None

    def _grow(self, lo: int, hi: int) -> None:
        if self.sec_base is None:
            self.sec_base = lo
        if lo < self.sec_base:
            pad = self.sec_base - lo
            self.sec_ok = np.concatenate([np.zeros(pad, np.int64), self.sec_ok])
            self.sec_failed = np.concatenate([np.zeros(pad, np.int64), self.sec_failed])
            self.sec_lat = np.concatenate([np.zeros(pad, np.int64), self.sec_lat])
            self.sec_base = lo
        need = hi - self.sec_base + 1
        if need > self.sec_ok.size:
            pad = need - self.sec_ok.size
            self.sec_ok = np.concatenate([self.sec_ok, np.zeros(pad, np.int64)])
            self.sec_failed = np.concatenate([self.sec_failed, np.zeros(pad, np.int64)])
            self.sec_lat = np.concatenate([self.sec_lat, np.zeros(pad, np.int64)])

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
        if n_ok:
            self.lat_sum += int(lat.sum())
            lf = lat.astype(np.float64)
            self.lat_sum2 += float(np.dot(lf, lf))
            lo, hi = int(lat.min()), int(lat.max())
            self.lat_min = lo if self.lat_min is None else min(lo, self.lat_min)
            self.lat_max = hi if self.lat_max is None else max(hi, self.lat_max)
            self.hist += np.bincount(bucket_index(lat), minlength=NBUCKETS)
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
        if width >= 7:
            lag = int(rows[:, 6].sum())
            self.lag_sum = lag + (self.lag_sum or 0)
        if width >= 8:
            retries = int(rows[:, 7].sum())
            self.retries = retries + (self.retries or 0)

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
    paths: Iterable[Path | str] | Path | str, chunk_bytes: int = CHUNK_BYTES
) -> TxLogSummary:
    """Stream every thread file of one pgbench run (``pgbench_log.PID``,
    ``pgbench_log.PID.1`` ...) into one :class:`TxLogSummary`.

    Raises :class:`ParseError` naming the file and line of the first row that is not
    a per-transaction log row (wrong column count, a word pgbench never writes, a
    truncated last line) and for a file with no rows at all."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    acc = _Accumulator()
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
