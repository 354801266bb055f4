#!/usr/bin/python
"""The client databases of one cell where the cell wants them, in one module run: the
drive's filesystem must be mounted; for a tablespace placement the tablespace folder
and the tablespace on it; every drivelab database that is elsewhere (another drive's
tablespace) or of a client not in the cell dropped, each client's database made, owned
by its role; drivelab tablespaces left unused dropped (an unused tablespace would stop
its drive from being reformatted later). Returns the databases as they now are, with
their init markers (the role decides which need pgbench -i), and how many clients
run pgbench -i at once (``inits_at_once``): ``init_at_once`` when given, else (0) as
many as the memory that holds on this host allows beside the server's shared_buffers,
with maintenance_work_mem for each init's index builds (module_utils drivelab_memory;
its figures in ``init_memory``). First of all, before anything is changed, with
``sessions_per_client``: the cell's runs must fit in the connection slots the server
leaves to non-superusers (max_connections less superuser_reserved_connections and, from
PostgreSQL 16, reserved_connections), or every client past them fails to connect and
the run is partial (64 client hosts at -c 2 on the stock 100: 16 clients refused).

Eight tasks did this before, a module run each in every database stage
(docs/scaling.md, "Why the hot path is shaped as it is"). psql as postgres over the Unix
socket (module_utils drivelab_psql); names and paths go to psql as variables, never into
the SQL text. Only databases and tablespaces named drivelab_* are ever dropped."""

from __future__ import annotations

import os
import pwd
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_memory import inits_at_once, memory
from ansible.module_utils.drivelab_psql import PsqlError, json_value

DOCUMENTATION = r"""
module: drivelab_pg_place
short_description: a cell's client databases on its drive (tablespace or cluster placement)
options:
  port: {type: int, required: true, description: the running drivelab cluster's port}
  socket: {type: str, default: /var/run/postgresql, description: folder of the server's Unix socket}
  mount: {type: str, required: true, description: "the drive's mount point (must be mounted)"}
  placement: {type: str, choices: [tablespace, cluster], required: true, description: where the databases live}
  tablespace: {type: str, required: true, description: "the cell's tablespace name (drivelab_<fs>; tablespace placement)"}
  clients: {type: list, elements: str, required: true, description: "client hosts: database and role drivelab_<client> each"}
  init_at_once: {type: int, default: 0, description: "clients that run pgbench -i at once; 0: as many as the memory allows"}
  sessions_per_client: {type: int, default: 0, description: "pgbench -c of the cell's runs: refused when they do not fit; 0: not checked"}
"""

NAME = re.compile(r"^drivelab_[A-Za-z0-9_-]+$")

DBS = r"""
SELECT coalesce(json_agg(json_build_object(
         'datname', d.datname, 'spcname', t.spcname, 'owner', pg_get_userbyid(d.datdba),
         'marker', coalesce(shobj_description(d.oid, 'pg_database'), '')) ORDER BY d.datname), '[]')
FROM pg_database d JOIN pg_tablespace t ON t.oid = d.dattablespace
WHERE d.datname LIKE 'drivelab\_%'
"""
SPCS = r"""
SELECT coalesce(json_agg(json_build_object('spcname', spcname, 'location', pg_tablespace_location(oid))
         ORDER BY spcname), '[]')
FROM pg_tablespace WHERE spcname LIKE 'drivelab\_%'
"""
# in bytes (pg_settings gives shared_buffers in 8kB blocks, maintenance_work_mem in kB)
MEMORY_SETTINGS = r"""
SELECT json_object_agg(name, setting::bigint * CASE unit WHEN '8kB' THEN 8192 WHEN 'kB' THEN 1024
                                                        WHEN 'MB' THEN 1048576 ELSE 1 END)
FROM pg_settings WHERE name IN ('shared_buffers', 'maintenance_work_mem')
"""
# the slots non-superusers may take (reserved_connections exists from PostgreSQL 16)
SLOTS = r"""
SELECT json_object_agg(name, setting::int) FROM pg_settings
WHERE name IN ('max_connections', 'superuser_reserved_connections', 'reserved_connections')
"""
# each statement its own psql run (CREATE/DROP DATABASE and TABLESPACE refuse a
# transaction block); the result is a JSON value, so json_value reads it like a query
DONE = "\nSELECT 'true'"


class Cell:
    def __init__(self, module):
        self.module = module
        p = module.params
        self.port, self.socket = p["port"], p["socket"]

    def value(self, sql, **variables):
        return json_value(self.module, self.port, self.socket, sql, variables)

    def do(self, sql, **variables):
        self.value(sql + ";" + DONE, **variables)


def tablespace_folder(module, path):
    """<mount>/pg, owned by postgres, mode 0700; True when it had to be made or fixed."""
    pg = pwd.getpwnam("postgres")
    changed = False
    if not os.path.isdir(path):
        if module.check_mode:
            return True
        os.mkdir(path, 0o700)
        changed = True
    st = os.stat(path)
    if (st.st_uid, st.st_gid) != (pg.pw_uid, pg.pw_gid) or st.st_mode & 0o7777 != 0o700:
        if not module.check_mode:
            os.chown(path, pg.pw_uid, pg.pw_gid)
            os.chmod(path, 0o700)
        changed = True
    return changed


