"""``drivelab lab up|down|status``: the CLI only calls playbooks/lab.yml (and reads its
inventory for status). Arguments are checked here first, so bad input creates nothing."""

from __future__ import annotations

import argparse
import ipaddress
import json
import re

from rich.console import Console
from rich.table import Table

from collector import build
from collector.errors import DrivelabError
from collector.hosts import lab
from collector.hosts.playbook import run_playbook
from collector.paths import REPO
from collector.units import human_size, parse_size

CONTROLLER_INVENTORY = REPO / "inventory" / "controller.yml"
# the VM lab's DB host: the least RAM its guest is given (roles/lab preflight)
VM_MIN_MEMORY = 512 * 2**20


def clients_arg(text: str) -> int:
    if not re.fullmatch(r"\d+", text.strip()) or not 1 <= int(text) <= lab.MAX_CLIENTS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of client hosts: "
            f"give a whole number from 1 to {lab.MAX_CLIENTS}"
        )
    return int(text)


def memory_arg(text: str) -> int:
    try:
        size = parse_size(text, "--db-memory")
    except DrivelabError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--db-memory ")) from err
    total = lab.mem_total_bytes()
    if size < lab.MIN_DB_MEMORY or size > total:
        raise argparse.ArgumentTypeError(
            f"{text!r} is outside 128M..{human_size(total)} (this machine's memory)"
        )
    return size


def subnet_arg(text: str) -> str:
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r} is not a network ({err})") from err
    if net.version != 4 or net.prefixlen != 24 or not net.is_private:
        raise argparse.ArgumentTypeError(f"{text!r} must be a private IPv4 /24, like 10.213.0.0/24")
    return str(net)


def bridge_arg(text: str) -> str:
    if not re.fullmatch(r"drivelab[a-z0-9_-]{0,7}", text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: a lab bridge is 'drivelab' plus up to 7 of [a-z0-9_-]"
        )
    return text


def clock_offset_arg(text: str) -> tuple[str, float]:
    """HOST=SECONDS: a container host whose clock runs that far off the controller's."""
    host, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"dbhost|client[1-9][0-9]{0,2}", host):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give HOST=SECONDS, HOST dbhost or clientN (e.g. client2=0.3)"
        )
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not -3600 <= seconds <= 3600:  # also NaN
        raise argparse.ArgumentTypeError(f"{text!r}: SECONDS is a number from -3600 to 3600")
    return host, seconds


