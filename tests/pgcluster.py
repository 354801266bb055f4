"""A throwaway PostgreSQL cluster for the results-store tests (the team store's backend).

:func:`started` makes it in ``/tmp/drivelab-results-pg-<random>``: ``initdb`` as the
``postgres`` user from Debian's ``/usr/lib/postgresql/<major>/bin``, the server started
by this process (``postgres`` directly, so the PID we hold is the postmaster's), no TCP
(``listen_addresses=''``), its Unix socket in that folder only, and password logins
(scram-sha-256) for every connection. Passwords are random, and reach libpq only
through a pgpass file in the folder (``PGPASSFILE``), never a URI or argv, as the
store asks of an operator.

The results role is made the way docs/collector.md tells a team to (``GRANTS``): a
login role that is no superuser and cannot create roles or databases, owner of its own
database and nothing else; ``pg_hba.conf`` lets it reach only that database. Each test
gets a database of its own (:meth:`Cluster.new_database`), owned by that role.

At the end the server is stopped by the PID this process started (SIGINT: fast
shutdown; SIGKILL after 30 s) and the folder removed, whatever happened before.
A cluster that cannot start raises: the tests that need it fail, they never skip.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

ROLE = "drivelab_results"
DATABASE = "drivelab_results"
PORT = 5432

#: what the results role is given, as docs/collector.md gives it (run by a superuser)
GRANTS = (
    "CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION"
    " PASSWORD '{password}'",
    "CREATE DATABASE {database} OWNER {role}",
    "REVOKE ALL ON DATABASE {database} FROM PUBLIC",
)

#: pg_hba.conf: the superuser anywhere (to set up), the results role only to its own
#: databases (``drivelab_results``, and each test's, added as it is made)
HBA = """\
local all postgres scram-sha-256
local {databases} drivelab_results scram-sha-256
"""


def _bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        raise RuntimeError("no /usr/lib/postgresql/*/bin/initdb: make setup installs postgresql")
    return found[-1].parent


class Cluster:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.log = folder / "server.log"
        self.pgpass = folder / "pgpass"
        self.bin = _bin()
        self.proc: subprocess.Popen[bytes] | None = None
        self.super_password = secrets.token_hex(16)
        self.role_password = secrets.token_hex(16)
        self._numbers = itertools.count(1)
        self.databases = [DATABASE]

    # ----------------------------------------------------------------- lifecycle

    def init(self) -> None:
        pwfile = self.folder / "superuser.pw"
        pwfile.write_text(self.super_password + "\n", encoding="utf-8")
        shutil.chown(pwfile, "postgres", "postgres")
        pwfile.chmod(0o600)
        try:
            self._as_postgres(
                str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                "--auth=scram-sha-256", f"--pwfile={pwfile}", "--no-sync", "-E", "UTF8",
            )  # fmt: skip
        finally:
            pwfile.unlink()
        self._write_hba()
        # libpq reads the passwords from here (PGPASSFILE), as from an operator's ~/.pgpass
        self.pgpass.write_text(
            f"{self.folder}:{PORT}:*:postgres:{self.super_password}\n"
            f"{self.folder}:{PORT}:*:{ROLE}:{self.role_password}\n",
            encoding="utf-8",
        )
        self.pgpass.chmod(0o600)

    def _write_hba(self) -> None:
        hba = self.data / "pg_hba.conf"
        hba.write_text(HBA.format(databases=",".join(self.databases)), encoding="utf-8")
        shutil.chown(hba, "postgres", "postgres")

    def start(self) -> None:
        log = self.log.open("ab")
        self.proc = subprocess.Popen(
            [
                str(self.bin / "postgres"), "-D", str(self.data),
                "-c", "listen_addresses=", "-c", f"unix_socket_directories={self.folder}",
                "-c", f"port={PORT}", "-c", "fsync=off", "-c", "full_page_writes=off",
                "-c", "max_connections=50", "-c", "log_min_messages=warning",
            ],
            user="postgres", group="postgres", stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True, cwd=self.folder,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the results test cluster exited ({self.proc.returncode}): {self.tail()}"
                )
            ready = subprocess.run(
                [str(self.bin / "pg_isready"), "-q", "-h", str(self.folder), "-p", str(PORT)],
                check=False,
            )
            if ready.returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"the results test cluster did not start in 30 s: {self.tail()}")

    def stop(self) -> None:
        """The postmaster this process started, by its PID: fast shutdown, then kill."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def tail(self) -> str:
        try:
            return " | ".join(self.log.read_text(errors="replace").splitlines()[-5:])
        except OSError:
            return "(no server log)"

    # ----------------------------------------------------------------- use

    def _as_postgres(self, *argv: str) -> None:
        proc = subprocess.run(
            list(argv), user="postgres", group="postgres", capture_output=True, text=True,
            check=False, timeout=120, cwd=self.folder, env={"LC_ALL": "C.UTF-8", "PATH": os.defpath},
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"{Path(argv[0]).name} failed: {proc.stderr.strip()[-500:]}")

    def uri(self, database: str = DATABASE, user: str = ROLE) -> str:
        """A URI as an operator gives ``--db``: no password in it."""
        return (
            f"postgresql://{user}@/{database}?host={quote(str(self.folder), safe='')}&port={PORT}"
        )

    def superuser(self, database: str = "postgres"):
        import psycopg  # noqa: PLC0415

        return psycopg.connect(self.uri(database, "postgres"), autocommit=True)

    def grant(self) -> None:
        with self.superuser() as conn:
            for sql in GRANTS:
                conn.execute(sql.format(role=ROLE, database=DATABASE, password=self.role_password))

    def new_database(self) -> str:
        """A new, empty database owned by the results role (one per test): its URI."""
        name = f"{DATABASE}_t{next(self._numbers)}"
        with self.superuser() as conn:
            conn.execute(f"CREATE DATABASE {name} OWNER {ROLE}")
            conn.execute(f"REVOKE ALL ON DATABASE {name} FROM PUBLIC")
            self.databases.append(name)
            self._write_hba()
            conn.execute("SELECT pg_reload_conf()")
        return self.uri(name)


@contextlib.contextmanager
def started() -> Iterator[Cluster]:
    folder = Path(tempfile.mkdtemp(prefix="drivelab-results-pg-", dir="/tmp"))
    cluster = Cluster(folder)
    old_pgpass = os.environ.get("PGPASSFILE")
    try:
        shutil.chown(folder, "postgres", "postgres")
        folder.chmod(0o755)
        cluster.init()
        cluster.start()
        os.environ["PGPASSFILE"] = str(cluster.pgpass)
        cluster.grant()
        yield cluster
    finally:
        try:
            cluster.stop()
        finally:
            if old_pgpass is None:
                os.environ.pop("PGPASSFILE", None)
            else:
                os.environ["PGPASSFILE"] = old_pgpass
            shutil.rmtree(folder, ignore_errors=True)
