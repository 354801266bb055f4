"""The lab's lease (issue #24): its rule book on a real file (atomic take by competing
processes, renewal, takeover of a stale or gone holder, release), the module through a
real ``ansible`` call, ``drivelab run``'s side of it (refusal in one line, --wait, a gone
holder taken over, the heartbeat losing it), a playbook stopped when the lease is lost,
and a run measured while it was lost stored as failed. The lab tests
(tests/lab/test_run.py) show the same on the DB host of a lab."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from collector.ansible_plugins.filter import drivelab as filters
from collector.errors import DrivelabError
from collector.hosts import lease, playbook
from tests.unit.hostcode import module_util
from tests.unit.test_gather import gather, make_run, two

rules = module_util("drivelab", "drivelab_lease")


def holder(token: str, **kw) -> dict:
    return {"token": token, "user": "ann", "controller": "ctl-a", "controller_id": "id-a",
            "pid": 4242, "purpose": "drivelab run", "scenario": "seed", "cell": None,
            **kw}  # fmt: skip


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# ---------------------------------------------------------------------- the rule book


def test_one_holder_at_a_time_renewed_and_released(tmp_path):
    path = str(tmp_path / "state" / "lease.json")
    first = rules.take(path, holder("a"), 120, expected_seconds=600, now=1000.0)
    assert first["held"] and first["lease"]["since"] == 1000.0
    assert first["lease"]["expected_end"] == 1600.0
    refused = rules.take(path, holder("b", user="bob"), 120, now=1010.0)
    assert not refused["held"] and refused["refusal"] == rules.HELD
    assert refused["lease"]["user"] == "ann"
    renewed = rules.take(path, {"token": "a", "cell": "nvme-x"}, 120, must_hold=True, now=1100.0)
    assert renewed["held"]
    assert renewed["lease"]["since"] == 1000.0  # the same lease, renewed
    assert renewed["lease"]["renewed"] == 1100.0 and renewed["lease"]["cell"] == "nvme-x"
    assert renewed["lease"]["user"] == "ann" and renewed["lease"]["expected_end"] == 1600.0
    assert rules.release(path, "b") == {
        "released": False,
        "lease": renewed["lease"],
        "changed": False,
    }
    assert rules.read(path)["pid"] == 4242
    assert rules.release(path, "a")["released"]
    assert rules.read(path) is None
    assert rules.take(path, holder("b"), 120, now=1200.0)["held"]


def test_a_stale_holder_is_taken_over_after_its_time_to_live_and_knows_it_lost(tmp_path):
    path = str(tmp_path / "lease.json")
    rules.take(path, holder("a"), 120, now=1000.0)
    # renewed last at 1000: valid to 1120 by the host's clock
    assert rules.take(path, holder("b"), 60, now=1119.0)["refusal"] == rules.HELD
    took = rules.take(path, holder("b"), 60, now=1121.0)
    assert took["held"]
    assert took["took_over"]["record"]["renewed"] == 1000.0
    assert took["took_over"]["why"] == "not renewed for 121 s (time to live 120 s)"
    lost = rules.take(path, {"token": "a"}, 120, must_hold=True, now=1130.0)
    assert not lost["held"] and lost["refusal"] == rules.LOST
    assert lost["why"].startswith("it is now held by drivelab run of scenario 'seed' by ann@ctl-a")
    assert rules.read(path)["ttl"] == 60.0  # b's: a check never takes it back


def test_a_takeover_names_the_token_it_replaces(tmp_path):
    """The controller saw the holder's process gone: only that holder is replaced, not one
    that took the lease in between, and only by a holder of the same controller (a clone
    of it has its host name, not its controller_id: it waits until the holder is stale
    by the host's clock)."""
    path = str(tmp_path / "lease.json")
    rules.take(path, holder("a"), 120, now=1000.0)
    gone = rules.digest("a")
    assert rules.take(path, holder("c"), 120, takeover="x", now=1001.0)["refusal"] == rules.HELD
    clone = holder("c", controller_id="id-clone")
    assert rules.take(path, clone, 120, takeover=gone, now=1001.0)["refusal"] == rules.HELD
    took = rules.take(path, holder("c"), 120, takeover=gone, now=1001.0)
    assert took["held"] and took["took_over"]["why"] == "its process 4242 on ctl-a is gone"


def test_the_file_keeps_a_digest_of_the_token_and_the_digest_holds_nothing(tmp_path):
    """The lease file is readable by every user of the DB host: what it holds cannot
    renew or release the lease, only the token its holder keeps can."""
    path = str(tmp_path / "lease.json")
    rules.take(path, holder("secret-token-a"), 120, now=1000.0)
    text = Path(path).read_text()
    assert "secret-token-a" not in text
    seen = json.loads(text)["token_sha256"]
    assert rules.release(path, seen)["released"] is False
    assert (
        rules.take(path, {"token": seen}, 120, must_hold=True, now=1001.0)["refusal"] == rules.LOST
    )
    assert rules.take(path, {"token": "secret-token-a"}, 120, must_hold=True, now=1002.0)["held"]
    assert rules.release(path, "secret-token-a")["released"]


def test_a_record_of_before_the_digest_is_still_its_holders(tmp_path):
    """A lease written by the release before (the token itself in the file) is renewed by
    its token and from then on keeps only the digest."""
    path = tmp_path / "lease.json"
    path.write_text(json.dumps({**holder("old"), "since": 1.0, "renewed": 1000.0, "ttl": 120.0}))
    assert rules.take(str(path), holder("new"), 120, now=1001.0)["refusal"] == rules.HELD
    assert rules.take(str(path), {"token": "old"}, 120, must_hold=True, now=1002.0)["held"]
    doc = json.loads(path.read_text())
    assert "token" not in doc and doc["token_sha256"] == rules.digest("old")


def test_a_released_lease_is_lost_to_its_run(tmp_path):
    path = str(tmp_path / "lease.json")
    out = rules.take(path, {"token": "a"}, 120, must_hold=True, now=1.0)
    assert out == {"held": False, "refusal": rules.LOST, "lease": None, "changed": False,
                   "why": "it was released"}  # fmt: skip
    assert not os.path.exists(path)


def _race(path: str, token: str, start: float, out) -> None:
    while time.time() < start:
        pass
    out.put((token, rules.take(path, holder(token), 120)["held"]))


def test_competing_processes_one_takes_it(tmp_path):
    """Eight processes take at the same instant: one holds it, seven are refused, and the
    file names the winner (flock around read, write to a temporary file, rename)."""
    path = str(tmp_path / "lease.json")
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    start = time.time() + 0.5
    procs = [ctx.Process(target=_race, args=(path, f"t{i}", start, out)) for i in range(8)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=30) for _ in procs)
    for p in procs:
        p.join()
    winners = [t for t, held in results.items() if held]
    assert len(winners) == 1, results
    assert rules.read(path)["token_sha256"] == rules.digest(winners[0])
    assert sorted(os.listdir(tmp_path)) == ["lease.json", "lease.json.lock"]  # no temporary left


