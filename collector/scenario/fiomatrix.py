"""``pretests.fio`` as a matrix: block sizes x iodepths x numjobs x patterns x sync modes,
crossed into fio jobs (:meth:`FioMatrix.jobs`) that run after the default ones. The
job file's words are the DB host's to check again (role drive_pretest's filter
``drive_pretest_jobs``); here a scenario is refused before anything runs."""

from __future__ import annotations

import itertools
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from collector.scenario.fields import Strict, _axis, _unique
from collector.scenario.wording import PathError, _show

#: a block size as fio takes it: bytes, or k/m (KiB, MiB), 512 bytes to 64 MiB
BLOCK_SIZE = re.compile(r"(?P<n>[0-9]{1,8})(?P<unit>[km]?)")
#: read, write, randread, randwrite, or mixedNN: random, NN % of the I/Os reads
PATTERN = re.compile(r"read|write|randread|randwrite|mixed(?P<share>[1-9][0-9]?)")
#: at most this many jobs in one matrix (each runs ``runtime`` + ``ramp`` seconds per
#: drive and write cache state)
MAX_JOBS = 128


def block_bytes(text: str) -> int:
    m = BLOCK_SIZE.fullmatch(text)
    if m is None:
        raise ValueError(f"{_show(text)} is not a block size (4096, 4k, 1m)")
    n = int(m["n"]) * {"": 1, "k": 1024, "m": 1024 * 1024}[m["unit"]]
    if not 512 <= n <= 64 * 1024 * 1024 or n % 512:
        raise ValueError(f"{_show(text)}: a block size is 512 bytes to 64 MiB, in 512-byte steps")
    return n


def _block_size(text: str) -> str:
    block_bytes(text)
    return text


def _pattern(text: str) -> str:
    if not PATTERN.fullmatch(text):
        raise ValueError(
            f"{_show(text)} is not a pattern (read, write, randread, randwrite, mixedNN:"
            " random with NN % reads)"
        )
    return text


BlockSize = Annotated[str, AfterValidator(_block_size)]
Pattern = Annotated[str, AfterValidator(_pattern)]


class FioMatrix(Strict):
    """Axes crossed into jobs, in this nesting: pattern, sync, block size, iodepth, numjobs."""

    block_sizes: Annotated[list[BlockSize], AfterValidator(_unique())] = Field(
        default_factory=lambda: ["4k"], min_length=1, max_length=16
    )
    iodepths: _axis(1, 1024) = Field(default_factory=lambda: [1])
    numjobs: _axis(1, 64) = Field(default_factory=lambda: [1])
    patterns: Annotated[list[Pattern], AfterValidator(_unique())] = Field(
        default_factory=lambda: ["randread"], min_length=1, max_length=8
    )
    #: direct: O_DIRECT (the page cache out of it); fdatasync: buffered writes, each
    #: followed by fdatasync (WAL's pattern)
    sync: Annotated[list[Literal["direct", "fdatasync"]], AfterValidator(_unique())] = Field(
        default_factory=lambda: ["direct"], min_length=1, max_length=2
    )

    @model_validator(mode="after")
    def _possible(self) -> FioMatrix:
        if "fdatasync" in self.sync:
            reads = [p for p in self.patterns if p in ("read", "randread")]
            if reads:
                raise PathError(
                    "sync",
                    f"fdatasync syncs writes, and pattern {reads[0]} has none: measure reads"
                    " in a matrix of their own with sync: [direct]",
                )
            deep = [d for d in self.iodepths if d > 1]
            if deep:
                raise PathError(
                    "sync",
                    f"fdatasync with iodepth {deep[0]}: buffered I/O completes one write at"
                    " a time (libaio queues only direct I/O): give iodepths: [1]",
                )
        n = len(self.jobs())
        if n > MAX_JOBS:
            raise ValueError(f"{n} jobs: a matrix crosses into at most {MAX_JOBS}")
        return self

    def jobs(self) -> list[dict[str, Any]]:
        """Every job of the matrix, as the role's ``drive_pretest_jobs`` takes it."""
        out = []
        for pattern, sync, bs, depth, n in itertools.product(
            self.patterns, self.sync, self.block_sizes, self.iodepths, self.numjobs
        ):
            mixed = PATTERN.fullmatch(pattern)["share"]  # type: ignore[index]
            out.append(
                {
                    "name": f"m-{pattern}-{bs}-qd{depth}-nj{n}-{sync}",
                    "rw": "randrw" if mixed else pattern,
                    "rwmixread": int(mixed) if mixed else 50,
                    "bs": bs,
                    "iodepth": depth,
                    "numjobs": n,
                    "direct": sync == "direct",
                    "fdatasync": sync == "fdatasync",
                }
            )
        return out
