"""The second phase of the synchronized start (roles/pgbench_run/action_plugins/
drivelab_start.py) through a real ansible-playbook: real start-at wrappers armed on
their named pipes, one session per client (a local shell here; the lab runs the ssh
sessions on every pgbench run), the instant handed to all at once. A client that never
arms is left out, named, and fails alone; the others start."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WRAPPER = REPO / "roles" / "pgbench_client" / "files" / "pgbench-at"
ACTIONS = REPO / "roles" / "pgbench_run" / "action_plugins"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"

sys.path.insert(0, str(ACTIONS))
import drivelab_start  # noqa: E402

#: the role's two phases (tasks/run.yml) with a stand-in for pgbench: launch armed, the
#: pipe each client arms on, the action, a client left out failing alone, the wait
PLAY = """
- name: Two-phase start
  hosts: clients
  gather_facts: false
  tasks:
    - name: Launch the wrapper
      ansible.builtin.command:
        argv: "{{ [python, wrapper, '--go', go, '--arm-timeout', '30', '--dir', rundir, '--']
                  + command }}"
      async: 60
      poll: 0
      register: job
      when: inventory_hostname not in never_armed
    - name: Where it arms
      ansible.builtin.set_fact:
        go_at: "{{ go }}"
    - name: Hand the start instant over
      drivelab_start:
        fifos: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'go_at'))) }}"
        lead: 0.3
        arm_timeout: "{{ arm_timeout }}"
        run_dirs: "{{ run_dirs }}"
        duration: "{{ duration }}"
        fetch_to: "{{ fetch_to }}"
        end_grace: "{{ end_grace }}"
        db_after: "{{ db_after }}"
      delegate_to: localhost
      run_once: true
      register: start
    - name: Left out
      ansible.builtin.fail:
        msg: "not started: {{ start.left_out[inventory_hostname] }}"
      when: inventory_hostname in start.left_out
    - name: Wait
      ansible.builtin.async_status:
        jid: "{{ job.ansible_job_id }}"
      register: done
      until: done.finished
      retries: 60
      delay: 0.2
    - name: Keep the result
      ansible.builtin.copy:
        content: "{{ start | to_json }}"
        dest: "{{ base }}/start.json"
        mode: "0600"
      delegate_to: localhost
      run_once: true
