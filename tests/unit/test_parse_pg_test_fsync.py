"""pg_test_fsync on the captured fixture, plus older and broken variants."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.parse import ParseError
from collector.parse.pg_test_fsync import fsync_samples, parse_pg_test_fsync

FSYNC = Path(__file__).resolve().parents[1] / "data" / "pg_test_fsync"

EXPECTED = [
    ("one 8kB write", "open_datasync", 9014.522, 111e-6),
    ("one 8kB write", "fdatasync", 8823.497, 113e-6),
    ("one 8kB write", "fsync", 8768.799, 114e-6),
    ("one 8kB write", "fsync_writethrough", None, None),
    ("one 8kB write", "open_sync", 9069.547, 110e-6),
    ("two 8kB writes", "open_datasync", 4571.406, 219e-6),
    ("two 8kB writes", "fdatasync", 9060.804, 110e-6),
    ("two 8kB writes", "fsync", 9248.427, 108e-6),
    ("two 8kB writes", "fsync_writethrough", None, None),
    ("two 8kB writes", "open_sync", 4477.199, 223e-6),
    ("open_sync write sizes", "1 * 16kB open_sync write", 9389.807, 106e-6),
    ("open_sync write sizes", "2 * 8kB open_sync writes", 4493.712, 223e-6),
    ("open_sync write sizes", "4 * 4kB open_sync writes", 2271.207, 440e-6),
    ("open_sync write sizes", "8 * 2kB open_sync writes", 1103.266, 906e-6),
    ("open_sync write sizes", "16 * 1kB open_sync writes", 553.172, 1808e-6),
    ("fsync on non-write descriptor", "write, fsync, close", 8726.717, 115e-6),
    ("fsync on non-write descriptor", "write, close, fsync", 8913.895, 112e-6),
    ("non-synced 8kB write", "write", 3179660.149, 0.0),
]


def test_pg_test_fsync_15():
    seconds, results = parse_pg_test_fsync((FSYNC / "pg_test_fsync_15_s1.txt").read_text())
    assert seconds == 1.0
    got = [(r.section, r.method, r.ops_per_s, r.seconds_per_op) for r in results]
    assert [g[:2] for g in got] == [e[:2] for e in EXPECTED]
    for g, e in zip(got, EXPECTED, strict=True):
        assert g[2] == (pytest.approx(e[2]) if e[2] is not None else None)
        assert g[3] == (pytest.approx(e[3]) if e[3] is not None else None)
    samples = fsync_samples(results, {"drive": "ssd"})
    assert len(samples) == 16  # the two n/a lines are not samples
    assert samples[1].labels["method"] == "fdatasync" and samples[1].value == pytest.approx(
        8823.497
    )


def test_pg_test_fsync_older_format_without_usecs():
    text = (
        "2 seconds per test\n"
        "Direct I/O is not supported on this platform.\n\n"
        "Compare file sync methods using one 8kB write:\n"
        "        open_datasync                     n/a*\n"
        "        fdatasync                       125.000 ops/sec\n"
    )
    seconds, results = parse_pg_test_fsync(text)
    assert seconds == 2.0
    assert results[0].note == "not supported (direct I/O)"
    assert results[1].ops_per_s == 125.0 and results[1].seconds_per_op == pytest.approx(0.008)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1 second per test\n", "no pg_test_fsync measurements"),
        ("", "no pg_test_fsync measurements"),
        (
            "Compare file sync methods using one 8kB write:\n        fdatasync   lots of ops\n",
            "x:2: unrecognised pg_test_fsync line",
        ),
        (
            "        fdatasync     8823.497 ops/sec     113 usecs/op\n",
            "x:1: a measurement before any section",
        ),
    ],
)
def test_pg_test_fsync_bad(text, message):
    with pytest.raises(ParseError, match=message):
        parse_pg_test_fsync(text, "x")