def cmd_up(args: argparse.Namespace) -> int:
    extra: dict = {"lab_state": "present"}
    if args.clients is not None:
        extra["lab_clients"] = args.clients
    if args.db_memory is not None:
        extra["lab_db_memory"] = args.db_memory
        if args.hosts == "vm":
            # a VM's memory is its own RAM, not a cgroup limit of this machine's
            if args.db_memory < VM_MIN_MEMORY:
                raise DrivelabError(
                    f"--db-memory {human_size(args.db_memory)}: with --hosts vm it is the VM's"
                    f" RAM, at least {human_size(VM_MIN_MEMORY)}"
                )
            extra["lab_vm_memory_mb"] = args.db_memory // 2**20
    if args.subnet is not None:
        extra["lab_subnet"] = args.subnet
    if args.bridge is not None:
        extra["lab_bridge"] = args.bridge
    if args.hosts is not None:
        extra["lab_hosts"] = args.hosts
    if args.results_store:
        extra["lab_results_store"] = True
    if args.release is not None:
        if args.hosts not in ("container", "vm"):
            raise DrivelabError("--release is for container or VM hosts: add --hosts container")
        extra["lab_release"] = args.release
    if args.clock_offset:
        if args.hosts != "container":
            raise DrivelabError("--clock-offset is for container hosts: add --hosts container")
        extra["lab_clock_offsets"] = dict(args.clock_offset)
    console = Console()
    what = {
        "container": "container hosts: the first build of an image takes about a minute",
        "vm": "a VM DB host: the first build of its image takes about 3 minutes, each boot"
        " about a minute under an emulated CPU",
    }.get(args.hosts, "playbooks/lab.yml")
    with console.status(f"building the local lab ({what})", spinner="dots"):
        result = run_playbook(
            "lab.yml", extra, inventory=CONTROLLER_INVENTORY, stream=args.verbose, what="lab up"
        )
    changed = sum(r.get("changed", 0) for r in result.recap.values())
    console.print(f"lab up: {result.seconds:.1f} s, {changed} changes (log: {result.log})")
    show_status(console)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    console = Console()
    uri = lab.results_store_uri()
    if uri and not args.discard_results and not lab.results_store_answers(uri):
        # its runs cannot be exported, and lab down would remove its folder with them
        raise DrivelabError(
            f"lab down: the lab's results store ({lab.RESULTS_STORE}) does not answer, so its"
            " runs cannot be saved first; 'drivelab lab up' starts it again, or give"
            " --discard-results to remove it unsaved"
        )
    if uri and not args.discard_results:
        saved = lab.save_results_store(uri)
        if saved:
            out, scenarios, runs = saved
            console.print(
                f"lab down: the lab's results store ({scenarios} scenarios, {runs} runs) saved to"
                f" {out}; 'drivelab import {out} --db ...' brings it back"
            )
    with console.status("tearing the local lab down", spinner="dots"):
        result = run_playbook(
            "lab.yml",
            {"lab_state": "absent", "lab_remove_caches": args.caches},
            inventory=CONTROLLER_INVENTORY,
            stream=args.verbose,
            what="lab down",
        )
    changed = sum(r.get("changed", 0) for r in result.recap.values())
    console.print(
        f"lab down: {result.seconds:.1f} s, {'removed the lab' if changed else 'nothing to remove'}"
    )
    return 0


def show_status(console: Console) -> lab.LabStatus:
    st = lab.status()
    kind = {
        "netns": "namespaces",
        "container": f"Debian {st.release} containers",
        "vm": f"a Debian {st.release} VM DB host ({st.vm_accel}), container clients",
    }.get(st.kind, st.kind)
    cgroup = f", cgroup {st.cgroup}" if st.cgroup else ""
    hosts = Table(title=f"lab hosts: {kind} (subnet {st.subnet}{cgroup}, inventory {st.inventory})")
    columns = ["host", "group", "address", "namespace", "ssh"]
    if st.kind in ("container", "vm"):
        columns.insert(4, "container or VM")
    for col in columns:
        hosts.add_column(col)
    for h in st.hosts:
        ssh = "answers" if h.ssh_answers else "[red]no answer[/red]"
        ns = h.netns if h.netns_exists else f"[red]{h.netns} (missing)[/red]"
        row = [h.name, h.group, h.address, ns, ssh]
        if st.kind in ("container", "vm"):
            row.insert(4, h.container if h.container == "running" else f"[red]{h.container}[/red]")
        hosts.add_row(*row)
    console.print(hosts)
    drives = Table(
        title=f"candidate drives of the DB host (memory limit {human_size(st.db_memory_bytes)})"
    )
    for col in ("drive", "class", "IOPS cap", "size", "device", "backing file"):
        drives.add_column(col)
    for d in st.drives:
        dev = d.device if d.attached else f"[red]{d.device} (not attached)[/red]"
        cap = str(d.iops_cap or "none")
        if d.cliff_iops:
            cap += f", writes {d.cliff_iops} past {human_size(d.cliff_after_bytes)}"
        drives.add_row(d.name, d.cls, cap, human_size(d.size_bytes), dev, d.backing_file)
    console.print(drives)
    if st.results_store:
        answers = "answers" if st.results_store_answers else "[red]no answer[/red]"
        console.print(
            f"results store: {st.results_store} ({answers}); use it with --db or DRIVELAB_DB"
        )
    held = lab_lease()
    text = held["text"] if "text" in held else f"[red]cannot read it: {held['error']}[/red]"
    console.print(f"lab lease on {held['db_host']}: {text}", highlight=False, soft_wrap=True)
    return st


