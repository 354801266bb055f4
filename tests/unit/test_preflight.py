"""The runner's preflight (every host answers over SSH before anything is touched) reads
Ansible's JSON output: a callback an operator enables to time a run's steps
(``ansible.posix.profile_tasks``, docs/scaling.md) prints its own lines after that
document, and must not make a reachable host look like a broken preflight."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from collector.errors import DrivelabError
from collector.run.preflight import preflight


def inventory(tmp_path, hosts: dict[str, dict]) -> str:
    import yaml  # noqa: PLC0415

    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}), encoding="utf-8")
    return path


LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}


@pytest.mark.parametrize("callbacks", ["drivelab_failures", "ansible.posix.profile_tasks"])
def test_hosts_that_answer_pass_whatever_callbacks_are_enabled(tmp_path, monkeypatch, callbacks):
    monkeypatch.setenv("ANSIBLE_CALLBACKS_ENABLED", callbacks)
    out = io.StringIO()
    preflight(inventory(tmp_path, {"here": LOCAL}), Console(file=out, width=200))
    assert "preflight: 1 hosts answer over SSH" in out.getvalue()


def test_a_host_that_does_not_answer_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("ANSIBLE_CALLBACKS_ENABLED", "ansible.posix.profile_tasks")
    # loopback, a port nothing listens on: the connection is refused at once
    gone = {"ansible_host": "127.0.0.1", "ansible_port": 1}
    with pytest.raises(DrivelabError, match=r"preflight: host gone does not answer over SSH"):
        preflight(inventory(tmp_path, {"here": LOCAL, "gone": gone}), Console(file=io.StringIO()))
