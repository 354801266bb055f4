"""Caveats sit on the figures they qualify: a cell whose runs were client-bound (or did
not defeat the cache, or had a checkpoint in the window, or failed a physics check) is
marked in the terminal table's row with a legend, hatched and marked in the HTML's bars,
said in the verdict line, carried as booleans in the JSON, and said by `compare`; a cell
that is not flagged carries no mark."""

from __future__ import annotations

import io
import json
import re
import shutil
from dataclasses import replace

import pytest
from rich.console import Console

from collector.cli import main as cli
from collector.records import Sample
from collector.report import (
    ScenarioView,
    charts,
    compare,
    devicecharts,
    findings,
    html,
    load,
    terminal,
)
from collector.store import Fact, Store
from collector.verdicts import caveats as caveat
from collector.verdicts import environment, physics, telemetry


def _flag(code: str, level: str) -> dict:
    return physics.Flag(code, "ssd", level, "words").as_fact()


@pytest.mark.parametrize(
    ("facts", "codes"),
    [
        ({}, ()),
        ({"client_bound": ["client1"]}, (caveat.CLIENT_BOUND,)),
        ({"client_bound": []}, ()),
        ({"cache": {"verdict": "cache not defeated"}}, (caveat.CACHE_NOT_DEFEATED,)),
        ({"cache": {"verdict": "cache defeated"}}, ()),
        ({"checkpoint_in_window": True}, (caveat.CHECKPOINT,)),
        ({"checkpoint_in_window": None}, ()),
        ({"physics": [_flag(physics.FLUSH_ABSORBED, physics.WARNING)]}, (caveat.PHYSICS,)),
        ({"physics_iops": [_flag(physics.IOPS_ABOVE_FIO, physics.WARNING)]}, (caveat.PHYSICS,)),
        # a note (a check not made) and what the drive is qualify no figure
        ({"physics_iops": [_flag(physics.IOPS_UNCHECKED, physics.NOTE)]}, ()),
        ({"physics": [_flag(physics.PLP_NONE, physics.WARNING)]}, ()),
        ({"lab": {"accel": "tcg"}}, (caveat.EMULATED_CPU,)),
        ({"lab": {"accel": "kvm"}}, ()),
        (
            {"checkpoint_in_window": True, "client_bound": ["c2"], "cache": {"verdict": "cache not defeated"}},
            (caveat.CLIENT_BOUND, caveat.CACHE_NOT_DEFEATED, caveat.CHECKPOINT),
        ),
    ],
)  # fmt: skip
def test_a_runs_caveats_from_its_facts(facts, codes):
    assert caveat.run_caveats(facts) == codes


def test_a_cells_caveats_count_its_runs():
    cav = caveat.cell_caveats(
        [(caveat.CLIENT_BOUND,), (), (caveat.CLIENT_BOUND, caveat.CHECKPOINT)]
    )
    assert [(c.code, c.runs, c.of) for c in cav] == [
        (caveat.CLIENT_BOUND, 2, 3),
        (caveat.CHECKPOINT, 1, 3),
    ]
    assert caveat.marks(cav) == "c k"
    assert [m for m, _ in caveat.legend(cav)] == ["c", "k"]
    assert caveat.cell_caveats([(), ()]) == ()
    assert len({k.mark for k in caveat.KINDS}) == len(caveat.KINDS)


def _copy(results_db, tmp_path):
    """A copy of the realistic store to add facts to."""
    path = tmp_path / "drivelab.db"
    shutil.copy(results_db, path)
    return path


@pytest.fixture
def flagged(results_db, tmp_path):
    """The realistic store, ssd's runs client-bound, hdd's cache defeated."""
    path = _copy(results_db, tmp_path)
    with Store.open(path, create=False) as store:
        view = load(store, "two-drives")
        sid = store.scenario("two-drives").id
        for cv in view.cells:
            for r in cv.stats.runs:
                facts = (
                    {"client_bound": ["client1"]}
                    if cv.drive == "ssd"
                    else {"cache": {"verdict": "cache defeated"}}
                )
                store.add_facts(sid, facts, scope="run", run_id=r.run_id)
    return path


