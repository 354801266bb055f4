"""A drive module's refusal reaches the controller as a code beside its message: the
runner decides on the code (release drivelab's own databases, then retry), never on
the words. Runs a real ansible-playbook with drivelab's callback."""

from __future__ import annotations

import textwrap

import pytest

from collector.playbook import HOLDS_POSTGRESQL_DATA, PlaybookFailed, run_playbook
from tests.unit.hostcode import module_util

#: a module failing as drive_format does on a Refusal (same module_utils, same call)
MODULE = """\
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_argv import Refusal, {code}


def main():
    module = AnsibleModule(argument_spec={{}})
    try:
        raise Refusal("ssd: holds PostgreSQL data (/srv/drivelab/ssd/pg): words may change",
                      code={code})
    except Refusal as err:
        module.fail_json(msg=f"refused: {{err}}", refusal=err.code)


main()
"""
PLAYBOOK = """\
- name: A refusing drive module
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Format
      refuse:
"""


def test_the_controller_shares_the_modules_code():
    argv = module_util("candidate_drive", "drivelab_argv")
    assert argv.HOLDS_POSTGRESQL_DATA == HOLDS_POSTGRESQL_DATA
    assert argv.Refusal("x").code == argv.REFUSED != HOLDS_POSTGRESQL_DATA


@pytest.mark.parametrize(
    ("code", "expected"), [("HOLDS_POSTGRESQL_DATA", {HOLDS_POSTGRESQL_DATA}), ("REFUSED", set())]
)
def test_a_refusal_code_reaches_the_runner(tmp_path, monkeypatch, code, expected):
    monkeypatch.setenv("DRIVELAB_RESULTS", str(tmp_path / "results"))
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "refuse.py").write_text(MODULE.format(code=code))
    playbook = tmp_path / "refuse.yml"
    playbook.write_text(textwrap.dedent(PLAYBOOK))
    with pytest.raises(PlaybookFailed) as info:
        run_playbook(str(playbook), inventory="localhost,", what="drives")
    assert "holds PostgreSQL data" in str(info.value)
    assert info.value.refusals == (expected or {"refused"})
    assert (HOLDS_POSTGRESQL_DATA in info.value.refusals) is bool(expected)
