#!/usr/bin/python
"""Ensure the lab's bridge, refusing a same-named link or subnet that is not the lab's."""

from __future__ import annotations

import ipaddress

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_lab import LabError, ip_json, run

DOCUMENTATION = r"""
module: lab_bridge
short_description: The drivelab lab's bridge (created only if nothing else holds its name or subnet)
options:
  name: {description: bridge name, type: str, required: true}
  address: {description: "the controller's address on it, CIDR (with controller false: its subnet's network, checked only)", type: str, required: true}
  controller: {description: "false: the controller has no address on it (the benchmark network: hosts only)", type: bool, default: true}
  marker: {description: link alias that marks the link as the lab's, type: str, required: true}
"""


def conflicts(name, marker, net):
    """Names of links (not the lab's bridge) holding the name, an address or a route in net."""
    found = []
    ours = set()
    for link in ip_json("link", "show"):
        if link.get("ifalias", "").startswith(marker):
            ours.add(link.get("ifname"))
        elif link.get("ifname") == name:
            found.append(f"bridge name {name} is held by a link that is not the lab's")
    for link in ip_json("addr", "show"):
        if link.get("ifname") in ours:
            continue
        for addr in link.get("addr_info", []):
            if addr.get("family") != "inet":
                continue
            iface = ipaddress.ip_interface(f"{addr['local']}/{addr['prefixlen']}")
            if iface.network.overlaps(net):
                found.append(
                    f"subnet {net} overlaps {iface} on {link['ifname']}, which is not the lab's"
                )
    for route in ip_json("route", "show"):
        dst = route.get("dst")
        if not dst or dst == "default" or route.get("dev") in ours:
            continue
        if ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False).overlaps(net):
            found.append(
                f"subnet {net} overlaps route {dst} via {route.get('dev')}, which is not the lab's"
            )
    return found


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "address": {"type": "str", "required": True},
            "controller": {"type": "bool", "default": True},
            "marker": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    name, marker = module.params["name"], module.params["marker"]
    iface = ipaddress.ip_interface(module.params["address"])
    wanted = [str(iface)] if module.params["controller"] else []
    try:
        problems = conflicts(name, marker, iface.network)
        if problems:
            # a refusal (the operator picks another --subnet or --bridge), not a failure
            module.fail_json(
                msg="; ".join(dict.fromkeys(problems)) + ": nothing created", refusal="not_the_labs"
            )
        changed = False
        links = {link["ifname"]: link for link in ip_json("link", "show")}
        if name not in links:
            changed = True
            if not module.check_mode:
                run(["ip", "link", "add", name, "type", "bridge"])
                run(["ip", "link", "set", name, "alias", marker])
        addrs = [
            f"{a['local']}/{a['prefixlen']}"
            for link in ip_json("addr", "show", "dev", name)
            for a in link.get("addr_info", [])
            if a.get("family") == "inet"
        ]
        for stale in (a for a in addrs if a not in wanted):
            changed = True
            if not module.check_mode:
                run(["ip", "addr", "del", stale, "dev", name])
        if wanted and wanted[0] not in addrs:
            changed = True
            if not module.check_mode:
                run(["ip", "addr", "add", str(iface), "dev", name])
        link = links.get(name, {})
        if "UP" not in link.get("flags", []):
            changed = True
            if not module.check_mode:
                run(["ip", "link", "set", name, "up"])
    except LabError as err:
        module.fail_json(msg=f"bridge {name}: {err}")
    module.exit_json(changed=changed, name=name, address=wanted[0] if wanted else None)


if __name__ == "__main__":
    main()
