"""drivelab itself inside a VM with Debian's stock kernel: `make setup`, the namespace lab
(`drivelab lab up`) and a two-client run on it, all inside the VM lab's DB host, so the
lab's cgroup v2 path (memory.max, io.max on a real cgroupfs, not this machine's) runs
once end to end. Writes the section "vm_demo" of docs/benchmarks.md.

Run as root: `.venv/bin/python bench/vm_demo.py` (about an hour under TCG; it tears down
any lab first and leaves none). The steps:

1. `drivelab lab up --hosts vm --clients 1 --db-memory 4G` here: the guest (Debian 13,
   its own kernel, 4 GiB, 2 vCPUs) is the machine the demo runs on.
2. The repository's files and a wheelhouse go in over the lab's SSH: the guest has no
   route out but the lab's apt proxy, so `pip download` fetches here, for the guest's
   Python (3.13), the exact versions of constraints.txt, and the guest's pip reads only
   that folder (PIP_NO_INDEX, PIP_FIND_LINKS). apt goes through the lab's proxy.
3. In the guest, as root: `make setup`; `drivelab lab up` (a namespace lab on a subnet
   of its own: the guest's own address is on the outer lab's); the cgroup files read;
   `drivelab run` of the seed-two-clients scenario sized for an emulated CPU (below);
   `drivelab lab down` and a look for leftovers.
4. `drivelab lab down` here.

The scenario is seed-two-clients with two drives (nvme uncapped, hdd7200 at 120 IOPS by
io.max), scale 4, 2 clients per host, 15 s, one repetition, and pg_test_fsync: its
fdatasync/s on hdd7200 shows whether io.max held the drive to its cap. Under TCG the
tps are the emulated CPU's, no drive figures.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine_note, update_section

REPO = Path(__file__).resolve().parent.parent
DRIVELAB = str(Path(sys.executable).parent / "drivelab")
PIP = str(Path(sys.executable).parent / "pip")
INVENTORY = REPO / "inventory" / "local" / "hosts.yml"
GUEST_REPO = "/root/drivelab"
GUEST_WHEELS = "/root/drivelab-wheels"
#: the guest's own lab: off the outer lab's 10.213.0.0/24, where the guest's address is
INNER_SUBNET, INNER_BRIDGE = "10.215.0.0/24", "drivelab9"
GUEST_MEMORY = "4G"
SCENARIO = {
    "name": "vm-demo",
    "description": "seed-two-clients sized for an emulated CPU: two drives, scale 4, 15 s, once",
    "baseline": "hdd7200",
    "drives": ["nvme", "hdd7200"],
    "filesystems": [{"fs": "ext4", "mount_options": "noatime"}],
    "placement": ["cluster"],
    "write_cache": "leave",
    "workload": {
        "scale": [4],
        "clients_per_host": 2,
        "threads": 1,
        "duration": 15,
        "mode": "tpcb",
        "log": "full",
    },
    "hosts": [2],
    "repetitions": 1,
    "pretests": {"pg_test_fsync": True, "fsync_seconds": 2},
}
CGROUP_FILES = ("memory.max", "io.max", "cgroup.controllers")


def here(*args: str, timeout: float = 3600) -> tuple[float, str]:
    started = time.monotonic()
    proc = subprocess.run(
        [DRIVELAB, *args], cwd=REPO, capture_output=True, text=True, check=False, timeout=timeout
    )
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
        raise SystemExit(f"drivelab {' '.join(args)}: exit {proc.returncode}")
    return time.monotonic() - started, proc.stdout


class Guest:
    """The VM lab's DB host over the lab's own SSH login (drivelab, sudo)."""

    def __init__(self, inventory: Path) -> None:
        doc = yaml.safe_load(inventory.read_text(encoding="utf-8"))
        common = doc["all"]["vars"]
        db = doc["all"]["children"]["db"]["hosts"]["dbhost"]
        self.ssh = [
            "ssh",
            "-i",
            common["ansible_ssh_private_key_file"],
            *shlex.split(common["ansible_ssh_common_args"]),
            "-o",
            "ServerAliveInterval=30",
            f"{common['ansible_user']}@{db['ansible_host']}",
        ]
        self.accel = db.get("drivelab_lab_vm_accel", "unknown")

    def sh(
        self, script: str, *, feed: bytes | None = None, timeout: float = 3600
    ) -> tuple[float, str]:
        """SCRIPT run by bash as root in the guest: its seconds and stdout; a failure ends
        the bench with the tail of its output."""
        started = time.monotonic()
        proc = subprocess.run(
            [*self.ssh, "sudo", "-n", "bash", "-c", shlex.quote(script)],
            input=feed,
            capture_output=True,
            check=False,
            timeout=timeout,
        )
        out = proc.stdout.decode(errors="replace")
        if proc.returncode != 0:
            print(out[-4000:], proc.stderr.decode(errors="replace")[-3000:], sep="\n")
            raise SystemExit(f"in the guest: {script.splitlines()[0]}: exit {proc.returncode}")
        return time.monotonic() - started, out


def repo_tar() -> bytes:
    """The repository's tracked files as they are in the work tree, as a tar stream."""
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout
    return subprocess.run(
        ["tar", "--null", "-T", "-", "-c"], cwd=REPO, input=files, capture_output=True, check=True
    ).stdout


