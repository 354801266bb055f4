"""A fio matrix's results (``pretests.fio`` with axes): one point per drive, write
cache state and job, with its axes; the table of every job, seed study 004's table
(throughput by block size, read and write, per drive), and per drive the plots of IOPS
and p99 completion latency over block size and over iodepth."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from collector.report import ScenarioView

#: the columns of the table of every job
COLUMNS = ("drive", "write cache", "pattern", "block", "iodepth", "numjobs", "sync", "IOPS",
           "± IOPS", "MB/s", "p99 ms", "p99.9 ms")  # fmt: skip


@dataclass(frozen=True)
class Job:
    drive: str
    write_cache: str
    pattern: str
    block_bytes: int
    iodepth: int
    numjobs: int
    sync: str
    #: read and write together (a mixed job's both directions)
    iops: float
    iops_stddev: float | None
    bytes_per_s: float
    #: the slower direction's completion latency percentiles, seconds
    p99_s: float | None
    p999_s: float | None


def jobs(view: ScenarioView) -> list[Job]:
    """Every matrix job of the view's pre-tests, by drive, each drive's in the order fio
    ran them (the matrix's nesting)."""
    acc: dict[tuple, dict] = defaultdict(lambda: {"iops": 0.0, "bw": 0.0, "sd": None})
    for s in view.pretests:
        lab = s.labels
        if "block_bytes" not in lab or not s.metric.startswith("drivelab_fio_"):
            continue
        axes = (int(lab["block_bytes"]), int(lab["iodepth"]), int(lab["numjobs"]), lab["sync"])
        key = (lab.get("drive", "?"), lab.get("write_cache", "-"), lab["pattern"], *axes)
        a = acc[key]
        if s.metric == "drivelab_fio_iops":
            a["iops"] += s.value
        elif s.metric == "drivelab_fio_iops_stddev":
            a["sd"] = max(a["sd"] or 0.0, s.value)
        elif s.metric == "drivelab_fio_bandwidth_bytes_per_second":
            a["bw"] += s.value
        elif s.metric == "drivelab_fio_clat_seconds" and lab.get("quantile") in ("0.99", "0.999"):
            q = "p99" if lab["quantile"] == "0.99" else "p999"
            a[q] = max(a.get(q) or 0.0, s.value)
    order = {d: i for i, d in enumerate(view.drives)}
    return [
        Job(*key, a["iops"], a["sd"], a["bw"], a.get("p99"), a.get("p999"))
        for key, a in sorted(acc.items(), key=lambda kv: order.get(kv[0][0], 99))  # fio's order
    ]


def _size(n: int) -> str:
    return f"{n // 1048576}m" if n % 1048576 == 0 else f"{n // 1024}k" if n % 1024 == 0 else str(n)


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:,.3f}"


def rows(found: list[Job]) -> list[list[str]]:
    """The table of every job (:data:`COLUMNS`)."""
    return [
        [j.drive, j.write_cache, j.pattern, _size(j.block_bytes), str(j.iodepth),
         str(j.numjobs), j.sync, f"{j.iops:,.0f}",
         "-" if j.iops_stddev is None else f"{j.iops_stddev:,.0f}",
         f"{j.bytes_per_s / 1e6:,.1f}", _ms(j.p99_s), _ms(j.p999_s)]
        for j in found
    ]  # fmt: skip


def by_block_size(found: list[Job]) -> tuple[list[str], list[list[str]]]:
    """Seed study 004's table: MB/s by block size, read and write, per drive (sequential
    read/write jobs, else random; at each drive's first iodepth, numjobs and sync)."""
    drives = list(dict.fromkeys(j.drive for j in found))
    first = {d: next(j for j in found if j.drive == d) for d in drives}
    like = [
        j for j in found
        if (j.iodepth, j.numjobs, j.sync, j.write_cache)
        == (first[j.drive].iodepth, first[j.drive].numjobs, first[j.drive].sync,
            first[j.drive].write_cache)
    ]  # fmt: skip
    have = {j.pattern for j in like}
    reads, writes = ("read", "write") if have & {"read", "write"} else ("randread", "randwrite")
    cell = {(j.block_bytes, j.drive, j.pattern): j.bytes_per_s for j in like}
    head = ["block"] + [f"{d} {p} MB/s" for d in drives for p in (reads, writes)]
    table = []
    for size in sorted({k[0] for k in cell}):
        table.append([_size(size)] + [
            "-" if (v := cell.get((size, d, p))) is None else f"{v / 1e6:,.1f}"
            for d in drives for p in (reads, writes)
        ])  # fmt: skip
    return head, table


def plots(found: list[Job]) -> list[tuple[str, str]]:
    """Per drive and write cache state: IOPS and p99 completion latency over block size
    (at its first iodepth) and over iodepth (at its first block size), a line per pattern
    and sync mode; (title, svg) each."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    from collector.report.charts import _svg  # noqa: PLC0415

    out = []
    for drive, state in dict.fromkeys((j.drive, j.write_cache) for j in found):
        mine = [j for j in found if (j.drive, j.write_cache) == (drive, state)]
        fig = Figure(figsize=(10, 6))
        axes = fig.subplots(2, 2)
        for (row, attr, what), (col, axis) in (
            (r, c) for r in ((0, "iops", "IOPS"), (1, "p99_s", "p99 completion latency ms"))
            for c in ((0, "block_bytes"), (1, "iodepth"))
        ):  # fmt: skip
            ax = axes[row][col]
            other = "iodepth" if axis == "block_bytes" else "block_bytes"
            for line in dict.fromkeys((j.pattern, j.sync) for j in mine):
                pts = [j for j in mine if (j.pattern, j.sync) == line]
                fixed = min(getattr(j, other) for j in pts)
                pts = sorted((j for j in pts if getattr(j, other) == fixed),
                             key=lambda j: getattr(j, axis))  # fmt: skip
                ys = [getattr(j, attr) for j in pts]
                if attr == "p99_s":
                    ys = [None if y is None else y * 1e3 for y in ys]
                ax.plot([getattr(j, axis) for j in pts], ys, marker="o",
                        label=f"{line[0]} {line[1]}")  # fmt: skip
            ax.set_xscale("log", base=2)
            ax.set_xlabel("block size, bytes" if axis == "block_bytes" else "iodepth")
            ax.set_ylabel(what)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
        title = f"{drive} (write cache {state}): fio matrix"
        fig.suptitle(title)
        out.append((title, _svg(fig)))
    return out
