"""Latency under load as gather reads it (collector.stats.latency): the window summary
(run fact ``latency_window``), the lag reading (``schedule_lag``), each client's
whole-run figures and the per-second series stored as samples, on run folders made
of the real ``pgbench -R -l`` logs and reports captured on the lab
(tests/data/txlog-rate/README.md says how each was made)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from collector.gather import folder as gather
from collector.parse import pgbench
from collector.run import storing
from collector.stats import latency
from collector.store import Store

DATA = Path(__file__).resolve().parent.parent / "data" / "txlog-rate"
CLIENTS = ("client1", "client2")


def txlog_run(
    root: Path,
    capture: str,
    *,
    rate: int,
    limit_ms: int | None = None,
    rate_per: str = "host",
    rep: int = 1,
    clients: tuple[str, ...] = CLIENTS,
) -> Path:
    """A run folder as the pgbench playbook leaves it, holding one capture of
    tests/data/txlog-rate (named <drive>-<placement>-...): each client's report, exit
    code and both log thread files."""
    drive, placement = capture.split("-")[:2]
    duration = 6 if drive == "nvme" else 8
    params = {"clients_per_host": 4, "threads": 2, "duration": duration, "transactions": 0}
    params["rate"] = rate
    if limit_ms:
        params["latency_limit"] = limit_ms
    cell_id = f"{drive}-ext4-{placement}-s5-h2-tpcb-r{rate}"
    run_dir = root / "runs" / "latency" / cell_id / f"rep-{rep}"
    run_dir.mkdir(parents=True)
    doc = {
        "scenario": "latency",
        "cell_id": cell_id,
        "cell": {
            "drive": drive,
            "workload": "tpcb",
            "filesystem": "ext4",
            "placement": placement,
            "scale": 5,
            "clients": len(clients),
            "params": params,
        },
        "repetition": rep,
        "db_host": "dbhost",
        "client_hosts": list(clients),
        "pgbench": {
            **params,
            "mode": "tpcb",
            "log": "full",
            "rate_per": rate_per,
            "latency_limit": limit_ms or 0,
            "progress": 1,
        },
    }
    (run_dir / "run.json").write_text(json.dumps(doc), encoding="utf-8")
    src = DATA / capture
    for host in clients:
        d = run_dir / host
        d.mkdir()
        (d / "stdout.txt").write_text((src / f"{host}.stdout").read_text())
        (d / "stderr.txt").write_text("")
        (d / "rc.txt").write_text("rc=0\n")
        argv = (src / f"{host}.command").read_text().split()
        logs = sorted(src.glob(f"{host}.[0-9]*"))
        pid = int(logs[0].name.split(".")[1])
        (d / "command.json").write_text(json.dumps({"argv": argv, "pid": pid}))
        for p in logs:
            (d / ("pgbench_log." + p.name.split(".", 1)[1])).write_bytes(p.read_bytes())
    return run_dir


def _printed(capture: str, host: str):
    return pgbench.parse_report((DATA / capture / f"{host}.stdout").read_text(), host)


def _rows(capture: str, host: str) -> list[list[str]]:
    return [
        line.split()
        for p in sorted((DATA / capture).glob(f"{host}.[0-9]*"))
        for line in p.read_text().splitlines()
    ]


#: capture -> (-R per host, -L ms, the rate was sustained)
CAPTURES = {
    "nvme-tablespace-r400": (400, None, True),
    "nvme-tablespace-r400-L2": (400, 2, False),
    "hdd7200-tablespace-r100": (100, None, True),
    "hdd7200-cluster-r10": (10, None, True),
    "hdd7200-cluster-r10-L200": (10, 200, True),
    "hdd7200-cluster-r100": (100, None, False),
    "hdd7200-cluster-r100-L50": (100, 50, False),
}


@pytest.mark.parametrize("capture", list(CAPTURES))
def test_window_summary_of_a_real_rate_run(tmp_path, capture):
    rate, limit, sustained = CAPTURES[capture]
    g = gather.gather_run(txlog_run(tmp_path, capture, rate=rate, limit_ms=limit))
    s = latency.window_summary(g)
    assert s is not None
    assert tuple(s) == latency.SUMMARY_KEYS
    assert g.run.facts["latency_window"] == s
    assert g.run.facts["schedule_lag"] == s["lag"]
    # the report must say what was asked: -R per host, and in all over both hosts
    assert (s["rate_per_host"], s["rate_total"], s["rate_per"]) == (rate, 2 * rate, "host")
    assert s["latency_limit_ms"] == limit
    assert s["p50_ms"] <= s["p95_ms"] <= s["p99_ms"] <= s["max_ms"]
    # the window (every client running) is the run's tps window, in whole seconds
    first, last = latency.window_seconds(g.stats().window)
    assert s["seconds"] == last - first + 1 >= 5  # -T 6 or 8
    # its p99 and counts are those of the rows that completed in those seconds
    ok = [
        int(r[2])
        for h in CLIENTS
        for r in _rows(capture, h)
        if r[2].isdigit() and first <= int(r[4]) <= last
    ]
    exact = np.percentile(ok, 99, method="inverted_cdf") / 1e3
    assert abs(s["p99_ms"] - exact) <= exact / 64
    assert s["transactions"] == len(ok)
    assert s["max_ms"] == max(ok) / 1e3
    skipped = sum(
        r[2] == "skipped" and first <= int(r[4]) <= last for h in CLIENTS for r in _rows(capture, h)
    )
    assert s["skipped"] == skipped
    if limit is None:
        assert s["late"] is None
    else:
        assert s["late"] == sum(v > limit * 1e3 for v in ok)
    # the lag reading: what tests/data/txlog-rate/README.md says pgbench showed
    assert s["lag"] is not None
    assert s["lag"]["sustained"] is sustained, s["lag"]["reason"]


def test_an_overloaded_drive_reads_as_not_sustained_by_the_growing_lag(tmp_path):
    g = gather.gather_run(txlog_run(tmp_path, "hdd7200-cluster-r100", rate=100))
    s = g.run.facts["latency_window"]
    assert s["lag"]["lag_grows"]
    assert s["lag"]["reason"].startswith("rate not sustained: schedule lag grew")
    # 200/s asked of a drive that completes about 113/s: the latency is the queue's
    assert s["p99_ms"] > 1000
    assert s["tps"] < 0.6 * s["rate_total"]


def test_late_and_skipped_per_client_agree_with_pgbench(tmp_path):
    """pgbench -L: each client's log-derived skipped and late counts over its whole
    run are the ones its report printed."""
    capture = "hdd7200-cluster-r100-L50"
    g = gather.gather_run(txlog_run(tmp_path, capture, rate=100, limit_ms=50))
    per = g.run.facts["latency_clients"]
    assert set(per) == set(CLIENTS)
    for c in g.run.clients:
        printed = _printed(capture, c.client)
        assert per[c.client]["skipped"] == printed.skipped == c.skipped
        assert per[c.client]["late"] == printed.above_latency_limit
        assert c.report["above_latency_limit"] == printed.above_latency_limit
        assert per[c.client]["transactions"] == printed.processed
    assert g.run.facts["schedule_lag"]["skipped_ratio"] > 0.4


def test_a_run_without_rate_still_has_its_window_percentiles(tmp_path):
    """Without -R there is no lag and no rate; the window's percentiles remain."""
    run_dir = txlog_run(tmp_path, "nvme-tablespace-r400", rate=0)
    for host in CLIENTS:  # the lag column gone, as a run without -R writes its log
        for p in (run_dir / host).glob("pgbench_log.*"):
            p.write_text(
                "".join(" ".join(r.split()[:6]) + "\n" for r in p.read_text().splitlines())
            )
    s = latency.window_summary(gather.gather_run(run_dir))
    assert s is not None
    assert s["rate_per_host"] is None and s["rate_total"] is None and s["lag"] is None
    assert 0 < s["p50_ms"] <= s["p99_ms"]


