"""One JSON value from a drivelab cluster, read with psql as postgres over the server's
Unix socket: psql is PostgreSQL's own client, on every DB host, so no driver is needed.
Used by the modules on the path of every repetition, each of which reads the server in
the module run it does anyway (not a module run of its own, community.postgresql's
query, per reading: docs/scaling.md): drivelab_environment (the settings, and the
snapshot before the run) and drivelab_pg_snapshot (the snapshot after it)."""

from __future__ import annotations

import json


class PsqlError(Exception):
    """psql failed: the message is its last line on stderr (else its exit code)."""


def json_value(module, port, socket, sql, variables=None):
    """The value of ``sql``, a query whose one row has one column of JSON text, as
    Python. ``variables`` become psql variables (``-v name=value``; in the SQL
    ``:'name'``), so no value is ever put into the SQL text."""
    argv = ["runuser", "-u", "postgres", "--", "psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
            "-h", socket, "-p", str(port), "-d", "postgres"]  # fmt: skip
    for name, value in (variables or {}).items():
        argv += ["-v", f"{name}={value}"]
    argv += ["-f", "-"]
    rc, out, err = module.run_command(argv, data=sql, environ_update={"LC_ALL": "C"})
    if rc != 0:
        lines = [ln.strip() for ln in (err or "").splitlines() if ln.strip()]
        raise PsqlError(lines[-1] if lines else f"psql exit {rc}")
    try:
        return json.loads(out)
    except ValueError as err:
        raise PsqlError(f"psql said no JSON value: {out.strip()[:200]!r}") from err


def json_row(module, port, socket, sql, variables=None):
    """The one row of ``sql`` (any columns) as a dict of column: value, a JSON column
    as Python (as a driver would give it)."""
    # the role's own query, wrapped: no operator's value is ever in it
    wrapped = f"SELECT row_to_json(q) FROM (\n{sql}\n) q"  # noqa: S608
    return json_value(module, port, socket, wrapped, variables)
