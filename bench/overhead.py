"""Orchestration overhead (issue #9): how much of a `drivelab run` is spent outside the
tools it drives, and how long a re-run of provisioning takes on a lab already provisioned.

The scenario: 2 client hosts, drives nvme and ssd (ext4, tablespace), scale 10,
pgbench -c 4 -j 2 -T 60 per client host, one repetition: two cells. It is run with a
plain `drivelab run` (live view and telemetry on, as users run it; no terminal, so no
live table is drawn) on a fresh 2-client lab, and timed from outside; then once more
under another name (nothing to resume) on the lab as the first run left it, where
provisioning finds every host current and stops after reading their stamps.

- wall: the whole `drivelab run` (validation, preflight, provision, telemetry, both
  cells, gathering, the report);
- inside pgbench: per run, first launch to last end of the clients' pgbench (from each
  client's command.json), summed over the runs;
- inside pgbench -i: per cell, from the first client's init start to the last one's
  end (database.json's init facts; the clients run it as many at once as the DB host's
  memory allows), or where a run has no start and end (before 170f9c9) the clients'
  init times summed, as they ran one after another then;
- ratio = wall / (pgbench + pgbench -i); overhead = ratio - 1. Target (issue #59):
  <= 12 % on the fresh lab, <= 8 % on the provisioned one (issue #23's was 25 % for both);
- the fixed cost of one repetition: its pgbench stage (run.json) less the time inside
  pgbench. Target <= 2 s (issue #59; issue #9's was 8 s).

A breakdown by phase comes from `drivelab run`'s console lines (timestamped as they
arrive) and run.json's ``started_at``/``ended_at``. Then `playbooks/provision.yml`
(``collector.run.stages.provision()``) is run twice more on the provisioned lab and timed.
Target <= 15 s.

Builds its own lab (`lab down`, `lab up --clients 2`) and tears it down, even on
failure. About 9 minutes on the 2-core lab machine (4 x 60 s of pgbench).

    .venv/bin/python bench/overhead.py     # as root
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
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
AGAIN = "overhead-again"
#: issue #59's targets: overhead in % per run (by its label), outside pgbench per repetition
OVERHEAD_TARGET = {"on a fresh lab": 12, "again, on the provisioned lab": 8}
REPETITION_TARGET_S = 2


def scenario(name: str = "overhead") -> dict:
    return {
        "name": name,
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
    """The cell's time inside pgbench -i: its clients' inits from the first start to the
    last end (they may run at once); without their start and end (runs before 170f9c9,
    one client after another) their seconds summed."""
    from datetime import datetime  # noqa: PLC0415

    from collector.gather.folder import read_database  # noqa: PLC0415

    facts, _ = read_database(cell_dir / "db")
    ran = [v for v in (facts.get("db_init") or {}).values() if v.get("ran")]
    if ran and all(v.get("start") and v.get("end") for v in ran):
        starts = [datetime.fromisoformat(v["start"]) for v in ran]
        ends = [datetime.fromisoformat(v["end"]) for v in ran]
        return (max(ends) - min(starts)).total_seconds()
    return sum((facts.get("db_init_seconds") or {}).values())


def cells(results: Path, run: TimedRun, name: str = "overhead") -> list[dict]:
    """Per cell, in run order: its phases in seconds."""
    mark = run.first(PROVISIONED)
    last = mark[0] if mark else run.started
    out = []
    for t, m in run.all(REP_LINE):
        cell_dir = results / "runs" / name / m[3]
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
    from collector.run import stages as runner  # noqa: PLC0415

    started = time.monotonic()
    result = runner.provision()
    took = time.monotonic() - started
    if not {"dbhost", "client1", "client2"} <= set(result.recap):
        # an inventory without the lab's hosts provisions nothing, in a second
        raise SystemExit(f"provisioning re-run: no lab host in its recap {result.recap}")
    return took, sum(host.get("changed", 0) for host in result.recap.values())


def main() -> None:
    results = Path(tempfile.mkdtemp(prefix="drivelab-bench-overhead-"))
    os.environ["DRIVELAB_RESULTS"] = str(results)  # the provision re-runs log there too
    sys.path.insert(0, str(REPO))
    path = write_scenario(results, scenario())
    env = dict(os.environ, COLUMNS="200")  # console lines unwrapped
    print(f"results and console log in {results}")
    drivelab("lab", "down")
    again_path = write_scenario(results, scenario(AGAIN))
    run: TimedRun | None = None
    again: TimedRun | None = None
    provisions: list[tuple[float, int]] = []
    try:
        drivelab("lab", "up", "--clients", str(HOSTS))
        run = TimedRun([DRIVELAB, "run", str(path)], env, results / "console.log")
        rc = run.wait()
        if rc == 0:
            # the same scenario under another name (nothing to resume) on the lab as the
            # first run left it: provisioning finds every host current and stops
            again = TimedRun([DRIVELAB, "run", str(again_path)], env, results / "console-again.log")
            rc = again.wait()
        if rc == 0:
            for i in range(PROVISION_RERUNS):
                provisions.append(timed_provision())
                print(f"provision re-run {i + 1}: {provisions[-1][0]:.1f} s")
    finally:
        for r in (run, again):
            if r is not None:
                r.stop()
        drivelab("lab", "down", check=False)
    for r in (run, again):
        if r is not None and hasattr(r, "ended"):
            print(f"drivelab run: exit {r.proc.returncode}, {r.ended - r.started:.1f} s")
    if rc != 0:
        failed = again or run
        print("\n".join(line for _, line in failed.lines[-30:]))
        sys.exit(f"drivelab run failed (exit {rc}); console logs in {results}")
    report(
        [
            ("on a fresh lab", run, cells(results, run)),
            ("again, on the provisioned lab", again, cells(results, again, AGAIN)),
        ],
        provisions,
    )


def table_and_ratio(run: TimedRun, rows: list[dict]) -> tuple[list[str], float, float, float]:
    """The phase table of one `drivelab run`, and its wall, pgbench and pgbench -i seconds."""
    wall = run.ended - run.started
    pgbench = sum(r["pgbench"] for r in rows)
    init = sum(r["init"] for r in rows)
    mark = run.first(PROVISIONED)
    setup = (mark[0] if mark else run.started) - run.started
    tail = run.ended - (run.all(REP_LINE)[-1][0] if rows else run.started)
    table = [
        "| phase | seconds | of which pgbench -i | of which pgbench |",
        "|---|---:|---:|---:|",
        f"| validate, plan, preflight, provision | {setup:.1f} | | |",
    ]
    for i, r in enumerate(rows):
        # drivelab run sets telemetry up beside the first drives stage, and waits for it
        # before that cell's database stage
        also = " (telemetry set up beside them)" if i == 0 else ""
        table += [
            f"| {r['cell']}: drive and database stages{also} | {r['prepare']:.1f} "
            f"| {r['init']:.1f} | |",
            f"| {r['cell']}: pgbench stage (cold start, start lead, run, fetch) "
            f"| {r['stage']:.1f} | | {r['pgbench']:.1f} |",
            f"| {r['cell']}: gather, store, telemetry | {r['after']:.1f} | | |",
        ]
    table.append(f"| report | {tail:.1f} | | |")
    table.append(f"| **total** | **{wall:.1f}** | **{init:.1f}** | **{pgbench:.1f}** |")
    return table, wall, pgbench, init


def report(
    runs: list[tuple[str, TimedRun, list[dict]]], provisions: list[tuple[float, int]]
) -> None:
    prov = ", ".join(f"{s:.1f} s ({c} changed)" for s, c in provisions) or "not run"
    prov_ok = provisions and max(s for s, _ in provisions) <= 15
    body = [
        "## Orchestration overhead (`bench/overhead.py`)",
        "",
        machine_note(),
        "",
        f"`drivelab run` (live view and telemetry on) of {len(DRIVES)} cells on a fresh "
        f"{HOSTS}-client lab: {' and '.join(DRIVES)}, ext4, tablespace, scale {SCALE}, "
        f"`pgbench -c 4 -j 2 -T {DURATION}` on each of {HOSTS} client hosts, one repetition; "
        "then the same scenario under another name (nothing to resume) on the lab as the "
        "first run left it, where provisioning finds every host current. "
        "Inside pgbench: first launch to last end of the clients' pgbench per run (their "
        "command.json). Inside pgbench -i: per cell, the first client's init start to the "
        "last one's end (as many clients at once as the DB host's memory allows; summed for "
        "runs that did not record them, which ran one client after another).",
    ]
    for label, run, rows in runs:
        table, wall, pgbench, init = table_and_ratio(run, rows)
        ratio = wall / (pgbench + init)
        target = OVERHEAD_TARGET[label]
        line = (
            f"{label}: wall {wall:.1f} s, inside pgbench {pgbench:.1f} s, inside pgbench -i "
            f"{init:.1f} s: ratio {ratio:.3f}, overhead {(ratio - 1) * 100:.1f} % "
            f"(target <= {target:g} %: {'met' if (ratio - 1) * 100 <= target else 'missed'})"
        )
        outside = [r["stage"] - r["pgbench"] for r in rows]
        if outside:
            line += (
                "; outside pgbench per repetition "
                + ", ".join(f"{s:.1f}" for s in outside)
                + f" s (target <= {REPETITION_TARGET_S:g} s: "
                + f"{'met' if max(outside) <= REPETITION_TARGET_S else 'missed'})"
            )
        print("\n".join([*table, "", line, ""]))
        body += ["", f"**{line}**", "", *table]
    prov_line = (
        f"Re-running `playbooks/provision.yml` in full on the provisioned lab "
        f"(`collector.run.stages.provision()`, {PROVISION_RERUNS} times): {prov} "
        f"(target <= 15 s: {'met' if prov_ok else 'missed'})."
    )
    print(prov_line)
    body += ["", prov_line]
    past = history()
    if past:
        body += ["", *history_table(past, runs)]
    update_section("overhead", "\n".join(body))


#: the figures of a run as this script writes them (its section's bold lines)
_FIGURES = {
    "fresh": re.compile(r"\*\*on a fresh lab: wall ([\d.]+) s,.*?overhead ([\d.]+) %"),
    "again": re.compile(
        r"\*\*again, on the provisioned lab: wall ([\d.]+) s,.*?overhead ([\d.]+) %"
        r"(?:.*?outside pgbench per repetition ([\d., ]+) s)?"
    ),
}
_MEASURED = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d) UTC, .*kernel (\S+)$", re.M)
#: how the commits of this file name the code they measured ("overhead on 4d534bb")
_CODE = re.compile(r"\bon (?:the code of )?([0-9a-f]{7,40})\b")


def history() -> list[dict]:
    """Every earlier run of this script that docs/benchmarks.md's git history holds
    (its section as each commit left it), oldest first: when, on which kernel, the code
    the commit's message names, and the two runs' wall and overhead. Empty outside a
    git checkout."""
    doc = "docs/benchmarks.md"
    try:
        log = subprocess.run(
            ["git", "log", "--format=%H%x09%s", "-G", "on a fresh lab: wall", "--", doc],
            cwd=REPO, capture_output=True, text=True, check=True, timeout=60,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    seen: dict[str, dict] = {}
    for line in log.splitlines():
        commit, _, subject = line.partition("\t")
        text = subprocess.run(
            ["git", "show", f"{commit}:{doc}"], cwd=REPO, capture_output=True, text=True,
            check=False, timeout=60,
        ).stdout  # fmt: skip
        section = text.partition("<!-- bench:overhead -->")[2].partition("<!-- /bench:")[0]
        when, fresh, again = (
            _MEASURED.search(section), _FIGURES["fresh"].search(section),
            _FIGURES["again"].search(section),
        )  # fmt: skip
        if not (when and fresh and again) or when[1] in seen:
            continue
        code = _CODE.search(subject)
        seen[when[1]] = {
            "when": when[1], "kernel": when[2], "code": code[1][:7] if code else "not named",
            "fresh": (float(fresh[1]), float(fresh[2])),
            "again": (float(again[1]), float(again[2])), "per_rep": again[3] or "",
        }  # fmt: skip
    return sorted(seen.values(), key=lambda r: r["when"])


def history_table(past: list[dict], runs: list[tuple[str, TimedRun, list[dict]]]) -> list[str]:
    """This run below every earlier one: step by step, as the file's history has them."""
    now = {}
    for key, (_, run, rows) in zip(("fresh", "again"), runs, strict=False):
        _, wall, pgbench, init = table_and_ratio(run, rows)
        now[key] = (wall, (wall / (pgbench + init) - 1) * 100)
    outside = ", ".join(f"{r['stage'] - r['pgbench']:.1f}" for r in runs[-1][2])
    head = subprocess.run(
        ["git", "describe", "--always", "--dirty", "--abbrev=7"], cwd=REPO,
        capture_output=True, text=True, check=False,
    ).stdout.strip() or "unknown"  # fmt: skip
    lines = [
        "Earlier runs of this script, as the git history of this file holds them (the code "
        "each measured as its commit message names it; the machine's speed differs between "
        "sessions and hours: compare neighbours measured on one kernel):",
        "",
        "| measured (UTC) | kernel | code | fresh lab: wall s, overhead % "
        "| provisioned lab: wall s, overhead % | outside pgbench per repetition, s |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in past:
        lines.append(
            f"| {r['when']} | {r['kernel']} | {r['code']} | {r['fresh'][0]:.1f}, "
            f"{r['fresh'][1]:.1f} | {r['again'][0]:.1f}, {r['again'][1]:.1f} | {r['per_rep']} |"
        )
    if "fresh" in now and "again" in now:
        lines.append(
            f"| **this run** | {platform.release()} | {head} | {now['fresh'][0]:.1f}, "
            f"{now['fresh'][1]:.1f} | {now['again'][0]:.1f}, {now['again'][1]:.1f} | {outside} |"
        )
    return lines


if __name__ == "__main__":
    main()
