"""Runs one of drivelab's playbooks with ansible-playbook and turns its failure into one line.

The full Ansible output goes to a log file under results/logs/ (or the terminal with
``stream=True``); failed and unreachable tasks arrive as JSON lines from the
``drivelab_failures`` callback, so the user is told which host failed and why.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from collector.errors import EXIT_BUSY, EXIT_HOSTS, EXIT_USAGE, DrivelabError, HostFailure
from collector.hosts import warmstart
from collector.paths import PLAYBOOKS, REPO, ansible_bin, results_dir

#: the lease module's refusal code for "this run no longer holds the lab"
#: (roles/drivelab/module_utils/drivelab_lease.py)
LEASE_LOST = "lease_lost"
#: ... and "another holds the lab" (a playbook called while the lease is someone else's)
LEASE_HELD = "lease_held"

#: the drive modules' refusal code for "drivelab's own PostgreSQL data is on this drive"
#: (roles/candidate_drive/module_utils/drivelab_argv.py): release it, then retry
HOLDS_POSTGRESQL_DATA = "holds_postgresql_data"


class PlaybookFailed(HostFailure):
    """A playbook that failed: the one-line message, and the failed tasks as the
    ``drivelab_failures`` callback wrote them (host, task, msg, and a drive module's
    ``refusal`` code where it gave one). Its exit status: the lab busy when a playbook's
    own lease was refused, the input's when a module refused what it was asked (a drive
    the gate will not touch), else the hosts'."""

    def __init__(self, message: str, failures: tuple[dict, ...] = ()) -> None:
        super().__init__(message)
        self.failures = failures

    @property
    def exit_status(self) -> int:  # type: ignore[override]
        refusals = self.refusals
        if LEASE_HELD in refusals:
            return EXIT_BUSY
        return EXIT_USAGE if refusals else EXIT_HOSTS

    @property
    def refusals(self) -> set[str]:
        """The refusal codes of the failed tasks."""
        return {str(f["refusal"]) for f in self.failures if f.get("refusal")}


class Guard(Protocol):
    """What a playbook run under a lab lease needs of it (collector.hosts.lease.Lease)."""

    host: str
    why: str
    lost: threading.Event

    @property
    def token(self) -> str: ...

    def lose(self, text: str) -> None: ...

    def fresh(self) -> float | None: ...


_guard: list[Guard] = []

#: per lease (by id): the digest of the inventory a playbook under it checked (its
#: preflight play ran and the playbook succeeded); the stages after it need not check the
#: same inventory again (``drivelab_inventory_checked``)
_checked: dict[int, str] = {}


@contextmanager
def guarded_by(guard: Guard) -> Iterator[None]:
    """While inside: every playbook gets the lease's token (``drivelab_lease_token``: its
    stages check on the DB host that it still holds the lab), and a playbook running when
    the lease is lost is stopped as Ctrl-C stops it, and fails with the reason. Stage after
    stage, each ansible-playbook is started ahead, while the one before runs
    (:mod:`collector.hosts.warmstart`)."""
    _guard.append(guard)
    try:
        with warmstart.warm_starts():
            warmstart.prepare(_env())
            yield
    finally:
        _guard.remove(guard)
        _checked.pop(id(guard), None)


@contextmanager
def _watched(proc: subprocess.Popen, guard: Guard | None) -> Iterator[None]:
    """While inside: ``proc`` is stopped (as Ctrl-C stops it) if ``guard`` is lost."""
    done = threading.Event()

    def watch() -> None:
        while guard is not None and not done.is_set():
            if guard.lost.wait(1.0):
                _stop(proc)
                return

    if guard is not None:
        threading.Thread(target=watch, name="drivelab-lease-watch", daemon=True).start()
    try:
        yield
    finally:
        done.set()


def _leased(what: str, extra_vars: dict | None) -> tuple[Guard | None, dict | None]:
    """The lease this playbook runs under, if any, and its variables with the lease's
    token (and, when it was just renewed from here, the instant: the playbook need not
    check it on the host again); a lease already lost starts nothing."""
    guard = _guard[-1] if _guard else None
    if guard is None:
        return None, extra_vars
    renewed_at = guard.fresh() if not guard.lost.is_set() else None
    if guard.lost.is_set():
        raise LeaseLost(f"{what}: not started: {guard.why}")
    extra = {**(extra_vars or {}), "drivelab_lease_token": guard.token}
    if renewed_at is not None:
        extra["drivelab_lease_renewed_at"] = renewed_at
    return guard, extra