def wheelhouse(folder: Path) -> tuple[float, int, int]:
    """constraints.txt's versions, pip's and the build backend's, as wheels for the guest's
    CPython 3.13 on x86_64: seconds, files, bytes."""
    started = time.monotonic()
    backend = re.search(r'requires = \["([^"]+)"\]', (REPO / "pyproject.toml").read_text())
    pip_pin = re.search(r"^PIP_VERSION := (\S+)", (REPO / "Makefile").read_text(), re.M)
    pins = [line for line in (REPO / "constraints.txt").read_text().splitlines() if "==" in line]
    platforms = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
    platforms += ["manylinux_2_5_x86_64", "manylinux1_x86_64", "linux_x86_64", "any"]
    argv = [PIP, "download", "-q", "-d", str(folder), "--only-binary=:all:"]
    argv += ["--python-version", "3.13", "--implementation", "cp"]
    argv += ["--abi", "cp313", "--abi", "abi3", "--abi", "none"]
    for p in platforms:
        argv += ["--platform", p]
    argv += [*pins, f"pip=={pip_pin.group(1)}", backend.group(1)]
    subprocess.run(argv, check=True)
    wheels = list(folder.iterdir())
    return time.monotonic() - started, len(wheels), sum(w.stat().st_size for w in wheels)


def report_of(stdout: str) -> list[str]:
    """The report `drivelab run` printed at its end: from its closing line (``scenario
    vm-demo: N s, ...``) on, the pre-tests' table and the tps table with it."""
    lines = [line.rstrip() for line in stdout.splitlines()]
    head = f"scenario {SCENARIO['name']}: "
    start = next((i for i, line in enumerate(lines) if line.startswith(head)), None)
    return lines[start:] if start is not None else lines[-60:]


