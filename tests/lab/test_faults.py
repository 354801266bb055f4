"""Faults injected for real on the lab, each asserting what was kept and what the user
was told: a client's pgbench killed mid-run, a client's link cut mid-run, a client
unreachable before the run, PostgreSQL killed mid-run, the runner killed during init,
the runner told to stop (SIGTERM) mid-run, the results folder on a full filesystem; and no password anywhere in what those runs
left behind."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from collector.errors import EXIT_CONTROLLER, EXIT_HOSTS, EXIT_INCOMPLETE
from collector.store import Store
from tests.lab.conftest import BIN, REPO, drivelab, wait_for

pytestmark = pytest.mark.lab

SECRETS = Path.home() / ".local/share/drivelab/secrets/dbhost"


def write_scenario(  # noqa: PLR0917  (a scenario, spelled out)
    tmp_path: Path, name: str, drives: str = "[nvme]", reps: int = 1, log="full", retries: int = 0
):
    path = tmp_path / f"{name}.yml"
    path.write_text(
        textwrap.dedent(f"""\
            ---
            name: {name}
            baseline: nvme
            drives: {drives}
            workload: {{scale: [2], clients_per_host: 2, threads: 1, duration: 8, log: {log}}}
            hosts: [2]
            repetitions: {reps}
            retries: {retries}
        """)
    )
    return path


def start_run(path: Path, results: Path, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, DRIVELAB_RESULTS=str(results), COLUMNS="200")
    return subprocess.Popen(
        [str(BIN / "drivelab"), "run", "--no-check", str(path), "--no-telemetry", *extra], cwd=REPO, env=env,
        start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def finish(proc: subprocess.Popen, timeout: float = 600) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return out


def ns_processes(ns: str) -> list[tuple[int, str]]:
    out = []
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=False)
    for pid in pids.stdout.split():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        out.append((int(pid), cmd))
    return out


def is_pgbench(cmd: str) -> bool:
    """pgbench's own process (Debian's wrapper execs /usr/lib/postgresql/15/bin/pgbench)."""
    return re.match(r"(\S*/)?pgbench ", cmd) is not None


def running_pgbench(client: str) -> int | None:
    for pid, cmd in ns_processes(f"drivelab-{client}"):
        if is_pgbench(cmd) and " -T " in cmd:
            return pid
    return None


def backends_of(role: str) -> int:
    proc = subprocess.run(
        ["runuser", "-u", "postgres", "--", "psql", "-h", "/var/run/postgresql", "-p", "5440",
         "-d", "postgres", "-v", f"role={role}", "-At"],
        input="SELECT count(*) FROM pg_stat_activity WHERE usename = :'role';\n",
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    return int(proc.stdout.strip() or -1)


def runs(db: Path) -> list[tuple[str, int, str, str | None]]:
    with Store.open(db, create=False) as store:
        out = []
        for s in store.scenarios():
            for cid, spec in store.cells(s.id):
                for r in store.runs(cid):
                    out.append((spec.drive, r.repetition, r.status.value, r.reason))
        return sorted(out)


def test_a_killed_client_leaves_a_partial_attempt_and_the_repetition_is_run_again(lab2, tmp_path):
    """One repetition asked, one retry allowed: client2's pgbench killed in the first
    attempt leaves it partial (kept, not averaged in), the second attempt completes in the
    same run, so the cell ends with the one complete run it asked for."""
    path = write_scenario(tmp_path, "fault-kill-client", reps=1, retries=1)
    results = tmp_path / "results"
    proc = start_run(path, results)
    try:
        pid = wait_for(lambda: running_pgbench("client2"), 300, "client2's pgbench")
        time.sleep(3)
        assert backends_of("drivelab_client2") > 0
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        wait_for(lambda: backends_of("drivelab_client2") == 0, 30, "client2's backends to end")
        gone_after = time.monotonic() - killed
    finally:
        out = finish(proc)
    assert proc.returncode == 0, out[-3000:]
    assert gone_after < 10, f"backends lingered {gone_after:.1f} s"
    with Store.open(results / "drivelab.db", create=False) as store:
        ((cid, _),) = store.cells(store.scenarios()[0].id)
        attempts = [(r.repetition, r.attempt, r.status.value, r.reason) for r in store.runs(cid)]
    (first, second) = attempts
    assert first[:3] == (0, 1, "partial") and "client2" in first[3], first
    assert second[:3] == (0, 2, "complete"), second
    # each attempt keeps its folder
    cell_dir = next((results / "runs" / "fault-kill-client").iterdir())
    assert sorted(p.name for p in cell_dir.glob("rep-*")) == ["rep-0", "rep-0-attempt-2"]
    # the user is told, and the partial attempt is not averaged in
    assert "rep 0: partial" in out and "running it again" in out
    assert "rep 0 attempt 2: complete" in out
    assert "run 0: partial" in out and "not averaged in" in out


def lease_free() -> bool:
    return json.loads(drivelab("status", "--json").stdout)["text"] == "free"


def test_sigterm_mid_run_stores_the_repetition_failed_frees_the_lease_and_a_rerun_redoes_it(
    lab2, tmp_path
):
    """SIGTERM to `drivelab run` (a service manager stopping it, `kill`) while the
    clients run pgbench: ended as Ctrl-C ends it, the playbook stopped, the repetition
    stored failed with the reason in one line, the lease released at once, exit 143 (128
    + 15); the next `drivelab run` does that repetition again and completes it."""
    path = write_scenario(tmp_path, "fault-sigterm")
    results = tmp_path / "results"
    proc = start_run(path, results)
    try:
        wait_for(lambda: running_pgbench("client2"), 300, "client2's pgbench")
        time.sleep(2)
        proc.send_signal(signal.SIGTERM)  # the runner alone, not its process group
        sent = time.monotonic()
        wait_for(lease_free, 30, "the lease released", every=0.2)
        freed = time.monotonic() - sent
    finally:
        out = finish(proc, timeout=120)
    print(f"SIGTERM: lease free {freed:.1f} s after it")
    assert proc.returncode == 143, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert [line for line in out.splitlines() if line.startswith("drivelab: ")] == [
        "drivelab: stopped by SIGTERM"
    ], out[-3000:]
    assert freed < 5, f"the lease was free only {freed:.1f} s after SIGTERM"
    db = results / "drivelab.db"
    reason = "drivelab run stopped by SIGTERM during the repetition: cut off"
    assert runs(db) == [("nvme", 0, "failed", reason)], runs(db)
    assert f"rep 0: failed, {reason}" in out, out[-3000:]
    again = start_run(path, results)
    out = finish(again)
    assert again.returncode == 0, out[-3000:]
    assert [r[:3] for r in runs(db)] == [("nvme", 0, "complete"), ("nvme", 0, "failed")]
    assert not [
        cmd for c in ("client1", "client2") for _, cmd in ns_processes(f"drivelab-{c}")
        if is_pgbench(cmd)
    ]  # fmt: skip


def unreachable_in_pgbench_log(results: Path, host: str) -> bool:
    """Ansible has given up on ``host`` in a pgbench playbook (its log is written as it goes)."""
    for log in (results / "logs").glob("*pgbench*.log"):
        if any(
            "UNREACHABLE" in line and host in line
            for line in log.read_text(errors="replace").splitlines()
        ):
            return True
    return False


def test_a_client_link_cut_mid_run_leaves_a_partial_run_within_bounded_time(lab2, tmp_path):
    path = write_scenario(tmp_path, "fault-link-cut", reps=2)
    results = tmp_path / "results"
    link = ["ip", "-n", "drivelab-client2", "link", "set", "eth0"]
    proc = start_run(path, results)
    up = True
    try:
        wait_for(lambda: running_pgbench("client2"), 300, "client2's pgbench")
        time.sleep(3)
        assert backends_of("drivelab_client2") > 0
        subprocess.run([*link, "down"], check=True)
        up = False
        cut = time.monotonic()
        # client2's libpq gives up on the silent server (tcp_user_timeout, keepalives) ...
        wait_for(lambda: running_pgbench("client2") is None, 60, "client2's pgbench to end")
        pgbench_ended = time.monotonic() - cut
        # ... the server on client2's sessions ...
        wait_for(lambda: backends_of("drivelab_client2") == 0, 60, "client2's backends to end")
        backends_gone = time.monotonic() - cut
        # ... and Ansible on client2 (ServerAliveInterval x ServerAliveCountMax)
        wait_for(lambda: unreachable_in_pgbench_log(results, "client2"), 120, "Ansible to give up")
        ansible_gave_up = time.monotonic() - cut
        # the link comes back, so the scenario's next run has both clients again
        subprocess.run([*link, "up"], check=True)
        up = True
    finally:
        if not up:
            subprocess.run([*link, "up"], check=True)
        out = finish(proc)
    print(
        f"link cut: pgbench ended after {pgbench_ended:.1f} s, backends gone after "
        f"{backends_gone:.1f} s, Ansible gave up after {ansible_gave_up:.1f} s"
    )
    assert proc.returncode == EXIT_INCOMPLETE, out[-3000:]  # rep 0 stored partial
    (r0, r1) = runs(results / "drivelab.db")
    assert r0[:3] == ("nvme", 0, "partial") and "client2" in r0[3], r0
    assert "unreachable" in r0[3], r0
    assert r1[:3] == ("nvme", 1, "complete"), r1
    assert pgbench_ended < 30, f"client2's pgbench ran {pgbench_ended:.1f} s past the cut"
    assert backends_gone < 30, f"backends lingered {backends_gone:.1f} s"
    assert ansible_gave_up < 60, f"Ansible waited {ansible_gave_up:.1f} s"
    assert "rep 0: partial" in out and "not averaged in" in out
    # client1's figures of the cut run are kept
    with Store.open(results / "drivelab.db", create=False) as store:
        ((cid, _),) = store.cells(store.scenarios()[0].id)
        (cut_run,) = [r for r in store.runs(cid) if r.repetition == 0]
        kept = {c.client: c for c in store.client_results(cut_run.id)}
    assert kept["client1"].status.value == "complete" and kept["client1"].tps > 0, kept
    assert kept["client2"].status.value == "failed", kept
    # what client2 wrote during the cut run did not stay behind on it
    assert not list(Path("/var/lib/drivelab-client/client2/runs").glob("*")), "leftover run folder"


def test_an_unreachable_client_stops_the_run_before_any_drive_is_touched(lab2, tmp_path):
    path = write_scenario(tmp_path, "fault-unreachable")
    results = tmp_path / "results"
    subprocess.run(["ip", "-n", "drivelab-client2", "link", "set", "eth0", "down"], check=True)
    try:
        started = time.monotonic()
        proc = start_run(path, results)
        out = finish(proc, timeout=120)
        took = time.monotonic() - started
    finally:
        subprocess.run(["ip", "-n", "drivelab-client2", "link", "set", "eth0", "up"], check=True)
    assert proc.returncode == EXIT_HOSTS, out
    errors = [line for line in out.splitlines() if line.startswith("drivelab:")]
    assert len(errors) == 1 and "client2" in errors[0] and "nothing was touched" in errors[0], out
    assert "Traceback" not in out
    # no drive, database or pgbench stage ran
    logs = (
        sorted(p.name for p in (results / "logs").glob("*.log"))
        if (results / "logs").exists()
        else []
    )
    assert not [n for n in logs if "drives" in n or "database" in n or "pgbench" in n], logs
    assert not (results / "runs").exists()
    assert took < 60, f"preflight took {took:.0f} s"


def postmaster_pid() -> int | None:
    pidfile = Path("/var/lib/postgresql/15/drivelab/postmaster.pid")
    try:
        return int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def test_postgresql_killed_mid_run_fails_that_run_and_the_next_cell_starts_clean(lab2, tmp_path):
    path = write_scenario(tmp_path, "fault-kill-postgres", drives="[nvme, ssd]")
    results = tmp_path / "results"
    proc = start_run(path, results)
    try:
        wait_for(lambda: running_pgbench("client1"), 300, "client1's pgbench")
        time.sleep(3)
        pid = wait_for(postmaster_pid, 10, "the postmaster's pid")
        os.kill(pid, signal.SIGKILL)
    finally:
        out = finish(proc)
    assert proc.returncode == EXIT_INCOMPLETE, out[-3000:]  # nvme's run stored failed
    got = runs(results / "drivelab.db")
    assert [g[:3] for g in got] == [("nvme", 0, "failed"), ("ssd", 0, "complete")], got
    reason = got[0][3]
    # PostgreSQL's own words, as pgbench reported them (which words depends on where in a
    # transaction the kill lands: "perhaps the backend died while processing" was seen)
    assert any(
        words in reason
        for words in ("server closed the connection", "terminat", "connection", "backend died")
    ), reason
    assert "nvme" in out and "rep 0: failed" in out


def test_a_full_results_filesystem_is_one_line_and_the_store_survives(lab2, tmp_path):
    image = Path("/var/lib/drivelab/drivelab-results-full.img")
    mnt = tmp_path / "results"
    mnt.mkdir()
    subprocess.run(["truncate", "-s", "24M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "drivelab-full", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True)
    try:
        first = write_scenario(tmp_path, "fault-full-first", log="none")
        proc = start_run(first, mnt)
        out = finish(proc)
        assert proc.returncode == 0, out[-3000:]
        # fill what is left, then run a second scenario into it
        with open(mnt / "filler", "wb") as fh:
            try:
                while True:
                    fh.write(b"\0" * (1 << 20))
                    fh.flush()
            except OSError:
                pass
        second = write_scenario(tmp_path, "fault-full-second")
        proc = start_run(second, mnt)
        out = finish(proc)
        assert proc.returncode == EXIT_CONTROLLER, out[-3000:]  # the controller's disk
        errors = [line for line in out.splitlines() if line.startswith("drivelab:")]
        assert len(errors) == 1 and ("No space left" in errors[0] or "full" in errors[0]), out[
            -2000:
        ]
        assert "Traceback" not in out
        con = sqlite3.connect(mnt / "drivelab.db")
        try:
            assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        finally:
            con.close()
        (mnt / "filler").unlink()
        report = subprocess.run(
            [str(BIN / "drivelab"), "report", "fault-full-first", "--db", str(mnt / "drivelab.db")],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert report.returncode == 0 and "nvme" in report.stdout, report.stderr
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
        image.unlink(missing_ok=True)


def test_no_password_in_what_the_fault_runs_left(lab2, tmp_path_factory):
    secrets = [p.read_text().strip() for p in SECRETS.glob("*.password")]
    assert secrets and all(len(s) >= 16 for s in secrets)
    for p in SECRETS.glob("*.password"):
        assert p.stat().st_mode & 0o777 == 0o600
    root = tmp_path_factory.getbasetemp()
    leaks = []
    for f in root.rglob("*"):
        if f.is_file() and f.stat().st_size < 50 << 20:
            data = f.read_bytes()
            leaks += [str(f) for s in secrets if s.encode() in data]
    assert not leaks, leaks


def read_caps() -> str:
    return Path("/sys/fs/cgroup/blkio/drivelab-db/blkio.throttle.read_iops_device").read_text()


def test_runner_killed_during_init_is_started_again_and_redoes_it_safely(lab2, tmp_path):
    path = tmp_path / "fault-kill-init.yml"
    path.write_text(
        textwrap.dedent("""\
            ---
            name: fault-kill-init
            baseline: hdd7200
            drives: [hdd7200]
            workload: {scale: [12], clients_per_host: 1, threads: 1, duration: 5}
            hosts: [2]
            repetitions: 1
        """)
    )
    results = tmp_path / "results"
    caps_before = read_caps()
    assert " 120" in caps_before
    first = start_run(path, results)
    try:

        def initialising() -> bool:
            return any(
                is_pgbench(cmd) and " -i " in cmd
                for c in ("client1", "client2")
                for _, cmd in ns_processes(f"drivelab-{c}")
            )

        wait_for(initialising, 300, "pgbench -i on a client")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert read_caps() == "", "the init had lifted the caps"  # killed before putting them back
    assert not (results / "drivelab.db").exists() or runs(results / "drivelab.db") == []
    again = start_run(path, results)
    out = finish(again)
    assert again.returncode == 0, out[-3000:]
    assert [r[:3] for r in runs(results / "drivelab.db")] == [("hdd7200", 0, "complete")]
    # the caps are back for the measured run, and no init is left running
    assert read_caps() == caps_before
    assert not [
        cmd for c in ("client1", "client2") for _, cmd in ns_processes(f"drivelab-{c}")
        if is_pgbench(cmd)
    ]  # fmt: skip
    with Store.open(results / "drivelab.db", create=False) as store:
        sid = store.scenarios()[0].id
        facts = {f.key: f.value for f in store.facts(sid) if f.scope == "run"}
    # both client databases were initialised (again) to the full scale
    sizes = facts["db_sizes_bytes"]
    assert set(sizes) == {"drivelab_client1", "drivelab_client2"}
    assert min(sizes.values()) > 12 * 14_000_000
