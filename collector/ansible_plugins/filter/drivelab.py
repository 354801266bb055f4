# Filters for drivelab's playbooks: building structures that would be unreadable in Jinja.
from __future__ import annotations

import getpass
import multiprocessing
import os
import socket


def drivelab_hba_rules(clients, hostvars, prefix="drivelab_"):
    """pg_hba rules: postgres over the local socket (peer, ident map drivelab); one host
    line per client (its database, its role, its own address /32, scram-sha-256);
    then explicit rejects for everything else."""
    rules = [
        {
            "contype": "local",
            "databases": "all",
            "users": "postgres",
            "method": "peer",
            "options": "map=drivelab",
        }
    ]
    for client in clients:
        name = f"{prefix}{client}"
        rules.append(
            {
                "contype": "host",
                "databases": name,
                "users": name,
                "address": f"{hostvars[client]['ansible_host']}/32",
                "method": "scram-sha-256",
            }
        )
    rules += [
        {"contype": "local", "databases": "all", "users": "all", "method": "reject"},
        {
            "contype": "host",
            "databases": "all",
            "users": "all",
            "address": "0.0.0.0/0",
            "method": "reject",
        },
        {
            "contype": "host",
            "databases": "all",
            "users": "all",
            "address": "::/0",
            "method": "reject",
        },
    ]
    return rules


def _seconds(delta):
    """'0:00:02.412345' (Ansible's command delta) -> 2.412345."""
    hours, minutes, seconds = str(delta).split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def drivelab_init_facts(results, caps_lifted):
    """{client: registered pgbench -i result} -> {client: {ran, seconds, rc, caps_lifted}}."""
    out = {}
    for client, res in results.items():
        ran = bool(res) and not res.get("skipped") and "delta" in res
        out[client] = {
            "ran": ran,
            "seconds": _seconds(res["delta"]) if ran else None,
            "rc": res.get("rc") if ran else None,
            "caps_lifted": bool(caps_lifted) if ran else False,
        }
    return out


def pid_start(pid):
    """When process ``pid`` of this machine started (clock ticks since boot, field 22 of
    /proc/<pid>/stat), or None when there is no such process: with the pid it names one
    process, not a later one given the same number."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except (OSError, ValueError, TypeError):
        return None
    fields = text[text.rfind(")") + 2 :].split()  # after "(comm)", which may hold spaces
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def controller_process():
    """(pid, start) of the program this runs in on the controller: ansible-playbook's
    own process (its workers are multiprocessing children of it), or this process."""
    parent = multiprocessing.parent_process()
    pid = parent.pid if parent is not None and parent.pid else os.getpid()
    return pid, pid_start(pid)


def drivelab_lease_holder(purpose):
    """The lab lease's holder record for a playbook called directly: who runs it, on which
    controller, its process."""
    pid, start = controller_process()
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {
        "user": user,
        "controller": socket.gethostname(),
        "pid": pid,
        "pid_start": start,
        "purpose": purpose,
    }


def drivelab_lease_gone(record):
    """True when a lease record's holder ran on this controller and its process is gone
    (no such pid, or a later process with that number): it cannot renew, take it over."""
    if not record or record.get("controller") != socket.gethostname() or not record.get("pid"):
        return False
    start = pid_start(record["pid"])
    return start is None or (record.get("pid_start") is not None and start != record["pid_start"])


class FilterModule:
    def filters(self):
        return {
            "drivelab_hba_rules": drivelab_hba_rules,
            "drivelab_init_facts": drivelab_init_facts,
            "drivelab_lease_holder": drivelab_lease_holder,
            "drivelab_lease_gone": drivelab_lease_gone,
        }
