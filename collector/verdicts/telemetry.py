"""Telemetry of a run, read back from Prometheus: why a drive was slow.

Every lab host runs node_exporter; a Prometheus server scrapes them every second
(drivelab's own, started by ``playbooks/telemetry.yml``, or the operator's). After a
run, :func:`run_telemetry` asks Prometheus for the run's window, one point per second,
and returns :class:`~collector.records.Sample` records ready for
``Store.add_samples`` or ``RunRecord.samples``:

=================================================  ==================  ==================
metric                                             unit                labels
=================================================  ==================  ==================
``drivelab_device_read_iops``                      operations/second   host, device
``drivelab_device_write_iops``                     operations/second   host, device
``drivelab_device_read_bytes_per_second``          bytes/second        host, device
``drivelab_device_write_bytes_per_second``         bytes/second        host, device
``drivelab_device_read_await_seconds``             seconds             host, device
``drivelab_device_write_await_seconds``            seconds             host, device
``drivelab_device_util_ratio``                     ratio               host, device
``drivelab_cpu_mode_ratio``                        ratio               host, mode
``drivelab_cpu_busy_ratio``                        ratio               host
=================================================  ==================  ==================

The await figures are the mean time a completed I/O took in that second (queue and
service), as ``iostat``'s r_await/w_await; a second with no completed I/O has no
await point rather than a zero. Utilisation is the share of the second the device
had I/O in flight, capped at 1 (scrape jitter can push the raw figure a little
over). The DB host's CPU is split by mode (user, system, iowait) as a ratio of the
whole machine (averaged over its CPUs); a client's CPU is one busy ratio,
1 - (idle + iowait): waiting on I/O is not work a client does, and in the local lab
the DB host's iowait shows on every host (one kernel).

The HTTP side is :class:`Prometheus` (stdlib ``urllib`` only): ``query``,
``query_range`` and ``targets``. Any failure (unreachable, HTTP error, not JSON,
``status: error``) is a one-line :class:`DrivelabError` naming the URL.
:func:`parse_response` and :func:`parse_matrix` are the pure halves, tested on a
captured response.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from collector.errors import DrivelabError
from collector.records import Sample

DEVICE_PREFIX = "drivelab_device_"
CPU_PREFIX = "drivelab_cpu_"
CPU_BUSY = "drivelab_cpu_busy_ratio"
CPU_MODE = "drivelab_cpu_mode_ratio"
#: CPU modes reported for the DB host
DB_CPU_MODES = ("user", "system", "iowait")
#: a client whose mean CPU busy ratio is above this measured itself, not the drive
CLIENT_BOUND_THRESHOLD = 0.9
#: Prometheus refuses a range query of more than 11,000 points per series
MAX_POINTS = 10_000
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

# (metric, unit, PromQL over {sel} with {w} the rate window); one query per figure
# covers every candidate device of the DB host at once
_DEVICE_QUERIES: tuple[tuple[str, str, str], ...] = (
    ("read_iops", "operations/second", "{f}(node_disk_reads_completed_total{{{sel}}}[{w}])"),
    ("write_iops", "operations/second", "{f}(node_disk_writes_completed_total{{{sel}}}[{w}])"),
    ("read_bytes_per_second", "bytes/second", "{f}(node_disk_read_bytes_total{{{sel}}}[{w}])"),
    (
        "write_bytes_per_second",
        "bytes/second",
        "{f}(node_disk_written_bytes_total{{{sel}}}[{w}])",
    ),
    (
        "read_await_seconds",
        "seconds",
        "{f}(node_disk_read_time_seconds_total{{{sel}}}[{w}])"
        " / ({f}(node_disk_reads_completed_total{{{sel}}}[{w}]) > 0)",
    ),
    (
        "write_await_seconds",
        "seconds",
        "{f}(node_disk_write_time_seconds_total{{{sel}}}[{w}])"
        " / ({f}(node_disk_writes_completed_total{{{sel}}}[{w}]) > 0)",
    ),
    (
        "util_ratio",
        "ratio",
        "clamp_max({f}(node_disk_io_time_seconds_total{{{sel}}}[{w}]), 1)",
    ),
)


@dataclass(frozen=True)
class Series:
    """One series of a range query: its labels and its ``(epoch, value)`` points,
    non-finite values (``NaN``, ``+Inf``) left out."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Target:
    """One active scrape target of ``/api/v1/targets``."""

    scrape_url: str
    health: str
    labels: Mapping[str, str] = field(default_factory=dict)
    last_error: str = ""
    last_scrape: str = ""

    @property
    def up(self) -> bool:
        return self.health == "up"


