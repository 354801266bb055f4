"""``drivelab watch``: the live table read back from a running exporter, and one line
with exit status 1 when nothing serves live metrics at the URL."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from collector.cli import main as cli
from collector.cli import watchcmd
from collector.live import LiveState, MetricsExporter, RunLabels, Status
from tests.conftest import DATA

BIN = Path(sys.executable).parent
RUN9 = DATA / "pgbench" / "pgbench_run9_progress_timestamp.stderr"
LABELS = RunLabels("two-client", "nvme-ext4-tablespace-s20-c2-tpcb", 3, "nvme")


@pytest.fixture
def states() -> dict[str, LiveState]:
    # the real clock: the watch subprocess judges "quiet" by its own
    s = {n: LiveState(n, planned_s=300) for n in ("client1", "client2", "client3")}
    s["client1"].mark_connected()
    s["client1"].feed(RUN9.read_text())
    s["client2"].mark_connected()
    s["client2"].feed_line("progress: 1795234735.500 s, 4048.6 tps, lat 0.977 ms stddev 0.403")
    s["client3"].mark_lost("connection to root@10.213.0.13:22 closed before pgbench ended")
    return s


@pytest.fixture
def exporter(states):
    exp = MetricsExporter(lambda: [(LABELS, s.snapshot()) for s in states.values()], port=0)
    with exp:
        yield exp


def _drivelab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "drivelab"), *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "120"},
        timeout=30,
        check=False,
    )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends


def test_watch_once_prints_one_row_per_client(exporter):
    proc = _drivelab("watch", "--once", "--url", exporter.url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[0].strip() == "two-client / nvme-ext4-tablespace-s20-c2-tpcb / rep 3 / nvme"
    body = [[c.strip() for c in line.split("│")[1:-1]] for line in lines if line.startswith("│")]
    assert body == [
        ["client1", "running", "36,177.1", "34,108.2", "0.054", "0:02 / 4:58"],
        ["client2", "running", "4,048.6", "4,048.6", "0.977", "0:01 / 4:59"],
        ["client3", "stream lost", "-", "-", "-", "- / 5:00"],
    ]
    assert "all clients: 40,225.7 tps now, 38,156.8 tps so far" in proc.stdout


def test_watch_sees_the_values_change_between_polls(exporter, states, capsys):
    assert cli.main(["watch", "--once", "--url", exporter.url]) == 0
    assert "36,177.1" in capsys.readouterr().out
    states["client1"].feed_line("progress: 1795234737.260 s, 100.5 tps, lat 9.000 ms stddev 1")
    states["client1"].mark_ended(0)
    assert cli.main(["watch", "--once", "--url", exporter.url]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "client1" in line)
    assert [c.strip() for c in row.split("│")[1:-1]] == [
        "client1",
        "done",
        "100.5",
        "22,772.3",
        "9.000",
        "0:03 / 0:00",
    ]


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("http://127.0.0.1:{port}/metrics", id="closed-port"),
        pytest.param("http://127.0.0.1:{port}", id="no-path"),
    ],
)
def test_watch_with_nothing_listening_is_one_line_and_exit_1(url):
    url = url.format(port=_closed_port())
    proc = _drivelab("watch", "--once", "--url", url)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"drivelab: no drivelab run is serving live metrics at {url}: connection refused"
    ]


class _NotDrivelab(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = {
            "/metrics": b"# TYPE other_metric gauge\nother_metric 1.0\n",
            "/garbage": b"this is { not prometheus\n",
        }.get(self.path)
        self.send_response(200 if body else 404)
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args):
        pass


@pytest.fixture
def other_server():
    server = http.server.HTTPServer(("127.0.0.1", 0), _NotDrivelab)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/metrics", "it answers, but with no drivelab_client metrics"),
        ("/nothing", "HTTP 404"),
        ("/garbage", "not Prometheus metrics"),
    ],
)
def test_watch_against_something_else_is_one_line(other_server, capsys, path, why):
    url = other_server + path
    assert cli.main(["watch", "--once", "--url", url]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(
        f"drivelab: no drivelab run is serving live metrics at {url}: {why}"
    )
    assert len(captured.err.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--interval", "0"], "argument --interval: '0' is not a number of seconds"),
        (["--interval", "soon"], "argument --interval: 'soon' is not a number of seconds"),
        (["--url", "ftp://x/metrics"], "watch: --url 'ftp://x/metrics' is not an http:// URL"),
    ],
)
def test_bad_watch_arguments_are_one_line_exit_2(capsys, args, expected):
    assert cli.main(["watch", "--once", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert expected in err


def test_parse_metrics_gives_back_what_the_exporter_served(exporter, states):
    served = watchcmd.parse_metrics(watchcmd.fetch(exporter.url), exporter.url)
    assert [labels for labels, _ in served] == [
        RunLabels("two-client", "nvme-ext4-tablespace-s20-c2-tpcb", "3", "nvme")
    ] * 3
    for (_, row), state in zip(served, states.values(), strict=True):
        expected = state.snapshot()
        # reasons are not exported (free text makes poor labels); the rest round-trips
        assert row == type(expected)(**{**expected.__dict__, "reason": None})
    assert served[2][1].status is Status.LOST


def test_watch_loop_ends_when_a_finished_run_stops_serving(exporter, states):
    """In a terminal, watch polls until the exporter goes away; if every client had
    ended by then, that is the end of the run, not an error."""
    for s in states.values():
        s.mark_ended(0)
    console = Console(file=StringIO(), force_terminal=True, width=120, color_system=None)
    polls = []

    def stop_after_first_poll(seconds):
        polls.append(seconds)
        exporter.stop()

    original = watchcmd.time.sleep
    watchcmd.time.sleep = stop_after_first_poll
    try:
        assert watchcmd.watch(exporter.url, 0.5, console) == 0
    finally:
        watchcmd.time.sleep = original
    assert polls == [0.5]
    assert "the run is over: its live metrics are gone" in console.file.getvalue()
