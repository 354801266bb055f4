#!/usr/bin/python
"""The DB host's memory as PostgreSQL sees it: the cgroup v1/v2 memory limit of the
process (the lab's DB host runs in one) when lower than MemTotal, else MemTotal."""

from __future__ import annotations

import os

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: host_memory
short_description: memory available to this host's processes (cgroup limit or MemTotal)
options: {}
"""


def read(path):
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return None


def cgroup_limit():
    for line in (read("/proc/self/cgroup") or "").splitlines():
        hid, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            value = read(
                os.path.join("/sys/fs/cgroup/memory", path.lstrip("/"), "memory.limit_in_bytes")
            )
            if value and value.isdigit():
                return int(value), path
        if hid == "0" and controllers == "":
            value = read(os.path.join("/sys/fs/cgroup/unified", path.lstrip("/"), "memory.max"))
            value = value or read(os.path.join("/sys/fs/cgroup", path.lstrip("/"), "memory.max"))
            if value and value.isdigit():
                return int(value), path
    return None, None


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    total = 0
    for line in (read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            total = int(line.split()[1]) * 1024
    limit, path = cgroup_limit()
    if limit and limit < total:
        module.exit_json(
            changed=False,
            memory_bytes=limit,
            source=f"cgroup memory limit ({path})",
            mem_total_bytes=total,
        )
    module.exit_json(changed=False, memory_bytes=total, source="MemTotal", mem_total_bytes=total)


if __name__ == "__main__":
    main()
