#!/usr/bin/python
"""Makes (or removes) drivelab's own filesystem on candidate drives: ext4, XFS, Btrfs
(single or RAID 0/1/10 across drives), or md RAID with any of them on top.

Runs the gate again right before wipefs/mkfs/mdadm, and touches nothing unless every
member passes. Records what it made (UUID, filesystem, options, members) in state_dir:
that record plus the drivelab label is the "own marker" that lets a later run reuse or
remove the filesystem without wipe: true.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_gate import (
    Refusal,
    check,
    mounts,
    own_marks,
    own_records,
    pg_paths,
    signatures,
)

DOCUMENTATION = r"""
module: drive_format
short_description: drivelab's own filesystem on candidate drives (gated)
options:
  name: {description: filesystem name (a drive or a RAID set), type: str, required: true}
  members: {description: drive names it spans, type: list, elements: str, required: true}
  inventory: {description: the DB host's candidate_drives, type: list, elements: dict, required: true}
  fs: {description: ext4, xfs or btrfs, type: str, choices: [ext4, xfs, btrfs], default: ext4}
  mkfs_options: {description: extra mkfs arguments, type: list, elements: str, default: []}
  raid_level: {description: raid0, raid1, raid5 or raid10 (none for one drive), type: str, default: none}
  raid_method: {description: btrfs (native) or mdadm, type: str, choices: [btrfs, mdadm], default: btrfs}
  min_size: {description: smallest member size in bytes the scenario needs, type: int, default: 0}
  protected_paths: {description: more paths whose devices are never touched, type: list, elements: str, default: []}
  state_dir: {description: where drivelab records what it made, type: path, required: true}
  mount_root: {description: drivelab's mount points live here, type: path, required: true}
  state: {description: present or absent, type: str, choices: [present, absent], default: present}
"""

LABEL_MAX = {"ext4": 16, "xfs": 12, "btrfs": 255}


def sh(argv):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise Refusal(f"{' '.join(argv)}: {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


def write_record(state_dir, rec):
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=state_dir, prefix=".rec.")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(rec, fh, indent=2)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, os.path.join(state_dir, f"{rec['name']}.json"))


def unmount(point):
    for _ in range(50):
        if point not in [m[0] for m in mounts()]:
            return
        proc = subprocess.run(["umount", point], capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            continue
        time.sleep(0.1)
    raise Refusal(f"{point}: could not unmount it (busy?)")


def md_path(name):
    return f"/dev/md/drivelab-{name}"


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "members": {"type": "list", "elements": "str", "required": True},
            "inventory": {"type": "list", "elements": "dict", "required": True},
            "fs": {"type": "str", "choices": ["ext4", "xfs", "btrfs"], "default": "ext4"},
            "mkfs_options": {"type": "list", "elements": "str", "default": []},
            "raid_level": {"type": "str", "default": "none"},
            "raid_method": {"type": "str", "choices": ["btrfs", "mdadm"], "default": "btrfs"},
            "min_size": {"type": "int", "default": 0},
            "protected_paths": {"type": "list", "elements": "str", "default": []},
            "state_dir": {"type": "path", "required": True},
            "mount_root": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        },
        supports_check_mode=True,
    )
    p = module.params
    name, members, fs, level = p["name"], p["members"], p["fs"], p["raid_level"]
    point = os.path.join(p["mount_root"], name)
    recs = own_records(p["state_dir"])
    own_uuids, own_mounts = own_marks(recs, p["mount_root"])
    protected = pg_paths() + p["protected_paths"]
    label = f"drivelab-{name}"[: LABEL_MAX[fs]]
    want = {
        "name": name,
        "members": members,
        "fs": fs,
        "mkfs_options": p["mkfs_options"],
        "raid_level": level,
        "raid_method": p["raid_method"] if level != "none" else "none",
    }
    try:
        if level != "none" and p["raid_method"] == "mdadm" and not os.path.exists("/proc/mdstat"):
            reason = f"{name}: md RAID is not available here (no /proc/mdstat): skipped"
            module.warn(reason)
            module.exit_json(changed=False, skip_reason=reason)
        if level != "none" and p["raid_method"] == "btrfs":
            if fs != "btrfs":
                raise Refusal(
                    f"{name}: native RAID {level} needs fs btrfs, not {fs} (or raid_method: mdadm)"
                )
            if level not in ("raid0", "raid1", "raid10"):
                raise Refusal(
                    f"{name}: btrfs RAID level must be raid0, raid1 or raid10, not {level}"
                )
        if level == "none" and len(members) != 1:
            raise Refusal(f"{name}: {len(members)} drives need a raid_level")
        # the gate, for every member, right now
        gated = [
            check(m, p["inventory"], min_size=p["min_size"], protected_paths=protected,
                  own_uuids=own_uuids, own_mounts=own_mounts)
            for m in members
        ]  # fmt: skip
        devices = [g["device"] for g in gated]
        rec = recs.get(name)

        if p["state"] == "absent":
            if not rec:
                module.exit_json(changed=False, msg=f"{name}: drivelab made no filesystem here")
            if module.check_mode:
                module.exit_json(changed=True)
            holds = sorted({h for g in gated for h in g["holds"]})
            if holds:
                raise Refusal(f"{name}: holds PostgreSQL data ({', '.join(holds)}): drop it first")
            unmount(point)
            if rec.get("md_uuid") and os.path.exists(md_path(name)):
                sh(["wipefs", "-a", md_path(name)])
                sh(["mdadm", "--stop", md_path(name)])
            for g in gated:
                if g["own"] or rec.get("md_uuid"):
                    sh(["wipefs", "-a", g["device"]])
            os.unlink(os.path.join(p["state_dir"], f"{name}.json"))
            module.exit_json(changed=True, msg=f"{name}: unmounted and wiped its drivelab marker")

        same = rec and {k: rec.get(k) for k in want} == want and all(g["own"] for g in gated)
        if same and level != "none" and p["raid_method"] == "mdadm":
            same = os.path.exists(md_path(name))
        if same:
            module.exit_json(
                changed=False,
                uuid=rec["uuid"],
                device=rec["device"],
                devices=devices,
                label=rec["label"],
            )
        holds = sorted({h for g in gated for h in g["holds"]})
        if holds:
            raise Refusal(
                f"{name}: holds PostgreSQL data ({', '.join(holds)}): drop it before reformatting"
            )
        if module.check_mode:
            module.exit_json(
                changed=True, devices=devices, msg=f"would make {fs} on {', '.join(devices)}"
            )
        # our own mount of an earlier filesystem goes first
        if any(g["mounted_at"] for g in gated):
            unmount(point)
        # re-check, now unmounted: nothing else may hold these devices
        gated = [
            check(m, p["inventory"], min_size=p["min_size"], protected_paths=protected,
                  own_uuids=own_uuids, own_mounts={})
            for m in members
        ]  # fmt: skip
        for dev in devices:
            sh(["wipefs", "-a", dev])
        target = devices[0]
        md_uuid = None
        if level != "none" and p["raid_method"] == "mdadm":
            sh(["mdadm", "--create", md_path(name), f"--level={level.removeprefix('raid')}",
                f"--raid-devices={len(devices)}", "--metadata=1.2", "--run", "--force", *devices])  # fmt: skip
            target = md_path(name)
            md_uuid = signatures(devices[0])[1].get("UUID")
        if fs == "ext4":
            sh(["mkfs.ext4", "-F", "-q", "-L", label, *p["mkfs_options"], target])
        elif fs == "xfs":
            sh(["mkfs.xfs", "-f", "-q", "-L", label, *p["mkfs_options"], target])
        else:
            raid = (
                ["-d", level, "-m", level]
                if level != "none" and p["raid_method"] == "btrfs"
                else []
            )
            targets = devices if raid else [target]
            sh(["mkfs.btrfs", "-f", "-q", "-L", label, *raid, *p["mkfs_options"], *targets])
        uuid = signatures(target)[1].get("UUID")
        if not uuid:
            raise Refusal(f"{name}: mkfs ran but blkid finds no UUID on {target}")
        write_record(
            p["state_dir"],
            {**want, "uuid": uuid, "md_uuid": md_uuid, "label": label, "device": target,
             "devices": devices, "made_at": time.time()},
        )  # fmt: skip
    except Refusal as err:
        module.fail_json(msg=f"refused: {err}")
    module.exit_json(changed=True, uuid=uuid, device=target, devices=devices, label=label)


if __name__ == "__main__":
    main()