def inventory_digest(inventory: Path | str | None) -> str:
    """sha256 of the inventory's files (a folder: every file under it; a file: it and the
    group_vars and host_vars beside it, which Ansible reads with it), by path; "" when it
    cannot be read or Ansible is pointed elsewhere (ANSIBLE_INVENTORY): the stage then
    checks it as usual."""
    if inventory is None and os.environ.get("ANSIBLE_INVENTORY"):
        return ""
    path = Path(inventory) if inventory is not None else REPO / "inventory" / "local" / "hosts.yml"
    digest = hashlib.sha256()
    try:
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file())
        else:
            beside = [path.parent / "group_vars", path.parent / "host_vars"]
            files = [path, *sorted(p for d in beside for p in d.rglob("*") if p.is_file())]
        for f in files:
            digest.update(str(f).encode() + b"\0" + f.read_bytes() + b"\0")
    except OSError:
        return ""
    return digest.hexdigest()


def _raise_if_lost(failures: tuple[dict, ...], message: str, raising: bool) -> None:
    lost = next((f for f in failures if f.get("refusal") == LEASE_LOST), None)
    if lost is not None and raising:
        raise LeaseLost(message.format(lost["msg"]), failures)


def _lease_failures(guard: Guard | None, failures: tuple[dict, ...]) -> tuple[dict, ...]:
    """The failures with the lease's reason added when it was lost during the playbook;
    a stage the host refused for it (``lease_lost``) marks the lease lost."""
    if guard is None:
        return failures
    if guard.lost.is_set():
        # stopped for it: the reason is the lease's
        failures += ({"kind": "lease", "host": guard.host, "task": "lab lease",
                      "msg": guard.why, "refusal": LEASE_LOST},)  # fmt: skip
    lost = next((f for f in failures if f.get("refusal") == LEASE_LOST), None)
    if lost is not None:
        guard.lose(lost["msg"])  # the host refused the stage: no other stage starts
    return failures


class LeaseLost(PlaybookFailed):
    """The run no longer holds the lab's lease: it stops (never goes on to another cell)."""


@dataclass(frozen=True)
class PlaybookResult:
    playbook: str
    returncode: int
    seconds: float
    log: Path
    failures: tuple[dict, ...]
    recap: dict[str, dict[str, int]]


def parse_recap(text: str) -> dict[str, dict[str, int]]:
    """{"localhost": {"ok": 29, "changed": 0, ...}} from the PLAY RECAP lines."""
    recap: dict[str, dict[str, int]] = {}
    in_recap = False
    for line in text.splitlines():
        if line.startswith("PLAY RECAP"):
            in_recap = True
            continue
        if in_recap and ":" in line:
            host, _, rest = line.partition(":")
            counts = {}
            for field in rest.split():
                key, _, val = field.partition("=")
                if val.isdigit():
                    counts[key] = int(val)
            if counts:
                recap[host.strip()] = counts
    return recap


def _stop(proc: subprocess.Popen, grace: float = 30.0) -> None:
    """SIGINT (Ansible's Ctrl-C: it ends the running tasks and exits), then SIGKILL."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _env(failures_file: Path | None = None) -> dict[str, str]:
    """ansible-playbook's environment: this process's, with drivelab's configuration."""
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", PYTHONUNBUFFERED="1"
    )
    if failures_file is not None:
        env["DRIVELAB_FAILURES"] = str(failures_file)
    return env


def _argv(
    name: str,
    tmp: Path,
    inventory: Path | str | None,
    extra_vars: dict | None,
    *,
    check: bool,
    tags: tuple[str, ...],
) -> list[str]:
    """ansible-playbook's command line (the extra variables in a file in ``tmp``)."""
    argv = [ansible_bin("ansible-playbook"), str(PLAYBOOKS / name)]
    if inventory is not None:
        argv += ["-i", str(inventory)]
    if extra_vars:
        vars_file = tmp / "vars.json"
        vars_file.write_text(json.dumps(extra_vars), encoding="utf-8")
        argv += ["-e", f"@{vars_file}"]
    if check:
        argv += ["--check", "--diff"]
    if tags:
        argv += ["--tags", ",".join(tags)]
    return argv