def test_a_client_without_a_log_gives_no_window_summary(tmp_path):
    run_dir = txlog_run(tmp_path, "hdd7200-cluster-r10", rate=10)
    for p in (run_dir / "client2").glob("pgbench_log.*"):
        p.unlink()
    g = gather.gather_run(run_dir)
    assert latency.window_summary(g) is None
    assert "latency_window" not in g.run.facts
    assert set(g.run.facts["latency_clients"]) == {"client1"}


def test_per_second_series_are_stored_per_client_and_over_all(tmp_path):
    capture = "hdd7200-cluster-r100"
    run_dir = txlog_run(tmp_path, capture, rate=100)
    with Store.open(tmp_path / "results.db") as store:
        storing.record_run_dir(store, run_dir)
        sid = store.scenario("latency").id
        stored = store.samples(sid, metric_prefix=latency.LATENCY_METRIC)
        facts = {f.key: f.value for f in store.facts(sid) if f.scope == "run"}
    assert facts["latency_window"]["rate_total"] == 200
    assert facts["schedule_lag"]["sustained"] is False
    by: dict[tuple[str, str], dict[float, float]] = {}
    for s in stored:
        assert s.unit == "seconds" and s.timestamp is not None
        by.setdefault((s.labels.get("client", ""), s.labels["quantile"]), {})[s.timestamp] = s.value
    assert {c for c, _ in by} == {"client1", "client2", ""}
    assert {q for _, q in by} == {"0.5", "0.95", "0.99", "1"}
    for client in ("client1", "client2", ""):
        seconds = sorted(by[client, "0.5"])
        assert len(seconds) >= 8
        for t in seconds:
            assert (
                by[client, "0.5"][t] <= by[client, "0.95"][t] <= by[client, "0.99"][t]
                <= by[client, "1"][t]
            )  # fmt: skip
    # each second's max over all clients is the larger of the two clients' maxima
    for t, top in by["", "1"].items():
        assert top == max(by["client1", "1"].get(t, 0), by["client2", "1"].get(t, 0))
    # the overloaded run's latency climbs through it (the queue grows)
    p99 = [by["", "0.99"][t] for t in sorted(by["", "0.99"])]
    assert p99[-2] > 2 * p99[1]
    # and the schedule lag is kept per second too
    with Store.open(tmp_path / "results.db") as store:
        lag = store.samples(sid, metric_prefix=latency.LAG_METRIC)
    assert {s.labels.get("client", "") for s in lag} == {"client1", "client2", ""}


