"""``drivelab status [--inventory ...]``: the lab's lease on the inventory's DB host (free,
or held by whom, running which scenario and cell, since when, expected end), read on the
host itself, so every controller sees the same (:mod:`collector.hosts.lease`)."""

from __future__ import annotations

import argparse
import json

from collector import build
from collector.cli.options import inventory_file
from collector.hosts import lease


def cmd_status(args: argparse.Namespace) -> int:
    from collector import scenario as sc  # noqa: PLC0415

    path = inventory_file(args.inventory)
    doc = lease.query(path, sc.load_inventory(path))
    if args.json:
        print(json.dumps(build.stamped(doc), indent=2))
    else:
        print(f"lab lease on {doc['db_host']}: {doc['text']}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="who holds the lab (the lease on the DB host)")
    p.add_argument("-i", "--inventory", help="inventory folder or file (default: the local lab's)")
    p.add_argument("--json", action="store_true", help="machine-readable")
    p.set_defaults(func=cmd_status)