def test_the_terminal_marks_the_flagged_row_and_says_it_in_the_verdict(flagged):
    with Store.open(flagged, create=False) as store:
        view = load(store, "two-drives")
    out = io.StringIO()
    terminal.publish([view], Console(file=out, width=80))
    lines = out.getvalue().splitlines()
    verdict = " ".join(lines[0:2]).split()
    assert (
        " ".join(verdict)
        == "verdict ssd vs hdd: 30.4x, but client-bound: ssd is faster than this lab can show"
    )
    rows = {line.split()[0]: line for line in lines if line.startswith(("hdd ", "ssd "))}
    assert rows["ssd"].startswith("ssd [c] ") and "7,272.1" in rows["ssd"]
    assert "[" not in rows["hdd"], rows["hdd"]
    assert "  [c] client-bound: a client's CPU was the limit, so the drive may be faster" in lines


def test_an_unflagged_report_has_no_mark_no_legend_and_a_plain_verdict(results_db):
    with Store.open(results_db, create=False) as store:
        view = load(store, "two-drives")
    said = findings.findings(view)
    assert said.verdicts == ("ssd vs hdd: 30.4x",)
    assert said.legend == ()
    assert all(cv.caveats == () for cv in view.cells)


def test_the_json_carries_the_caveats_as_booleans(flagged, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert cli.main(["report", "--db", str(flagged), "--json", str(out)]) == 0
    cells = {c["drive"]: c for c in json.loads(out.read_text())["cells"]}
    assert cells["ssd"]["client_bound"] is True and cells["ssd"]["caveats"] == "client_bound"
    assert cells["hdd"]["client_bound"] is False and cells["hdd"]["caveats"] is None
    assert cells["hdd"]["cache_defeated"] is True and cells["ssd"]["cache_defeated"] is None
    for c in cells.values():
        assert c["latency_p50_s"] <= c["latency_p99_s"] <= c["latency_p999_s"]


def test_compare_says_which_side_measured_the_clients(flagged):
    with Store.open(flagged, create=False) as store:
        cmp = compare.compare(store, "hdd", "ssd")
    assert compare.caveat_lines(cmp) == [
        "tpcb s2 2cl: contender client-bound: not only the drives were measured"
    ]
    (pair,) = compare.as_dict(cmp)["pairs"]
    assert pair["contender_client_bound"] is True and pair["baseline_client_bound"] is False
    assert pair["contender_caveats"] == ["client_bound"]
    out = io.StringIO()
    compare.publish(cmp, Console(file=out, width=80))
    assert "caveat tpcb s2 2cl: contender client-bound" in out.getvalue()


def test_the_html_marks_the_row_and_hatches_the_bars(flagged, results_db):
    with Store.open(flagged, create=False) as store:
        page = html.render([load(store, "two-drives")])
    assert "<p class=verdict>verdict: ssd vs hdd: 30.4x, but client-bound:" in page
    assert "<td>ssd [c]</td>" in page and "<td>hdd</td>" in page
    assert "<p class=legend>[c] client-bound:" in page
    # matplotlib writes a hatch as an SVG pattern, used by the flagged bars only
    assert "<pattern " in page
    with Store.open(results_db, create=False) as store:
        plain = html.render([load(store, "two-drives")])
    assert "<pattern " not in plain and "[c]" not in plain and "class=legend" not in plain


def test_the_page_has_each_id_once_and_a_table_of_contents(flagged):
    """Every figure's SVG ids are its own (matplotlib names glyphs and clip paths alike in
    every figure), every reference points at an id of the page, and the contents link each
    section's heading."""
    with Store.open(flagged, create=False) as store:
        page = html.render([load(store, "two-drives")])
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) > 50 and len(ids) == len(set(ids))
    refs = set(re.findall(r'(?:href="#|url\(#)([^")]+)', page))
    assert refs and refs <= set(ids), refs - set(ids)
    toc = page.split("<ul class=toc>", 1)[1].split("</ul>", 1)[0]
    assert '<a href="#sec-1">Scenario two-drives</a>' in toc and "Runs" in toc
    # the verdict and the table come before any figure
    assert page.index("class=verdict") < page.index("<table") < page.index("<svg")


def test_the_environment_shows_nested_values_in_words():

    assert environment.show({"firmware": None, "model": "X"}) == "firmware: -, model: X"
    assert environment.show(["a", None]) == "a, -"


