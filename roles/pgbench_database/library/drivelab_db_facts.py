#!/usr/bin/python
"""What a cell's database.json must carry from the DB host, in one module run: the size
of each drivelab database, the server's version and the settings that matter, the
cell's own settings as the server reports them, and the host's memory (its cgroup
limit in the lab, MemTotal on a real host). Read-only, but for ``marked``: the databases
pgbench -i has just filled get the init marker first (COMMENT ON DATABASE, in the same
psql session; not a module run of its own per client in every database stage).

Three community.postgresql queries and host_memory did this before, a module run each
(docs/scaling.md, "Why the hot path is shaped as it is"). psql as postgres over the Unix
socket (module_utils drivelab_psql); the names of the cell's settings go to psql as a
variable, never into the SQL text."""

from __future__ import annotations

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_memory import memory
from ansible.module_utils.drivelab_psql import PsqlError, json_value

DOCUMENTATION = r"""
module: drivelab_db_facts
short_description: database sizes, server version and settings, the cell's settings and the host's memory
options:
  port: {type: int, required: true, description: the running drivelab cluster's port}
  socket: {type: str, default: /var/run/postgresql, description: folder of the server's Unix socket}
  settings: {type: list, elements: str, default: [], description: "the cell's own settings, to read as the server reports them"}
  marked: {type: list, elements: str, default: [], description: "databases to give the init marker (pgbench -i has filled them)"}
  marker: {type: str, default: "", description: the init marker (the comment on each of marked)}
"""

#: what the run records of the server (database.json's postgresql.version and settings)
MATTERS = (
    "server_version", "shared_buffers", "fsync", "synchronous_commit", "full_page_writes",
    "checkpoint_timeout", "max_wal_size", "min_wal_size", "checkpoint_completion_target",
    "wal_buffers", "wal_sync_method", "max_connections", "effective_cache_size",
    "data_directory",
)  # fmt: skip

QUERY = r"""
SELECT json_build_object(
  'sizes', (SELECT coalesce(json_agg(json_build_object('datname', datname,
                                                       'bytes', pg_database_size(datname))
                                     ORDER BY datname), '[]')
            FROM pg_database WHERE datname LIKE 'drivelab\_%'),
  'settings', (SELECT coalesce(json_agg(json_build_object('name', name, 'value', current_setting(name))
                                        ORDER BY name), '[]')
               FROM pg_settings WHERE name = ANY(string_to_array(:'matters', ','))),
  'applied', (SELECT coalesce(json_agg(json_build_object('name', lower(name), 'value', current_setting(name))
                                       ORDER BY name), '[]')
              FROM pg_settings WHERE lower(name) = ANY(string_to_array(:'names', ','))))
"""


def wal_device(datadir):
    """Where the cluster's WAL lives, as a device: its folder (``pg_wal``, a link to
    another drive's folder after initdb --waldir), the filesystem's device numbers, the
    block device they name (None on one that is not a block device: an overlay, tmpfs)
    and the mount point above the folder."""
    if not datadir:
        return None
    path = os.path.realpath(os.path.join(datadir, "pg_wal"))
    try:
        st = os.stat(path)
    except OSError:
        return None
    majmin = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    try:
        device = "/dev/" + os.path.basename(os.readlink(f"/sys/dev/block/{majmin}"))
    except OSError:
        device = None
    mount = None
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            point = line.split(" - ")[0].split()[4].replace("\\040", " ")
            inside = (path.rstrip("/") + "/").startswith(point.rstrip("/") + "/")
            if inside and (mount is None or len(point) >= len(mount)):
                mount = point
    return {"path": path, "majmin": majmin, "device": device, "mount": mount}


def main():
    module = AnsibleModule(
        argument_spec={
            "port": {"type": "int", "required": True},
            "socket": {"type": "str", "default": "/var/run/postgresql"},
            "settings": {"type": "list", "elements": "str", "default": []},
            "marked": {"type": "list", "elements": "str", "default": []},
            "marker": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    names = ",".join(n.lower() for n in p["settings"])
    variables = {"matters": ",".join(MATTERS), "names": names}
    marked = [] if module.check_mode or not p["marker"] else p["marked"]
    sql = QUERY
    if marked:
        # names and the marker go to psql as variables (:"db0" an identifier, :'marker'
        # a literal), never into the SQL text; psql -q prints no command tags
        variables["marker"] = p["marker"]
        lines = []
        for i, datname in enumerate(marked):
            variables[f"db{i}"] = datname
            lines.append(f"COMMENT ON DATABASE :\"db{i}\" IS :'marker';")
        sql = "\n".join(lines) + "\n" + QUERY
    try:
        facts = json_value(module, p["port"], p["socket"], sql, variables)
    except PsqlError as err:
        module.fail_json(msg=f"database facts, cluster on port {p['port']}: {err}")
    datadir = next(
        (s["value"] for s in facts.get("settings") or () if s["name"] == "data_directory"), None
    )
    module.exit_json(changed=bool(marked), marked=marked, wal_device=wal_device(datadir), **facts,
                     **memory())  # fmt: skip


if __name__ == "__main__":
    main()