def fits(module, slots, hosts, per_client):
    """Fails the module unless ``hosts`` x ``per_client`` sessions fit in ``slots`` (the
    server's connection settings) beside the reserved ones."""
    reserved = slots.get("superuser_reserved_connections", 0) + slots.get("reserved_connections", 0)
    room = slots["max_connections"] - reserved
    if hosts * per_client > room:
        module.fail_json(
            msg=f"the cell's runs open {hosts * per_client} sessions at once ({hosts} client hosts x"
            f" {per_client} connections, -c) and the server takes {room} from them (max_connections"
            f" {slots['max_connections']} less {reserved} reserved): ask for fewer client hosts or"
            " connections, or raise max_connections in the cell's PostgreSQL settings"
        )


def main():
    module = AnsibleModule(
        argument_spec={
            "port": {"type": "int", "required": True},
            "socket": {"type": "str", "default": "/var/run/postgresql"},
            "mount": {"type": "str", "required": True},
            "placement": {"type": "str", "choices": ["tablespace", "cluster"], "required": True},
            "tablespace": {"type": "str", "required": True},
            "clients": {"type": "list", "elements": "str", "required": True},
            "init_at_once": {"type": "int", "default": 0},
            "sessions_per_client": {"type": "int", "default": 0},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["init_at_once"] < 0:
        module.fail_json(
            msg=f"pgbench_database_init_at_once: {p['init_at_once']}: must be 0 (as many as the"
            " DB host's memory allows) or how many clients run pgbench -i at once"
        )
    wanted = [f"drivelab_{c}" for c in p["clients"]]
    for name in [p["tablespace"], *wanted]:
        if not NAME.match(name):
            module.fail_json(
                msg=f"place: {name!r} is not a drivelab name (drivelab_ and letters, digits, _ or -)"
            )
    if not os.path.ismount(p["mount"]):
        module.fail_json(
            msg=f"{p['mount']} is not mounted: run the drives playbook for {os.path.basename(p['mount'])} first"
        )
    spc = p["tablespace"] if p["placement"] == "tablespace" else "pg_default"
    cell = Cell(module)
    done = []
    try:
        if p["sessions_per_client"] > 0:
            fits(module, cell.value(SLOTS), len(p["clients"]), p["sessions_per_client"])
        if p["placement"] == "tablespace":
            location = os.path.join(p["mount"], "pg")
            if tablespace_folder(module, location):
                done.append(f"folder {location}")
            spcs = {s["spcname"]: s for s in cell.value(SPCS)}
            if spc not in spcs:
                done.append(f"tablespace {spc}")
                if not module.check_mode:
                    cell.do("CREATE TABLESPACE :\"spc\" LOCATION :'loc'", spc=spc, loc=location)
            elif spcs[spc]["location"] != location:
                module.fail_json(
                    msg=f"tablespace {spc} is at {spcs[spc]['location']}, not {location}: release it first"
                )
        dbs = cell.value(DBS)
        # elsewhere (another drive's tablespace) or of a client not in this cell: dropped,
        # each client's data must live on the drive under test
        for db in dbs:
            if db["datname"] not in wanted or db["spcname"] != spc:
                done.append(f"dropped {db['datname']} ({db['spcname']})")
                if not module.check_mode:
                    cell.value(
                        "SELECT to_json(count(pg_terminate_backend(pid))) FROM pg_stat_activity"
                        " WHERE datname = :'db'",
                        db=db["datname"],
                    )
                    cell.do('DROP DATABASE IF EXISTS :"db"', db=db["datname"])
        kept = {d["datname"]: d for d in dbs if d["datname"] in wanted and d["spcname"] == spc}
        for name in wanted:
            if name not in kept:
                done.append(f"created {name}")
                if not module.check_mode:
                    where = ' TABLESPACE :"spc"' if p["placement"] == "tablespace" else ""
                    cell.do(f'CREATE DATABASE :"db" OWNER :"db"{where}', db=name, spc=spc)
            elif kept[name]["owner"] != name:
                done.append(f"owner of {name}")
                if not module.check_mode:
                    cell.do('ALTER DATABASE :"db" OWNER TO :"db"', db=name)
        # drivelab tablespaces this cell does not use, emptied above
        for other in cell.value(SPCS):
            if other["spcname"] != spc:
                done.append(f"dropped tablespace {other['spcname']}")
                if not module.check_mode:
                    cell.do('DROP TABLESPACE :"spc"', spc=other["spcname"])
        dbs = cell.value(DBS) if not module.check_mode else dbs
        settings = cell.value(MEMORY_SETTINGS)
    except PsqlError as err:
        module.fail_json(msg=f"place on {p['mount']}: {err}", done=done)
    held = memory()
    init_memory = {
        "memory_bytes": held["memory_bytes"],
        "memory_source": held["source"],
        "shared_buffers_bytes": settings["shared_buffers"],
        "maintenance_work_mem_bytes": settings["maintenance_work_mem"],
    }
    at_once = p["init_at_once"] or inits_at_once(
        held["memory_bytes"], settings["shared_buffers"], settings["maintenance_work_mem"],
        len(p["clients"]),
    )  # fmt: skip
    module.exit_json(
        changed=bool(done), done=done, databases=dbs, tablespace=spc,
        inits_at_once=at_once, init_memory=init_memory,
    )  # fmt: skip


if __name__ == "__main__":
    main()
