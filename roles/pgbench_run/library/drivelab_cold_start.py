#!/usr/bin/python
"""The cold start of one measured run, on the DB host, in one module run (each step as a
task of its own cost a module run, 0.3-0.6 s, on the path of every repetition). Order from
FACTS.md: what pgbench does before a run unless -n (vacuum branches and tellers, empty
history) for every client database at once, so the clients' starts are not spread by
their vacuums (pgbench then runs with -n); a CHECKPOINT, so the stop is quick; stop
PostgreSQL (drop_caches does not empty shared_buffers); sync and drop the page cache;
start; then warm each database's catalogs, pgbench_branches and pgbench_tellers and run
one pgbench transaction (what pgbench reads before its clock starts: on a cold 120-IOPS
drive that alone spread the clients' first transactions by 100-500 ms).

A server that died (killed, crashed) is started first and recovers, so the next run
starts from a clean server (pg_ctlcluster exit 2: "already running" / "not running").
The start after the page-cache drop does not wait for pg_ctlcluster (run by the
host's systemd unit, or directly where there is no systemd), which sleeps 2 s however
soon the server is up: it waits for the server to accept connections itself
(module_utils drivelab_pgstart, role drivelab's, a dependency of this role).
Only drivelab's own clusters and databases: anything else is refused, nothing touched.
A step that fails ends the module with one line naming it; ``seconds`` says what each
step took."""

from __future__ import annotations

import functools
import os
import re
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_pgstart import start as start_cluster

DOCUMENTATION = r"""
module: drivelab_cold_start
short_description: checkpoint, restart and drop the page cache before a measured run
options:
  major: {type: str, required: true, description: PostgreSQL major version of the cluster}
  cluster: {type: str, required: true, description: "drivelab's cluster (drivelab or drivelab_<fs>)"}
  port: {type: int, required: true, description: the cluster's port}
  databases: {type: list, elements: str, required: true, description: "the client databases (drivelab_<client>)"}
"""

CLUSTER = re.compile(r"^drivelab(_[A-Za-z0-9_-]+)?$")
DATABASE = re.compile(r"^drivelab_[^\s/]+$")
VACUUM = ("VACUUM pgbench_branches", "VACUUM pgbench_tellers", "TRUNCATE pgbench_history")
WARM = (
    "SELECT count(*) FROM pg_class",
    "SELECT count(*) FROM pgbench_branches",
    "SELECT count(*) FROM pgbench_tellers",
)


def psql(port, db, commands, quiet=("-q",)):
    argv = ["runuser", "-u", "postgres", "--", "psql", "-X", *quiet, "-v", "ON_ERROR_STOP=1",
            "-p", str(port), "-d", db]  # fmt: skip
    for command in commands:
        argv += ["-c", command]
    return argv


def steps(major, cluster, port, databases, systemd=False):
    """(step, argv or callable, exit codes that are fine), in order. The start after the
    page-cache drop waits only until the server accepts connections (module_utils
    drivelab_pgstart), under systemd or not."""
    ctl = ["pg_ctlcluster", major, cluster]
    out = [("start if down", [*ctl, "start"], (0, 2))]
    out += [(f"vacuum {db}", psql(port, db, VACUUM), (0,)) for db in databases]
    start = functools.partial(start_cluster, major, cluster, port, systemd)
    out += [
        ("checkpoint", psql(port, "postgres", ("CHECKPOINT",)), (0,)),
        ("stop", [*ctl, "stop", "--mode=fast"], (0, 2)),
        ("drop the page cache", drop_caches, (0,)),
        ("start", start, (0,)),
    ]
    for db in databases:
        out.append((f"warm {db}", psql(port, db, WARM, quiet=("-q", "-At")), (0,)))
        pgbench = ["runuser", "-u", "postgres", "--", "pgbench", "-n", "-t", "1", "-c", "1",
                   "-p", str(port), db]  # fmt: skip
        out.append((f"one transaction on {db}", pgbench, (0,)))
    return out


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w", encoding="ascii") as fh:
        fh.write("3\n")
    return 0, "", ""


def main():
    module = AnsibleModule(
        argument_spec={
            "major": {"type": "str", "required": True},
            "cluster": {"type": "str", "required": True},
            "port": {"type": "int", "required": True},
            "databases": {"type": "list", "elements": "str", "required": True},
        },
        supports_check_mode=False,
    )
    p = module.params
    if not CLUSTER.match(p["cluster"]):
        module.fail_json(msg=f"cold start: {p['cluster']} is not a drivelab cluster: not touched")
    bad = [db for db in p["databases"] if not DATABASE.match(db)]
    if bad:
        module.fail_json(
            msg=f"cold start: {', '.join(bad)}: not drivelab databases: nothing touched"
        )
    seconds = {}
    systemd = os.path.isdir("/run/systemd/system")
    for name, what, fine in steps(p["major"], p["cluster"], p["port"], p["databases"], systemd):
        started = time.monotonic()
        try:
            rc, _out, err = what() if callable(what) else module.run_command(what)
        except OSError as exc:
            rc, err = 1, str(exc)
        seconds[name] = round(time.monotonic() - started, 3)
        if rc not in fine:
            last = (err.strip().splitlines() or [f"exit {rc}"])[-1]
            module.fail_json(msg=f"cold start: {name}: {last}", rc=rc, seconds=seconds)
    module.exit_json(changed=True, seconds=seconds)


if __name__ == "__main__":
    main()