# --------------------------------------------------------------------------- parsing


def parse_response(text: str | bytes, url: str) -> Any:
    """The ``data`` member of a Prometheus API response, or a one-line
    :class:`DrivelabError` naming ``url`` (not JSON, ``status`` not ``success``)."""
    try:
        doc = json.loads(text)
    except ValueError as err:
        raise DrivelabError(f"Prometheus {url}: not a JSON answer ({err})") from None
    if not isinstance(doc, dict) or "status" not in doc:
        raise DrivelabError(f"Prometheus {url}: not a Prometheus API answer")
    if doc["status"] != "success":
        what = doc.get("errorType") or "error"
        raise DrivelabError(f"Prometheus {url}: {what}: {_one_line(doc.get('error', ''))}")
    return doc.get("data")


def parse_matrix(data: Any, url: str = "query_range") -> list[Series]:
    """The series of a ``resultType: matrix`` (range query) or ``vector`` (instant
    query) answer; values are floats, non-finite ones dropped."""
    if not isinstance(data, dict) or data.get("resultType") not in ("matrix", "vector"):
        kind = data.get("resultType") if isinstance(data, dict) else type(data).__name__
        raise DrivelabError(f"Prometheus {url}: expected a matrix or vector, got {kind}")
    out = []
    for item in data.get("result") or []:
        try:
            raw = item["values"] if "values" in item else [item["value"]]
            points = tuple((float(t), float(v)) for t, v in raw)
            labels = {str(k): str(v) for k, v in item.get("metric", {}).items()}
        except (KeyError, TypeError, ValueError) as err:
            raise DrivelabError(f"Prometheus {url}: malformed series ({err!r})") from None
        out.append(Series(labels, tuple(p for p in points if math.isfinite(p[1]))))
    return out


def parse_targets(data: Any, url: str = "targets") -> list[Target]:
    """The active targets of a ``/api/v1/targets`` answer."""
    if not isinstance(data, dict):
        raise DrivelabError(f"Prometheus {url}: no targets in the answer")
    return [
        Target(
            scrape_url=str(t.get("scrapeUrl", "")),
            health=str(t.get("health", "unknown")),
            labels={str(k): str(v) for k, v in (t.get("labels") or {}).items()},
            last_error=_one_line(str(t.get("lastError") or "")),
            last_scrape=str(t.get("lastScrape", "")),
        )
        for t in data.get("activeTargets") or []
    ]


def hosts_not_up(targets: Iterable[Target], hosts: Iterable[str]) -> list[str]:
    """Those of ``hosts`` (inventory names) without a ``node`` target (node_exporter,
    labelled ``drivelab_host``) that Prometheus last scraped successfully."""
    up = {t.labels.get("drivelab_host") for t in targets if t.labels.get("job") == "node" and t.up}
    return [h for h in hosts if h not in up]


