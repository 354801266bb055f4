#!/usr/bin/python
"""The lab's cliff watcher: a daemon of the lab machine that sets the write IOPS cap of
each cliff-class drive as its debt says (module_utils drivelab_cliff, which is also its
program). Started by lab up where the lab has such drives, ended by its pid otherwise
and at lab down (lab_teardown knows its pidfile)."""

from __future__ import annotations

import json
import os
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_cgroup import CgroupError, choose
from ansible.module_utils.drivelab_lab import end_pids, pid_alive

DOCUMENTATION = r"""
module: lab_cliff
short_description: the lab's cliff watcher (write caps of the cliff-class drives)
options:
  dir: {description: its folder (config, state, pidfile, log); the path must contain drivelab, type: str, required: true}
  program: {description: the watcher's program (a copy of module_utils drivelab_cliff), type: str, required: true}
  group: {description: the DB host's cgroup, type: str, required: true}
  hierarchy: {description: v1 or v2, type: str, required: true, choices: [v1, v2]}
  root: {description: the cgroup mount, type: str, default: /sys/fs/cgroup}
  drives:
    description: >-
      the lab's drives, each {name, class, major_minor} or lab_loop's result {item: {name, class}, major_minor};
      those of a class with a cliff are watched, none ends the watcher
    type: list
    elements: dict
    default: []
  classes: {description: "the lab's drive classes, {name: {iops, cliff: {after_bytes, iops}}}", type: dict, default: {}}
  restart: {description: restart a running watcher (its program changed), type: bool, default: false}
"""

NAME = "drivelab-cliff"


def running(pidfile):
    """The watcher's pid, if its pidfile names a live process of that name."""
    try:
        with open(pidfile, encoding="ascii") as fh:
            pid = int(fh.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv0 = fh.read().split(b"\0")[0]
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) and argv0 == NAME.encode() else None


def start(program, config_path, pidfile, log):
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [NAME, program, config_path], executable="/usr/bin/python3",
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
        )  # fmt: skip
    time.sleep(0.3)
    if proc.poll() is not None:
        return None
    with open(pidfile, "w", encoding="ascii") as fh:
        fh.write(f"{proc.pid}\n")
    return proc.pid


def cliff_drives(module, drives, classes):
    """The watched drives: those whose class has a cliff, with its two caps and mark."""
    out = []
    for r in drives:
        d = {**r.get("item", {}), **r}
        c = classes.get(d.get("class"), {})
        if not isinstance(c, dict) or "cliff" not in c:
            continue
        try:
            out.append({
                "name": d["name"], "major_minor": d["major_minor"], "iops": int(c["iops"]),
                "after_bytes": int(c["cliff"]["after_bytes"]), "iops_after": int(c["cliff"]["iops"]),
            })  # fmt: skip
        except (KeyError, TypeError, ValueError):
            module.fail_json(
                msg=f"lab_cliff: drive {d.get('name', '?')} of class {d.get('class')}: needs"
                " major_minor, and its class iops and cliff {after_bytes, iops}"
            )
    return out


def main():
    module = AnsibleModule(
        argument_spec={
            "dir": {"type": "str", "required": True},
            "program": {"type": "str", "required": True},
            "group": {"type": "str", "required": True},
            "hierarchy": {"type": "str", "required": True, "choices": ["v1", "v2"]},
            "root": {"type": "str", "default": "/sys/fs/cgroup"},
            "drives": {"type": "list", "elements": "dict", "default": []},
            "classes": {"type": "dict", "default": {}},
            "restart": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    if "drivelab" not in p["dir"] or not p["group"].startswith("drivelab"):
        module.fail_json(msg=f"lab_cliff: {p['dir']} or {p['group']} is not the lab's own")
    pidfile = os.path.join(p["dir"], "watcher.pid")
    config_path = os.path.join(p["dir"], "config.json")
    pid = running(pidfile)
    drives = cliff_drives(module, p["drives"], p["classes"])
    if not drives:
        if pid and not module.check_mode:
            end_pids([pid])
        module.exit_json(changed=bool(pid), pid=None)
    try:
        h = choose(p["root"], p["hierarchy"])
    except CgroupError as err:
        module.fail_json(msg=str(err))
    config = {
        "group": p["group"], "hierarchy": h.describe(), "state": os.path.join(p["dir"], "state.json"),
        "drives": drives,
    }  # fmt: skip
    text = json.dumps(config, indent=1, sort_keys=True) + "\n"
    try:
        with open(config_path, encoding="utf-8") as fh:
            same = fh.read() == text
    except OSError:
        same = False
    if pid and same and not p["restart"]:
        module.exit_json(changed=False, pid=pid, config=config_path)
    if module.check_mode:
        module.exit_json(changed=True)
    if pid:
        end_pids([pid])
    with open(config_path + ".tmp", "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(config_path + ".tmp", config_path)
    log = os.path.join(p["dir"], "watcher.log")
    pid = start(p["program"], config_path, pidfile, log)
    if pid is None:
        with open(log, encoding="utf-8", errors="replace") as fh:
            tail = fh.read().strip().splitlines()[-1:] or ["no output"]
        module.fail_json(msg=f"lab_cliff: the watcher ended at once: {tail[0]} (log {log})")
    module.exit_json(changed=True, pid=pid, config=config_path)


if __name__ == "__main__":
    main()
