#!/usr/bin/python
"""A container lab host: systemd-nspawn booting systemd as PID 1 in the host's network
namespace, over its own copy-on-write layer of the cached Debian image.

The layer (overlayfs: the image below, <dir>/upper above, mounted at <dir>/root) carries
what makes the host this host: its name, the lab's host key and the lab key as root's
only authorized key, sshd listening on its address only, apt through the lab's proxy.
The DB host's container is started inside the lab's DB cgroups, so the memory limit and
the IOPS caps hold for everything in it, and its candidate drives are bound in."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_lab import (
    LabError,
    end_pids,
    netns_pids,
    pid_alive,
    run,
    ssh_answers,
)

CGROUP_ROOT = "/sys/fs/cgroup"

DOCUMENTATION = r"""
module: lab_container
short_description: One booted systemd-nspawn container of the drivelab container lab
options:
  name: {description: host name (inventory name), type: str, required: true}
  netns: {description: the host's network namespace, type: str, required: true}
  address: {description: the host's address; sshd listens there only, type: str, required: true}
  image: {description: the image's root filesystem (lower layer), type: str, required: true}
  dir: {description: this host's folder (upper, work, root, pid and log files), type: str, required: true}
  binds: {description: paths of this machine bound in at the same path (the DB host's drives), type: list, elements: str, default: []}
  cgroups: {description: cgroup v1 group folders to start it in, type: list, elements: str, default: []}
  writable_proc_sys: {description: "/proc/sys (and /sys) writable inside, as on a real host (the DB host drops caches)", type: bool, default: false}
  files: {description: "files of the layer: [{path, content | src, mode}]", type: list, elements: dict, default: []}
  setenv: {description: "NAME=VALUE environment variables of its PID 1 (systemd passes them to its services)", type: list, elements: str, default: []}
  state: {description: present (booted, sshd answering) or absent, type: str, default: present}
  timeout: {description: seconds to wait for sshd after a start, type: int, default: 120}
"""


def mounted(point):
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        return any(line.split()[4] == point for line in fh)


def running(pidfile):
    """The pid of this host's systemd-nspawn, if it runs."""
    try:
        with open(pidfile, encoding="ascii") as fh:
            pid = int(fh.read().strip())
        with open(f"/proc/{pid}/comm", encoding="ascii") as fh:
            comm = fh.read().strip()
    except (OSError, ValueError):
        return None
    return pid if comm == "systemd-nspawn" and pid_alive(pid) else None


def stop(pid, netns, grace=30.0):
    """Orderly shutdown (nspawn turns SIGTERM into SIGRTMIN+3 for the container's
    systemd); what is left in the namespace after grace seconds is killed."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.2)
    end_pids([pid, *netns_pids(netns)], grace=2.0)


def within(root, path):
    """path's folder, resolved as this machine resolves it, is inside root: a symlink the
    container's own root user left in its layer (/root/.ssh -> /etc, say) must not turn
    a write into the layer into a write to the controller's files."""
    base = os.path.realpath(root).rstrip("/") + "/"
    folder = os.path.dirname(path)
    while not os.path.lexists(folder):
        folder = os.path.dirname(folder)
    return (os.path.realpath(folder).rstrip("/") + "/").startswith(base)


def write_files(root, files):
    """Writes the layer's files through the merged view; returns the paths that changed."""
    changed = []
    for f in files:
        path = os.path.join(root, f["path"].lstrip("/"))
        if not within(root, path):
            raise LabError(f"{f['path']}: its folder leads out of the container's tree")
        if f.get("src"):
            with open(f["src"], "rb") as fh:
                data = fh.read()
        else:
            data = str(f.get("content", "")).encode()
        mode = int(str(f.get("mode", "0644")), 8)
        old = None
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as fh:
                old = fh.read()
        if old == data and (os.stat(path).st_mode & 0o7777) == mode:
            continue
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        if os.path.islink(path):
            os.unlink(path)
        tmp = path + ".drivelab-tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        changed.append(f["path"])
    return changed


def own_hierarchies(root):
    """The hierarchies systemd uses: root itself when it is the v2 mount, else the
    name=systemd v1 hierarchy and the unified one beside it, where mounted."""
    if os.path.isfile(os.path.join(root, "cgroup.controllers")):
        return [root]
    return [
        os.path.join(root, h)
        for h in ("systemd", "unified")
        if os.path.isdir(os.path.join(root, h))
    ]


def argv_for(p, root):
    argv = [
        "systemd-nspawn",
        "--quiet",
        "--boot",
        "--register=no",
        "--keep-unit",
        f"--machine=drivelab-{p['name']}",
        f"--hostname={p['name']}",
        f"--network-namespace-path=/run/netns/{p['netns']}",
        "--console=passive",
        "--link-journal=no",
        "--resolv-conf=off",
        "--timezone=off",
        f"--directory={root}",
    ]
    return (
        argv
        + [f"--bind={dev}" for dev in p["binds"]]
        + [f"--setenv={e}" for e in p.get("setenv", [])]
    )


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "netns": {"type": "str", "required": True},
            "address": {"type": "str", "required": True},
            "image": {"type": "str", "required": True},
            "dir": {"type": "str", "required": True},
            "binds": {"type": "list", "elements": "str", "default": []},
            "setenv": {"type": "list", "elements": "str", "default": []},
            "cgroups": {"type": "list", "elements": "str", "default": []},
            "files": {"type": "list", "elements": "dict", "default": []},
            "writable_proc_sys": {"type": "bool", "default": False},
            "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
            "timeout": {"type": "int", "default": 120},
        },
        supports_check_mode=True,
    )
    p = module.params
    base = os.path.realpath(p["dir"])
    if "drivelab" not in base or not p["netns"].startswith("drivelab-"):
        module.fail_json(msg=f"container {p['name']}: folder and namespace must be drivelab's")
    root, pidfile = os.path.join(base, "root"), os.path.join(base, "nspawn.pid")
    argv_file, log = os.path.join(base, "nspawn.argv"), os.path.join(base, "nspawn.log")
    pid = running(pidfile)

    if p["state"] == "absent":
        if module.check_mode:
            module.exit_json(changed=bool(pid or os.path.exists(base)))
        if pid:
            stop(pid, p["netns"])
        if mounted(root):
            run(["umount", root])
        existed = os.path.exists(base)
        shutil.rmtree(base, ignore_errors=True)
        module.exit_json(changed=bool(pid) or existed)

    if not os.path.isfile(os.path.join(p["image"], "etc/os-release")):
        module.fail_json(msg=f"container {p['name']}: no image at {p['image']}")
    for dev in p["binds"]:
        if not os.path.exists(dev):
            module.fail_json(msg=f"container {p['name']}: {dev} does not exist")
    argv = argv_for(p, root)
    if p["writable_proc_sys"]:
        # systemd-nspawn mounts /proc/sys and /sys read-only unless told otherwise
        argv = ["env", "SYSTEMD_NSPAWN_API_VFS_WRITABLE=yes", *argv]
    try:
        with open(argv_file, encoding="utf-8") as fh:
            same_argv = json.load(fh) == argv
    except (OSError, ValueError):
        same_argv = False
    if module.check_mode:
        module.exit_json(changed=not (pid and same_argv))
    changed = False
    for sub in ("upper", "work", "root"):
        os.makedirs(os.path.join(base, sub), mode=0o755, exist_ok=True)
    os.chmod(base, 0o700)
    if not mounted(root):
        if pid:  # its root went away under it: start over
            stop(pid, p["netns"])
            pid = None
        opts = f"lowerdir={p['image']},upperdir={base}/upper,workdir={base}/work"
        run(["mount", "-t", "overlay", "overlay", "-o", opts, root])
        changed = True
    try:
        written = write_files(root, p["files"])
    except (LabError, OSError) as err:
        module.fail_json(msg=f"container {p['name']}: {err}")
    if pid and same_argv and not written:
        if not ssh_answers(p["address"]):
            module.fail_json(
                msg=f"container {p['name']}: runs (pid {pid}) but sshd does not answer"
            )
        module.exit_json(changed=changed, pid=pid)
    if pid:
        stop(pid, p["netns"])

    # Each container gets a group of its own in the hierarchies systemd uses
    # (name=systemd, and the unified one beside v1): nspawn puts the container's systemd
    # in a subgroup of its caller's, and two containers started from the root group
    # would share one tree, so that stopping a unit in one could end processes of the
    # other. The lab's prefix keeps them the lab's to remove.
    # On a machine with only cgroup v2 the hierarchy is CGROUP_ROOT itself; a hierarchy
    # the host already joins through ``cgroups`` (the DB host's drivelab-db on v2) is its
    # own group there.
    own = [
        os.path.join(h, f"drivelab-{p['name']}")
        for h in own_hierarchies(CGROUP_ROOT)
        if not any(g.startswith(h + "/") for g in p["cgroups"])
    ]
    for group in own:
        os.makedirs(group, exist_ok=True)

    def join_cgroups():
        for group in p["cgroups"] + own:
            with open(os.path.join(group, "cgroup.procs"), "w", encoding="ascii") as fh:
                fh.write(str(os.getpid()))

    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=join_cgroups,  # noqa: PLW1509 - the module runs no threads
        )
    with open(pidfile, "w", encoding="ascii") as fh:
        fh.write(f"{proc.pid}\n")
    with open(argv_file, "w", encoding="utf-8") as fh:
        json.dump(argv, fh)
    started = time.monotonic()
    while not ssh_answers(p["address"]):
        if proc.poll() is not None or time.monotonic() - started > p["timeout"]:
            with open(log, "rb") as fh:
                tail = fh.read()[-600:].decode(errors="replace").strip().splitlines()[-3:]
            if proc.poll() is None:
                stop(proc.pid, p["netns"])
            module.fail_json(
                msg=f"container {p['name']}: sshd did not answer on {p['address']}:22 "
                f"within {p['timeout']} s ({' | '.join(tail) or 'no output'}; log {log})"
            )
        time.sleep(0.3)
    module.exit_json(
        changed=True,
        pid=proc.pid,
        boot_seconds=round(time.monotonic() - started, 1),
        written=written,
    )


if __name__ == "__main__":
    main()
