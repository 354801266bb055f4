# Filters for drivelab's playbooks: building structures that would be unreadable in Jinja.
from __future__ import annotations


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


class FilterModule:
    def filters(self):
        return {
            "drivelab_hba_rules": drivelab_hba_rules,
            "drivelab_init_facts": drivelab_init_facts,
        }
