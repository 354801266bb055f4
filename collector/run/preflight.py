"""The run's first stage: every host answers over SSH before any drive is touched."""

from __future__ import annotations

import json
import os
import subprocess
from typing import TYPE_CHECKING, Any

from collector.errors import HostFailure
from collector.paths import REPO, ansible_bin

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console


def preflight(inventory: Path, console: Console, hosts: dict[str, Any] | None = None) -> None:
    """Every host answers over SSH before any drive is touched; else one line naming it.
    ``hosts``: the parsed inventory; when its file gives every host a key and a
    known_hosts file, they are asked over SSH directly, all at once (a command that does
    nothing, no Ansible process: docs/scaling.md). Any other case, and any host
    that does not answer so, is Ansible's to judge (its view of the inventory is the one
    that counts): read from its JSON output (its ``json`` callback), never its words."""
    if hosts is not None:
        from collector.hosts import sshhosts  # noqa: PLC0415

        settings = sshhosts.settings_of(hosts, sshhosts.all_hosts(hosts))
        answers = sshhosts.on_all(settings or {}, lambda _host: "true")
        if settings and all(a.rc == 0 for a in answers.values()):
            console.print(f"preflight: {len(answers)} hosts answer over SSH")
            return
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
    )
    argv = [ansible_bin("ansible"), "all", "-i", str(inventory), "-m", "ansible.builtin.ping",
            "-T", "10"]  # fmt: skip
    proc = subprocess.run(
        argv,
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    try:
        # the JSON document alone: a callback enabled in the environment (profile_tasks,
        # to time a run's steps) may print its own lines after it
        doc, _ = json.JSONDecoder().raw_decode(proc.stdout, proc.stdout.index("{"))
        results = doc["plays"][0]["tasks"][0]["hosts"]
    except (ValueError, KeyError, IndexError):
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise HostFailure(
            f"preflight: ansible exited {proc.returncode}: nothing was touched ({last[:200]})"
        ) from None
    for host, res in sorted(results.items()):
        if res.get("unreachable") or res.get("failed"):
            why = " ".join(str(res.get("msg") or "no answer").split())
            raise HostFailure(
                f"preflight: host {host} does not answer over SSH: nothing was touched"
                f" ({why[:200]})"
            )
    console.print(f"preflight: {len(results)} hosts answer over SSH")
