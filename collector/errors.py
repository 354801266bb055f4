"""The one exception type a user ever sees: a clear, one-line message, no traceback; and
how a run is stopped by a signal."""

import signal
from collections.abc import Iterator
from contextlib import contextmanager


class DrivelabError(Exception):
    """A user-facing error. ``str(err)`` is the whole message: it names the culprit
    (file, YAML path, device, host) and what is wrong with it."""


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