def _api_error(body: bytes) -> str | None:
    """``errorType: error`` of an error answer's JSON body, if it is one."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict) or "error" not in doc:
        return None
    return f"{doc.get('errorType') or 'error'}: {_one_line(doc['error'])}"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# --------------------------------------------------------------------------- HTTP


class Prometheus:
    """A small client of Prometheus's HTTP API (``/api/v1/...``), stdlib only."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise DrivelabError(f"Prometheus URL {url!r}: write http://HOST:PORT")
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        endpoint = f"{self.url}{path}"
        full = endpoint + ("?" + urllib.parse.urlencode(params) if params else "")
        try:
            with urllib.request.urlopen(full, timeout=self.timeout) as resp:  # noqa: S310  # http(s) checked in __init__
                body = resp.read()
        except urllib.error.HTTPError as err:
            # Prometheus answers 400/422/503 with a JSON body that says why
            why = _api_error(err.read())
            raise DrivelabError(
                f"Prometheus {endpoint}: HTTP {err.code} {why or err.reason}"
            ) from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise DrivelabError(f"Prometheus {endpoint}: unreachable ({reason})") from None
        return parse_response(body, endpoint)

    def query(self, promql: str, at: float | None = None) -> list[Series]:
        """An instant query; each series holds one point."""
        params: dict[str, Any] = {"query": promql}
        if at is not None:
            params["time"] = _fmt(at)
        return parse_matrix(self._get("/api/v1/query", params), f"{self.url}/api/v1/query")

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[Series]:
        """A range query from ``start`` to ``end`` (epoch seconds) every ``step``
        seconds. Windows longer than :data:`MAX_POINTS` steps are asked for in pieces
        and joined, so a long run is not refused."""
        if step <= 0:
            raise DrivelabError(f"Prometheus query step {step}: must be positive")
        if end < start:
            raise DrivelabError(f"Prometheus query window {start}..{end}: ends before it starts")
        merged: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = defaultdict(list)
        order: list[tuple[tuple[str, str], ...]] = []
        t = start
        while t <= end:
            t_end = min(end, t + step * (MAX_POINTS - 1))
            data = self._get(
                "/api/v1/query_range",
                {"query": promql, "start": _fmt(t), "end": _fmt(t_end), "step": _fmt(step)},
            )
            for s in parse_matrix(data, f"{self.url}/api/v1/query_range"):
                key = tuple(sorted(s.labels.items()))
                if key not in merged:
                    order.append(key)
                merged[key].extend(s.points)
            t = t_end + step
        return [Series(dict(k), tuple(sorted(set(merged[k])))) for k in order]

    def targets(self) -> list[Target]:
        """The active scrape targets and their health."""
        return parse_targets(
            self._get("/api/v1/targets", {"state": "active"}), f"{self.url}/api/v1/targets"
        )


def _fmt(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".")


# --------------------------------------------------------------------------- PromQL