def test_describe_says_who_what_since_and_the_expected_end():
    rec = holder("a", cell="nvme-xfs-tablespace-s2-h2-tpcb", since=1795534382.0,
                 expected_end=1795535000.0, renewed=1795534900.0)  # fmt: skip
    assert rules.describe(rec, now=1795534910.0) == (
        "drivelab run of scenario 'seed', cell nvme-xfs-tablespace-s2-h2-tpcb by ann@ctl-a"
        " (pid 4242), since 2026-11-24 15:33:02 UTC, expected to end about 2026-11-24"
        " 15:43:20 UTC, renewed 10 s ago"
    )


# ---------------------------------------------------------------------- the controller


def test_gone_is_a_dead_process_of_this_controller_only():
    me, ident = socket.gethostname(), filters.controller_id()
    pid = os.getpid()
    alive = {"controller": me, "controller_id": ident, "pid": pid,
             "pid_start": filters.pid_start(pid)}  # fmt: skip
    assert not lease.gone(alive)
    assert not filters.drivelab_lease_gone(alive)
    assert lease.gone({"controller": me, "controller_id": ident, "pid": dead_pid()})
    assert filters.drivelab_lease_gone(
        {"controller": me, "controller_id": ident, "pid": dead_pid()}
    )
    assert lease.gone(dict(alive, pid_start=alive["pid_start"] - 1))  # the pid used again
    assert not lease.gone({"controller": "elsewhere", "controller_id": "x", "pid": dead_pid()})
    # a clone of this controller: its host name, another machine and boot
    clone = {"controller": me, "controller_id": "clone", "pid": dead_pid()}
    assert not lease.gone(clone) and not filters.drivelab_lease_gone(clone)
    assert not lease.gone({"controller": me, "pid": dead_pid()})  # a record without the id


