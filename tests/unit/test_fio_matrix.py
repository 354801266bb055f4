"""A fio matrix (``pretests.fio`` with axes): its expansion into jobs and its refusals,
the DB host's check of every word before it goes into the job file, and the report of
a real run of such jobs (tests/data/fio/fio_matrix_2x2_mixed_fdatasync.json: the job
file beside it, made by the role's filter, run by fio 3.33 on this machine for 1 s
each)."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from collector import scenario as sc
from collector.errors import DrivelabError
from collector.paths import REPO
from collector.report import ScenarioView, fiomatrix
from collector.scenario.plan import pretest_seconds
from collector.verdicts.pretest import collect
from tests.unit.test_scenario import INVENTORY, with_, write

DATA = REPO / "tests" / "data" / "fio"
_spec = importlib.util.spec_from_file_location(
    "drive_pretest_filter", REPO / "roles/drive_pretest/filter_plugins/fio.py"
)
assert _spec and _spec.loader
role_filter = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(role_filter)


def _pretests(tmp_path, fio):
    doc = with_(drives=["nvme"], baseline=None, pretests={"fio": fio, "runtime": 2, "ramp": 1})
    return sc.expand(sc.load(write(tmp_path, doc)), INVENTORY)[0].pretests


def test_the_axes_cross_into_jobs_in_their_nesting(tmp_path):
    pre = _pretests(tmp_path, {"block_sizes": ["4k", "64k"], "iodepths": [1, 8],
                               "patterns": ["randread", "mixed70"]})  # fmt: skip
    names = [j["name"] for j in pre["jobs"]]
    assert names == [
        f"m-{p}-{bs}-qd{d}-nj1-direct"
        for p in ("randread", "mixed70") for bs in ("4k", "64k") for d in (1, 8)
    ]  # fmt: skip
    mixed = pre["jobs"][4]
    assert (mixed["rw"], mixed["rwmixread"], mixed["direct"], mixed["fdatasync"]) == (
        "randrw", 70, True, False,
    )  # fmt: skip
    # the plan counts them: 12 default jobs and 8 of the matrix, 3 s each, beside layout
    assert pretest_seconds(pre) - pretest_seconds({**pre, "jobs": []}) == 8 * 3
    assert _pretests(tmp_path, True)["jobs"] == []  # true: the default jobs alone


@pytest.mark.parametrize(
    ("fio", "message"),
    [
        ({"patterns": ["randread", "write"], "sync": ["direct", "fdatasync"]},
         "pretests.fio.sync: fdatasync syncs writes, and pattern randread has none"),
        ({"patterns": ["write"], "sync": ["fdatasync"], "iodepths": [1, 32]},
         "pretests.fio.sync: fdatasync with iodepth 32: buffered I/O completes one write at a"
         " time"),
        ({"block_sizes": ["1000"]}, "pretests.fio.block_sizes[0]: '1000': a block size is 512"),
        ({"block_sizes": ["4k\nfilename=/dev/sda"]}, "pretests.fio.block_sizes[0]:"),
        ({"patterns": ["mixed100"]}, "pretests.fio.patterns[0]: 'mixed100' is not a pattern"),
        ({"block_sizes": [f"{n}k" for n in (4, 8, 16, 32, 64, 128, 256, 512)],
          "iodepths": [1, 2, 4, 8, 16, 32], "patterns": ["read", "write", "randread"]},
         "pretests.fio: 144 jobs: a matrix crosses into at most 128"),
        ({"iodepth": [1]}, "pretests.fio.iodepth: unknown key (did you mean 'iodepths'?)"),
    ],
)  # fmt: skip
def test_an_impossible_matrix_is_one_line_with_its_path(tmp_path, fio, message):
    with pytest.raises(DrivelabError) as err:
        _pretests(tmp_path, fio)
    text = str(err.value)
    assert "\n" not in text and message in text, text


def test_the_db_host_checks_every_word_before_the_job_file():
    job = {"name": "m-write-8k-qd1-nj1-fdatasync", "rw": "write", "bs": "8k", "iodepth": 1,
           "numjobs": 1, "rwmixread": 50, "direct": False, "fdatasync": True}  # fmt: skip
    (section,) = role_filter.drive_pretest_jobs([job])
    assert section.splitlines() == [
        "[m-write-8k-qd1-nj1-fdatasync]", "rw=write", "bs=8k", "iodepth=1", "numjobs=1",
        "group_reporting=1", "direct=0", "fdatasync=1",
    ]  # fmt: skip
    for bad, says in [
        ({"bs": "4k\nfilename=/dev/sda"}, "bs '4k\\nfilename=/dev/sda' is not 512 bytes to 64m"),
        ({"name": "x]\n[evil"}, "fio job name 'x]\\n[evil'"),
        ({"rw": "trim"}, "rw 'trim' is not one of"),
        ({"iodepth": 0}, "iodepth must be 1 to 1024, not 0"),
        ({"direct": "yes"}, "direct and fdatasync must be booleans"),
    ]:
        with pytest.raises(role_filter.AnsibleFilterError) as err:
            role_filter.drive_pretest_jobs([{**job, **bad}])
        assert says in str(err.value), err.value
    expected = (DATA / "fio_matrix_2x2_mixed_fdatasync.fio").read_text()
    assert all(s in expected for s in role_filter.drive_pretest_jobs([job]))


def test_a_real_matrix_run_is_stored_per_job_and_reported(tmp_path):
    folder = tmp_path / "pretests"
    folder.mkdir()
    shutil.copy(DATA / "fio_matrix_2x2_mixed_fdatasync.json", folder / "fio-nvme-wcache-leave.json")
    samples = collect(folder)
    view = ScenarioView(info=None, baseline=None, cells=(), pretests=tuple(samples),
                        drives=("nvme",))  # fmt: skip
    found = fiomatrix.jobs(view)
    assert len(found) == 9
    by = {(j.pattern, j.block_bytes, j.iodepth, j.sync): j for j in found}
    # a mixed job's IOPS are its reads' and writes' (7,629 + 3,405 in fio's JSON)
    assert by["mixed70", 4096, 1, "direct"].iops == pytest.approx(7629 + 3405, abs=1)
    assert by["randread", 4096, 8, "direct"].iops > by["randread", 4096, 1, "direct"].iops
    wal = by["write", 8192, 1, "fdatasync"]
    assert wal.p99_s is not None and wal.p999_s >= wal.p99_s and wal.iops_stddev == 0.0
    head, rows = fiomatrix.by_block_size(found)
    assert head == ["block", "nvme randread MB/s", "nvme randwrite MB/s"]
    assert [r[0] for r in rows] == ["4k", "64k"] and rows[0][2] == "-"
    ((title, svg),) = fiomatrix.plots(found)
    assert title == "nvme (write cache leave): fio matrix" and svg.count("<path") > 20
    table = fiomatrix.rows(found)
    assert table[0][:7] == ["nvme", "leave", "randread", "4k", "1", "1", "direct"]
