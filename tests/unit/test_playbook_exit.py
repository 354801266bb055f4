"""An ansible-playbook that fails before any task (a playbook it cannot parse) is told in
one line that names the file, line and column, from ansible-core's own output
(tests/data/ansible-playbook-yaml-error.txt: provision.yml with a flow sequence broken
by a Jinja expression, as captured on this machine)."""

from __future__ import annotations

from pathlib import Path

from collector.hosts.playbook import exit_reason

DATA = Path(__file__).resolve().parents[1] / "data"


def test_a_playbook_that_cannot_be_parsed_is_named_with_its_line_and_column():
    lines = (DATA / "ansible-playbook-yaml-error.txt").read_text().splitlines(keepends=True)
    reason = exit_reason(lines)
    assert reason == (
        "YAML parsing failed: While parsing a flow sequence did not find expected ',' or ']'."
        " (/work/main/playbooks/provision.yml:39:51)"
    ), reason


def test_without_an_error_line_the_last_line_is_told():
    assert exit_reason(["PLAY RECAP ***\n", "\n", "dbhost : ok=1 failed=0\n"]) == (
        "dbhost : ok=1 failed=0"
    )
    assert exit_reason([]) == "no output"
