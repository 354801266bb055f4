"""``drivelab check`` and ``drivelab drives``: an inventory's hosts and the DB host's block
devices as drivelab will use them, before any run, read-only.

``check`` runs playbooks/check.yml (every host: SSH and Python as its login, sudo,
memory, PostgreSQL's major version, the packages the roles install, free space, the
kernel's clock state; the DB host's candidate drives through the gate) and measures each
host's clock against this one over its own session (the exchange the start uses), then
says one line per problem, naming the host and what to do. Exit 0 when there is none,
1 when there are (the inventory is not ready), 2 for a user error.

``drives`` runs playbooks/block_devices.yml and lists the DB host's whole block devices
with the gate's verdict; ``--yaml`` prints ``candidate_drives`` entries for those it
would format, ready to paste into the DB host's variables."""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from collector import build
from collector.cli.options import inventory_file
from collector.hosts.hostcheck import Problem, check_inventory, dataset_problems, problems

__all__ = ["Problem", "candidate_entries", "check_text", "problems", "register"]


def _summary(host: str, ans: dict[str, Any], clock: dict[str, Any] | None) -> str:
    mine = ans.get("host") or {}
    if not mine or mine.get("failed") or mine.get("unreachable"):
        return f"{host}: not ready"
    mem = (mine.get("memory") or {}).get("memory_bytes")
    words = [f"Python {mine.get('python')}"]
    pg = (mine.get("postgresql") or {}).get("major")
    if pg:
        words.append(f"PostgreSQL {pg}")
    if isinstance(mem, int):
        words.append(f"memory {mem / 2**30:,.1f} GiB")
    gate = ans.get("gate")
    if gate is not None:
        words.append(f"{len(gate.get('drives') or [])} candidate drives pass the gate")
    if clock and "offset_s" in clock:
        words.append(f"clock {clock['offset_s'] * 1e3:+,.1f} ms (±{clock['bound_s'] * 1e3:,.1f})")
    return f"{host}: " + ", ".join(words)


def cmd_check(args: argparse.Namespace) -> int:
    from collector import scenario as sc  # noqa: PLC0415

    path = inventory_file(args.inventory)
    inventory = sc.load_inventory(path)
    planned = sc.expand(sc.load(args.scenario), inventory) if args.scenario else []
    doc = check_inventory(path, inventory)
    if planned:
        # the scenario's datasets against its drives and the DB host's memory
        space, notes = dataset_problems(planned, inventory)
        doc["problems"] += [asdict(p) for p in space]
        doc["ok"] = not doc["problems"]
        doc["notes"] = notes
    found = doc["problems"]
    print(
        json.dumps(build.stamped(doc), indent=2, default=str)
        if args.json
        else "\n".join(check_text(doc))
    )
    return 1 if found else 0


def check_text(doc: dict[str, Any]) -> list[str]:
    """What ``drivelab check`` prints for its JSON document: one line per problem, or
    one line per host when there is none; then the count."""
    found = doc["problems"]
    out = [f"{p['host']}: {p['message']}" for p in found]
    out += [f"note: {n}" for n in doc.get("notes") or []]
    if not found:
        out += [_summary(h, a, a.get("clock")) for h, a in doc["hosts"].items()]
    noun = "problem" if len(found) == 1 else "problems"
    out.append(
        f"check: {len(doc['hosts'])} hosts, {len(found) or 'no'} {noun} ({doc['inventory']})"
    )
    return out


def candidate_entries(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``candidate_drives`` entries for the devices the gate would format, not yet listed."""
    out = []
    for d in devices:
        if d.get("would_format") and not d.get("listed_as"):
            entry = dict(d["entry"])
            entry["wipe"] = bool(d.get("wipe_needed"))
            out.append(entry)
    return out


def _size(n: Any) -> str:
    return f"{n / 1e9:,.1f} GB" if isinstance(n, int) else "?"


def cmd_drives(args: argparse.Namespace) -> int:
    from collector import scenario as sc  # noqa: PLC0415
    from collector.hosts.playbook import run_playbook  # noqa: PLC0415

    path = inventory_file(args.inventory)
    sc.db_host(sc.load_inventory(path))  # one line when the inventory has no DB host
    with tempfile.TemporaryDirectory(prefix="drivelab-drives-") as tmp:
        out = Path(tmp) / "devices.json"
        run_playbook("block_devices.yml", {"drivelab_devices_out": str(out)}, inventory=path,
                     what="drives")  # fmt: skip
        doc = json.loads(out.read_text(encoding="utf-8"))
    if args.json:
        print(json.dumps(build.stamped(doc), indent=2))
    else:
        print(drives_yaml(doc) if args.yaml else "\n".join(drives_text(doc)))
    return 0


def drives_yaml(doc: dict[str, Any]) -> str:
    """``candidate_drives`` entries, as YAML, for what the gate would format."""
    entries = candidate_entries(doc.get("devices") or [])
    head = (
        f"# {doc.get('host')}: candidate_drives the gate would format"
        " (wipe: true only where a signature is there to wipe)"
    )
    return head + "\n" + yaml.safe_dump({"candidate_drives": entries}, sort_keys=False).rstrip()


def drives_text(doc: dict[str, Any]) -> list[str]:
    """One line per block device: path, the inventory's name, identity, the verdict."""
    devices = doc.get("devices") or []
    out = [f"{doc.get('host')}: {len(devices)} block devices"]
    for d in devices:
        words = (
            _size(d.get("size_bytes")),
            d.get("model"),
            d.get("transport"),
            "rotational" if d.get("rotational") else "non-rotational",
            f"serial {d['serial']}" if d.get("serial") else "no serial",
            f"WWN {d['wwn']}" if d.get("wwn") else None,
            f"write cache {d['write_cache']}" if d.get("write_cache") else None,
        )
        listed = f" [{d['listed_as']}]" if d.get("listed_as") else ""
        if d.get("would_format"):
            verdict = "would format" + (" (wipe: true needed)" if d.get("wipe_needed") else "")
        else:
            verdict = f"refused: {d.get('refusal')}"
        out.append(f"  {d.get('path')}{listed}: {', '.join(str(w) for w in words if w)}; {verdict}")
    return out


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="every host of an inventory ready for drivelab? (read-only)")
    p.add_argument("-i", "--inventory", help="inventory folder or file (default: the local lab's)")
    p.add_argument(
        "--scenario", metavar="FILE",
        help="also hold this scenario's datasets against its drives and the DB host's memory",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="machine-readable")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("drives", help="the DB host's block devices and the gate's verdict")
    p.add_argument("-i", "--inventory", help="inventory folder or file (default: the local lab's)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="machine-readable")
    out.add_argument("--yaml", action="store_true", help="candidate_drives entries to paste")
    p.set_defaults(func=cmd_drives)
