"""collector.verdicts.cachedefeat on hand-written counters and drive figures: both verdicts,
the edges (no reads at all, the 5 % line, the memory rule's boundary), and bad input."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from collector.errors import DrivelabError
from collector.records import Sample
from collector.verdicts import cachedefeat as cd

GIB = 1 << 30
MEMORY = 512 * 1024 * 1024  # the lab's default DB host memory
BIG = 3 * MEMORY  # datasets well beyond twice the memory


def _counters(**by_client: tuple[int, int]) -> dict[str, cd.BlockCounters]:
    return {
        f"drivelab_{c}": cd.BlockCounters(f"drivelab_{c}", read, hit)
        for c, (read, hit) in by_client.items()
    }


BEFORE = _counters(client1=(1_000, 50_000), client2=(2_000, 60_000))


def _drive(bytes_per_s: list[float], device: str = "loop3", iops_per_block: bool = True):
    """Per-second drive read figures: bytes/s as given, IOPS as 8 KiB reads."""
    out = []
    for i, b in enumerate(bytes_per_s):
        labels = {"host": "dbhost", "device": device}
        t = 1795246600.0 + i
        out.append(Sample(cd.DRIVE_READ_BYTES, b, "bytes/second", labels, t))
        if iops_per_block:
            out.append(Sample(cd.DRIVE_READ_IOPS, b / 8192, "operations/second", labels, t))
    return out


def test_counters_from_query_rows():
    rows = [
        {"datname": "drivelab_client1", "blks_read": "1000", "blks_hit": 50000},
        {"datname": "drivelab_client2", "blks_read": 2000, "blks_hit": "60000"},
    ]
    assert cd.counters(rows) == BEFORE
    # pgbench_run's stats entry point adds the instant (ignored) and the block size
    rows = [dict(r, at=1795246600.5, block_size=8192) for r in rows]
    assert cd.counters(rows) == BEFORE
    big = cd.counters([dict(r, block_size="16384") for r in rows])
    assert {c.block_size for c in big.values()} == {16384}


def test_a_block_is_the_servers_block_size():
    """On a server built with 16 KiB blocks, 10,000 blocks read are 160 MiB: a drive
    that read 6 MiB served 3.75 % of them (the page cache the rest), where 8 KiB
    blocks would have made it 7.5 % and the cache defeated."""
    rows = {
        "before": [("drivelab_client1", 1_000, 50_000), ("drivelab_client2", 2_000, 60_000)],
        "after": [("drivelab_client1", 11_000, 50_000), ("drivelab_client2", 2_000, 60_000)],
    }
    snap = {
        when: cd.counters(
            {"datname": d, "blks_read": r, "blks_hit": h, "block_size": 16384} for d, r, h in these
        )
        for when, these in rows.items()
    }
    drive = _drive([6 * 1024 * 1024])
    v = cd.analyse(
        snap["before"], snap["after"], drive_samples=drive, dataset_bytes=BIG, memory_bytes=MEMORY
    )
    assert v.read_bytes == 10_000 * 16384
    assert v.drive_share == pytest.approx(6 * 1024 * 1024 / (10_000 * 16384))
    assert v.verdict == cd.NOT_DEFEATED
    assert "the page cache served the rest" in v.reason


PG_STAT = Path(__file__).resolve().parents[1] / "data" / "pg_stat"


def test_captured_pg_stat_files():
    """The pgbench playbook's pg_stat-{before,after}.json of a lab run (2 clients)."""
    before, after = (
        cd.counters(json.loads((PG_STAT / f"pg_stat-{w}.json").read_text())["databases"])
        for w in ("before", "after")
    )
    read = (14202 - 10273) + (14724 - 10842)
    drive = _drive([read * 8192 * 0.6 / 19] * 19)  # a 19 s run, 60 % of it off the drive
    v = cd.analyse(before, after, drive_samples=drive, dataset_bytes=BIG, memory_bytes=MEMORY)
    assert [(c.client, c.blks_read, c.blks_hit) for c in v.clients] == [
        ("client1", 3929, 180310),
        ("client2", 3882, 177010),
    ]
    assert v.clients[0].hit_ratio == pytest.approx(180310 / (180310 + 3929))
    assert v.drive_share == pytest.approx(0.6)
    assert v.verdict == cd.DEFEATED


