"""Ansible-side settings, measured one change at a time (issue #9): how long a re-run
of provisioning takes on an already provisioned lab of CLIENTS client hosts with
drivelab's ansible.cfg as it is, and with each of its choices undone or an
alternative tried:

- as configured: forks 40, pipelining on, SSH multiplexing (ControlMaster=auto,
  ControlPersist=60s), strategy linear, no fact gathering (``gathering = explicit``;
  no play gathers facts, so there is nothing for a fact cache to keep);
- pipelining off (``ANSIBLE_PIPELINING=False``);
- SSH multiplexing off (``ControlMaster=no``: a new SSH connection per task);
- forks 5 (``ANSIBLE_FORKS=5``: fewer hosts in parallel);
- strategy free (``ANSIBLE_STRATEGY=free``: each host runs ahead on its own).

Provisioning (``playbooks/provision.yml``, via ``collector.run.stages.provision()``) is
the most Ansible-bound stage drivelab runs: every task on every host, nothing to wait
for outside Ansible. Each variant runs REPEATS times after one warm-up run of the
configured settings; the changed count must stay 0 (an idempotence check too).

Builds its own lab (`lab down`, `lab up --clients CLIENTS`) and tears it down, even on
failure. About 6 minutes on the 2-core lab machine.

    .venv/bin/python bench/ansible_tuning.py     # as root
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _labrun import REPO, drivelab, environ
from _report import machine_note, update_section

CLIENTS = 8
REPEATS = 3
SSH_ARGS = "-o ServerAliveInterval=5 -o ServerAliveCountMax=3"
VARIANTS: dict[str, dict[str, str]] = {
    "as configured (forks 40, pipelining, multiplexing, linear)": {},
    "pipelining off": {"ANSIBLE_PIPELINING": "False"},
    "SSH multiplexing off (ControlMaster=no)": {
        "ANSIBLE_SSH_ARGS": f"-o ControlMaster=no {SSH_ARGS}"
    },
    "forks 5": {"ANSIBLE_FORKS": "5"},
    "strategy free": {"ANSIBLE_STRATEGY": "free"},
}


def timed_provision(env: dict[str, str]) -> tuple[float, int]:
    from collector.run import stages as runner  # noqa: PLC0415

    with environ(env):
        started = time.monotonic()
        result = runner.provision()
        seconds = time.monotonic() - started
    return seconds, sum(host.get("changed", 0) for host in result.recap.values())


def main() -> None:
    results = Path(tempfile.mkdtemp(prefix="drivelab-bench-ansible-"))
    os.environ["DRIVELAB_RESULTS"] = str(results)  # the playbook logs go there
    sys.path.insert(0, str(REPO))
    print(f"logs in {results / 'logs'}")
    drivelab("lab", "down")
    figures: dict[str, list[tuple[float, int]]] = {}
    try:
        drivelab("lab", "up", "--clients", str(CLIENTS))
        first = timed_provision({})
        print(f"first provisioning of the fresh lab: {first[0]:.1f} s ({first[1]} changed)")
        timed_provision({})  # warm-up: the configured settings, as every variant starts
        for name, env in VARIANTS.items():
            figures[name] = [timed_provision(env) for _ in range(REPEATS)]
            times = ", ".join(f"{s:.1f}" for s, _ in figures[name])
            print(f"{name}: {times} s (changed {[c for _, c in figures[name]]})")
    finally:
        drivelab("lab", "down", check=False)
    report(first, figures)


def report(first: tuple[float, int], figures: dict[str, list[tuple[float, int]]]) -> None:
    base = statistics.median(s for s, _ in next(iter(figures.values())))
    table = [
        "| settings | re-runs (s) | median (s) | vs as configured | changed |",
        "|---|---|---:|---:|---:|",
    ]
    for name, runs in figures.items():
        med = statistics.median(s for s, _ in runs)
        table.append(
            f"| {name} | {', '.join(f'{s:.1f}' for s, _ in runs)} | {med:.1f} "
            f"| {(med / base - 1) * 100:+.0f} % | {max(c for _, c in runs)} |"
        )
    print("\n".join(table))
    body = [
        "## Ansible settings, one change at a time (`bench/ansible_tuning.py`)",
        "",
        machine_note(),
        "",
        f"Re-runs of `playbooks/provision.yml` on a provisioned lab of {CLIENTS} client "
        f"hosts and the DB host, {REPEATS} per variant, after one warm-up run (the fresh "
        f"lab's first provisioning took {first[0]:.1f} s, {first[1]} changed). Each row "
        "changes one setting of ansible.cfg through Ansible's environment variables.",
        "",
        *table,
        "",
        "No play gathers facts (`gathering = explicit`; the roles read what they need "
        "with commands), so a fact cache has nothing to keep and is not measured.",
    ]
    update_section("ansible_tuning", "\n".join(body))


if __name__ == "__main__":
    main()
