"""The memory available to this host's processes, as PostgreSQL sees it: the cgroup
v1/v2 memory limit of the process (the lab's DB host runs in one) when lower than
MemTotal, else MemTotal (modules host_memory and drivelab_environment)."""

from __future__ import annotations

import os


def read(path):
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _lowest(base, path, name):
    """The lowest numeric ``name`` file of the group ``path`` and its ancestors under
    ``base`` (a limit on a parent holds for every group below it), with its group."""
    best = (None, None)
    parts = [x for x in path.strip("/").split("/") if x]
    for depth in range(len(parts), -1, -1):
        group = "/" + "/".join(parts[:depth])
        value = read(os.path.join(base, *parts[:depth], name))
        if value and value.isdigit() and (best[0] is None or int(value) < best[0]):
            best = (int(value), group)
    return best


def cgroup_limit():
    """(bytes, where) of this process's memory limit: cgroup v1 memory.limit_in_bytes or
    v2 memory.max, the lowest on its group's path; (None, None) without one."""
    for line in (read("/proc/self/cgroup") or "").splitlines():
        hid, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            limit, group = _lowest("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes")
            if limit is not None:
                return limit, f"cgroup v1 {group}"
    for line in (read("/proc/self/cgroup") or "").splitlines():
        hid, controllers, path = line.split(":", 2)
        if hid == "0" and controllers == "":
            for base in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
                if os.path.isfile(os.path.join(base, "cgroup.controllers")):
                    limit, group = _lowest(base, path, "memory.max")
                    if limit is not None:
                        return limit, f"cgroup v2 {group}"
    return None, None


def memory():
    """{memory_bytes, source, mem_total_bytes}: the limit that holds, and where from."""
    total = 0
    for line in (read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            total = int(line.split()[1]) * 1024
    limit, path = cgroup_limit()
    if limit and limit < total:
        source = f"cgroup memory limit ({path})"
        return {"memory_bytes": limit, "source": source, "mem_total_bytes": total}
    return {"memory_bytes": total, "source": "MemTotal", "mem_total_bytes": total}


def inits_at_once(memory_bytes, shared_buffers_bytes, maintenance_work_mem_bytes, clients):
    """How many clients may run pgbench -i against this server at the same time: each
    init ends in index builds that take up to maintenance_work_mem, beside the server's
    shared_buffers, in the memory that holds (:func:`memory`). Twice maintenance_work_mem
    per init leaves room for the init's COPY and its backend; at least 1, at most
    ``clients``. The lab's 256 and 300 MiB DB hosts (shared_buffers 128 MB,
    maintenance_work_mem 64 MB) get 1, its 512 MiB one 3: two builds at once in 256 MiB
    had a backend killed by the cgroup's OOM killer."""
    clients = max(1, int(clients))
    per_init = 2 * max(1, int(maintenance_work_mem_bytes))
    room = int(memory_bytes) - int(shared_buffers_bytes)
    return max(1, min(clients, room // per_init))
