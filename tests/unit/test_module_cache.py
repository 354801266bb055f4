"""Module payloads kept between ansible-playbook runs (callback drivelab_module_cache),
with a real ansible-playbook on this machine: a second run uses the payload the first
built, an edited module is built anew (never served stale), and a lasting folder that
others could write to is not used at all."""

from __future__ import annotations

import base64
import dataclasses
import importlib.util
import io
import os
import pickle
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from collector.ansible_plugins.callback import drivelab_module_cache as cache

MODULE = """\
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={{}})
    module.exit_json(changed=False, says="{word}")


main()
"""
PLAYBOOK = """\
- name: A module of the playbook's own
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Ask it
      probe_mod:
      register: said

    - name: Say it
      ansible.builtin.debug:
        msg: "probe says {{ said.says }}"
"""
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
REPO = Path(__file__).resolve().parents[2]


def play(tmp_path: Path, home: Path, *, stderr: bool = False, inventory: str = "localhost,"):
    """One run of the playbook, Ansible's debug output on; its output (and its errors)."""
    env = dict(
        os.environ,
        HOME=str(home),
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_DEBUG="1",
        ANSIBLE_PYTHON_INTERPRETER="/usr/bin/python3",
    )
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", inventory, str(tmp_path / "pb" / "site.yml")],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return (proc.stdout, proc.stderr) if stderr else proc.stdout


def write_module(tmp_path: Path, word: str) -> None:
    (tmp_path / "pb" / "library" / "probe_mod.py").write_text(MODULE.format(word=word))


def keys(home: Path) -> list[Path]:
    root = home / ".ansible" / "drivelab-module-cache"
    return sorted(p for p in root.iterdir() if cache.KEY.match(p.name)) if root.exists() else []


def built(out: str) -> bool:
    return "ANSIBALLZ: Creating module" in out


def used_kept(out: str) -> bool:
    return "ANSIBALLZ: using cached module" in out


def test_a_payload_is_built_once_and_an_edited_module_anew(tmp_path):
    home = tmp_path / "home"
    (tmp_path / "pb" / "library").mkdir(parents=True)
    (tmp_path / "pb" / "site.yml").write_text(PLAYBOOK)
    write_module(tmp_path, "one")

    first = play(tmp_path, home)
    assert "probe says one" in first
    assert built(first)
    [key] = keys(home)
    assert (key / "ansible.legacy.probe_mod-ZIP_DEFLATED-none").is_file()

    again = play(tmp_path, home)
    assert "probe says one" in again
    assert used_kept(again) and not built(again)
    assert keys(home) == [key]

    write_module(tmp_path, "two")
    edited = play(tmp_path, home)
    assert "probe says two" in edited
    assert built(edited)
    assert len(keys(home)) == 2


def test_a_lasting_folder_others_can_write_to_is_not_used(tmp_path):
    home = tmp_path / "home"
    root = home / ".ansible" / "drivelab-module-cache"
    root.mkdir(parents=True)
    root.chmod(0o777)
    (tmp_path / "pb" / "library").mkdir(parents=True)
    (tmp_path / "pb" / "site.yml").write_text(PLAYBOOK)
    write_module(tmp_path, "one")
    for _ in range(2):
        out = play(tmp_path, home)
        assert "probe says one" in out
        assert built(out)
    assert keys(home) == []


def test_keys_beyond_the_newest_eight_go_when_idle_for_an_hour(tmp_path):
    now = time.time()
    # idle for 0, 5, ... 55 minutes, then 70 and 90 minutes
    ages = [n * 300.0 for n in range(12)] + [4200.0, 5400.0]
    for n, age in enumerate(ages):
        (tmp_path / f"{n:032x}").mkdir()
        os.utime(tmp_path / f"{n:032x}", (now - age, now - age))
    (tmp_path / "not-a-key").mkdir()
    os.utime(tmp_path / "not-a-key", (now - 10**6, now - 10**6))
    cache.prune(tmp_path, now)
    left = sorted(p.name for p in tmp_path.iterdir())
    # beyond the newest 8, those used within the hour stay too
    assert left == sorted([f"{n:032x}" for n in range(12)] + ["not-a-key"])


def test_the_key_follows_the_content_of_the_modules_folders(tmp_path):
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "m.py").write_text("one")
    key = cache.cache_key(str(tmp_path))
    assert cache.cache_key(str(tmp_path)) == key
    (tmp_path / "library" / "m.py").write_text("two")
    assert cache.cache_key(str(tmp_path)) != key
    (tmp_path / "roles" / "r" / "module_utils").mkdir(parents=True)
    changed = cache.cache_key(str(tmp_path))
    (tmp_path / "roles" / "r" / "module_utils" / "u.py").write_text("x")
    assert cache.cache_key(str(tmp_path)) != changed


