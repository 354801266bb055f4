"""An inventory's hosts checked before any run, read-only: what ``drivelab check`` prints
and what ``drivelab run``'s preflight refuses on.

:func:`check_inventory` runs playbooks/check.yml (every host: SSH and Python as its
login, sudo, memory, PostgreSQL's major version, the packages the roles install, free
space, the kernel's clock state; the DB host's candidate drives through the gate) and
measures each host's clock against this one over its own session (the exchange the
start uses); :func:`problems` turns the answers into one :class:`Problem` per thing that
would stop or falsify a run. :func:`dataset_problems` holds a scenario's datasets
against its drives' declared sizes and the DB host's memory (pgbench's size per scale
unit, measured with pg_database_size: 7.6e6 + 15.68e6 x scale bytes per database right
after ``-i``)."""

from __future__ import annotations

import importlib.util
import json
import re
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collector.errors import DrivelabError
from collector.paths import REPO
from collector.units import human_size

if TYPE_CHECKING:
    from collector.scenario.matrix import PlannedCell

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


def check_inventory(path: Path, inventory: dict[str, Any]) -> dict[str, Any]:
    """playbooks/check.yml on every host of the inventory file ``path`` (``inventory``:
    it, parsed) and each reached host's clock: the document ``drivelab check --json``
    prints (``problems``: :class:`Problem` as dicts)."""
    from collector import scenario as sc  # noqa: PLC0415
    from collector.hosts.playbook import run_playbook  # noqa: PLC0415

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
    return {
        "inventory": str(path),
        "ok": not found,
        "seconds": round(time.monotonic() - started, 1),
        "hosts": {h: {**answers.get(h, {}), "clock": clocks.get(h)} for h in hosts},
        "problems": [asdict(p) for p in found],
    }


#: pgbench's database right after ``pgbench -i -s N``: 7.6e6 + 15.68e6 x N bytes
#: (measured with pg_database_size); a run adds pgbench_history and bloat on top
DB_BYTES_FIXED = 7_634_279
DB_BYTES_PER_SCALE = 15_680_216
#: a drive smaller than its cell's datasets times this has no room for the runs' growth,
#: the WAL (placement cluster) and the filesystem's own
ROOM = 1.5

_DRIVE_REFUSAL = re.compile(r"drive (\S+) \(")


def dataset_bytes(scale: int, hosts: int) -> int:
    """The cell's client databases right after initialisation, one per client host."""
    return hosts * (DB_BYTES_FIXED + DB_BYTES_PER_SCALE * scale)


def dataset_problems(
    cells: list[PlannedCell], inventory: dict[str, Any]
) -> tuple[list[Problem], list[str]]:
    """(problems, notes), per drive and its cell of the largest datasets: datasets that
    need more than the drive's declared size (``size_bytes``; ``ROOM`` times the
    datasets) are a problem; datasets that fit in twice the DB host's memory
    (``db_memory_bytes``) a note: even the largest measures RAM, not the drive."""
    from collector import scenario as sc  # noqa: PLC0415
    from collector.scenario.inventory import host_vars  # noqa: PLC0415

    db, _ = sc.db_host(inventory)
    hv = host_vars(inventory, db)
    sizes = {d.get("name"): d.get("size_bytes") for d in hv.get("candidate_drives") or []}
    memory = hv.get("db_memory_bytes")
    found: list[Problem] = []
    notes: list[str] = []
    worst: dict[str, tuple[int, str]] = {}
    for planned in cells:
        cell = planned.cell
        need = dataset_bytes(cell.scale, len(cell.hosts))
        drive = cell.drive
        if drive not in worst or need > worst[drive][0]:
            worst[drive] = (need, cell.cell_id)
    for drive, (need, cell_id) in worst.items():
        size = sizes.get(drive)
        if isinstance(size, int) and size > 0 and need * ROOM > size:
            found.append(Problem(db, "space", (
                f"drive {drive}: {cell_id} needs about {human_size(need)} of datasets"
                f" ({ROOM:g} x that with the runs' growth and the WAL), the drive is"
                f" {human_size(size)}: use a smaller scale or fewer client hosts"
            )))  # fmt: skip
        if isinstance(memory, int) and memory > 0 and need < 2 * memory:
            notes.append(
                f"drive {drive}: the largest datasets, about {human_size(need)} ({cell_id}),"
                f" fit in twice the DB host's memory ({human_size(memory)}): its runs"
                " measure RAM, not the drive"
            )
    return found, notes


def for_scenario(found: list[Problem], hosts: set[str], drives: set[str]) -> list[Problem]:
    """The problems that concern a scenario: on its hosts, and of drives it uses (a
    refusal of another candidate drive is not this scenario's)."""
    out = []
    for p in found:
        if p.host not in hosts:
            continue
        m = _DRIVE_REFUSAL.match(p.message) if p.check == "drive" else None
        if m and m.group(1) not in drives:
            continue
        out.append(p)
    return out
