"""The live view (collector/live/): LiveState fed real pgbench stderr, the known_hosts
policy, the exporter over real HTTP, the table, LiveSession's clean-up, and the Fabric
follower against a real sshd on 127.0.0.1 (marked ``sshd``)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from io import StringIO
from pathlib import Path

import paramiko
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from collector import build
from collector.errors import DrivelabError
from collector.live import (
    ClientRow,
    ClientTarget,
    Follower,
    KnownHostsPolicy,
    LiveSession,
    LiveState,
    MetricsExporter,
    RunLabels,
    Status,
    remote_run_dir,
    render_table,
)
from collector.parse import pgbench
from tests.conftest import DATA

PG = DATA / "pgbench"
RUN9 = PG / "pgbench_run9_progress_timestamp.stderr"  # --progress-timestamp, epoch t
LABELS = RunLabels("two-client", "nvme-ext4-tablespace-s20-c2-tpcb", 0, "nvme")


class FakeClock:
    def __init__(self, now: float = 1_795_234_800.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def wait_for(predicate, timeout: float = 5.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


# --- LiveState ---------------------------------------------------------------------


def test_state_follows_the_real_progress_timestamp_lines_one_by_one():
    clock = FakeClock()
    state = LiveState("client1", planned_s=60, clock=clock)
    before = state.snapshot()
    assert before.status is Status.WAITING
    assert (before.tps_now, before.tps_average, before.latency_s, before.elapsed_s) == (None,) * 4
    assert before.remaining_s == 60

    vacuum, first, second = RUN9.read_text().splitlines()
    state.feed_line(vacuum)  # "starting vacuum...end." is not progress
    assert state.snapshot().status is Status.WAITING

    clock.now += 1
    state.feed_line(first)  # 1795234735.260 s, 32039.4 tps, lat 0.061 ms
    row = state.snapshot()
    assert row.status is Status.RUNNING
    assert row.tps_now == 32039.4
    assert row.tps_average == pytest.approx(32039.4)  # one interval so far
    assert row.latency_s == pytest.approx(0.061e-3)  # seconds, not ms
    assert row.elapsed_s == pytest.approx(1.0)
    assert row.remaining_s == pytest.approx(59.0)
    assert row.updated_at == clock.now

    clock.now += 1
    state.feed_line(second + "\r\n")  # 1795234736.260 s, 36177.1 tps, lat 0.054 ms
    row = state.snapshot()
    assert row.tps_now == 36177.1
    assert row.tps_average == pytest.approx((32039.4 + 36177.1) / 2)
    assert row.latency_s == pytest.approx(0.054e-3)
    assert row.elapsed_s == pytest.approx(2.0)
    assert row.remaining_s == pytest.approx(58.0)
    assert row.up is False  # fed by hand: no stream

    state.mark_ended(0)
    row = state.snapshot()
    assert (row.status, row.reason, row.remaining_s) == (Status.DONE, None, 0.0)
    assert row.tps_average == pytest.approx(34108.25)  # the figures stay


@pytest.mark.parametrize(
    "name",
    [
        "pgbench_run1_log",
        "pgbench_run2_agg",
        "pgbench_run3_rate_log",  # lag, skipped, retried parts
        "pgbench_run5_agg_all",
        "pgbench_run9_progress_timestamp",
        "pgbench_fail_aborted_clients",  # error lines between progress lines
    ],
)
def test_tps_so_far_from_progress_lines_agrees_with_pgbench_report(name):
    """After the last progress line, tps so far is what pgbench itself reported at the
    end (to 0.5 %: the report also counts the last partial interval)."""
    state = LiveState("client1", planned_s=5)
    state.feed((PG / f"{name}.stderr").read_text())
    report = pgbench.parse_report((PG / f"{name}.stdout").read_text(), name)
    row = state.snapshot()
    assert row.status is Status.RUNNING
    assert row.tps_average == pytest.approx(report.tps, rel=0.005)
    last = pgbench.parse_progress((PG / f"{name}.stderr").read_text())[-1]
    assert (row.tps_now, row.latency_s) == (last.tps, last.latency_avg_s)


def test_aborted_run_is_failed_with_pgbench_first_error():
    state = LiveState("client2", planned_s=6)
    state.feed((PG / "pgbench_fail_aborted_clients.stderr").read_text())
    state.mark_ended(pgbench.parse_rc((PG / "pgbench_fail_aborted_clients.rc").read_text()))
    row = state.snapshot()
    assert row.status is Status.FAILED
    assert row.reason == (
        "pgbench exited 2: client 0 aborted in command 5 (SQL) of script 0; "
        "perhaps the backend died while processing"
    )
    assert row.tps_now == 2642.3


def test_lost_keeps_figures_and_is_final():
    state = LiveState("client1", planned_s=60)
    state.mark_connected()
    assert state.snapshot().up is True
    state.feed(RUN9.read_text())
    state.mark_lost("connection to root@10.213.0.11:22 closed before pgbench ended")
    state.mark_ended(0)  # too late: the stream was already lost
    state.mark_started()
    row = state.snapshot()
    assert row.status is Status.LOST
    assert row.reason == "connection to root@10.213.0.11:22 closed before pgbench ended"
    assert (row.tps_now, row.up) == (36177.1, False)


def test_replayed_and_malformed_lines_do_not_count():
    state = LiveState("client1")
    text = RUN9.read_text()
    state.feed(text)
    state.feed(text)  # the same lines again (a re-read): counted once
    state.feed_line("progress: 1795234737.260 s, lots of tps")  # cut short
    row = state.snapshot()
    assert row.tps_average == pytest.approx(34108.25)
    assert row.elapsed_s == pytest.approx(2.0)
    assert row.remaining_s is None  # -t runs have no planned duration
    assert state.bad_lines == 1


def test_relative_progress_times_start_at_zero():
    state = LiveState("client1", planned_s=5)
    state.feed_line("progress: 1.0 s, 100.0 tps, lat 1.000 ms stddev 0.1, 0 failed")
    state.feed_line("progress: 3.0 s, 400.0 tps, lat 2.000 ms stddev 0.1, 0 failed")  # a 2 s gap
    row = state.snapshot()
    assert row.elapsed_s == 3.0
    assert row.tps_average == pytest.approx((100 * 1 + 400 * 2) / 3)


# --- paths and the known_hosts policy ------------------------------------------------


def test_remote_run_dir_is_the_pgbench_run_role_folder():
    run_dir = "/work/main/results/runs/two-client/nvme-ext4-tablespace-s20-c2-tpcb/rep-0"
    # printf %s "$run_dir" | sha1sum  ->  2d4ec4bf7e5f...
    expected = subprocess.run(
        ["sha1sum"], input=run_dir.encode(), capture_output=True, check=True
    ).stdout.decode()[:12]
    assert str(remote_run_dir(run_dir, "client1")) == (
        f"/var/lib/drivelab-client/client1/runs/{expected}"
    )
    target = ClientTarget(
        "client1",
        "10.213.0.11",
        str(remote_run_dir(run_dir, "client1") / "stderr.txt"),
        key_filename="/var/lib/drivelab/ssh/id_ed25519",
        known_hosts="/var/lib/drivelab/ssh/known_hosts",
    )
    assert target.rc_path == f"/var/lib/drivelab-client/client1/runs/{expected}/rc.txt"


@pytest.fixture(scope="module")
def host_key():
    return paramiko.ECDSAKey.generate()


@pytest.fixture(scope="module")
def other_key():
    return paramiko.ECDSAKey.generate()


@pytest.fixture(scope="module")
def keys(host_key, other_key):
    return host_key, other_key


def _line(patterns: str, key: paramiko.PKey, marker: str = "") -> str:
    return f"{marker} {patterns} {key.get_name()} {key.get_base64()}".strip()


@pytest.mark.parametrize(
    ("lines", "name", "error"),
    [
        pytest.param(["10.213.0.11"], "10.213.0.11", None, id="exact"),
        pytest.param(["10.213.0.*"], "10.213.0.11", None, id="lab-wildcard"),
        pytest.param(["10.213.0.1?"], "10.213.0.12", None, id="question-mark"),
        pytest.param(["[127.0.0.*]:2222"], "[127.0.0.1]:2222", None, id="bracketed-port"),
        pytest.param(["Client1.LAB,db"], "client1.lab", None, id="list-case-insensitive"),
        pytest.param(["# a comment", "", "10.213.0.11"], "10.213.0.11", None, id="comments-blank"),
        pytest.param(["10.213.0.*"], "[10.213.0.11]:2222", "is not in", id="other-port"),
        pytest.param(["10.213.0.*,!10.213.0.12"], "10.213.0.12", "is not in", id="negated"),
        pytest.param(["10.213.1.*"], "10.213.0.11", "is not in", id="other-subnet"),
        pytest.param(["[10.213.0.11]"], "10.213.0.11", "is not in", id="brackets-literal"),
        pytest.param(["@cert-authority *"], "10.213.0.11", "is not in", id="cert-authority"),
        pytest.param(["@revoked *", "*"], "10.213.0.11", "@revoked", id="revoked"),
        # OpenSSH checks revocation over the whole file first: order does not matter
        pytest.param(["*", "@revoked *"], "10.213.0.11", "@revoked", id="revoked-after-plain"),
        # ... but, like any line, @revoked applies only to the names it matches
        pytest.param(["10.213.0.11", "@revoked 10.99.*"], "10.213.0.11", None, id="revoked-other"),
        pytest.param(["OTHER 10.213.0.*"], "10.213.0.11", "does not match", id="wrong-key"),
    ],
)
def test_known_hosts_policy_reads_openssh_patterns(tmp_path, keys, lines, name, error):
    host_key, other_key = keys
    text = []
    for line in lines:
        if not line or line.startswith("#"):
            text.append(line)
        elif line.startswith("OTHER "):
            text.append(_line(line.removeprefix("OTHER "), other_key))
        elif line.startswith("@"):
            marker, patterns = line.split()
            text.append(_line(patterns, host_key, marker))
        else:
            text.append(_line(line, host_key))
    path = tmp_path / "known_hosts"
    path.write_text("\n".join(text) + "\n")
    policy = KnownHostsPolicy(path)
    if error is None:
        policy.missing_host_key(None, name, host_key)  # accepted: no exception
        return
    with pytest.raises(paramiko.SSHException, match=re.escape(error)) as info:
        policy.missing_host_key(None, name, host_key)
    assert name in str(info.value)


def test_known_hosts_policy_takes_names_hashed_by_ssh_keygen(tmp_path, host_key):
    if not shutil.which("ssh-keygen"):
        pytest.skip("ssh-keygen is not installed")
    path = tmp_path / "known_hosts"
    path.write_text(_line("[127.0.0.1]:2222", host_key) + "\n")
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(path)], check=True, capture_output=True)
    assert path.read_text().startswith("|1|")
    KnownHostsPolicy(path).missing_host_key(None, "[127.0.0.1]:2222", host_key)
    with pytest.raises(paramiko.SSHException, match="is not in"):
        KnownHostsPolicy(path).missing_host_key(None, "[127.0.0.2]:2222", host_key)


def test_known_hosts_policy_missing_file(tmp_path, host_key):
    with pytest.raises(paramiko.SSHException, match=r"cannot read known_hosts .*absent"):
        KnownHostsPolicy(tmp_path / "absent").missing_host_key(None, "h", host_key)


# --- the exporter ----------------------------------------------------------------------


def _states(clock=None) -> dict[str, LiveState]:
    clock = clock or FakeClock()
    states = {n: LiveState(n, planned_s=60, clock=clock) for n in ("client1", "client2")}
    states["client1"].mark_connected()
    states["client1"].feed(RUN9.read_text())
    states["client2"].mark_connected()  # connected, pgbench not started yet
    return states


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=3) as response:  # noqa: S310  (our http:// URL)
        return response.read().decode()


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def test_exporter_serves_gauges_over_http_and_frees_its_port():
    states = _states()
    exporter = MetricsExporter(
        lambda: [(LABELS, s.snapshot()) for s in states.values()], "127.0.0.1", 0
    )
    threads_before = set(threading.enumerate())
    exporter.start()
    try:
        port = exporter.port
        assert port > 0
        assert exporter.url == f"http://127.0.0.1:{port}/metrics"
        text = _get(exporter.url)
        samples = {
            (s.name, s.labels.get("client"), s.labels.get("status")): s
            for f in text_string_to_metric_families(text)
            for s in f.samples
        }
        tps = samples[("drivelab_client_tps", "client1", None)]
        assert tps.labels == {
            "scenario": "two-client",
            "cell": "nvme-ext4-tablespace-s20-c2-tpcb",
            "run": "0",
            "client": "client1",
            "drive": "nvme",
        }
        assert tps.value == 36177.1
        value = {k: s.value for k, s in samples.items()}
        assert value[("drivelab_client_tps_average", "client1", None)] == pytest.approx(34108.25)
        assert value[("drivelab_client_latency_seconds", "client1", None)] == 0.054e-3
        assert value[("drivelab_client_elapsed_seconds", "client1", None)] == pytest.approx(2)
        assert value[("drivelab_client_remaining_seconds", "client1", None)] == pytest.approx(58)
        assert value[("drivelab_client_up", "client1", None)] == 1
        assert value[("drivelab_client_status", "client1", "running")] == 1
        assert value[("drivelab_client_status", "client1", "waiting")] == 0
        # client2 has no figures yet: absent, never a made-up 0
        assert ("drivelab_client_tps", "client2", None) not in value
        assert value[("drivelab_client_remaining_seconds", "client2", None)] == 60
        assert value[("drivelab_client_status", "client2", "waiting")] == 1
        assert "# TYPE drivelab_client_tps gauge" in text
        # a counter of transactions (rate() over it), client1's two progress lines so far;
        # none yet for client2; and the build
        assert "# TYPE drivelab_client_transactions_total counter" in text
        assert value[("drivelab_client_transactions_total", "client1", None)] == pytest.approx(
            34108.25 * 2
        )
        assert ("drivelab_client_transactions_total", "client2", None) not in value
        (info,) = [s for k, s in samples.items() if k[0] == "drivelab_build_info"]
        assert info.value == 1 and info.labels == {
            "version": build.info()["version"],
            "commit": build.info()["commit"] or "",
        }
        # the values are read at scrape time
        states["client1"].mark_lost("gone")
        again = _get(exporter.url)
        assert (
            'drivelab_client_up{cell="nvme-ext4-tablespace-s20-c2-tpcb",client="client1"' in again
        )
        assert re.search(r'drivelab_client_up\{[^}]*client="client1"[^}]*\} 0\.0', again)
        # nothing leaks into the process-wide registry
        from prometheus_client import REGISTRY  # noqa: PLC0415

        assert REGISTRY.get_sample_value("drivelab_client_up", tps.labels) is None
    finally:
        exporter.stop()
    assert _refused(port)
    assert not exporter.running
    time.sleep(0.05)  # request threads are short-lived
    assert set(threading.enumerate()) <= threads_before
    # the port is free again: a new exporter can take it at once
    with MetricsExporter(lambda: [], "127.0.0.1", port) as again_exporter:
        assert again_exporter.port == port
    assert _refused(port)
    exporter.stop()  # twice is harmless


def test_exporter_on_a_busy_port_is_one_line():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(
            DrivelabError, match=rf"^cannot serve live metrics on 127\.0\.0\.1:{port}: "
        ):
            MetricsExporter(lambda: [], "127.0.0.1", port).start()


# --- the table ---------------------------------------------------------------------------


def _render(table, width=120) -> str:
    console = Console(file=StringIO(), width=width, color_system=None)
    console.print(table)
    return console.file.getvalue()


def test_table_has_one_row_per_client_with_its_figures():
    clock = FakeClock()
    states = _states(clock)
    states["client3"] = LiveState("client3", planned_s=60, clock=clock)
    states["client3"].mark_lost("cannot connect to root@10.213.0.13:22: Connection refused")
    text = _render(render_table([s.snapshot() for s in states.values()], LABELS, now=clock.now))
    body = [line for line in text.splitlines() if line.startswith("│")]
    assert len(body) == 3
    assert [line.split("│")[1].strip() for line in body] == ["client1", "client2", "client3"]
    cells = [c.strip() for c in body[0].split("│")[1:-1]]
    assert cells == ["client1", "running", "36,177.1", "34,108.2", "0.054", "0:02 / 0:58"]
    assert [c.strip() for c in body[1].split("│")[1:-1]] == [
        "client2",
        "waiting",
        "-",
        "-",
        "-",
        "- / 1:00",
    ]
    assert "stream lost" in body[2]
    assert text.splitlines()[0].strip() == (
        "two-client / nvme-ext4-tablespace-s20-c2-tpcb / rep 0 / nvme"
    )
    assert "all clients: 36,177.1 tps now, 34,108.2 tps so far" in text
    assert "client3: cannot connect to root@10.213.0.13:22: Connection refused" in text


def test_table_says_when_a_running_client_went_quiet():
    row = ClientRow("client1", Status.RUNNING, tps_now=10.0, updated_at=1000.0)
    assert "running, quiet 7 s" in _render(render_table([row], now=1007.0))
    assert "quiet" not in _render(render_table([row], now=1002.0))


# --- LiveSession with stand-in followers -------------------------------------------------


class StandIn:
    """A follower that feeds the fixture lines and records what was asked of it."""

    def __init__(self, target: ClientTarget, state: LiveState, log: list[str]) -> None:
        self.target, self.state, self.log = target, state, log
        self.stopped = threading.Event()

    def start(self) -> None:
        self.log.append(f"start {self.target.name}")
        self.state.mark_connected()
        self.state.feed(RUN9.read_text())

    def stop(self, timeout: float = 5.0) -> None:
        self.log.append(f"stop {self.target.name}")
        self.stopped.set()
        self.state.mark_lost("live view stopped before pgbench ended")

    def join(self, timeout: float | None = None) -> bool:
        return self.stopped.wait(timeout)


def _targets(n: int = 2, stderr_dir: str = "/nowhere", port: int = 22, **kw) -> list[ClientTarget]:
    return [
        ClientTarget(
            f"client{i}",
            "127.0.0.1",
            f"{stderr_dir}/client{i}/stderr.txt",
            key_filename=kw.get("key", "/nowhere/key"),
            known_hosts=kw.get("known_hosts", "/nowhere/known_hosts"),
            port=port,
            user=kw.get("user", "root"),
        )
        for i in range(1, n + 1)
    ]


def _live_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if type(t).__name__ == "_RefreshThread"]


def test_session_stops_everything_after_an_exception():
    log: list[str] = []
    console = Console(file=StringIO(), width=100, force_terminal=True, color_system=None)
    session = LiveSession(
        _targets(),
        LABELS,
        60,
        metrics_port=0,
        console=console,
        follower=lambda t, s: StandIn(t, s, log),
    )
    with pytest.raises(RuntimeError, match="the playbook blew up"), session:
        port = session.exporter.port
        assert session.metrics_url == f"http://127.0.0.1:{port}/metrics"
        assert "drivelab_client_tps{" in _get(session.metrics_url)
        assert _live_threads(), "a terminal console shows the live table"
        raise RuntimeError("the playbook blew up")
    assert log == ["start client1", "start client2", "stop client1", "stop client2"]
    assert _refused(port)
    assert not _live_threads()
    assert session.metrics_url is None
    out = console.file.getvalue()
    assert "client1" in out and "client2" in out and "36,177.1" in out
    session.close()  # twice is harmless


def test_session_shows_no_table_on_a_non_terminal_and_survives_a_busy_port():
    console = Console(file=StringIO(), width=100)  # a pipe: not a terminal
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with LiveSession(
            _targets(1),
            LABELS,
            60,
            metrics_port=port,
            console=console,
            follower=lambda t, s: StandIn(t, s, []),
        ) as session:
            assert not _live_threads()
            assert session.rows()[0].tps_now == 36177.1
    assert session.exporter_error.startswith(f"cannot serve live metrics on 127.0.0.1:{port}")
    out = console.file.getvalue()
    assert out.count("\n") == 1 and "going on without it" in out  # the warning, no table


def test_session_refuses_repeated_client_names():
    with pytest.raises(DrivelabError, match="client names repeat"):
        LiveSession([*_targets(1), *_targets(1)], LABELS, 60, metrics_port=None)


# --- the Fabric follower against a real sshd ------------------------------------------------


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if ppid == pid:
                    out += [int(entry.name), *_children(int(entry.name))]
    return out


def _session_pids(sshd_pid: int, server_port: int, client_port: int) -> list[int]:
    """The sshd processes (descendants of ours) holding this connection's socket."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, inode = fields[1], fields[2], fields[9]
        if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == (
            client_port
        ):
            inodes.add(f"socket:[{inode}]")
    pids = []
    for pid in _children(sshd_pid):
        with contextlib.suppress(OSError):
            if (Path(f"/proc/{pid}/comm").read_text().strip() == "sshd") and any(
                os.readlink(fd) in inodes for fd in Path(f"/proc/{pid}/fd").iterdir()
            ):
                pids.append(pid)
    return pids


