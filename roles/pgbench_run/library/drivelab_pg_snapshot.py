#!/usr/bin/python
"""A snapshot of a drivelab cluster's counters, read with psql in one module run: the
role's query (vars/main.yml ``__pgbench_run_stats_sql``: each client database's buffer
counters, the server's checkpoint, background writer, WAL and I/O views, its clock and
where it logs). After the run (``checkpoint_log``), the same module run also picks the
server log's checkpoint lines between the before snapshot's clock (``since``) and this
one's from the end of the log (module_utils drivelab_snapshot, drivelab_checkpointlog):
not a module run for the query and another for the log on the path of every repetition
(docs/scaling.md). After a synchronized run the start action's session to the DB host
runs the same code (module_utils drivelab_snapshot) and this module only when it could
not (action_plugins/drivelab_start.py).

The query comes from the role, never from an operator; a query that fails fails the
module with psql's last line. A log that cannot be read does not: ``log.problem`` says
why, and the run goes on."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_psql import PsqlError
from ansible.module_utils.drivelab_snapshot import snapshot

DOCUMENTATION = r"""
module: drivelab_pg_snapshot
short_description: the server's counters, and after a run the log's checkpoint lines since the before snapshot
options:
  port: {type: int, required: true, description: the cluster's port}
  socket: {type: path, default: /var/run/postgresql, description: folder of the server's Unix socket}
  sql: {type: str, required: true, description: "the role's snapshot query: one row, columns databases and server"}
  checkpoint_log: {type: bool, default: false, description: "also the log's checkpoint lines from since to this snapshot"}
  since: {type: float, required: false, description: "epoch seconds: the before snapshot's clock"}
  cluster: {type: str, required: false, description: "Debian cluster name (where pg_ctlcluster logs); with checkpoint_log"}
  major: {type: str, required: false, description: "PostgreSQL major version (9.6, 15: where pg_ctlcluster logs); with checkpoint_log"}
  max_bytes: {type: int, default: 16777216, description: read at most this much of the log's end}
"""


def main():
    module = AnsibleModule(
        argument_spec={
            "port": {"type": "int", "required": True},
            "socket": {"type": "path", "default": "/var/run/postgresql"},
            "sql": {"type": "str", "required": True},
            "checkpoint_log": {"type": "bool", "default": False},
            "since": {"type": "float", "required": False},
            "cluster": {"type": "str", "required": False},
            "major": {"type": "str", "required": False},
            "max_bytes": {"type": "int", "default": 16 * 1024 * 1024},
        },
        required_if=[("checkpoint_log", True, ("cluster", "major"))],
        supports_check_mode=True,
    )
    p = module.params
    try:
        out = snapshot(module, p)
    except PsqlError as err:
        module.fail_json(msg=f"snapshot of the server on port {p['port']}: {err}")
    module.exit_json(changed=False, **out)


if __name__ == "__main__":
    main()
