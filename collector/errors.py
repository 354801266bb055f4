"""The one exception type a user ever sees: a clear, one-line message, no traceback; and
how a run is stopped by a signal."""

import signal
from collections.abc import Iterator
from contextlib import contextmanager

#: Exit statuses, one per class of failure, so that a script can tell "fix your file"
#: from "retry later" from "results incomplete" (docs/collector.md, "Exit statuses").
EXIT_OK = 0
#: the run ended, but some of its runs are partial or failed: results incomplete
EXIT_INCOMPLETE = 1
#: the input is wrong: arguments, a scenario, an inventory, a drive the gate refused
EXIT_USAGE = 2
#: the lab is busy: its lease is held by someone else; retry later (or --wait)
EXIT_BUSY = 3
#: the hosts failed: a host does not answer over SSH, a playbook failed
EXIT_HOSTS = 4
#: the controller failed: the results store (disk full, damaged, unreachable), a disk full
EXIT_CONTROLLER = 5


class DrivelabError(Exception):
    """A user-facing error. ``str(err)`` is the whole message: it names the culprit
    (file, YAML path, device, host) and what is wrong with it. ``exit_status``: its
    class of failure (the ``EXIT_*`` constants); a plain one is the input's."""

    exit_status = EXIT_USAGE


class LabBusy(DrivelabError):
    """The lab's lease is held by someone else: nothing was touched; retry later."""

    exit_status = EXIT_BUSY


class HostFailure(DrivelabError):
    """A host did not answer or did not do what it was asked (SSH, Ansible)."""

    exit_status = EXIT_HOSTS


class ControllerFailure(DrivelabError):
    """The controller itself failed: its results store, its disk."""

    exit_status = EXIT_CONTROLLER


def one_line(text: str) -> str:
    """``text`` with newlines, NUL, ESC, U+2028 and other unprintable characters escaped:
    a path or argument holding them (the messages quote what was given) stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class Stopped(KeyboardInterrupt):
    """The run was told to stop by a signal (SIGTERM from a service manager or ``kill``,
    SIGHUP when its terminal went): unwound as Ctrl-C is, so every clean-up that Ctrl-C
    gets (the playbook stopped, the lease released) it gets too. The exit status is the
    shell's convention, 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.name}")

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


#: the signals that stop a run as Ctrl-C does
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stopped_by_signals() -> Iterator[None]:
    """Inside it, SIGTERM and SIGHUP raise :class:`Stopped` in the main thread; a second
    one while it unwinds is ignored, so the clean-up is not cut short (SIGKILL still
    ends it). The handlers before are put back on the way out."""
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}

    def stop(signum: int, _frame: object) -> None:
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        raise Stopped(signum)

    for s in STOP_SIGNALS:
        signal.signal(s, stop)
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