# --- the scenario: workload.rate as an axis, rate_per, latency_limit --------------------------


def _scenario(tmp_path: Path, **workload) -> Path:
    import yaml  # noqa: PLC0415

    doc = {
        "name": "t",
        "drives": ["nvme", "hdd7200"],
        "placement": ["cluster"],
        "workload": {"scale": [5], "duration": 8, **workload},
        "hosts": [2],
        "repetitions": 1,
    }
    path = tmp_path / "x.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _cells(path: Path):
    from collector import scenario as sc  # noqa: PLC0415
    from collector.paths import REPO  # noqa: PLC0415

    return sc.expand(sc.load(path), sc.load_inventory(REPO / "tests" / "data" / "inventory"))


def test_a_rate_list_is_an_axis_in_the_file_order(tmp_path):
    cells = _cells(_scenario(tmp_path, rate=[200, 50, 100]))
    rates = [(c.cell.drive, c.cell.pgbench.rate) for c in cells]
    assert rates == [(d, r) for d in ("nvme", "hdd7200") for r in (200, 50, 100)]
    first = cells[0].cell
    assert first.cell_id == "nvme-ext4-cluster-s5-h2-tpcb-r200"
    assert first.spec.test == "tpcb ext4 cluster s5 2cl c4 j2 T8 R200"
    assert first.pgbench.extra_vars()["pgbench_run_rate"] == 200
    assert first.pgbench.for_run_json()["rate_per"] == "host"


def test_a_total_rate_is_split_over_the_cells_client_hosts(tmp_path):
    cells = _cells(_scenario(tmp_path, rate=[100, 300], rate_per="total"))
    assert [c.cell.pgbench.rate for c in cells[:2]] == [50, 150]
    assert cells[1].cell.spec.params["rate"] == 150  # the cell keeps the -R pgbench ran
    assert cells[1].cell.pgbench.for_run_json()["rate_per"] == "total"