def test_cache_defeated():
    # client1 read 10,000 blocks from outside shared buffers, client2 30,000: 40,000 x 8 KiB
    after = _counters(client1=(11_000, 140_000), client2=(32_000, 90_000))
    drive = _drive([40_000 * 8192 * 0.8 / 4] * 4)  # 80 % of it reached the drive in 4 s
    v = cd.analyse(BEFORE, after, drive_samples=drive, dataset_bytes=BIG, memory_bytes=MEMORY)
    assert v.verdict == cd.DEFEATED and v.defeated
    assert [(c.client, c.blks_read, c.blks_hit) for c in v.clients] == [
        ("client1", 10_000, 90_000),
        ("client2", 30_000, 30_000),
    ]
    assert v.clients[0].hit_ratio == pytest.approx(0.9)
    assert v.clients[1].hit_ratio == pytest.approx(0.5)
    assert v.clients[1].read_bytes == 30_000 * 8192
    assert (v.blks_read, v.blks_hit) == (40_000, 120_000)
    assert v.hit_ratio == pytest.approx(0.75)
    assert v.read_bytes == 40_000 * 8192
    assert v.drive_read_bytes == pytest.approx(40_000 * 8192 * 0.8)
    assert v.drive_reads == pytest.approx(32_000)
    assert v.drive_share == pytest.approx(0.8)
    assert not v.fits_in_memory
    assert v.reason == (
        "the drive read 250.0 MiB, 80.0% of the 312.5 MiB read from outside"
        " shared buffers; the datasets (1.5 GiB) are at least twice the DB host's"
        " memory (512.0 MiB)"
    )


def test_page_cache_served_the_reads():
    after = _counters(client1=(11_000, 140_000), client2=(32_000, 90_000))
    drive = _drive([40_000 * 8192 * 0.01])  # 1 %: blks_read were page-cache hits
    v = cd.analyse(BEFORE, after, drive_samples=drive, dataset_bytes=BIG, memory_bytes=MEMORY)
    assert v.verdict == cd.NOT_DEFEATED and not v.defeated
    assert v.drive_share == pytest.approx(0.01)
    assert v.reason == (
        "the drive read 3.1 MiB, 1.0% of the 312.5 MiB read from outside shared"
        " buffers (under 5%): the page cache served the rest"
    )


def test_datasets_fit_in_memory_even_with_drive_reads():
    after = _counters(client1=(11_000, 140_000), client2=(32_000, 90_000))
    drive = _drive([40_000 * 8192])  # a cold start: everything came from the drive once
    v = cd.analyse(
        BEFORE, after, drive_samples=drive, dataset_bytes=2 * MEMORY - 1, memory_bytes=MEMORY
    )
    assert v.verdict == cd.NOT_DEFEATED and v.fits_in_memory
    assert v.reason == ("the datasets (1024.0 MiB) fit in twice the DB host's memory (512.0 MiB)")
    # the rule is drivelab's: less than twice the memory; exactly twice does not fit
    v = cd.analyse(
        BEFORE, after, drive_samples=drive, dataset_bytes=2 * MEMORY, memory_bytes=MEMORY
    )
    assert v.verdict == cd.DEFEATED and not v.fits_in_memory


def test_both_reasons_are_given():
    after = _counters(client1=(11_000, 140_000), client2=(32_000, 90_000))
    v = cd.analyse(
        BEFORE, after, drive_samples=_drive([0.0, 0.0]), dataset_bytes=GIB // 4, memory_bytes=MEMORY
    )
    assert v.verdict == cd.NOT_DEFEATED
    assert v.reason.startswith("the datasets (256.0 MiB) fit in twice")
    assert "; the drive read 0 B, 0.0% of the 312.5 MiB" in v.reason


@pytest.mark.parametrize(
    ("share", "verdict"),
    [(0.0499, cd.NOT_DEFEATED), (0.05, cd.DEFEATED), (1.3, cd.DEFEATED)],
    ids=["just-under-5%", "at-5%", "readahead-over-100%"],
)
def test_share_threshold(share, verdict):
    after = _counters(client1=(11_000, 50_000), client2=(2_000, 60_000))  # 10,000 blocks
    drive = _drive([10_000 * 8192 * share])
    v = cd.analyse(BEFORE, after, drive_samples=drive, dataset_bytes=BIG, memory_bytes=MEMORY)
    assert v.verdict == verdict
    assert v.drive_share == pytest.approx(share)


