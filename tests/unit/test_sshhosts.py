"""Hosts asked over SSH without Ansible (collector.hosts.sshhosts), against a real sshd on
127.0.0.1 (marked ``sshd``): the preflight passes without starting Ansible when every
host answers; a host that does not answer is left to Ansible, which names it; the
provisioning stamps are read as the hosts have them, a missing one as "" and one not
read (a host not reached) as None; and no key
or known_hosts file in the inventory means Ansible, never a guess."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from collector.errors import DrivelabError
from collector.hosts import sshhosts
from collector.run import preflight as preflight_stage
from tests.unit.sshd import Sshd, free_port

pytestmark = pytest.mark.sshd


def host(sshd: Sshd, port: int | None = None) -> dict:
    return {
        "ansible_host": "127.0.0.1",
        "ansible_port": port or sshd.port,
        "ansible_user": sshd.user,
        "ansible_ssh_private_key_file": str(sshd.root / "client_key"),
        "ansible_ssh_common_args": f"-o UserKnownHostsFile={sshd.known_hosts}",
        "ansible_python_interpreter": "/usr/bin/python3",
    }


def inventory(tmp_path: Path, db: dict, clients: dict) -> tuple[Path, dict]:
    doc = {"all": {"children": {"db": {"hosts": db}, "clients": {"hosts": clients}}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path, doc


def no_ansible(*args, **kwargs):
    raise AssertionError(f"Ansible was started: {args[0] if args else kwargs}")


def test_every_host_answering_passes_without_ansible(sshd, tmp_path, monkeypatch):
    path, doc = inventory(tmp_path, {"db1": host(sshd)}, {"c1": host(sshd), "c2": host(sshd)})
    assert sshhosts.all_hosts(doc) == ["db1", "c1", "c2"]
    monkeypatch.setattr(preflight_stage.subprocess, "run", no_ansible)
    out = io.StringIO()
    preflight_stage.preflight(path, Console(file=out, width=200), doc)
    assert "preflight: 3 hosts answer over SSH" in out.getvalue()


def test_a_host_not_answering_is_left_to_ansible_which_names_it(sshd, tmp_path, monkeypatch):
    gone = host(sshd, port=free_port())  # nothing listens there: refused at once
    path, doc = inventory(tmp_path, {"db1": host(sshd)}, {"gone": gone})
    answers = sshhosts.on_all(sshhosts.settings_of(doc, ["db1", "gone"]), lambda h: "true")
    assert answers["db1"].rc == 0 and answers["gone"].rc is None and answers["gone"].err
    ran = []
    real = subprocess.run
    monkeypatch.setattr(
        preflight_stage.subprocess, "run", lambda *a, **k: ran.append(a) or real(*a, **k)
    )
    with pytest.raises(DrivelabError, match=r"preflight: host gone does not answer over SSH"):
        preflight_stage.preflight(path, Console(file=io.StringIO()), doc)
    assert len(ran) == 1 and "ansible.builtin.ping" in ran[0][0]


def test_stamps_are_read_as_the_hosts_have_them(sshd, tmp_path):
    folder = tmp_path / "stamps"
    folder.mkdir()
    boot = Path(sshhosts.BOOT_ID).read_text().strip()
    (folder / "db1").write_text(f"abc123\n{boot}\n")
    (folder / "c 1").write_text(f"def456\n{boot}\n")  # a name the shell must not split
    # written before the host's last boot (or by a drivelab that kept no boot): not current
    (folder / "c3").write_text("abc123\n00000000-0000-0000-0000-000000000000\n")
    (folder / "c4").write_text("abc123\n")
    clients = {name: host(sshd) for name in ("c 1", "c2", "c3", "c4")}
    _, doc = inventory(tmp_path, {"db1": host(sshd)}, clients)
    settings = sshhosts.settings_of(doc, ["db1", *clients])
    stamps = sshhosts.read_stamps(settings, folder=str(folder))
    assert stamps == {
        "db1": "abc123", "c 1": "def456", "c2": "",  # c2: none on the host
        "c3": "abc123 (written before this boot)", "c4": "abc123 (written before this boot)",
    }  # fmt: skip


def test_a_stamp_not_read_is_never_taken_for_none(sshd, tmp_path):
    """Provisioning leaves a host's stamp removal out only where it has none: a host not
    reached, or a stamp there that cannot be read, is None, not ""."""
    folder = tmp_path / "stamps"
    (folder / "db1").mkdir(parents=True)  # there, but cat cannot read it
    gone = host(sshd, port=free_port())  # nothing listens there: refused at once
    _, doc = inventory(tmp_path, {"db1": host(sshd)}, {"gone": gone, "c2": host(sshd)})
    settings = sshhosts.settings_of(doc, ["db1", "gone", "c2"])
    stamps = sshhosts.read_stamps(settings, folder=str(folder))
    assert stamps == {"db1": None, "gone": None, "c2": ""}


def test_no_key_or_no_known_hosts_means_ansible(sshd, tmp_path):
    no_key = {k: v for k, v in host(sshd).items() if k != "ansible_ssh_private_key_file"}
    no_known = {**host(sshd), "ansible_ssh_common_args": "-o StrictHostKeyChecking=yes"}
    _, doc = inventory(tmp_path, {"db1": host(sshd)}, {"c1": no_key, "c2": no_known})
    assert sshhosts.settings_of(doc, ["db1"]) is not None
    assert sshhosts.settings_of(doc, ["db1", "c1"]) is None
    assert sshhosts.settings_of(doc, ["db1", "c2"]) is None


def test_a_host_key_not_in_known_hosts_is_not_trusted(sshd, tmp_path):
    other = tmp_path / "other_known_hosts"
    other.write_text("[127.0.0.1]:1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIN6yXH4hTzYJ4r8f\n")
    stranger = {**host(sshd), "ansible_ssh_common_args": f"-o UserKnownHostsFile={other}"}
    _, doc = inventory(tmp_path, {"db1": stranger}, {})
    (answer,) = sshhosts.on_all(sshhosts.settings_of(doc, ["db1"]), lambda h: "true").values()
    assert answer.rc is None, answer