def test_every_device_figure_is_plotted_in_words_and_by_drive_name():
    """The telemetry plots' titles and units for every device figure telemetry stores
    (not ``drivelab_device_read_await_seconds`` in seconds), and the device's drive name
    from the runs' device facts (not ``loop0``)."""

    stored = {telemetry.DEVICE_PREFIX + name for name, _, _ in telemetry._DEVICE_QUERIES}
    assert stored == set(devicecharts.TELEMETRY_WORDS)
    assert devicecharts.TELEMETRY_WORDS["drivelab_device_read_await_seconds"][1:] == ("ms", 1e3)
    facts = (
        Fact("device", "nvme", {"drives": [{"kname": "loop0"}]}, "dbhost"),
        Fact("device", "r10", {"drives": [{"kname": "loop4"}, {"kname": "loop5"}]}, "dbhost"),
    )
    view = ScenarioView(info=None, baseline=None, cells=(), facts=facts)
    assert devicecharts.device_drives(view) == {"loop0": "nvme", "loop4": "r10", "loop5": "r10"}


def test_iostat_per_drive_over_its_runs_windows_and_percentiles_per_cell(results_db, tmp_path):
    """iostat's summary of a drive is the mean of its own device's per-second figures
    inside its complete runs' windows (a sample outside them, or of another device, is
    not counted), in iostat's units; the percentiles per cell rise with the quantile."""
    path = _copy(results_db, tmp_path)
    with Store.open(path, create=False) as store:
        view = load(store, "two-drives")
        sid = store.scenario("two-drives").id
        ssd = next(cv for cv in view.cells if cv.drive == "ssd")
        lo, hi = next(r.window for r in ssd.stats.runs if r.window)
        store.add_facts(sid, {"ssd": {"drives": [{"kname": "loop1"}]}}, scope="device", host="db")
        samples = [
            Sample("drivelab_device_read_iops", v, "operations/second", {"device": dev}, t)
            for dev, v, t in (
                ("loop1", 100.0, lo + 1),
                ("loop1", 300.0, hi - 1),
                ("loop1", 9e9, hi + 3600),  # outside every window of ssd
                ("loop7", 9e9, lo + 1),  # another device
            )
        ] + [Sample("drivelab_device_util_ratio", 0.5, "ratio", {"device": "loop1"}, lo + 1)]
        store.add_samples(samples, scenario_id=sid)
        view = load(store, "two-drives")
    said = findings.findings(view)
    assert said.iostat == (("ssd", "200", "-", "-", "-", "-", "-", "50"),)
    rows = {r[0]: r for r in said.percentiles}
    assert set(rows) == {"hdd", "ssd"}
    figures = [float(x.replace(",", "")) for x in rows["ssd"][2:]]
    assert figures == sorted(figures) and figures[0] > 0


def test_every_cells_tps_per_second_on_one_axis_with_its_marks(flagged):
    with Store.open(flagged, create=False) as store:
        view = load(store, "two-drives")
    svg = charts.plot_all_tps(view)
    assert "<!-- tps per second, every cell on one axis -->" in svg
    # matplotlib keeps each text as a comment beside its paths: the legend names both
    assert "<!-- ssd [c] -->" in svg and "<!-- hdd -->" in svg
    one = replace(view, cells=view.cells[:1])
    assert charts.plot_all_tps(one) is None  # nothing to set side by side


def test_checkpoints_buffers_and_wal_per_cell_are_means_per_complete_run(results_db, tmp_path):
    path = _copy(results_db, tmp_path)
    with Store.open(path, create=False) as store:
        view = load(store, "two-drives")
        sid = store.scenario("two-drives").id
        ssd = next(cv for cv in view.cells if cv.drive == "ssd")
        for n, r in enumerate(r for r in ssd.stats.runs if r.run_id is not None):
            store.add_facts(sid, {
                "pg_checkpoints": {"timed": 0, "requested": n, "buffers_checkpoint": 100 * n,
                                   "buffers_clean": 0, "buffers_backend": 10, "backend_fsyncs": 0},
                "pg_wal": {"records": 1000, "fpi": 100 * n, "bytes": 2e6 * (n + 1)},
            }, scope="run", run_id=r.run_id)  # fmt: skip
        view = load(store, "two-drives")
    rows = findings.findings(view).checkpoints_table
    assert [r[0] for r in rows] == ["ssd"]  # hdd's runs have no counters: left out
    # three complete runs: n = 0, 1, 2
    assert rows[0][2:] == ("1.0", "100", "0", "10", "0", "4.0", "10.0")