class Local:
    """The rule book on a local file, as the SSH transport runs it on the host."""

    cheap = True

    def __init__(self, path: Path) -> None:
        self.path = path
        self.calls = 0
        self.fail = False

    def call(self, request: dict) -> dict:
        self.calls += 1
        if self.fail:
            raise DrivelabError("lab lease: cannot reach root@10.213.0.2:22: timed out")
        return rules.request(json.loads(json.dumps(request)))

    def close(self) -> None:
        pass


def make_lease(tmp_path, *, ttl=120.0, said=None, **kw) -> lease.Lease:
    st = lease.Settings(str(tmp_path / "lease.json"), ttl, 3600.0)
    said = said if said is not None else []
    return lease.Lease(Local(tmp_path), st, "dbhost", scenario="seed", say=said.append, **kw)


def test_a_second_run_is_refused_in_one_line_naming_the_first(tmp_path):
    first = make_lease(tmp_path)
    first.take(expected_seconds=900)
    second = make_lease(tmp_path)
    with pytest.raises(DrivelabError) as err:
        second.take()
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("lab lease: dbhost is in use: drivelab run of scenario 'seed' by ")
    assert f"(pid {os.getpid()})" in text and "expected to end about" in text
    assert text.endswith("nothing was touched (--wait waits for it; drivelab status shows it)")


def test_wait_polls_until_the_holder_releases(tmp_path):
    first = make_lease(tmp_path)
    first.take()
    said: list[str] = []
    naps = []

    def nap(seconds):
        naps.append(seconds)
        if len(naps) == 3:
            first.release()

    second = make_lease(tmp_path, said=said, sleep=nap)
    second.take(wait=True)
    assert naps == [lease.WAIT_POLL_S] * 3
    assert said[0].startswith("lab lease: dbhost is in use: drivelab run of scenario 'seed'")
    assert said[0].endswith("; waiting for it (--wait)")
    assert len([s for s in said if "waiting" in s]) == 1  # said once per holder
    assert said[-1].startswith("lab lease: dbhost held by this run (taken in ")
    assert rules.read(str(tmp_path / "lease.json"))["token_sha256"] == rules.digest(second.token)


def test_a_holder_whose_process_is_gone_is_taken_over_at_once_and_said(tmp_path):
    path = str(tmp_path / "lease.json")
    pid = dead_pid()
    rules.take(path, holder("old", controller=socket.gethostname(),
                            controller_id=filters.controller_id(), pid=pid), 120)  # fmt: skip
    said: list[str] = []
    run = make_lease(tmp_path, said=said)
    run.take()
    line = next(s for s in said if "took" in s)
    assert line.startswith(
        f"lab lease: took dbhost over from drivelab run of scenario 'seed' by ann@{socket.gethostname()} (pid {pid})"
    )
    assert line.endswith(f": its process {pid} on {socket.gethostname()} is gone")
    fact = run.fact()
    assert fact["took_over"]["record"]["pid"] == pid and "token" not in fact["took_over"]["record"]
    assert fact["took_over"]["why"].startswith(f"its process {pid}")


