"""Who the DB host's pg_hba.conf lets in: each client's role into its own database from the
address the client itself connects from, for a client named by a host name, by an IPv4
address and by an IPv6 address; every rule as community.postgresql's postgresql_pg_hba
(the module that writes the file) parses it. The addresses come from the module
drivelab_source_address, run here on this machine's own loopback."""

from __future__ import annotations

import socket

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.community.postgresql.plugins.modules.postgresql_pg_hba import PgHbaRule

from collector.ansible_plugins.filter import drivelab as filters
from tests.unit.hostcode import library_module

source_address = library_module("drivelab", "drivelab_source_address")


def host_lines(rules: list[dict]) -> dict[str, list[str]]:
    """{database: [address, ...]} of the rules that let someone in over TCP."""
    out: dict[str, list[str]] = {}
    for rule in rules:
        PgHbaRule(rule_dict=rule)  # the module's own parser: raises on what it refuses
        if rule["contype"] == "host" and rule["method"] != "reject":
            out.setdefault(rule["databases"], []).append(rule["address"])
    return out


def test_a_named_an_ipv4_and_an_ipv6_client_each_in_from_its_own_source() -> None:
    hostvars = {
        # named by DNS, as a real inventory does; reached the DB host from the benchmark network
        "client1": {
            "ansible_host": "client1.lab.example.org",
            "drivelab_client_sources": [
                {"to": "192.168.50.2", "from": "192.168.50.11", "family": "ipv4"}
            ],
        },
        # by address, and nothing reported: that address
        "client2": {"ansible_host": "10.213.0.12"},
        # IPv6 (a link-local source reports its scope, which pg_hba does not take)
        "client3": {
            "ansible_host": "client3.lab.example.org",
            "drivelab_client_sources": [
                {"to": "fd00:50::2", "from": "fd00:50::13", "family": "ipv6"},
                {"to": "fe80::2", "from": "fe80::13%eth1", "family": "ipv6"},
            ],
        },
    }
    rules = filters.drivelab_hba_rules(["client1", "client2", "client3"], hostvars)
    assert host_lines(rules) == {
        "drivelab_client1": ["192.168.50.11/32"],
        "drivelab_client2": ["10.213.0.12/32"],
        "drivelab_client3": ["fd00:50::13/128", "fe80::13/128"],
    }
    # a role only into its own database, and everything else rejected, IPv4 and IPv6
    for rule in rules:
        if rule["contype"] == "host" and rule["method"] != "reject":
            assert rule["users"] == rule["databases"]
    rejects = [r["address"] for r in rules if r["method"] == "reject" and r["contype"] == "host"]
    assert rejects == ["0.0.0.0/0", "::/0"]


def test_a_client_known_only_by_name_is_refused_naming_it() -> None:
    """The old rule wrote 'client1.lab.test/32', which the module refused after the file
    was half-planned; a management name says nothing of where a client connects from."""
    with pytest.raises(AnsibleFilterError, match=r"^client1: where it connects to the DB host"):
        filters.drivelab_hba_rules(["client1"], {"client1": {"ansible_host": "client1.lab.test"}})


def test_which_clients_still_have_to_say_where_they_connect_from() -> None:
    hostvars = {"client1": {"drivelab_client_sources": [{"from": "10.0.0.1"}]}, "client2": {}}
    assert filters.drivelab_sources_unknown(["client1", "client2"], hostvars) == ["client2"]


def test_the_address_clients_connect_to() -> None:
    assert filters.drivelab_db_connect("pgbox", {"pgbox": {}}) == "pgbox"
    assert filters.drivelab_db_connect("pgbox", {"pgbox": {"ansible_host": "pgbox.mgmt"}}) == (
        "pgbox.mgmt"
    )
    bench = {"ansible_host": "pgbox.mgmt", "drivelab_db_address": "fd00:50::2"}
    assert filters.drivelab_db_connect("pgbox", {"pgbox": bench}) == "fd00:50::2"


def test_the_source_towards_an_address_is_the_kernels_choice() -> None:
    assert source_address.sources("127.0.0.1", 5440) == [
        {"to": "127.0.0.1", "from": "127.0.0.1", "family": "ipv4"}
    ]
    # a name is resolved on the client, every address it has
    found = source_address.sources("localhost", 5440)
    assert {"to": "127.0.0.1", "from": "127.0.0.1", "family": "ipv4"} in found


def test_the_source_towards_ipv6_loopback() -> None:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock:
            sock.connect(("::1", 5440))
    except OSError as exc:
        pytest.fail(f"this machine has no IPv6 loopback ({exc}): the test needs one")
    assert source_address.sources("::1", 5440) == [{"to": "::1", "from": "::1", "family": "ipv6"}]


def test_an_address_that_does_not_resolve_is_an_oserror() -> None:
    with pytest.raises(OSError):
        source_address.sources("no-such-host.invalid", 5440)


def test_host_and_port_for_listen_addresses_and_scrape_targets() -> None:
    assert filters.drivelab_hostport("10.213.0.2", 9100) == "10.213.0.2:9100"
    assert filters.drivelab_hostport("fd00:50::2", 9100) == "[fd00:50::2]:9100"
    assert filters.drivelab_hostport("pgbox.lab.example.org", 9100) == "pgbox.lab.example.org:9100"


def test_what_the_role_asked_in_its_own_loop_counts_over_the_facts() -> None:
    """A playbook that writes pg_hba.conf without provision.yml's play asks the clients
    from the role (a loop over them, delegated): its results are read as the facts."""
    hostvars = {"client1": {"ansible_host": "client1.lab.example.org"}}
    asked = [{"item": "client1", "sources": [{"from": "fd00:50::11", "family": "ipv6"}]}]
    rules = filters.drivelab_hba_rules(["client1"], hostvars, asked)
    assert host_lines(rules) == {"drivelab_client1": ["fd00:50::11/128"]}
