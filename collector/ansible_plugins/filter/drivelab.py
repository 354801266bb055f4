# Filters for drivelab's playbooks: building structures that would be unreadable in Jinja.
from __future__ import annotations

import getpass
import hashlib
import importlib.util
import ipaddress
import multiprocessing
import os
import re
import socket
from collections.abc import Mapping, Sequence

from ansible.errors import AnsibleFilterError


def _hba_addresses(client, hostvars, asked=None):
    """The CIDRs ``client`` connects to the DB host from: what it reported itself
    (``asked``: the module drivelab_source_address run for it by the role; else its fact
    ``drivelab_client_sources``, from role drivelab's entry point ``source``), else its
    ``ansible_host`` where that is an address; a host name alone is refused (pg_hba takes
    one, but it is the management name, which need not be where the client connects
    from)."""
    hv = hostvars[client]
    found = (asked or {}).get(client) or hv.get("drivelab_client_sources") or []
    addresses = [s["from"] if isinstance(s, Mapping) else s for s in found]
    if not addresses:
        try:
            addresses = [str(ipaddress.ip_address(str(hv.get("ansible_host") or client)))]
        except ValueError:
            raise AnsibleFilterError(
                f"{client}: where it connects to the DB host from is not known (its"
                f" ansible_host {hv.get('ansible_host', client)!r} is a name): run role"
                " drivelab's entry point source on it first (provision.yml does)"
            ) from None
    cidrs = []
    for text in addresses:
        try:
            address = ipaddress.ip_address(str(text).split("%")[0])
        except ValueError:
            raise AnsibleFilterError(f"{client}: {text!r} is not an IP address") from None
        cidr = f"{address}/{address.max_prefixlen}"
        if cidr not in cidrs:
            cidrs.append(cidr)
    return cidrs


def drivelab_sources_unknown(clients, hostvars):
    """The clients of ``clients`` that have not said where they connect from
    (no ``drivelab_client_sources`` fact yet)."""
    return [c for c in clients if not hostvars[c].get("drivelab_client_sources")]


def drivelab_db_connect(db_host, hostvars):
    """The address the clients connect to on ``db_host``: its ``drivelab_db_address`` (a
    benchmark network apart from the one Ansible uses), else its ``ansible_host``, else
    its inventory name."""
    hv = hostvars[db_host]
    return str(hv.get("drivelab_db_address") or hv.get("ansible_host") or db_host)


def drivelab_check_answers(hosts, hostvars):
    """{host: {ping, host, gate}} of playbooks/check.yml: each host's registered results
    (role drivelab's entry point check) and the gate's answer on the DB host
    (candidate_drive's); a host that was not asked has empty ones."""
    out = {}
    for host in hosts:
        hv = hostvars[host]
        mine = hv.get("drivelab_check") or {}
        out[host] = {
            "ping": mine.get("ping") or {},
            "host": mine.get("host") or {},
            "gate": hv.get("candidate_drive_check"),
        }
    return out


def drivelab_hostport(host, port):
    """'host:port' as a listen address or scrape target takes it: an IPv6 address in
    brackets ('[fd00::2]:9100'), a name or an IPv4 address as it is."""
    text = str(host)
    try:
        if ipaddress.ip_address(text).version == 6:
            text = f"[{text}]"
    except ValueError:
        pass
    return f"{text}:{port}"


