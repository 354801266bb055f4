"""Fidelity against hand-run tools (issue #9): does drivelab report what pgbench and fio
report when an operator runs them by hand on the same lab? Interleaved A B C A B C, 4 rounds
of each, so that drift (a warming cache, a busy machine) falls on both sides alike.

pgbench, on nvme (ext4, tablespace, scale 10), from client1, ``-c 2 -j 1 -n -T 15``:

- A, drivelab: ``collector.run.stages.run_pgbench`` on that one client host with
  ``cold_start=False`` (no checkpoint, restart or cache drop: the hand run does none),
  gathered with ``collector.gather.folder``: the windowed tps the report shows, and beside it
  the tps pgbench printed (drivelab's pgbench also has ``-P 1 --progress-timestamp
  --log``: a per-transaction log written on the client);
- B, by hand: ``ip netns exec drivelab-client1 pgbench -h <DB host> -p 5440 -U
  drivelab_client1 -c 2 -j 1 -n -T 15 drivelab_client1`` with the client's pgpass
  (``/var/lib/drivelab-client/client1/pgpass``), its ``tps = ...`` parsed by
  ``collector.parse.pgbench``. One unmeasured 5 s hand run warms the database first;
- C, by hand with drivelab's argv: the exact argv of A's pgbench (its command.json:
  ``-P 1 --progress-timestamp --log`` and the keepalive conninfo included) in the same
  namespace, in a scratch folder; its printed tps, and its windowed tps computed from
  its own per-transaction log by ``collector.stats.tps`` as drivelab does. C tells what
  drivelab's options cost (B against C) from what its orchestration costs (A against C).

fio, on hdd7200 (ext4, capped at 120 IOPS), job rand-read-4k-qd1 (random 4 KiB reads
at queue depth 1, direct I/O, 5 s after 1 s of ramp, on a file of twice the DB host's
memory):

- A, drivelab: ``playbooks/fio.yml`` through ``collector.run.stages.run_pretests`` with a
  runtime of 5 s (its 10 jobs run; rand-read-4k-qd1 is read from its output);
- B, by hand: the same job's options on the fio command line, on a file of the same
  size laid out once beforehand (outside the DB host's cgroups, so uncapped), run
  inside the DB host's cgroups (``sh -c 'echo $$ > .../cgroup.procs; exec fio ...'``)
  so the IOPS cap applies as it does to drivelab's run over SSH.

Reported: each side's values, means, run-to-run spread (min-max and sample standard
deviation), and whether drivelab's mean lies within the hand runs' range.

Builds its own lab (`lab down`, `lab up --clients 2`) and tears it down, even on
failure. About 12 minutes on the 2-core lab machine (4 drivelab pre-tests of about
80 s each dominate).

    .venv/bin/python bench/fidelity.py     # as root
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _labrun import REPO, drivelab
from _report import machine_note, update_section

from collector.paths import host_default

PAIRS = 4
CLIENT = "client1"
PG_DRIVE = "nvme"
FIO_DRIVE = "hdd7200"
SCALE = 10
CLIENTS, THREADS, DURATION = 2, 1, 15
WARMUP = 5
FIO_RUNTIME, FIO_RAMP = 5, 1  # drive_pretest_runtime, drive_pretest_ramp
FIO_JOB = "rand-read-4k-qd1"
PG_PORT = 5440  # pgbench_client_db_port
CLIENT_DIR = Path(host_default("drivelab_client_dir"))
HAND_FILE = "bench-fidelity.fio"


class Lab:
    """What the hand runs need to know about the lab, from its generated inventory."""

    def __init__(self) -> None:
        from collector.paths import LOCAL_INVENTORY  # noqa: PLC0415
        from collector.scenario import load_inventory  # noqa: PLC0415

        groups = load_inventory(LOCAL_INVENTORY)["all"]["children"]
        self.db_name, db = next(iter(groups["db"]["hosts"].items()))
        self.db_addr = db["ansible_host"]
        self.cgroup = db.get("drivelab_cgroup", "drivelab-db")
        self.memory = int(db["db_memory_bytes"])
        self.drives = {d["name"]: d for d in db["candidate_drives"]}
        self.netns = groups["clients"]["hosts"][CLIENT]["drivelab_netns"]

    def fio_bytes(self) -> int:
        """The pre-test file's size: twice the DB host's memory, whole MiB (as the role)."""
        mib = 1024**2
        return -(-2 * self.memory // mib) * mib

    def cap(self, drive: str) -> tuple[int, int]:
        """(read IOPS cap in force for the drive in the DB host's blkio group, the class's)."""
        st = os.stat(self.drives[drive]["device"])
        dev = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
        path = Path(f"/sys/fs/cgroup/blkio/{self.cgroup}/blkio.throttle.read_iops_device")
        have = dict(line.split() for line in path.read_text().splitlines() if line.strip())
        return int(have.get(dev, 0)), int(self.drives[drive]["iops_cap"])


# --------------------------------------------------------------------------- pgbench


def drivelab_pgbench(lab: Lab, cell, rep: int) -> tuple[float, float, Path]:
    """(windowed tps, tps pgbench printed, run folder) of one drivelab run without a
    cold start."""
    from collector.gather.folder import gather_run  # noqa: PLC0415
    from collector.run import stages as runner  # noqa: PLC0415

    run_dir = runner.run_pgbench(
        cell, rep, client_hosts=[CLIENT], db_host=lab.db_name, cold_start=False
    )
    st = gather_run(run_dir).stats()
    if st.status.value != "complete" or st.tps is None or st.tps_reported_sum is None:
        raise SystemExit(f"drivelab run {rep}: {st.status.value} ({st.reason}); see {run_dir}")
    return st.tps, st.tps_reported_sum, run_dir


def hand_pgbench(
    lab: Lab, duration: int = DURATION, argv: list[str] | None = None
) -> tuple[float, float | None]:
    """(tps pgbench printed, windowed tps from its per-transaction log or None) of one
    pgbench by hand in the client's namespace: the plain options, or ``argv``."""
    from collector.parse import pgbench  # noqa: PLC0415
    from collector.records import ClientResult  # noqa: PLC0415
    from collector.stats import tps as stats  # noqa: PLC0415

    db = f"drivelab_{CLIENT}"
    if argv is None:
        argv = [
            "pgbench", "-h", lab.db_addr, "-p", str(PG_PORT), "-U", db,
            "-c", str(CLIENTS), "-j", str(THREADS), "-n", "-T", str(duration), db,
        ]  # fmt: skip
    env = dict(os.environ, PGPASSFILE=str(CLIENT_DIR / CLIENT / "pgpass"))
    with tempfile.TemporaryDirectory(prefix="drivelab-bench-pgbench-") as cwd:
        proc = subprocess.run(
            ["ip", "netns", "exec", lab.netns, *argv], cwd=cwd, env=env, capture_output=True,
            text=True, check=False, timeout=duration + 120,
        )  # fmt: skip
        if proc.returncode != 0:
            raise SystemExit(f"hand pgbench exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
        printed = pgbench.parse_report(proc.stdout, "hand pgbench").tps
        logs = sorted(Path(cwd).glob("pgbench_log.*"))
        if not logs:
            return printed, None
        log = pgbench.summarize_txlog(logs)
        client = ClientResult(CLIENT, tps=printed, start=log.first_start, end=log.last_end)
        run = stats.run_stats([client], stats.series_from_txlog(CLIENT, log))
        return printed, run.tps_windowed


def drivelab_argv(run_dir: Path) -> list[str]:
    """The argv drivelab's wrapper ran on CLIENT (its command.json)."""
    doc = json.loads((run_dir / CLIENT / "command.json").read_text(encoding="utf-8"))
    return [str(a) for a in doc["argv"]]


# --------------------------------------------------------------------------- fio


def fio_iops(path: Path) -> float:
    from collector.parse.fio import parse_fio_json  # noqa: PLC0415

    result = parse_fio_json(path.read_text(encoding="utf-8"), str(path))
    job = next(j for j in result.jobs if j.name == FIO_JOB)
    if job.error:
        raise SystemExit(f"{path}: fio job {FIO_JOB} reports error {job.error}")
    return job.directions["read"].iops


def drivelab_fio(out: Path) -> float:
    from collector.run import stages as runner  # noqa: PLC0415

    pretests = {
        "fio": True, "pg_test_fsync": False, "runtime": FIO_RUNTIME, "fsync_seconds": 1,
        "write_cache": "leave",
    }  # fmt: skip
    runner.run_pretests([{"name": FIO_DRIVE, "drives": [FIO_DRIVE]}], pretests, out)
    (path,) = sorted(out.glob(f"fio-{FIO_DRIVE}-wcache-*.json"))
    return fio_iops(path)


def lay_out(lab: Lab, target: Path) -> None:
    """The hand runs' file, written in full as drivelab's layout does; from outside the
    DB host's cgroups, so the cap does not slow it (it is not measured)."""
    subprocess.run(
        ["fio", "--name=layout", f"--filename={target}", f"--size={lab.fio_bytes()}",
         "--rw=write", "--bs=1m", "--direct=1", "--ioengine=libaio", "--iodepth=8",
         "--end_fsync=1", "--output-format=terse"],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip


def hand_fio(lab: Lab, target: Path, out: Path) -> float:
    have, want = lab.cap(FIO_DRIVE)
    if have != want:
        raise SystemExit(f"{FIO_DRIVE}: read IOPS cap is {have}, its class says {want}")
    job = [
        "fio", f"--name={FIO_JOB}", f"--filename={target}", f"--size={lab.fio_bytes()}",
        "--direct=1", "--ioengine=libaio", "--time_based=1", f"--runtime={FIO_RUNTIME}",
        f"--ramp_time={FIO_RAMP}", "--norandommap=1", "--randrepeat=0", "--rw=randread",
        "--bs=4k", "--iodepth=1", "--output-format=json+", f"--output={out}",
    ]  # fmt: skip
    enter = (
        f'for c in blkio memory; do echo $$ > "/sys/fs/cgroup/$c/{lab.cgroup}/cgroup.procs"; '
        'done; exec "$@"'
    )
    subprocess.run(["sh", "-c", enter, "sh", *job], check=True, capture_output=True, timeout=120)
    return fio_iops(out)


# --------------------------------------------------------------------------- the report


def spread(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{min(values):,.1f}-{max(values):,.1f} (sd {sd:,.1f})"


def row(what: str, a: list[float], b: list[float]) -> str:
    ma, mb = statistics.mean(a), statistics.mean(b)
    inside = "yes" if min(b) <= ma <= max(b) else "no"
    return (
        f"| {what} | {', '.join(f'{x:,.1f}' for x in a)} | {', '.join(f'{x:,.1f}' for x in b)} "
        f"| {ma:,.1f} | {mb:,.1f} | {(ma - mb) / mb * 100:+.1f} % | {spread(a)} | {spread(b)} "
        f"| {inside} |"
    )


def verdict(tool: str, unit: str, a: list[float], b: list[float], side: str = "B") -> str:
    ma = statistics.mean(a)
    where = "within" if min(b) <= ma <= max(b) else "outside"
    return (
        f"{tool}: drivelab's mean {ma:,.1f} {unit} lies {where} the hand runs' ({side}) range "
        f"{min(b):,.1f}-{max(b):,.1f} {unit}."
    )


def main() -> None:
    results = Path(tempfile.mkdtemp(prefix="drivelab-bench-fidelity-"))
    os.environ["DRIVELAB_RESULTS"] = str(results)
    sys.path.insert(0, str(REPO))
    from collector.run import stages as runner  # noqa: PLC0415

    print(f"results in {results}")
    pg_a: list[float] = []
    pg_a_reported: list[float] = []
    pg_b: list[float] = []
    pg_c: list[float] = []
    pg_c_reported: list[float] = []
    fio_a: list[float] = []
    fio_b: list[float] = []
    drivelab("lab", "down")
    target: Path | None = None
    try:
        drivelab("lab", "up", "--clients", "2")
        lab = Lab()
        fio_cap = lab.cap(FIO_DRIVE)[1]
        runner.provision()
        runner.prepare_drives(
            [{"name": d, "drives": [d], "fs": "ext4"} for d in (PG_DRIVE, FIO_DRIVE)]
        )
        cell = runner.Cell(
            "bench-fidelity", PG_DRIVE, "ext4", "tablespace", SCALE, hosts=(CLIENT,),
            pgbench=runner.PgbenchOptions(clients_per_host=CLIENTS, threads=THREADS,
                                          duration=DURATION),
        )  # fmt: skip
        runner.prepare_database(cell)
        hand_pgbench(lab, WARMUP)
        for i in range(PAIRS):
            tps, reported, run_dir = drivelab_pgbench(lab, cell, i)
            pg_a.append(tps)
            pg_a_reported.append(reported)
            pg_b.append(hand_pgbench(lab)[0])
            printed, windowed = hand_pgbench(lab, argv=drivelab_argv(run_dir))
            if windowed is None:
                raise SystemExit(f"hand pgbench with drivelab's argv left no log ({run_dir})")
            pg_c_reported.append(printed)
            pg_c.append(windowed)
            print(
                f"pgbench round {i + 1}: drivelab {tps:,.1f} tps (pgbench printed "
                f"{reported:,.1f}), hand {pg_b[-1]:,.1f} tps, hand with drivelab's argv "
                f"{windowed:,.1f} tps windowed ({printed:,.1f} printed)"
            )
        for i in range(PAIRS):
            fio_a.append(drivelab_fio(results / "fio" / f"drivelab-{i}"))
            if target is None:  # fio is there now: drivelab's pre-test installed it
                target = Path("/srv/drivelab") / FIO_DRIVE / HAND_FILE
                lay_out(lab, target)
            fio_b.append(hand_fio(lab, target, results / "fio" / f"hand-{i}.json"))
            print(f"fio pair {i + 1}: drivelab {fio_a[-1]:,.1f} IOPS, hand {fio_b[-1]:,.1f} IOPS")
    finally:
        if target is not None:
            target.unlink(missing_ok=True)
        drivelab("lab", "down", check=False)

    table = [
        "| figure | drivelab (A) | by hand (B) | A mean | B mean | A - B | A spread "
        "| B spread | A mean within B's range |",
        "|---|---|---|---:|---:|---:|---|---|---|",
        row("pgbench tps (drivelab: windowed, as reported)", pg_a, pg_b),
        row("pgbench tps (drivelab: the tps pgbench printed)", pg_a_reported, pg_b),
        row("pgbench tps, windowed: drivelab (A) vs by hand with drivelab's argv (C)", pg_a, pg_c),
        row(
            "pgbench tps, printed: drivelab (A) vs by hand with drivelab's argv (C)",
            pg_a_reported,
            pg_c_reported,
        ),
        row(
            "pgbench tps, printed: by hand with drivelab's argv (C) vs plain (B)",
            pg_c_reported,
            pg_b,
        ),
        row(f"fio {FIO_JOB} IOPS, {FIO_DRIVE}", fio_a, fio_b),
    ]
    verdicts = [
        verdict("pgbench", "tps", pg_a, pg_b),
        verdict("pgbench with drivelab's argv", "tps", pg_a, pg_c, "C"),
        verdict("fio", "IOPS", fio_a, fio_b),
    ]
    print("\n".join([*table, "", *verdicts]))
    body = [
        "## Fidelity against hand-run tools (`bench/fidelity.py`)",
        "",
        machine_note(),
        "",
        f"Interleaved A B C A B C, {PAIRS} rounds, on a 2-client lab. pgbench: {PG_DRIVE}, "
        f"ext4, tablespace, scale {SCALE}, `-c {CLIENTS} -j {THREADS} -n -T {DURATION}` from "
        f"{CLIENT}; A = `collector.run.stages.run_pgbench` without the cold start (the hand run "
        "does none; drivelab's pgbench also writes its per-transaction log and `-P 1` "
        "progress), B = the same pgbench by hand in the client's namespace with its "
        f"pgpass, after one unmeasured {WARMUP} s hand run; C = by hand with the exact "
        "argv of the A run before it (its command.json: `-P 1 --progress-timestamp --log` "
        "and the keepalive conninfo), its windowed tps computed from its own log by "
        f"`collector.stats.tps` as drivelab does. fio: {FIO_JOB} on {FIO_DRIVE} "
        f"(cap {fio_cap} IOPS), {FIO_RUNTIME} s after "
        f"{FIO_RAMP} s of ramp, on a file of twice the DB host's memory; A = "
        f"`playbooks/fio.yml` (runtime {FIO_RUNTIME}), B = the same job by hand inside the "
        "DB host's cgroups. Spread: min-max and sample standard deviation.",
        "",
        *table,
        "",
        *verdicts,
    ]
    update_section("fidelity", "\n".join(body))


if __name__ == "__main__":
    main()
