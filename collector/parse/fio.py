"""fio results: ``--output-format=json`` and ``json+`` (one job, many jobs,
client/server ``client_stats``), and ``terse`` v3. Everything becomes base units:
ns and µs latencies -> seconds, KiB -> bytes, ms runtimes -> seconds, % -> ratio.

fio before 3.0 wrote ``clat``/``lat`` in µs; fio 3.x writes ``clat_ns``/``lat_ns``.
Both are read. Client mode prints ``<host> ...`` lines before the JSON: parsing
starts at the first line that opens it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from collector.parse import ParseError
from collector.records import Sample
from collector.records.pretest import DiskUtil, FioDirection, FioJob, FioResult, LatencyStats

NS = 1e-9
US = 1e-6
MS = 1e-3
KIB = 1024
DIRECTIONS = ("read", "write", "trim", "mixed")


def parse_fio_json(text: str, source: str = "<fio json>") -> FioResult:
    """A fio JSON or json+ document; raises :class:`ParseError` with the line for
    JSON that is cut short or malformed, and naming the key for a missing figure."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("{")), None)
    if start is None:
        raise ParseError(source, len(lines) or None, "no JSON object in fio output")
    body = "".join(lines[start:])
    try:
        doc = json.loads(body)
    except json.JSONDecodeError as err:
        raise ParseError(
            source, start + err.lineno, f"fio JSON does not parse ({err.msg}; truncated?)"
        ) from None
    if not isinstance(doc, dict):
        raise ParseError(source, start + 1, "fio JSON is not an object")
    if "jobs" in doc:
        entries, client_mode = doc["jobs"], False
    elif "client_stats" in doc:
        entries, client_mode = doc["client_stats"], True
    else:
        raise ParseError(source, start + 1, "fio JSON has neither 'jobs' nor 'client_stats'")
    if not isinstance(entries, list) or not entries:
        raise ParseError(source, start + 1, "fio JSON lists no jobs")
    jobs = tuple(_job(entry, f"jobs[{i}]", source, client_mode) for i, entry in enumerate(entries))
    disks = tuple(
        _disk(d, f"disk_util[{i}]", source) for i, d in enumerate(doc.get("disk_util") or [])
    )
    return FioResult(
        source=source,
        fio_version=doc.get("fio version"),
        timestamp=float(doc["timestamp"]) if "timestamp" in doc else None,
        jobs=jobs,
        disk_util=disks,
        global_options={str(k): str(v) for k, v in (doc.get("global options") or {}).items()},
    )


def _get(d: Mapping[str, Any], key: str, where: str, source: str) -> Any:
    if not isinstance(d, Mapping) or key not in d:
        raise ParseError(source, None, f"fio JSON {where} has no '{key}'")
    return d[key]


def _job(entry: Mapping[str, Any], where: str, source: str, client_mode: bool) -> FioJob:
    name = str(_get(entry, "jobname", where, source))
    directions: dict[str, FioDirection] = {}
    for d in DIRECTIONS:
        if d in entry:
            block = entry[d]
            if int(_get(block, "total_ios", f"{where}.{d}", source)) == 0:
                continue
            directions[d] = _direction(d, block, f"{where}({name}).{d}", source)
    port = entry.get("port")
    return FioJob(
        name=name,
        groupid=int(entry.get("groupid", 0)),
        error=int(entry.get("error", 0)),
        directions=directions,
        options={str(k): str(v) for k, v in (entry.get("job options") or {}).items()},
        host=entry.get("hostname") if client_mode else None,
        port=int(port) if client_mode and port is not None else None,
        aggregate=client_mode and name == "All clients",
        usr_cpu=float(entry["usr_cpu"]) / 100 if "usr_cpu" in entry else None,
        sys_cpu=float(entry["sys_cpu"]) / 100 if "sys_cpu" in entry else None,
    )


def _direction(d: str, block: Mapping[str, Any], where: str, source: str) -> FioDirection:
    bw_bytes = block.get("bw_bytes")
    if bw_bytes is None:  # fio < 3.x: bw in KiB/s only
        bw_bytes = float(_get(block, "bw", where, source)) * KIB
    io_bytes = block.get("io_bytes")
    if io_bytes is None:
        io_bytes = int(_get(block, "io_kbytes", where, source)) * KIB
    return FioDirection(
        direction=d,
        iops=float(_get(block, "iops", where, source)),
        bw_bytes_per_s=float(bw_bytes),
        io_bytes=int(io_bytes),
        runtime_s=float(_get(block, "runtime", where, source)) * MS,
        total_ios=int(block["total_ios"]),
        clat=_latency(block, "clat", where, source),
        lat=_latency(block, "lat", where, source),
        slat=_latency(block, "slat", where, source),
        iops_stddev=float(block["iops_stddev"]) if "iops_stddev" in block else None,
    )


def _latency(block: Mapping[str, Any], kind: str, where: str, source: str) -> LatencyStats | None:
    if f"{kind}_ns" in block:
        stats, scale = block[f"{kind}_ns"], NS
    elif kind in block:
        stats, scale = block[kind], US
    else:
        return None
    w = f"{where}.{kind}"
    pct = {
        float(k): float(v) * scale
        for k, v in (stats.get("percentile") or {}).items()
        if float(k) > 0  # terse-style "0%=0" padding never appears in JSON, but be safe
    }
    bins = stats.get("bins")
    return LatencyStats(
        min_s=float(_get(stats, "min", w, source)) * scale,
        max_s=float(_get(stats, "max", w, source)) * scale,
        mean_s=float(_get(stats, "mean", w, source)) * scale,
        stddev_s=float(_get(stats, "stddev", w, source)) * scale,
        n=int(stats.get("N", 0)),
        percentiles=pct,
        bins={float(k) * scale: int(v) for k, v in bins.items()} if bins else None,
    )


def _disk(d: Mapping[str, Any], where: str, source: str) -> DiskUtil:
    def g(key: str) -> Any:
        return _get(d, key, where, source)

    return DiskUtil(
        name=str(g("name")),
        read_ios=int(g("read_ios")),
        write_ios=int(g("write_ios")),
        read_merges=int(g("read_merges")),
        write_merges=int(g("write_merges")),
        read_ticks_s=int(g("read_ticks")) * MS,
        write_ticks_s=int(g("write_ticks")) * MS,
        in_queue_s=int(g("in_queue")) * MS,
        util=float(g("util")) / 100,
        host=_where(d),
    )


def _where(d: Mapping[str, Any]) -> str | None:
    host, port = d.get("hostname"), d.get("port")
    if host is None:
        return None
    return f"{host}:{port}" if port is not None else str(host)


# Terse v3: fields are positional by definition; name them once, here (1-based, as
# in fio's HOWTO). Each direction block is 41 fields long.
_TERSE_DIR = {
    "io_kib": 0,
    "bw_kib": 1,
    "iops": 2,
    "runtime_ms": 3,
    "slat": 4,  # min, max, mean, dev (µs)
    "clat": 8,
    "clat_pct": 12,  # 20 "P%=µs" entries
    "lat": 32,
    "bw_stats": 36,
}
_TERSE_READ, _TERSE_WRITE = 6, 47
_TERSE_CPU = 88
_TERSE_DISK = 122
_TERSE_DISK_WIDTH = 9


def parse_fio_terse(text: str, source: str = "<fio terse>") -> FioResult:
    """``--output-format=terse`` version 3 lines (one per job; disk figures at the end)."""
    jobs: list[FioJob] = []
    disks: list[DiskUtil] = []
    version = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        f = line.rstrip("\n").split(";")
        if f[0] != "3":
            raise ParseError(source, lineno, f"terse version {f[0]!r}; only version 3 is read")
        if len(f) < _TERSE_DISK - 1:
            raise ParseError(
                source, lineno, f"{len(f)} fields; terse v3 has at least {_TERSE_DISK - 1}"
            )
        try:
            version = f[1]
            directions = {}
            for name, base in (("read", _TERSE_READ), ("write", _TERSE_WRITE)):
                d = _terse_direction(name, f, base)
                if d is not None:
                    directions[name] = d
            jobs.append(
                FioJob(
                    name=f[2],
                    groupid=int(f[3]),
                    error=int(f[4]),
                    directions=directions,
                    usr_cpu=_pct(f[_TERSE_CPU - 1]),
                    sys_cpu=_pct(f[_TERSE_CPU]),
                )
            )
            rest = f[_TERSE_DISK - 1 :]
            if len(rest) % _TERSE_DISK_WIDTH:
                raise ParseError(
                    source, lineno, f"disk block of {len(rest)} fields is not a multiple of 9"
                )
            for i in range(0, len(rest), _TERSE_DISK_WIDTH):
                name, rio, wio, rm, wm, rt, wt, q, util = rest[i : i + _TERSE_DISK_WIDTH]
                disks.append(
                    DiskUtil(
                        name=name,
                        read_ios=int(rio),
                        write_ios=int(wio),
                        read_merges=int(rm),
                        write_merges=int(wm),
                        read_ticks_s=int(rt) * MS,
                        write_ticks_s=int(wt) * MS,
                        in_queue_s=int(q) * MS,
                        util=_pct(util),
                    )
                )
        except (ValueError, IndexError) as err:
            raise ParseError(source, lineno, f"terse v3 field does not parse ({err})") from None
    if not jobs:
        raise ParseError(source, None, "no terse lines")
    return FioResult(
        source=source, fio_version=version, timestamp=None, jobs=tuple(jobs), disk_util=tuple(disks)
    )


def _pct(text: str) -> float:
    return float(text.rstrip("%")) / 100


def _terse_direction(name: str, f: list[str], base: int) -> FioDirection | None:
    def at(key: str, offset: int = 0) -> str:
        return f[base - 1 + _TERSE_DIR[key] + offset]

    iops = float(at("iops"))
    io_kib = int(at("io_kib"))
    if io_kib == 0:
        return None

    def stats(key: str, pct: Mapping[float, float] | None = None) -> LatencyStats:
        mn, mx, mean, dev = (float(at(key, i)) * US for i in range(4))
        return LatencyStats(
            min_s=mn, max_s=mx, mean_s=mean, stddev_s=dev, n=0, percentiles=pct or {}
        )

    pct: dict[float, float] = {}
    for i in range(20):
        p, _, v = at("clat_pct", i).partition("%=")
        if float(p) > 0:
            pct[float(p)] = float(v) * US
    runtime_s = int(at("runtime_ms")) * MS
    return FioDirection(
        direction=name,
        iops=iops,
        bw_bytes_per_s=float(at("bw_kib")) * KIB,
        io_bytes=io_kib * KIB,
        runtime_s=runtime_s,
        total_ios=round(iops * runtime_s),
        clat=stats("clat", pct),
        lat=stats("lat"),
        slat=stats("slat"),
    )


def fio_samples(result: FioResult, labels: Mapping[str, str] | None = None) -> list[Sample]:
    """The figures a report shows, as samples: IOPS, bandwidth, clat mean and
    percentiles (p50/p95/p99/p99.9) per job and direction, and disk utilisation."""
    base = dict(labels or {})
    out: list[Sample] = []
    ts = result.timestamp
    for job in result.jobs:
        jl = {**base, "job": job.name}
        if job.host:
            jl["fio_host"] = f"{job.host}:{job.port}" if not job.aggregate else "all"
        for d in job.directions.values():
            dl = {**jl, "direction": d.direction}
            out.append(Sample("drivelab_fio_iops", d.iops, "operations/second", dl, ts))
            if d.iops_stddev is not None:
                out.append(
                    Sample("drivelab_fio_iops_stddev", d.iops_stddev, "operations/second", dl, ts)
                )
            out.append(
                Sample(
                    "drivelab_fio_bandwidth_bytes_per_second",
                    d.bw_bytes_per_s,
                    "bytes/second",
                    dl,
                    ts,
                )
            )
            if d.clat is not None:
                out.append(
                    Sample("drivelab_fio_clat_mean_seconds", d.clat.mean_s, "seconds", dl, ts)
                )
                for p in (50.0, 95.0, 99.0, 99.9):
                    if p in d.clat.percentiles:
                        out.append(
                            Sample(
                                "drivelab_fio_clat_seconds",
                                d.clat.percentiles[p],
                                "seconds",
                                {**dl, "quantile": f"{p / 100:g}"},
                                ts,
                            )
                        )
    for disk in result.disk_util:
        dl = {**base, "disk": disk.name}
        if disk.host:
            dl["fio_host"] = disk.host
        out.append(Sample("drivelab_fio_disk_util_ratio", disk.util, "ratio", dl, ts))
    return [s for s in out if not math.isnan(s.value)]
