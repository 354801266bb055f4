"""Captures what the installed PostgreSQL server says about settings, for the unit tests
of collector/scenario/pgsettings.py and roles/postgresql_server's module_utils.

Run as root on a machine with Debian's postgresql-<major> (``make setup`` installs it):

    .venv/bin/python tests/data/pgsettings/capture.py [major]

It makes a throwaway cluster in /tmp/drivelab-pgsettings-<random> (initdb as postgres,
a Unix socket in that folder only, ``listen_addresses=''``), and writes beside this file:

* ``pg<major>-describe-config.txt``: ``postgres --describe-config`` (no cluster needed);
* ``pg<major>-pg_settings.json``: every row of ``pg_settings`` (name, setting, unit,
  vartype, min_val, max_val, enumvals, context) of the running cluster;
* ``pg<major>-cases.json``: for each (name, value) of :data:`CASES`, what
  ``postgres -D <cluster> -c lc_messages=C -c name=value -C name`` printed (stdout,
  stderr, exit code): the server's own verdict, the check drivelab makes on the DB host.
  For every value it accepts, the case also holds the ``pg_settings`` row (``setting``,
  ``pending_restart``) once that value is in the cluster's settings file and the cluster
  has been restarted: what drivelab's after-apply check compares;
* ``reload`` in the same file: two settings changed in the file (one sighup, one
  postmaster) and the cluster reloaded, not restarted: the rows of both then.

The server is stopped and the folder removed whatever happens. Nothing else is touched.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: (name, value) pairs: valid and invalid values of the settings operators change most,
#: units, ranges, enums, booleans, and names PostgreSQL does not know or will not change
CASES: list[tuple[str, str]] = [
    *[("shared_buffers", v) for v in
      ("128MB", "256MB", "1GB", "12XB", "128mb", "16", "8", "1.5MB", "128 MB", "0x100", "010", "-1")],
    *[("checkpoint_timeout", v) for v in
      ("5min", "30s", "1h", "10", "29s", "1d", "2d", "1.5min", "5MB", "abc", "300000ms", "30 s")],
    *[("wal_sync_method", v) for v in
      ("fdatasync", "open_datasync", "FDATASYNC", "bogus", "fsync_writethrough", "open_sync", "fsync")],
    *[("fsync", v) for v in ("on", "off", "true", "yes", "1", "0", "maybe", "of", "t", "ON", "onn")],
    ("full_page_writes", "off"),
    *[("synchronous_commit", v) for v in ("off", "local", "remote_apply", "true", "yes", "maybe")],
    *[("checkpoint_completion_target", v) for v in ("0.9", "1.5", "-0.1", "0.5e0", "abc", "1", "0.5x")],
    *[("max_wal_size", v) for v in ("1GB", "2048", "10MB", "1TB", "1")],
    *[("min_wal_size", v) for v in ("80MB", "1MB")],
    *[("wal_buffers", v) for v in ("-1", "16MB", "64kB", "4kB")],
    *[("random_page_cost", v) for v in ("1.1", "4", "-1")],
    *[("effective_io_concurrency", v) for v in ("200", "2000")],
    *[("work_mem", v) for v in ("4MB", "64kB", "63kB", "4.5MB")],
    *[("max_connections", v) for v in ("100", "0", "300000")],
    *[("wal_compression", v) for v in ("on", "lz4", "zstd", "pglz", "gzip", "off")],
    *[("huge_pages", v) for v in ("off", "try")],
    *[("commit_delay", v) for v in ("10", "100001")],
    *[("vacuum_cost_delay", v) for v in ("2ms", "0.5", "101", "0.55")],
    ("default_text_search_config", "pg_catalog.english"),
    *[("bgwriter_delay", v) for v in ("200ms", "5ms")],
    ("jit", "off"),
    ("temp_buffers", "8MB"),
    *[("log_min_duration_statement", v) for v in ("-1", "250ms")],
    *[("statement_timeout", v) for v in ("0", "1.5s", "100us")],
    ("effective_cache_size", "4GB"),
    ("autovacuum", "off"),
    ("bgwriter_lru_maxpages", "0"),
    *[("checkpoint_flush_after", v) for v in ("256kB", "0")],
    ("wal_writer_flush_after", "1MB"),
    ("maintenance_work_mem", "64MB"),
    ("idle_in_transaction_session_timeout", "1min"),
    # names the server does not know, or will not let a file change
    ("wal_sync_methd", "fdatasync"),
    ("shared_buffer", "128MB"),
    ("checkpoint_timout", "5min"),
    ("block_size", "8192"),
    ("server_version", "16"),
]  # fmt: skip

#: a setting changed in the file and reloaded: one the server applies at once, and one
#: that waits for a restart (pending_restart)
RELOAD_BEFORE = {"wal_sync_method": "fdatasync", "shared_buffers": "128MB"}
RELOAD_AFTER = {"wal_sync_method": "open_datasync", "shared_buffers": "256MB"}
ROW = (
    "name, setting, unit, vartype, min_val, max_val, enumvals, context, source, sourcefile,"
    " sourceline, pending_restart"
)


def as_postgres(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {"LC_ALL": "C", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    return subprocess.run(
        ["runuser", "-u", "postgres", "--", *argv],
        capture_output=True, text=True, check=check, env=env, timeout=120,
    )  # fmt: skip


class Cluster:
    def __init__(self, major: str, folder: Path) -> None:
        self.bin = Path(f"/usr/lib/postgresql/{major}/bin")
        self.folder = folder
        self.data = folder / "data"
        self.conf = self.data / "drivelab.conf"

    def init(self) -> None:
        as_postgres(str(self.bin / "initdb"), "-D", str(self.data), "-A", "peer")
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as fh:
            fh.write(
                f"listen_addresses = ''\nunix_socket_directories = '{self.folder}'\nport = 5499\n"
                "include_if_exists = 'drivelab.conf'\n"
            )
        self.write({})

    def write(self, settings: dict[str, str]) -> None:
        text = "".join(f"{k} = '{v}'\n" for k, v in settings.items())
        self.conf.write_text(text, encoding="utf-8")
        shutil.chown(self.conf, "postgres", "postgres")

    def pg_ctl(self, *args: str) -> None:
        as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-l",
                    str(self.folder / "log"), *args)  # fmt: skip

    def start_with(self, settings: dict[str, str]) -> bool:
        """The cluster (re)started with these settings in its file: whether it runs."""
        as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop",
                    check=False)  # fmt: skip
        self.write(settings)
        proc = as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-l",
                           str(self.folder / "log"), "start", check=False)  # fmt: skip
        return proc.returncode == 0

    def fatal(self) -> str:
        lines = (self.folder / "log").read_text(encoding="utf-8").splitlines()
        return next(x for x in reversed(lines) if "FATAL:" in x).split("FATAL:", 1)[1].strip()

    def sql(self, query: str) -> str:
        return as_postgres(
            str(self.bin / "psql"), "-X", "-A", "-t", "-h", str(self.folder), "-p", "5499",
            "-d", "postgres", "-c", query,
        ).stdout.strip()  # fmt: skip

    def rows(self, names: list[str] | None = None) -> list[dict]:
        where = ""
        if names:
            where = " WHERE name IN (" + ", ".join(f"'{n}'" for n in names) + ")"
        query = (
            f"SELECT coalesce(json_agg(s ORDER BY name), '[]') FROM (SELECT {ROW}"  # noqa: S608  (our names)
            f" FROM pg_settings{where}) s"
        )
        return json.loads(self.sql(query))

    def describe(self, name: str, value: str) -> dict:
        proc = as_postgres(
            str(self.bin / "postgres"), "-D", str(self.data), "-c", "lc_messages=C",
            "-c", f"{name}={value}", "-C", name, check=False,
        )  # fmt: skip
        return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


def main(major: str) -> None:
    folder = Path(tempfile.mkdtemp(prefix="drivelab-pgsettings-"))
    shutil.chown(folder, "postgres", "postgres")
    pg = Cluster(major, folder)
    started = False
    try:
        pg.init()
        describe = as_postgres(str(pg.bin / "postgres"), "--describe-config").stdout
        (HERE / f"pg{major}-describe-config.txt").write_text(describe, encoding="utf-8")
        cases = [{"name": n, "value": v, **pg.describe(n, v)} for n, v in CASES]
        pg.pg_ctl("start")
        started = True
        version = pg.sql("SELECT version()")
        every = pg.rows()
        (HERE / f"pg{major}-pg_settings.json").write_text(
            json.dumps(every, indent=1) + "\n", encoding="utf-8"
        )
        # every accepted value in the settings file, the cluster restarted: pg_settings then
        # (a batch the server will not start with is tried one case at a time, and the
        # case that stops it keeps the server's words as "start_failed")
        pending = [c for c in cases if c["rc"] == 0]
        while pending:
            batch: dict[str, dict] = {}
            for case in pending:
                batch.setdefault(case["name"], case)
            if not pg.start_with({n: c["value"] for n, c in batch.items()}):
                for case in list(batch.values()):
                    if not pg.start_with({case["name"]: case["value"]}):
                        case["start_failed"] = pg.fatal()
                        batch.pop(case["name"])
                pg.start_with({n: c["value"] for n, c in batch.items()})
            for row in pg.rows(list(batch)):
                batch[row["name"]]["server"] = row
            done = {id(c) for c in batch.values()}
            pending = [c for c in pending if id(c) not in done and "start_failed" not in c]
        pg.start_with(RELOAD_BEFORE)
        before = pg.rows(list(RELOAD_BEFORE))
        loaded = pg.sql("SELECT pg_conf_load_time()")
        pg.write(RELOAD_AFTER)
        pg.pg_ctl("reload")
        for _ in range(50):
            if pg.sql("SELECT pg_conf_load_time()") != loaded:
                break
            time.sleep(0.1)
        after = pg.rows(list(RELOAD_AFTER))
        doc = {
            "server": version,
            "command": "postgres -D <cluster> -c lc_messages=C -c NAME=VALUE -C NAME",
            "cases": cases,
            "reload": {"before": RELOAD_BEFORE, "after": RELOAD_AFTER,
                       "rows_before": before, "rows_after_reload": after},
        }  # fmt: skip
        (HERE / f"pg{major}-cases.json").write_text(
            json.dumps(doc, indent=1) + "\n", encoding="utf-8"
        )
    finally:
        if started:
            as_postgres(str(pg.bin / "pg_ctl"), "-D", str(pg.data), "-m", "fast", "stop",
                        check=False)  # fmt: skip
        shutil.rmtree(folder)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "15")
