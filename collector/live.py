"""The live view of a pgbench run in progress: per client, what pgbench's ``-P``
progress lines say right now, on the terminal and as Prometheus gauges.

Each client host runs pgbench through the ``pgbench-at`` wrapper, which writes
pgbench's stderr to ``<remote run dir>/stderr.txt`` and, when pgbench ends,
``rc.txt`` beside it. A :class:`Follower` per client tails that file over SSH
(Fabric) into a :class:`LiveState`; a :class:`MetricsExporter` serves every state on
``/metrics``; :func:`render_table` draws them; :class:`LiveSession` ties the three
together for the runner. ``drivelab watch`` (:mod:`collector.watchcmd`) reads the
exporter from another terminal.

Best effort by design: the results come from the files Ansible fetches afterwards.
A follower that loses its connection marks its client "stream lost" and the run goes
on; nothing here raises into the runner once the session has started.
"""

from __future__ import annotations

import base64
import contextlib
import fnmatch
import hashlib
import io
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

import fabric
import paramiko
from paramiko.config import SSHConfig
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from collector.errors import DrivelabError
from collector.parse import ParseError
from collector.parse.pgbench import parse_progress, parse_rc, parse_stderr

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = [
    "DEFAULT_METRICS_ADDR",
    "DEFAULT_METRICS_PORT",
    "ClientRow",
    "ClientTarget",
    "Follower",
    "KnownHostsPolicy",
    "LiveSession",
    "LiveState",
    "MetricsExporter",
    "RunLabels",
    "Status",
    "follow_command",
    "remote_run_dir",
    "render_table",
]

DEFAULT_METRICS_ADDR = "127.0.0.1"
DEFAULT_METRICS_PORT = 9479
#: where the pgbench_client role puts each client's folders (pgbench_client_dir)
DEFAULT_CLIENT_DIR = "/var/lib/drivelab-client"
#: a running client with no new line for this long is shown as quiet
QUIET_AFTER_S = 5.0
#: the remote follower's output lines that are not pgbench's own
MARKER = "@@drivelab-live "


class Status(StrEnum):
    WAITING = "waiting"  # connected (or connecting); pgbench has not started
    RUNNING = "running"
    DONE = "done"  # pgbench exited 0
    FAILED = "failed"  # pgbench exited non-zero
    LOST = "stream lost"  # the SSH stream ended before pgbench did

    @property
    def final(self) -> bool:
        return self in (Status.DONE, Status.FAILED, Status.LOST)


@dataclass(frozen=True)
class RunLabels:
    """Which run the clients belong to: the Prometheus labels besides ``client``."""

    scenario: str
    cell: str
    run: int | str  # the repetition
    drive: str

    def as_labels(self) -> dict[str, str]:
        return {
            "scenario": self.scenario,
            "cell": self.cell,
            "run": str(self.run),
            "drive": self.drive,
        }

    def title(self) -> str:
        return f"{self.scenario} / {self.cell} / rep {self.run} / {self.drive}"


def remote_run_dir(
    run_dir: Path | str, client: str, client_dir: str = DEFAULT_CLIENT_DIR
) -> PurePosixPath:
    """The client's folder for one controller run folder, as the pgbench_run role
    names it: ``<client_dir>/<client>/runs/<sha1(run_dir)[:12]>`` (Ansible's
    ``hash('sha1')`` of the path string). ``run_dir`` must be the absolute path the
    runner passes as ``pgbench_run_dir``."""
    digest = hashlib.sha1(str(run_dir).encode()).hexdigest()[:12]  # noqa: S324  (a name, not security)
    return PurePosixPath(client_dir) / client / "runs" / digest


@dataclass(frozen=True)
class ClientTarget:
    """How to reach one client host and where its pgbench stderr is."""

    name: str
    host: str
    stderr_path: str  # absolute, on the client; rc.txt is looked for beside it
    key_filename: str
    known_hosts: str
    port: int = 22
    user: str = "root"
    connect_timeout_s: float = 10.0

    @property
    def rc_path(self) -> str:
        return str(PurePosixPath(self.stderr_path).with_name("rc.txt"))


