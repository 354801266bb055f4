"""Helpers for lab tests: they build the real local lab (root, namespaces, sshd, loop
devices, cgroups) and always tear it down, even when a test fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit.hostcode import module_util

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LAB_DIRS = ("/var/lib/drivelab", "/dev/shm/drivelab")


#: What the tests know of the lab on the machine: "lab2" while the standard 2-client lab
#: that `lab2` built is up and every test since passed; None when that is not known.
_shared = {"lab": None}


def drivelab(
    *args: str, check: bool = True, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    if args[:2] == ("lab", "down"):
        _shared["lab"] = None  # a test took the lab down: the next module builds its own
    # (a `lab up` that converges the lab with other options, --db-memory say, leaves it
    # the same lab: the next module takes it over only if `lab status` finds it standard)
    proc = subprocess.run(
        [str(BIN / "drivelab"), *args],
        cwd=REPO,
        env=None if env is None else dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"drivelab {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def ansible(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    return subprocess.run(
        [str(BIN / args[0]), *args[1:]],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def lab_leftovers() -> dict[str, list[str]]:
    """Everything of the lab's that is still on the machine, by kind."""
    netns = subprocess.run(
        ["ip", "-j", "netns", "list"], capture_output=True, text=True, check=False
    ).stdout
    links = json.loads(
        subprocess.run(
            ["ip", "-j", "link", "show"], capture_output=True, text=True, check=False
        ).stdout
        or "[]"
    )
    loops = subprocess.run(
        ["losetup", "-J", "-l"], capture_output=True, text=True, check=False
    ).stdout
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        mounts = [line.split()[4] for line in fh if "drivelab" in line]
    cgroups = [str(p) for p in Path("/sys/fs/cgroup").glob("*/drivelab*")]
    cgroups += [str(p) for p in Path("/sys/fs/cgroup").glob("drivelab*")]  # pure v2
    procs = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            cmd = (
                Path(f"/proc/{pid}/cmdline")
                .read_bytes()
                .replace(b"\0", b" ")
                .decode(errors="replace")
            )
        except OSError:
            continue
        if "/var/lib/drivelab/" in cmd and "pytest" not in cmd:
            procs.append(f"{pid} {cmd.strip()}")
    return {
        "namespaces": [
            n["name"] for n in json.loads(netns or "[]") if n["name"].startswith("drivelab")
        ],
        "links": [x["ifname"] for x in links if x["ifname"].startswith("drivelab")],
        "loops": [
            d["name"]
            for d in json.loads(loops or '{"loopdevices": []}')["loopdevices"]
            if "drivelab" in (d.get("back-file") or "")
        ],
        "mounts": mounts,
        "cgroups": cgroups,
        "processes": procs,
        "folders": [d for d in LAB_DIRS if os.path.exists(d)],
        "inventory": [str(p) for p in [REPO / "inventory/local/hosts.yml"] if p.exists()],
    }


def assert_no_lab() -> None:
    left = {kind: items for kind, items in lab_leftovers().items() if items}
    assert not left, f"lab leftovers: {left}"


#: set to "skip" to skip the lab tests where the lab cannot be built (they fail otherwise)
SKIP_VAR = "DRIVELAB_LAB_TESTS"


def why_no_lab() -> str | None:
    """Why the lab cannot be built on this machine (one line), or None. The cgroup
    check is the lab role's own (lab up runs the same one before making anything)."""
    if os.geteuid() != 0:
        return "they need root (namespaces, loop devices, cgroups, mounts)"
    cgroup = module_util("lab", "drivelab_cgroup")
    try:
        cgroup.choose()
    except cgroup.CgroupError as err:
        return str(err).removeprefix("lab: ")
    return None


#: The lab test modules in the order they run, chosen so that each module's lab is the one
#: the module before left wherever it can be (fixture lab2): the modules with labs of their
#: own that look for lab leftovers (3 clients, no lab) first, then the 2-client lab built
#: once for test_gate and taken over by every module after it that asks for lab2,
#: test_drives' blank drives included; then test_telemetry's 256 MiB lab, and the
#: container lab last, its image built meanwhile (ImageBuild). Modules not named run
#: after these, in file order.
ORDER = (
    "test_lab", "test_lab_bad_input", "test_gate", "test_check", "test_drives", "test_faults", "test_live",
    "test_pgbench", "test_pretests", "test_run", "test_telemetry", "test_containers", "test_vm",
)  # fmt: skip


