"""When the clients started, as each one's own records say: start skew (first
transactions), launch skew, connection spread, the two-phase start's margins, and each
client's clock against the controller's. Pure: the clients' gathered records in, the
run's start facts out (docs/scaling.md says what each figure means)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from collector.records import ClientResult
from collector.runfolder import NUMBER

#: where each client's start (its first logged transaction) came from
START_SOURCES = {
    "txlog": "first transaction (per-transaction log)",
    "txlog sampled": "first sampled transaction (sampled log: an estimate)",
    "agglog": "first aggregate interval (interval-aligned)",
    "progress": "first progress interval (-P)",
}


class StartedClient(Protocol):
    """What this module reads of one gathered client."""

    @property
    def result(self) -> ClientResult: ...
    @property
    def command(self) -> Mapping[str, Any]: ...
    @property
    def start_source(self) -> str | None: ...


def _skew(starts: Mapping[str, float]) -> float | None:
    return max(starts.values()) - min(starts.values()) if starts else None


def start_facts(clients: Sequence[StartedClient], start_at: float | None) -> dict[str, Any]:
    """The run's start facts (``start_skew_s`` ... ``wake_realtime``) from its clients'
    records and the instant the controller chose (``start_at``, run.json's)."""
    starts = {c.result.client: c.result.start for c in clients if c.result.start is not None}
    sources = {c.result.client: c.start_source for c in clients if c.result.start is not None}
    kinds = set(sources.values())
    if len(kinds) == 1:
        skew_source = START_SOURCES.get(kinds.pop() or "", "unknown")
    else:
        skew_source = "mixed: " + ", ".join(
            f"{h}: {START_SOURCES.get(s or '', 'unknown')}" for h, s in sorted(sources.items())
        )
    launched = {
        c.result.client: float(c.command["launched_at"])
        for c in clients
        if isinstance(c.command.get("launched_at"), NUMBER)
    }
    # connections up: launch plus pgbench's own "initial connection time" (the mean over
    # its threads of how long their connections took to open: the server authenticates
    # each one, so a spread here is the DB host's, not drivelab's)
    connected = {
        host: launched[host] + float(c.result.report["connection_time_s"])
        for c in clients
        if (host := c.result.client) in launched
        and c.result.report.get("connection_time_kind") == "initial"
        and isinstance(c.result.report.get("connection_time_s"), NUMBER)
    }
    # the two-phase start (pgbench-at --go): when the instant was chosen (every client
    # armed), and when each client received it
    chosen = next(
        (float(c.command["chosen_at"]) for c in clients
         if isinstance(c.command.get("chosen_at"), NUMBER)),
        None,
    )  # fmt: skip
    handed = {
        c.result.client: float(c.command["go_at"])
        for c in clients
        if isinstance(c.command.get("go_at"), NUMBER) and chosen is not None
    }
    return {
        "start_skew_s": _skew(starts),
        "start_skew_source": skew_source if starts else None,
        "client_starts": starts,
        "launch_skew_s": _skew(launched),
        "launched_at": launched,
        "connect_spread_s": _skew(connected) if len(connected) == len(clients) else None,
        "connected_at": connected,
        # the margin the instant was chosen with, how long handing it to the last client
        # took, and how late after the instant the last launch came (0: none late)
        "start_lead_s": (start_at - chosen) if chosen is not None and start_at else None,
        "handover_s": (max(handed.values()) - chosen) if handed else None,
        "launch_late_s": (
            max(0.0, max(launched.values()) - start_at)
            if launched and chosen is not None and start_at
            else None
        ),
        # per client: its clock minus the controller's at the start, and the bound of that
        # measure (drivelab_start's exchange); every instant above is the controller's
        "clock_offsets": {
            c.result.client: {
                "offset_s": float(c.command["clock_offset_s"]),
                "bound_s": float(c.command.get("clock_bound_s") or 0.0),
                "measured_s": c.command.get("clock_measured_s"),
            }
            for c in clients
            if isinstance(c.command.get("clock_offset_s"), NUMBER)
        },
        # per client: whether its wrapper woke in the real-time class (None: older wrapper)
        "wake_realtime": {
            c.result.client: c.command["realtime"]
            for c in clients
            if isinstance(c.command.get("realtime"), bool)
        },
    }
