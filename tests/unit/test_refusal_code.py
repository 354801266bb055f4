"""How a playbook's failure reaches the runner, with a real ansible-playbook and
drivelab's callback: a drive module's refusal as a code beside its message (the runner
decides on the code, never on the words), and a log that cannot be written (a full
results folder) as that error, the playbook stopped."""

from __future__ import annotations

import errno
import subprocess
import textwrap

import pytest

from collector.hosts.playbook import HOLDS_POSTGRESQL_DATA, PlaybookFailed, run_playbook
from tests.unit.hostcode import module_util

#: a module failing as drive_format does on a Refusal (same module_utils, same call)
MODULE = """\
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_argv import Refusal, {code}


def main():
    module = AnsibleModule(argument_spec={{"name": {{"type": "str"}}}})
    name = module.params["name"]
    if name == "nvme":
        module.exit_json(changed=False)
    try:
        raise Refusal(f"{{name}}: holds PostgreSQL data (/srv/drivelab/{{name}}/pg): words may change",
                      code={code})
    except Refusal as err:
        module.fail_json(msg=f"refused: {{err}}", refusal=err.code, filesystem=name)


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
        name: "{{ item | default('ssd') }}"
"""


def test_the_controller_shares_the_modules_code():
    argv = module_util("candidate_drive", "drivelab_argv")
    assert argv.HOLDS_POSTGRESQL_DATA == HOLDS_POSTGRESQL_DATA
    assert argv.Refusal("x").code == argv.REFUSED != HOLDS_POSTGRESQL_DATA


@pytest.mark.parametrize("loop", [False, True], ids=["task", "loop item"])
@pytest.mark.parametrize(
    ("code", "expected"), [("HOLDS_POSTGRESQL_DATA", {HOLDS_POSTGRESQL_DATA}), ("REFUSED", set())]
)
def test_a_refusal_code_reaches_the_runner(tmp_path, monkeypatch, code, expected, loop):
    """Also from a loop's failed item (drive_format's re-gate runs once per filesystem:
    its code was lost there, so a drive holding drivelab's own data was not released),
    with the filesystem refused (of two, the one that refused: the runner releases only
    its data)."""
    monkeypatch.setenv("DRIVELAB_RESULTS", str(tmp_path / "results"))
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "refuse.py").write_text(MODULE.format(code=code))
    playbook = tmp_path / "refuse.yml"
    playbook.write_text(textwrap.dedent(PLAYBOOK) + ("      loop: [nvme, ssd]\n" if loop else ""))
    with pytest.raises(PlaybookFailed) as info:
        run_playbook(str(playbook), inventory="localhost,", what="drives")
    assert "holds PostgreSQL data" in str(info.value)
    assert info.value.refusals == (expected or {"refused"})
    assert (HOLDS_POSTGRESQL_DATA in info.value.refusals) is bool(expected)
    assert [f.get("filesystems") for f in info.value.failures] == [["ssd"]]


NOISY = """\
- name: A playbook that writes a long log
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Talk
      ansible.builtin.debug:
        msg: "{{ 'x' * 2000 }}"
      loop: "{{ range(400) | list }}"
    - name: Mark the end
      ansible.builtin.copy:
        content: "ran to the end\\n"
        dest: "{{ marker }}"
        mode: "0644"
"""


def test_a_full_results_folder_stops_the_playbook_and_says_so(tmp_path, monkeypatch):
    """The log of a playbook cannot be written (its folder's filesystem is full): the
    error is that one, the playbook is stopped and waited for (no process left behind,
    no 'Directory not empty' from its temporary folder)."""
    results = tmp_path / "drivelab-full-results"
    results.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "drivelab-full", str(results)],
                   check=True)  # fmt: skip
    try:
        (results / "logs").mkdir()
        with open(results / "filler", "wb") as fh:  # leave about 40 KiB
            fh.write(b"\0" * (216 * 1024))
        monkeypatch.setenv("DRIVELAB_RESULTS", str(results))
        playbook = tmp_path / "noisy.yml"
        playbook.write_text(NOISY)
        marker = tmp_path / "marker"
        with pytest.raises(OSError, match="No space left") as info:
            run_playbook(
                str(playbook), {"marker": str(marker)}, inventory="localhost,", what="noisy"
            )
        assert info.value.errno == errno.ENOSPC
        assert not marker.exists(), "the playbook ran on after its log could not be written"
        # its variables' folder, beside the log, is gone
        assert [p.name for p in (results / "logs").iterdir() if p.is_dir()] == []
        left = subprocess.run(
            ["pgrep", "-f", str(playbook)], capture_output=True, text=True, check=False
        )
        assert left.stdout == "", left.stdout
    finally:
        subprocess.run(["umount", str(results)], check=False)
