"""The drivelab_failures callback under a real ansible-playbook (local connection): a
command that exits non-zero is recorded with its exit status and the last line it wrote
to stderr, where Ansible's own message says only "non-zero return code"; what a module
says itself is kept as it said it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")

TASKS = {
    "command": {
        "ansible.builtin.command": {
            "argv": [
                "sh",
                "-c",
                "echo fine; echo 'pgbench: error: no such database: user9' >&2; echo >&2; exit 3",
            ]
        }
    },
    "raw": {
        "ansible.builtin.raw": "echo 'first line' >&2; echo 'psql: could not connect' >&2; exit 2"
    },
    "stdout only": {
        "ansible.builtin.command": {"argv": ["sh", "-c", "echo 'findmnt: nothing here'; exit 1"]}
    },
    "silent": {"ansible.builtin.command": {"argv": ["false"]}},
    "loop": {
        "ansible.builtin.command": {
            "argv": ["sh", "-c", "[ {{ item }} = a ] || { echo 'bad {{ item }}' >&2; exit 4; }"]
        },
        "loop": ["a", "b"],
    },
    "module msg": {
        "ansible.builtin.assert": {"that": ["false"], "fail_msg": "drive nvme: not a block device"}
    },
}

EXPECTED = {
    "command": "exit 3: pgbench: error: no such database: user9",
    "raw": "exit 2: psql: could not connect",
    "stdout only": "exit 1: findmnt: nothing here",
    "silent": "exit 1",
    "loop": "exit 4: bad b",
    "module msg": "drive nvme: not a block device",
}


@pytest.mark.parametrize("name", list(TASKS))
def test_a_failed_task_is_one_line_with_its_reason(tmp_path, name):
    play = [{"hosts": "here", "gather_facts": False, "tasks": [{"name": name, **TASKS[name]}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"hosts": {"here": {"ansible_connection": "local"}}}})
    )
    failures = tmp_path / "failures.jsonl"
    env = dict(
        os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), DRIVELAB_FAILURES=str(failures)
    )
    proc = subprocess.run(
        [PLAYBOOK, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [json.loads(line) for line in failures.read_text().splitlines()]
    assert lines == [{"kind": "failed", "host": "here", "task": name, "msg": EXPECTED[name]}]
