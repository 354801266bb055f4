"""Runs the host side for one cell and one repetition, and gathers the result.

The stages, each one playbook (Ansible does the distributed work; this module only
chooses the variables, keeps the run folder and records it):

    provision()         playbooks/provision.yml   PostgreSQL, roles, pgpass, pgbench
    check_pg_settings() playbooks/pg_settings.yml the server's verdict on settings (read-only)
    prepare_drives()    playbooks/drives.yml      gate, mkfs, mount, device facts
    prepare_database()  playbooks/database.yml    tablespace or cluster, databases, pgbench -i
    run_pgbench()       playbooks/pgbench.yml     cold start, synchronized start, fetch

A run folder is ``<results>/runs/<scenario>/<cell_id>/rep-<N>/`` (its format:
:mod:`collector.runfolder`). run.json is written before the playbook starts (so a
crash leaves a record of what was being run) and again when it ends.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

from collector.cell import Cell, PgbenchOptions
from collector.errors import DrivelabError, Stopped
from collector.hosts.playbook import PlaybookResult, run_playbook
from collector.paths import LOCAL_INVENTORY, REPO, host_default
from collector.runfolder import (
    CLIENT_FILES,
    DATABASE_JSON,
    DB_DIR,
    RunMeta,
    load_json,
    pg_major,
    rep_dir,
    run_meta,
    write_json,
)
from collector.scenario.inventory import (
    client_hosts,
    db_host,
    lab_vars,
    load_inventory,
    prometheus_url,
)
from collector.verdicts.telemetry import Prometheus, hosts_not_up

__all__ = ["Cell", "PgbenchOptions"]  # the data of a cell, used with these stages

SECRETS_DIR = Path.home() / ".local/share/drivelab/secrets"  # role drivelab: drivelab_secrets_dir
#: role prometheus_server's prometheus_server_dir, and the telemetry playbook's stamp in it
PROMETHEUS_DIR = host_default("prometheus_server_dir", role="prometheus_server")
TELEMETRY_STAMP = "drivelab-telemetry.json"


def _stamp(inventory: Path, *more: str) -> str:
    """A hash of the roles, playbooks, Ansible plugins and ansible.cfg, the inventory
    (with its group_vars and host_vars), the generated client passwords and ``more``.
    A folder holding hosts.yml is that file, as `drivelab run --inventory` takes it: the
    lab's inventory is the folder for callers that name none and hosts.yml for `drivelab
    run`, and their stamps differed (a provisioning re-run after `drivelab run` rewrote
    every host's stamp, 6 changes)."""
    h = hashlib.sha256()
    plugins = REPO / "collector" / "ansible_plugins"
    roots = [REPO / "ansible.cfg", REPO / "roles", REPO / "playbooks", plugins]
    inventory = Path(inventory).resolve()
    if inventory.is_dir() and (inventory / "hosts.yml").is_file():
        inventory = inventory / "hosts.yml"
    roots += [inventory] if inventory.is_dir() else [
        inventory, inventory.parent / "group_vars", inventory.parent / "host_vars"
    ]  # fmt: skip
    roots.append(SECRETS_DIR)
    for root in roots:
        files = [root] if root.is_file() else sorted(root.rglob("*")) if root.is_dir() else []
        for path in files:
            if path.is_file() and "__pycache__" not in path.parts:
                h.update(f"{path}\0".encode())
                h.update(hashlib.sha256(path.read_bytes()).digest())
    for text in more:
        h.update(f"{text}\0".encode())
    return h.hexdigest()


def provision_stamp(inventory: Path) -> str:
    """A hash of what provisioning depends on: the roles, playbooks, Ansible plugins and
    ansible.cfg, the inventory (with its group_vars and host_vars) and the generated
    client passwords. Equal stamps on every host mean provisioning would change nothing
    that drivelab made it do (a hand-made change on a host is not seen: --reprovision)."""
    return _stamp(inventory)


def provision(*, inventory: Path | None = None, stream: bool = False) -> PlaybookResult:
    """playbooks/provision.yml, in full; each host keeps the stamp afterwards."""
    return _provision(inventory, stream, skip_unchanged=False)[0]


def provision_unless_unchanged(
    *, inventory: Path | None = None, stream: bool = False
) -> tuple[PlaybookResult | None, bool]:
    """playbooks/provision.yml, stopped after its first play when every host carries the
    stamp of an earlier provisioning with the same roles, inventory and passwords
    (:func:`provision_stamp`). Returns the result and whether it stopped there. When the
    inventory file gives every host a key and a known_hosts file, the stamps are read
    over SSH first (:mod:`collector.hosts.sshhosts`, no Ansible): all current, no playbook runs
    at all (result None); any other, the playbook provisions in full without reading
    them again, and leaves the removal of a stale stamp out on hosts found with none;
    where they cannot be read so, the playbook reads them and decides."""
    stamps = read_stamps(inventory)
    if stamps is not None and _all_current(stamps, inventory):
        return None, True
    # a host with no stamp at all has none to remove first (a task and a module run each)
    unstamped = tuple(sorted(h for h, have in (stamps or {}).items() if have == ""))
    return _provision(inventory, stream, skip_unchanged=stamps is None, unstamped=unstamped)


def read_stamps(inventory: Path | None) -> dict[str, str | None] | None:
    """Every DB and client host's provisioning stamp, read over SSH ("": none there;
    None: not reached, or not read); None when the inventory file names no key or
    known_hosts file for one (Ansible reads them)."""
    from collector.hosts import sshhosts  # noqa: PLC0415

    inv = load_inventory(inventory or LOCAL_INVENTORY)
    db, _ = db_host(inv)
    settings = sshhosts.settings_of(inv, [db, *client_hosts(inv)])
    return None if settings is None else sshhosts.read_stamps(settings)


def _all_current(stamps: dict[str, str | None], inventory: Path | None) -> bool:
    stamp = provision_stamp(inventory or LOCAL_INVENTORY)
    return all(have == stamp for have in stamps.values())


def stamps_current(inventory: Path | None) -> bool | None:
    """Every DB and client host carries the stamp of what provisioning would do now,
    read over SSH; False when any has another or none, or is not reached so; None when
    the inventory file names no key or known_hosts file for one (Ansible reads them)."""
    stamps = read_stamps(inventory)
    return None if stamps is None else _all_current(stamps, inventory)


def _provision(
    inventory: Path | None, stream: bool, *, skip_unchanged: bool, unstamped: tuple[str, ...] = ()
) -> tuple[PlaybookResult, bool]:
    with tempfile.TemporaryDirectory(prefix="drivelab-provision-") as tmp:
        verdict = Path(tmp) / "unchanged"
        stamp = provision_stamp(inventory or LOCAL_INVENTORY)
        extra: dict[str, Any] = {"drivelab_provision_stamp": stamp}
        if unstamped:
            extra["drivelab_provision_unstamped"] = list(unstamped)
        if skip_unchanged:
            extra |= {"drivelab_provision_skip": True, "drivelab_provision_verdict": str(verdict)}
        result = run_playbook(
            "provision.yml", extra, inventory=inventory, stream=stream, what="provision"
        )
        skipped = verdict.exists() and verdict.read_text(encoding="utf-8").strip() == "True"
    if not skipped:
        # provisioning may have made what the stamp covers (a new client's password):
        # the hosts keep the stamp of what they now have, or the next run would not match
        after = provision_stamp(inventory or LOCAL_INVENTORY)
        if after != stamp:
            run_playbook(
                "provision.yml", {"drivelab_provision_stamp": after}, inventory=inventory,
                stream=stream, what="provision stamps", tags=("stamp",),
            )  # fmt: skip
    return result, skipped


def telemetry(
    *,
    live_target: str = "",
    inventory: Path | None = None,
    stream: bool = False,
    reuse: bool = True,
) -> PlaybookResult | None:
    """node_exporter on every host, drivelab's Prometheus on the controller (scraping
    them and the live exporter at ``live_target``), or the inventory's existing one.
    ``reuse``: not run (None) when drivelab's own Prometheus was set up by this playbook
    with the same roles, inventory and live target and it, and every host's
    node_exporter through it, answers now (:func:`telemetry_current`)."""
    inv_path = inventory or LOCAL_INVENTORY
    stamp = _stamp(inv_path, f"live_target={live_target}")
    where = telemetry_stamp_file(inv_path)
    if reuse and where is not None and telemetry_current(inv_path, where, stamp):
        return None
    extra = {"prometheus_server_live_target": live_target}
    result = run_playbook(
        "telemetry.yml", extra, inventory=inventory, stream=stream, what="telemetry"
    )
    if where is not None:
        # not written: the next run sets telemetry up again, nothing lost
        with suppress(OSError):
            write_json(where, {"stamp": stamp, "live_target": live_target, "at": time.time()})
    return result


def telemetry_current(inventory: Path, where: Path, stamp: str) -> bool:
    """The telemetry playbook would change nothing: its stamp at ``where`` is ``stamp``
    (same roles, inventory and live target), and Prometheus answers with every host of
    groups db and clients a node_exporter target it last scraped successfully (every
    second). A stopped Prometheus or node_exporter, or another inventory's set-up: False."""
    try:
        if load_json(where).get("stamp") != stamp:
            return False
    except (DrivelabError, AttributeError):  # none yet, or not drivelab's
        return False
    inv = load_inventory(inventory)
    hosts = [db_host(inv)[0], *client_hosts(inv)]
    try:
        targets = Prometheus(prometheus_url(inv), timeout=2.0).targets()
    except DrivelabError:
        return False
    return not hosts_not_up(targets, hosts)


def telemetry_stamp_file(inventory: Path) -> Path | None:
    """Where drivelab's own Prometheus keeps the stamp of the telemetry playbook that set
    it up (its folder, ``prometheus_server_dir``); None for an inventory's own
    Prometheus (``prometheus_server_url``: the playbook runs every time)."""
    hv = lab_vars(load_inventory(inventory))
    if hv.get("prometheus_server_url"):
        return None
    return Path(str(hv.get("prometheus_server_dir", PROMETHEUS_DIR))) / TELEMETRY_STAMP


def check_pg_settings(
    pairs: list[dict[str, str]], *, inventory: Path | None = None, stream: bool = False
) -> dict[str, Any]:
    """The DB host's installed PostgreSQL's verdict on each {name, value}
    (playbooks/pg_settings.yml, read-only): {host, version, verdicts}."""
    with tempfile.TemporaryDirectory(prefix="drivelab-pgsettings-") as tmp:
        out = Path(tmp) / "verdicts.json"
        extra = {"postgresql_server_check_pairs": pairs, "postgresql_server_check_out": str(out)}
        run_playbook("pg_settings.yml", extra, inventory=inventory, stream=stream,
                     what="PostgreSQL settings check")  # fmt: skip
        return json.loads(out.read_text(encoding="utf-8"))


def prepare_drives(
    request: list[dict[str, Any]],
    *,
    facts_dir: Path | None = None,
    write_cache: str = "leave",
    inventory: Path | None = None,
    stream: bool = False,
    install_packages: bool = True,
) -> PlaybookResult:
    """The drives of ``request`` gated, formatted, mounted, described (playbooks/drives.yml).
    ``install_packages``: make sure of the DB host's drive tools (apt); a scenario's later
    drive stages leave it out once an earlier one has done it (an apt check each)."""
    extra: dict[str, Any] = {
        "candidate_drive_request": request,
        "candidate_drive_write_cache": write_cache,
        "candidate_drive_install_packages": install_packages,
    }
    if facts_dir:
        facts_dir.mkdir(parents=True, exist_ok=True)
        extra["candidate_drive_facts_dir"] = str(facts_dir)
    return run_playbook("drives.yml", extra, inventory=inventory, stream=stream, what="drives")


def run_pretests(
    request: list[dict[str, Any]],
    pretests: dict[str, Any],
    out_dir: Path,
    *,
    inventory: Path | None = None,
    stream: bool = False,
    install_packages: bool = True,
) -> PlaybookResult:
    """fio and pg_test_fsync on the mounted filesystems of ``request`` (the scenario's
    :class:`~collector.scenario.Pretests` as a dict); outputs land in ``out_dir``.
    ``install_packages``: make sure of fio on the DB host (an apt check); a scenario's later
    pre-tests leave it out once an earlier one has done it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    extra = {
        "drive_pretest_request": [{"name": r["name"], "drives": r["drives"]} for r in request],
        "drive_pretest_fio": bool(pretests["fio"]),
        "drive_pretest_jobs": list(pretests.get("jobs") or ()),
        "drive_pretest_fsync": bool(pretests["pg_test_fsync"]),
        "drive_pretest_runtime": int(pretests["runtime"]),
        "drive_pretest_ramp": int(pretests["ramp"]),
        "drive_pretest_fsync_seconds": int(pretests["fsync_seconds"]),
        "drive_pretest_write_cache": pretests["write_cache"],
        "drive_pretest_out_dir": str(out_dir),
        "drive_pretest_install_packages": install_packages,
    }
    return run_playbook("fio.yml", extra, inventory=inventory, stream=stream, what="pretests")


def release(
    filesystems: list[str],
    *,
    inventory: Path | None = None,
    stream: bool = False,
    provisioned: bool = False,
    pg_major: str | None = None,
) -> PlaybookResult:
    """Drops drivelab's own databases, tablespaces and clusters on these filesystems, so
    that the gate lets them be reformatted. ``provisioned`` and ``pg_major`` as for
    :func:`prepare_database`: drivelab's cluster then needs only to be running (the whole
    postgresql_server role, its packages, access rules and roles checked again, was a
    good part of a release: docs/scaling.md)."""
    extra: dict[str, Any] = {"pgbench_database_release": list(filesystems)}
    if provisioned:
        extra |= {"postgresql_server_only_running": True, "postgresql_server_installed": True}
    if pg_major:
        extra["drivelab_pg_major"] = pg_major
    return run_playbook("release.yml", extra, inventory=inventory, stream=stream, what="release")


def prepare_database(
    cell: Cell,
    *,
    inventory: Path | None = None,
    stream: bool = False,
    root: Path | None = None,
    provisioned: bool = False,
    pg_major: str | None = None,
    cluster_current: bool = False,
) -> PlaybookResult:
    """The cell's databases (playbooks/database.yml). ``provisioned``: provision.yml ran
    in this session, so drivelab's own cluster needs only to be running (its packages,
    access rules and roles are as provisioning left them); a cluster placement still gets
    the rest of the postgresql_server role for its cluster on the drive, its packages
    skipped. ``pg_major``: the major version a previous cell's server reported (its
    database.json), so the DB host need not work it out again. Either way the cluster
    gets the cell's PostgreSQL settings (``drivelab_postgresql_settings``, over the
    inventory's; {} takes a previous cell's away), with a reload, or a restart where one
    needs it, each checked to have taken. ``cluster_current``: the previous cell's database
    stage left this cluster running with these settings, and only complete runs came
    since: the cluster's part is left out (``pgbench_database_cluster_current``)."""
    facts = cell.cell_dir(root) / "db"
    facts.mkdir(parents=True, exist_ok=True)
    extra: dict[str, Any] = {
        "pgbench_database_filesystem": cell.drive,
        "pgbench_database_placement": cell.placement,
        "pgbench_database_wal_drive": cell.wal_drive or "",
        "pgbench_database_scale": cell.scale,
        "pgbench_database_init_options": list(cell.init_options),
        "pgbench_database_facts_dir": str(facts),
        "pgbench_database_provisioned": provisioned,
        "drivelab_postgresql_settings": dict(cell.pg_settings),
        # the DB host refuses a cell whose sessions do not fit in max_connections
        "pgbench_database_sessions_per_client": cell.pgbench.clients_per_host,
    }
    if cell.hosts:
        extra["pgbench_database_clients"] = list(cell.hosts)
    if pg_major:
        extra["drivelab_pg_major"] = pg_major
    if cluster_current:
        extra["pgbench_database_cluster_current"] = True
    return run_playbook("database.yml", extra, inventory=inventory, stream=stream, what="database")


def run_pgbench(
    cell: Cell,
    repetition: int,
    *,
    client_hosts: list[str],
    db_host: str,
    inventory: Path | None = None,
    stream: bool = False,
    root: Path | None = None,
    cold_start: bool = True,
    settle: bool = False,
    synchronized: bool = True,
    live: Callable[[Path, list[str]], AbstractContextManager[Any]] | None = None,
    scenario_info: Mapping[str, Any] | None = None,
    attempt: int = 1,
) -> Path:
    """One measured run; returns its run folder (outputs fetched, run.json written).
    ``live(run_dir, hosts)``, when given, is entered around the playbook (the live view
    of :mod:`collector.live`: it follows the clients' progress while they run).
    ``scenario_info`` (description, baseline) goes into run.json with the cell; a retry
    (``attempt`` 2 or more) gets a folder of its own beside the earlier attempts'.
    ``cold_start``: checkpoint, restart, drop the caches first; without it, ``settle``:
    the vacuums, a CHECKPOINT and a sync first, the server and its caches kept (a rate
    search's warm steps: nothing the run before left to write out)."""
    hosts = list(cell.hosts) or client_hosts
    run_dir = _new_run_folder(cell, repetition, attempt, root)
    meta = replace(
        run_meta(cell, repetition, hosts, db_host, scenario_info),
        attempt=attempt,
        cold_start=cold_start,
        settled=settle and not cold_start,
    )
    meta.write(run_dir)
    extra = _pgbench_vars(
        cell, run_dir, hosts, cold_start=cold_start, settle=settle, synchronized=synchronized
    )
    try:
        with live(run_dir, hosts) if live is not None else nullcontext():
            result = run_playbook(
                "pgbench.yml",
                extra,
                inventory=inventory,
                stream=stream,
                what="pgbench",
                raise_on_failure=False,
            )
    except KeyboardInterrupt as err:
        # Ctrl-C, SIGTERM, SIGHUP: the playbook was stopped; run.json says so, and the
        # runner stores what the folder holds as a failed run with this reason
        why = f"{err}" if isinstance(err, Stopped) else "interrupted (Ctrl-C)"
        stopped = {"kind": "stopped", "host": "", "task": "pgbench.yml",
                   "msg": f"drivelab run {why} during the repetition: cut off"}  # fmt: skip
        replace(meta, ended_at=time.time(), ansible_failures=(stopped,)).write(run_dir)
        raise
    _ended(meta, run_dir, result).write(run_dir)
    return run_dir


def _new_run_folder(cell: Cell, repetition: int, attempt: int, root: Path | None) -> Path:
    """A repetition's run folder, empty but for what the database stage recorded for
    its cell (which goes with every repetition)."""
    run_dir = rep_dir(cell.cell_dir(root), repetition, attempt)
    if run_dir.exists():
        shutil.rmtree(run_dir)  # an earlier, unfinished attempt at this repetition
    run_dir.mkdir(parents=True)
    cell_db = cell.cell_dir(root) / DB_DIR
    if cell_db.is_dir():
        shutil.copytree(cell_db, run_dir / DB_DIR)
    return run_dir


def _pgbench_vars(
    cell: Cell,
    run_dir: Path,
    hosts: list[str],
    *,
    cold_start: bool,
    settle: bool,
    synchronized: bool,
) -> dict[str, Any]:
    """pgbench.yml's variables for one repetition of ``cell`` into ``run_dir``."""
    extra = {
        **cell.pgbench.extra_vars(),
        "pgbench_run_dir": str(run_dir),
        "pgbench_run_cluster": cell.cluster,
        "pgbench_run_trim": cell.trim,
        "pgbench_run_cold_start": cold_start,
        "pgbench_run_settle": settle and not cold_start,
        "pgbench_run_synchronized": synchronized,
        "pgbench_run_hosts": hosts,
    }
    major = pg_major(run_dir / DB_DIR / DATABASE_JSON)
    if major:
        # the server's own, as the database stage read it: the DB host need not work it
        # out again before every repetition
        extra["drivelab_pg_major"] = major
    return extra


def _ended(meta: RunMeta, run_dir: Path, result: PlaybookResult) -> RunMeta:
    """run.json once the playbook has ended: the start instant the clients were given
    (their command files), the end, and the playbook's failures (its exit status, when
    it named none)."""
    starts = []
    for host in meta.client_hosts:
        command = run_dir / host / CLIENT_FILES["command"]
        if command.exists():
            starts.append(json.loads(command.read_text(encoding="utf-8")).get("start_at"))
    failures = list(result.failures)
    if result.returncode != 0 and not failures:
        failures = [{"host": "?", "task": "pgbench.yml",
                     "msg": f"ansible-playbook exited {result.returncode}"}]  # fmt: skip
    return replace(
        meta,
        start_at=next((s for s in starts if s), None),
        ended_at=time.time(),
        ansible_failures=tuple(
            {k: f.get(k, "") for k in ("kind", "host", "task", "msg")} for f in failures
        ),
    )