def test_the_heartbeat_renews_and_a_lease_taken_away_is_lost(tmp_path):
    run = make_lease(tmp_path)
    run.take()
    run.cell = "nvme-x"
    run.renew()
    assert run.renewals == 1 and rules.read(str(tmp_path / "lease.json"))["cell"] == "nvme-x"
    # another controller took it (this one's renewals did not arrive for the time to live)
    rec = rules.read(str(tmp_path / "lease.json"))
    rules.take(str(tmp_path / "lease.json"), holder("thief", user="bob"), 120,
               now=rec["renewed"] + 121)  # fmt: skip
    run.renew()
    assert run.lost.is_set()
    assert run.why.startswith("dbhost: this run lost the lab's lease: it is now held by ")
    assert "bob@ctl-a" in run.why
    with pytest.raises(playbook.LeaseLost):
        run.check()


def test_renewals_that_do_not_arrive_for_the_time_to_live_lose_it(tmp_path):
    clock = [0.0]
    run = make_lease(tmp_path, ttl=60.0, clock=lambda: clock[0])
    run.take()
    run.transport.fail = True
    clock[0] = 59.0
    run.renew()
    assert not run.lost.is_set()  # one missed renewal is not a lost lease
    clock[0] = 61.0
    run.renew()
    assert run.lost.is_set() and "not renewed for 61 s (lab lease: cannot reach" in run.why


def test_a_stage_starts_only_after_a_renewal_and_a_lease_taken_away_starts_nothing(tmp_path):
    """Before each playbook the run renews its lease over the heartbeat's connection and
    hands the instant to the playbook (which then skips its own check on the host); a
    lease found taken at that renewal starts nothing, naming the new holder."""
    run = make_lease(tmp_path)
    run.take()
    with playbook.guarded_by(run):
        before = time.time()
        _, extra = playbook._leased("pgbench", {"x": 1})
        assert extra["x"] == 1 and extra["drivelab_lease_token"] == run.token
        assert before <= extra["drivelab_lease_renewed_at"] <= time.time()
        assert run.renewals == 1
        rec = rules.read(str(tmp_path / "lease.json"))
        rules.take(str(tmp_path / "lease.json"), holder("thief", user="bob"), 120,
                   now=rec["renewed"] + 121)  # fmt: skip
        with pytest.raises(
            playbook.LeaseLost, match=r"^database: not started: dbhost: this run lost"
        ) as err:
            playbook._leased("database", None)
    assert "bob@ctl-a" in str(err.value)


def test_without_a_cheap_way_to_the_host_each_playbook_checks_the_lease_itself(tmp_path):
    run = make_lease(tmp_path)
    run.take()
    run.transport.cheap = False  # the Ansible transport: a second a call
    with playbook.guarded_by(run):
        _, extra = playbook._leased("pgbench", None)
    assert extra == {"drivelab_lease_token": run.token}
    assert run.renewals == 0


PAUSE = """\
- name: A long stage
  hosts: localhost
  gather_facts: false
  tasks:
    - name: The lease's token
      ansible.builtin.debug:
        msg: "token={{ drivelab_lease_token }}"

    - name: Wait
      ansible.builtin.pause:
        seconds: 120
"""


