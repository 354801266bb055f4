"""The live figures as Prometheus gauges: :data:`GAUGES` and :data:`LABELS` name
them, :class:`MetricsExporter` serves them over HTTP in a registry of its own."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector, CollectorRegistry

from collector import build
from collector.errors import DrivelabError
from collector.live.state import LATENCY_BUCKETS_S, ClientRow, RunLabels, Status

__all__ = [
    "DEFAULT_METRICS_ADDR",
    "DEFAULT_METRICS_PORT",
    "GAUGES",
    "LABELS",
    "MetricsExporter",
]

DEFAULT_METRICS_ADDR = "127.0.0.1"
DEFAULT_METRICS_PORT = 9479

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
#: seconds the server's loop waits between looks at a stop request: stop() returns
#: within it. prometheus_client's own start_http_server loops at 0.5 s, and a live
#: session stops its exporter at the end of every repetition, so that wait was dead time
#: of each (docs/scaling.md); 0.05 s costs the controller 20 wake-ups a second.
POLL_S = 0.05


class _Quiet(WSGIRequestHandler):
    """No access log line on the console for each scrape."""

    def log_message(self, format: str, *args: object) -> None:
        pass


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
        # a counter beside the gauges of rates: rate() over it is what Prometheus users
        # expect; exposed as drivelab_client_transactions_total
        transactions = CounterMetricFamily(
            "drivelab_client_transactions",
            "Transactions since pgbench started (from its progress lines: tps x interval)",
            labels=LABELS,
        )
        # from the per-transaction log, followed live: each transaction's own latency
        latency = HistogramMetricFamily(
            "drivelab_client_transaction_latency_seconds",
            "Latency of each transaction in the client's pgbench log so far",
            labels=LABELS,
        )
        for labels, row in rows:
            values = [{**labels.as_labels(), "client": row.client}[k] for k in LABELS]
            if row.transactions is not None:
                transactions.add_metric(values, row.transactions)
            if row.latency_buckets is not None:
                latency.add_metric(values, _cumulative(row.latency_buckets), row.latency_sum_s)
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
        yield transactions
        yield latency
        info = GaugeMetricFamily(
            "drivelab_build_info", "drivelab's version and commit (value 1)",
            labels=("version", "commit"),
        )  # fmt: skip
        b = build.info()
        info.add_metric([str(b["version"]), str(b["commit"] or "")], 1.0)
        yield info


def _cumulative(counts: tuple[int, ...]) -> list[tuple[str, float]]:
    """Per-bucket counts as Prometheus's cumulative ``(le, count)`` pairs, +Inf last."""
    out, total = [], 0
    for bound, n in zip((*LATENCY_BUCKETS_S, float("inf")), counts, strict=True):
        total += n
        out.append(("+Inf" if bound == float("inf") else repr(bound), float(total)))
    return out


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
        from prometheus_client import make_wsgi_app  # noqa: PLC0415
        from prometheus_client.exposition import ThreadingWSGIServer  # noqa: PLC0415

        if self._server is not None:
            return self
        try:
            # the address family the address asks for (an IPv6 address binds as one)
            family, _, _, _, sockaddr = socket.getaddrinfo(
                self.addr, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0]
            server_class = type("_Server", (ThreadingWSGIServer,), {"address_family": family})
            server = make_server(
                sockaddr[0], self.port, make_wsgi_app(self.registry), server_class, _Quiet
            )
        except OSError as err:
            raise DrivelabError(
                f"cannot serve live metrics on {self.addr}:{self.port}: {err.strerror or err}"
            ) from None
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": POLL_S},
            name="drivelab-live-metrics",
            daemon=True,
        )
        thread.start()
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