def _remote_processes(marker: str) -> list[str]:
    """Processes whose command line names ``marker`` (the temp stderr path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                if marker in cmd:
                    found.append(f"{entry.name}: {cmd[:80]}")
    return found


@pytest.fixture
def no_thread_errors(monkeypatch):
    errors: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    yield errors
    assert errors == []


def _write(path: Path, line: str) -> None:
    with path.open("a") as fh:
        fh.write(line + "\n")


def _progress(t: float, tps: float, lat_ms: float) -> str:
    return f"progress: {t:.3f} s, {tps:.1f} tps, lat {lat_ms:.3f} ms stddev 0.100, 0 failed"


@pytest.mark.sshd
def test_follower_streams_lines_as_they_arrive_and_ends_on_rc(sshd, tmp_path, no_thread_errors):
    folder = tmp_path / "run"
    folder.mkdir()
    stderr = folder / "stderr.txt"
    # an earlier attempt's leftovers (an hour old): not this run
    stderr.write_text(_progress(1_700_000_001, 999.0, 9.0) + "\n")
    (folder / "rc.txt").write_text("rc=1\n")
    old = time.time() - 3600
    for f in (stderr, folder / "rc.txt"):
        os.utime(f, (old, old))

    state = LiveState("client1", planned_s=10)
    follower = Follower(sshd.target("client1", folder), state)
    follower.start()
    try:
        wait_for(lambda: state.snapshot().up, what="the SSH stream")
        time.sleep(0.6)  # three polls of the remote loop: the stale files are ignored
        assert state.status is Status.WAITING

        for f in (stderr, folder / "rc.txt"):  # the playbook's prepare step
            f.unlink()
        stderr.write_text("")  # the wrapper opens stderr.txt as pgbench starts
        wait_for(lambda: state.status is Status.RUNNING, what="running")
        assert state.snapshot().tps_now is None

        t0 = 1_795_234_735.26
        for i, (tps, lat) in enumerate([(32039.4, 0.061), (36177.1, 0.054), (30000.0, 0.070)]):
            _write(stderr, _progress(t0 + i, tps, lat))
            row = wait_for(
                lambda tps=tps: (r := state.snapshot()).tps_now == tps and r,
                what=f"line {i + 1}",
            )
            assert row.latency_s == pytest.approx(lat * 1e-3)
            assert row.elapsed_s == pytest.approx(i + 1)
            assert row.remaining_s == pytest.approx(10 - (i + 1))
            assert row.up and row.status is Status.RUNNING
        _write(stderr, "pgbench: error: client 3 script 0 aborted in command 4 query 0: boom")
        # the last line and rc.txt together, as when pgbench exits
        _write(stderr, _progress(t0 + 3, 20000.0, 0.080))
        (folder / "rc.txt").write_text("rc=0\n")
        assert follower.join(5), "the remote command ends by itself once rc.txt is there"
        row = state.snapshot()
        assert (row.status, row.reason, row.up) == (Status.DONE, None, False)
        assert row.tps_now == 20000.0  # nothing lost at the end
        assert row.tps_average == pytest.approx((32039.4 + 36177.1 + 30000 + 20000) / 4)
        assert state.errors == ("client 3 script 0 aborted in command 4 query 0: boom",)
        assert wait_for(lambda: not _remote_processes(str(stderr)), what="remote clean-up")
    finally:
        follower.stop()


@pytest.mark.sshd
def test_killed_sshd_marks_the_client_stream_lost(sshd, tmp_path, no_thread_errors):
    folder = tmp_path / "run"
    folder.mkdir()
    stderr = folder / "stderr.txt"
    stderr.write_text(RUN9.read_text())
    state = LiveState("client1", planned_s=60)
    follower = Follower(sshd.target("client1", folder), state)
    follower.start()
    try:
        wait_for(lambda: state.snapshot().tps_now == 36177.1, what="the fixture lines")
        conn = follower.connection
        client_port = conn.transport.sock.getsockname()[1]
        session = _session_pids(sshd.proc.pid, sshd.port, client_port)
        assert session, "the sshd session process of this connection"
        assert _remote_processes(str(stderr)), "the remote tail runs"
        for pid in [sshd.proc.pid, *session]:  # ours only: descendants of our sshd
            os.kill(pid, signal.SIGKILL)
        assert follower.join(5), "the follower ends by itself"
        row = state.snapshot()
        assert row.status is Status.LOST
        assert row.reason == (
            f"connection to {sshd.user}@127.0.0.1:{sshd.port} closed before pgbench ended"
        )
        assert (row.tps_now, row.up) == (36177.1, False)  # the figures stay
        # the remote shell saw its stdin close and took tail and its loops down
        assert wait_for(lambda: not _remote_processes(str(stderr)), what="remote clean-up")
        _write(stderr, _progress(1_795_234_737.26, 1.0, 1.0))
        time.sleep(0.3)
        assert state.snapshot().tps_now == 36177.1
    finally:
        follower.stop()


@pytest.mark.sshd
def test_session_over_ssh_stops_remote_followers_after_an_exception(sshd, tmp_path):
    targets = []
    for name in ("client1", "client2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "stderr.txt").write_text(RUN9.read_text())
        targets.append(sshd.target(name, tmp_path / name))
    console = Console(file=StringIO(), width=100)
    session = LiveSession(targets, LABELS, 60, metrics_port=0, console=console)
    with pytest.raises(KeyboardInterrupt), session:
        url = session.metrics_url
        wait_for(lambda: all(r.tps_now == 36177.1 for r in session.rows()), what="both clients")
        metrics = _get(url)
        assert metrics.count("drivelab_client_tps{") == 2
        raise KeyboardInterrupt  # Ctrl-C during the playbook
    for row in session.rows():
        assert (row.status, row.reason) == (
            Status.LOST,
            "live view stopped before pgbench ended",
        )
    assert _refused(int(url.rsplit(":", 1)[1].split("/")[0]))
    for name in ("client1", "client2"):
        marker = str(tmp_path / name / "stderr.txt")
        assert wait_for(lambda m=marker: not _remote_processes(m), what=f"{name} clean-up")
    assert not any(t.name.startswith("drivelab-live-") for t in threading.enumerate())


@pytest.mark.sshd
def test_unknown_host_key_is_refused(sshd, tmp_path, other_key):
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(_line(f"[127.0.0.1]:{sshd.port}", other_key) + "\n")
    state = LiveState("client1")
    follower = Follower(sshd.target("client1", tmp_path, known_hosts=wrong), state)
    follower.start()
    assert follower.join(10)
    row = state.snapshot()
    assert row.status is Status.LOST
    assert row.reason == (
        f"cannot connect to {sshd.user}@127.0.0.1:{sshd.port}: host key of "
        f"[127.0.0.1]:{sshd.port} (ssh-ed25519) does not match {wrong}"
    )


def test_follower_to_a_closed_port_is_stream_lost_not_an_error(tmp_path, no_thread_errors):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    target = _targets(1, str(tmp_path), port=port)[0]
    state = LiveState("client1")
    follower = Follower(target, state)
    follower.start()
    assert follower.join(10)
    row = state.snapshot()
    assert row.status is Status.LOST
    assert row.reason.startswith(f"cannot connect to root@127.0.0.1:{port}: ")
    assert "Unable to connect" in row.reason


@pytest.mark.sshd
def test_follower_stopped_at_once_leaves_nothing(sshd, tmp_path, no_thread_errors):
    for _ in range(3):  # stop lands before, during or after the connection is made
        state = LiveState("client1")
        follower = Follower(sshd.target("client1", tmp_path), state)
        follower.start()
        follower.stop()
        assert follower.join(5)
        assert state.status in (Status.WAITING, Status.LOST)
        assert not state.snapshot().up
    marker = str(tmp_path / "stderr.txt")  # not tmp_path: our sshd's own command line has it
    assert wait_for(lambda: not _remote_processes(marker), what="remote clean-up")


@pytest.mark.sshd
def test_the_transaction_logs_followed_give_each_clients_latency_histogram(
    sshd, tmp_path, no_thread_errors
):
    """pgbench's two thread logs (real ones, a sampled run's), written in blocks that cut
    lines as pgbench's stdio does, followed beside stderr over SSH: once rc.txt is
    there, the histogram the exporter serves holds every transaction that has a latency
    (skipped and failed ones have none), each in its bucket, and their sum; stderr's
    progress lines still read."""
    source = DATA / "pgbench" / "run8_sampling_full_logs"
    logs = [(source / n).read_text() for n in ("samp.14175", "samp.14175.1")]
    latencies = [
        int(f[2]) / 1e6
        for text in logs
        for f in (line.split() for line in text.splitlines())
        if f[2].isdigit()
    ]
    folder = tmp_path / "run"
    folder.mkdir()
    stderr = folder / "stderr.txt"
    state = LiveState("client1", planned_s=10)
    target = dataclasses.replace(sshd.target("client1", folder), txlogs=2)
    follower = Follower(target, state)
    follower.start()
    try:
        wait_for(lambda: state.snapshot().up, what="the SSH stream")
        stderr.write_text("")
        wait_for(lambda: state.status is Status.RUNNING, what="running")
        files = [folder / "pgbench_log.14175", folder / "pgbench_log.14175.1"]
        for f in files:
            f.write_text("")
        for at in range(0, max(len(t) for t in logs), 700):  # mid-line cuts
            for f, text in zip(files, logs, strict=True):
                with f.open("a") as fh:
                    fh.write(text[at : at + 700])
            time.sleep(0.05)
        _write(stderr, _progress(1_795_234_735.26, 100.0, 2.0))
        (folder / "rc.txt").write_text("rc=0\n")
        assert follower.join(5), "the remote command ends by itself once rc.txt is there"
    finally:
        follower.stop()
    row = state.snapshot()
    assert row.status is Status.DONE and row.tps_now == 100.0
    with MetricsExporter(lambda: [(LABELS, row)], "127.0.0.1", 0) as exporter:
        text = _get(exporter.url)
    (family,) = [f for f in text_string_to_metric_families(text)
                 if f.name == "drivelab_client_transaction_latency_seconds"]  # fmt: skip
    assert family.type == "histogram"
    buckets = {s.labels["le"]: s.value for s in family.samples if s.name.endswith("_bucket")}
    for le, count in buckets.items():
        assert count == sum(1 for v in latencies if v <= float(le)), le
    count = next(s.value for s in family.samples if s.name.endswith("_count"))
    total = next(s.value for s in family.samples if s.name.endswith("_sum"))
    assert count == len(latencies) == buckets["+Inf"] and len(latencies) > 100
    assert total == pytest.approx(sum(latencies))


def test_a_transaction_log_line_without_a_latency_is_left_out():
    state = LiveState("client1")
    assert state.snapshot().latency_buckets is None  # not followed: no histogram at all
    for line in ("0 2 skipped 0 1795234454 497592 0 0", "0 7 failed 0 1795234454 1 serialization",
                 "garbage", "1 1 1285 0 1795234360 636219"):  # fmt: skip
        state.feed_transaction(line)
    row = state.snapshot()
    assert sum(row.latency_buckets) == 1 and row.latency_sum_s == pytest.approx(0.001285)
