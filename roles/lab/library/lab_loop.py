#!/usr/bin/python
"""A lab drive: a sparse backing file attached to a loop device with direct I/O."""

from __future__ import annotations

import json
import os
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_lab import LabError, run

DOCUMENTATION = r"""
module: lab_loop
short_description: A drivelab lab drive (sparse file + loop device, --direct-io=on)
options:
  path: {description: backing file; must lie in a drivelab folder, type: str, required: true}
  size: {description: size in bytes, type: int}
  iops: {description: emulated IOPS cap, echoed back for the cgroup task (0 = none), type: int, default: 0}
  state: {description: present or absent, type: str, default: present, choices: [present, absent]}
"""


def attached(path):
    """Loop devices currently backed by path: [{"name": "/dev/loop3", "dio": True}, ...]."""
    rc, out, _ = run(["losetup", "-J", "-l", "-O", "NAME,BACK-FILE,DIO"], check=False)
    if rc != 0 or not out.strip():
        return []
    real = os.path.realpath(path)
    found = []
    for dev in json.loads(out).get("loopdevices", []):
        back = (dev.get("back-file") or "").removesuffix(" (deleted)")
        if back and os.path.realpath(back) == real:
            found.append({"name": dev["name"], "dio": dev.get("dio") in (True, "1", 1)})
    return found


def describe(dev):
    st = os.stat(dev["name"])
    return {
        "device": dev["name"],
        "major_minor": f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}",
        "direct_io": dev["dio"],
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "str", "required": True},
            "size": {"type": "int"},
            "iops": {"type": "int", "default": 0},
            "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
        },
        required_if=[("state", "present", ("size",))],
        supports_check_mode=True,
    )
    path, size = module.params["path"], module.params["size"]
    if "/drivelab" not in os.path.realpath(path):
        module.fail_json(msg=f"drive file {path}: not in a drivelab folder, refusing")
    changed = False
    try:
        devs = attached(path)
        if module.params["state"] == "absent":
            for dev in devs:
                changed = True
                if not module.check_mode:
                    run(["losetup", "-d", dev["name"]])
            if os.path.exists(path):
                changed = True
                if not module.check_mode:
                    os.unlink(path)
            module.exit_json(changed=changed)
        if os.path.exists(path):
            if not stat.S_ISREG(os.stat(path).st_mode):
                module.fail_json(msg=f"drive file {path}: exists and is not a regular file")
            have = os.path.getsize(path)
            if have != size:
                module.fail_json(
                    msg=f"drive file {path}: is {have} bytes, asked for {size}; "
                    "run 'drivelab lab down' to change drive sizes"
                )
        else:
            changed = True
            if module.check_mode:
                module.exit_json(changed=True)
            with open(path, "wb") as fh:
                fh.truncate(size)
        if not devs:
            changed = True
            if module.check_mode:
                module.exit_json(changed=True)
            run(["losetup", "--find", "--direct-io=on", path])
            devs = attached(path)
            if not devs:
                raise LabError("attached, but losetup does not list it")
    except LabError as err:
        module.fail_json(msg=f"drive file {path}: {err}")
    module.exit_json(changed=changed, path=path, iops=module.params["iops"], **describe(devs[0]))


if __name__ == "__main__":
    main()
