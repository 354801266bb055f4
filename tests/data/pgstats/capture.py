"""Capture one PostgreSQL major version's statistics views and checkpoint log lines, as
the pgbench_run role writes them into a run folder (its very query, its very log
selection), from a throwaway cluster: unix socket only, removed afterwards.

    python tests/data/pgstats/capture.py 15                       # this machine's server
    python tests/data/pgstats/capture.py 17 --root /tmp/drivelab-pg17-root  # a chroot's

Writes tests/data/pgstats/<major>/: pg_server-before.json, pg_server-after.json,
pg_checkpoints.log and postgresql.log (the whole server log of the capture)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import jinja2
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
ROLE = ROOT / "roles/pgbench_run"


def role_sql(major: int) -> str:
    sql = yaml.safe_load((ROLE / "vars/main.yml").read_text())["__pgbench_run_stats_sql"]
    env = jinja2.Environment()  # noqa: S701  (SQL, not HTML)
    return env.from_string(sql).render(drivelab_pg_major=str(major))


def log_module():
    spec = importlib.util.spec_from_file_location(
        "drivelab_checkpointlog", ROLE / "module_utils/drivelab_checkpointlog.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("major", type=int)
    ap.add_argument(
        "--root", default="/", help="the system whose /usr/lib/postgresql is used (chroot)"
    )
    args = ap.parse_args()
    root = Path(args.root)
    bindir = f"/usr/lib/postgresql/{args.major}/bin"
    inside = Path(tempfile.mkdtemp(prefix=f"drivelab-pg{args.major}-", dir=root / "tmp"))
    work = Path("/") / inside.relative_to(root)  # the same folder as the server sees it
    prefix = [] if str(root) == "/" else ["chroot", str(root)]
    # the postgres user as the server's system knows it (a chroot's uid may differ)
    subprocess.run([*prefix, "chown", "postgres:postgres", str(work)], check=True)

    def pg(*argv: str, check: bool = True) -> str:
        cmd = [*prefix, "runuser", "-u", "postgres", "--", *argv]
        return subprocess.run(cmd, capture_output=True, text=True, check=check).stdout

    conf = {
        "listen_addresses": "''",
        "unix_socket_directories": f"'{work}'",
        "port": "5499",
        "log_checkpoints": "on",
        "track_io_timing": "on",
        "log_line_prefix": "'%m [%p] %q%u@%d '",
        "log_timezone": "'UTC'",
        "shared_buffers": "'16MB'",
        "max_wal_size": "'32MB'",
        "min_wal_size": "'32MB'",
    }
    if args.major >= 14:
        conf["track_wal_io_timing"] = "on"
    out = HERE / str(args.major)
    out.mkdir(exist_ok=True)
    log = inside / "postgresql.log"
    try:
        pg(f"{bindir}/initdb", "-D", f"{work}/data", "-U", "postgres", "--auth=trust")
        with (inside / "data/postgresql.conf").open("a") as fh:
            fh.writelines(f"{k} = {v}\n" for k, v in conf.items())
        pg(f"{bindir}/pg_ctl", "-D", f"{work}/data", "-l", f"{work}/postgresql.log", "-w", "start")
        conn = ["-h", str(work), "-p", "5499"]
        pg(f"{bindir}/createdb", *conn, "drivelab_client1")
        pg(f"{bindir}/pgbench", *conn, "-i", "-s", "5", "drivelab_client1")
        sql = f"SELECT to_jsonb(q) FROM ({role_sql(args.major)}) q"  # noqa: S608  (the role's own)

        def snapshot(when: str) -> dict:
            row = json.loads(pg(f"{bindir}/psql", *conn, "-XAtq", "-d", "postgres", "-c", sql))
            return {"when": when, "server": row["server"]}

        before = snapshot("before")
        time.sleep(1)
        pg(f"{bindir}/pgbench", *conn, "-n", "-c", "4", "-j", "2", "-T", "8", "drivelab_client1")
        pg(f"{bindir}/psql", *conn, "-XAtq", "-d", "postgres", "-c", "CHECKPOINT")
        time.sleep(1)
        after = snapshot("after")
        mod = log_module()
        with log.open("rb") as fh:
            lines, read, _ = mod.select(
                fh, before["server"]["at"], after["server"]["at"], mod.zone_of("UTC")
            )
        after["log"] = {
            "path": str(work / "postgresql.log"),
            "bytes_read": read,
            "problem": None,
            "lines": len(lines),
        }
        for when, doc in (("before", before), ("after", after)):
            (out / f"pg_server-{when}.json").write_text(
                json.dumps(doc, indent=2, sort_keys=True) + "\n"
            )
        (out / "pg_checkpoints.log").write_text("".join(f"{x}\n" for x in lines))
    finally:
        pg(f"{bindir}/pg_ctl", "-D", f"{work}/data", "-m", "fast", "-w", "stop", check=False)
        if log.exists():
            shutil.copy(log, out / "postgresql.log")
        shutil.rmtree(inside)


if __name__ == "__main__":
    main()