def _in_order(items: list[pytest.Item]) -> None:
    """The lab tests in ORDER's order, each module's own order kept (a stable sort), in the
    places the lab tests had; the unit tests where they were. Every xdist worker sorts the
    same way."""
    places = [i for i, item in enumerate(items) if item.nodeid.startswith("tests/lab/")]

    def rank(item: pytest.Item) -> int:
        module = item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
        return ORDER.index(module) if module in ORDER else len(ORDER)

    for i, item in zip(places, sorted((items[i] for i in places), key=rank), strict=True):
        items[i] = item


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected what they do
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A lab test that cannot build its lab fails, all of them in one line: a skipped
    lab test would hide that nothing was tested. DRIVELAB_LAB_TESTS=skip skips them.
    The lab tests run in ORDER's order."""
    _in_order(items)
    lab = [item for item in items if item.get_closest_marker("lab")]
    if not lab:
        return
    why = why_no_lab()
    if why is None:
        return
    if os.environ.get(SKIP_VAR) == "skip":
        for item in lab:
            item.add_marker(
                pytest.mark.skip(reason=f"lab tests cannot run: {why} ({SKIP_VAR}=skip)")
            )
        return
    raise pytest.UsageError(
        f"{len(lab)} lab tests cannot run: {why}."
        f" Run them as root on such a machine, or set {SKIP_VAR}=skip to skip them"
        " (make unit runs only the unit tests)"
    )


def playbook(
    name: str, extra: dict | None = None, *args: str, timeout: float = 600
) -> subprocess.CompletedProcess:
    """ansible-playbook playbooks/<name> against the local lab, extra vars as a JSON file."""
    import tempfile  # noqa: PLC0415

    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="drivelab-test-") as fh:
        json.dump(extra or {}, fh)
        fh.flush()
        return ansible(
            "ansible-playbook", f"playbooks/{name}", "-e", f"@{fh.name}", *args, timeout=timeout
        )


def on_hosts(pattern: str, command: str, timeout: float = 300) -> dict[str, str]:
    """stdout of a shell command on each host matching pattern, over the lab's SSH (the
    command's exit status is not looked at: the output says what the test needs)."""
    proc = ansible(
        "ansible", pattern, "-i", "inventory/local", "-m", "ansible.builtin.shell",
        "-a", f"{command}; true", "-o", timeout=timeout,
    )  # fmt: skip
    out = {}
    for line in proc.stdout.splitlines():
        host, _, rest = line.partition(" | ")
        if "(stdout) " not in rest:
            raise AssertionError(f"{command!r} on {host}: {rest}")
        out[host.strip()] = rest.split("(stdout) ", 1)[1].replace("\\n", "\n")
    return out


def recap(proc: subprocess.CompletedProcess, host: str) -> dict[str, int]:
    from collector.hosts.playbook import parse_recap  # noqa: PLC0415

    return parse_recap(proc.stdout).get(host, {})


def lab_inventory() -> dict:
    import yaml  # noqa: PLC0415

    return yaml.safe_load((REPO / "inventory/local/hosts.yml").read_text())


