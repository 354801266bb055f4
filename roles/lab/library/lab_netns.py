#!/usr/bin/python
"""One lab host: a network namespace with a veth into the lab bridge and one address, and
optionally a second veth into the benchmark network's bridge (eth1) with its address."""

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
  bench: {description: "a second network (the benchmark network): {bridge, veth, address}, eth1 in the namespace", type: dict}
  state: {description: present or absent, type: str, default: present, choices: [present, absent]}
"""


def ensure_present(module, name, bridge, veth, address, *, bench=None):
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
    changed |= ensure_link(module, name, bridge, veth, inner_name="eth0", address=address)
    if bench is not None:
        changed |= ensure_link(
            module,
            name,
            bench["bridge"],
            bench["veth"],
            inner_name="eth1",
            address=bench["address"],
        )
    return changed


def ensure_link(module, name, bridge, veth, *, inner_name, address):
    """A veth pair from bridge into the namespace (named inner_name there), one address."""
    changed = False
    check = module.check_mode
    alias = f"drivelab lab {name}" + ("" if inner_name == "eth0" else f" {inner_name}")
    host_end = ip_json("link", "show", "dev", veth)
    inner = ip_json("link", "show", "dev", inner_name, netns=name)
    if not host_end or not inner:
        changed = True
        if check:
            return changed
        if inner:
            run(["ip", "-n", name, "link", "del", inner_name])
        if host_end:
            run(["ip", "link", "del", veth])
        run(["ip", "link", "add", veth, "type", "veth", "peer", "name", inner_name, "netns", name])
        run(["ip", "link", "set", veth, "alias", alias])
        host_end = ip_json("link", "show", "dev", veth)
        inner = ip_json("link", "show", "dev", inner_name, netns=name)
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
        for link in ip_json("addr", "show", "dev", inner_name, netns=name)
        for a in link.get("addr_info", [])
        if a.get("family") == "inet"
    ]
    for stale in (a for a in addrs if a != address):
        changed = True
        if not check:
            run(["ip", "-n", name, "addr", "del", stale, "dev", inner_name])
    if address not in addrs:
        changed = True
        if not check:
            run(["ip", "-n", name, "addr", "add", address, "dev", inner_name])
    if "UP" not in inner[0].get("flags", []):
        changed = True
        if not check:
            run(["ip", "-n", name, "link", "set", inner_name, "up"])
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
            "bench": {
                "type": "dict",
                "options": {
                    "bridge": {"type": "str", "required": True},
                    "veth": {"type": "str", "required": True},
                    "address": {"type": "str", "required": True},
                },
            },
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
            changed = ensure_present(
                module, p["name"], p["bridge"], p["veth"], p["address"], bench=p["bench"]
            )
        else:
            changed, _ = ensure_absent(module, p["name"])
    except LabError as err:
        module.fail_json(msg=f"namespace {p['name']}: {err}")
    module.exit_json(changed=changed, name=p["name"])


if __name__ == "__main__":
    main()
