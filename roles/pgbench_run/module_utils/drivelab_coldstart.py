"""The cold start of one measured run on the DB host (modules drivelab_cold_start, and
drivelab_environment, which reads the run's environment right after it in the same
module run). Order from FACTS.md: what pgbench does before a run unless -n (vacuum
branches and tellers, empty history) for every client database at once, so the clients'
starts are not spread by their vacuums (pgbench then runs with -n); a CHECKPOINT, so the
stop is quick; stop PostgreSQL (drop_caches does not empty shared_buffers); sync and drop
the page cache; start; then warm each database's catalogs, pgbench_branches and
pgbench_tellers and run one pgbench transaction (what pgbench reads before its clock
starts: on a cold 120-IOPS drive that alone spread the clients' first transactions
apart, docs/scaling.md). A server that died (killed, crashed) fails the vacuums: it is
then started (and recovers) and they run again, so the next run starts from a clean server
(pg_ctlcluster exit 2: "already running" / "not running"). The start after the
page-cache drop does not wait for pg_ctlcluster (run by the host's systemd unit, or
directly where there is no systemd), which sleeps 2 s
however soon the server is up: it waits for the server to accept connections itself
(module_utils drivelab_pgstart, role drivelab's). Only drivelab's own clusters and
databases: anything else is refused, nothing touched. The steps on the client databases
(vacuum, warm, the one transaction) run for every database at once, a stage each: one
after another they would cost time per client database of every repetition.

The settled start (``mode`` "settled": a rate search's warm steps) keeps the server
running and its caches: the vacuums, the CHECKPOINT and a sync, so a step starts with
nothing the step before left to write out (without it a step run right after a much
faster one broke on what that one left: docs/scaling.md)."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import time

from ansible.module_utils.drivelab_pgstart import ctl_argv as pg_ctl
from ansible.module_utils.drivelab_pgstart import start as start_cluster
from ansible.module_utils.drivelab_pgstart import systemd_runs_here

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


def stages(major, cluster, port, databases, systemd=False):
    """The steps in order, as stages: a stage's steps (step, argv or callable, exit codes
    that are fine) touch one client database each and run at once; the stages run one
    after another. A step per database one after another would cost time per client
    database of every repetition (3 processes each: docs/scaling.md). The start after
    the page-cache drop waits only until the server accepts connections (module_utils
    drivelab_pgstart), under systemd or not."""
    start = functools.partial(start_cluster, major, cluster, port, systemd)
    pgbench = ["runuser", "-u", "postgres", "--", "pgbench", "-n", "-t", "1", "-c", "1",
               "-p", str(port)]  # fmt: skip
    return [
        [("start if down", pg_ctl(major, cluster, "start", systemd), (0, 2))],
        [(f"vacuum {db}", psql(port, db, VACUUM), (0,)) for db in databases],
        [("checkpoint", psql(port, "postgres", ("CHECKPOINT",)), (0,))],
        [("stop", [*pg_ctl(major, cluster, "stop", systemd), "--mode=fast"], (0, 2))],
        [("drop the page cache", drop_caches, (0,))],
        [("start", start, (0,))],
        [(f"warm {db}", psql(port, db, WARM, quiet=("-q", "-At")), (0,)) for db in databases],
        [(f"one transaction on {db}", [*pgbench, db], (0,)) for db in databases],
    ]


def settled_stages(major, cluster, port, databases, systemd=False):
    """The settled start's steps, as stages: the cold start's up to its CHECKPOINT, then
    a sync of the page cache; the server keeps running, its caches are kept."""
    return [
        [("start if down", pg_ctl(major, cluster, "start", systemd), (0, 2))],
        [(f"vacuum {db}", psql(port, db, VACUUM), (0,)) for db in databases],
        [("checkpoint", psql(port, "postgres", ("CHECKPOINT",)), (0,))],
        [("sync", sync, (0,))],
    ]


MODES = ("cold", "settled")


def steps(major, cluster, port, databases, systemd=False, *, mode="cold"):
    """Every step of :func:`stages` (``mode`` "settled": :func:`settled_stages`), in order."""
    return [step for stage in _stages(major, cluster, port, databases, systemd, mode=mode)
            for step in stage]  # fmt: skip


def _stages(major, cluster, port, databases, systemd, *, mode):
    if mode == "settled":
        return settled_stages(major, cluster, port, databases, systemd)
    return stages(major, cluster, port, databases, systemd)


def run_stage(stage, seconds):
    """Runs a stage's steps (a callable's alone, argv at once); records each one's
    seconds; returns (step, rc, stderr) of the first that failed, else None."""
    started = time.monotonic()
    if len(stage) == 1 and callable(stage[0][1]):
        name, what, fine = stage[0]
        try:
            rc, _out, err = what()
        except OSError as exc:
            rc, err = 1, str(exc)
        seconds[name] = round(time.monotonic() - started, 3)
        return None if rc in fine else (name, rc, err)
    running = []
    for name, argv, fine in stage:
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, text=True, errors="replace",
            )  # fmt: skip
        except OSError as exc:
            for _, _, p in running:
                p.kill()
                p.wait()
            return name, 1, str(exc)
        running.append((name, fine, proc))
    failed = None
    for name, fine, proc in running:
        _out, err = proc.communicate()
        seconds[name] = round(time.monotonic() - started, 3)
        if proc.returncode not in fine and failed is None:
            failed = (name, proc.returncode, err)
    return failed


def sync():
    os.sync()
    return 0, "", ""


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w", encoding="ascii") as fh:
        fh.write("3\n")
    return 0, "", ""


def refusal(cluster, databases):
    """Why the cold start must not touch this cluster or these databases, or None."""
    if not CLUSTER.match(cluster):
        return f"cold start: {cluster} is not a drivelab cluster: not touched"
    bad = [db for db in databases if not DATABASE.match(db)]
    if bad:
        return f"cold start: {', '.join(bad)}: not drivelab databases: nothing touched"
    return None


def cold_start(major, cluster, port, databases, mode="cold"):
    """Runs every stage (``mode`` "settled": the settled start's), the first ("start if
    down") only when the vacuums fail, which then run again; returns (seconds of each
    step run, from the start of its stage; None, or (one line naming the step that
    failed, its exit code))."""
    seconds = {}
    systemd = systemd_runs_here()
    what = "settled start" if mode == "settled" else "cold start"
    start_if_down, vacuums, *rest = _stages(major, cluster, port, databases, systemd, mode=mode)
    # A running server (before every repetition but one after a crash) answers the
    # vacuums: only when one fails is the server started if down and the vacuums run
    # again (not pg_ctlcluster start on a running server in every repetition)
    failed = run_stage(vacuums, seconds)
    if failed:
        failed = run_stage(start_if_down, seconds) or run_stage(vacuums, seconds)
    for stage in rest:
        if failed:
            break
        failed = run_stage(stage, seconds)
    if failed:
        name, rc, err = failed
        last = ((err or "").strip().splitlines() or [f"exit {rc}"])[-1]
        return seconds, (f"{what}: {name}: {last}", rc)
    return seconds, None
