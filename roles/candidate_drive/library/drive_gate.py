#!/usr/bin/python
"""The safety gate for candidate drives: refuses, naming the device and the reason,
anything drivelab must not format. Reads only; runs the same in check mode."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_gate import (
    Refusal,
    check,
    own_marks,
    own_records,
    pg_paths,
    probe_drives,
)

DOCUMENTATION = r"""
module: drive_gate
short_description: drivelab's safety gate for candidate drives (read-only)
options:
  drives: {description: names of the drives to check, type: list, elements: str, required: true}
  inventory: {description: the DB host's candidate_drives, type: list, elements: dict, required: true}
  min_size: {description: smallest size in bytes the scenario needs, type: int, default: 0}
  protected_paths: {description: more paths whose devices must never be touched, type: list, elements: str, default: []}
  state_dir: {description: where drivelab records the filesystems it made, type: path, required: true}
  mount_root: {description: drivelab's own mount points live here, type: path, required: true}
"""


def main():
    module = AnsibleModule(
        argument_spec={
            "drives": {"type": "list", "elements": "str", "required": True},
            "inventory": {"type": "list", "elements": "dict", "required": True},
            "min_size": {"type": "int", "default": 0},
            "protected_paths": {"type": "list", "elements": "str", "default": []},
            "state_dir": {"type": "path", "required": True},
            "mount_root": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    own_uuids, own_mounts = own_marks(own_records(p["state_dir"]), p["mount_root"])
    protected = pg_paths() + p["protected_paths"]
    facts, refusals = [], []
    names = list(dict.fromkeys(p["drives"]))
    # the read-only probes of every drive at once, then the checks one by one
    probed = probe_drives(names, p["inventory"])
    for name in names:
        try:
            facts.append(
                check(
                    name,
                    p["inventory"],
                    min_size=p["min_size"],
                    protected_paths=protected,
                    own_uuids=own_uuids,
                    own_mounts=own_mounts,
                    mount_root=p["mount_root"],
                    probed=probed,
                )
            )
        except Refusal as err:
            refusals.append(str(err))
        except Exception as err:  # a probe that errors is a refusal
            refusals.append(
                f"drive {name}: the gate's probe failed ({err.__class__.__name__}: {err})"
            )
    if refusals:
        module.fail_json(msg="refused: " + "; ".join(refusals), refusals=refusals, passed=facts)
    module.exit_json(changed=False, drives=facts)


if __name__ == "__main__":
    main()
