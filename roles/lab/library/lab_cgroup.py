#!/usr/bin/python
"""The DB host's cgroup: a memory limit and per-device read/write IOPS caps, on cgroup v1
(memory and blkio controllers) or v2 (memory.max, io.max), whichever the machine has."""

from __future__ import annotations

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_cgroup import (
    CgroupError,
    Cgroupfs,
    choose,
    ensure,
    remove,
    want_caps,
)
from ansible.module_utils.drivelab_lab import end_pids

DOCUMENTATION = r"""
module: lab_cgroup
short_description: drivelab lab DB host cgroup (v1 memory and blkio, or v2 memory and io)
options:
  name: {description: group name (drivelab-...), type: str, required: true}
  root: {description: where cgroups are mounted, type: str, default: /sys/fs/cgroup}
  hierarchy:
    description: auto (v1 where its memory and blkio controllers are mounted, else v2), or insist on v1 or v2
    type: str
    default: auto
    choices: [auto, v1, v2]
  memory_limit: {description: the memory limit in bytes, type: int}
  throttle:
    description: the complete set of read and write IOPS caps, [{major_minor or device, iops or iops_cap}]; devices not listed are uncapped
    type: list
    elements: dict
    default: []
  state:
    description: present, absent, or query (only say which hierarchy would be used, or fail saying why none can)
    type: str
    default: present
    choices: [present, absent, query]
"""
RETURN = r"""
hierarchy: {description: "{kind: v1 or v2, root: the mount used}", type: dict, returned: always}
dirs: {description: the group folders a process joins, type: list, returned: always}
"""


def major_minor(device):
    st = os.stat(device)
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "root": {"type": "str", "default": "/sys/fs/cgroup"},
            "hierarchy": {"type": "str", "default": "auto", "choices": ["auto", "v1", "v2"]},
            "memory_limit": {"type": "int"},
            "throttle": {"type": "list", "elements": "dict", "default": []},
            "state": {
                "type": "str",
                "default": "present",
                "choices": ["present", "absent", "query"],
            },
        },
        supports_check_mode=True,
    )
    p = module.params
    if not p["name"].startswith("drivelab") or "/" in p["name"]:
        module.fail_json(msg=f"cgroup {p['name']}: not a lab name (must start with drivelab)")
    fs = Cgroupfs()
    try:
        h = choose(p["root"], p["hierarchy"])
        if p["state"] == "query":
            changed = False
        elif p["state"] == "present":
            caps = want_caps(p["throttle"], major_minor)
            changed = ensure(
                fs, h, p["name"], p["memory_limit"], caps, check_mode=module.check_mode
            )
        else:
            changed = remove(fs, h, p["name"], end_pids, check_mode=module.check_mode)
    except CgroupError as err:
        module.fail_json(msg=str(err), writes=fs.log)
    module.exit_json(changed=changed, hierarchy=h.describe(), dirs=h.dirs(p["name"]), writes=fs.log)


if __name__ == "__main__":
    main()
