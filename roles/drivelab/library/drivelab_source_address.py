#!/usr/bin/python
"""The addresses this client connects to the DB host from: the DB host's address (a name
is resolved here, by the client's own resolver, as libpq resolves it) and, for each of
its addresses, the local address the kernel picks towards it (a UDP socket connected to
it: no packet is sent). The DB host's pg_hba.conf admits the client's role from these
only, so a client whose management address is not the one it reaches the DB host from
(a benchmark network apart, IPv6, NAT-free multi-homing) is admitted from the right one."""

from __future__ import annotations

import socket

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: drivelab_source_address
short_description: the local addresses a client connects to the DB host from
options:
  address: {type: str, required: true, description: "the DB host's address as pgbench is given it (IPv4, IPv6 or a name)"}
  port: {type: int, required: true, description: the PostgreSQL port}
"""


def sources(address: str, port: int) -> list[dict[str, str]]:
    """[{"to": DB host address, "from": this host's address towards it, "family": "ipv4"
    or "ipv6"}] for every address ``address`` resolves to, in the resolver's order.
    Raises OSError when it does not resolve or no route leads to it."""
    out: list[dict[str, str]] = []
    infos = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)
    for family, _, _, _, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect(sockaddr)
            local = sock.getsockname()[0]
        entry = {
            "to": sockaddr[0],
            "from": local.split("%")[0],
            "family": "ipv4" if family == socket.AF_INET else "ipv6",
        }
        if entry not in out:
            out.append(entry)
    return out


def main():
    module = AnsibleModule(
        argument_spec={
            "address": {"type": "str", "required": True},
            "port": {"type": "int", "required": True},
        },
        supports_check_mode=True,
    )
    address, port = module.params["address"], module.params["port"]
    try:
        found = sources(address, port)
    except OSError as exc:
        module.fail_json(
            msg=f"the DB host's address {address!r} cannot be reached from here: {exc}"
        )
    if not found:
        module.fail_json(
            msg=f"the DB host's address {address!r} resolves to no IPv4 or IPv6 address"
        )
    module.exit_json(changed=False, sources=found)


if __name__ == "__main__":
    main()
