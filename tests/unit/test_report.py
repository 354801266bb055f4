"""`drivelab report` on a realistic store: terminal table, HTML (rendered by headless
Chromium, offline), CSV and JSON; and the one-line errors for an empty or missing store."""

from __future__ import annotations

import copy
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from collector.cli import main as cli
from collector.report import charts, html, load, open_store
from collector.store import Store
from tests.conftest import DATA, build_store

BIN = Path(sys.executable).parent
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture
def wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


def test_terminal_table(results_db, capsys, wide):
    assert cli.main(["report", "--db", str(results_db)]) == 0
    out = capsys.readouterr().out
    hdd = next(line for line in out.splitlines() if line.startswith("hdd "))
    ssd = next(line for line in out.splitlines() if line.startswith("ssd "))
    assert "baseline" in hdd and hdd.endswith(" 2/3")
    assert ssd.split()[3:5] == ["30.44x", "28.3-32.7"]
    assert ssd.split()[1:3] == ["7,272.1", "523.7"] and "8,239.8" in ssd and "1.73" in ssd
    assert "test: tpcb s2 2cl" in out
    # the label's abbreviations, said once from what ran
    said = " ".join(out.split())
    assert "s2: scale 2 (each client host's own database), 2cl: 2 client hosts at once" in said
    assert said.count("2cl: ") == 1
    assert "hdd run 2: partial (client2: client 0 aborted" in " ".join(out.split())