def test_a_playbook_running_when_the_lease_is_lost_is_stopped_and_fails_with_the_reason(
    tmp_path, monkeypatch
):
    """A real ansible-playbook of 120 s: stopped within seconds of the loss, the reason
    among its failures (so a measured run is stored failed with it), and LeaseLost raised;
    the token went to the playbook as drivelab_lease_token."""
    monkeypatch.setenv("DRIVELAB_RESULTS", str(tmp_path / "results"))
    book = tmp_path / "pause.yml"
    book.write_text(PAUSE)
    run = make_lease(tmp_path)
    run.take()
    timer = threading.Timer(3.0, run.lose, args=("dbhost: this run lost the lab's lease: test",))
    started = time.monotonic()
    with playbook.guarded_by(run):
        timer.start()
        with pytest.raises(playbook.LeaseLost) as err:
            playbook.run_playbook(os.path.relpath(book, playbook.PLAYBOOKS), what="pgbench")
        seconds = time.monotonic() - started
        with pytest.raises(playbook.LeaseLost, match="not started"):
            playbook.run_playbook(os.path.relpath(book, playbook.PLAYBOOKS), what="database")
    assert seconds < 40, seconds
    assert str(err.value).startswith("pgbench: dbhost: this run lost the lab's lease: test (log: ")
    assert err.value.failures[-1]["kind"] == "lease"
    log = next((tmp_path / "results" / "logs").glob("*-pgbench.log")).read_text()
    assert f"token={run.token}" in log


CHECKED = """\
- name: A stage
  hosts: localhost
  gather_facts: false
  tasks:
    - name: What it was told
      ansible.builtin.debug:
        msg: "checked={{ drivelab_inventory_checked | default(false) }}"
"""


def test_a_stage_skips_its_preflight_only_for_the_inventory_an_earlier_stage_checked(
    tmp_path, monkeypatch
):
    """Real ansible-playbook runs under one lease: the first stage is told nothing; the
    next one, with the same inventory, drivelab_inventory_checked; after the inventory or
    the group_vars beside it changed, nothing again (it checks for itself), then the new
    one counts."""
    monkeypatch.setenv("DRIVELAB_RESULTS", str(tmp_path / "results"))
    book = tmp_path / "stage.yml"
    book.write_text(CHECKED)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n")
    run = make_lease(tmp_path)
    run.take()

    def told() -> str:
        res = playbook.run_playbook(
            os.path.relpath(book, playbook.PLAYBOOKS), inventory=inventory, what="pgbench"
        )
        return "checked=True" if "checked=True" in res.log.read_text() else "checked=False"

    with playbook.guarded_by(run):
        assert told() == "checked=False"
        assert told() == "checked=True"
        inventory.write_text(inventory.read_text() + "  vars:\n    changed: true\n")
        assert told() == "checked=False"
        assert told() == "checked=True"
        (tmp_path / "group_vars").mkdir()  # read by Ansible with the file beside it
        (tmp_path / "group_vars" / "all.yml").write_text("changed: again\n")
        assert told() == "checked=False"
    with playbook.guarded_by(run):  # another run: checks for itself
        assert told() == "checked=False"


def test_a_run_measured_while_the_lease_was_lost_is_stored_failed_with_the_reason(tmp_path):
    why = "dbhost: this run lost the lab's lease: it is now held by drivelab run by bob@ctl-b"
    failures = [{"kind": "lease", "host": "dbhost", "task": "lab lease", "msg": why}]
    g = gather.gather_run(make_run(tmp_path, two(), failures=failures))
    assert g.run.status.value == "failed"
    assert g.run.reason == why


# ---------------------------------------------------------------------- the module, by Ansible


def test_the_module_through_ansible_refuses_in_one_line_and_releases(tmp_path):
    """AnsibleTransport (ansible ad hoc, the module and the rule book as a host runs them)
    on this machine: a take, a second holder refused with the module's one line, a
    release."""
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"db": {"hosts": {"dbhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "drivelab_lease_file": str(tmp_path / "state" / "lease.json"),
    }}}}}}))  # fmt: skip
    inventory = yaml.safe_load(inv.read_text())
    st = lease.settings(inventory, "dbhost")
    assert (st.file, st.ttl, st.renew_every) == (
        str(tmp_path / "state" / "lease.json"),
        120.0,
        20.0,
    )
    transport = lease.transport_for(inv, inventory, "dbhost")
    assert isinstance(transport, lease.AnsibleTransport)  # no key, no known_hosts
    said: list[str] = []
    first = lease.Lease(transport, st, "dbhost", scenario="seed", say=said.append)
    first.take(expected_seconds=60)
    res = transport.call({"op": "take", "path": st.file, "ttl": 120.0,
                          "holder": holder("other", user="bob")})  # fmt: skip
    assert res["failed"] and res["refusal"] == rules.HELD
    assert res["msg"].startswith("dbhost is in use: drivelab run of scenario 'seed' by ")
    assert "\n" not in res["msg"]
    assert lease.query(inv, inventory)["text"].startswith("drivelab run of scenario 'seed'")
    first.release()
    assert lease.query(inv, inventory) == {"db_host": "dbhost", "lease": None, "stale": None,
                                           "text": "free"}  # fmt: skip