def lab_lease() -> dict:
    """The lease on the lab's DB host (collector.hosts.lease.query), or {db_host, error}."""
    from collector.hosts import lease  # noqa: PLC0415
    from collector.scenario import load_inventory  # noqa: PLC0415

    try:
        return lease.query(lab.INVENTORY, load_inventory(lab.INVENTORY))
    except DrivelabError as err:
        return {"db_host": "the DB host", "error": str(err)}


def cmd_status(args: argparse.Namespace) -> int:
    if args.json:
        doc = {**json.loads(lab.status().to_json()), "lease": lab_lease()}
        print(json.dumps(build.stamped(doc), indent=2))
        return 0
    st = show_status(Console())
    broken = [
        h.name
        for h in st.hosts
        if not (h.netns_exists and h.ssh_answers) or h.container not in ("", "running")
    ]
    broken += [d.name for d in st.drives if not d.attached]
    if st.results_store and not st.results_store_answers:
        broken.append("the results store")
    if broken:
        raise DrivelabError(f"lab is not whole: {', '.join(broken)} missing or not answering")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lab", help="build, tear down or show the local lab")
    labsub = p.add_subparsers(dest="lab_command", metavar="up|down|status", parser_class=type(p))
    labsub.required = True
    up = labsub.add_parser("up", help="build (or converge) the local lab")
    up.add_argument(
        "--clients", type=clients_arg, help="client hosts, 1..200 (default 2, or as last built)"
    )
    up.add_argument(
        "--db-memory",
        type=memory_arg,
        help="DB host memory limit, e.g. 512M (default 512M); with --hosts vm the VM's RAM"
        " (default 2G, at least 512M)",
    )
    up.add_argument(
        "--subnet", type=subnet_arg, help="the lab's private /24 (default 10.213.0.0/24)"
    )
    up.add_argument("--bridge", type=bridge_arg, help="bridge name (default drivelab0)")
    up.add_argument(
        "--hosts",
        choices=("netns", "container", "vm"),
        help="netns: namespaces of this machine (fast, the default); container: Debian hosts "
        "with systemd (systemd-nspawn), the real-host path; vm: the DB host a qemu VM with "
        "Debian's own kernel and emulated SATA, SCSI, NVMe and virtio drives, the real-device path",
    )
    up.add_argument(
        "--release",
        choices=("trixie", "bookworm"),
        help="Debian release of container hosts (default trixie)",
    )
    up.add_argument(
        "--clock-offset",
        type=clock_offset_arg,
        action="append",
        metavar="HOST=SECONDS",
        help="container hosts only: HOST's clock runs SECONDS off the controller's (libfaketime"
        " for every process there), as a real host's without NTP; repeat for more hosts",
    )
    up.add_argument(
        "--results-store",
        action="store_true",
        help="also run a PostgreSQL cluster on this machine for results (a team store to try): "
        "lab status shows its URI; remembered until lab down, which saves it to the results folder",
    )
    up.add_argument("-v", "--verbose", action="store_true", help="show Ansible's output")
    up.set_defaults(func=cmd_up)
    down = labsub.add_parser("down", help="remove everything the lab made")
    down.add_argument(
        "--caches",
        action="store_true",
        help="also remove the container images and the apt cache (/var/cache/drivelab)",
    )
    down.add_argument(
        "--discard-results",
        action="store_true",
        help="remove the lab's results store (lab up --results-store) without saving it first",
    )
    down.add_argument("-v", "--verbose", action="store_true", help="show Ansible's output")
    down.set_defaults(func=cmd_down)
    st = labsub.add_parser("status", help="list hosts, addresses and drives")
    st.add_argument("--json", action="store_true", help="machine-readable")
    st.set_defaults(func=cmd_status)