def run_playbook(
    name: str,
    extra_vars: dict | None = None,
    *,
    inventory: Path | str | None = None,
    stream: bool = False,
    check: bool = False,
    what: str | None = None,
    raise_on_failure: bool = True,
    tags: tuple[str, ...] = (),
) -> PlaybookResult:
    """Runs playbooks/<name> (only its plays and tasks tagged ``tags``, when given);
    raises :class:`PlaybookFailed` (one line) when it fails."""
    what = what or name.removesuffix(".yml")
    guard, extra_vars = _leased(what, extra_vars)
    digest = inventory_digest(inventory) if guard is not None else ""
    if digest and _checked.get(id(guard)) == digest:
        # an earlier stage of this run checked this very inventory (its preflight play):
        # the per-cell and per-repetition stages skip theirs (playbooks database, pgbench)
        extra_vars = {**(extra_vars or {}), "drivelab_inventory_checked": True}
    logs = results_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log = logs / f"{stamp}-{what.replace(' ', '-')}.log"
    # the playbook's variables and failures, beside its log: a controller killed mid-run
    # (SIGKILL) leaves them in its results folder, named after the log, not in /tmp
    with tempfile.TemporaryDirectory(prefix=f".{log.stem}.", dir=logs) as tmp:
        failures_file = Path(tmp) / "failures.jsonl"
        argv = _argv(name, Path(tmp), inventory, extra_vars, check=check, tags=tags)
        env = _env(failures_file)
        started = time.monotonic()
        with open(log, "w", encoding="utf-8") as out:
            out.write("$ " + " ".join(argv) + "\n")
            out.flush()
            proc = warmstart.popen(argv, env)
            if proc.stdout is None:  # pragma: no cover  (stdout=PIPE always gives one)
                raise DrivelabError(f"{what}: could not read ansible-playbook's output")
            lines = []
            with _watched(proc, guard):
                try:
                    for line in proc.stdout:
                        if line.startswith("PLAY ["):  # its playbook read: the next
                            warmstart.prepare(env)  # stage's process starts meanwhile
                        out.write(line)
                        out.flush()  # the log can be followed (tail -f) while it runs
                        lines.append(line)
                        if stream:
                            sys.stdout.write(line)
                except BaseException:
                    # the log cannot be written (a full disk) or Ctrl-C: the playbook is
                    # stopped as Ctrl-C stops it, and waited for, before its temporary
                    # folder goes (it writes its failures there) and before the error is told
                    _stop(proc)
                    raise
            proc.wait()
        seconds = time.monotonic() - started
        failures = tuple(
            json.loads(line)
            for line in (
                failures_file.read_text(encoding="utf-8").splitlines()
                if failures_file.exists()
                else []
            )
            if line.strip()
        )
    failures = _lease_failures(guard, failures)
    if digest and proc.returncode == 0:
        _checked[id(guard)] = digest
    result = PlaybookResult(
        name, proc.returncode, seconds, log, failures, parse_recap("".join(lines))
    )
    _raise_if_lost(failures, f"{what}: {{}} (log: {log})", raise_on_failure)
    if proc.returncode != 0 and raise_on_failure:
        if failures:
            first = failures[0]
            raise PlaybookFailed(f"{what}: {first['host']}: {first['msg']} (log: {log})", failures)
        raise PlaybookFailed(
            f"{what}: ansible-playbook exited {proc.returncode}: {exit_reason(lines)} (log: {log})"
        )
    return result


def exit_reason(lines: list[str]) -> str:
    """What an ansible-playbook that failed before any task (no failure recorded) said, in
    one line: its first error with the file, line and column it names (``[ERROR]:`` and
    ``Origin:``, as ansible-core prints a playbook or inventory it cannot read), else its
    last line of output."""
    text = [ln.strip() for ln in lines if ln.strip()]
    error = next((ln for ln in text if ln.startswith(("[ERROR]:", "ERROR!"))), None)
    if error is None:
        return text[-1] if text else "no output"
    at = text.index(error)
    origin = next((ln for ln in text[at + 1 : at + 4] if ln.startswith("Origin: ")), None)
    reason = error.removeprefix("[ERROR]:").removeprefix("ERROR!").strip()
    return f"{reason} ({origin.removeprefix('Origin: ')})" if origin else reason
