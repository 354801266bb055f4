"""Start skew of synchronized pgbench across 2, 4, 8, 16 and 32 lab clients: with the
start-at wrapper (every client sleeps until one agreed instant), and for comparison
with a plain Ansible async launch (each client starts when Ansible reaches it).

Three spreads per run: launch (the instants the wrappers exec'd pgbench: drivelab's
own), connections up (launch + pgbench's initial connection time: the DB host's) and
first transactions (start = end - latency, from the per-transaction logs). Beside them,
the two-phase start's own figures: the lead the instant was chosen with once every
client was armed, how long handing it to the last client took, and how late after the
instant the last launch came. Targets (issue 23): launch skew <= 10 ms at 32 client
hosts. Builds its own lab (as many
clients as the largest size) and tears it down. Figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _labrun import launch_lead
from _report import machine_note, update_section

REPO = Path(__file__).resolve().parent.parent
DRIVELAB = str(Path(sys.executable).parent / "drivelab")
#: client host counts; DRIVELAB_SKEW_SIZES=8,16 measures only those
SIZES = tuple(int(n) for n in os.environ.get("DRIVELAB_SKEW_SIZES", "2,4,8,16,32").split(","))
#: DRIVELAB_SKEW_PLAIN=0 leaves out the plain Ansible async comparison
PLAIN = os.environ.get("DRIVELAB_SKEW_PLAIN", "1") != "0"
REPEATS = 2


def main() -> None:
    os.environ["DRIVELAB_RESULTS"] = tempfile.mkdtemp(prefix="drivelab-bench-skew-")
    sys.path.insert(0, str(REPO))
    from collector.gather.folder import gather_run  # noqa: PLC0415
    from collector.run import stages as runner  # noqa: PLC0415

    subprocess.run([DRIVELAB, "lab", "down"], cwd=REPO, check=True, capture_output=True)
    rows = []
    try:
        subprocess.run([DRIVELAB, "lab", "up", "--clients", str(max(SIZES))], cwd=REPO, check=True)
        runner.provision()
        runner.prepare_drives([{"name": "nvme", "drives": ["nvme"], "fs": "ext4"}])
        for n in SIZES:
            hosts = tuple(f"client{i}" for i in range(1, n + 1))
            cell = runner.Cell(
                "bench-skew", "nvme", "ext4", "tablespace", 1, hosts=hosts,
                pgbench=runner.PgbenchOptions(clients_per_host=2, threads=1, duration=5),
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
                    facts = dict(gather_run(run_dir).run.facts)
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
        subprocess.run([DRIVELAB, "lab", "down"], cwd=REPO, check=False, capture_output=True)

    body = [
        "## Start skew (`bench/skew.py`)",
        "",
        machine_note(),
        "",
        "pgbench -c 2 -j 1 -T 5 -n on every client host, scale 1, nvme-class drive, "
        "tablespace placement. Launch skew: spread of the instants the clients' pgbench "
        "processes were started (drivelab's own). Connections up: spread of launch + pgbench's "
        "initial connection time (the DB host's: it authenticates every connection at once). "
        "First transactions: spread of the clients' first logged transactions (start = end - "
        f"latency). {REPEATS} runs each; target: launch skew <= 10 ms at 32 client hosts. "
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
    update_section("skew", "\n".join(body))


if __name__ == "__main__":
    main()
