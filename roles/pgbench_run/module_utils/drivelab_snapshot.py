"""A drivelab cluster's counters read with psql in one call (the role's query: each
client database's buffer counters, the server's views, its clock and where it logs)
and, after a run (``checkpoint_log``), the server log's checkpoint lines between the
before snapshot's clock (``since``) and this one's.

Run on the DB host two ways, the same code: by the module drivelab_pg_snapshot, and
by the start action's session to the DB host, which python3 there runs once every
client's outputs are in (action_plugins/drivelab_start.py sends this file and the two it
imports), so the counters after a run need no module run of their own."""

from __future__ import annotations

from ansible.module_utils.drivelab_checkpointlog import checkpoint_lines
from ansible.module_utils.drivelab_psql import json_row

#: the parameters of :func:`snapshot` and their defaults (the module's options)
DEFAULTS = {
    "socket": "/var/run/postgresql",
    "checkpoint_log": False,
    "since": None,
    "cluster": None,
    "major": None,
    "max_bytes": 16 * 1024 * 1024,
}


def snapshot(runner, params):
    """``{"snapshot": row}``, and with ``checkpoint_log`` ``"log"`` (checkpoint_lines'
    dict). ``runner`` has AnsibleModule's ``run_command``; ``params``: ``port``,
    ``sql`` and :data:`DEFAULTS`' keys. Raises PsqlError when the query fails; a log
    that cannot be read is the log's ``problem``, not a failure."""
    p = {**DEFAULTS, **params}
    row = json_row(runner, p["port"], p["socket"], p["sql"])
    out = {"snapshot": row}
    if p["checkpoint_log"]:
        server = row["server"]
        out["log"] = checkpoint_lines(
            p["major"],
            p["cluster"],
            p["since"],
            server["at"],
            logfile=server.get("logfile"),
            data_directory=server.get("data_directory"),
            timezone=server.get("log_timezone") or "UTC",
            line_prefix=server.get("log_line_prefix"),
            max_bytes=p["max_bytes"],
        )
    return out
