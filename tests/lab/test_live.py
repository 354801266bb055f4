"""The live view on the real lab: the table, driven in tmux, shows one updating row
per client during a run; `drivelab watch` attaches from another terminal; a client
whose SSH stream drops is marked, and the run's results still come from the fetched
logs; the run keeps pg_stat_database's buffer counters."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from collector.store import Store
from tests.lab.conftest import BIN, REPO, wait_for

pytestmark = pytest.mark.lab

SCENARIO = """\
    ---
    name: {name}
    baseline: nvme
    drives: [nvme]
    workload: {{scale: [2], clients_per_host: 2, threads: 1, duration: 15}}
    hosts: [2]
    repetitions: 1
"""
METRICS = "http://127.0.0.1:9479/metrics"
TMUX = "drivelab-test-live"


def scenario(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.yml"
    path.write_text(textwrap.dedent(SCENARIO.format(name=name)))
    return path


def metrics() -> str:
    try:
        with urllib.request.urlopen(METRICS, timeout=2) as resp:
            return resp.read().decode()
    except OSError:
        return ""


def status_of(text: str, client: str) -> str | None:
    for line in text.splitlines():
        if (
            line.startswith("drivelab_client_status{")
            and f'client="{client}"' in line
            and line.endswith(" 1.0")
        ):
            return line.split('status="', 1)[1].split('"', 1)[0]
    return None


def stored_run(db: Path):
    with Store.open(db, create=False) as store:
        info = store.scenarios()[0]
        ((cid, _),) = store.cells(info.id)
        (run,) = store.runs(cid)
        facts = {f.key: f.value for f in store.facts(info.id, run.id) if f.scope == "run"}
        return run, store.client_results(run.id), facts


def test_live_table_in_tmux_updates_one_row_per_client(lab2, tmp_path):
    path = scenario(tmp_path, "live-tmux")
    results = tmp_path / "results"
    cmd = f"cd {REPO} && DRIVELAB_RESULTS={results} {BIN / 'drivelab'} run {path} --no-telemetry; echo drivelab-exit=$?; sleep 60"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", TMUX, "-x", "160", "-y", "50", cmd], check=True
    )
    try:

        def pane(history: bool = False) -> str:
            return subprocess.run(
                ["tmux", "capture-pane", "-p", "-t", TMUX, *(["-S", "-"] if history else [])],
                capture_output=True,
                text=True,
                check=True,
            ).stdout

        def running_rows() -> list[str] | None:
            rows = [
                line for line in pane().splitlines() if "│ client" in line and "running" in line
            ]
            return rows if len(rows) == 2 else None

        first = wait_for(running_rows, 180, "two running rows in the live table")
        time.sleep(2.5)
        second = wait_for(running_rows, 10, "two running rows again")
        assert [r.split()[1] for r in first] == ["client1", "client2"]
        assert first != second, "the live table did not change in 2.5 s"
        # another terminal attaches to the same run
        watch = subprocess.run(
            [str(BIN / "drivelab"), "watch", "--once"], capture_output=True, text=True,
            timeout=30, check=False, env=dict(os.environ, COLUMNS="160"),
        )  # fmt: skip
        assert watch.returncode == 0, watch.stdout + watch.stderr
        assert sum(1 for line in watch.stdout.splitlines() if "│ client" in line) == 2
        # the run ends on its own (its exporter gone with it) before the session is killed
        text = wait_for(
            lambda: "drivelab-exit=" in pane() and pane(history=True), 120, "drivelab run's exit"
        )
        assert "rep 0: complete" in text and "drivelab-exit=0" in text, text
    finally:
        subprocess.run(["tmux", "kill-session", "-t", TMUX], check=False)
    run, clients, facts = stored_run(results / "drivelab.db")
    assert run.status.value == "complete" and len(clients) == 2
    buffers = facts["db_buffers"]
    assert set(buffers) == {"drivelab_client1", "drivelab_client2"}
    assert all(b["blks_hit"] > 0 and 0 < b["hit_ratio"] <= 1 for b in buffers.values())


def _session_sshd_of_follower(client: str) -> int | None:
    """The sshd session process (in the client's namespace) whose child follows
    pgbench's stderr for the live view: the one to kill to drop that stream."""
    pids = subprocess.run(
        ["ip", "netns", "pids", f"drivelab-{client}"], capture_output=True, text=True, check=False
    ).stdout.split()
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "tail" in cmdline and "stderr.txt" in cmdline:
            p = pid
            while p not in ("0", "1"):
                try:
                    comm = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0].decode()
                    stat = Path(f"/proc/{p}/stat").read_text()
                except OSError:
                    break
                if comm.startswith("sshd:"):
                    return int(p)
                p = stat.rsplit(")", 1)[1].split()[1]
    return None


def test_a_dropped_stream_is_marked_and_the_results_come_from_the_logs(lab2, tmp_path):
    path = scenario(tmp_path, "live-drop")
    results = tmp_path / "results"
    env = dict(os.environ, DRIVELAB_RESULTS=str(results))
    proc = subprocess.Popen(
        [str(BIN / "drivelab"), "run", "--no-check", str(path), "--no-telemetry"], cwd=REPO, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    seen: dict[str, str | None] = {}

    def both_running() -> bool:
        text = metrics()
        seen.update((c, status_of(text, c)) for c in ("client1", "client2"))
        if proc.poll() is not None:
            raise AssertionError(f"drivelab run exited {proc.returncode} first")
        return all(s == "running" for s in seen.values())

    try:
        wait_for(both_running, 180, "both clients running")
        sshd = wait_for(lambda: _session_sshd_of_follower("client2"), 10, "the follower's sshd")
        os.kill(sshd, signal.SIGKILL)
        wait_for(lambda: status_of(metrics(), "client2") == "stream lost", 15, "stream lost")
        assert status_of(metrics(), "client1") == "running"
        out, _ = proc.communicate(timeout=180)
    except AssertionError as err:
        # what the run printed and what the live metrics last said, to tell why
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(
            f"{err}; live statuses {seen}; drivelab run said:\n{out[-3000:]}"
        ) from err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out[-3000:]
    run, clients, _ = stored_run(results / "drivelab.db")
    assert run.status.value == "complete"
    # both clients' figures, from the fetched logs, for the full 15 s
    assert {c.client for c in clients} == {"client1", "client2"}
    assert all(c.status.value == "complete" and c.processed > 1000 for c in clients)
    assert all(c.end - c.start > 14 for c in clients)