def test_zero_reads():
    """Every block came from shared buffers: nothing reached even the page cache."""
    after = _counters(client1=(1_000, 90_000), client2=(2_000, 61_000))
    v = cd.analyse(
        BEFORE, after, drive_samples=_drive([0.0] * 3), dataset_bytes=BIG, memory_bytes=MEMORY
    )
    assert v.verdict == cd.NOT_DEFEATED
    assert v.reason == "no block was read from outside shared buffers"
    assert v.blks_read == 0 and v.read_bytes == 0
    assert v.drive_share is None  # 0 / 0
    assert [c.hit_ratio for c in v.clients] == [1.0, 1.0]
    assert v.hit_ratio == 1.0


def test_zero_reads_and_zero_hits():
    v = cd.analyse(
        BEFORE, BEFORE, drive_samples=_drive([0.0]), dataset_bytes=BIG, memory_bytes=MEMORY
    )
    assert v.verdict == cd.NOT_DEFEATED
    assert v.hit_ratio is None and [c.hit_ratio for c in v.clients] == [None, None]


def test_no_telemetry_is_unknown():
    after = _counters(client1=(11_000, 140_000), client2=(32_000, 90_000))
    v = cd.analyse(BEFORE, after, drive_samples=[], dataset_bytes=BIG, memory_bytes=MEMORY)
    assert v.verdict == cd.UNKNOWN and not v.defeated
    assert v.drive_read_bytes is None and v.drive_share is None
    assert "no drive read telemetry" in v.reason
    # without telemetry the memory rule still decides
    v = cd.analyse(BEFORE, after, drive_samples=[], dataset_bytes=GIB // 4, memory_bytes=MEMORY)
    assert v.verdict == cd.NOT_DEFEATED


def test_devices_and_step():
    after = _counters(client1=(11_000, 50_000), client2=(2_000, 60_000))  # 10,000 blocks
    members = _drive([10_000 * 8192 * 0.25 / 2] * 2, "loop4") + _drive(
        [10_000 * 8192 * 0.25 / 2] * 2, "loop5"
    )
    other = _drive([1e12], "vda")
    v = cd.analyse(
        BEFORE,
        after,
        drive_samples=members + other,
        devices=["loop4", "loop5"],
        dataset_bytes=BIG,
        memory_bytes=MEMORY,
    )
    assert v.drive_share == pytest.approx(0.5)
    # samples 5 s apart: each stands for 5 s of reads
    v = cd.analyse(
        BEFORE,
        after,
        drive_samples=_drive([10_000 * 8192 / 10] * 2),
        step=5.0,
        dataset_bytes=BIG,
        memory_bytes=MEMORY,
    )
    assert v.drive_share == pytest.approx(1.0)


def test_frozen():
    v = cd.analyse(BEFORE, BEFORE, drive_samples=[], dataset_bytes=BIG, memory_bytes=MEMORY)
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.verdict = cd.DEFEATED  # type: ignore[misc]


@pytest.mark.parametrize(
    ("before", "after", "memory", "expected"),
    [
        (
            BEFORE,
            _counters(client1=(500, 60_000), client2=(2_000, 60_000)),
            MEMORY,
            "pg_stat_database drivelab_client1: counters went down during the run"
            " (blks_read 1000 -> 500, blks_hit 50000 -> 60000); were statistics reset?",
        ),
        (
            BEFORE,
            _counters(client1=(1_000, 50_000)),
            MEMORY,
            "pg_stat_database: drivelab_client2 not read both before and after the run",
        ),
        (BEFORE, BEFORE, 0, "DB host memory 0 bytes: must be positive"),
    ],
    ids=["reset", "database-missing", "no-memory"],
)
def test_bad_input(before, after, memory, expected):
    with pytest.raises(DrivelabError) as err:
        cd.analyse(before, after, drive_samples=[], dataset_bytes=BIG, memory_bytes=memory)
    assert str(err.value) == expected


def test_bad_row():
    with pytest.raises(DrivelabError, match="pg_stat_database row"):
        cd.counters([{"datname": "drivelab_client1", "blks_read": None, "blks_hit": 1}])
