"""Start skew of synchronized pgbench across 2, 4, 8, 16, 32 and 64 lab clients: with the
start-at wrapper (every client sleeps until one agreed instant), and for comparison
with a plain Ansible async launch (each client starts when Ansible reaches it).

Three spreads per run: launch (the instants the wrappers exec'd pgbench: drivelab's
own), connections up (launch + pgbench's initial connection time: the DB host's) and
first transactions (start = end - latency, from the per-transaction logs). Beside them,
the two-phase start's own figures: the lead the instant was chosen with once every
client was armed, how long handing it to the last client took, and how late after the
instant the last launch came. Targets (issue 59): launch skew <= 5 ms at 32 client hosts
and <= 10 ms at 64, in both runs. The controller's cost of each synchronized repetition
beside them: CPU-seconds and peak memory of this process's tree (the runner, each
ansible-playbook and its forks, ssh and its connection masters) over the repetition, per
client host, and the slope of both against the number of client hosts (least squares over
the sizes), so a larger fleet's cost is a measured line, not a guess. Builds its own
namespace lab (as many clients as the largest size; the container lab stops near 20
clients on a host's default inotify limit: docs/scaling.md) and tears it down. Figures go
to docs/benchmarks.md with the commit measured.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _labrun import ProcSampler, launch_lead, usage
from _report import commit, machine_note, update_section

REPO = Path(__file__).resolve().parent.parent
DRIVELAB = str(Path(sys.executable).parent / "drivelab")
#: client host counts; DRIVELAB_SKEW_SIZES=8,16 measures only those
SIZES = tuple(int(n) for n in os.environ.get("DRIVELAB_SKEW_SIZES", "2,4,8,16,32,64").split(","))
#: DRIVELAB_SKEW_PLAIN=0 leaves out the plain Ansible async comparison
PLAIN = os.environ.get("DRIVELAB_SKEW_PLAIN", "1") != "0"
REPEATS = 2
#: room for every size's sessions (64 client hosts x -c 2: 128; the stock 100 leaves 97)
#: at every size alike, and the DB host's memory for as many backends
PG_SETTINGS = {"max_connections": "200"}
DB_MEMORY = "1G"
#: launch skew targets, ms, by client hosts (issue 59)
TARGETS = {32: 5.0, 64: 10.0}


def main() -> None:
    os.environ["DRIVELAB_RESULTS"] = tempfile.mkdtemp(prefix="drivelab-bench-skew-")
    sys.path.insert(0, str(REPO))
    from collector.gather.folder import gather_run  # noqa: PLC0415
    from collector.run import stages as runner  # noqa: PLC0415

    subprocess.run([DRIVELAB, "lab", "down"], cwd=REPO, check=True, capture_output=True)
    measured = commit()
    rows = []
    #: (client hosts, CPU-seconds, peak tree RSS bytes) per synchronized repetition
    costs: list[tuple[int, float, int]] = []
    sampler = ProcSampler(os.getpid(), interval=0.5).start()
    try:
        subprocess.run(
            [DRIVELAB, "lab", "up", "--clients", str(max(SIZES)), "--db-memory", DB_MEMORY],
            cwd=REPO, check=True,
        )  # fmt: skip
        runner.provision()
        runner.prepare_drives([{"name": "nvme", "drives": ["nvme"], "fs": "ext4"}])
        for n in SIZES:
            hosts = tuple(f"client{i}" for i in range(1, n + 1))
            cell = runner.Cell(
                "bench-skew", "nvme", "ext4", "tablespace", 1, hosts=hosts,
                pgbench=runner.PgbenchOptions(clients_per_host=2, threads=1, duration=5),
                pg_settings=PG_SETTINGS,
            )  # fmt: skip
            runner.prepare_database(cell)
            for synchronized in (True, False) if PLAIN else (True,):
                skews, launches, connects, leads, rts = [], [], [], [], []
                for rep in range(REPEATS):
                    started = time.monotonic()
                    run_dir = runner.run_pgbench(
                        cell,
                        rep,
                        client_hosts=list(hosts),
                        db_host="dbhost",
                        synchronized=synchronized,
                    )
                    ended = time.time()
                    if synchronized:
                        use = usage(sampler.samples, ended - (time.monotonic() - started), ended)
                        if use is not None:
                            costs.append((n, use.tree_mean * use.seconds, use.tree_rss_peak))
                    gathered = gather_run(run_dir).run
                    if gathered.status.value != "complete":  # no figures from a partial run
                        raise SystemExit(
                            f"bench/skew.py: {n} clients, rep {rep}: the run is "
                            f"{gathered.status.value}: {gathered.reason} ({run_dir})"
                        )
                    facts = dict(gathered.facts)
                    skews.append(facts["start_skew_s"] * 1000)
                    launches.append(facts["launch_skew_s"] * 1000)
                    woke = facts.get("wake_realtime") or {}
                    rts.append(f"{sum(woke.values())}/{n}" if woke else "-")
                    spread = facts.get("connect_spread_s")
                    connects.append(float("nan") if spread is None else spread * 1000)
                    leads.append(
                        tuple(
                            float("nan") if facts.get(k) is None else facts[k] * 1000
                            for k in ("start_lead_s", "handover_s", "launch_late_s")
                        )
                    )
                    print(
                        f"{n:>2} clients, {'wrapper' if synchronized else 'plain  '} rep {rep}: "
                        f"launch skew {launches[-1]:7.1f} ms, connections up {connects[-1]:7.1f}"
                        f" ms apart, first transactions {skews[-1]:7.1f} ms apart, "
                        f"{time.monotonic() - started:.1f} s; lead {leads[-1][0]:.0f} ms, "
                        f"handed over in {leads[-1][1]:.0f} ms, last launch "
                        f"{leads[-1][2]:.1f} ms after the instant; woke real-time {rts[-1]}"
                    )
                rows.append((n, synchronized, skews, launches, connects, leads, rts))
    finally:
        sampler.stop()
        subprocess.run([DRIVELAB, "lab", "down"], cwd=REPO, check=False, capture_output=True)

    write_section(rows, costs, measured)


def write_section(rows: list, costs: list[tuple[int, float, int]], measured: str) -> None:
    """The section skew of docs/benchmarks.md: the table, the targets, the controller's cost."""
    body = [
        "## Start skew (`bench/skew.py`)",
        "",
        f"{machine_note()}; commit {measured}",
        "",
        "pgbench -c 2 -j 1 -T 5 -n on every client host, scale 1, nvme-class drive, "
        f"tablespace placement, max_connections {PG_SETTINGS['max_connections']} and a "
        f"{DB_MEMORY} DB host at every size (64 x 2 sessions do not fit in the stock 100); "
        "every run complete. Launch skew: spread of the instants the clients' pgbench "
        "processes were started (drivelab's own). Connections up: spread of launch + pgbench's "
        "initial connection time (the DB host's: it authenticates every connection at once). "
        "First transactions: spread of the clients' first logged transactions (start = end - "
        f"latency). {REPEATS} runs each; targets: launch skew <= 5 ms at 32 client hosts and "
        "<= 10 ms at 64, in every run. "
        "Lead: how far ahead the start instant was chosen once every client was armed; "
        "handed over: how long the instant took to reach the last client; late: how long "
        "after the instant the last launch came (the wrapper sleeps to the instant; late "
        "beyond a millisecond or two means the hand-over missed it); real-time: how many "
        "wrappers woke in the real-time class (where the host allows it).",
        "",
        f"Start lead: {launch_lead()} (roles/pgbench_run).",
        "",
        "| client hosts | launch | launch skew ms | connections up, ms apart "
        "| first transactions, ms apart | lead ms | handed over ms | late ms | real-time |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for n, synchronized, skews, launches, connects, leads, rts in rows:
        mode = "two-phase start" if synchronized else "plain Ansible async"

        def col(values, digits=1):
            return ", ".join("-" if math.isnan(v) else f"{v:.{digits}f}" for v in values)

        body.append(
            f"| {n} | {mode} | {col(launches)} | {col(connects)} | {col(skews)} "
            f"| {col([lead[0] for lead in leads], 0)} | {col([lead[1] for lead in leads], 0)} "
            f"| {col([lead[2] for lead in leads])} | {', '.join(rts)} |"
        )
    for n, limit in TARGETS.items():
        worst = [max(r[3]) for r in rows if r[0] == n and r[1]]
        if worst:
            verdict = "met" if worst[0] <= limit else "not met"
            body.append("")
            body.append(
                f"**{n} client hosts: launch skew at most {worst[0]:.1f} ms (target <= "
                f"{limit:.0f} ms: {verdict})**"
            )
            print(f"{n} client hosts: launch skew at most {worst[0]:.1f} ms: {verdict}")
    body += controller_cost(costs)
    update_section("skew", "\n".join(body))


def controller_cost(costs: list[tuple[int, float, int]]) -> list[str]:
    """The controller's CPU and memory per synchronized repetition, per client host, and
    the fitted lines over the sizes."""
    if not costs:
        return []
    out = [
        "",
        "The controller's cost of one synchronized repetition (start to fetched outputs), "
        "sampled from /proc every 0.5 s: CPU-seconds of this script's process tree (the "
        "runner, each ansible-playbook and its forks, ssh and its connection masters; the "
        "sampler itself included) and the peak of its summed RSS (shared pages counted once "
        "per process). Mean of the runs.",
        "",
        "| client hosts | CPU-s per repetition | CPU-s per client host | peak RSS of the tree "
        "| RSS per client host |",
        "|---:|---:|---:|---:|---:|",
    ]
    sizes = sorted({n for n, _, _ in costs})
    for n in sizes:
        cpu = [c for m, c, _ in costs if m == n]
        rss = [r for m, _, r in costs if m == n]
        mc, mr = sum(cpu) / len(cpu), sum(rss) / len(rss)
        out.append(
            f"| {n} | {mc:.2f} | {mc / n:.3f} | {mr / 1024**2:.0f} MiB | "
            f"{mr / n / 1024**2:.1f} MiB |"
        )
    if len(sizes) > 1:
        xs = [float(n) for n, _, _ in costs]
        cpu_slope, cpu_base = statistics.linear_regression(xs, [c for _, c, _ in costs])
        rss_slope, rss_base = statistics.linear_regression(xs, [r / 1024**2 for _, _, r in costs])
        out += [
            "",
            f"Fitted over the sizes: **{cpu_slope:.3f} CPU-s per client host per repetition** "
            f"(+ {cpu_base:.2f} s whatever the size) and **{rss_slope:.1f} MiB per client "
            f"host** (+ {rss_base:.0f} MiB).",
        ]
    return out


if __name__ == "__main__":
    main()
