"""Raw pre-tests through `drivelab run` on the real lab: fio and pg_test_fsync on the
mounted nvme, hdd7200 and hdd7200wc drives before their databases, stored beside the
pgbench runs and shown in the same report; the test files are gone afterwards. The
same run shows the flush-honesty check on real measurements: hdd7200wc (7200 rpm in
the inventory, RAM in fact) is flagged as absorbing flushes, the honest hdd7200 is not."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from collector.report import PRETEST_PREFIXES, fiomatrix, html, load
from collector.store import Store
from collector.verdicts import physics
from collector.verdicts.pretest import summarize
from tests.lab.conftest import BIN, REPO, drivelab

pytestmark = pytest.mark.lab

SCENARIO = """\
    ---
    name: pretest-test
    baseline: hdd7200
    drives: [nvme, hdd7200, hdd7200wc]
    workload: {scale: [2], clients_per_host: 1, threads: 1, duration: 5}
    hosts: [1]
    repetitions: 1
    pretests:
      fio: {block_sizes: [4k, 64k], iodepths: [1, 8]}
      pg_test_fsync: true
      runtime: 1
      ramp: 0
      fsync_seconds: 1
"""


@pytest.fixture(scope="module")
def pretest_run(lab2, tmp_path_factory):
    """One `drivelab run` of SCENARIO: its output and its results folder."""
    tmp_path = tmp_path_factory.mktemp("pretests")
    scenario = tmp_path / "pretest-test.yml"
    scenario.write_text(textwrap.dedent(SCENARIO))
    env = dict(os.environ, DRIVELAB_RESULTS=str(tmp_path / "results"), COLUMNS="220")
    proc = subprocess.run(
        [str(BIN / "drivelab"), "run", "--no-check", str(scenario), "--no-telemetry", "--no-live"], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc, tmp_path / "results"


def test_pretests_are_measured_stored_and_reported(pretest_run):
    proc, results = pretest_run
    assert "raw drive pre-tests" in proc.stdout
    with Store.open(results / "drivelab.db", create=False) as store:
        sid = store.scenario("pretest-test").id
        samples = [s for p in PRETEST_PREFIXES for s in store.samples(sid, metric_prefix=p)]
        runs = store.conn.execute("SELECT status FROM runs").fetchall()
    assert sorted(runs) == [("complete",)] * 3
    by = {p.drive: p for p in summarize(samples)}
    hdd, nvme = by["hdd7200"], by["nvme"]
    # loop devices: the write cache is not drivelab's to change, tested as it is
    assert hdd.write_cache == nvme.write_cache == "unchangeable"
    # the emulated 7200 rpm class: 120 IOPS at queue depth 1, several ms per access
    assert 100 <= hdd.rand_read_qd1 <= 135, hdd
    assert hdd.latency_mean_s > 0.005
    assert nvme.rand_read_qd1 >= 20 * hdd.rand_read_qd1, (nvme, hdd)
    assert nvme.fsync_per_s >= 10 * hdd.fsync_per_s, (nvme, hdd)
    # outputs kept beside the runs; test files removed from the drives
    kept = sorted(p.name for p in (results / "runs" / "pretest-test").glob("*/pretests/*"))
    assert kept == [
        "fio-hdd7200-wcache-unchangeable.json",
        "fio-hdd7200wc-wcache-unchangeable.json",
        "fio-nvme-wcache-unchangeable.json",
        "pg_test_fsync-hdd7200-wcache-unchangeable.txt",
        "pg_test_fsync-hdd7200wc-wcache-unchangeable.txt",
        "pg_test_fsync-nvme-wcache-unchangeable.txt",
    ]
    assert not list(Path("/srv/drivelab").glob("*/drivelab-pretest.fio"))
    assert not list(Path("/srv/drivelab").glob("*/drivelab-pg_test_fsync.out"))


def test_rotating_but_fast_drive_is_flagged_and_the_honest_one_is_not(pretest_run):
    """pg_test_fsync on both 7200 rpm drives (the inventory's rpm: 7200; loop devices
    have no SMART): the honest one flushes under its 120/s ceiling, the one whose
    "cache" is RAM far above it, and the store and the report say so."""
    proc, results = pretest_run
    with Store.open(results / "drivelab.db", create=False) as store:
        sid = store.scenario("pretest-test").id
        facts = [f for f in store.facts(sid) if f.key == "physics"]
        fsync = {
            p.drive: p.fsync_per_s
            for p in summarize(store.samples(sid, metric_prefix="drivelab_fsync_"))
        }
    pre = [physics.Flag.from_fact(v) for f in facts if f.scope == "pretest" for v in f.value]
    flags = {(f.drive, f.code): f for f in pre}
    print(f"pg_test_fsync fdatasync/s: {fsync}; flags: {sorted(flags)}")
    fast = flags[("hdd7200wc", physics.FLUSH_ABSORBED)]
    assert fast.level == physics.WARNING
    assert fast.figures["rpm"] == 7200 and fast.figures["rpm_source"] == "inventory"
    assert fast.figures["ceiling_per_s"] == 120
    assert fast.figures["rate_per_s"] > 1.25 * 120 and fsync["hdd7200wc"] > 1.25 * 120
    # the honest class: capped at 120 IOPS, a flush costs it two of them
    assert fsync["hdd7200"] <= 120
    assert not [f for f in pre if f.drive == "hdd7200"], pre
    # nvme (rpm 0 in the lab's inventory) is solid state, and nothing states its protection
    assert flags[("nvme", physics.PLP_UNKNOWN)].level == physics.NOTE
    # the report says it in words, per drive; the honest drive gets no flush line
    lines = [line.strip() for line in proc.stdout.splitlines()]
    assert any(
        line.startswith("flush hdd7200wc:")
        and "a volatile write cache is absorbing flushes" in line
        for line in lines
    ), proc.stdout[-3000:]
    assert not [line for line in lines if line.startswith("flush hdd7200:")]
    # what a drive is (a note, not a flag on a figure): counted in the run's report, said
    # with report -v
    assert any(line.startswith("physics ") and " notes (" in line for line in lines), lines
    verbose = drivelab("report", "-v", "pretest-test", "--db", str(results / "drivelab.db"))
    lines = [line.strip() for line in verbose.stdout.splitlines()]
    assert any(line.startswith("plp nvme: power-loss protection: unknown") for line in lines)


def test_a_fio_matrix_is_stored_per_job_and_drawn(pretest_run, tmp_path):
    """The 2x2 matrix (4 KiB and 64 KiB random reads at queue depth 1 and 8) on each
    drive: four jobs stored per drive with their axes, after the default ones; on nvme
    the deeper queue gives more IOPS; the HTML page's matrix plots are drawn, not blank,
    as headless Chromium lays the page out."""
    from tests.unit.test_html_page import _layout  # noqa: PLC0415
    from tests.unit.test_report import _screenshot  # noqa: PLC0415

    _, results = pretest_run
    with Store.open(results / "drivelab.db", create=False) as store:
        view = load(store, "pretest-test")
    found = fiomatrix.jobs(view)
    by = {(j.drive, j.block_bytes, j.iodepth): j for j in found}
    assert sorted(by) == sorted(
        (d, b, q) for d in ("nvme", "hdd7200", "hdd7200wc") for b in (4096, 65536) for q in (1, 8)
    ), sorted(by)
    assert all(j.pattern == "randread" and j.sync == "direct" and j.iops > 0 for j in found)
    assert by["nvme", 4096, 8].iops > by["nvme", 4096, 1].iops, by
    assert by["nvme", 4096, 1].iops > 10 * by["hdd7200", 4096, 1].iops, by
    page = html.publish([view], tmp_path / "report.html")
    text = page.read_text(encoding="utf-8")
    assert text.count(": fio matrix -->") == 3, "a plot per drive (its title, as SVG keeps it)"
    laid = _layout(page, tmp_path, (1280, 800))
    tops = dict(laid["sections"])
    title = "fio matrix (raw drive, each job after the other)"
    height = min(int(laid["height"]) + 1, 16_000)
    pixels = _screenshot(page, tmp_path / "page.png", height=height)
    later = [t for t in sorted(tops.values()) if t > tops[title]] + [height]
    part = pixels[int(tops[title]) : int(later[0])]
    r, g, b = part[..., 0], part[..., 1], part[..., 2]
    coloured = ((abs(r - b) > 0.3) | (abs(g - b) > 0.3)).mean()
    assert coloured > 0.001, f"the matrix plots: {coloured:.3%} of the section in colour"
    for drive in ("nvme", "hdd7200"):
        j1, j8 = by[drive, 4096, 1], by[drive, 4096, 8]
        print(f"{drive}: 4k randread qd1 {j1.iops:,.0f} IOPS p99 {j1.p99_s}, qd8 {j8.iops:,.0f}")