@dataclass(frozen=True)
class ClientRow:
    """One client at one instant: what the table and the gauges show. Seconds and
    transactions/second; ``None`` when not known yet."""

    client: str
    status: Status
    reason: str | None = None
    tps_now: float | None = None
    tps_average: float | None = None
    latency_s: float | None = None
    elapsed_s: float | None = None
    remaining_s: float | None = None
    updated_at: float | None = None  # controller epoch of the last line or event
    up: bool = False  # the SSH stream is open and following


class LiveState:
    """One client's live figures, fed line by line from pgbench's stderr. Thread-safe:
    a follower thread feeds it while the display and the exporter read snapshots.

    tps now and latency are the last progress line's (one interval). tps so far is
    the transactions counted from every progress line (tps times interval) over the
    elapsed time, which is pgbench's own clock: from its start to the last line. With
    ``--progress-timestamp`` the start is not printed; it is taken as one progress
    interval before the first line, when pgbench prints it."""

    def __init__(
        self,
        client: str,
        planned_s: float | None = None,
        *,
        progress_interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.planned_s = planned_s
        self.progress_interval_s = progress_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._status = Status.WAITING
        self._reason: str | None = None
        self._up = False
        self._start: float | None = None  # pgbench's t of its start
        self._last_t: float | None = None
        self._transactions = 0.0
        self._tps_now: float | None = None
        self._latency_s: float | None = None
        self._errors: list[str] = []
        self._bad_lines = 0
        self._updated_at: float | None = None

    @property
    def status(self) -> Status:
        with self._lock:
            return self._status

    @property
    def errors(self) -> tuple[str, ...]:
        """pgbench's error lines seen so far."""
        with self._lock:
            return tuple(self._errors)

    @property
    def bad_lines(self) -> int:
        """``progress:`` lines that did not parse (skipped)."""
        with self._lock:
            return self._bad_lines

    def feed(self, text: str) -> None:
        """Any amount of stderr text, whole lines."""
        for line in text.splitlines():
            self.feed_line(line)

    def feed_line(self, line: str) -> None:
        """One line of pgbench's stderr: a progress line updates the figures, an
        error line is kept for the reason, anything else is ignored."""
        line = line.rstrip("\r\n")
        if line.startswith("progress:"):
            try:
                points = parse_progress(line, f"{self.client} stderr")
            except ParseError:
                with self._lock:
                    self._bad_lines += 1
                return
            for point in points:
                self._add_point(point.t, point.tps, point.latency_avg_s, point.epoch)
            return
        errors = parse_stderr(line).errors
        if errors:
            with self._lock:
                self._errors.extend(errors)
                self._updated_at = self._clock()

    def _add_point(self, t: float, tps: float, latency_s: float, epoch: bool) -> None:
        with self._lock:
            if self._last_t is not None and t <= self._last_t:
                return  # a line seen twice (a replayed tail) counts once
            if self._start is None:
                self._start = t - self.progress_interval_s if epoch else 0.0
            previous = self._last_t if self._last_t is not None else self._start
            self._transactions += tps * (t - previous)
            self._last_t = t
            self._tps_now = tps
            self._latency_s = latency_s
            if not self._status.final:
                self._status = Status.RUNNING
            self._updated_at = self._clock()

    def mark_connected(self) -> None:
        with self._lock:
            if not self._status.final:
                self._up = True
                self._updated_at = self._clock()

    def mark_started(self) -> None:
        """pgbench's stderr file has appeared: pgbench is running."""
        with self._lock:
            if not self._status.final:
                self._status = Status.RUNNING
                self._updated_at = self._clock()

    def mark_ended(self, rc: int) -> None:
        """``rc.txt`` has appeared: done on 0, failed otherwise (with pgbench's first
        error as the reason)."""
        with self._lock:
            if self._status.final:
                return
            self._up = False
            self._updated_at = self._clock()
            if rc == 0:
                self._status = Status.DONE
                return
            self._status = Status.FAILED
            first = f": {self._errors[0]}" if self._errors else ""
            self._reason = f"pgbench exited {rc}{first}"

    def mark_lost(self, reason: str) -> None:
        """The stream ended before pgbench did; the figures so far stay."""
        with self._lock:
            if self._status.final:
                return
            self._status = Status.LOST
            self._reason = reason
            self._up = False
            self._updated_at = self._clock()

    def snapshot(self) -> ClientRow:
        with self._lock:
            elapsed = None
            if self._last_t is not None and self._start is not None:
                elapsed = self._last_t - self._start
            remaining = None
            if self._status in (Status.DONE, Status.FAILED):
                remaining = 0.0
            elif self.planned_s is not None:
                remaining = max(0.0, self.planned_s - (elapsed or 0.0))
            average = self._transactions / elapsed if elapsed else None
            return ClientRow(
                client=self.client,
                status=self._status,
                reason=self._reason,
                tps_now=self._tps_now,
                tps_average=average,
                latency_s=self._latency_s,
                elapsed_s=elapsed,
                remaining_s=remaining,
                updated_at=self._updated_at,
                up=self._up and not self._status.final,
            )


# --- following a client over SSH -------------------------------------------------


class KnownHostsPolicy(paramiko.MissingHostKeyPolicy):
    """Accepts a server only if an OpenSSH ``known_hosts`` file lists its key.

    Paramiko's own ``load_host_keys`` matches names literally, so the lab's
    ``10.213.0.* ssh-ed25519 ...`` line would reject every client. This reads the file
    the way OpenSSH does: comma-separated patterns with ``*`` and ``?``, ``!``
    negation, hashed names (``|1|salt|hash``), ``[host]:port`` for ports other than 22
    (paramiko asks with that form), ``@revoked`` keys refused wherever their line is
    (revocation is checked first, over the whole file), ``@cert-authority`` lines
    skipped. Everything else is refused with a one-line reason."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def missing_host_key(self, client, hostname: str, key: paramiko.PKey) -> None:
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError as err:
            raise paramiko.SSHException(
                f"cannot read known_hosts {self.path}: {err.strerror or err}"
            ) from None
        blob = key.asbytes()
        # (marker, same key) for every line whose names match, in file order
        entries: list[tuple[str | None, bool]] = []
        for line in text.splitlines():
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            marker = fields.pop(0) if fields[0].startswith("@") else None
            if len(fields) < 3 or marker == "@cert-authority":
                continue
            if not host_matches(hostname, fields[0]):
                continue
            try:
                same = base64.b64decode(fields[2], validate=True) == blob
            except ValueError:
                continue
            entries.append((marker, same))
        # as OpenSSH does: a revoked key is refused wherever its line is in the file
        if ("@revoked", True) in entries:
            raise paramiko.SSHException(f"host key of {hostname} is marked @revoked in {self.path}")
        plain = [same for marker, same in entries if marker != "@revoked"]
        if any(plain):
            return
        if plain:
            raise paramiko.SSHException(
                f"host key of {hostname} ({key.get_name()}) does not match {self.path}"
            )
        raise paramiko.SSHException(
            f"{hostname} is not in {self.path}: refusing its unknown {key.get_name()} key"
        )


def host_matches(name: str, patterns: str) -> bool:
    """OpenSSH's ``match_hostname``: ``name`` against a known_hosts pattern list."""
    positive = False
    for item in patterns.split(","):
        negate = item.startswith("!")
        pattern = item.removeprefix("!")
        if pattern.startswith("|1|"):
            hit = paramiko.HostKeys.hash_host(name, pattern) == pattern
        else:
            # fnmatch's [...] classes are not OpenSSH's; escape them, keep * and ?
            escaped = pattern.lower().replace("[", "[[]")
            hit = fnmatch.fnmatchcase(name.lower(), escaped)
        if hit and negate:
            return False
        positive = positive or hit
    return positive


def follow_command(stderr_path: str, rc_path: str, not_before: int) -> str:
    """The remote shell command that streams one client's pgbench stderr and ends by
    itself once ``rc.txt`` holds an exit code.

    Output: ``@@drivelab-live started`` when the stderr file appears, then the file
    from its first line (``tail -F``), then ``@@drivelab-live rc=N``. Files older than
    ``not_before`` (epoch seconds, client clock) are an earlier attempt's leftovers
    and are waited past. When the SSH channel closes, a watchdog on stdin kills the
    whole process group, so nothing is left behind on the client."""
    script = f"""
f={shlex.quote(stderr_path)}; r={shlex.quote(rc_path)}; nb={int(not_before)}
exec 3<&0
{{ cat <&3 >/dev/null 2>&1; kill -TERM 0; }} >/dev/null 2>&1 &
exec 3<&-
fresh() {{ [ -e "$1" ] && [ "$(stat -c %Y -- "$1" 2>/dev/null || echo 0)" -ge "$nb" ]; }}
ended() {{ fresh "$r" && grep -qs '^rc=' "$r"; }}
until fresh "$f" || ended; do sleep 0.2; done
echo '{MARKER}started'
( until ended; do sleep 0.2; done ) & w=$!
tail -n +1 -s 0.2 -F --pid="$w" -- "$f" 2>/dev/null
wait "$w"
echo "{MARKER}$(grep -s '^rc=' "$r" | head -n 1)"
"""
    return f"sh -c {shlex.quote(script)}"


class _LineSink(io.TextIOBase):
    """A write-only text stream that hands complete lines to ``on_line``."""

    def __init__(self, on_line: Callable[[str], None], keep: int = 0) -> None:
        self._on_line = on_line
        self._partial = ""
        self.kept: list[str] = []
        self._keep = keep

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        data = self._partial + text
        *lines, self._partial = data.split("\n")
        for line in lines:
            self._take(line)
        return len(text)

    def _take(self, line: str) -> None:
        if self._keep:
            self.kept = [*self.kept[-(self._keep - 1) :], line]
        self._on_line(line)

    def finish(self) -> None:
        if self._partial:
            line, self._partial = self._partial, ""
            self._take(line)


class _OnceConnection(fabric.Connection):
    """Opens once. Fabric's ``run()`` opens a closed connection again, which would
    undo a ``stop()`` that lands between ``open()`` and ``run()``."""

    _closed_for_good = False

    def open(self):
        if self._closed_for_good:
            raise paramiko.SSHException("connection closed: the live view is stopping")
        return super().open()

    def close(self) -> None:
        self._closed_for_good = True
        super().close()


def _why(err: BaseException) -> str:
    text = str(err).strip()
    if isinstance(err, TimeoutError | OSError) and getattr(err, "strerror", None):
        text = err.strerror or text
    return text or type(err).__name__


class Follower:
    """Streams one client's pgbench stderr into its :class:`LiveState`, in a thread.

    ``start()`` returns at once; ``stop()`` closes the SSH connection (which ends the
    remote command) and joins the thread. No exception leaves the thread: a connection
    that cannot be made, or breaks, marks the client "stream lost" with the reason."""

    def __init__(
        self,
        target: ClientTarget,
        state: LiveState,
        *,
        not_before: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.target = target
        self.state = state
        # a file last written before this is an earlier attempt's (2 s of clock slack)
        self.not_before = int((not_before if not_before is not None else clock()) - 2)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conn: fabric.Connection | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"drivelab-live-{target.name}", daemon=True
        )

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def connection(self) -> fabric.Connection | None:
        """The open Fabric connection, while there is one (tests use it)."""
        return self._conn

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            conn = self._conn
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _connect(self) -> fabric.Connection:
        t = self.target
        # lazy + an empty SSHConfig: no ~/.ssh/config, /etc/fabric.yml or env surprises
        config = fabric.Config(lazy=True, ssh_config=SSHConfig())
        conn = _OnceConnection(
            t.host,
            user=t.user,
            port=t.port,
            config=config,
            connect_timeout=max(1, round(t.connect_timeout_s)),
            connect_kwargs={
                "key_filename": [t.key_filename],
                "look_for_keys": False,
                "allow_agent": False,
                "banner_timeout": t.connect_timeout_s,
                "auth_timeout": t.connect_timeout_s,
            },
        )
        conn.client.set_missing_host_key_policy(KnownHostsPolicy(t.known_hosts))
        return conn

    def _run(self) -> None:
        t = self.target
        where = f"{t.user}@{t.host}:{t.port}"
        try:
            conn = self._connect()
            with self._lock:
                self._conn = conn
            if self._stop.is_set():
                return
            conn.open()
        except Exception as err:  # best effort: any failure is a reason
            if not self._stop.is_set():
                self.state.mark_lost(f"cannot connect to {where}: {_why(err)}")
            self._close()
            return
        if self._stop.is_set():
            self._close()
            return
        self.state.mark_connected()
        out = _LineSink(self._on_line)
        err_sink = _LineSink(lambda _line: None, keep=3)
        exited: int | None = None
        problem: str | None = None
        try:
            result = conn.run(
                follow_command(t.stderr_path, t.rc_path, self.not_before),
                hide=False,
                warn=True,
                pty=False,
                in_stream=False,
                out_stream=out,
                err_stream=err_sink,
                encoding="utf-8",
            )
            exited = result.exited
        except Exception as err:
            problem = _why(err)
        finally:
            out.finish()
            err_sink.finish()
            self._close()
        if self.state.status.final:
            return
        if self._stop.is_set():
            self.state.mark_lost("live view stopped before pgbench ended")
            return
        if problem is None:
            problem = f"connection to {where} closed before pgbench ended"
            if exited not in (None, -1):
                problem += f" (remote follower exited {exited})"
        if err_sink.kept:
            problem += f": {' | '.join(err_sink.kept)}"
        self.state.mark_lost(problem)

    def _close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _on_line(self, line: str) -> None:
        if not line.startswith(MARKER):
            self.state.feed_line(line)
            return
        what = line.removeprefix(MARKER).strip()
        if what == "started":
            self.state.mark_started()
            return
        try:
            rc = parse_rc(what, f"{self.target.name}:{self.target.rc_path}")
        except ParseError as err:
            self.state.mark_lost(str(err))
            return
        self.state.mark_ended(rc)


# --- Prometheus -------------------------------------------------------------------

#: (metric, help, ClientRow field); values in base units
GAUGES = (
    ("drivelab_client_tps", "Transactions per second in the last progress interval", "tps_now"),
    (
        "drivelab_client_tps_average",
        "Transactions per second since pgbench started",
        "tps_average",
    ),
    ("drivelab_client_latency_seconds", "Average latency in the last interval", "latency_s"),
    ("drivelab_client_elapsed_seconds", "Seconds since pgbench started", "elapsed_s"),
    ("drivelab_client_remaining_seconds", "Planned seconds left", "remaining_s"),
    (
        "drivelab_client_last_update_timestamp_seconds",
        "When the controller last heard from the client (epoch)",
        "updated_at",
    ),
)
LABELS = ("scenario", "cell", "run", "client", "drive")


class _LiveCollector(Collector):
    def __init__(self, source: Callable[[], Iterable[tuple[RunLabels, ClientRow]]]) -> None:
        self._source = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rows = list(self._source())
        families = {
            name: GaugeMetricFamily(name, help_, labels=LABELS) for name, help_, _ in GAUGES
        }
        up = GaugeMetricFamily(
            "drivelab_client_up", "1 while the client's stream is open, else 0", labels=LABELS
        )
        status = GaugeMetricFamily(
            "drivelab_client_status",
            "1 for the client's current status, 0 for the others",
            labels=(*LABELS, "status"),
        )
        for labels, row in rows:
            values = [{**labels.as_labels(), "client": row.client}[k] for k in LABELS]
            for name, _, field in GAUGES:
                value = getattr(row, field)
                if value is not None:  # unknown is absent, never 0
                    families[name].add_metric(values, value)
            up.add_metric(values, 1.0 if row.up else 0.0)
            for s in Status:
                status.add_metric([*values, s.value], 1.0 if row.status is s else 0.0)
        yield from families.values()
        yield up
        yield status


class MetricsExporter:
    """Serves the live gauges over HTTP, in their own registry (never the global one).
    ``port=0`` takes a free port; ``port`` then tells which. ``stop()`` shuts the server
    down, closes its socket and joins its thread."""

    def __init__(
        self,
        source: Callable[[], Iterable[tuple[RunLabels, ClientRow]]],
        addr: str = DEFAULT_METRICS_ADDR,
        port: int = DEFAULT_METRICS_PORT,
    ) -> None:
        self.addr = addr
        self.port = port
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_LiveCollector(source))
        self._server = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> MetricsExporter:
        from prometheus_client import start_http_server  # noqa: PLC0415

        if self._server is not None:
            return self
        try:
            server, thread = start_http_server(self.port, self.addr, registry=self.registry)
        except OSError as err:
            raise DrivelabError(
                f"cannot serve live metrics on {self.addr}:{self.port}: {err.strerror or err}"
            ) from None
        self._server, self._thread = server, thread
        self.port = server.server_port
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server, self._thread = None, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(5)

    def __enter__(self) -> MetricsExporter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- the terminal table -----------------------------------------------------------


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _clock_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"


