"""How many clients run pgbench -i at once (module_utils drivelab_memory, used by the
module drivelab_pg_place): as many as the DB host's memory allows beside shared_buffers,
2 x maintenance_work_mem per init; one at a time where two index builds would not fit."""

from __future__ import annotations

import pytest

from tests.unit.hostcode import library_module, module_util

MiB = 1024**2
GiB = 1024**3
#: PostgreSQL's stock defaults, which drivelab keeps
SHARED_BUFFERS = 128 * MiB
MAINTENANCE_WORK_MEM = 64 * MiB


@pytest.mark.parametrize(
    ("memory", "clients", "expected"),
    [
        # the lab's small DB hosts (test_telemetry, the datasets test): one at a time;
        # two builds at once in 256 MiB had a backend killed by the cgroup's OOM killer
        (256 * MiB, 2, 1),
        (300 * MiB, 2, 1),
        # the lab's standard 512 MiB DB host: both of its clients at once, three of four
        (512 * MiB, 2, 2),
        (512 * MiB, 4, 3),
        # a real host: every client at once
        (64 * GiB, 32, 32),
        # less memory than shared_buffers: still one (the server would not be up otherwise)
        (96 * MiB, 2, 1),
    ],
)
def test_inits_at_once_follows_the_memory_that_holds(memory, clients, expected):
    mem = module_util("drivelab", "drivelab_memory")
    assert mem.inits_at_once(memory, SHARED_BUFFERS, MAINTENANCE_WORK_MEM, clients) == expected


def test_a_larger_maintenance_work_mem_means_fewer_at_once():
    mem = module_util("drivelab", "drivelab_memory")
    assert mem.inits_at_once(4 * GiB, SHARED_BUFFERS, 64 * MiB, 16) == 16
    assert mem.inits_at_once(4 * GiB, SHARED_BUFFERS, 1 * GiB, 16) == 1


def test_init_facts_keep_when_each_init_ran():
    from collector.ansible_plugins.filter.drivelab import drivelab_init_facts  # noqa: PLC0415

    ran = {"delta": "0:00:02.500000", "rc": 0, "start": "2026-11-29 11:52:03.100000",
           "end": "2026-11-29 11:52:05.600000"}  # fmt: skip
    facts = drivelab_init_facts({"client1": ran, "client2": {"skipped": True}}, True)
    assert facts["client1"] == {
        "ran": True, "seconds": 2.5, "rc": 0, "caps_lifted": True,
        "start": "2026-11-29 11:52:03.100000", "end": "2026-11-29 11:52:05.600000",
    }  # fmt: skip
    assert facts["client2"]["start"] is None and not facts["client2"]["ran"]


def test_a_negative_init_at_once_is_refused_in_one_line_before_anything(tmp_path):
    """The place module itself (run as Ansible runs it, ad hoc on this machine) refuses
    pgbench_database_init_at_once below 0, naming it, before it looks at the mount or
    the server."""
    import json  # noqa: PLC0415
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    repo = Path(__file__).resolve().parents[2]
    args = {"port": 5440, "mount": str(tmp_path / "not-mounted"), "placement": "tablespace",
            "tablespace": "drivelab_nvme", "clients": ["client1"], "init_at_once": -1}  # fmt: skip
    env = dict(
        os.environ, ANSIBLE_CONFIG=str(repo / "ansible.cfg"), ANSIBLE_LOAD_CALLBACK_PLUGINS="0"
    )
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local", "-o",
         "-M", str(repo / "roles/pgbench_database/library"), "-m", "drivelab_pg_place",
         "-a", json.dumps(args)],
        cwd=repo, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    # the mount does not exist either: a module that looked at it first would say that
    assert proc.returncode != 0, proc.stdout
    assert "pgbench_database_init_at_once: -1: must be 0" in proc.stdout, proc.stdout + proc.stderr
    assert "is not mounted" not in proc.stdout, proc.stdout


class _Refused(Exception):
    pass


class _Module:
    """What ``fits`` asks of an AnsibleModule: fail_json, which ends the module."""

    def fail_json(self, msg: str) -> None:
        raise _Refused(msg)


@pytest.mark.parametrize(
    ("slots", "hosts", "per_client", "refused"),
    [
        # PostgreSQL 15's stock 100 with 3 for superusers: 97 for the clients
        ({"max_connections": 100, "superuser_reserved_connections": 3}, 2, 48, None),
        ({"max_connections": 100, "superuser_reserved_connections": 3}, 97, 1, None),
        (
            {"max_connections": 100, "superuser_reserved_connections": 3}, 64, 2,
            "128 sessions at once (64 client hosts x 2 connections, -c) and the server takes"
            " 97 from them (max_connections 100 less 3 reserved)",
        ),
        # PostgreSQL 16's reserved_connections counts too
        ({"max_connections": 100, "superuser_reserved_connections": 3,
          "reserved_connections": 5}, 4, 23, None),
        (
            {"max_connections": 100, "superuser_reserved_connections": 3,
             "reserved_connections": 5}, 3, 31,
            "93 sessions at once (3 client hosts x 31 connections, -c) and the server takes"
            " 92 from them (max_connections 100 less 8 reserved)",
        ),
    ],
)  # fmt: skip
def test_a_cells_sessions_must_fit_in_the_servers_slots(slots, hosts, per_client, refused):
    module_util("drivelab", "drivelab_memory")  # it imports them from ansible.module_utils
    module_util("drivelab", "drivelab_psql")
    place = library_module("pgbench_database", "drivelab_pg_place")
    if refused is None:
        place.fits(_Module(), slots, hosts, per_client)
        return
    with pytest.raises(_Refused) as err:
        place.fits(_Module(), slots, hosts, per_client)
    assert refused in str(err.value)
    assert str(err.value).endswith("or raise max_connections in the cell's PostgreSQL settings")