"""


def play(
    tmp_path: Path, clients: int, never_armed=(), arm_timeout: int = 30, *,
    command=("/bin/sh", "-c", "echo started"), duration: int = 0, fetch: bool = False,
    end_grace: float = 10, db_after: dict | None = None,
):  # fmt: skip
    """The play on ``clients`` local hosts; with ``fetch``, the sessions bring each
    client's run folder back into tmp_path/fetched/<client>/ after a run of
    ``duration`` seconds."""
    base = tmp_path / "lab"
    hosts = {
        f"client{i}": {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "rundir": str(base / f"client{i}"), "go": str(base / f"client{i}" / ".go"),
        }
        for i in range(1, clients + 1)
    }  # fmt: skip
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {
        "vars": {"python": sys.executable, "wrapper": str(WRAPPER), "base": str(base),
                 "never_armed": list(never_armed), "arm_timeout": arm_timeout,
                 "command": list(command), "duration": duration, "end_grace": end_grace,
                 "db_after": db_after or {},
                 "fetch_to": str(tmp_path / "fetched") if fetch else "",
                 "run_dirs": {n: h["rundir"] for n, h in hosts.items()} if fetch else {}},
        "children": {"clients": {"hosts": hosts}}}}))  # fmt: skip
    book = tmp_path / "play.yml"
    book.write_text(PLAY)
    for h in hosts.values():
        Path(h["rundir"]).mkdir(parents=True)
    env = dict(
        os.environ, ANSIBLE_ACTION_PLUGINS=str(ACTIONS), ANSIBLE_CONFIG=str(REPO / "ansible.cfg")
    )
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(inv), str(book)], capture_output=True, text=True,
        env=env, cwd=REPO, timeout=300, check=False,
    )  # fmt: skip
    start = (
        json.loads((base / "start.json").read_text()) if (base / "start.json").exists() else None
    )
    records = {
        name: json.loads((Path(h["rundir"]) / "command.json").read_text())
        for name, h in hosts.items()
        if (Path(h["rundir"]) / "command.json").exists()
    }
    return proc, start, records


def test_every_armed_client_gets_the_same_instant_and_starts_no_earlier(tmp_path):
    proc, start, records = play(tmp_path, 3)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert start["left_out"] == {} and start["clients"] == ["client1", "client2", "client3"]
    assert start["start_at"] - start["chosen_at"] == pytest.approx(0.3, abs=0.001)
    assert start["sent_s"] <= 0.3, "handed over after the instant it names"
    # back to Ansible only after the instant: the next task's workers do not compete
    # with the clients' wake-up
    assert start["returned_at"] >= start["start_at"]
    assert sorted(records) == ["client1", "client2", "client3"]
    for name, rec in records.items():
        assert rec["rc"] == 0, (name, rec)
        assert rec["start_at"] == pytest.approx(start["start_at"]), name
        assert rec["chosen_at"] == pytest.approx(start["chosen_at"], abs=1e-5), name
        # armed before the choice, handed the line after it, started at or after it
        assert rec["armed_at"] <= start["chosen_at"] <= rec["go_at"] <= rec["start_at"], name
        assert rec["launched_at"] >= rec["start_at"], name
        assert (tmp_path / "lab" / name / "stdout.txt").read_text() == "started\n"
        assert not (tmp_path / "lab" / name / ".go").exists(), "the pipe is removed"


def test_a_client_that_never_arms_is_left_out_and_named_and_the_others_start(tmp_path):
    proc, start, records = play(tmp_path, 3, never_armed=["client2"], arm_timeout=2)
    assert proc.returncode == 2, proc.stdout[-3000:]  # a host failed
    go = tmp_path / "lab" / "client2" / ".go"
    why = f"no named pipe {go} after 2 s: the wrapper did not arm"
    assert start["left_out"] == {"client2": why}
    assert start["clients"] == ["client1", "client3"]
    assert f"not started: {why}" in proc.stdout
    assert "client2" not in records
    assert [records[c]["rc"] for c in ("client1", "client3")] == [0, 0]


def test_no_client_armed_fails_the_task_naming_each(tmp_path):
    proc, start, records = play(tmp_path, 2, never_armed=["client1", "client2"], arm_timeout=1)
    assert proc.returncode == 2 and start is None and records == {}
    assert "no client armed: client1: no named pipe " in proc.stdout


def test_a_session_is_ssh_with_the_hosts_settings_and_its_values_as_arguments():
    """The script is a constant; the pipe path (whatever it holds) and the timeout reach
    it as arguments, quoted once for the remote shell by shlex.join; sudo -n when the
    host becomes root as another user."""
    fifo = "/var/lib/drivelab-client/c1/runs/x y;$(reboot)/.go"
    hv = {"ansible_host": "10.0.0.5", "ansible_port": 2222, "ansible_user": "drivelab",
          "ansible_ssh_private_key_file": "/k/id", "ansible_ssh_common_args":
          "-o UserKnownHostsFile=/k/known_hosts -o StrictHostKeyChecking=yes"}  # fmt: skip
    argv = drivelab_start.session_argv(
        "c1", hv, fifo, 120, become=True, run_dir="/var/lib/x/runs/ab", polls=200
    )
    assert argv[:-2] == [
        "ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20",
        "-o", "UserKnownHostsFile=/k/known_hosts", "-o", "StrictHostKeyChecking=yes",
        "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
        "-i", "/k/id", "-p", "2222", "-l", "drivelab",
    ]  # fmt: skip
    assert argv[-2] == "10.0.0.5"
    remote = shlex.split(argv[-1])  # as the remote shell parses it
    assert remote == ["sudo", "-n", "sh", "-c", drivelab_start.SESSION_SH, "drivelab-start",
                      fifo, "120", "/var/lib/x/runs/ab", "200"]  # fmt: skip
    root = drivelab_start.session_argv("c1", dict(hv, ansible_user="root"), fifo, 120, become=True)
    assert shlex.split(root[-1])[0] == "sh"
    # no ansible_host: the inventory name
    assert drivelab_start.session_argv("c1", {}, fifo, 5, become=False)[-2] == "c1"
    local = drivelab_start.session_argv(
        "c1", {"ansible_connection": "local"}, fifo, 5, become=False
    )
    assert local == ["sh", "-c", drivelab_start.SESSION_SH, "drivelab-start", fifo, "5", "", "0"]


def test_the_sessions_bring_the_outputs_back_as_soon_as_the_run_ends(tmp_path):
    """With run folders and a duration, the same sessions stay open through the run: at
    its planned end each waits for its wrapper's command.json and sends the folder
    packed, which the controller unpacks. The folder stays on the client (the fetch
    entry point removes it, after the live view's follower has read rc.txt)."""
    command = ("/bin/sh", "-c", "sleep 1; echo started; echo said >&2")
    proc, start, _ = play(tmp_path, 2, command=command, duration=1, fetch=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert start["fetched"] == ["client1", "client2"] and start["not_fetched"] == {}
    # back within a fraction of a second of the planned end, not at the next whole second
    assert 0 <= start["fetched_s"] < 1.0, start
    for name in ("client1", "client2"):
        got = tmp_path / "fetched" / name
        record = json.loads((got / "command.json").read_text())
        assert record["rc"] == 0 and record["start_at"] == pytest.approx(start["start_at"])
        assert (got / "stdout.txt").read_text() == "started\n"
        assert (got / "stderr.txt").read_text() == "said\n"
        assert (tmp_path / "lab" / name / "rc.txt").read_text() == "rc=0\n"


#: what the DB host's session is asked after the run: a port no server listens on here
NO_SERVER = {"port": 1, "socket": "/nonexistent", "sql": "SELECT 1 AS one", "cluster": "main",
             "major": "15", "since": "1795234444.5"}  # fmt: skip


def test_the_db_hosts_session_runs_the_snapshots_own_code_and_says_why_it_read_nothing():
    """The DB host's session (python3 with module_utils drivelab_snapshot and the two it
    imports, loaded from the roles' files) waits until told to go, then runs the same
    code as the module drivelab_pg_snapshot: here psql finds no server, and the answer
    is the module's own failure message, which leaves the read to the play after."""
    params = drivelab_start.snapshot_params(NO_SERVER)
    assert params["port"] == 1 and params["since"] == 1795234444.5 and params["checkpoint_log"]
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    argv = drivelab_start.db_session_argv("db", local, params, become=False)
    assert argv[:2] == [sys.executable, "-c"]
    session = drivelab_start.DbSnapshot(argv)
    assert session.proc.stdout.readline() == b"ready\n"  # loaded, waiting
    doc, why = session.read()
    assert doc == {} and why.startswith("snapshot of the server on port 1: "), why
    # told anything but go, it ends without reading
    quiet = drivelab_start.DbSnapshot(argv)
    out, _ = quiet.proc.communicate(b"stop\n", timeout=30)
    assert out == b"ready\n" and quiet.proc.returncode == 0


def test_the_db_hosts_python_may_be_a_command_line_as_ansible_takes_it():
    """An inventory's interpreter "/usr/bin/env python3" (a command line, which Ansible
    runs as such) opens the session as it would the module: not a program of that name,
    which fails to start and leaves the read to the play after."""
    params = drivelab_start.snapshot_params(NO_SERVER)
    env_python = {"ansible_connection": "local",
                  "ansible_python_interpreter": f"/usr/bin/env {sys.executable}"}  # fmt: skip
    argv = drivelab_start.db_session_argv("db", env_python, params, become=False)
    assert argv[:3] == ["/usr/bin/env", sys.executable, "-c"], argv[:3]
    session = drivelab_start.DbSnapshot(argv)
    assert session.proc.stdout.readline() == b"ready\n"  # it started, and waits
    out, _ = session.proc.communicate(b"stop\n", timeout=30)
    assert session.proc.returncode == 0, out
    # Ansible's own discovery ("auto", a template) is not a command: python3 is run
    for value in ("auto_silent", "{{ discovered_interpreter_python }}"):
        hv = {"ansible_connection": "local", "ansible_python_interpreter": value}
        assert drivelab_start.db_session_argv("db", hv, params, become=False)[:2] == [
            "python3", "-c"]  # fmt: skip


def test_a_db_host_that_cannot_read_leaves_the_start_and_its_fetch_as_they_were(tmp_path):
    """Every client's outputs came back, so the DB host's session is asked; its failure
    (no server) is named and leaves the start and the fetch as they were (the play after
    then reads the counters). That it is not asked while outputs are missing:
    test_a_run_that_does_not_end_in_time_is_left_to_ansibles_own_fetch."""
    command = ("/bin/sh", "-c", "echo started")
    db_after = {"host": "client1", "params": NO_SERVER}
    proc, start, _ = play(tmp_path, 2, command=command, duration=1, fetch=True, db_after=db_after)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert start["fetched"] == ["client1", "client2"] and start["db_after"] == {}
    assert start["db_after_why"].startswith("snapshot of the server on port 1: "), start
    assert start["db_after_s"] is not None and start["db_after_s"] < 10


def test_a_run_that_does_not_end_in_time_is_left_to_ansibles_own_fetch(tmp_path):
    """A client whose wrapper has not ended end_grace seconds after the planned end is
    named in not_fetched and its run folder stays for the fetch entry point; the others
    are brought back. The DB host is not asked for its counters: client2's pgbench may
    still be running (the play after reads them once it has ended)."""
    command = ("/bin/sh", "-c", 'case "$(/bin/pwd)" in */client2) sleep 4;; esac; echo started')
    proc, start, records = play(
        tmp_path, 2, command=command, duration=1, fetch=True, end_grace=0.5,
        db_after={"host": "client1", "params": NO_SERVER},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert start["fetched"] == ["client1"]
    assert start["not_fetched"] == {"client2": "the wrapper did not end"}
    assert start["db_after"] == {} and start["db_after_s"] is None
    assert start["db_after_why"] == "not every client's outputs came back: read in the play after"
    assert (tmp_path / "fetched" / "client1" / "stdout.txt").read_text() == "started\n"
    assert not (tmp_path / "fetched" / "client2").exists()
    # client2's folder is still there, its run complete (Ansible waited for it)
    assert records["client2"]["rc"] == 0


def libfaketime() -> str:
    """libfaketime (Debian package faketime, which make setup installs)."""
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    if not found:
        pytest.fail("libfaketime is missing: apt-get install faketime (make setup does)")
    return str(found[0])


def clock_ahead(seconds: float) -> list[str]:
    """A command prefix whose processes read a clock ``seconds`` ahead (libfaketime)."""
    return ["env", f"LD_PRELOAD={libfaketime()}", f"FAKETIME={seconds:+}"]


def test_the_clock_exchange_measures_a_client_clock_300_ms_ahead(tmp_path):
    """Real sessions (the script drivelab_start runs on every client), one of them on a
    clock 300 ms ahead: the exchange over the session measures its offset within the
    bound it gives, and the other's offset as within its bound (no correction)."""
    sessions, left_out = {}, {}
    for host, prefix in (("ahead", clock_ahead(0.3)), ("same", [])):
        fifo = tmp_path / f"{host}.go"
        os.mkfifo(fifo)
        argv = [*prefix, "sh", "-c", drivelab_start.SESSION_SH, "drivelab-start", str(fifo),
                "5", "", "0"]  # fmt: skip
        sessions[host] = drivelab_start.Session(host, argv)
    try:
        drivelab_start.ActionModule._wait(sessions, "armed", time.time() + 10, left_out)
        drivelab_start.ActionModule._clocks(sessions, left_out)
        assert left_out == {} and sorted(sessions) == ["ahead", "same"]
        ahead, same = sessions["ahead"], sessions["same"]
        assert abs(ahead.clock[1] - 0.3) <= ahead.bound() + 0.001, ahead.clock
        assert ahead.bound() < 0.05 and ahead.applied() == ahead.clock[1]
        assert abs(same.clock[1]) <= same.bound() and same.applied() == 0.0
    finally:
        for s in sessions.values():
            s.stop()


def test_a_wrapper_given_its_offset_starts_at_the_controllers_instant(tmp_path):
    """pgbench-at on a clock 300 ms ahead, handed "START_AT CHOSEN_AT 0.3 BOUND": it
    waits for START_AT + 0.3 on its own clock, which is START_AT on the controller's,
    and records the instant, the offset and the bound."""
    fifo, rundir = tmp_path / "go", tmp_path / "run"
    proc = subprocess.Popen(
        [*clock_ahead(0.3), sys.executable, str(WRAPPER), "--go", str(fifo), "--arm-timeout",
         "20", "--dir", str(rundir), "--", "/bin/sh", "-c", "echo started"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.time() + 20
    while not fifo.exists() and time.time() < deadline:
        time.sleep(0.02)
    chosen = time.time()
    start_at = round(chosen + 0.5, 3)
    with open(fifo, "w", encoding="ascii") as fh:
        fh.write(f"{start_at:.3f} {chosen:.6f} 0.300000 0.000400 0.300100\n")
    proc.wait(timeout=30)
    woke_here = time.time()
    record = json.loads((rundir / "command.json").read_text())
    assert record["rc"] == 0, record
    assert record["start_at"] == pytest.approx(start_at)
    assert (record["clock_offset_s"], record["clock_bound_s"]) == (0.3, 0.0004)
    assert record["clock_measured_s"] == 0.3001
    # launched on its own clock at the instant plus its offset: the controller's instant
    assert start_at + 0.3 <= record["launched_at"] < start_at + 0.3 + 0.1
    assert woke_here >= start_at
