#!/usr/bin/python
"""A lab host's sshd: started inside the host's namespace (and cgroups), on its address."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_lab import end_pids, pid_alive, same_netns

DOCUMENTATION = r"""
module: lab_sshd
short_description: sshd for one drivelab lab host
options:
  netns: {description: the host's namespace, type: str, required: true}
  address: {description: address to listen on, type: str, required: true}
  config: {description: sshd_config path, type: str, required: true}
  pidfile: {description: pid file path, type: str, required: true}
  cgroups: {description: cgroup v1 group folders to start it in, type: list, elements: str, default: []}
  restart: {description: restart a running sshd (its config changed), type: bool, default: false}
"""


def listen_address(pid):
    """The ListenAddress the running sshd was started with (sshd rewrites its title into
    one space-separated string, so read it as text)."""
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        title = fh.read().replace(b"\0", b" ").decode(errors="replace")
    match = re.search(r"ListenAddress=(\S+)", title)
    return match.group(1) if match else None


def running(pidfile, netns):
    try:
        with open(pidfile, encoding="ascii") as fh:
            pid = int(fh.read().strip())
    except (OSError, ValueError):
        return None
    if pid_alive(pid) and same_netns(pid, netns):
        with open(f"/proc/{pid}/comm", encoding="ascii") as fh:
            if fh.read().strip() == "sshd":
                return pid
    return None


def listening(address, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, 22), timeout=1):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def main():
    module = AnsibleModule(
        argument_spec={
            "netns": {"type": "str", "required": True},
            "address": {"type": "str", "required": True},
            "config": {"type": "str", "required": True},
            "pidfile": {"type": "str", "required": True},
            "cgroups": {"type": "list", "elements": "str", "default": []},
            "restart": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    pid = running(p["pidfile"], p["netns"])
    if pid and not p["restart"] and listen_address(pid) == p["address"]:
        module.exit_json(changed=False, pid=pid)
    if module.check_mode:
        module.exit_json(changed=True)
    if pid:
        end_pids([pid])
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)

    def join_cgroups():
        for group in p["cgroups"]:
            with open(os.path.join(group, "cgroup.procs"), "w", encoding="ascii") as fh:
                fh.write(str(os.getpid()))

    # nsenter switches the network namespace only: unlike `ip netns exec`, it does not
    # give sshd a private mount namespace, so the DB host's mounts are the machine's
    # (visible to the gate, to tests and to `lab down`), as on a real host.
    argv = [
        "nsenter",
        f"--net=/run/netns/{p['netns']}",
        "/usr/sbin/sshd",
        "-f",
        p["config"],
        "-o",
        f"ListenAddress={p['address']}",
        "-o",
        f"PidFile={p['pidfile']}",
    ]
    proc = subprocess.run(  # sshd daemonises: the parent returns at once
        argv, capture_output=True, text=True, preexec_fn=join_cgroups, check=False
    )
    if proc.returncode != 0:
        module.fail_json(msg=f"sshd in {p['netns']}: {proc.stderr.strip()}")
    if not listening(p["address"]):
        module.fail_json(msg=f"sshd in {p['netns']}: not listening on {p['address']}:22 after 10 s")
    module.exit_json(changed=True, pid=running(p["pidfile"], p["netns"]))


if __name__ == "__main__":
    main()
