"""The two latency histograms of a per-transaction log, and the arrays built on them.

Both are log-linear over integer µs, as pgbench writes latencies, and fixed in size,
so that a log of any length folds into them (:mod:`collector.parse.txlog`) and
several clients' merge by adding counts (:mod:`collector.parse.latencyseries`):

* the whole-run histogram (:func:`bucket_index`) is exact below 2048 µs, then has
  1024 buckets per power of two (bucket width <= 1/1024 of its lower edge);
* the per-second one (:func:`coarse_index`) is exact below 64 µs, then has 32 buckets
  per power of two (bucket width <= 1/32 of its lower edge, so a percentile reported
  at its bucket's midpoint is within 1/64, about 1.6 %, of the exact value). Its
  buckets are unions of the whole-run histogram's (:data:`FINE_TO_COARSE`), so both
  agree.

A per-second histogram is kept sparse, as (second, bucket) pairs keyed
``second * NCOARSE + bucket`` (:func:`sum_by_key`); the arrays handed out in records
are read-only copies (:func:`read_only`).
"""

from __future__ import annotations

import numpy as np

#: seconds per µs, the log's unit
US = 1e-6

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
FINE_TO_COARSE = coarse_index(bucket_edges_us(np.arange(NBUCKETS))[0].astype(np.int64)).astype(
    np.int16
)


def read_only(a: np.ndarray) -> np.ndarray:
    """A read-only copy of ``a``, as a record holds it."""
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


def sum_by_key(keys: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct keys and the sum of the counts of each (exact integers): a sparse
    histogram's (second, bucket) pairs with their counts added up."""
    if keys.size == 0:
        return keys.astype(np.int64), counts.astype(np.int64)
    order = np.argsort(keys, kind="stable")
    keys, counts = keys[order], counts[order].astype(np.int64)
    starts = np.concatenate([[0], np.flatnonzero(np.diff(keys)) + 1])
    return keys[starts], np.add.reduceat(counts, starts)