def test_seed_shaped_report_fits_80_columns(tmp_path, monkeypatch, capsys):
    """The seeds' two-client result shape (four drive classes, one test, a partial run) in
    80 columns, as in a log or CI: every row one line (two at most), the numbers whole, the
    shared test printed once."""
    spec = {
        "workload": "tpcb", "filesystem": "ext4", "placement": "cluster", "scale": 34,
        "clients": 2,
        "params": {"clients_per_host": 4, "threads": 2, "duration": 15, "transactions": 0,
                   "rate": 0},
    }  # fmt: skip
    drives = (("hdd7200", 1 / 25), ("nvme", 1.3), ("ssd", 1.0), ("hdd10k", 1 / 16))
    db = tmp_path / "seed.db"
    build_store(db, scenario="seed-two-clients", drives=drives, spec=spec,
                partial=("hdd10k", 2)).close()  # fmt: skip
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("TERM", raising=False)
    assert cli.main(["report", "--db", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    test = "tpcb ext4 cluster s34 2cl c4 j2 T15"
    assert sum(line.count(test) for line in lines) == 1
    assert all(len(line.rstrip()) <= 80 for line in lines)
    header = next(i for i, line in enumerate(lines) if line.startswith("drive "))
    caption = next(i for i, line in enumerate(lines) if line.startswith("mean and 95% CI"))
    # between the header's rule and the caption: one line per drive, nothing wrapped
    rows = lines[header + 2 : caption]
    assert [row.split()[0] for row in rows] == ["hdd7200", "nvme", "ssd", "hdd10k"], rows
    for row in rows:
        fields = row.split()
        # drive, tps, CI, ratio (or 'baseline'), ratio CI (not for the baseline), sum, p95, runs
        assert len(fields) == (7 if "baseline" in row else 8), row
        assert re.fullmatch(r"\d+/\d+", fields[-1]), row
    nvme = rows[1].split()
    assert re.fullmatch(r"[\d,]+\.\d", nvme[1]) and re.fullmatch(r"[\d.]+x", nvme[3]), nvme
    assert rows[3].split()[-1] == "2/3"  # hdd10k: its third run partial, not averaged in
    assert any(line.lstrip().startswith("note hdd10k run 2: partial") for line in lines)


def test_report_figures_match_the_stats(results_db):
    with open_store(results_db) as store:
        view = load(store, "two-drives")
    hdd, ssd = view.cells
    assert hdd.is_baseline and view.baseline == "hdd"
    assert (hdd.stats.complete, hdd.stats.partial) == (2, 1)
    assert ssd.stats.tps.n == 3
    run = ssd.stats.runs[0]
    assert run.windowed and run.start_skew_s == pytest.approx(0.5)
    # the windowed sum trims the half second client2 ran alone and the ramp: below pgbench's
    assert run.tps_windowed < run.tps_reported_sum
    assert ssd.baseline_ratio.ratio == pytest.approx(ssd.stats.tps.mean / hdd.stats.tps.mean)


def test_baseline_option(results_db, capsys, wide):
    assert cli.main(["report", "two-drives", "--db", str(results_db), "--baseline", "ssd"]) == 0
    out = capsys.readouterr().out
    assert "0.03x" in next(line for line in out.splitlines() if line.startswith("hdd "))


def _drivelab(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", **(env_extra or {})}
    return subprocess.run(
        [str(BIN / "drivelab"), *args], capture_output=True, text=True, env=env, check=False
    )


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        (
            "missing",
            ["report"],
            "drivelab: no results store at {db}: run a scenario first, or give --db",
        ),
        ("empty", ["report"], "drivelab: results store {db} holds no scenarios yet: run one first"),
        (
            "store",
            ["report", "nosuch"],
            "drivelab: no scenario 'nosuch' in {db} (stored: two-drives)",
        ),
        (
            "store",
            ["report", "--baseline", "floppy"],
            "drivelab: baseline drive 'floppy' is not in scenario",
        ),
        (
            "store",
            ["compare", "hdd", "hdd"],
            "drivelab: compare: baseline and contender are both 'hdd'",
        ),
        (
            "store",
            ["compare", "hdd", "floppy"],
            "drivelab: 'hdd' and 'floppy' are neither two scenarios",
        ),
        ("missing", ["compare", "a", "b"], "drivelab: no results store at {db}"),
    ],
)
def test_store_errors_are_one_line(tmp_path, results_db, capsys, setup, args, message):  # noqa: PLR0917  (fixtures + params)
    db = {"missing": tmp_path / "none.db", "store": results_db}.get(setup)
    if setup == "empty":
        db = tmp_path / "empty.db"
        Store.open(db).close()
    assert cli.main([*args, "--db", str(db)]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(message.format(db=db))
    assert out == ""


def test_default_db_is_under_results_and_the_error_is_one_line(tmp_path):
    """The real console script: exit 2, one line, no traceback."""
    proc = _drivelab("report", env_extra={"DRIVELAB_RESULTS": str(tmp_path)})
    assert proc.returncode == 2
    assert proc.stderr == (
        f"drivelab: no results store at {tmp_path / 'drivelab.db'}: "
        "run a scenario first, or give --db\n"
    )
    assert proc.stdout == ""


def test_csv_and_json_export(results_db, tmp_path, capsys):
    assert (
        cli.main(
            [
                "report",
                "--db",
                str(results_db),
                "--csv",
                str(tmp_path / "csv"),
                "--json",
                str(tmp_path / "r.json"),
            ]
        )
        == 0
    )
    files = {p.name for p in (tmp_path / "csv").iterdir()}
    assert files == {
        "cells.csv",
        "runs.csv",
        "series.csv",
        "latency_histogram.csv",
        "latency_steps.csv",
        "latency_series.csv",
        "client_sweeps.csv",
        "telemetry.csv",
        "pretests.csv",
        "facts.csv",
    }
    with (tmp_path / "csv" / "cells.csv").open() as fh:
        cells = list(csv.DictReader(fh))
    assert [c["drive"] for c in cells] == ["hdd", "ssd"]
    assert float(cells[1]["ratio_to_baseline"]) == pytest.approx(30.44, abs=0.01)
    assert cells[0]["runs_partial"] == "1"
    with (tmp_path / "csv" / "runs.csv").open() as fh:
        runs = list(csv.DictReader(fh))
    assert [r["status"] for r in runs].count("partial") == 1 and len(runs) == 6
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["scenarios"] == ["two-drives"]
    assert len(doc["series"]) == 20  # one run per cell, 2 clients x 5 seconds
    assert {r["drive"] for r in doc["latency_histogram"]} == {"hdd", "ssd"}
    assert len(doc["telemetry"]) == 12
    assert any(r["metric"] == "drivelab_fio_iops" for r in doc["pretests"])
    assert doc["cells"] == [
        {k: (None if v == "" else v) for k, v in row.items()} for row in doc["cells"]
    ]


def test_html_is_self_contained(results_db, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert cli.main(["report", "--db", str(results_db), "--html", str(out)]) == 0
    text = out.read_text()
    assert text.count("<svg") >= 6  # tps bars, ratio bars, 2 series, latency, telemetry
    lowered = text.lower()
    for needle in ("<script", "<link", "<img", "<iframe", "@import", "url(http", "url(//", 'src="'):
        assert needle not in lowered, needle
    assert 'href="http' not in lowered.replace('xmlns:xlink="http', "")
    assert "tps per drive" in text and "Device telemetry" in text
    # ssd is 30x hdd: the tps axis is logarithmic, and every bar carries its figure
    assert "log scale" in text and "<!-- 7,272 -->" in text and "<!-- 239 -->" in text
    assert "tps as a multiple of hdd" in text and "<!-- 30.4x -->" in text
    assert "client2: client 0 aborted" in text


@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium is absent (make setup installs it)"
)
def test_html_renders_in_headless_chromium_offline(results_db, tmp_path):
    """Rendered by Chromium with every network path closed (a dead proxy, a resolver
    that finds nothing): the screenshot must show a real page, not a blank one."""
    with open_store(results_db) as store:
        view = load(store, "two-drives")
    page = html.publish([view], tmp_path / "report.html")
    pixels = _screenshot(page, tmp_path / "report.png", height=2000)
    non_white = (pixels < 0.9).any(axis=-1).mean()
    assert non_white > 0.02, f"only {non_white:.1%} of the screenshot is not white"
    assert pixels.std() > 0.05
    # coloured pixels: the bars and lines of the plots rendered
    r, g, b = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    assert ((abs(r - b) > 0.3) | (abs(g - b) > 0.3)).mean() > 0.001


@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium is absent (make setup installs it)"
)
def test_html_with_checkpoints_and_environments_renders_in_headless_chromium(tmp_path):
    """The evidence of a run on the page as Chromium draws it: every run of the store
    carries the lab's captured environment (ssd's with wal_sync_method open_datasync),
    ssd's plotted run a checkpoint inside its window. The page is not blank, the
    environment table says the difference, and the checkpoint's red marks are drawn."""
    page = html.publish([evidence_view(tmp_path)], tmp_path / "report.html")
    text = page.read_text(encoding="utf-8")
    assert "Environment per drive" in text
    row = re.search(r"<tr><td>PostgreSQL wal_sync_method</td>(.*?)</tr>", text)
    assert row, "no wal_sync_method row in the environment table"
    assert re.findall(r"<td>([^<]*)</td>", row.group(1)) == [
        "fdatasync", "open_datasync", "differs",
    ]  # fmt: skip
    pixels = _screenshot(page, tmp_path / "report.png", height=6000)
    non_white = (pixels < 0.9).any(axis=-1).mean()
    assert non_white > 0.02, f"only {non_white:.1%} of the screenshot is not white"
    # the checkpoint's dashed start line in its colour (#c0392b), as Chromium drew it
    red = np.array([0xC0, 0x39, 0x2B]) / 255
    near = (np.abs(pixels - red) < 0.08).all(axis=-1).sum()
    assert near > 20, f"{near} pixels of the checkpoint colour"


def evidence_view(tmp_path: Path):
    """The realistic store's scenario with the evidence of its runs: every run carries the
    lab's captured environment (ssd's with wal_sync_method open_datasync), ssd's runs a
    checkpoint one second into their window."""
    env = json.loads((DATA / "environment" / "lab-nvme.json").read_text(encoding="utf-8"))
    with build_store(tmp_path / "drivelab.db") as store:
        sid = store.scenario("two-drives").id
        for cid, spec in store.cells(sid):
            e = copy.deepcopy(env)
            e["postgresql"]["settings"]["wal_sync_method"] = {
                "setting": "open_datasync" if spec.drive == "ssd" else "fdatasync",
                "unit": None, "source": "configuration file", "pending_restart": False,
            }  # fmt: skip
            for run in store.runs(cid):
                store.add_facts(sid, {"environment": e}, "run", run_id=run.id)
                if spec.drive == "ssd":
                    t0 = min(p.start for p in store.series(run.id))
                    event = {"start": t0 + 1.0, "end": t0 + 3.5, "reason": "wal",
                             "in_window": "started and ended"}  # fmt: skip
                    store.add_facts(sid, {"checkpoint_in_window": True, "checkpoints": [event]},
                                    "run", run_id=run.id)  # fmt: skip
        return load(store, "two-drives")


def _screenshot(page: Path, shot: Path, *, height: int):
    """``page`` as headless Chromium draws it offline, 1280 x ``height``, as RGB floats."""
    profile = tempfile.mkdtemp(prefix="drivelab-chromium-")
    try:
        proc = subprocess.run(
            [
                str(CHROMIUM),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--proxy-server=http://127.0.0.1:9",
                "--host-resolver-rules=MAP * ~NOTFOUND",
                f"--user-data-dir={profile}",
                f"--screenshot={shot}",
                f"--window-size=1280,{height}",
                page.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "HOME": profile},
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shot.exists() and shot.stat().st_size > 10_000
    from matplotlib.image import imread  # noqa: PLC0415

    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (height, 1280)
    return pixels


def test_run_warnings_and_cache_phrase_from_run_facts():
    """What the report says of a run from its facts (as drivelab run stores them after
    the lab's telemetry test: scale 20 on a 256 MiB DB host)."""
    from collector.report import fmt_cache, run_warnings  # noqa: PLC0415

    defeated = {"verdict": "cache defeated", "reason": "the drive read 100%", "hit_ratio":
                0.943357763681737, "drive_share": 1.00454778956275}  # fmt: skip
    assert fmt_cache(defeated) == "hit 94.3%, drive 100%: cache defeated"
    assert run_warnings(0, {"cache": defeated}) == []
    fits = {**defeated, "verdict": "cache not defeated", "reason": "the datasets fit"}
    assert run_warnings(3, {"cache": fits, "client_bound": ["client1", "client2"]}) == [
        "run 3: cache not defeated: the datasets fit",
        "run 3: client-bound: this run measured the client, not the drive"
        " (client1, client2 above 90% CPU)",
    ]
    assert fmt_cache(None) == "-"
    assert fmt_cache({"verdict": "unknown", "hit_ratio": None}) == "hit -, drive -: unknown"
    # the VM lab's DB host under TCG: its figures are the emulation's; under kvm, none
    vm = {"hosts": "vm", "cgroup": "none", "accel": "tcg"}
    assert run_warnings(1, {"cache": defeated, "lab": vm}) == [
        "emulated CPU: the DB host was a qemu VM without hardware acceleration (TCG);"
        " these tps measure the emulation, not the drive"
    ]
    assert run_warnings(1, {"lab": {**vm, "accel": "kvm"}}) == []


def test_a_checkpoint_in_the_window_is_said_per_drive_and_marked_on_the_plot(tmp_path):
    """Run facts as gather stores them (collector.gather.serverstats): ssd's first run had a
    checkpoint inside its window, its second none; hdd's runs carry no such facts."""
    from collector.report import findings  # noqa: PLC0415

    with build_store(tmp_path / "drivelab.db") as store:
        sid = store.scenario("two-drives").id
        cid = next(c for c, spec in store.cells(sid) if spec.drive == "ssd")
        runs = {r.repetition: r.id for r in store.runs(cid)}
        t0 = min(p.start for p in store.series(runs[0]))
        event = {"start": t0 + 1.0, "end": t0 + 3.5, "reason": "wal",
                 "in_window": "started and ended"}  # fmt: skip
        store.add_facts(sid, {"checkpoint_in_window": True, "checkpoints": [event]}, "run",
                        run_id=runs[0])  # fmt: skip
        store.add_facts(sid, {"checkpoint_in_window": False, "checkpoints": []}, "run",
                        run_id=runs[1])  # fmt: skip
        view = load(store, "two-drives")
    assert findings.checkpoint_lines(view) == [
        "ssd: a checkpoint (wal) started or ended while all clients ran in run 0 (1 of 2 runs):"
        " its writes competed with the clients' for the drive"
    ]
    ssd = next(cv for cv in view.cells if cv.drive == "ssd")
    assert charts.checkpoint_spans(view, ssd) == [(t0 + 1.0, t0 + 3.5, "wal")]
    plots = {name.split()[0]: svg for name, svg in charts.plot_series(view)}
    assert charts.CHECKPOINT_COLOR in plots["ssd"] and charts.CHECKPOINT_COLOR not in plots["hdd"]
    page = html.render([view])
    assert "checkpoint: ssd: a checkpoint (wal) started or ended" in page


def test_log_axes_are_labelled_in_plain_numbers():
    """A log axis spanning less than a decade (the ratio plot's 0.5x to 2.5x) keeps
    matplotlib's choice of labelled ticks, each a plain number, not TeX's 6x10^-1."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure()
    ax = fig.subplots()
    ax.plot([1, 2], [0.55, 2.4])
    charts._log(ax, "y")
    ax.set_ylim(0.5, 2.5)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels(minor=True) + ax.get_yticklabels()]
    labels = [t for t in labels if t]
    assert {"0.6", "1", "2"} <= set(labels), labels
    assert not any("$" in t or "e" in t for t in labels), labels
    ax.set_ylim(1, 2e6)  # decades: the major ticks only, with thousands separators
    fig.canvas.draw()
    majors = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert {"10,000", "1,000,000"} <= set(majors), majors
    assert not any("$" in t or "e" in t for t in majors), majors


def _page_without_dates(text: str) -> str:
    text = re.sub(r"generated [0-9-]+ [0-9:]+ UTC", "", text)
    return re.sub(r"<dc:date>[^<]*</dc:date>", "", text)


def _drawn_here_alone(monkeypatch) -> None:
    monkeypatch.setattr(charts, "_draw_all", lambda figs: [charts._draw(f) for f in figs])


def test_figures_drawn_in_two_processes_make_the_same_page(results_db, monkeypatch):
    """render() draws every other figure in a forked copy: the page is the one drawn by
    this process alone, figure for figure, in its order (matplotlib's SVG ids are salted
    by a fixed string, so the same figure gives the same SVG in either process)."""
    with open_store(results_db) as store:
        view = load(store, "two-drives")
    two = html.render([view])
    assert "\0" not in two and two.count("<svg") >= 6
    _drawn_here_alone(monkeypatch)
    assert _page_without_dates(two) == _page_without_dates(html.render([view]))


@pytest.mark.parametrize("how", ["fails", "hangs"])
def test_a_copy_that_fails_or_hangs_has_its_figures_drawn_here(results_db, monkeypatch, how):
    """The forked copy fails on its first figure, or draws nothing for longer than the
    timeout: it is ended, reaped, and its figures are drawn by the report itself."""
    import time  # noqa: PLC0415

    with open_store(results_db) as store:
        view = load(store, "two-drives")
    parent = os.getpid()
    draw = charts._draw

    def draw_or_not(fig):
        if os.getpid() != parent:  # in the copy
            if how == "fails":
                raise RuntimeError("a figure the copy cannot draw")
            time.sleep(30)
        return draw(fig)

    forked = []
    fork = os.fork

    def fork_and_tell() -> int:
        pid = fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(charts, "_draw", draw_or_not)
    monkeypatch.setattr(charts, "DRAW_TIMEOUT_S", 1.0)
    monkeypatch.setattr(os, "fork", fork_and_tell)
    page = html.render([view])
    assert len(forked) == 1
    with pytest.raises(ChildProcessError):  # reaped: not even a zombie left
        os.waitpid(forked[0], os.WNOHANG)
    monkeypatch.setattr(charts, "_draw", draw)
    _drawn_here_alone(monkeypatch)
    assert _page_without_dates(page) == _page_without_dates(html.render([view]))
