"""The live view of one run, for the runner: :class:`LiveSession` starts the
exporter, one follower per client and the terminal table together, and stops all
three however the run ends."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

from collector.errors import DrivelabError
from collector.live.exporter import DEFAULT_METRICS_ADDR, DEFAULT_METRICS_PORT, MetricsExporter
from collector.live.follow import ClientTarget, Follower
from collector.live.state import ClientRow, LiveState, RunLabels
from collector.live.table import render_table

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = ["LiveSession", "following"]


class _FollowerLike(Protocol):
    def start(self) -> None: ...
    def stop(self, timeout: float = 5.0) -> None: ...
    def join(self, timeout: float | None = None) -> bool: ...


class LiveSession:
    """The live view of one run, for the runner: ``with LiveSession(...) as live:``
    around the pgbench playbook. On entry it starts the exporter, one follower per
    client and, when the console is a terminal (or ``display=True``), a
    ``rich.live.Live`` table; on exit, even after an exception, it stops all three.

    Start it *before* the playbook's launch (its not-before time is taken on entry, so
    an earlier attempt's leftover files on the clients are ignored). Best effort: a
    metrics port that cannot be bound is one warning line on the console and the
    session goes on without the exporter (``exporter_error`` says why)."""

    def __init__(
        self,
        targets: Sequence[ClientTarget],
        labels: RunLabels,
        planned_s: float | None,
        *,
        metrics_addr: str = DEFAULT_METRICS_ADDR,
        metrics_port: int | None = DEFAULT_METRICS_PORT,
        console: Console | None = None,
        display: bool | None = None,
        refresh_per_second: float = 2.0,
        progress_interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        follower: Callable[[ClientTarget, LiveState], _FollowerLike] | None = None,
    ) -> None:
        names = [t.name for t in targets]
        if len(set(names)) != len(names):
            raise DrivelabError(f"live view: client names repeat: {', '.join(names)}")
        self.targets = tuple(targets)
        self.labels = labels
        self.clock = clock
        self.states = {
            t.name: LiveState(
                t.name, planned_s, progress_interval_s=progress_interval_s, clock=clock
            )
            for t in targets
        }
        self.exporter = (
            MetricsExporter(self._labelled_rows, metrics_addr, metrics_port)
            if metrics_port is not None
            else None
        )
        self.exporter_error: str | None = None
        self._console = console
        self._display = display
        self._refresh = refresh_per_second
        self._make_follower = follower
        self._followers: list[_FollowerLike] = []
        self._live = None

    def rows(self) -> list[ClientRow]:
        return [self.states[t.name].snapshot() for t in self.targets]

    def _labelled_rows(self) -> list[tuple[RunLabels, ClientRow]]:
        return [(self.labels, row) for row in self.rows()]

    def table(self) -> Table:
        return render_table(self.rows(), self.labels, now=self.clock())

    @property
    def metrics_url(self) -> str | None:
        return self.exporter.url if self.exporter and self.exporter.running else None

    def __enter__(self) -> LiveSession:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        from rich.console import Console  # noqa: PLC0415

        console = self._console or Console()
        if self.exporter is not None:
            try:
                self.exporter.start()
            except DrivelabError as err:
                self.exporter_error = str(err)
                console.print(f"[yellow]live view: {err}; going on without it[/]")
        not_before = self.clock()
        for target in self.targets:
            state = self.states[target.name]
            if self._make_follower is not None:
                follower = self._make_follower(target, state)
            else:
                follower = Follower(target, state, not_before=not_before, clock=self.clock)
            self._followers.append(follower)
            follower.start()
        show = console.is_terminal if self._display is None else self._display
        if show:
            from rich.live import Live  # noqa: PLC0415

            self._live = Live(
                console=console,
                get_renderable=self.table,
                refresh_per_second=self._refresh,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()

    def wait(self, timeout: float) -> bool:
        """Waits until every follower has ended (each client done, failed or lost), at
        most ``timeout`` seconds; True if they all have."""
        deadline = time.monotonic() + timeout
        return all(f.join(max(0.0, deadline - time.monotonic())) for f in self._followers)

    def close(self) -> None:
        """Stops the display, the followers and the exporter; safe to call twice."""
        live, self._live = self._live, None
        try:
            if live is not None:
                live.stop()
        finally:
            try:
                for follower in self._followers:  # all at once: each closes its connection
                    with contextlib.suppress(Exception):
                        follower.stop(timeout=0)
                deadline = time.monotonic() + 5.0
                for follower in self._followers:
                    follower.join(max(0.0, deadline - time.monotonic()))
            finally:
                if self.exporter is not None:
                    self.exporter.stop()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@contextlib.contextmanager
def following(
    targets: Sequence[ClientTarget], labels: RunLabels, planned_s: float | None, **kwargs
) -> Iterator[LiveSession]:
    """A :class:`LiveSession` around the body (the run's playbook), which then waits up
    to 5 s for the followers to read the clients' last lines before it stops them."""
    with LiveSession(targets, labels, planned_s, **kwargs) as session:
        yield session
        session.wait(timeout=5)
