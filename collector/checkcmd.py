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
import importlib.util
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from collector.errors import DrivelabError
from collector.paths import REPO
from collector.runcmd import inventory_file

#: the exchange's own code: the start's sessions (roles/pgbench_run/action_plugins)
START_ACTION = REPO / "roles" / "pgbench_run" / "action_plugins" / "drivelab_start.py"

#: a host's clock farther than this from the controller's (beyond the measure's bound)
#: is a problem: the start corrects each client by its offset, but a clock that far off
#: is not kept by NTP and drifts during a run (pgbench_run_lead_seconds, 0.1 s)
CLOCK_LIMIT_S = 0.1

#: free bytes under the folders drivelab writes below which a host is not ready
MIN_FREE_BYTES = 1 << 30


@dataclass(frozen=True)
class Problem:
    host: str
    check: str
    message: str

    def line(self) -> str:
        return f"{self.host}: {self.message}"


def _start_action():
    spec = importlib.util.spec_from_file_location("drivelab_start_action", START_ACTION)
    if spec is None or spec.loader is None:
        raise DrivelabError(f"check: cannot load {START_ACTION}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure_clocks(inventory: dict[str, Any], hosts: list[str]) -> dict[str, dict[str, Any]]:
    """{host: {offset_s, bound_s} or {error}}: each host's clock minus this one's, over a
    session of its own (ssh with its inventory settings), as the start measures it."""
    from collector.scenario.inventory import host_vars  # noqa: PLC0415

    start = _start_action()
    sessions, left_out = {}, {}
    for host in hosts:
        argv = start.remote_argv(host, host_vars(inventory, host), ["sh", "-c", start.CLOCK_SH],
                                 become=False)  # fmt: skip
        try:
            sessions[host] = start.Session(host, argv)
        except OSError as exc:
            left_out[host] = f"could not open a session: {exc}"
    try:
        start.ActionModule._clocks(sessions, left_out)
    finally:
        for s in sessions.values():
            s.tell("done\n")
            s.finish(timeout=5)
    out: dict[str, dict[str, Any]] = {h: {"error": why} for h, why in left_out.items()}
    for host, s in sessions.items():
        if s.clock is not None:
            out[host] = {"offset_s": s.clock[1], "bound_s": s.bound()}
    return out


def _said(result: dict[str, Any]) -> str:
    """What a failed task said, one line."""
    for key in ("msg", "module_stderr", "stderr"):
        text = str(result.get(key) or "").strip()
        if text:
            return " ".join(text.split())[:300]
    return "failed, without a message"


def _host_problems(host: str, hv: dict[str, Any], ans: dict[str, Any]) -> list[Problem]:
    """What the check playbook's answers say is wrong with one host."""
    user = str(hv.get("ansible_user") or "root")
    ping, mine = ans.get("ping") or {}, ans.get("host") or {}
    if ping.get("unreachable"):
        why = f"not reached over SSH as {user}: {_said(ping)}"
        return [Problem(host, "ssh", why + SSH_HINT)]
    if ping.get("failed"):
        why = f"reached, but Python did not run: {_said(ping)}"
        return [
            Problem(host, "python", why + " (install python3, or set ansible_python_interpreter)")
        ]
    if mine.get("unreachable") or mine.get("failed"):
        why = f"sudo as {user} failed: {_said(mine)}"
        hint = f" (give {user} passwordless sudo, or set ansible_become_password)"
        return [Problem(host, "sudo", why + hint)]
    out = []
    if mine.get("uid") not in (0, None):
        why = f"runs as uid {mine['uid']}, not root: set ansible_become: true for it"
        out.append(Problem(host, "sudo", why + " (drivelab formats drives and runs PostgreSQL)"))
    packages = mine.get("packages") or {}
    missing = sorted(n for n, s in packages.items() if s == "not installable")
    if missing:
        why = "not installable here: " + ", ".join(missing)
        out.append(Problem(host, "packages", why + APT_HINT))
    for path, free in sorted((mine.get("free_bytes") or {}).items()):
        if isinstance(free, int) and free < MIN_FREE_BYTES:
            why = f"{free / 2**20:,.0f} MiB free under {path}, less than"
            out.append(Problem(host, "space", f"{why} {MIN_FREE_BYTES >> 30} GiB"))
    # a lab host's clock is the controller's kernel clock: only the offset says anything
    if (mine.get("clock") or {}).get("synchronized") is False and not hv.get("drivelab_lab"):
        out.append(Problem(host, "clock", CLOCK_UNSYNCED))
    out += [Problem(host, "drive", str(r)) for r in (ans.get("gate") or {}).get("refusals") or []]
    return out


SSH_HINT = " (check ansible_host, ansible_user, the key and known_hosts)"
APT_HINT = " (apt has no candidate: add the Debian archive to its sources)"
CLOCK_UNSYNCED = (
    "clock not synchronised (the kernel's NTP state, timedatectl's NTPSynchronized=no):"
    " run chrony or systemd-timesyncd"
)


def problems(
    inventory: dict[str, Any],
    answers: dict[str, dict[str, Any]],
    clocks: dict[str, dict[str, Any]],
) -> list[Problem]:
    """One :class:`Problem` per thing that would stop or falsify a run, from the
    check playbook's ``answers`` and the measured ``clocks``."""
    from collector.scenario.inventory import host_vars  # noqa: PLC0415

    out: list[Problem] = []
    for host, ans in answers.items():
        out += _host_problems(host, host_vars(inventory, host), ans)
    for host, c in sorted(clocks.items()):
        if "error" in c:
            if not any(p.host == host for p in out):
                out.append(Problem(host, "clock", f"clock not measured: {c['error']}"))
        elif abs(c["offset_s"]) - c["bound_s"] > CLOCK_LIMIT_S:
            off = f"clock {c['offset_s'] * 1e3:+,.1f} ms off the controller's"
            why = f"{off} (±{c['bound_s'] * 1e3:,.1f} ms), more than {CLOCK_LIMIT_S * 1e3:.0f} ms"
            out.append(Problem(host, "clock", why + ": synchronise it (NTP)"))
    return out


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
    from collector.playbook import run_playbook  # noqa: PLC0415

    path = inventory_file(args.inventory)
    inventory = sc.load_inventory(path)
    db, _ = sc.db_host(inventory)
    hosts = [db, *sc.client_hosts(inventory)]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="drivelab-check-") as tmp:
        out = Path(tmp) / "answers.json"
        run_playbook("check.yml", {"drivelab_check_out": str(out)}, inventory=path,
                     what="check", raise_on_failure=False)  # fmt: skip
        if not out.exists():
            raise DrivelabError(f"check: {path}: the check playbook gave no answers (see its log)")
        answers = json.loads(out.read_text(encoding="utf-8"))
    reached = [h for h in hosts if not (answers.get(h, {}).get("ping") or {}).get("unreachable")]
    clocks = measure_clocks(inventory, reached)
    found = problems(inventory, answers, clocks)
    doc = {
        "inventory": str(path),
        "ok": not found,
        "seconds": round(time.monotonic() - started, 1),
        "hosts": {h: {**answers.get(h, {}), "clock": clocks.get(h)} for h in hosts},
        "problems": [asdict(p) for p in found],
    }
    print(json.dumps(doc, indent=2, default=str) if args.json else "\n".join(check_text(doc)))
    return 1 if found else 0


def check_text(doc: dict[str, Any]) -> list[str]:
    """What ``drivelab check`` prints for its JSON document: one line per problem, or
    one line per host when there is none; then the count."""
    found = doc["problems"]
    out = [f"{p['host']}: {p['message']}" for p in found]
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
    from collector.playbook import run_playbook  # noqa: PLC0415

    path = inventory_file(args.inventory)
    sc.db_host(sc.load_inventory(path))  # one line when the inventory has no DB host
    with tempfile.TemporaryDirectory(prefix="drivelab-drives-") as tmp:
        out = Path(tmp) / "devices.json"
        run_playbook("block_devices.yml", {"drivelab_devices_out": str(out)}, inventory=path,
                     what="drives")  # fmt: skip
        doc = json.loads(out.read_text(encoding="utf-8"))
    if args.json:
        print(json.dumps(doc, indent=2))
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
    p.add_argument("--json", action="store_true", help="machine-readable")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("drives", help="the DB host's block devices and the gate's verdict")
    p.add_argument("-i", "--inventory", help="inventory folder or file (default: the local lab's)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="machine-readable")
    out.add_argument("--yaml", action="store_true", help="candidate_drives entries to paste")
    p.set_defaults(func=cmd_drives)
