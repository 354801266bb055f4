"""The live view of a pgbench run in progress: per client, what pgbench's ``-P``
progress lines say right now, on the terminal and as Prometheus gauges.

Each client host runs pgbench through the ``pgbench-at`` wrapper, which writes
pgbench's stderr to ``<remote run dir>/stderr.txt`` and, when pgbench ends,
``rc.txt`` beside it. A :class:`Follower` per client tails that file over SSH
(Fabric) into a :class:`LiveState`; a :class:`MetricsExporter` serves every state on
``/metrics``; :func:`render_table` draws them; :class:`LiveSession` ties the three
together for the runner. ``drivelab watch`` (:mod:`collector.cli.watchcmd`) reads the
exporter from another terminal.

Best effort by design: the results come from the files Ansible fetches afterwards.
A follower that loses its connection marks its client "stream lost" and the run goes
on; nothing here raises into the runner once the session has started.

The package, one module per seam; imports go only down this list's arrows, never
back up:

- :mod:`collector.live.state`: :class:`Status`, :class:`RunLabels`,
  :class:`ClientRow` and :class:`LiveState` (one client's figures, fed line by line).
- :mod:`collector.live.follow` (-> state, and :mod:`collector.hosts.trust`: SSH trust,
  :class:`KnownHostsPolicy`, known_hosts read as OpenSSH reads it): where a client's files are
  (:func:`remote_run_dir`, :class:`ClientTarget`), the remote command
  (:func:`follow_command`) and the :class:`Follower` thread.
- :mod:`collector.live.exporter` (-> state): :data:`GAUGES`, :data:`LABELS` and the
  :class:`MetricsExporter`.
- :mod:`collector.live.table` (-> state): :func:`render_table`, :func:`status_text`.
- :mod:`collector.live.session` (-> all of the above): :class:`LiveSession`.

Every public name is re-exported here (the trust's two names too):
``from collector.live import ...`` and ``live.<name>`` work as they did when this was
one module.
"""

from collector.hosts.trust import KnownHostsPolicy, host_matches
from collector.live.exporter import (
    DEFAULT_METRICS_ADDR,
    DEFAULT_METRICS_PORT,
    GAUGES,
    LABELS,
    MetricsExporter,
)
from collector.live.follow import (
    DEFAULT_CLIENT_DIR,
    MARKER,
    ClientTarget,
    Follower,
    follow_command,
    remote_run_dir,
)
from collector.live.session import LiveSession, following
from collector.live.state import ClientRow, LiveState, RunLabels, Status
from collector.live.table import QUIET_AFTER_S, render_table, status_text

__all__ = [
    "DEFAULT_CLIENT_DIR",
    "DEFAULT_METRICS_ADDR",
    "DEFAULT_METRICS_PORT",
    "GAUGES",
    "LABELS",
    "MARKER",
    "QUIET_AFTER_S",
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
    "following",
    "host_matches",
    "remote_run_dir",
    "render_table",
    "status_text",
]