def test_two_modules_of_one_name_keep_nothing_between_runs(tmp_path):
    """Which of two same-named modules a run gets depends on the roles it loads: no key
    can stand for both, so Ansible's own per-run cache is kept, and the run says why."""
    home = tmp_path / "home"
    (tmp_path / "pb" / "library").mkdir(parents=True)
    (tmp_path / "pb" / "roles" / "other" / "library").mkdir(parents=True)
    (tmp_path / "pb" / "site.yml").write_text(PLAYBOOK)
    write_module(tmp_path, "one")
    (tmp_path / "pb" / "roles" / "other" / "library" / "probe_mod.py").write_text(
        MODULE.format(word="other")
    )
    out, err = play(tmp_path, home, stderr=True)
    assert "probe says one" in out
    assert "payloads not kept between runs: library probe_mod.py is in both" in " ".join(
        err.split()
    )
    assert keys(home) == []


# --- bytecode in the kept payloads --------------------------------------------------------
#: a module that says where the code of AnsibleModule came from: compiled from the
#: source in the zip on the host, its file name is the zip's path on the host followed by
#: ansible/module_utils/basic.py; from the .pyc kept with the payload, the path inside
#: the zip alone (the name it was compiled under on the controller)
WHERE = """\
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={})
    module.exit_json(changed=False, says=AnsibleModule.__init__.__code__.co_filename)


main()
"""
BASIC = "ansible/module_utils/basic.py"


def kept_zip(key: Path) -> zipfile.ZipFile:
    with open(key / "ansible.legacy.probe_mod-ZIP_DEFLATED-none", "rb") as fh:
        payload = pickle.load(fh)  # noqa: S301 - the payload this test made Ansible build
    return zipfile.ZipFile(io.BytesIO(base64.b64decode(payload.zip_data)))


def test_a_kept_payload_carries_bytecode_the_hosts_python_uses(tmp_path):
    home = tmp_path / "home"
    (tmp_path / "pb" / "library").mkdir(parents=True)
    (tmp_path / "pb" / "site.yml").write_text(PLAYBOOK)
    (tmp_path / "pb" / "library" / "probe_mod.py").write_text(WHERE)

    first = play(tmp_path, home)  # built by Ansible: sources only
    assert re.search(rf"probe says /\S+/{BASIC}", first), first
    [key] = keys(home)
    with kept_zip(key) as z:
        names = set(z.namelist())
        assert {BASIC, f"{BASIC}c", "ansible/legacy/probe_mod.py"} <= names
        assert all(f"{n}c" in names for n in names if n.endswith(".py")), names
        assert z.read(f"{BASIC}c")[:4] == importlib.util.MAGIC_NUMBER

    again = play(tmp_path, home)  # the kept payload: its bytecode is what ran
    assert f"probe says {BASIC}" in again, again


def test_bytecode_of_another_python_or_source_is_passed_over_for_the_source(tmp_path):
    """A host whose Python is another version (another magic number), or a .pyc that
    does not belong to the source beside it: the host's Python reads the source."""
    home = tmp_path / "home"
    (tmp_path / "pb" / "library").mkdir(parents=True)
    (tmp_path / "pb" / "site.yml").write_text(PLAYBOOK)
    (tmp_path / "pb" / "library" / "probe_mod.py").write_text(WHERE)
    play(tmp_path, home)
    [key] = keys(home)
    path = key / "ansible.legacy.probe_mod-ZIP_DEFLATED-none"
    with open(path, "rb") as fh:
        payload = pickle.load(fh)  # noqa: S301 - the payload this test made Ansible build
    for forge in ("magic", "hash"):
        out = io.BytesIO()
        forged = 0
        with kept_zip(key) as zin, zipfile.ZipFile(out, "w") as zout:
            for info in zin.infolist():
                data = zin.read(info)
                if info.filename.endswith(".pyc"):
                    at = slice(0, 2) if forge == "magic" else slice(8, 16)
                    data = data[: at.start] + bytes(at.stop - at.start) + data[at.stop :]
                    forged += 1
                zout.writestr(info, data)
        assert forged > 10, f"only {forged} .pyc in the kept payload to forge"
        path.write_bytes(
            pickle.dumps(dataclasses.replace(payload, zip_data=base64.b64encode(out.getvalue())))
        )
        said = play(tmp_path, home)
        assert re.search(rf"probe says /\S+/{BASIC}", said), (forge, said)


