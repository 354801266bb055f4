"""pgbench's command line for one client host, built in one place (filter
drivelab_pgbench_argv, used by the entry point ``arm``).

The run's words map to pgbench's options through two tables, MODES and LOGS, whose keys
are role drivelab's drivelab_pgbench_modes and drivelab_pgbench_logs
(tests/unit/test_shared_facts.py holds them equal). The rate is per client host here:
the scenario's total is divided once, in the cell's identity (collector/cell.py).
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

#: pgbench's options for each workload mode; custom reads the script copied beside the
#: run's outputs (``script``)
MODES = {
    "tpcb": [],
    "select-only": ["-S"],
    "simple-update": ["-N"],
    "custom": ["-f", "{script}"],
}

#: one item of a mix (-b): a script pgbench has, and a weight; or ``script@<weight>``,
#: the run's own script (-f <the copied script>@<weight>)
MIX = re.compile(r"(tpcb-like|simple-update|select-only|script)@[1-9][0-9]{0,3}")

#: pgbench's options for each per-transaction log
LOGS = {
    "full": ["--log"],
    "sampled": ["--log", "--sampling-rate={sampling_rate}"],
    "aggregate": ["--log", "--aggregate-interval={aggregate_interval}"],
    "none": [],
}


def conninfo(database: str, peer_timeout: int) -> str:
    """The connection string: libpq gives up on a silent server (a link down) after
    ``peer_timeout`` seconds, so pgbench ends instead of waiting for TCP's 15-minute
    retransmission limit."""
    probes = max(int(peer_timeout) // 2, 1)
    return (
        f"dbname={database} keepalives=1 keepalives_idle={probes} keepalives_interval=1"
        f" keepalives_count={probes} tcp_user_timeout={int(peer_timeout) * 1000}"
    )


def drivelab_pgbench_argv(run: dict) -> list[str]:
    """pgbench's argv from ``run``: host, port, database, clients, threads, duration
    (seconds, 0: ``transactions`` each), mode, script, protocol (-M, simple: none), rate
    (per host, 0: unthrottled), latency_limit (ms, 0: none), progress (seconds, 0:
    none), log, sampling_rate, aggregate_interval, peer_timeout."""
    words = {k: run.get(k) for k in ("script", "sampling_rate", "aggregate_interval")}
    argv = ["pgbench", "-h", str(run["host"]), "-p", str(run["port"]), "-U", run["database"]]
    argv += ["-c", str(run["clients"]), "-j", str(run["threads"]), "-n"]
    if int(run["duration"]) > 0:
        argv += ["-T", str(run["duration"])]
    else:
        argv += ["-t", str(run["transactions"])]
    mix = list(run.get("mix") or [])
    if mix and run["mode"] != "tpcb":
        mode = run["mode"]
        raise AnsibleFilterError(f"pgbench mix {mix!r}: in place of a mode, not beside {mode}")
    for item in mix:  # a word that goes into pgbench's argv: its shape checked here
        if not isinstance(item, str) or not MIX.fullmatch(item):
            raise AnsibleFilterError(
                f"pgbench mix item {item!r}: not <built-in script>@<weight> or script@<weight>"
            )
        name, weight = item.split("@")
        argv += ["-b", item] if name != "script" else ["-f", f"{words['script']}@{weight}"]
    argv += [word.format(**words) for word in MODES[run["mode"]]]
    if run.get("protocol", "simple") != "simple":
        argv += ["-M", str(run["protocol"])]  # the role's argument spec allows its words
    if int(run["rate"]) > 0:
        argv += ["-R", str(run["rate"])]
    if int(run["latency_limit"]) > 0:
        argv += ["-L", str(run["latency_limit"])]
    if int(run["progress"]) > 0:
        argv += ["-P", str(run["progress"]), "--progress-timestamp"]
    argv += [word.format(**words) for word in LOGS[run["log"]]]
    return [*argv, conninfo(run["database"], run["peer_timeout"])]


class FilterModule:
    def filters(self):
        return {"drivelab_pgbench_argv": drivelab_pgbench_argv}
