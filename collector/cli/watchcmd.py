"""``drivelab watch [--url URL] [--interval S] [--once]``: the live table of a run in
progress, from another terminal. It polls the run's exporter (``/metrics``, see
:mod:`collector.live`) and draws the same table the runner does.

Nothing answering at the URL is one line, ``drivelab: no drivelab run is serving live
metrics at URL: <why>``, and exit status 1 (not the 2 of a bad command line: "nothing
to watch" is an answer a script may want to tell apart)."""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING

from collector.errors import DrivelabError

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from collector.live import ClientRow, RunLabels

DEFAULT_URL = "http://127.0.0.1:9479/metrics"
#: the exporter answers from memory; anything slower than this is not one
TIMEOUT_S = 3.0


class NotServing(DrivelabError):
    """Nothing at the URL serves drivelab's live metrics."""


def fetch(url: str, timeout: float = TIMEOUT_S) -> str:
    """The exposition text at ``url``; :class:`NotServing` with the reason otherwise."""
    if not url.startswith(("http://", "https://")):
        raise DrivelabError(f"watch: --url {url!r} is not an http:// URL")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310  (checked above)
            return response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        raise NotServing(_not_serving(url, f"HTTP {err.code} {err.reason}")) from None
    except urllib.error.URLError as err:
        reason = err.reason
        why = getattr(reason, "strerror", None) or str(reason)
        raise NotServing(_not_serving(url, why.lower())) from None
    except (TimeoutError, OSError) as err:
        raise NotServing(_not_serving(url, getattr(err, "strerror", None) or str(err))) from None


def _not_serving(url: str, why: str) -> str:
    return f"no drivelab run is serving live metrics at {url}: {why}"


def parse_metrics(text: str, url: str = "<metrics>") -> list[tuple[RunLabels, ClientRow]]:
    """The clients in an exporter's exposition text, in the order they appear."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    from collector.live import GAUGES, ClientRow, RunLabels, Status  # noqa: PLC0415

    fields = {name: field for name, _, field in GAUGES}
    found: dict[tuple[str, ...], dict] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name, labels, value = sample.name, sample.labels, sample.value
                if not name.startswith("drivelab_client_") or "client" not in labels:
                    continue
                key = tuple(labels.get(k, "") for k in ("scenario", "cell", "run", "drive"))
                row = found.setdefault((*key, labels["client"]), {"client": labels["client"]})
                if name in fields:
                    row[fields[name]] = value
                elif name == "drivelab_client_transactions_total":
                    row["transactions"] = value
                elif name == "drivelab_client_up":
                    row["up"] = value == 1
                elif name == "drivelab_client_status" and value == 1:
                    row["status"] = Status(labels.get("status", "waiting"))
    except ValueError as err:
        raise NotServing(_not_serving(url, f"not Prometheus metrics ({err})")) from None
    if not found:
        raise NotServing(_not_serving(url, "it answers, but with no drivelab_client metrics"))
    out = []
    for key, row in found.items():
        row.setdefault("status", Status.WAITING)
        labels = RunLabels(scenario=key[0], cell=key[1], run=key[2], drive=key[3])
        out.append((labels, ClientRow(**row)))
    return out


def render(clients: list[tuple[RunLabels, ClientRow]], now: float) -> RenderableType:
    """One table per run (an exporter serves one run; a proxy may merge several)."""
    from rich.console import Group  # noqa: PLC0415

    from collector.live import render_table  # noqa: PLC0415

    runs: dict[RunLabels, list[ClientRow]] = {}
    for labels, row in clients:
        runs.setdefault(labels, []).append(row)
    tables = [render_table(rows, labels, now=now) for labels, rows in runs.items()]
    return tables[0] if len(tables) == 1 else Group(*tables)


def watch(
    url: str,
    interval: float,
    console: Console,
    *,
    once: bool = False,
    clock: Callable[[], float] = time.time,
) -> int:
    clients = parse_metrics(fetch(url), url)
    if once or not console.is_terminal:
        console.print(render(clients, clock()))
        return 0
    from rich.live import Live  # noqa: PLC0415

    with Live(render(clients, clock()), console=console, auto_refresh=False) as live:
        while True:
            time.sleep(interval)
            try:
                clients = parse_metrics(fetch(url), url)
            except NotServing:
                if all(row.status.final for _, row in clients):
                    live.stop()
                    console.print("the run is over: its live metrics are gone")
                    return 0
                raise
            live.update(render(clients, clock()), refresh=True)


def cmd_watch(args: argparse.Namespace) -> int:
    from rich.console import Console  # noqa: PLC0415  (keep --help fast)

    try:
        return watch(args.url, args.interval, Console(), once=args.once)
    except NotServing as err:
        print(f"drivelab: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0  # Ctrl-C is how a watch ends


def interval_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds from 0.1 to 3600")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``watch``."""
    p = sub.add_parser("watch", help="the live table of a run in progress (from its exporter)")
    p.add_argument(
        "--url",
        default=DEFAULT_URL,
        help=f"the run's live metrics (default {DEFAULT_URL}; the lab's is on 10.213.0.1)",
    )
    p.add_argument(
        "--interval", type=interval_arg, default=1.0, metavar="S", help="seconds between polls"
    )
    p.add_argument("--once", action="store_true", help="print the table once and exit")
    p.set_defaults(func=cmd_watch)
