"""Every host of an inventory reached at once over SSH, without an Ansible process:
paramiko with the inventory's own key and its known_hosts file only (host keys are never
trusted blindly), one thread per host. ``drivelab run`` asks each host whether it
answers (its preflight) and reads the provisioning stamps this way: with Ansible they
were a process start and a play each (``ansible -m ping``; the stamp play of
provision.yml, on every run on a provisioned lab: docs/scaling.md, "Why the hot path is
shaped as it is").

Only hosts the inventory file names a key and a known_hosts file for are reached so
(:func:`collector.scenario.inventory.ssh_settings`); otherwise, and whenever a host
does not answer here, the caller asks Ansible, whose view of the inventory (group_vars,
templated addresses) is the one that counts: a failure here never refuses anything on
its own."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from collector.paths import host_default

__all__ = ["Answer", "all_hosts", "connect", "on_all", "read_stamps", "settings_of"]


@dataclass(frozen=True)
class Answer:
    """A command's result on one host; ``rc`` None: the host was not reached (``err``
    says why)."""

    rc: int | None
    out: str = ""
    err: str = ""


def connect(ssh: dict[str, Any], timeout: float) -> Any:
    """A paramiko client connected to ``ssh`` (:func:`ssh_settings`' dict): the key
    given, the known_hosts file given, nothing else (no agent, no other keys)."""
    import paramiko  # noqa: PLC0415

    from collector.hosts.trust import KnownHostsPolicy  # noqa: PLC0415

    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(KnownHostsPolicy(ssh["known_hosts"]))
    client.connect(
        ssh["host"], port=ssh["port"], username=ssh["user"],
        key_filename=ssh["key"], look_for_keys=False, allow_agent=False,
        timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
    )  # fmt: skip
    return client


def all_hosts(inventory: dict[str, Any]) -> list[str]:
    """Every host of the inventory file (``all``'s own and each group's), once each."""
    seen: dict[str, None] = dict.fromkeys(inventory["all"].get("hosts") or {})
    for group in (inventory["all"].get("children") or {}).values():
        seen.update(dict.fromkeys((group or {}).get("hosts") or {}))
    return list(seen)


def settings_of(inventory: dict[str, Any], hosts: Iterable[str]) -> dict[str, dict] | None:
    """{host: SSH settings} when the inventory file gives every one of ``hosts`` a key
    and a known_hosts file, else None (Ansible it is)."""
    from collector.scenario.inventory import ssh_settings  # noqa: PLC0415

    out = {}
    for host in hosts:
        ssh = ssh_settings(inventory, host)
        if ssh is None:
            return None
        out[host] = ssh
    return out


def _one(ssh: dict[str, Any], command: str, timeout: float) -> Answer:
    try:
        client = connect(ssh, timeout)
    except Exception as exc:  # paramiko's, socket's: all mean "not reached"
        return Answer(None, err=" ".join(str(exc).split()) or type(exc).__name__)
    try:
        _, stdout, stderr = client.exec_command(command, timeout=timeout)
        out = stdout.read().decode("utf-8", "replace")
        err = stderr.read().decode("utf-8", "replace")
        return Answer(stdout.channel.recv_exit_status(), out, err)
    except Exception as exc:  # a dropped connection, a timeout
        return Answer(None, err=" ".join(str(exc).split()) or type(exc).__name__)
    finally:
        client.close()


def on_all(
    settings: dict[str, dict], command: Callable[[str], str], timeout: float = 10.0
) -> dict[str, Answer]:
    """``command(host)`` run on every host of ``settings`` at once; {host: Answer}."""
    if not settings:
        return {}
    with ThreadPoolExecutor(max_workers=min(32, len(settings))) as pool:
        futures = {h: pool.submit(_one, s, command(h), timeout) for h, s in settings.items()}
        return {h: f.result() for h, f in futures.items()}


#: where provision.yml keeps each host's stamp and the boot it was written in (its plays
#: "Provisioned already" and, the last tasks of each host, "PostgreSQL server, pgbench
#: clients, and their stamps"; mode 0644, so no privilege is needed to read it)
STAMP_DIR = host_default("drivelab_stamp_dir")

#: read_stamps' exit status for "no stamp on this host" (cat's own is 1 for any error)
_NO_STAMP = 3


def read_stamps(
    settings: dict[str, dict], timeout: float = 10.0, folder: str | None = None
) -> dict[str, str | None]:
    """Each host's provisioning stamp as it is on the host (in ``folder``, by default
    :data:`STAMP_DIR`); "" where the host has none, None where it was not reached or
    its stamp could not be read."""
    where = folder or STAMP_DIR

    def command(h: str) -> str:
        f = shlex.quote(f"{where}/{h}")
        return f"if [ -e {f} ]; then cat {f} {BOOT_ID}; else exit {_NO_STAMP}; fi"

    answers = on_all(settings, command, timeout)
    return {
        h: _current_boot(a.out) if a.rc == 0 else "" if a.rc == _NO_STAMP else None
        for h, a in answers.items()
    }


#: the kernel's id of this boot; a stamp's second line is the one it was written in
BOOT_ID = "/proc/sys/kernel/random/boot_id"


def _current_boot(out: str) -> str:
    """The stamp of ``out`` (its two lines, then this boot's id) if written in this boot;
    else the stamp marked so, which matches no hash: a host booted since provisioning
    has lost its mounts and its running cluster, and is provisioned again."""
    lines = out.split()
    if len(lines) == 3 and lines[1] == lines[2]:
        return lines[0]
    return f"{lines[0] if lines else ''} (written before this boot)"
