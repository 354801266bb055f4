"""What the lab bench scripts share: the drivelab command, scenario files, a
`drivelab run` whose console lines are timestamped as they arrive (optionally on a
pseudo-terminal, so the live table is drawn as an operator sees it), the pgbench span
of a run folder, and a sampler of a process tree's CPU time and memory from /proc.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
DRIVELAB = str(Path(sys.executable).parent / "drivelab")
# A bench measures the code it lives in. The venv's `drivelab` imports collector from the
# checkout the venv was installed from (editable), which may be another one (a worktree
# run with the main checkout's venv): every process the bench starts, and the bench
# itself, import this checkout's collector first.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(REPO), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
)
sys.path.insert(0, str(REPO))
TICK = os.sysconf("SC_CLK_TCK")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][0-9A-Za-z]")


def drivelab(*args: str, check: bool = True, quiet: bool = True) -> float:
    """Runs ``drivelab ARGS`` in the repository; returns its wall time in seconds."""
    started = time.monotonic()
    subprocess.run([DRIVELAB, *args], cwd=REPO, check=check, capture_output=quiet)
    return time.monotonic() - started


@contextmanager
def environ(changes: dict[str, str]) -> Iterator[None]:
    """os.environ with ``changes`` for the block, then as it was (unset stays unset)."""
    saved = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def write_scenario(folder: Path, doc: dict[str, Any]) -> Path:
    path = folder / f"{doc['name']}.yml"
    path.write_text("---\n" + yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


class TimedRun:
    """A command whose output lines are kept with the wall-clock instant each arrived.
    ``tty=(rows, cols)`` runs it on a pseudo-terminal of that size (rich then draws
    its live table); otherwise its stdout and stderr are one pipe."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        log: Path,
        tty: tuple[int, int] | None = None,
    ) -> None:
        self.lines: list[tuple[float, str]] = []
        self.started = time.time()
        self._log = open(log, "wb")  # noqa: SIM115  (closed by the reader thread)
        if tty:
            master, slave = pty.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", tty[0], tty[1], 0, 0))
            self.proc = subprocess.Popen(
                argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                start_new_session=True,
            )  # fmt: skip
            os.close(slave)
            fd = master
        else:
            self.proc = subprocess.Popen(
                argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
            assert self.proc.stdout is not None
            fd = self.proc.stdout.fileno()
        self._reader = threading.Thread(target=self._read, args=(fd,), daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self, fd: int) -> None:
        pending = b""
        try:
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # EIO: the pseudo-terminal's other end is closed
                    break
                if not chunk:
                    break
                now = time.time()
                self._log.write(chunk)
                pending += chunk
                *done, pending = pending.split(b"\n")
                for raw in done:
                    text = _ANSI.sub("", raw.decode("utf-8", "replace"))
                    self.lines += [(now, part.strip()) for part in text.split("\r") if part.strip()]
        finally:
            self._log.close()
            if self.proc.stdout is None:  # the pseudo-terminal's master end is ours
                os.close(fd)

    def wait(self) -> int:
        rc = self.proc.wait()
        self._reader.join(timeout=10)
        self.ended = time.time()
        return rc

    def stop(self) -> None:
        """Ends the command and whatever it started (its own session), if still running."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def first(self, pattern: str) -> tuple[float, re.Match[str]] | None:
        rx = re.compile(pattern)
        for t, line in self.lines:
            if m := rx.search(line):
                return t, m
        return None

    def all(self, pattern: str) -> list[tuple[float, re.Match[str]]]:
        rx = re.compile(pattern)
        return [(t, m) for t, line in self.lines if (m := rx.search(line))]


#: `drivelab run`'s line at the end of each repetition: "[2/6] <cell_id> rep 0: complete, ..."
REP_LINE = r"^\[(\d+)/(\d+)\] (\S+) rep (\d+): (\w+)"
#: and after preflight, provision (and telemetry): "provisioned in 41 s"
PROVISIONED = r"^provisioned in (\d+) s"


def pgbench_span(run_dir: Path) -> tuple[float, float] | None:
    """(first launch, last end) of a run's pgbench processes, from each client's
    command.json (the start-at wrapper's record); None if a client left none."""
    run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    starts, ends = [], []
    for host in run["client_hosts"]:
        path = run_dir / host / "command.json"
        if not path.exists():
            return None
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("launched_at") is None or doc.get("ended_at") is None:
            return None
        starts.append(float(doc["launched_at"]))
        ends.append(float(doc["ended_at"]))
    return min(starts), max(ends)


# --------------------------------------------------------------------------- /proc sampling


@dataclass(frozen=True)
class _Proc:
    pid: int
    ppid: int
    start: int  # clock ticks after boot: with the pid, names one process
    comm: str
    cpu: float  # seconds: utime + stime + cutime + cstime (threads included)
    own: float  # seconds: utime + stime


@dataclass(frozen=True)
class ProcSample:
    t: float  # time.time()
    root_cpu: float  # seconds, cumulative, the root process alone (all its threads)
    tree_cpu: float  # seconds, cumulative, the root and every descendant (see ProcSampler)
    root_rss: int  # bytes, VmRSS
    root_hwm: int  # bytes, VmHWM (the root's peak RSS so far)
    tree_rss: int  # bytes, sum of VmRSS (shared pages counted once per process)
    tree_procs: int


def _read_proc(pid: int) -> _Proc | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    head, _, tail = text.rpartition(")")
    f = tail.split()
    comm = head.partition("(")[2]
    own = (int(f[11]) + int(f[12])) / TICK
    return _Proc(pid, int(f[1]), int(f[19]), comm, own + (int(f[13]) + int(f[14])) / TICK, own)


def _status_kib(pid: int, *keys: str) -> dict[str, int]:
    out = dict.fromkeys(keys, 0)
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in out:
                    out[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def _is_mux(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"[mux]" in fh.read()
    except OSError:
        return False


class ProcSampler:
    """Samples a process and its descendants every ``interval`` seconds in a thread.

    The tree's CPU is cumulative and counts every process once: per interval, the
    growth of utime+stime+cutime+cstime of each process seen twice, the whole of a
    new one, minus the last reading of one that ended and was reaped by a process
    still in the tree (its parent's cutime/cstime now hold its total). So processes
    shorter than an interval (Ansible's forks, ssh clients) are counted too. Ansible's
    ssh ControlPersist masters (``ssh: ... [mux]``, reparented to init) started after
    the root are counted as part of the tree."""

    def __init__(self, root: int, interval: float = 0.5) -> None:
        self.root = root
        self.interval = interval
        self.samples: list[ProcSample] = []
        self._stop = threading.Event()
        root_proc = _read_proc(root)
        self._root_start = root_proc.start if root_proc else 0
        self._prev: dict[tuple[int, int], _Proc] = {}
        self._tree_total = 0.0
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> ProcSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            if not self._sample():
                return
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - began)))

    def _tree(self) -> tuple[dict[tuple[int, int], _Proc], set[int]] | None:
        """The tree now (by pid and start), and every pid that exists; None once the
        root has ended."""
        procs = {}
        for name in os.listdir("/proc"):
            if name.isdigit() and (p := _read_proc(int(name))) is not None:
                procs[p.pid] = p
        if self.root not in procs or procs[self.root].start != self._root_start:
            return None
        children: dict[int, list[int]] = {}
        for p in procs.values():
            children.setdefault(p.ppid, []).append(p.pid)
        keep, todo = set(), [self.root]
        while todo:
            pid = todo.pop()
            keep.add(pid)
            todo += children.get(pid, [])
        for p in procs.values():
            mine = p.comm == "ssh" and p.start >= self._root_start
            if p.pid not in keep and mine and _is_mux(p.pid):
                keep.add(p.pid)
        return {(pid, procs[pid].start): procs[pid] for pid in keep}, set(procs)

    def _reaped_inside(self, gone: _Proc, now: dict[tuple[int, int], _Proc]) -> bool:
        """Whether an ancestor of ``gone`` (as last seen) is still in the tree: then
        its cutime/cstime took over what ``gone`` had used."""
        alive = {pid for pid, _ in now}
        by_pid = {pid: p for (pid, _), p in self._prev.items()}
        seen: set[int] = set()
        pid = gone.ppid
        while pid not in seen:
            seen.add(pid)
            if pid in alive:
                return True
            parent = by_pid.get(pid)
            if parent is None:
                return False
            pid = parent.ppid
        return False

    def _sample(self) -> bool:
        t = time.time()
        found = self._tree()
        if found is None:
            return False
        now, present = found
        delta = 0.0
        for key, p in now.items():
            old = self._prev.get(key)
            delta += p.cpu - old.cpu if old else p.cpu
        for key, old in self._prev.items():
            if key not in now and key[0] not in present and self._reaped_inside(old, now):
                delta -= old.cpu
        self._tree_total = (
            (self._tree_total + delta) if self._prev else sum(p.cpu for p in now.values())
        )
        self._prev = now
        root = next(p for (pid, _), p in now.items() if pid == self.root)
        mem = _status_kib(self.root, "VmRSS", "VmHWM")
        tree_rss = sum(_status_kib(pid, "VmRSS")["VmRSS"] for pid, _ in now)
        self.samples.append(
            ProcSample(
                t, root.own, self._tree_total, mem["VmRSS"], mem["VmHWM"], tree_rss, len(now)
            )
        )
        return True


@dataclass(frozen=True)
class Usage:
    """CPU (in cores) and memory of the sampled processes over one window."""

    seconds: float
    root_mean: float
    root_peak: float
    tree_mean: float
    tree_peak: float
    root_rss_peak: int
    root_hwm: int
    tree_rss_peak: int
    tree_procs_peak: int
    samples: int


def usage(samples: list[ProcSample], start: float, end: float) -> Usage | None:
    """Mean and peak (over one sampling interval) CPU, peak RSS, in ``[start, end]``."""
    inside = [s for s in samples if start <= s.t <= end]
    if len(inside) < 2:
        return None
    span = inside[-1].t - inside[0].t
    pairs = list(itertools.pairwise(inside))

    def peak(attr: str) -> float:
        return max((getattr(b, attr) - getattr(a, attr)) / (b.t - a.t) for a, b in pairs)

    return Usage(
        seconds=span,
        root_mean=(inside[-1].root_cpu - inside[0].root_cpu) / span,
        root_peak=peak("root_cpu"),
        tree_mean=(inside[-1].tree_cpu - inside[0].tree_cpu) / span,
        tree_peak=peak("tree_cpu"),
        root_rss_peak=max(s.root_rss for s in inside),
        root_hwm=inside[-1].root_hwm,
        tree_rss_peak=max(s.tree_rss for s in inside),
        tree_procs_peak=max(s.tree_procs for s in inside),
        samples=len(inside),
    )


def mib(n: int) -> str:
    return f"{n / 1024**2:.0f} MiB"


def launch_lead() -> str:
    """The start lead as roles/pgbench_run chooses it (read from the role's defaults and
    its run tasks, so this text cannot drift from what ran)."""
    tasks = (REPO / "roles" / "pgbench_run" / "tasks" / "run.yml").read_text(encoding="utf-8")
    lead = (
        'lead: "{{ pgbench_run_lead_seconds | float'
        ' + pgbench_run_lead_per_client | float * ansible_play_hosts | length }}"'
    )
    if lead not in tasks:
        raise SystemExit("roles/pgbench_run/tasks/run.yml: the start lead changed: update me")
    defaults = yaml.safe_load(
        (REPO / "roles" / "pgbench_run" / "defaults" / "main.yml").read_text(encoding="utf-8")
    )
    return (
        f"{float(defaults['pgbench_run_lead_seconds']):g} s +"
        f" {float(defaults['pgbench_run_lead_per_client']) * 1000:g} ms per client host,"
        " counted from when every client is armed (drivelab_start, one session per client)"
    )
