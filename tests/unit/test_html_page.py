"""The HTML report as a reader meets it, drawn by headless Chromium offline: a page of
every section (the realistic store with each kind of evidence a run stores: the
environment, checkpoints in the window, device telemetry, checkpoint and WAL counters),
its ids unique and every link landing, its first screen holding the verdict and the
table, each of its sections drawn (not blank) where Chromium lays it out."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from collector.records import Sample
from collector.report import html, load
from collector.store import Store
from tests.unit.test_report import CHROMIUM, _screenshot, evidence_view

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium is absent (make setup installs it)"
)

#: the first screen of a laptop: what a reader sees before scrolling
FIRST_SCREEN = (1280, 800)

#: headings of the sections each kind of evidence adds, and whether they hold a plot
SECTIONS = {
    "Runs": False,
    "tps per second per client": True,
    "Latency distribution": True,
    "Latency percentiles (complete runs' logs)": False,
    "Checkpoints, buffers and WAL (mean per run)": False,
    "Drives under load (iostat over the runs' windows)": False,
    "Device telemetry": True,
    "Environment per drive (what the figures came from)": False,
}


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("page")
    evidence_view(tmp)  # the store with environments and checkpoints, kept at tmp
    with Store.open(tmp / "drivelab.db", create=False) as store:
        sid = store.scenario("two-drives").id
        view = load(store, "two-drives")
        for n, cv in enumerate(view.cells):
            kname = f"loop{n}"
            store.add_facts(sid, {cv.drive: {"drives": [{"kname": kname}]}}, scope="device",
                            host="db")  # fmt: skip
            samples = []
            for r in cv.stats.runs:
                if r.run_id is None or not r.window:
                    continue
                lo, hi = r.window
                store.add_facts(sid, {
                    "pg_checkpoints": {"timed": 0, "requested": 1, "buffers_checkpoint": 800,
                                       "buffers_clean": 0, "buffers_backend": 10,
                                       "backend_fsyncs": 0},
                    "pg_wal": {"records": 1000, "fpi": 100, "bytes": 4e6},
                }, scope="run", run_id=r.run_id)  # fmt: skip
                for t in range(int(lo), int(hi)):
                    samples += [
                        Sample("drivelab_device_write_iops", 100.0 * (n + 1) + t % 7,
                               "operations/second", {"device": kname}, float(t)),
                        Sample("drivelab_device_util_ratio", 0.3 + 0.1 * n, "ratio",
                               {"device": kname}, float(t)),
                    ]  # fmt: skip
            store.add_samples(samples, scenario_id=sid)
        view = load(store, "two-drives")
    return html.publish([view], tmp / "report.html")


def test_ids_are_unique_and_every_link_lands(page):
    text = page.read_text(encoding="utf-8")
    ids: list[str] = []
    refs: list[str] = []

    class Ids(HTMLParser):
        def handle_starttag(self, tag, attrs):
            for name, value in attrs:
                if name == "id" and value is not None:
                    ids.append(value)
                elif name in ("href", "xlink:href") and value and value.startswith("#"):
                    refs.append(value[1:])

    Ids().feed(text)
    refs += re.findall(r"url\(#([^)]+)\)", text)  # SVG clip paths and markers
    dup = sorted({i for i in ids if ids.count(i) > 1})
    assert not dup, f"{len(dup)} ids used twice, e.g. {dup[:5]}"
    assert refs and not sorted(set(refs) - set(ids)), "links to ids that are not on the page"


def test_the_first_screen_holds_the_verdict_and_the_table(page, tmp_path):
    laid = _layout(page, tmp_path, FIRST_SCREEN)
    verdict_top, verdict_bottom = laid["verdict"]
    table_top, table_bottom = laid["table"]
    assert verdict_bottom <= FIRST_SCREEN[1], laid
    assert verdict_top < table_top and table_bottom <= FIRST_SCREEN[1], laid
    # and as Chromium draws that screen: text there, not a blank top of a page
    pixels = _screenshot(page, tmp_path / "first.png", height=FIRST_SCREEN[1])
    table = pixels[int(table_top) : int(table_bottom)]
    assert (table < 0.5).any(axis=-1).mean() > 0.01


def test_every_section_is_drawn(page, tmp_path):
    laid = _layout(page, tmp_path, FIRST_SCREEN)
    tops = dict(laid["sections"])
    assert set(SECTIONS) <= set(tops), sorted(tops)
    height = min(int(laid["height"]) + 1, 16_000)
    pixels = _screenshot(page, tmp_path / "page.png", height=height)
    order = [*sorted(tops.values()), height]
    for title, plotted in SECTIONS.items():
        top = tops[title]
        bottom = next(t for t in order if t > top)
        part = pixels[int(top) : int(bottom)]
        ink = (part < 0.6).any(axis=-1).mean()
        assert ink > 0.01, f"{title}: {ink:.2%} of its {int(bottom - top)} px drawn"
        if plotted:
            r, g, b = part[..., 0], part[..., 1], part[..., 2]
            coloured = ((abs(r - b) > 0.3) | (abs(g - b) > 0.3)).mean()
            assert coloured > 0.001, f"{title}: no coloured line or bar ({coloured:.3%})"


_PROBE = """<script>addEventListener('load', () => {
  const box = (e) => { const r = e.getBoundingClientRect(); return [r.top, r.bottom]; };
  const out = {verdict: box(document.querySelector('.verdict')),
               table: box(document.querySelector('table')),
               sections: [...document.querySelectorAll('h3')].map(
                 (h) => [h.textContent, h.getBoundingClientRect().top]),
               height: document.documentElement.scrollHeight};
  const pre = document.createElement('pre'); pre.id = 'laid';
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});</script>"""


def _layout(page: Path, tmp_path: Path, size: tuple[int, int]) -> dict:
    """Where Chromium lays the page's parts out in a ``size`` window: a copy of the page
    with a probe that writes the boxes into the DOM Chromium dumps (the report itself
    carries no script)."""
    copy = tmp_path / "probed.html"
    copy.write_text(page.read_text(encoding="utf-8").replace("</body>", _PROBE + "</body>"))
    profile = tempfile.mkdtemp(prefix="drivelab-chromium-")
    try:
        proc = subprocess.run(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--disable-background-networking",
             "--proxy-server=http://127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
             f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}",
             "--virtual-time-budget=5000", "--dump-dom", copy.as_uri()],
            capture_output=True, text=True, timeout=120, check=False,
            env={"HOME": profile, "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    found = re.search(r'<pre id="laid">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stderr[-2000:]
    return json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<"))
