"""`drivelab compare A B`: two drives of one scenario, or two scenarios."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from collector import cli
from collector.errors import DrivelabError
from collector.records import RunRecord
from collector.report import compare
from collector.store import Store


@pytest.fixture(scope="module")
def two_scenarios(results_db, tmp_path_factory):
    """The realistic store plus a second scenario: the same cells, ssd 2 % faster."""
    path = tmp_path_factory.mktemp("cmp") / "drivelab.db"
    shutil.copy(results_db, path)
    with Store.open(path) as s:
        old = s.scenario("two-drives")
        sid = s.add_scenario("two-drives-tuned", baseline_drive="hdd")
        for cid, spec in s.cells(old.id):
            new_cid = s.add_cell(sid, spec)
            for run in s.runs(cid):
                f = 1.02 if spec.drive == "ssd" else 1.0
                s.record_run(
                    new_cid,
                    RunRecord(
                        repetition=run.repetition,
                        status=run.status,
                        reason=run.reason,
                        clients=tuple(replace(c, tps=c.tps * f) for c in s.client_results(run.id)),
                        series=tuple(
                            replace(p, transactions=p.transactions * f) for p in s.series(run.id)
                        ),
                    ),
                )
    return path


def test_two_drives_of_one_scenario(results_db):
    with Store.open(results_db, create=False) as s:
        cmp = compare.compare(s, "hdd", "ssd")
    assert (cmp.baseline_label, cmp.contender_label) == ("two-drives: hdd", "two-drives: ssd")
    (pair,) = cmp.pairs
    assert pair.what == "tpcb s2 2cl"
    w = pair.test
    assert (w.baseline.n, w.contender.n) == (2, 3)  # the partial hdd run is not in
    assert w.diff_pct == pytest.approx((w.contender.mean / w.baseline.mean - 1) * 100)
    assert w.diff_pct == pytest.approx(2944, abs=1)
    assert w.significant is True and w.p_value < 0.01
    assert pair.ratio.ratio == pytest.approx(30.44, abs=0.01)


def test_two_scenarios(two_scenarios, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(["compare", "two-drives", "two-drives-tuned", "--db", str(two_scenarios)]) == 0
    out = capsys.readouterr().out
    assert "baseline two-drives  vs  contender two-drives-tuned" in out
    ssd = next(line for line in out.splitlines() if "ssd tpcb" in line)
    hdd = next(line for line in out.splitlines() if "hdd tpcb" in line)
    assert "+2.0%" in ssd and "+0.0%" in hdd
    assert "│ no " in ssd  # 2 % with this spread over 3 runs is not significant


def test_compare_json(two_scenarios, tmp_path, capsys):
    out = tmp_path / "cmp.json"
    assert (
        cli.main(
            [
                "compare",
                "hdd",
                "ssd",
                "--scenario",
                "two-drives-tuned",
                "--db",
                str(two_scenarios),
                "--json",
                str(out),
            ]
        )
        == 0
    )
    doc = json.loads(out.read_text())
    assert doc["baseline"] == "two-drives-tuned: hdd"
    (pair,) = doc["pairs"]
    assert pair["significant"] is True and pair["ratio"] == pytest.approx(30.44 * 1.02, abs=0.02)


def test_compare_errors(two_scenarios):
    with Store.open(two_scenarios, create=False) as s:
        with pytest.raises(DrivelabError, match="scenario 'two-drives' has no drive 'floppy'"):
            compare.compare(s, "hdd", "floppy", scenario="two-drives")
        with pytest.raises(DrivelabError, match="no scenario 'nope'"):
            compare.compare(s, "hdd", "ssd", scenario="nope")
