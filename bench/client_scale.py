"""Client-scale sweep (issue #9): one `drivelab run` of a scenario with
``hosts: [1, 2, 4, 8, 16, 32]`` (nvme, ext4, tablespace, scale 1, pgbench -c 1 -j 1
-T 10, one repetition, no telemetry) on a lab of 32 clients, with the live view on a
pseudo-terminal of 200 x 60, as an operator would watch it.

Per cell (client host count): aggregate tps (the report's windowed tps), per-client tps
min and max (over the same window), start skew (run fact ``start_skew_s``), the
cell's wall time (drive, database and pgbench stages: between `drivelab run`'s
console lines, timestamped as they arrive) and the pgbench stage alone (run.json
``started_at`` to ``ended_at``: cold start, launch lead, run, fetch).

The controller's cost: every 0.5 s the `drivelab` process (its threads: the live
view's SSH followers, the metrics exporter, the table) and its whole process tree
(ansible-playbook, its forks, ssh, and Ansible's ControlPersist masters) are read from
/proc (utime+stime, VmRSS); CPU in cores and RSS are given over each cell's pgbench
phase (first launch to last end of the clients' pgbench, from command.json). Target
(issue #9): under one core while streaming 32 clients live.

Builds its own lab (`lab down`, `lab up --clients 32`) and tears it down, even on
failure. Results go to a temporary folder (printed). About 10 to 15 minutes on the
2-core lab machine (lab up with 32 clients about 30 s; provisioning 32 clients; 32
pgbench -i one after another; the launch lead playbooks/pgbench.yml gives, printed).

    .venv/bin/python bench/client_scale.py     # as root
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _labrun import (
    DRIVELAB,
    PROVISIONED,
    REP_LINE,
    REPO,
    ProcSampler,
    TimedRun,
    Usage,
    drivelab,
    launch_lead,
    mib,
    pgbench_span,
    usage,
    write_scenario,
)
from _report import machine_note, update_section

SIZES = (1, 2, 4, 8, 16, 32)
DURATION = 10
TTY = (60, 200)  # rows, columns of the pseudo-terminal the live table is drawn on


def scenario() -> dict:
    return {
        "name": "client-scale",
        "description": "bench/client_scale.py: 1 to 32 client hosts, one pgbench session each",
        "drives": ["nvme"],
        "filesystems": [{"fs": "ext4"}],
        "placement": ["tablespace"],
        "workload": {"scale": [1], "clients_per_host": 1, "threads": 1, "duration": DURATION},
        "hosts": list(SIZES),
        "repetitions": 1,
    }


def cell_walls(run: TimedRun) -> dict[str, float]:
    """cell_id -> seconds from the previous console mark (provisioned, or the previous
    cell's repetition line) to this cell's repetition line."""
    mark = run.first(PROVISIONED)
    last = mark[0] if mark else run.started
    out = {}
    for t, m in run.all(REP_LINE):
        out[m[3]] = t - last
        last = t
    return out


def collect(results: Path, run: TimedRun, sampler: ProcSampler) -> list[dict]:
    sys.path.insert(0, str(REPO))
    from collector import report  # noqa: PLC0415
    from collector.store import Store  # noqa: PLC0415

    walls = cell_walls(run)
    rows = []
    with Store.open(results / "drivelab.db", create=False) as store:
        view = report.load(store, "client-scale")
        for cv in view.cells:
            stored = store.runs(cv.stats.cell_id)
            if not stored or not cv.stats.runs:
                rows.append({"hosts": cv.stats.spec.clients, "status": "not run"})
                continue
            rs, sr = cv.stats.runs[0], stored[0]
            facts = {f.key: f.value for f in store.facts(view.info.id, sr.id) if f.scope == "run"}
            span = pgbench_span(Path(facts["run_dir"]))
            skew = facts.get("start_skew_s")
            stage = sr.ended_at - sr.started_at if sr.ended_at and sr.started_at else None
            per_client = list(rs.per_client_tps.values())
            rows.append(
                {
                    "hosts": rs.clients,
                    "status": rs.status.value,
                    "tps": rs.tps,
                    "windowed": rs.windowed,
                    "client_min": min(per_client) if per_client else None,
                    "client_max": max(per_client) if per_client else None,
                    "skew_ms": None if skew is None else skew * 1000,
                    "cell_wall": walls.get(facts["cell_id"]),
                    "stage_wall": stage,
                    "span": span,
                    "usage": usage(sampler.samples, *span) if span else None,
                }
            )
    return sorted(rows, key=lambda r: r["hosts"])


def _f(value: float | None, fmt: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{fmt}}{unit}"


def scale_table(rows: list[dict]) -> list[str]:
    out = [
        "| client hosts | run | aggregate tps | per-client tps min-max | start skew "
        "| cell wall | pgbench stage | pgbench phase |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r["status"] == "not run":
            out.append(f"| {r['hosts']} | not run | - | - | - | - | - | - |")
            continue
        tps = _f(r["tps"], ",.1f") + ("" if r["windowed"] else " (reported sum)")
        spread = f"{_f(r['client_min'], ',.1f')}-{_f(r['client_max'], ',.1f')}"
        phase = r["span"][1] - r["span"][0] if r["span"] else None
        out.append(
            f"| {r['hosts']} | {r['status']} | {tps} | {spread} | {_f(r['skew_ms'], '.1f', ' ms')} "
            f"| {_f(r['cell_wall'], '.1f', ' s')} | {_f(r['stage_wall'], '.1f', ' s')} "
            f"| {_f(phase, '.1f', ' s')} |"
        )
    return out


def cost_table(rows: list[dict]) -> list[str]:
    out = [
        "| client hosts | drivelab CPU mean / peak | whole tree CPU mean / peak "
        "| drivelab RSS peak | tree RSS peak (sum) | processes in tree (peak) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        u: Usage | None = r.get("usage")
        if u is None:
            out.append(f"| {r['hosts']} | - | - | - | - | - |")
            continue
        out.append(
            f"| {r['hosts']} | {u.root_mean:.2f} / {u.root_peak:.2f} cores "
            f"| {u.tree_mean:.2f} / {u.tree_peak:.2f} cores | {mib(u.root_rss_peak)} "
            f"| {mib(u.tree_rss_peak)} | {u.tree_procs_peak} |"
        )
    return out


def main() -> None:
    results = Path(tempfile.mkdtemp(prefix="drivelab-bench-client-scale-"))
    path = write_scenario(results, scenario())
    env = dict(
        os.environ, DRIVELAB_RESULTS=str(results), TERM="xterm-256color",
        COLUMNS=str(TTY[1]), LINES=str(TTY[0]),
    )  # fmt: skip
    print(f"results and console log in {results}")
    drivelab("lab", "down")
    run: TimedRun | None = None
    sampler: ProcSampler | None = None
    try:
        lab_up = drivelab("lab", "up", "--clients", str(max(SIZES)))
        print(f"lab up, {max(SIZES)} clients: {lab_up:.1f} s")
        argv = [DRIVELAB, "run", "--no-check", str(path), "--no-telemetry"]
        run = TimedRun(argv, env, results / "console.log", tty=TTY)
        sampler = ProcSampler(run.pid).start()
        rc = run.wait()
        sampler.stop()
    finally:
        if run is not None:
            run.stop()
        if sampler is not None:
            sampler.stop()
        drivelab("lab", "down", check=False)
    total = run.ended - run.started
    print(f"drivelab run: exit {rc}, {total:.0f} s")
    if rc != 0:
        print("\n".join(line for _, line in run.lines[-30:]))
        sys.exit(f"drivelab run failed (exit {rc}); console log: {results / 'console.log'}")
    rows = collect(results, run, sampler)
    whole = usage(sampler.samples, run.started, run.ended)
    mark = run.first(PROVISIONED)
    head = scale_table(rows)
    cost = cost_table(rows)
    print("\n".join([*head, "", *cost]))

    top = next((r for r in rows if r["hosts"] == max(SIZES) and r.get("usage")), None)
    if top:
        u = top["usage"]
        verdict = (
            f"With {max(SIZES)} clients streamed live, the `drivelab` process used "
            f"**{u.root_mean:.2f} cores** on average (peak {u.root_peak:.2f} over 0.5 s) and "
            f"its whole process tree **{u.tree_mean:.2f} cores** (peak {u.tree_peak:.2f}); "
            f"target: under one core: {'met' if u.root_mean < 1 else 'missed'} by `drivelab`, "
            f"{'met' if u.tree_mean < 1 else 'missed'} by the tree."
        )
    else:
        verdict = f"No CPU figures for the {max(SIZES)}-client cell."
    print(verdict)
    body = [
        "## Client scale (`bench/client_scale.py`)",
        "",
        machine_note(),
        "",
        f"One `drivelab run --no-telemetry` of a scenario with `hosts: {list(SIZES)}` on a lab "
        f"of {max(SIZES)} clients: nvme, ext4, tablespace, scale 1, `pgbench -c 1 -j 1 -T "
        f"{DURATION}` per client host, one repetition per cell, the live view on (drawn on "
        f"a {TTY[1]}x{TTY[0]} pseudo-terminal). Whole run {total:.0f} s"
        + (f", of which preflight and provisioning {int(mark[1][1])} s" if mark else "")
        + f"; `lab up --clients {max(SIZES)}` {lab_up:.1f} s.",
        "",
        "Aggregate tps: summed over the window in which every client ran. Start skew: "
        "spread of the clients' first transactions. Cell wall: drive (first cell only), "
        "database (pgbench -i of the clients new to the cell) and pgbench stages, between "
        "`drivelab run`'s console lines. pgbench stage: run.json `started_at` to "
        f"`ended_at` (cold start, launch lead of {launch_lead()}, run, fetch). "
        "pgbench phase: first launch to last end of the clients' pgbench.",
        "",
        *head,
        "",
        "The controller's cost over each cell's pgbench phase, sampled from /proc every "
        "0.5 s: the `drivelab` process alone (its threads: one SSH follower per client, "
        "the metrics exporter, the live table) and its whole tree (ansible-playbook and "
        "its forks polling `async_status` every second per client, ssh, Ansible's "
        "ControlPersist masters). One core = 1.00. RSS of the tree is a sum over "
        "processes (shared pages counted once per process). The clients' pgbench, "
        "PostgreSQL and the sampler share the same 2 cores.",
        "",
        *cost,
        "",
        verdict,
    ]
    if whole:
        body += [
            "",
            f"Over the whole run: `drivelab` {whole.root_mean:.2f} cores mean, peak RSS "
            f"{mib(whole.root_hwm)} (VmHWM); tree {whole.tree_mean:.2f} cores mean.",
        ]
    update_section("client-scale", "\n".join(body))


if __name__ == "__main__":
    main()