# ------------------------------------------ the entry point `lease` of a playbook called directly

LEASE_BOOK = """\
- name: The lab's lease
  hosts: db
  gather_facts: false
  any_errors_fatal: true
  tasks:
    - name: Hold it
      ansible.builtin.import_role:
        name: drivelab
        tasks_from: lease
      vars:
        drivelab_lease_state: held
        drivelab_lease_purpose: ansible-playbook book.yml

- name: While held
  hosts: db
  gather_facts: false
  tasks:
    - name: The lease as this playbook holds it
      ansible.builtin.command: cp {{ drivelab_lease_file }} {{ drivelab_lease_file }}.held
      changed_when: true

- name: The lab's lease, released
  hosts: db
  gather_facts: false
  tasks:
    - name: Release it
      ansible.builtin.import_role:
        name: drivelab
        tasks_from: lease
      vars:
        drivelab_lease_state: absent
"""


def run_lease_book(tmp_path: Path) -> tuple[subprocess.CompletedProcess, list[dict]]:
    inventory = {"all": {"children": {"db": {"hosts": {"dbhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "drivelab_lease_file": str(tmp_path / "lease.json"),
    }}}}}}  # fmt: skip
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "book.yml").write_text(LEASE_BOOK)
    failures = tmp_path / "failures.jsonl"
    failures.unlink(missing_ok=True)
    repo = Path(__file__).resolve().parents[2]
    env = dict(
        os.environ, ANSIBLE_CONFIG=str(repo / "ansible.cfg"), DRIVELAB_FAILURES=str(failures)
    )
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
         str(tmp_path / "book.yml")],
        cwd=repo, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    lines = failures.read_text().splitlines() if failures.exists() else []
    return proc, [json.loads(line) for line in lines]


def task_output(stdout: str, task: str) -> str:
    """What ansible-playbook printed for the task whose name starts with ``task`` (from its
    banner to the next one), its lines joined as they were wrapped."""
    text = stdout.split(f"TASK [drivelab : {task}", 1)[1].split("TASK [", 1)[0]
    return " ".join(text.split()).replace("''", "'")


def test_a_playbook_takes_a_free_lease_in_one_module_run_and_releases_it(tmp_path):
    proc, failures = run_lease_book(tmp_path)
    assert proc.returncode == 0 and not failures, proc.stdout[-3000:]
    # the outright take held it: the hold that follows a refusal did not run
    assert "ok: [dbhost]" in task_output(proc.stdout, "Take the lab's lease for this playbook")
    assert "skipping: [dbhost]" in task_output(proc.stdout, "Hold the lab's lease, or refuse")
    held = json.loads((tmp_path / "lease.json.held").read_text())
    record = held.get("holder", held)
    assert record["purpose"] == "ansible-playbook book.yml", held
    assert record["controller"] == socket.gethostname()
    assert record["controller_id"] == filters.controller_id()
    assert "token" not in record and len(record["token_sha256"]) == 64  # its digest only
    assert rules.query(str(tmp_path / "lease.json"))["lease"] is None  # released at the end