def test_a_rate_search_step_is_the_sweeps_cell_at_the_same_total(tmp_path):
    from collector.run.search import step_cell  # noqa: PLC0415

    swept = _cells(_scenario(tmp_path, rate=[100, 300], rate_per="total"))[1].cell
    base = _cells(_scenario(tmp_path))[0].cell
    step = step_cell(base, 300)
    assert step.spec.key == swept.spec.key  # one identity: a step's runs are the sweep's
    assert step.pgbench.extra_vars()["pgbench_run_rate"] == 150
    assert step.pgbench.rate_total(len(step.hosts)) == 300


@pytest.mark.parametrize(
    ("workload", "line"),
    [
        (
            {"rate": [100, 25], "rate_per": "total"},
            "x.yml: workload.rate[1]: a total of 25 does not split evenly over 2 client hosts"
            " (rate_per: total; give a multiple of 2)",
        ),
        ({"rate": [100, 100]}, "x.yml: workload.rate: 100 listed twice"),
        ({"rate": "100"}, "x.yml: workload.rate: must be a list (got '100')"),
        (
            {"rate_per": "client"},
            "x.yml: workload.rate_per: must be one of 'host' or 'total' (got 'client')",
        ),
        ({"latency_limit": 0}, "x.yml: workload.latency_limit: must be at least 1 (got 0)"),
    ],
    ids=["total not split", "rate twice", "rate a string", "rate_per unknown", "limit 0"],
)
def test_bad_rates_are_one_line_with_the_yaml_path(tmp_path, workload, line):
    from collector import scenario as sc  # noqa: PLC0415
    from collector.errors import DrivelabError  # noqa: PLC0415

    path = _scenario(tmp_path, **workload)
    with pytest.raises(DrivelabError) as err:
        sc.load(path)
    assert str(err.value) == f"{path.parent}/{line}"


def test_latency_limit_goes_to_pgbench_and_into_the_cells_label(tmp_path):
    cells = _cells(_scenario(tmp_path, rate=[100], latency_limit=50))
    c = cells[0].cell
    assert c.pgbench.extra_vars()["pgbench_run_latency_limit"] == 50
    assert c.spec.test.endswith("R100 L50")
    assert c.pgbench.for_run_json()["latency_limit"] == 50


def test_cells_without_a_rate_keep_their_names(tmp_path):
    cells = _cells(_scenario(tmp_path))
    c = cells[0].cell
    assert c.cell_id == "nvme-ext4-cluster-s5-h2-tpcb"
    assert c.spec.key == "nvme tpcb ext4 cluster s5 2cl c4 j2 T8"
    assert "latency_limit" not in c.spec.params
    assert c.pgbench.extra_vars()["pgbench_run_latency_limit"] == 0


# --- the reports: latency against throughput ------------------------------------------------

#: a sweep of the lab's captures: capture -> -R per host (stored out of rate order)
SWEEP = {
    "hdd7200-cluster-r100": 100,
    "hdd7200-cluster-r10": 10,
    "hdd7200-tablespace-r100": 100,
    "nvme-tablespace-r400": 400,
}
CLUSTER = "hdd7200 tpcb ext4 cluster s5 2cl c4 j2 T8"


@pytest.fixture
def sweep_db(tmp_path):
    db = tmp_path / "results.db"
    with Store.open(db) as store:
        for capture, rate in SWEEP.items():
            storing.record_run_dir(store, txlog_run(tmp_path, capture, rate=rate))
    return db


def _report(db: Path, monkeypatch, capsys, *args: str) -> list[str]:
    from collector.cli import main as cli  # noqa: PLC0415

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("TERM", raising=False)
    assert cli.main(["report", "--db", str(db), *args]) == 0
    return capsys.readouterr().out.splitlines()


def _latency_rows(lines: list[str], title: str) -> list[list[str]]:
    """The rows of the latency table titled ``title``: between its header's rule and
    its caption."""
    lines = [line.rstrip() for line in lines]
    at = lines.index(f"{title}: latency under load")
    assert lines[at + 1].split()[:2] == ["rate/s", "tps"], lines[at + 1]
    end = next(i for i in range(at + 3, len(lines)) if lines[i].startswith("rate/s: "))
    return [line.split() for line in lines[at + 3 : end]]