def drivelab_hba_rules(clients, hostvars, asked=(), prefix="drivelab_"):
    """pg_hba rules: postgres over the local socket (peer, ident map drivelab); one host
    line per client and address it connects from (its database, its role, that address
    alone: /32 for IPv4, /128 for IPv6, scram-sha-256); then explicit rejects for
    everything else. ``asked``: the results of drivelab_source_address run for some
    clients in a loop (``item`` the client), over their facts."""
    asked = {r["item"]: r.get("sources") for r in asked or () if isinstance(r, Mapping)}
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
        for cidr in _hba_addresses(client, hostvars, asked):
            rules.append(
                {
                    "contype": "host",
                    "databases": name,
                    "users": name,
                    "address": cidr,
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
    """{client: registered pgbench -i result} -> {client: {ran, seconds, rc, caps_lifted,
    start, end}}: start and end as the command task gives them (the client's local time,
    "2026-11-29 11:52:03.123456"), which shows the inits that ran at the same time."""
    out = {}
    for client, res in results.items():
        ran = bool(res) and not res.get("skipped") and "delta" in res
        out[client] = {
            "ran": ran,
            "seconds": _seconds(res["delta"]) if ran else None,
            "rc": res.get("rc") if ran else None,
            "caps_lifted": bool(caps_lifted) if ran else False,
            "start": res.get("start") if ran else None,
            "end": res.get("end") if ran else None,
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


def controller_id():
    """This controller as the lab's lease knows it: a digest of its machine id and its
    boot (cloned controllers share a host name, often a machine id too, never a boot)."""
    parts = []
    for path in ("/etc/machine-id", "/proc/sys/kernel/random/boot_id"):
        try:
            with open(path, encoding="utf-8") as fh:
                parts.append(fh.read().strip())
        except OSError:
            parts.append("")
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:16]


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
        "controller_id": controller_id(),
        "pid": pid,
        "pid_start": start,
        "purpose": purpose,
    }


def drivelab_lease_gone(record):
    """True when a lease record's holder ran on this controller and its process is gone
    (no such pid, or a later process with that number): it cannot renew, take it over."""
    if not record or record.get("controller_id") != controller_id() or not record.get("pid"):
        return False
    start = pid_start(record["pid"])
    return start is None or (record.get("pid_start") is not None and start != record["pid_start"])


def _is_int(value):
    # as Jinja's `integer` test: a bool is not a whole number here
    return isinstance(value, int) and not isinstance(value, bool)


def _is_list(value):
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


#: a candidate drive's settings that are true or false (a string "no" would be true)
FLAGS = ("allow_loop", "power_loss_protection")
#: a signature type as blkid and wipefs name them (linux_raid_member, LVM2_member, ext4)
SIGNATURE_TYPE = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")


def _wipe_ok(value):
    """wipe: true or false, or the signature types the operator accepts to destroy."""
    if isinstance(value, bool):
        return True
    return (
        _is_list(value)
        and bool(value)
        and all(isinstance(t, str) and SIGNATURE_TYPE.match(t) for t in value)
    )


def drivelab_preflight_drives(drives, pattern):
    """The inventory's candidate_drives (a list), each entry checked: the messages of
    the wrong ones (index and name), [] when all are right. One filter run, not an
    assert looped over the entries: every playbook's preflight runs it."""
    if not _is_list(drives):
        return ["candidate_drives must be a list of drives in the inventory"]
    bad = []
    for i, d in enumerate(drives):
        ok = isinstance(d, Mapping) and all((
            isinstance(d.get("name"), str) and re.match(pattern, d["name"]),
            isinstance(d.get("device"), str) and d["device"].startswith("/dev/"),
            all(isinstance(d.get(k, False), bool) for k in FLAGS),
            _wipe_ok(d.get("wipe", False)),
            "size_bytes" not in d or _is_int(d["size_bytes"]),
            "serial" not in d or isinstance(d["serial"], str),
            "nsid" not in d or (_is_int(d["nsid"]) and d["nsid"] >= 1),
            "rpm" not in d or (_is_int(d["rpm"]) and d["rpm"] >= 0),
        ))  # fmt: skip
        if not ok:
            name = d.get("name", "no name") if isinstance(d, Mapping) else "no name"
            bad.append(
                f"candidate_drives[{i}] ({name}): needs name (matching {pattern}), device"
                " (/dev/...); allow_loop and power_loss_protection must be true or false"
                " (not strings), wipe true, false or a list of signature types (wipe:"
                " [linux_raid_member]), size_bytes a whole number, serial a string, nsid (an"
                " NVMe namespace id) a whole number >= 1, rpm a whole"
                " number of revolutions per minute (0: does not rotate)"
            )
    return bad


MOUNT_OPTIONS = re.compile(r"^[A-Za-z0-9_=,.:/-]+$")
#: the host side's filesystem table (candidate_drive's drivelab_argv.FILESYSTEMS), loaded
#: by path as the scenario schema loads it: this repository's roles are beside the plugins
_ARGV_PATH = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 3,
    "roles", "candidate_drive", "module_utils", "drivelab_argv.py",
)  # fmt: skip


