"""Orchestration overhead (issue #9): how much of a `drivelab run` is spent outside the
tools it drives, and how long a re-run of provisioning takes on a lab already provisioned.

The scenario: 2 client hosts, drives nvme and ssd (ext4, tablespace), scale 10,
pgbench -c 4 -j 2 -T 60 per client host, one repetition: two cells. It is run with a
plain `drivelab run` (live view and telemetry on, as users run it; no terminal, so no
live table is drawn) on a fresh 2-client lab, and timed from outside.

- wall: the whole `drivelab run` (validation, preflight, provision, telemetry, both
  cells, gathering, the report);
- inside pgbench: per run, first launch to last end of the clients' pgbench (from each
  client's command.json), summed over the runs;
- inside pgbench -i: per cell, the clients' init times (database.json, run fact
  ``db_init_seconds``) summed, as they run one after another;
- ratio = wall / (pgbench + pgbench -i); overhead = ratio - 1. Target <= 15 %.

A breakdown by phase comes from `drivelab run`'s console lines (timestamped as they
arrive) and run.json's ``started_at``/``ended_at``. Then `playbooks/provision.yml`
(``collector.runner.provision()``) is run twice more on the provisioned lab and timed.
Target <= 15 s.

Builds its own lab (`lab down`, `lab up --clients 2`) and tears it down, even on
failure. About 5 minutes on the 2-core lab machine (2 x 60 s of pgbench).

    .venv/bin/python bench/overhead.py     # as root
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _labrun import (
    DRIVELAB,
    PROVISIONED,
    REP_LINE,
    REPO,
    TimedRun,
    drivelab,
    pgbench_span,
    write_scenario,
)
from _report import machine_note, update_section

DRIVES = ("nvme", "ssd")
HOSTS = 2
DURATION = 60
SCALE = 10
PROVISION_RERUNS = 2


def scenario() -> dict:
    return {
        "name": "overhead",
        "description": "bench/overhead.py: orchestration overhead of drivelab run",
        "drives": list(DRIVES),
        "filesystems": [{"fs": "ext4"}],
        "placement": ["tablespace"],
        "workload": {
            "scale": [SCALE], "clients_per_host": 4, "threads": 2, "duration": DURATION,
        },
        "hosts": [HOSTS],
        "repetitions": 1,
    }  # fmt: skip


def init_seconds(cell_dir: Path) -> float:
    """The cell's pgbench -i times (one per client, run one after another), summed."""
    from collector.gather import read_database  # noqa: PLC0415

    facts, _ = read_database(cell_dir / "db")
    return sum((facts.get("db_init_seconds") or {}).values())


def cells(results: Path, run: TimedRun) -> list[dict]:
    """Per cell, in run order: its phases in seconds."""
    mark = run.first(PROVISIONED)
    last = mark[0] if mark else run.started
    out = []
    for t, m in run.all(REP_LINE):
        cell_dir = results / "runs" / "overhead" / m[3]
        run_dir = cell_dir / f"rep-{m[4]}"
        doc = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
        span = pgbench_span(run_dir)
        out.append(
            {
                "cell": m[3],
                "status": m[5],
                "prepare": doc["started_at"] - last,  # drive and database stages
                "init": init_seconds(cell_dir),
                "stage": doc["ended_at"] - doc["started_at"],  # the pgbench playbook
                "pgbench": span[1] - span[0] if span else 0.0,
                "after": t - doc["ended_at"],  # gather, store, telemetry queries
            }
        )
        last = t
    return out


def timed_provision() -> tuple[float, int]:
    from collector import runner  # noqa: PLC0415

    started = time.monotonic()
    result = runner.provision()
    changed = sum(host.get("changed", 0) for host in result.recap.values())
    return time.monotonic() - started, changed


