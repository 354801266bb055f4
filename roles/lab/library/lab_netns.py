#!/usr/bin/python
"""One lab host: a network namespace with a veth into the lab bridge and one address."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_lab import (
    LabError,
    end_pids,
    ip_json,
    netns_list,
    netns_pids,
    run,
)

DOCUMENTATION = r"""
module: lab_netns
short_description: A drivelab lab host's network namespace, veth pair and address
options:
  name: {description: namespace name (drivelab-<host>), type: str, required: true}
  bridge: {description: lab bridge to attach the host end to, type: str}
  veth: {description: host-side veth name (<= 15 chars), type: str}
  address: {description: the host's address, CIDR, type: str}
  state: {description: present or absent, type: str, default: present, choices: [present, absent]}
"""


def ensure_present(module, name, bridge, veth, address):
    changed = False
    check = module.check_mode
    if name not in netns_list():
        changed = True
        if check:
            return changed
        run(["ip", "netns", "add", name])
    lo = ip_json("link", "show", "dev", "lo", netns=name)
    if lo and "UP" not in lo[0].get("flags", []):
        changed = True
        if not check:
            run(["ip", "-n", name, "link", "set", "lo", "up"])
    host_end = ip_json("link", "show", "dev", veth)
    inner = ip_json("link", "show", "dev", "eth0", netns=name)
    if not host_end or not inner:
        changed = True
        if check:
            return changed
        if inner:
            run(["ip", "-n", name, "link", "del", "eth0"])
        if host_end:
            run(["ip", "link", "del", veth])
        run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name])
        run(["ip", "link", "set", veth, "alias", f"drivelab lab {name}"])
        host_end = ip_json("link", "show", "dev", veth)
        inner = ip_json("link", "show", "dev", "eth0", netns=name)
    if host_end[0].get("master") != bridge:
        changed = True
        if not check:
            run(["ip", "link", "set", veth, "master", bridge])
    if "UP" not in host_end[0].get("flags", []):
        changed = True
        if not check:
            run(["ip", "link", "set", veth, "up"])
    addrs = [
        f"{a['local']}/{a['prefixlen']}"
        for link in ip_json("addr", "show", "dev", "eth0", netns=name)
        for a in link.get("addr_info", [])
        if a.get("family") == "inet"
    ]
    for stale in (a for a in addrs if a != address):
        changed = True
        if not check:
            run(["ip", "-n", name, "addr", "del", stale, "dev", "eth0"])
    if address not in addrs:
        changed = True
        if not check:
            run(["ip", "-n", name, "addr", "add", address, "dev", "eth0"])
    if "UP" not in inner[0].get("flags", []):
        changed = True
        if not check:
            run(["ip", "-n", name, "link", "set", "eth0", "up"])
    return changed


def ensure_absent(module, name):
    if name not in netns_list():
        return False, []
    if module.check_mode:
        return True, []
    # processes first (sshd and the sessions Ansible's persistent SSH leaves, PostgreSQL,
    # pgbench): a namespace deleted under them lingers while they live
    left = end_pids(netns_pids(name))
    if left:
        raise LabError(f"processes {left} in namespace {name} did not end")
    run(["ip", "netns", "del", name])
    return True, []


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "bridge": {"type": "str"},
            "veth": {"type": "str"},
            "address": {"type": "str"},
            "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
        },
        required_if=[("state", "present", ("bridge", "veth", "address"))],
        supports_check_mode=True,
    )
    p = module.params
    if not p["name"].startswith("drivelab-"):
        module.fail_json(msg=f"namespace {p['name']}: not a lab name (must start with drivelab-)")
    try:
        if p["state"] == "present":
            changed = ensure_present(module, p["name"], p["bridge"], p["veth"], p["address"])
        else:
            changed, _ = ensure_absent(module, p["name"])
    except LabError as err:
        module.fail_json(msg=f"namespace {p['name']}: {err}")
    module.exit_json(changed=changed, name=p["name"])


if __name__ == "__main__":
    main()