def in_guest(guest: Guest, wheels: Path) -> dict:
    t: dict = {}
    guest.sh(f"rm -rf {GUEST_REPO} {GUEST_WHEELS} && mkdir -p {GUEST_REPO} {GUEST_WHEELS}")
    t["copy"], _ = guest.sh(f"tar -x -C {GUEST_REPO}", feed=repo_tar())
    wheel_tar = subprocess.run(
        ["tar", "-c", "-C", str(wheels), "."], capture_output=True, check=True
    ).stdout
    copied, _ = guest.sh(f"tar -x -C {GUEST_WHEELS}", feed=wheel_tar)
    t["copy"] += copied
    _, t["guest"] = guest.sh(
        "uname -r; . /etc/os-release; echo $PRETTY_NAME; python3 -V; nproc;"
        " awk '/MemTotal/ {print $2}' /proc/meminfo; stat -fc %T /sys/fs/cgroup"
    )
    env = f"PIP_NO_INDEX=1 PIP_FIND_LINKS={GUEST_WHEELS} COLUMNS=160"
    # the README's first command: make is not in a minimal Debian
    t["setup"], _ = guest.sh(
        f"cd {GUEST_REPO} && apt-get update -q && apt-get install -y -q make && {env} make setup",
        timeout=7200,
    )
    lab_up = f"lab up --subnet {INNER_SUBNET} --bridge {INNER_BRIDGE}"
    t["up"], _ = guest.sh(f"cd {GUEST_REPO} && {env} .venv/bin/drivelab {lab_up}")
    _, t["cgroup"] = guest.sh(
        "for f in " + " ".join(CGROUP_FILES) + "; do echo \"$f: $(tr '\\n' ' ' <"
        ' /sys/fs/cgroup/drivelab-db/$f)"; done; echo "lsblk:"; for d in'
        ' $(losetup -nO NAME); do echo "  $d $(lsblk -dno MAJ:MIN $d)"; done'
    )
    scenario = yaml.safe_dump(SCENARIO, sort_keys=False).encode()
    guest.sh(
        f"mkdir -p {GUEST_REPO}/results && cat > {GUEST_REPO}/results/vm-demo.yml", feed=scenario
    )
    t["run"], out = guest.sh(
        f"cd {GUEST_REPO} && {env} .venv/bin/drivelab run results/vm-demo.yml", timeout=7200
    )
    t["report"] = report_of(out)
    t["down"], _ = guest.sh(f"cd {GUEST_REPO} && .venv/bin/drivelab lab down")
    _, t["left"] = guest.sh(
        "ip netns list | grep drivelab; losetup -a | grep drivelab;"
        " findmnt -rn -o TARGET | grep drivelab; ls /sys/fs/cgroup | grep drivelab; true"
    )
    return t


def main() -> None:
    here("lab", "down")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="drivelab-bench-") as tmp:
        try:
            up, _ = here(
                "lab", "up", "--hosts", "vm", "--clients", "1", "--db-memory", GUEST_MEMORY
            )
            wheels_s, nwheels, wheel_bytes = wheelhouse(Path(tmp))
            guest = Guest(INVENTORY)
            t = in_guest(guest, Path(tmp))
        finally:
            down, _ = here("lab", "down")
    total = time.monotonic() - started
    guest_facts = t["guest"].split()
    body = [
        "## drivelab inside a VM (`bench/vm_demo.py`)",
        "",
        machine_note(),
        "",
        f"The VM lab's DB host ({guest.accel}; {' '.join(guest_facts[:-1])} kB,"
        f" /sys/fs/cgroup is {guest_facts[-1]}) as the machine drivelab runs on: `make setup`"
        " (after `apt-get install make`, as the README says) with apt through the lab's"
        " proxy and pip from a wheelhouse made here"
        f" ({nwheels} wheels, {wheel_bytes / 1e6:.0f} MB, {wheels_s:.0f} s), a namespace lab"
        f" on {INNER_SUBNET}, and seed-two-clients sized for an emulated CPU (nvme and"
        " hdd7200, scale 4, 2 hosts x 2 clients, 15 s, once, pg_test_fsync 2 s).",
        "",
        "| step | wall time |",
        "|---|---:|",
        f"| VM lab up here (`--hosts vm --clients 1 --db-memory {GUEST_MEMORY}`) | {up:.0f} s |",
        f"| files and wheels into the guest | {t['copy']:.0f} s |",
        f"| `make setup` in the guest | {t['setup'] / 60:.1f} min |",
        f"| `drivelab lab up` in the guest | {t['up']:.0f} s |",
        f"| `drivelab run` in the guest | {t['run'] / 60:.1f} min |",
        f"| `drivelab lab down` in the guest | {t['down']:.0f} s |",
        f"| VM lab down here | {down:.0f} s |",
        f"| in all | {total / 60:.1f} min |",
        "",
        "The DB host's cgroup in the guest after `lab up` (v2: the drives' device numbers"
        " in io.max):",
        "",
        "```",
        *t["cgroup"].rstrip().splitlines(),
        "```",
        "",
        "The run's report (tps of an emulated CPU, no drive figures):",
        "",
        "```",
        *t["report"],
        "```",
        "",
        "Left in the guest after its `lab down` (namespaces, loop devices, mounts, cgroups"
        " named drivelab): " + (t["left"].strip() or "nothing") + ".",
    ]
    text = "\n".join(body)
    print(text)
    update_section("vm_demo", text)


if __name__ == "__main__":
    main()
