"""A client sweep (``workload.clients_per_host`` a list): the matrix's cells in order,
their names, the -j rule's refusals, run.json read back, and the report's curve of tps
against connections on the realistic store's runs (the knee rule itself:
tests/unit/test_knee.py)."""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest

from collector import documents
from collector import scenario as sc
from collector.cell import Cell, PgbenchOptions
from collector.cli import main as cli
from collector.errors import DrivelabError
from collector.report import html, load
from collector.report import sweep as sweeps
from collector.runfolder import RunMeta, run_meta, write_json
from collector.store import Store
from tests.unit.test_scenario import INVENTORY, with_, write


def _sweep(tmp_path, **workload):
    doc = with_(drives=["nvme"], baseline=None, workload={"scale": [5], "duration": 15, **workload})
    return sc.expand(sc.load(write(tmp_path, doc)), INVENTORY)


def test_each_count_is_a_cell_in_order_named_by_its_counts(tmp_path):
    cells = _sweep(tmp_path, clients_per_host=[1, 2, 4], threads=1)
    assert [c.cell_id for c in cells] == [
        "nvme-ext4-tablespace-s5-h2-tpcb-c1j1",
        "nvme-ext4-tablespace-s5-h2-tpcb-c2j1",
        "nvme-ext4-tablespace-s5-h2-tpcb-c4j1",
    ]
    assert [c.cell.spec.test for c in cells] == [
        f"tpcb ext4 tablespace s5 2cl c{n} j1 T15" for n in (1, 2, 4)
    ]
    assert [(c.cell.pgbench.clients_per_host, c.cell.pgbench.threads) for c in cells] == [
        (1, 1), (2, 1), (4, 1)
    ]  # fmt: skip
    paired = _sweep(tmp_path, clients_per_host=[2, 8], threads=[2, 4])
    assert [c.cell.spec.test.split()[5:7] for c in paired] == [["c2", "j2"], ["c8", "j4"]]


def test_one_count_keeps_the_names_cells_had_before_sweeps(tmp_path):
    (cell,) = _sweep(tmp_path, clients_per_host=4, threads=2)
    assert cell.cell_id == "nvme-ext4-tablespace-s5-h2-tpcb"


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ({"clients_per_host": [1, 2, 4], "threads": [1, 2]},
         "workload.threads: 2 values for 3 counts of clients_per_host: give one, or one per count"),
        ({"clients_per_host": [1, 4], "threads": 2},
         "workload.threads: -j 2 with -c 1: pgbench runs at most one thread per connection"
         " (give threads per count: a list as long as clients_per_host)"),
        ({"clients_per_host": [4, 2], "threads": [2, 4]},
         "workload.threads[1]: -j 4 with -c 2: pgbench runs at most one thread per connection"),
        ({"clients_per_host": [2, 2]}, "workload.clients_per_host: 2 listed twice"),
        ({"clients_per_host": [0, 4]}, "workload.clients_per_host[0]: must be at least 1 (got 0)"),
    ],
)  # fmt: skip
def test_a_count_pgbench_would_refuse_is_one_line_with_its_path(tmp_path, workload, message):
    with pytest.raises(DrivelabError) as err:
        _sweep(tmp_path, **workload)
    text = str(err.value)
    assert "\n" not in text and message in text, text


def test_the_plan_counts_every_count_and_names_the_pairs(tmp_path):
    path = write(tmp_path, with_(drives=["nvme", "hdd7200"],
                                 workload={"scale": [5], "duration": 15,
                                           "clients_per_host": [1, 2, 4], "threads": 1}))  # fmt: skip
    s = sc.load(path)
    cells = sc.expand(s, INVENTORY)
    assert len(cells) == 6
    text = sc.plan_text(s, cells)
    assert "6 cells" in text and "pgbench -c 1 -j 1 | -c 2 -j 1 | -c 4 -j 1 -T 15" in text


def test_run_json_carries_the_sweep_and_is_read_back_with_the_same_name(tmp_path):
    cell = Cell("t", "nvme", "ext4", scale=5, hosts=("client1",),
                pgbench=PgbenchOptions(clients_per_host=2, threads=1, clients_swept=True))  # fmt: skip
    folder = tmp_path / cell.cell_id / "rep-0"
    folder.mkdir(parents=True)
    write_json(folder / "run.json", run_meta(cell, 0, ["client1"], "db").to_json())
    read = RunMeta.read(folder)
    assert read.cell.cell_id == cell.cell_id == "nvme-ext4-tablespace-s5-h1-tpcb-c2j1"


@pytest.fixture
def swept(results_db, tmp_path):
    """The realistic store's two cells made one drive's sweep: hdd's runs as -c 2 on its 2
    client hosts (4 connections), ssd's as -c 8 (16)."""
    path = tmp_path / "drivelab.db"
    shutil.copy(results_db, path)
    db = sqlite3.connect(path)
    for drive, c in (("hdd", 2), ("ssd", 8)):
        params = {"clients_per_host": c, "threads": 2, "duration": 0, "transactions": 0,
                  "rate": 0}  # fmt: skip
        db.execute(
            "UPDATE cells SET drive = 'hdd', key = ?, params_json = ? WHERE drive = ?",
            (f"hdd tpcb s2 2cl c{c} j2", json.dumps(params), drive),
        )
    db.commit()
    db.close()
    return path


def test_the_report_draws_the_curve_in_order_with_the_knee_rule(swept, tmp_path, capsys):
    with Store.open(swept, create=False) as store:
        view = load(store, "two-drives")
    (curve,) = sweeps.curves(view)
    assert (curve.drive, curve.test) == ("hdd", "tpcb s2 2cl")
    assert [p.connections for p in curve.points] == [4, 16]
    assert curve.knee is None  # 239 -> 7,272 tps: it keeps paying
    rows = sweeps.rows(curve)
    assert [r[1:4] for r in rows] == [["4", "2 x 2", "2"], ["16", "8 x 2", "2"]]
    assert rows[1][8] == f"{((7272.08 / 238.89) ** 0.5 - 1) * 100:+.0f} %"
    assert cli.main(["report", "--db", str(swept)]) == 0
    out = capsys.readouterr().out
    assert "hdd tpcb s2 2cl: tps against connections" in out
    assert "hdd (tpcb s2 2cl): no knee" in " ".join(out.split())
    assert cli.main(["report", "--db", str(swept), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    documents.validate("report", doc)
    assert [(r["connections"], r["knee"]) for r in doc["client_sweeps"]] == [(4, False),
                                                                             (16, False)]  # fmt: skip
    page = html.render([view])
    assert "<h3>tps against connections (client sweep)</h3>" in page
    assert "<!-- tps against connections -->" in page  # the plot's title, as SVG keeps it