def db_drives() -> list[dict]:
    return lab_inventory()["all"]["children"]["db"]["hosts"]["dbhost"]["candidate_drives"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    """A lab test that fails (in set-up, call or teardown) leaves the lab unknown."""
    report = yield
    if report.failed and item.get_closest_marker("lab"):
        _shared["lab"] = None
    return report


@pytest.fixture(scope="session", autouse=True)
def _warm_starts():
    """The stages the tests run one after another start as `drivelab run`'s do: each
    ansible-playbook started ahead, while the one before runs (collector.hosts.warmstart)."""
    from collector.hosts import warmstart  # noqa: PLC0415

    with warmstart.warm_starts():
        yield


class ImageBuild:
    """The container lab's Debian image and, where test_vm runs, the VM lab's (the lab
    role's defaults: release, packages, mirror, cache), built one after the other by the
    role's own module `lab_image` in a background process at a lower priority while the
    2-client lab's modules run, so that test_containers and test_vm, last in ORDER, find
    them cached (debootstrap: about a minute for the container image on a machine that
    never built it, about two more for the VM's). Started after the modules that look
    for lab leftovers (debootstrap mounts /proc and /sys inside its tree, under the cache
    folder) and waited for by those labs' fixtures and at the end of the session; never
    killed half-way. lab_image keeps an image made as the defaults ask, at once."""

    def __init__(self, *, vm: bool = False) -> None:
        import shlex  # noqa: PLC0415
        import tempfile  # noqa: PLC0415

        import yaml  # noqa: PLC0415

        d = yaml.safe_load((REPO / "roles/lab/defaults/main.yml").read_text())
        self.proc: subprocess.Popen | None = None
        common = {
            "release": d["lab_release"], "cache_dir": d["lab_image_cache"],
            "mirror": d["lab_debian_mirror"], "user": d["lab_login_user"],
        }  # fmt: skip
        builds = [{**common, "packages": d["lab_image_packages"]}]
        if vm:
            builds.append({**common, "packages": d["lab_vm_image_packages"], "kind": "vm"})
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
        self.log = tempfile.TemporaryFile("w+")  # noqa: SIM115  (closed in wait())
        script = " && ".join(
            shlex.join([str(BIN / "ansible"), "localhost", "-c", "local", "-m", "lab_image",
                        "-a", json.dumps(args)])
            for args in builds
        )  # fmt: skip
        self.proc = subprocess.Popen(
            ["nice", "-n", "10", "sh", "-c", script],
            cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=self.log,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    def wait(self) -> None:
        """Until the build ends; a failed build is said (the lab's own `lab up` builds
        it then, and fails in its own words if it cannot)."""
        if self.proc is None:
            return
        rc = self.proc.wait(timeout=1500)
        self.proc = None
        self.log.seek(0)
        if rc != 0:
            print(f"container image built ahead: exit {rc}: {self.log.read()[-2000:]}")
        self.log.close()


_image = {"build": None}


def container_image_built_ahead() -> None:
    """Wait for the images' build ahead, if one runs (test_containers, test_vm)."""
    if _image["build"] is not None:
        _image["build"].wait()


@pytest.fixture(scope="session")
def _lab_session(request):
    """Whatever lab the tests left up is torn down at the end of the session. The
    container image is built meanwhile, where test_containers is to run (ImageBuild)."""
    modules = {i.nodeid.split("::", 1)[0] for i in request.session.items}
    if modules & {"tests/lab/test_containers.py", "tests/lab/test_vm.py"}:
        _image["build"] = ImageBuild(vm="tests/lab/test_vm.py" in modules)
    try:
        yield
    finally:
        try:
            container_image_built_ahead()
        finally:
            if _shared["lab"] is not None:
                drivelab("lab", "down")


def _standard(status: dict) -> bool:
    """Whether ``status`` (lab status --json) is the lab `lab up` builds by default, whole:
    namespaces, a DB host and 2 clients that answer over SSH, every drive attached, a
    512 MiB DB host, no results store."""
    hosts = status.get("hosts", [])
    return (
        status.get("kind") == "netns"
        and status.get("db_memory_bytes") == 512 * 1024**2
        and not status.get("results_store")
        and sorted(h["group"] for h in hosts) == ["clients", "clients", "db"]
        and all(h["ssh_answers"] and h["netns_exists"] for h in hosts)
        and bool(status.get("drives"))
        and all(d["attached"] for d in status["drives"])
    )


def _blank(status: dict) -> bool:
    """Whether every drive of the lab in ``status`` is as `lab up` makes it: no signature
    on it (no filesystem, partition table or swap) and so nothing mounted from it, nor
    any kernel thread writing to it."""
    for drive in status["drives"]:
        probe = subprocess.run(
            ["blkid", "-p", "-o", "export", drive["device"]],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if probe.stdout.strip():
            return False
    return True


@pytest.fixture(scope="module")
def lab2(_lab_session, request):
    """The lab with 2 clients for one test module. Built fresh unless the previous module's
    is still up, not taken down by any test since, every test since passed and `lab
    status` finds it standard: then it is taken over as it is, provisioned, which spares
    the lab's building and first provisioning (about 50 s a module). Torn down afterwards
    when any of this module's tests failed or took the lab down; otherwise left for the
    next module (and torn down at the end of the session). A module that sets
    ``LAB2_BLANK = True`` needs blank drives (no filesystem an earlier module made, whose
    kernel threads may still write to it): it takes a lab over only if its drives carry
    no signature, and gets one built afresh otherwise."""
    status = None
    if _shared["lab"] == "lab2":
        proc = drivelab("lab", "status", "--json", check=False)
        if proc.returncode == 0 and _standard(json.loads(proc.stdout)):
            status = json.loads(proc.stdout)
            if getattr(request.module, "LAB2_BLANK", False) and not _blank(status):
                status = None
    if status is None:
        drivelab("lab", "down")
        drivelab("lab", "up")
        status = json.loads(drivelab("lab", "status", "--json").stdout)
        _shared["lab"] = "lab2"
    try:
        yield status
    finally:
        if _shared["lab"] != "lab2":
            drivelab("lab", "down")


def wait_for(predicate, timeout: float, what: str, every: float = 0.3):
    """``predicate()``'s first truthy value, polled every ``every`` seconds; after
    ``timeout`` seconds an AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")