def test_terminal_latency_table_is_ordered_by_rate_and_fits_80_columns(
    sweep_db, monkeypatch, capsys
):
    lines = _report(sweep_db, monkeypatch, capsys)
    assert all(len(line.rstrip()) <= 80 for line in lines), max(lines, key=len)
    rows = _latency_rows(lines, CLUSTER)
    # one line per rate step, ordered by the total rate (stored 200 first, then 20)
    assert [r[0] for r in rows] == ["20", "200"], rows
    low, high = rows
    assert low[-1] == "yes" and " ".join(high[7:]) == "not sustained"
    # tps achieved, p50/p95/p99 ms: the runs' figures over the window
    assert float(low[1]) == pytest.approx(19.8, abs=0.2)
    assert float(high[4].replace(",", "")) > 1000 > float(low[4])
    assert high[5:7] == ["-", "0"]  # no -L: no late count; nothing skipped
    caption = " ".join(lines[lines.index(next(x for x in lines if x.startswith("rate/s: "))) :])
    assert "all 2 client hosts together (-R per host x 2, given per host)" in " ".join(
        caption.split()
    )
    said = " ".join(" ".join(lines).split())
    assert f"lag {CLUSTER} R100: rate not sustained: schedule lag grew" in said


def test_a_total_rate_is_said_so(tmp_path, monkeypatch, capsys):
    db = tmp_path / "results.db"
    with Store.open(db) as store:
        for capture, rate in (("hdd7200-cluster-r10", 10), ("hdd7200-cluster-r100", 100)):
            run_dir = txlog_run(tmp_path, capture, rate=rate, rate_per="total")
            storing.record_run_dir(store, run_dir)
    lines = _report(db, monkeypatch, capsys)
    said = " ".join(" ".join(lines).split())
    assert "(-R per host x 2, given total)" in said
    assert [r[0] for r in _latency_rows(lines, CLUSTER)] == ["20", "200"]


def test_latency_limit_steps_show_late_and_skipped(tmp_path, monkeypatch, capsys):
    db = tmp_path / "results.db"
    with Store.open(db) as store:
        for capture, rate in (("hdd7200-cluster-r10-L200", 10), ("hdd7200-cluster-r100-L50", 100)):
            limit = int(capture.rsplit("L", 1)[1])
            run_dir = txlog_run(tmp_path, capture, rate=rate, limit_ms=limit)
            storing.record_run_dir(store, run_dir)
    lines = _report(db, monkeypatch, capsys)
    (row,) = _latency_rows(lines, f"{CLUSTER} L50")
    window = None
    with Store.open(db) as store:
        sid = store.scenario("latency").id
        window = next(
            f.value
            for f in store.facts(sid)
            if f.key == "latency_window" and f.value["latency_limit_ms"] == 50
        )
    assert row[5:7] == [f"{window['late']:,}", f"{window['skipped']:,}"]
    assert int(row[6].replace(",", "")) > 500  # 45 % of the schedule skipped
    assert " ".join(row[7:]) == "not sustained"
    said = " ".join(" ".join(lines).split())
    assert "rate not sustained within the latency limit" in said