def test_a_playbook_is_refused_in_one_line_while_a_live_holder_has_the_lease(tmp_path):
    path = str(tmp_path / "lease.json")
    rules.take(path, holder("run-1", controller=socket.gethostname(), pid=os.getpid()), 120)
    proc, failures = run_lease_book(tmp_path)
    assert proc.returncode != 0, proc.stdout[-3000:]
    (failure,) = failures
    assert failure["refusal"] == "lease_held", failure
    assert failure["msg"].startswith("dbhost is in use: drivelab run of scenario 'seed' by ann@")
    assert "\n" not in failure["msg"]
    assert not (tmp_path / "lease.json.held").exists()  # nothing after the lease play ran
    assert rules.query(path)["lease"]["pid"] == os.getpid()  # still the run's


def test_a_playbook_takes_the_lease_over_from_a_holder_whose_process_is_gone(tmp_path):
    path = str(tmp_path / "lease.json")
    pid = dead_pid()
    rules.take(path, holder("run-1", controller=socket.gethostname(),
                            controller_id=filters.controller_id(), pid=pid), 120)  # fmt: skip
    proc, failures = run_lease_book(tmp_path)
    assert proc.returncode == 0 and not failures, proc.stdout[-3000:]
    said = task_output(proc.stdout, "Say a takeover")
    assert "dbhost: took the lab's lease over from drivelab run of scenario 'seed'" in said, said
    assert f"its process {pid} on {socket.gethostname()} is gone" in said, said
    held = json.loads((tmp_path / "lease.json.held").read_text())
    assert held.get("holder", held)["token_sha256"] != rules.digest("run-1"), held
    assert rules.query(path)["lease"] is None  # released at the end


def _lease_plays(tmp_path, **extra) -> dict[str, str]:
    """pgbench.yml's two lease plays and the hosts Ansible would run each on, given
    these extra variables (``--list-hosts``: nothing runs)."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n    db: {hosts: {dbhost: {}}}\n    clients: {hosts: {client1: {}}}\n"
    )
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
            "--list-hosts", "-e", json.dumps(extra),
            str(Path(playbook.PLAYBOOKS) / "pgbench.yml")]  # fmt: skip
    out = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=playbook.REPO)
    plays, current = {}, None
    for line in map(str.strip, out.stdout.splitlines()):
        if line.startswith("play #"):  # play #2 (db): The lab's lease<TAB>TAGS: [always]
            current = line.split("): ", 1)[1].split("\t")[0].strip()
            plays[current] = ""
        elif current and line and not line.startswith(("pattern:", "hosts (")):
            plays[current] += line
    return {name: hosts for name, hosts in plays.items() if "lease" in name}


def test_pgbench_yml_skips_its_lease_plays_only_for_a_lease_drivelab_run_just_renewed(tmp_path):
    """Per repetition, the lease plays are not run when drivelab run renewed its lease
    within the role's freshness window (its default, which the play repeats) and gives
    its token; a playbook called directly, or one whose renewal is older, runs them."""
    defaults = yaml.safe_load((playbook.REPO / "roles/drivelab/defaults/main.yml").read_text())
    fresh = float(defaults["drivelab_lease_fresh_seconds"])
    hold, release = "The lab's lease", "The lab's lease, released"
    run = {"drivelab_lease_token": "a-token"}
    assert _lease_plays(tmp_path) == {hold: "dbhost", release: "dbhost"}
    assert _lease_plays(tmp_path, **run, drivelab_lease_renewed_at=time.time()) == {
        hold: "",
        release: "",
    }
    within = time.time() - fresh + 5
    assert _lease_plays(tmp_path, **run, drivelab_lease_renewed_at=within)[hold] == ""
    older = time.time() - fresh - 5
    assert _lease_plays(tmp_path, **run, drivelab_lease_renewed_at=older) == {
        hold: "dbhost",
        release: "",
    }
    # no renewal given (no heartbeat connection): the role's own check runs
    assert _lease_plays(tmp_path, **run) == {hold: "dbhost", release: ""}
