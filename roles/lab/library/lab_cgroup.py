#!/usr/bin/python
"""The DB host's cgroup v1 groups: a memory limit and per-device blkio IOPS caps."""

from __future__ import annotations

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_lab import end_pids

DOCUMENTATION = r"""
module: lab_cgroup
short_description: drivelab lab cgroup v1 memory and blkio groups
options:
  name: {description: group name (drivelab-...), type: str, required: true}
  root: {description: cgroup v1 mount root, type: str, default: /sys/fs/cgroup}
  memory_limit: {description: memory.limit_in_bytes in bytes, type: int}
  throttle:
    description: the complete set of read and write IOPS caps, [{major_minor or device, iops or iops_cap}]; devices not listed are uncapped
    type: list
    elements: dict
    default: []
  state: {description: present or absent, type: str, default: present, choices: [present, absent]}
"""

PAGE = os.sysconf("SC_PAGE_SIZE")


def read(path):
    with open(path, encoding="ascii") as fh:
        return fh.read()


def write(path, value):
    with open(path, "w", encoding="ascii") as fh:
        fh.write(value)


def major_minor(device):
    st = os.stat(device)
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"


def rules(path):
    """{"7:3": 120} from a blkio.throttle.*_iops_device file."""
    out = {}
    for line in read(path).splitlines():
        dev, _, val = line.partition(" ")
        if val.strip().isdigit() and int(val) > 0:
            out[dev] = int(val)
    return out


def ensure_present(module, groups, memory_limit, throttle):
    changed = False
    for path in groups.values():
        if not os.path.isdir(path):
            changed = True
            if not module.check_mode:
                os.mkdir(path)
    if module.check_mode and changed:
        return True
    if memory_limit is not None:
        limit_file = os.path.join(groups["memory"], "memory.limit_in_bytes")
        want = memory_limit // PAGE * PAGE
        if int(read(limit_file)) != want:
            changed = True
            if not module.check_mode:
                write(limit_file, str(want))
    for direction in ("read", "write"):  # the same cap both ways, as a drive has
        path = os.path.join(groups["blkio"], f"blkio.throttle.{direction}_iops_device")
        want = {}
        for r in throttle:
            iops = int(r.get("iops") or r.get("iops_cap") or 0)
            if iops > 0:
                want[r.get("major_minor") or major_minor(r["device"])] = iops
        have = rules(path)
        for dev in set(have) | set(want):
            if have.get(dev) != want.get(dev):
                changed = True
                if not module.check_mode:
                    write(path, f"{dev} {want.get(dev, 0)}")
    return changed


def ensure_absent(module, groups):
    changed = False
    for path in groups.values():
        if not os.path.isdir(path):
            continue
        changed = True
        if module.check_mode:
            continue
        pids = [int(p) for p in read(os.path.join(path, "cgroup.procs")).split()]
        left = end_pids(pids)
        if left:
            module.fail_json(msg=f"cgroup {path}: processes {left} did not end")
        for _ in range(50):
            try:
                os.rmdir(path)
                break
            except OSError:
                time.sleep(0.1)
        else:
            module.fail_json(msg=f"cgroup {path}: could not remove it")
    return changed


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "root": {"type": "str", "default": "/sys/fs/cgroup"},
            "memory_limit": {"type": "int"},
            "throttle": {"type": "list", "elements": "dict", "default": []},
            "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not p["name"].startswith("drivelab"):
        module.fail_json(msg=f"cgroup {p['name']}: not a lab name (must start with drivelab)")
    groups = {c: os.path.join(p["root"], c, p["name"]) for c in ("memory", "blkio")}
    for ctl in groups:
        if not os.path.isdir(os.path.join(p["root"], ctl)):
            module.fail_json(msg=f"cgroup v1 controller {ctl} is not mounted at {p['root']}/{ctl}")
    if p["state"] == "present":
        changed = ensure_present(module, groups, p["memory_limit"], p["throttle"])
    else:
        changed = ensure_absent(module, groups)
    module.exit_json(changed=changed, groups=groups)


if __name__ == "__main__":
    main()