def status_text(row: ClientRow, now: float) -> str:
    """The status cell: a running client that has gone quiet says for how long."""
    if row.status is Status.RUNNING and row.updated_at is not None:
        quiet = now - row.updated_at
        if quiet >= QUIET_AFTER_S:
            return f"running, quiet {quiet:.0f} s"
    return row.status.value


_STYLES = {
    Status.WAITING: "dim",
    Status.RUNNING: "green",
    Status.DONE: "bold green",
    Status.FAILED: "bold red",
    Status.LOST: "yellow",
}


def render_table(
    rows: Sequence[ClientRow], labels: RunLabels | None = None, *, now: float | None = None
) -> Table:
    """One row per client: status, tps now, tps so far, latency (ms), elapsed /
    remaining. The caption sums tps over the clients and gives every reason."""
    from rich.table import Table  # noqa: PLC0415

    now = time.time() if now is None else now
    table = Table(title=labels.title() if labels else None, title_justify="left")
    table.add_column("client")
    table.add_column("status")
    table.add_column("tps now", justify="right")
    table.add_column("tps so far", justify="right")
    table.add_column("latency ms", justify="right")
    table.add_column("elapsed / remaining", justify="right")
    for row in rows:
        table.add_row(
            row.client,
            f"[{_STYLES[row.status]}]{status_text(row, now)}[/]",
            _num(row.tps_now, ",.1f"),
            _num(row.tps_average, ",.1f"),
            _num(None if row.latency_s is None else row.latency_s * 1e3, ",.3f"),
            f"{_clock_time(row.elapsed_s)} / {_clock_time(row.remaining_s)}",
        )
    notes = []
    now_sum = [r.tps_now for r in rows if r.tps_now is not None and r.status is Status.RUNNING]
    avg_sum = [r.tps_average for r in rows if r.tps_average is not None]
    if now_sum or avg_sum:
        notes.append(f"all clients: {sum(now_sum):,.1f} tps now, {sum(avg_sum):,.1f} tps so far")
    notes += [f"{r.client}: {r.reason}" for r in rows if r.reason]
    if notes:
        table.caption = "\n".join(notes)
        table.caption_justify = "left"
    return table


# --- the session ------------------------------------------------------------------


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