def _filesystems():
    spec = importlib.util.spec_from_file_location("drivelab_argv_for_filters", _ARGV_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(module.FILESYSTEMS)


FILESYSTEMS = _filesystems()


def drivelab_preflight_request(request, drives, pattern):
    """candidate_drive_request (a list), each filesystem checked against the inventory's
    candidate_drives: the messages of the wrong ones, [] when all are right."""
    if not _is_list(request):
        return ["candidate_drive_request must be a list of filesystems"]
    names = [d.get("name") for d in drives or [] if isinstance(d, Mapping)]
    taken = [r.get("name") for r in request if isinstance(r, Mapping)]
    bad = []
    for i, r in enumerate(request):
        ok = isinstance(r, Mapping) and all((
            isinstance(r.get("name"), str) and re.match(pattern, r["name"]),
            _is_list(r.get("drives")) and len(r["drives"]) > 0
            and all(x in names for x in r["drives"]),
            r.get("fs", "ext4") in FILESYSTEMS,
            r.get("raid_level", "none") in ("none", "raid0", "raid1", "raid5", "raid10"),
            r.get("raid_method", "btrfs") in ("btrfs", "mdadm"),
            _is_list(r.get("mkfs_options", [])),
            isinstance(r.get("mount_options", "noatime"), str)
            and MOUNT_OPTIONS.match(r.get("mount_options", "noatime")),
            taken.count(r.get("name")) == 1,
        ))  # fmt: skip
        if not ok:
            name = r.get("name", "no name") if isinstance(r, Mapping) else "no name"
            bad.append(
                f"candidate_drive_request[{i}] ({name}): needs a unique name matching {pattern},"
                f" drives out of candidate_drives ({', '.join(str(n) for n in names)}), fs"
                f" {'|'.join(FILESYSTEMS)}, raid_level none|raid0|raid1|raid5|raid10, raid_method"
                " btrfs|mdadm, mkfs_options a list, mount_options a plain option string"
            )
    return bad


#: a name of drivelab's filesystems on the DB host (its mount point's folder)
_FS_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


def drivelab_pg_cluster(filesystem, placement="tablespace", wal_drive=""):
    """The PostgreSQL cluster a cell's databases live in: drivelab's own (tablespace
    placement), ``drivelab_<filesystem>`` (its data directory on the drive), or
    ``drivelab_<filesystem>_wal_<wal drive>`` (its data there, its WAL on the other
    drive): collector.cell.Cell.cluster names it the same way (a unit test holds them
    together). A WAL drive beside a tablespace, or on the data's own drive, is refused:
    a tablespace's WAL is its cluster's, and one drive for both is placement cluster."""
    wal = str(wal_drive or "")
    if placement not in ("tablespace", "cluster"):
        raise AnsibleFilterError(f"placement {placement!r}: tablespace or cluster")
    for what, name in (("filesystem", filesystem), ("WAL drive", wal)):
        if (name or what == "filesystem") and not _FS_NAME.fullmatch(str(name)):
            raise AnsibleFilterError(f"{what} {name!r}: not a drivelab filesystem name")
    if wal and placement != "cluster":
        raise AnsibleFilterError(
            f"WAL drive {wal}: needs placement cluster"
            " (a tablespace's WAL is drivelab's own cluster's)"
        )
    if wal == filesystem:
        raise AnsibleFilterError(
            f"WAL drive {wal}: is the data's own drive (that is placement cluster)"
        )
    if placement == "tablespace":
        return "drivelab"
    return f"drivelab_{filesystem}" + (f"_wal_{wal}" if wal else "")


def drivelab_clusters_on(clusters, filesystems, mount_root):
    """Of ``pg_lsclusters --json``'s clusters, the names of drivelab's (``drivelab_...``)
    whose data directory or WAL folder lies on one of drivelab's ``filesystems`` (mounted
    at ``<mount_root>/<name>``): what must be dropped before those are reformatted."""
    roots = [f"{str(mount_root).rstrip('/')}/{name}/" for name in filesystems]
    found = []
    for c in clusters if _is_list(clusters) else []:
        name = str(c.get("cluster") or "") if isinstance(c, Mapping) else ""
        dirs = [str(c.get(k) or "") for k in ("pgdata", "waldir")] if name else []
        if name.startswith("drivelab_") and any(
            d and (d.rstrip("/") + "/").startswith(r) for d in dirs for r in roots
        ):
            found.append(name)
    return sorted(set(found))


class FilterModule:
    def filters(self):
        return {
            "drivelab_check_answers": drivelab_check_answers,
            "drivelab_db_connect": drivelab_db_connect,
            "drivelab_hba_rules": drivelab_hba_rules,
            "drivelab_hostport": drivelab_hostport,
            "drivelab_sources_unknown": drivelab_sources_unknown,
            "drivelab_init_facts": drivelab_init_facts,
            "drivelab_lease_holder": drivelab_lease_holder,
            "drivelab_lease_gone": drivelab_lease_gone,
            "drivelab_preflight_drives": drivelab_preflight_drives,
            "drivelab_preflight_request": drivelab_preflight_request,
            "drivelab_pg_cluster": drivelab_pg_cluster,
            "drivelab_clusters_on": drivelab_clusters_on,
        }
