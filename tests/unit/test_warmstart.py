"""ansible-playbook started ahead of its stage (collector.hosts.warmstart), with real
ansible-playbook runs on localhost: the stage runs in the spare, with its own variables
and failures file; a spare whose environment no longer matches is not used; none is left
behind."""

from __future__ import annotations

import os
import re

import pytest

from collector.hosts import playbook, warmstart

# the main ansible-playbook process's PID: a lookup runs in a worker forked from it
STAGE = """\
- name: A stage
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Which process runs it
      ansible.builtin.debug:
        msg: "main={{ lookup('ansible.builtin.pipe', 'ps -o ppid= -p $PPID') | trim }}"

    - name: A task that fails
      ansible.builtin.fail:
        msg: "failed as asked: {{ word }}"
      when: word is defined
"""


@pytest.fixture
def stage(tmp_path, monkeypatch):
    """run(**extra) runs the stage; returns (the PID that ran it, the result)."""
    monkeypatch.setenv("DRIVELAB_RESULTS", str(tmp_path / "results"))
    book = tmp_path / "stage.yml"
    book.write_text(STAGE)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n")

    def run(**extra):
        res = playbook.run_playbook(
            os.path.relpath(book, playbook.PLAYBOOKS),
            extra or None,
            inventory=inventory,
            what="stage",
            raise_on_failure=False,
        )
        text = res.log.read_text()
        return int(re.search(r"main=(\d+)", text)[1]), res

    return run


def spare() -> warmstart._Spare | None:
    return warmstart._state["spare"]


def test_each_stage_runs_in_the_spare_started_ahead_with_its_own_variables(stage):
    with warmstart.warm_starts():
        warmstart.prepare(playbook._env())
        first = spare()
        assert first is not None
        pid, res = stage(word="one")
        assert pid == first.proc.pid
        # its own extra variables, and its own failures file (DRIVELAB_FAILURES)
        assert res.returncode != 0
        assert [f["msg"] for f in res.failures] == ["failed as asked: one"]
        # the stage that ran made the next one's spare; the next stage runs in it
        second = spare()
        assert second is not None and second.proc.pid != first.proc.pid
        pid, res = stage()
        assert pid == second.proc.pid
        assert res.returncode == 0 and res.failures == ()
        last = spare()
    assert spare() is None
    assert last.proc.wait(timeout=10) == 0  # the idle one ended with the run


def test_a_spare_started_with_another_environment_is_not_used(stage, monkeypatch):
    """Ansible reads its configuration as it is imported: a spare started before the
    environment changed is ended, and the stage gets a process of its own."""
    with warmstart.warm_starts():
        warmstart.prepare(playbook._env())
        stale = spare()
        monkeypatch.setenv("ANSIBLE_DISPLAY_SKIPPED_HOSTS", "false")
        pid, res = stage()
        assert res.returncode == 0
        assert pid != stale.proc.pid
        assert stale.proc.poll() is not None


def test_outside_a_run_no_spare_is_made(stage):
    warmstart.prepare(playbook._env())
    assert spare() is None
    _, res = stage()
    assert res.returncode == 0
    assert spare() is None
