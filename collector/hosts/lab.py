"""The local lab seen from the controller: what the generated inventory says, and
whether each host and drive is really there. Building and tearing down is
playbooks/lab.yml's job; this module only reads."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from collector.errors import DrivelabError
from collector.paths import LOCAL_INVENTORY, results_dir

INVENTORY = LOCAL_INVENTORY / "hosts.yml"
CONTAINERS = Path("/var/lib/drivelab/containers")
#: the lab's results store (roles/lab/tasks/results.yml): a PostgreSQL cluster of the
#: controller's, its URI in the file ``uri`` of this folder
RESULTS_STORE = Path("/var/lib/drivelab/results-pg")
MAX_CLIENTS = 200
MIN_DB_MEMORY = 128 * 1024**2


@dataclass(frozen=True)
class LabDrive:
    name: str
    device: str
    cls: str
    size_bytes: int
    iops_cap: int
    backing_file: str
    attached: bool
    # a cliff class's write cap once cliff_after_bytes have been written and not
    # discarded since (0: no cliff)
    cliff_after_bytes: int = 0
    cliff_iops: int = 0


@dataclass(frozen=True)
class LabHost:
    name: str
    group: str
    address: str
    netns: str
    netns_exists: bool
    ssh_answers: bool
    # container and VM labs: whether the host's systemd-nspawn (or qemu) runs ("" on a
    # namespace lab)
    container: str = ""


@dataclass(frozen=True)
class LabStatus:
    inventory: str
    subnet: str
    db_memory_bytes: int
    kind: str = "netns"
    release: str = ""
    #: VM labs: the DB host VM's acceleration (tcg: an emulated CPU; kvm)
    vm_accel: str = ""
    #: cgroup hierarchy of the DB host's memory limit and IOPS caps (v1 or v2)
    cgroup: str = ""
    #: the lab's results store (``lab up --results-store``): its URI, "" when there is none
    results_store: str = ""
    results_store_answers: bool = False
    hosts: list[LabHost] = field(default_factory=list)
    drives: list[LabDrive] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def load_inventory(path: Path = INVENTORY) -> dict:
    if not path.exists():
        raise DrivelabError(f"no local lab: {path} does not exist; run 'drivelab lab up'")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise DrivelabError(f"{path}: not valid YAML ({err.__class__.__name__})") from err


def _netns_names() -> set[str]:
    proc = subprocess.run(
        ["ip", "-j", "netns", "list"], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        return set()
    return {entry["name"] for entry in json.loads(proc.stdout)}


def _ssh_answers(address: str, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((address, 22), timeout=timeout) as sock:
            sock.settimeout(timeout)
            return sock.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def _attached(backing_file: str) -> bool:
    proc = subprocess.run(
        ["losetup", "-j", backing_file], capture_output=True, text=True, check=False
    )
    return proc.returncode == 0 and bool(proc.stdout.strip())


def results_store_uri(folder: Path | None = None) -> str:
    """The URI of the lab's results store, "" when the lab has none."""
    try:
        return ((folder or RESULTS_STORE) / "uri").read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def results_store_answers(uri: str) -> bool:
    import psycopg  # noqa: PLC0415

    try:
        with psycopg.connect(uri, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


def save_results_store(uri: str) -> tuple[Path, int, int] | None:
    """The lab's results store exported to the results folder before lab down removes it
    (``drivelab import FILE --db ...`` brings it back): the file and its scenario and run
    counts; None when it holds nothing."""
    from collector.store import transfer  # noqa: PLC0415

    # any trouble (a store newer than this drivelab) stops lab down before it removes
    # anything: the store is kept
    doc = transfer.export_postgresql(uri, "the lab's results store")
    if doc is None:
        return None
    out = results_dir() / f"lab-results-store-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    transfer.write_export(doc, out)
    return out, len(doc["scenarios"]), sum(len(s["runs"]) for s in doc["scenarios"])


def _container_state(name: str) -> str:
    """running or stopped, from the pid file the lab's lab_container module writes."""
    try:
        pid = int((CONTAINERS / name / "nspawn.pid").read_text().strip())
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        return "stopped"
    return "running" if comm == "systemd-nspawn" else "stopped"


def _vm_state(folder: str) -> str:
    """running or stopped, from the pid file of the lab's lab_vm module."""
    try:
        pid = int((Path(folder) / "qemu.pid").read_text().strip())
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except (OSError, ValueError):
        return "stopped"
    return "running" if os.path.basename(argv0) == b"qemu-system-x86_64" else "stopped"


def status(path: Path = INVENTORY) -> LabStatus:
    inv = load_inventory(path)
    top = inv.get("all", {})
    children = top.get("children", {})
    namespaces = _netns_names()
    uri = results_store_uri()
    kind = top.get("vars", {}).get("drivelab_lab_hosts", "netns")
    hosts: list[LabHost] = []
    drives: list[LabDrive] = []
    db_memory = 0
    vm_accel = ""
    for group in ("db", "clients"):
        for name, hv in (children.get(group, {}).get("hosts") or {}).items():
            netns = hv.get("drivelab_netns", "")
            vm = hv.get("drivelab_lab_vm", "")
            if vm:
                state, vm_accel = _vm_state(vm), str(hv.get("drivelab_lab_vm_accel", ""))
            elif kind in ("container", "vm"):
                state = _container_state(name)
            else:
                state = ""
            hosts.append(
                LabHost(
                    name=name,
                    group=group,
                    address=hv["ansible_host"],
                    # a VM is in no namespace of this machine: on the bridges by its taps
                    netns=netns or "(VM)",
                    netns_exists=not netns or netns in namespaces,
                    # an emulated CPU's sshd takes its time over the banner
                    ssh_answers=_ssh_answers(hv["ansible_host"], timeout=5.0 if vm else 0.5),
                    container=state,
                )
            )
            if group != "db":
                continue
            db_memory = int(hv.get("db_memory_bytes", 0))
            for d in hv.get("candidate_drives") or []:
                if vm:
                    # the guest's device: there while the VM runs
                    backing = f"(qemu, {d.get('serial', '')})"
                    attached = state == "running"
                else:
                    # a container host's device is a link of its own /dev
                    backing = d.get("backing_file", "")
                    attached = _attached(backing) and (
                        kind == "container" or os.path.exists(d["device"])
                    )
                drives.append(
                    LabDrive(
                        name=d["name"],
                        device=d["device"],
                        cls=d.get("class", "?"),
                        size_bytes=int(d["size_bytes"]),
                        iops_cap=int(d.get("iops_cap") or 0),
                        backing_file=backing,
                        attached=attached,
                        cliff_after_bytes=int((d.get("lab_cliff") or {}).get("after_bytes", 0)),
                        cliff_iops=int((d.get("lab_cliff") or {}).get("iops", 0)),
                    )
                )
    return LabStatus(
        inventory=str(path),
        subnet=top.get("vars", {}).get("drivelab_lab_subnet", "?"),
        db_memory_bytes=db_memory,
        kind=kind,
        release=str(top.get("vars", {}).get("drivelab_lab_release", "")),
        vm_accel=vm_accel,
        cgroup=str(top.get("vars", {}).get("drivelab_lab_cgroup", "")),
        results_store=uri,
        results_store_answers=bool(uri) and results_store_answers(uri),
        hosts=hosts,
        drives=drives,
    )


def mem_total_bytes() -> int:
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise DrivelabError("/proc/meminfo has no MemTotal line")  # pragma: no cover
