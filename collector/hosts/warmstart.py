"""ansible-playbook started ahead of its stage: the next stage's process is already running
and has imported Ansible when the stage asks for it.

Before its first task an ``ansible-playbook`` imports Ansible (the same modules every
time, a good part of that time), then reads its configuration, inventory and
playbook. ``drivelab run`` starts a stage after a stage (a scenario of 2 cells: 5, and
one per repetition more), so while one stage runs, a spare process (this module run as
``python -m collector.hosts.warmstart``) imports Ansible at a lower priority and waits on its
stdin. The next stage hands it its command line and its own variables (one line of JSON)
and it becomes that ``ansible-playbook``: the same process the runner reads, stops and
waits for as before, reaching its first play sooner than a new process would
(docs/scaling.md, "Why the hot path is shaped as it is").

A spare is used only when the stage's environment is the one it was started with (Ansible
reads its configuration when imported); otherwise it is ended and the stage starts a
process of its own. Spares are made only inside :func:`warm_starts` (``drivelab run``'s
lease holds it); one left idle exits when its stdin closes, at the latest when the process
that made it ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from collector.paths import REPO

#: a stage's own variable, not part of what a spare must match
PER_STAGE = ("DRIVELAB_FAILURES",)
#: how much lower than its maker a spare runs while it imports (root only: only root may
#: raise its priority back when it is handed a stage)
NICE_WHILE_IDLE = 10

_lock = threading.Lock()
_state: dict = {"depth": 0, "spare": None}


class _Spare:
    """One idle ``python -m collector.hosts.warmstart``, and the environment it was started with."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "collector.hosts.warmstart"],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def hand(self, argv: list[str], env: dict[str, str]) -> bool:
        """Gives it the stage; False when it is gone or cannot take it."""
        if self.proc.poll() is not None or self.proc.stdin is None:
            return False
        own = {k: env[k] for k in PER_STAGE if k in env}
        try:
            self.proc.stdin.write(json.dumps({"argv": argv, "env": own}) + "\n")
            self.proc.stdin.close()
        except OSError:  # it ended meanwhile (a Ctrl-C)
            self.end()
            return False
        return True

    def end(self) -> None:
        """Ends it, as an idle spare ends: its stdin closed; killed if it does not exit."""
        try:
            if self.proc.stdin is not None and not self.proc.stdin.closed:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _base(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in PER_STAGE}


@contextmanager
def warm_starts() -> Iterator[None]:
    """While inside: :func:`prepare` makes spares; the last one is ended on the way out."""
    with _lock:
        _state["depth"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            spare = _state["spare"] if _state["depth"] == 0 else None
            if spare is not None:
                _state["spare"] = None
        if spare is not None:
            spare.end()


def prepare(env: dict[str, str]) -> None:
    """Inside :func:`warm_starts`: a spare for a stage with this environment, unless one
    is ready already (so that the first stage of a run need not wait for Ansible either)."""
    with _lock:
        if _state["depth"] == 0 or _state["spare"] is not None:
            return
        _state["spare"] = _Spare(_base(env))


def popen(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    """``ansible-playbook`` (``argv``) with ``env`` in the repository, its output (stderr
    with it) on a pipe: a spare when one with this environment is ready, else a new
    process. The caller makes the next spare (:func:`prepare`) once this one has read its
    playbook: its own start, the CPU-bound part of a stage, is not slowed by it."""
    base = _base(env)
    with _lock:
        spare, _state["spare"] = _state["spare"], None
    proc = None
    if spare is not None:
        if spare.env == base and Path(argv[0]).parent == Path(sys.executable).parent:
            if spare.hand(argv, env):
                proc = spare.proc
        else:
            spare.end()
    if proc is None:
        proc = subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    return proc


def main() -> int:
    """The spare: Ansible imported, then the stage's command line from stdin, run."""
    prio = os.getpriority(os.PRIO_PROCESS, 0)
    niced = os.geteuid() == 0
    try:
        if niced:
            os.setpriority(os.PRIO_PROCESS, 0, min(prio + NICE_WHILE_IDLE, 19))
        from ansible.cli.playbook import main as playbook  # noqa: PLC0415

        line = sys.stdin.readline()
        if not line:
            return 0  # not needed: the run ended, or its environment changed
        request = json.loads(line)
        # as a process of its own would be: no stdin of the runner's, its priority
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        if niced:
            os.setpriority(os.PRIO_PROCESS, 0, prio)
    except KeyboardInterrupt:  # a Ctrl-C at the terminal reaches it with its maker
        return 130
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    return playbook()


if __name__ == "__main__":
    sys.exit(main())
