"""Following one client over SSH (Fabric): where its pgbench stderr is
(:func:`remote_run_dir`, :class:`ClientTarget`), the remote command that streams it
(:func:`follow_command`) and the :class:`Follower` thread that feeds it, line by
line, into the client's :class:`~collector.live.state.LiveState`."""

from __future__ import annotations

import contextlib
import hashlib
import io
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import fabric
import paramiko
from paramiko.config import SSHConfig

from collector.hosts.trust import KnownHostsPolicy
from collector.live.state import LiveState
from collector.parse import ParseError
from collector.parse.pgbench import parse_rc
from collector.paths import host_default

__all__ = [
    "DEFAULT_CLIENT_DIR",
    "MARKER",
    "ClientTarget",
    "Follower",
    "follow_command",
    "remote_run_dir",
]

#: where each client's folders are (role drivelab's drivelab_client_dir)
DEFAULT_CLIENT_DIR = host_default("drivelab_client_dir")
#: the remote follower's output lines that are not pgbench's own
MARKER = "@@drivelab-live "


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
    #: pgbench's per-transaction log files to follow beside stderr (its threads, -j),
    #: for the live latency histogram; 0: none (no per-transaction log)
    txlogs: int = 0

    @property
    def rc_path(self) -> str:
        return str(PurePosixPath(self.stderr_path).with_name("rc.txt"))


#: the prefix of a per-transaction log line in the follow command's output
TX_MARKER = "@@tx "


def follow_command(
    stderr_path: str, rc_path: str, not_before: int, *, sudo: bool = False, txlogs: int = 0
) -> str:
    """The remote shell command that streams one client's pgbench stderr and ends by
    itself once ``rc.txt`` holds an exit code.

    Output: ``@@drivelab-live started`` when the stderr file appears, then the file
    from its first line (``tail -F``), then ``@@drivelab-live rc=N``. Files older than
    ``not_before`` (epoch seconds, client clock) are an earlier attempt's leftovers
    and are waited past. When the SSH channel closes, a watchdog on stdin kills the
    whole process group, so nothing is left behind on the client. ``sudo``: through
    ``sudo -n`` (a login that is not root cannot read the run folders, which are
    root's, mode 0700).

    ``txlogs``: pgbench's per-transaction log files beside stderr (``pgbench_log.*``, one
    per thread) are followed too, once that many have appeared, each line prefixed with
    ``@@tx `` (:data:`TX_MARKER`), all before the ``rc=`` line. Every line goes through
    ``sed -u``, which writes whole lines one write each, so the streams never cut into
    one another (pgbench writes its logs in 4 KiB blocks, not lines)."""
    script = f"""
f={shlex.quote(stderr_path)}; r={shlex.quote(rc_path)}; nb={int(not_before)}; n={int(txlogs)}
exec 3<&0
{{ cat <&3 >/dev/null 2>&1; kill -TERM 0; }} >/dev/null 2>&1 &
exec 3<&-
fresh() {{ [ -e "$1" ] && [ "$(stat -c %Y -- "$1" 2>/dev/null || echo 0)" -ge "$nb" ]; }}
ended() {{ fresh "$r" && grep -qs '^rc=' "$r"; }}
logs() {{ for l in "${{f%/*}}"/pgbench_log.*; do fresh "$l" && echo "$l"; done; }}
until fresh "$f" || ended; do sleep 0.2; done
echo '{MARKER}started'
( until ended; do sleep 0.2; done ) & w=$!
t=
if [ "$n" -gt 0 ]; then
  ( until [ "$(logs | wc -l)" -ge "$n" ] || ended; do sleep 0.2; done
    for l in $(logs); do
      tail -n +1 -s 0.2 -F --pid="$w" -- "$l" 2>/dev/null | sed -u 's/^/{TX_MARKER}/' &
    done
    wait ) & t=$!
fi
tail -n +1 -s 0.2 -F --pid="$w" -- "$f" 2>/dev/null | sed -u ''
wait "$w"
[ -z "$t" ] || wait "$t"
echo "{MARKER}$(grep -s '^rc=' "$r" | head -n 1)"
"""
    return ("sudo -n " if sudo else "") + f"sh -c {shlex.quote(script)}"


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
                follow_command(
                    t.stderr_path,
                    t.rc_path,
                    self.not_before,
                    sudo=t.user != "root",
                    txlogs=t.txlogs,
                ),
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
        if line.startswith(TX_MARKER):
            self.state.feed_transaction(line[len(TX_MARKER) :])
            return
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