def label_value(value: str) -> str:
    """``value`` as a PromQL double-quoted string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def label_regex(values: Iterable[str]) -> str:
    """A PromQL string literal of a regex matching exactly one of ``values``."""
    return label_value("|".join(re.escape(v) for v in values))


def rate_expr(step: float, scrape_interval: float) -> tuple[str, str]:
    """The rate function and window for per-``step`` figures: with a step no longer
    than the scrape interval, ``irate`` over three scrape intervals (the last two
    scrapes: exactly the last interval); with a longer step, ``rate`` over the step
    (at least two scrapes), so every second of the step counts once."""
    if step <= scrape_interval:
        return "irate", f"{_window_ms(3 * scrape_interval)}ms"
    return "rate", f"{_window_ms(max(step, 2 * scrape_interval))}ms"


def _window_ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


# --------------------------------------------------------------------------- a run


def run_telemetry(
    prom_url: str,
    start: float,
    end: float,
    *,
    db_instance: str,
    client_instances: Mapping[str, str],
    devices: Sequence[str],
    step: float = 1.0,
    db_host: str | None = None,
    instance_label: str = "instance",
    scrape_interval: float = 1.0,
    timeout: float = 10.0,
) -> list[Sample]:
    """Device and CPU telemetry of one run, one point per ``step`` seconds from
    ``start`` to ``end`` (epoch seconds; the window is widened to whole steps).

    ``db_instance`` and ``client_instances`` (client name -> instance) are values of
    the ``instance_label`` label of the hosts' node_exporter series: with drivelab's
    own Prometheus, ``instance`` is ``ADDRESS:9100`` and ``drivelab_host`` the
    inventory name. ``devices`` are the candidate drives' kernel names on the DB host
    (``loop3``, ``sda``, ``md0``); for md RAID give the md device or its members, not
    both, or sums over them count twice. Samples are labelled ``host`` (``db_host``,
    default the instance; a client's name) and ``device`` or ``mode``. Figures
    Prometheus has no data for are simply absent: see :func:`missing`."""
    if not devices:
        raise DrivelabError("telemetry: no candidate device given")
    if not _LABEL_NAME.match(instance_label):
        raise DrivelabError(f"telemetry: {instance_label!r} is not a Prometheus label name")
    prom = Prometheus(prom_url, timeout=timeout)
    t0 = math.floor(start / step) * step
    t1 = math.ceil(end / step) * step
    fn, window = rate_expr(step, scrape_interval)
    host = db_host or db_instance
    out: list[Sample] = []

    sel = f"{instance_label}={label_value(db_instance)},device=~{label_regex(devices)}"
    for name, unit, template in _DEVICE_QUERIES:
        promql = template.format(f=fn, sel=sel, w=window)
        for s in prom.query_range(promql, t0, t1, step):
            labels = {"host": host, "device": s.labels.get("device", "?")}
            out += [Sample(DEVICE_PREFIX + name, v, unit, labels, t) for t, v in s.points]

    cpu = (
        f"avg by (mode) ({fn}(node_cpu_seconds_total{{{instance_label}={label_value(db_instance)},"
        f"mode=~{label_regex(DB_CPU_MODES)}}}[{window}]))"
    )
    for s in prom.query_range(cpu, t0, t1, step):
        labels = {"host": host, "mode": s.labels.get("mode", "?")}
        out += [Sample(CPU_MODE, _ratio(v), "ratio", labels, t) for t, v in s.points]

    if client_instances:
        by_instance = {inst: client for client, inst in client_instances.items()}
        inst = f"{instance_label}=~{label_regex(by_instance)}"
        # per CPU: idle + iowait; averaged over the host's CPUs
        busy = (
            f"clamp_min(1 - avg by ({instance_label}) (sum by ({instance_label}, cpu) ("
            f"{fn}(node_cpu_seconds_total{{{inst},mode=~{label_regex(('idle', 'iowait'))}}}"
            f"[{window}]))), 0)"
        )
        for s in prom.query_range(busy, t0, t1, step):
            client = by_instance.get(s.labels.get(instance_label, ""))
            if client is None:
                continue
            labels = {"host": client}
            out += [Sample(CPU_BUSY, _ratio(v), "ratio", labels, t) for t, v in s.points]
    return out


def _ratio(v: float) -> float:
    return min(max(v, 0.0), 1.0)


def missing(
    samples: Iterable[Sample],
    *,
    db_host: str,
    clients: Iterable[str],
    devices: Iterable[str],
) -> list[str]:
    """What :func:`run_telemetry` found no data for, one phrase each: a device with
    no figures at all (a wrong kernel name, node_exporter leaving it out), a device
    missing some figures, a host with no CPU figures (not scraped). Await figures are
    not expected: a device with no I/O in the window has none. Empty when all is there."""
    have: dict[tuple[str, str], set[str]] = defaultdict(set)
    for s in samples:
        have[(s.labels.get("host", ""), s.labels.get("device", ""))].add(s.metric)
    expected = [DEVICE_PREFIX + n for n, _, _ in _DEVICE_QUERIES if "await" not in n]
    out = []
    for dev in devices:
        got = have.get((db_host, dev), set())
        lacking = [m for m in expected if m not in got]
        if len(lacking) == len(expected):
            out.append(f"{db_host} {dev}: no disk figures")
        elif lacking:
            out.append(f"{db_host} {dev}: no {', '.join(lacking)}")
    if CPU_MODE not in have.get((db_host, ""), set()):
        out.append(f"{db_host}: no CPU figures")
    out += [f"{c}: no CPU figures" for c in clients if CPU_BUSY not in have.get((c, ""), set())]
    return out


def devices_from_facts(device_facts: Mapping[str, Any]) -> list[str]:
    """Kernel names of a filesystem's drives (``loop3``, ``sdb``), for ``devices=``,
    from its device facts (``db/<host>-<fs>.json`` of a run folder, the candidate_drive
    role's ``drives[].kname``). For RAID these are the members, each counted once."""
    names = [str(d["kname"]) for d in device_facts.get("drives") or [] if d.get("kname")]
    if not names:
        raise DrivelabError(
            f"device facts of {device_facts.get('filesystem', '?')}: no drive with a kernel name"
        )
    return names


def client_bound(samples: Iterable[Sample], threshold: float = CLIENT_BOUND_THRESHOLD) -> list[str]:
    """Clients whose CPU busy ratio, averaged over the run, was above ``threshold``:
    for them the run measured the client, not the drive. Sorted by name."""
    values: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        if s.metric == CPU_BUSY:
            values[s.labels.get("host", "?")].append(s.value)
    return sorted(h for h, vs in values.items() if vs and sum(vs) / len(vs) > threshold)


CLIENT_BOUND_NOTE = "client-bound: this run measured the client, not the drive"