def test_csv_and_json_carry_the_rate_steps_and_the_series(sweep_db, tmp_path, monkeypatch, capsys):
    import csv  # noqa: PLC0415

    _report(sweep_db, monkeypatch, capsys, "--csv", str(tmp_path / "csv"), "--json",
            str(tmp_path / "r.json"))  # fmt: skip
    with (tmp_path / "csv" / "latency_steps.csv").open(encoding="utf-8") as fh:
        steps = list(csv.DictReader(fh))
    cluster = [s for s in steps if s["group"] == CLUSTER.removeprefix("hdd7200 ")]
    assert [s["rate_total"] for s in cluster] == ["20", "200"]
    assert [s["rate_sustained"] for s in cluster] == ["True", "False"]
    assert float(cluster[1]["p99_ms"]) > 1000
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    series = doc["latency_series"]
    assert {r["quantile"] for r in series if r["metric"] == latency.LATENCY_METRIC} == {
        "0.5", "0.95", "0.99", "1",
    }  # fmt: skip
    assert {r["client"] for r in series} == {"", "client1", "client2"}
    assert len(doc["latency_steps"]) == 4


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium is absent (make setup installs it)"
)
def test_latency_against_throughput_plot_renders_in_headless_chromium(sweep_db, tmp_path):
    """The report's latency-vs-throughput plot as Chromium draws it, offline: alone on a
    page it is not blank and its p50, p95 and p99 lines are drawn in their colours, with
    the ring of the step whose rate was not held; the whole report renders too."""
    from collector.report import (  # noqa: PLC0415
        charts,
        html,
        load,
    )
    from tests.unit.test_report import _screenshot  # noqa: PLC0415

    with Store.open(sweep_db) as store:
        view = load(store, "latency")
    plots = dict(charts.plot_latency_throughput(view))
    assert set(plots) == {
        CLUSTER, "hdd7200 tpcb ext4 tablespace s5 2cl c4 j2 T8", "nvme tpcb ext4 tablespace s5 2cl c4 j2 T6"
    }  # fmt: skip
    page = tmp_path / "plot.html"
    page.write_text(f"<!DOCTYPE html><html><body>{plots[CLUSTER]}</body></html>", encoding="utf-8")
    pixels = _screenshot(page, tmp_path / "plot.png", height=900)
    non_white = (pixels < 0.9).any(axis=-1).mean()
    assert non_white > 0.01, f"only {non_white:.1%} of the plot is not white"
    for name, (_, color) in (("p50", charts.LATENCY_LINES["0.5"]), ("p95", charts.LATENCY_LINES["0.95"]),
                             ("p99", charts.LATENCY_LINES["0.99"]), ("ring", (None, "#bb0000"))):  # fmt: skip
        rgb = np.array([int(color[i : i + 2], 16) for i in (1, 3, 5)]) / 255
        near = (np.abs(pixels - rgb) < 0.08).all(axis=-1).sum()
        assert near > 30, f"{near} pixels of the {name} colour {color}"
    report = html.publish([view], tmp_path / "report.html")
    text = report.read_text(encoding="utf-8")
    assert "Latency under load (rate steps)" in text and "latency per second" in text
    pixels = _screenshot(report, tmp_path / "report.png", height=5000)
    assert (pixels < 0.9).any(axis=-1).mean() > 0.02


def test_the_plan_says_the_rates_and_how_they_are_given(tmp_path):
    from collector import scenario as sc  # noqa: PLC0415

    path = _scenario(tmp_path, rate=[100, 300], rate_per="total", latency_limit=50)
    s = sc.load(path)
    text = sc.plan_text(s, _cells(path), hosts_by_count=True)
    assert "rate (pgbench -R, transactions/s): 100, 300 in all, split evenly over each" in text
    assert "latency limit (pgbench -L): 50 ms" in text
    assert "nvme-ext4-cluster-s5-h2-tpcb-r150" in text


def test_the_main_table_of_a_sweep_says_the_shared_test_once_and_fits_80_columns(
    sweep_db, monkeypatch, capsys
):
    """Rows of different tests (a rate each): the words they share are said once above
    the table, each row shows only what it adds, and no row takes more than two lines."""
    lines = [line.rstrip() for line in _report(sweep_db, monkeypatch, capsys)]
    assert "test: tpcb ext4 s5 2cl c4 j2 (and what each row adds)" in lines
    at = next(i for i, line in enumerate(lines) if line.startswith("drive "))
    end = next(i for i in range(at, len(lines)) if lines[i].startswith("mean and 95% CI"))
    body = lines[at + 2 : end]
    starts = [i for i, line in enumerate(body) if line.split()[0] in ("hdd7200", "nvme")]
    assert len(starts) == 4, body
    assert all(b - a <= 2 for a, b in zip(starts, [*starts[1:], len(body)], strict=True)), body
    assert body[starts[0]].split()[:5] == ["hdd7200", "cluster", "T8", "R10", "19.8"]
    assert sum("tpcb" in line for line in lines[at:end]) == 0