def main() -> None:
    results = Path(tempfile.mkdtemp(prefix="drivelab-bench-overhead-"))
    os.environ["DRIVELAB_RESULTS"] = str(results)  # the provision re-runs log there too
    sys.path.insert(0, str(REPO))
    path = write_scenario(results, scenario())
    env = dict(os.environ, COLUMNS="200")  # console lines unwrapped
    print(f"results and console log in {results}")
    drivelab("lab", "down")
    run: TimedRun | None = None
    provisions: list[tuple[float, int]] = []
    try:
        drivelab("lab", "up", "--clients", str(HOSTS))
        run = TimedRun([DRIVELAB, "run", str(path)], env, results / "console.log")
        rc = run.wait()
        if rc == 0:
            for i in range(PROVISION_RERUNS):
                provisions.append(timed_provision())
                print(f"provision re-run {i + 1}: {provisions[-1][0]:.1f} s")
    finally:
        if run is not None:
            run.stop()
        drivelab("lab", "down", check=False)
    wall = run.ended - run.started
    print(f"drivelab run: exit {rc}, {wall:.1f} s")
    if rc != 0:
        print("\n".join(line for _, line in run.lines[-30:]))
        sys.exit(f"drivelab run failed (exit {rc}); console log: {results / 'console.log'}")
    report(run, cells(results, run), wall, provisions)


def report(
    run: TimedRun, rows: list[dict], wall: float, provisions: list[tuple[float, int]]
) -> None:
    pgbench = sum(r["pgbench"] for r in rows)
    init = sum(r["init"] for r in rows)
    ratio = wall / (pgbench + init)
    mark = run.first(PROVISIONED)
    setup = (mark[0] if mark else run.started) - run.started
    tail = run.ended - (run.all(REP_LINE)[-1][0] if rows else run.started)
    lines = [
        f"wall {wall:.1f} s, inside pgbench {pgbench:.1f} s, inside pgbench -i {init:.1f} s: "
        f"ratio {ratio:.3f}, overhead {(ratio - 1) * 100:.1f} % (target <= 15 %)",
    ]
    table = [
        "| phase | seconds | of which pgbench -i | of which pgbench |",
        "|---|---:|---:|---:|",
        f"| validate, plan, preflight, provision, telemetry | {setup:.1f} | | |",
    ]
    for r in rows:
        table += [
            f"| {r['cell']}: drive and database stages | {r['prepare']:.1f} | {r['init']:.1f} | |",
            f"| {r['cell']}: pgbench stage (cold start, start lead, run, fetch) "
            f"| {r['stage']:.1f} | | {r['pgbench']:.1f} |",
            f"| {r['cell']}: gather, store, telemetry | {r['after']:.1f} | | |",
        ]
    table.append(f"| report | {tail:.1f} | | |")
    table.append(f"| **total** | **{wall:.1f}** | **{init:.1f}** | **{pgbench:.1f}** |")
    prov = ", ".join(f"{s:.1f} s ({c} changed)" for s, c in provisions) or "not run"
    prov_ok = provisions and max(s for s, _ in provisions) <= 15
    lines.append(
        f"provisioning re-run on a provisioned lab: {prov} "
        f"(target <= 15 s: {'met' if prov_ok else 'missed'})"
    )
    print("\n".join([*table, "", *lines]))
    body = [
        "## Orchestration overhead (`bench/overhead.py`)",
        "",
        machine_note(),
        "",
        f"`drivelab run` (live view and telemetry on) of {len(DRIVES)} cells on a fresh "
        f"{HOSTS}-client lab: {' and '.join(DRIVES)}, ext4, tablespace, scale {SCALE}, "
        f"`pgbench -c 4 -j 2 -T {DURATION}` on each of {HOSTS} client hosts, one repetition. "
        "Inside pgbench: first launch to last end of the clients' pgbench per run (their "
        "command.json). Inside pgbench -i: the clients' init times per cell, summed (they "
        "run one after another).",
        "",
        f"**Wall {wall:.1f} s; inside pgbench {pgbench:.1f} s; inside pgbench -i {init:.1f} s; "
        f"ratio {ratio:.3f}: overhead {(ratio - 1) * 100:.1f} %** (target <= 15 %: "
        f"{'met' if ratio <= 1.15 else 'missed'}).",
        "",
        *table,
        "",
        f"Re-running `playbooks/provision.yml` on the provisioned lab "
        f"(`collector.runner.provision()`, {PROVISION_RERUNS} times): {prov} "
        f"(target <= 15 s: {'met' if prov_ok else 'missed'}).",
    ]
    update_section("overhead", "\n".join(body))


if __name__ == "__main__":
    main()
