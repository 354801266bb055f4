#!/usr/bin/python
"""Remove everything the lab made, found by its names, even after a half-failed up.

Order matters: processes inside lab namespaces and cgroups first (sshd, the sessions
Ansible's persistent SSH leaves, PostgreSQL, pgbench, node_exporter) and the controller's
Prometheus (by its pidfile in the lab folder), then mounts of lab loop devices,
loop devices (retried: a detached loop can linger a moment after umount), cgroups,
namespaces, the bridge, files. Safe to run twice.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_cgroup import Cgroupfs, lab_groups, lift_caps
from ansible.module_utils.drivelab_lab import (
    LabError,
    end_pids,
    ip_json,
    netns_list,
    netns_pids,
    run,
)

DOCUMENTATION = r"""
module: lab_teardown
short_description: Tear down the drivelab local lab
options:
  prefix: {description: name prefix of lab namespaces and cgroups, type: str, default: drivelab}
  dirs: {description: lab folders (drive files live there), type: list, elements: str, required: true}
  bridge: {description: the lab bridge, type: str, required: true}
  marker: {description: alias that marks lab links, type: str, required: true}
  files: {description: other generated files to remove, type: list, elements: str, default: []}
  cgroup_root: {description: where cgroups are mounted (v1 controllers below it, or the v2 mount), type: str, default: /sys/fs/cgroup}
  pg_clusters: {description: drop the PostgreSQL clusters named <prefix>* (the lab's), type: bool, default: false}
"""


def unescape(field):
    return (
        field.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
    )


def lab_loops(dirs):
    rc, out, _ = run(["losetup", "-J", "-l", "-O", "NAME,BACK-FILE,MAJ:MIN"], check=False)
    if rc != 0 or not out.strip():
        return []
    roots = [os.path.realpath(d) + os.sep for d in dirs]
    loops = []
    for dev in json.loads(out).get("loopdevices", []):
        back = (dev.get("back-file") or "").removesuffix(" (deleted)")
        if any(os.path.realpath(back).startswith(r) for r in roots):
            loops.append(dev)
    return loops


def lab_mounts(loops):
    """Mount points whose source is a lab loop device, deepest first."""
    names = {d["name"] for d in loops}
    majmin = {d.get("maj:min") for d in loops}
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            source = rfields[1] if len(rfields) > 1 else ""
            if source in names or fields[2] in majmin:
                points.append(unescape(fields[4]))
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def mounted_under(path):
    root = os.path.realpath(path).rstrip("/") + "/"
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        points = [unescape(line.split()[4]) for line in fh]
    return [m for m in points if (m.rstrip("/") + "/").startswith(root)]


def lab_pg_clusters(prefix):
    """[(version, name)] of PostgreSQL clusters named like the lab's (Debian's pg_lsclusters)."""
    rc, out, _ = run(["pg_lsclusters", "--json"], check=False)
    if rc != 0 or not out.strip():
        return []
    return [
        (str(c.get("version") or c["config"]["cluster_name"].split("/")[0]), c["cluster"])
        for c in json.loads(out)
        if c.get("cluster", "").startswith(prefix)
    ]


# Daemons of the lab that run on the controller, in no lab namespace: (pidfile below a
# lab folder, program). The lab's Prometheus (role prometheus_server), its apt proxy, its
# results store's postmaster (the first line of postmaster.pid), each container host's
# systemd-nspawn, and the cliff watcher (module lab_cliff), which may write a cap.
DAEMONS = (
    ("cliff/watcher.pid", b"drivelab-cliff"),
    ("prometheus/prometheus.pid", b"prometheus"),
    ("results-pg/data/postmaster.pid", b"postgres"),
    ("apt-cacher-ng/apt-cacher-ng.pid", b"apt-cacher-ng"),
    ("containers/*/nspawn.pid", b"systemd-nspawn"),
    ("vms/*/qemu.pid", b"qemu-system-x86_64"),
)


def lab_daemons(dirs, only=None):
    """Pids of the lab's own daemons, from their pidfiles in the lab folders; only a live
    process whose program is the one named (a stale pidfile's pid may belong to anything
    by now)."""
    pids = []
    for d in dirs:
        for pattern, program in DAEMONS:
            if only and program != only:
                continue
            for pidfile in glob.glob(os.path.join(d, pattern)):
                try:
                    with open(pidfile, encoding="ascii") as fh:
                        pid = int(fh.readline().strip())
                    with open(f"/proc/{pid}/cmdline", "rb") as fh:
                        argv0 = fh.read().split(b"\0")[0]
                except (OSError, ValueError):
                    continue
                if pid > 1 and os.path.basename(argv0) == program:
                    pids.append(pid)
    return pids


def stop_containers(pids, grace=30.0):
    """An orderly shutdown of each container host first: systemd-nspawn turns SIGTERM
    into SIGRTMIN+3 for the container's systemd, which stops PostgreSQL and the rest as a
    real host shuts down. Whatever is left after grace seconds is killed with the rest."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
        time.sleep(0.2)


def cgroup_tree(group):
    """group and every cgroup below it, deepest first (systemd in a container host
    makes its own groups below the one the container was started in)."""
    found = []
    for top, subdirs, _ in os.walk(group):
        found += [os.path.join(top, s) for s in subdirs]
    return [*sorted(found, key=lambda g: g.count("/"), reverse=True), group]


def retry(fn, what, tries=50, delay=0.1):
    last = None
    for _ in range(tries):
        try:
            return fn()
        except LabError as err:
            last = err
            time.sleep(delay)
    raise LabError(f"{what}: {last}")


def main():
    module = AnsibleModule(
        argument_spec={
            "prefix": {"type": "str", "default": "drivelab"},
            "dirs": {"type": "list", "elements": "str", "required": True},
            "bridge": {"type": "str", "required": True},
            "marker": {"type": "str", "required": True},
            "files": {"type": "list", "elements": "str", "default": []},
            "cgroup_root": {"type": "str", "default": "/sys/fs/cgroup"},
            "pg_clusters": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    prefix = p["prefix"]
    if not prefix.startswith("drivelab"):
        module.fail_json(
            msg=f"prefix {prefix}: refusing to tear down names not starting with drivelab"
        )
    for d in p["dirs"]:
        if "drivelab" not in os.path.realpath(d):
            module.fail_json(msg=f"folder {d}: not a drivelab folder, refusing")
    done = []
    namespaces = [n for n in netns_list() if n.startswith(prefix + "-")]
    cgroups = lab_groups(p["cgroup_root"], prefix)
    loops = lab_loops(p["dirs"])
    mounts = lab_mounts(loops)
    bridge = [x for x in ip_json("link", "show") if x.get("ifname") == p["bridge"]]
    ours_bridge = bool(bridge) and bridge[0].get("ifalias") == p["marker"]
    paths = [x for x in p["dirs"] + p["files"] if os.path.lexists(x)]
    clusters = lab_pg_clusters(prefix) if p["pg_clusters"] else []
    daemons = lab_daemons(p["dirs"])
    if module.check_mode:
        todo = (
            namespaces
            + cgroups
            + [x["name"] for x in loops]
            + mounts
            + paths
            + [c[1] for c in clusters]
            + [f"lab daemon pid {pid}" for pid in daemons]
        )
        module.exit_json(changed=bool(todo or ours_bridge), would_remove=todo)
    try:
        # the cliff watcher first, which would put a cap back; then the IOPS caps off: a
        # process with I/O queued on a 120-IOPS device cannot die until that I/O is done
        watcher = lab_daemons(p["dirs"], only=b"drivelab-cliff")
        if watcher and end_pids(watcher):
            raise LabError(f"the cliff watcher {watcher} did not end")
        for group in cgroups:
            lift_caps(Cgroupfs(), group)
        containers = lab_daemons(p["dirs"], only=b"systemd-nspawn")
        if containers:
            stop_containers(containers)
            done.append(f"shut down {len(containers)} container hosts")
        pids = [pid for ns in namespaces for pid in netns_pids(ns)]
        for group in cgroups:
            for sub in cgroup_tree(group):
                with open(os.path.join(sub, "cgroup.procs"), encoding="ascii") as fh:
                    pids += [int(x) for x in fh.read().split()]
        # the lab's daemons on the controller: in no lab namespace, state in a lab folder
        pids += lab_daemons(p["dirs"])
        if pids:
            left = end_pids(sorted(set(pids)))
            if left:
                raise LabError(f"lab processes {left} did not end")
            done.append(f"ended {len(set(pids))} lab processes")
        # the lab's PostgreSQL clusters (their processes ended above): config and data
        for version, cluster in clusters:
            run(["pg_dropcluster", version, cluster])
            done.append(f"dropped PostgreSQL cluster {version}/{cluster}")
        for point in mounts:
            retry(lambda point=point: run(["umount", point]), f"umount {point}")
            done.append(f"unmounted {point}")
        for dev in loops:
            retry(lambda dev=dev: run(["losetup", "-d", dev["name"]]), f"detach {dev['name']}")
            done.append(f"detached {dev['name']}")
        # what else is mounted in a lab folder: the container hosts' overlay layers
        for d in p["dirs"]:
            for point in sorted(mounted_under(d), key=lambda m: m.count("/"), reverse=True):
                retry(lambda point=point: run(["umount", point]), f"umount {point}")
                done.append(f"unmounted {point}")
        for group in cgroups:

            def rmdir(group=group):
                try:
                    for sub in cgroup_tree(group):
                        os.rmdir(sub)
                except OSError as err:
                    raise LabError(f"{err.filename}: {err.strerror}") from err

            retry(rmdir, f"remove cgroup {group}")
            done.append(f"removed cgroup {group}")
        for ns in namespaces:
            run(["ip", "netns", "del", ns])
            done.append(f"deleted namespace {ns}")
        for link in ip_json("link", "show"):
            if link.get("ifalias", "").startswith(p["marker"]) and link["ifname"] != p["bridge"]:
                run(["ip", "link", "del", link["ifname"]], check=False)
        if ours_bridge:
            run(["ip", "link", "del", p["bridge"]])
            done.append(f"deleted bridge {p['bridge']}")

        # loop devices may still be going away: wait until no lab loop remains
        def no_loops_left():
            if lab_loops(p["dirs"]):
                raise LabError("still attached")

        retry(no_loops_left, "lab loop devices")
        for path in paths:
            busy = mounted_under(path)
            if busy:
                raise LabError(f"{path} still holds mounts {busy}: not removing it")
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            done.append(f"removed {path}")
    except LabError as err:
        module.fail_json(msg=f"lab down: {err}", done=done)
    module.exit_json(changed=bool(done), done=done)


if __name__ == "__main__":
    main()
