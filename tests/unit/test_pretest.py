"""Raw pre-tests: the outputs playbooks/fio.yml fetched from the local lab (nvme and
hdd7200 classes, 3 s per fio job, pg_test_fsync -s 1) read into samples, summarized
per drive, and shown by the terminal and HTML reports."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from collector.cli import main as cli
from collector.errors import DrivelabError
from collector.records import CellSpec, RunRecord, RunStatus
from collector.report import html, load
from collector.store import Store
from collector.verdicts.pretest import collect, summarize

DATA = Path(__file__).resolve().parents[1] / "data" / "pretest"


def by_drive():
    return {p.drive: p for p in summarize(collect(DATA, {"cell": "c1"}))}


def test_collect_labels_every_sample():
    samples = collect(DATA, {"cell": "c1", "filesystem": "ext4"})
    assert {s.labels["drive"] for s in samples} == {"nvme", "hdd7200"}
    assert {s.labels["write_cache"] for s in samples} == {"unchangeable"}
    assert all(s.labels["cell"] == "c1" and s.labels["filesystem"] == "ext4" for s in samples)
    jobs = {s.labels.get("job") for s in samples if s.metric == "drivelab_fio_iops"}
    assert len(jobs) == 10


def test_summary_figures_are_fio_and_pg_test_fsync_figures():
    d = by_drive()
    hdd, nvme = d["hdd7200"], d["nvme"]
    # the lab's 120-IOPS class, as fio measured it
    assert hdd.rand_read_qd1 == pytest.approx(119.96, abs=0.01)
    assert hdd.latency_mean_s == pytest.approx(0.008324, rel=1e-3)
    assert hdd.latency_p99_s == pytest.approx(0.099090432)
    assert hdd.fsync_per_s == pytest.approx(60.989)
    assert hdd.seq_read_bps == pytest.approx(63_570_554.0)
    assert nvme.rand_read_qd32 == pytest.approx(209_737.087637)
    assert nvme.rand_write_qd1 == pytest.approx(38_838.720427)
    assert nvme.fsync_per_s == pytest.approx(17_804.092)
    assert sorted(nvme.sweep_bps) == [4096, 16384, 65536, 262144, 1048576]
    # a larger block moves more bytes per random read
    assert list(hdd.sweep_bps.values()) == sorted(hdd.sweep_bps.values())


def test_a_missing_or_broken_output_is_one_line(tmp_path):
    with pytest.raises(DrivelabError, match=r"no pre-test outputs"):
        collect(tmp_path / "nothing")
    shutil.copy(DATA / "fio-nvme-wcache-unchangeable.json", tmp_path)
    (tmp_path / "fio-hdd-wcache-off.json").write_text('{"fio version": "fio-3.33", "jobs": [')
    with pytest.raises(DrivelabError) as info:
        collect(tmp_path)
    assert "fio-hdd-wcache-off.json" in str(info.value) and "\n" not in str(info.value)


@pytest.fixture
def store_with_pretests(tmp_path):
    path = tmp_path / "drivelab.db"
    with Store.open(path) as store:
        sid = store.add_scenario("pre", {"drives": ["nvme", "hdd7200"]}, "hdd7200")
        store.add_samples(collect(DATA, {"cell": "c1"}), sid)
        for drive in ("nvme", "hdd7200"):
            cid = store.add_cell(sid, CellSpec(drive=drive, clients=1, scale=2))
            store.record_run(cid, RunRecord(0, RunStatus.FAILED, reason="not run"))
    return path


def test_terminal_report_shows_device_figures_per_drive(store_with_pretests, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "220")
    assert cli.main(["report", "--db", str(store_with_pretests)]) == 0
    out = capsys.readouterr().out
    assert "raw drive pre-tests" in out
    hdd = next(
        line for line in out.splitlines() if line.startswith("│ hdd7200") and "unchang" in line
    )
    assert "120 / 112" in hdd and "8.324 / 99.090" in hdd and "63.6" in hdd and "61" in hdd
    nvme = next(
        line for line in out.splitlines() if line.startswith("│ nvme") and "unchang" in line
    )
    assert "35,061 / 209,737" in nvme and "17,804" in nvme


def test_html_report_has_the_table_and_the_sweep_plot(store_with_pretests):
    with Store.open(store_with_pretests, create=False) as store:
        view = load(store, "pre")
    page = html.render([view])
    assert "Raw drive pre-tests" in page
    assert "block-size sweep" in page and page.count("<svg") >= 1
    assert "209,737" in page
