"""The Ansible inventory as the controller sees it: the DB host and its candidate drives,
the client hosts, the checks of a scenario against them, and how the controller itself
reaches the hosts (SSH settings for the live view, the Prometheus to ask)."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from collector.errors import DrivelabError
from collector.paths import REPO, ansible_bin
from collector.scenario.loader import _read_yaml
from collector.scenario.rules import CLIENT_NAME, HOST_NAME, PG_RULES
from collector.scenario.schema import Scenario
from collector.scenario.wording import _fail, _show

#: the files Ansible reads as YAML beside an inventory source (its group and host variables)
_VARS_DIRS = ("group_vars", "host_vars")
_YAML = (".yml", ".yaml")

#: parsed inventories (or why not), by source and the size and mtime of every file read with it
_CACHE: dict[tuple, dict[str, Any] | DrivelabError] = {}


def inventory_source(path: Path | str) -> Path:
    """What Ansible is given for ``path``: a folder holding hosts.yml is that file (the
    lab's and the example's shape); any other folder is itself (``hosts.ini`` beside
    ``group_vars/``, several files, an inventory plugin's file), a file is itself."""
    path = Path(path)
    if path.is_dir() and (path / "hosts.yml").is_file():
        return path / "hosts.yml"
    return path


def _files_read_with(source: Path) -> list[Path]:
    """The source's files and the group_vars/host_vars Ansible reads with it."""
    base = source if source.is_dir() else source.parent
    files = [source] if source.is_file() else []
    if source.is_dir():
        files += sorted(p for p in source.iterdir() if p.is_file())
    for name in _VARS_DIRS:
        folder = base / name
        if folder.is_dir():
            files += sorted(p for p in folder.rglob("*") if p.is_file())
    return files


def load_inventory(path: Path | str) -> dict[str, Any]:
    """The inventory as Ansible reads it (``ansible-inventory --list``: YAML or INI, a
    folder of them, nested groups, group_vars/ and host_vars/, inventory plugins), in one
    shape: ``{"all": {"vars": {}, "hosts": {...}, "children": {group: {"hosts": {host:
    vars}}}}}``, each host's variables merged by Ansible's own precedence and each group
    holding the hosts of its child groups too. ``path`` is a folder or a file
    (:func:`inventory_source`). drivelab's YAML files are read by drivelab first (its
    limits, one-line errors with the file), then by Ansible."""
    source = inventory_source(path)
    if not source.exists():
        raise _fail(str(source), "no such file")
    if not (source.is_file() or source.is_dir()):
        raise _fail(str(source), "not a regular file (a device, pipe or socket)")
    files = _files_read_with(source)
    key = (
        str(source.resolve()),
        *((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files),
    )
    if key not in _CACHE:
        try:
            for f in files:
                if f.suffix in _YAML:
                    doc = _read_yaml(f, str(f))
                    if f == source and not isinstance(doc, dict):
                        raise _fail(str(f), "not an inventory (no 'all' mapping)")
            _CACHE[key] = _normalised(_ansible_inventory(source))
        except DrivelabError as err:
            _CACHE[key] = err  # the same files, the same answer
    found = _CACHE[key]
    if isinstance(found, DrivelabError):
        raise type(found)(*found.args)
    return copy.deepcopy(found)


def _ansible_inventory(source: Path) -> dict[str, Any]:
    """``ansible-inventory --list`` of ``source`` with drivelab's ansible.cfg; a source
    that no inventory plugin parses is an error, not an empty inventory."""
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_INVENTORY_UNPARSED_FAILED="True",
        ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="True",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
    )
    argv = [ansible_bin("ansible-inventory"), "-i", str(source), "--list"]
    try:
        proc = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise _fail(str(source), f"ansible-inventory did not answer ({exc})") from None
    if proc.returncode != 0:
        raise _fail(str(source), f"not an inventory Ansible reads: {_why(proc.stderr, source)}")
    try:
        listed = json.loads(proc.stdout)
    except ValueError:
        raise _fail(str(source), "ansible-inventory printed no inventory") from None
    return listed if isinstance(listed, dict) else {}


def _why(stderr: str, source: Path) -> str:
    """Ansible's reason, one line: the words of the parser the source's name points at
    (yaml for .yml/.yaml, else ini), else the first parser's, else the error."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    said = {}
    for ln in lines:
        m = re.match(
            r"\[WARNING\]:\s*(?:\*\s*)?Failed to parse .*?with '?(\w+)'? plugin:\s*(.*)", ln
        )
        if m:
            said.setdefault(m.group(1), m.group(2))
    plugin = "yaml" if source.suffix in _YAML else "ini"
    errors = [ln for ln in lines if ln.startswith("[ERROR]")]
    why = said.get(plugin) or next(iter(said.values()), None)
    if why is None:
        why = re.sub(r"^\[ERROR\]:\s*", "", errors[0] if errors else lines[-1] if lines else "")
    why = re.sub(r"^Failed to parse inventory:\s*", "", why or "no reason given")
    why = re.sub(r"<class '[\w.]*?_AnsibleTagged(\w+)'>", lambda m: m.group(1).lower(), why)
    return why[:300]


def _normalised(listed: dict[str, Any]) -> dict[str, Any]:
    """``ansible-inventory --list``'s groups and hostvars in :func:`load_inventory`'s shape."""
    hostvars = (listed.get("_meta") or {}).get("hostvars") or {}

    def members(group: str, seen: frozenset[str] = frozenset()) -> list[str]:
        entry = listed.get(group) or {}
        out = list(entry.get("hosts") or [])
        for child in entry.get("children") or []:
            if child not in seen:
                out += [h for h in members(child, seen | {group}) if h not in out]
        return out

    # one mapping per host, in every group that holds it
    every = {h: dict(hostvars.get(h) or {}) for h in members("all")}
    groups = {
        g: {"hosts": {h: every.setdefault(h, {}) for h in members(g)}}
        for g in listed
        if g not in ("_meta", "all")
    }
    return {"all": {"vars": {}, "hosts": every, "children": groups}}


def _group_hosts(inventory: dict[str, Any], group: str) -> dict[str, Any]:
    try:
        hosts = inventory["all"]["children"][group]["hosts"]
    except (KeyError, TypeError):
        return {}
    return hosts if isinstance(hosts, dict) else {}


def _natural(name: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdecimal() else p for p in re.split(r"(\d+)", name))


def db_host(inventory: dict[str, Any]) -> tuple[str, list[str]]:
    """The DB host's name and the names of its candidate drives, in inventory order."""
    hosts = _group_hosts(inventory, "db")
    if not hosts:
        raise DrivelabError("inventory: no host in group db")
    name = sorted(hosts, key=str)[0]
    host_vars = hosts[name] if isinstance(hosts[name], dict) else {}
    drives = host_vars.get("candidate_drives") or []
    drives = drives if isinstance(drives, list) else []
    return str(name), [str(d.get("name")) for d in drives if isinstance(d, dict)]


def candidate_drives(inventory: dict[str, Any]) -> list[dict[str, Any]]:
    """The DB host's candidate drive entries (mappings only), in inventory order."""
    hosts = _group_hosts(inventory, "db")
    if not hosts:
        return []
    host_vars = hosts[sorted(hosts, key=str)[0]]
    drives = host_vars.get("candidate_drives") if isinstance(host_vars, dict) else None
    return [d for d in drives if isinstance(d, dict)] if isinstance(drives, list) else []


#: what the inventory may declare about a candidate drive that no probe reads, and the
#: words for a bad value (docs/drives.md; the physics checks use them)
DECLARED_FIELDS = {
    "rpm": "a whole number of revolutions per minute (0: it does not rotate)",
    "power_loss_protection": "true or false",
}


def _declared_ok(key: str, value: Any) -> bool:
    if key == "rpm":
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 30000
    return isinstance(value, bool)


def _check_declared(s: Scenario, inventory: dict[str, Any], host: str, source: str) -> None:
    """The :data:`DECLARED_FIELDS` of every candidate drive the scenario uses."""
    used = set(s.drives) | {m for rset in s.raid for m in rset.drives}
    used |= {w for w in (getattr(e, "wal", None) for e in s.placement) if w}
    for entry in candidate_drives(inventory):
        name = entry.get("name")
        if not isinstance(name, str) or name not in used:
            continue  # a name that is no string names no drive the scenario uses
        for key, words in DECLARED_FIELDS.items():
            if key in entry and not _declared_ok(key, entry[key]):
                raise _fail(
                    source,
                    f"inventory: {host} candidate drive {_show(entry.get('name'))}: {key} must"
                    f" be {words}, not {_show(entry[key])}",
                )


def _check_runs_code(s: Scenario, inventory: dict[str, Any], host: str, source: str) -> None:
    """A PostgreSQL setting that runs a command or loads code (archive_command ...) only
    where the DB host's inventory allows it by name (the DB host's module refuses the
    same on its own)."""
    allowed = host_vars(inventory, host).get(PG_RULES.ALLOW_VAR, [])
    problem = PG_RULES.allow_problem(allowed)
    if problem:
        raise _fail(source, f"inventory: {host} {problem}")
    where = [("postgresql.settings", s.postgresql.settings)] + [
        (f"postgresql.sets.{name}", settings) for name, settings in s.postgresql.sets.items()
    ]
    for path, settings in where:
        for name in settings:
            problem = PG_RULES.name_problem(name, allowed)
            if problem:
                raise _fail(source, f"{path}.{name}: {problem}")


#: a pgbench meta-command that runs a shell command on the client (``\shell``,
#: ``\setshell``; pgbench reads meta-command names in any case): the same pattern as
#: roles/pgbench_run/vars/main.yml's ``__pgbench_run_shell_pattern``
SHELL_META = re.compile(r"\\(set)?shell(?![a-z0-9_])", re.IGNORECASE)
SHELL_ALLOW_VAR = "pgbench_run_allow_shell"


def _check_script_shell(s: Scenario, inventory: dict[str, Any], source: str) -> None:
    """A custom script that runs shell commands (``\\shell``, ``\\setshell``) only where
    every client's inventory allows it (the clients' pgbench_run role refuses the same on
    its own)."""
    script = s.workload.script
    if not script or not Path(script).is_absolute():
        return  # no script (mode custom, or a mix that weighs it), or one not resolved
    try:
        text = Path(script).read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise _fail(source, f"workload.script: cannot read {script} ({err.strerror})") from None
    for number, line in enumerate(text.splitlines(), 1):
        m = SHELL_META.search(line)
        if m is None:
            continue
        refused = [c for c in client_hosts(inventory)
                   if host_vars(inventory, c).get(SHELL_ALLOW_VAR) is not True]  # fmt: skip
        if refused:
            raise _fail(
                source,
                f"workload.script: {script} line {number} runs a shell command on the client"
                f" hosts (pgbench's {m.group(0)}): allowed only where the clients' inventory"
                f" sets {SHELL_ALLOW_VAR}: true (not set for {refused[0]}"
                + (f" and {len(refused) - 1} more)" if len(refused) > 1 else ")"),
            )
        return


def _check_wal_drives(s: Scenario, host: str, have: list[str], source: str) -> None:
    """A WAL drive of a placement is a candidate drive of the DB host."""
    for i, entry in enumerate(s.placement):
        wal = getattr(entry, "wal", None)
        if wal is not None and wal not in have:
            raise _fail(
                source,
                f"placement[{i}].wal: {wal!r} is not a drive of {host}"
                f" (have: {', '.join(have) or 'none'})",
            )


def client_hosts(inventory: dict[str, Any]) -> list[str]:
    """The inventory's client hosts, client1..clientN in numeric order."""
    return sorted(map(str, _group_hosts(inventory, "clients")), key=_natural)


def validate_against_inventory(s: Scenario, inventory: dict[str, Any], path: Path | str) -> None:
    """Drives and RAID members are candidate drives of the DB host, a RAID set is not
    named like one, what the inventory declares about them (``rpm``,
    ``power_loss_protection``) is well-formed, no host count exceeds the inventory's
    clients, and host names are safe in the SQL identifiers, file names and folders
    they become."""
    source = str(path)
    host, have = db_host(inventory)
    clients = client_hosts(inventory)
    if not HOST_NAME.fullmatch(host):
        raise _fail(
            source,
            f"inventory: DB host {_show(host)} is not a valid host name ({HOST_NAME.pattern})",
        )
    for name in clients:
        if not CLIENT_NAME.fullmatch(name):
            raise _fail(
                source,
                f"inventory: client host {_show(name)} is not a valid client name"
                f" ({CLIENT_NAME.pattern}; its database is drivelab_<name>)",
            )
    have_text = ", ".join(have) or "none"
    for i, drive in enumerate(s.drives):
        if drive not in have:
            raise _fail(
                source, f"drives[{i}]: {drive!r} is not a drive of {host} (have: {have_text})"
            )
    for i, rset in enumerate(s.raid):
        if rset.name in have:
            raise _fail(
                source,
                f"raid[{i}].name: {rset.name!r} is a drive of {host};"
                " a RAID set needs its own name",
            )
        for j, member in enumerate(rset.drives):
            if member not in have:
                raise _fail(
                    source,
                    f"raid[{i}].drives[{j}]: {member!r} is not a drive of {host}"
                    f" (have: {have_text})",
                )
    _check_wal_drives(s, host, have, source)
    _check_declared(s, inventory, host, source)
    _check_runs_code(s, inventory, host, source)
    _check_script_shell(s, inventory, source)
    for i, count in enumerate(s.hosts):
        if count > len(clients):
            raise _fail(
                source, f"hosts[{i}]: {count} client hosts asked, the inventory has {len(clients)}"
            )


def prometheus_url(inventory: dict) -> str:
    """The Prometheus the telemetry playbook set up or checked: the inventory's
    ``prometheus_server_url``, else drivelab's own at ``prometheus_server_listen``."""
    hv = lab_vars(inventory)
    url = hv.get("prometheus_server_url")
    if url:
        return str(url).rstrip("/")
    return "http://" + str(hv.get("prometheus_server_listen", "127.0.0.1:9490"))


def lab_vars(inventory: dict) -> dict[str, Any]:
    """The variables that hold for the whole lab (telemetry's, the lease's): the DB host's,
    which carry group all's (Ansible gives group variables to hosts only)."""
    hosts = _group_hosts(inventory, "db")
    if not hosts:
        return dict(inventory["all"].get("vars") or {})
    return host_vars(inventory, sorted(hosts, key=str)[0])


def host_vars(inventory: dict, host: str) -> dict[str, Any]:
    """The inventory file's variables of ``host`` (all's, then its groups', then its own)."""
    groups = inventory["all"].get("children", {})
    hv: dict[str, Any] = dict(inventory["all"].get("vars") or {})
    for g in groups.values():
        if host in (g.get("hosts") or {}):
            hv.update(g.get("vars") or {})
            hv.update((g.get("hosts") or {})[host] or {})
    return hv


def ssh_settings(inventory: dict, host: str) -> dict[str, Any] | None:
    """How Ansible reaches ``host`` (from the inventory file's vars): address, port,
    user, key file, and the known_hosts file its ssh args name. None: no key or no
    known_hosts file named (the live view needs both; host keys are never trusted
    blindly)."""
    hv = host_vars(inventory, host)
    args = str(hv.get("ansible_ssh_common_args", "")) + " " + str(hv.get("ansible_ssh_args", ""))
    known = re.search(r"UserKnownHostsFile=(\S+)", args)
    key = hv.get("ansible_ssh_private_key_file")
    if not key or not known:
        return None
    return {
        "host": str(hv.get("ansible_host", host)),
        "port": int(hv.get("ansible_port", 22)),
        "user": str(hv.get("ansible_user", "root")),
        "key": str(key),
        "known_hosts": known.group(1),
    }


#: what validate_against_inventory checks, for a plan made without an inventory
NOT_CHECKED_WITHOUT_INVENTORY = (
    "the drives are a real lab's (they were checked against the local lab's drives)",
    "their rpm and power_loss_protection are well-formed",
    "the host counts fit the inventory's client hosts",
    "the host names are valid",
)


def inventory_by_count(clients: int, drives: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """A stand-in inventory of ``clients`` client hosts and a DB host with ``drives``
    (candidate drives: ``name``, ``size_bytes``), to expand a scenario into its plan
    before any lab or inventory exists: cell names count hosts (``h2``), so they are
    those a real inventory gives."""
    hosts = {f"client{i}": {} for i in range(1, clients + 1)}
    db = {"dbhost": {"candidate_drives": [dict(d) for d in drives]} if drives else {}}
    return {"all": {"children": {"db": {"hosts": db}, "clients": {"hosts": hosts}}}}