def test_a_payload_that_is_not_ansibles_is_kept_as_built(tmp_path):
    assert cache.with_bytecode(pickle.dumps({"zip_data": b"x"}), {}) is None
    src, dest = tmp_path / "built", tmp_path / "kept"
    src.write_bytes(b"not a pickle")
    cache.keep(src, dest, {})
    assert dest.read_bytes() == b"not a pickle"


# --- bytecode compiled by the hosts' Python -----------------------------------------------
def hosts_python(tmp_path: Path, body: str) -> tuple[str, Path]:
    """An inventory naming a "hosts' Python" (a script: ``body``, then this Python), and
    the file that script appends a line to each time it runs."""
    calls = tmp_path / "calls"
    script = tmp_path / "hosts-python"
    script.write_text(f'#!/bin/sh\necho called >> {calls}\n{body}\nexec {sys.executable} "$@"\n')
    script.chmod(0o755)
    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
    )
    # where an operator's inventory would set it: group_vars, as Ansible merges them
    (inventory / "group_vars" / "all.yml").write_text(f"{cache.BYTECODE_VAR}: [{script}]\n")
    return str(inventory), calls


def test_the_hosts_python_the_inventory_names_compiles_the_bytecode_once(tmp_path):
    """A lab whose hosts run another Python than the controller names one of theirs:
    it compiles every source of the payloads a run adds, in one process, and the hosts
    run that bytecode; its payloads are kept under a key of their own."""
    home = tmp_path / "home"
    (tmp_path / "pb" / "library").mkdir(parents=True)
    (tmp_path / "pb" / "site.yml").write_text(PLAYBOOK)
    (tmp_path / "pb" / "library" / "probe_mod.py").write_text(WHERE)
    play(tmp_path, home)  # the controller's bytecode, one key
    [controllers] = keys(home)
    inventory, calls = hosts_python(tmp_path, "")

    first = play(tmp_path, home, inventory=inventory)
    assert built(first)  # a key of its own: nothing kept for it yet
    assert calls.read_text() == "called\n"  # one process
    [hosts] = [k for k in keys(home) if k != controllers]
    with kept_zip(hosts) as z:
        names = set(z.namelist())
        assert all(f"{n}c" in names for n in names if n.endswith(".py")), names

    again = play(tmp_path, home, inventory=inventory)
    assert f"probe says {BASIC}" in again, again  # the bytecode it compiled is what ran
    assert used_kept(again)
    assert calls.read_text() == "called\n"  # nothing new to compile


def test_a_hosts_python_that_fails_leaves_the_controllers_bytecode_and_says_so(tmp_path):
    home = tmp_path / "home"
    (tmp_path / "pb" / "library").mkdir(parents=True)
    (tmp_path / "pb" / "site.yml").write_text(PLAYBOOK)
    (tmp_path / "pb" / "library" / "probe_mod.py").write_text(WHERE)
    inventory, calls = hosts_python(tmp_path, "echo 'chroot: no such image' >&2; exit 125")

    out, err = play(tmp_path, home, inventory=inventory, stderr=True)
    assert "probe says" in out
    assert calls.exists()
    said = " ".join(err.split())
    assert "the payloads' bytecode compiled by the controller's Python:" in said, err
    assert "exit 125: chroot: no such image" in said, err
    [key] = keys(home)
    with kept_zip(key) as z:
        assert z.read(f"{BASIC}c")[:4] == importlib.util.MAGIC_NUMBER
    assert f"probe says {BASIC}" in play(tmp_path, home, inventory=inventory)


def test_a_hosts_python_that_is_not_an_argv_keeps_nothing_and_says_why(tmp_path):
    home = tmp_path / "home"
    (tmp_path / "pb" / "library").mkdir(parents=True)
    (tmp_path / "pb" / "site.yml").write_text(PLAYBOOK)
    write_module(tmp_path, "one")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        f"all:\n  vars:\n    {cache.BYTECODE_VAR}: /usr/bin/python3\n"
        "  hosts:\n    localhost:\n      ansible_connection: local\n"
    )
    out, err = play(tmp_path, home, inventory=str(inventory), stderr=True)
    assert "probe says one" in out
    assert f"{cache.BYTECODE_VAR} is not a list of words: '/usr/bin/python3'" in " ".join(
        err.split()
    ), err
    assert keys(home) == []
