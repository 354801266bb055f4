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
import re
import subprocess
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_argv import (
    FILESYSTEMS,
    HOLDS_POSTGRESQL_DATA,
    REFUSED,
    Commands,
    Refusal,
    md_path,
    mkfs_options,
    mount_options,
    resolve_tools,
    tools_for,
)
from ansible.module_utils.drivelab_gate import (
    check,
    holders_of,
    mounts,
    own_marks,
    own_records,
    pg_paths,
    probe_drives,
    signatures,
)

DOCUMENTATION = r"""
module: drive_format
short_description: drivelab's own filesystem on candidate drives (gated), mounted
description:
  - Every argv for wipefs, mkfs, mdadm, mount and umount comes from drivelab_argv's
    builder. mkfs and mount options pass a per-filesystem allow-list, and every argument
    that could name a device must be one the gate passed in this invocation.
  - Every tool is looked up on PATH before anything is written.
options:
  name: {description: filesystem name (a drive or a RAID set), type: str, required: true}
  members: {description: drive names it spans, type: list, elements: str, required: true}
  inventory: {description: the DB host's candidate_drives, type: list, elements: dict, required: true}
  fs: {description: a filesystem of drivelab_argv.FILESYSTEMS, type: str, choices: [ext4, xfs, btrfs], default: ext4}
  mkfs_options: {description: extra mkfs arguments (allow-listed per filesystem), type: list, elements: str, default: []}
  mount_options: {description: mount options (allow-listed per filesystem), type: str, default: noatime}
  raid_level: {description: raid0, raid1, raid5 or raid10 (none for one drive), type: str, default: none}
  raid_method: {description: btrfs (native) or mdadm, type: str, choices: [btrfs, mdadm], default: btrfs}
  min_size: {description: smallest member size in bytes the scenario needs, type: int, default: 0}
  protected_paths: {description: more paths whose devices are never touched, type: list, elements: str, default: []}
  state_dir: {description: where drivelab records what it made, type: path, required: true}
  mount_root: {description: drivelab's mount points live here, type: path, required: true}
  state:
    description:
      - present (made and mounted), absent, or mounted (drivelab's filesystem of this name
        as its record says (members, filesystem and options read from the record), the
        members gated again, a stopped md array assembled by its recorded UUID, mounted;
        never made; after a reboot, before PostgreSQL starts)
    type: str
    choices: [present, absent, mounted]
    default: present
"""

RAID_LEVELS = ("none", "raid0", "raid1", "raid5", "raid10")


def sh(argv):
    """Runs an argv built by Commands (from /, so no relative name means anything)."""
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, cwd="/")
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


def mounted_at(point):
    return [m for m in mounts() if m[0] == point]


def unmount(cmds, name, point):
    for _ in range(50):
        if not mounted_at(point):
            return
        proc = subprocess.run(
            cmds.umount(name), capture_output=True, text=True, check=False, cwd="/"
        )
        if proc.returncode == 0:
            continue
        time.sleep(0.1)
    raise Refusal(f"{point}: could not unmount it (busy?)")


def hex_digits(uuid):
    return re.sub(r"[^0-9a-f]", "", str(uuid or "").lower())


def assemble(cmds, name, rec, gated):
    """drivelab's md array ``name`` assembled from its gated members by the UUID it
    recorded, under drivelab's name for it. At boot the kernel assembles it as it finds
    it (``/dev/md127``: the homehost in its name is not known in the initramfs): that
    array is stopped first, when it is exactly this one (every gated member in it, each
    carrying the recorded UUID; the gate found it unmounted and open in no process)."""
    if not rec.get("md_uuid"):
        raise Refusal(f"{name}: its record holds no md array UUID to assemble it by")
    other = sorted({h for g in gated for h in g["own_md_holders"]})
    if other:
        ours = (
            len(other) == 1
            and all(g["own_md_holders"] == other for g in gated)
            and all(hex_digits(g["uuid"]) == hex_digits(rec["md_uuid"]) for g in gated)
            and len(os.listdir(f"/sys/class/block/{other[0]}/slaves")) == len(gated)
        )
        if not ours:
            raise Refusal(
                f"{name}: its members are held by /dev/{', /dev/'.join(other)}, not"
                f" drivelab's array {md_path(name)} alone; nothing was changed"
            )
        sh(cmds.mdadm_stop_kernel_name(other[0]))
    sh(cmds.mdadm_assemble(name, rec["md_uuid"], [g["device"] for g in gated]))
    for _ in range(50):  # udev makes the /dev/md/ link
        if os.path.exists(md_path(name)):
            return
        time.sleep(0.1)
    raise Refusal(f"{name}: mdadm assembled its array but {md_path(name)} did not appear")


def mount_point_ready(point):
    """The mount point exists as an empty folder (drivelab never mounts over data)."""
    if os.path.islink(point):
        raise Refusal(f"mount point {point}: is a symbolic link")
    if not os.path.exists(point):
        os.makedirs(point, mode=0o755)
    elif not os.path.isdir(point):
        raise Refusal(f"mount point {point}: exists and is not a folder")
    elif os.listdir(point):
        raise Refusal(
            f"mount point {point}: is not empty (drivelab mounts only on an empty folder)"
        )


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "members": {"type": "list", "elements": "str"},
            "inventory": {"type": "list", "elements": "dict", "required": True},
            "fs": {"type": "str", "choices": list(FILESYSTEMS), "default": "ext4"},
            "mkfs_options": {"type": "list", "elements": "str", "default": []},
            "mount_options": {"type": "str", "default": "noatime"},
            "raid_level": {"type": "str", "choices": list(RAID_LEVELS), "default": "none"},
            "raid_method": {"type": "str", "choices": ["btrfs", "mdadm"], "default": "btrfs"},
            "min_size": {"type": "int", "default": 0},
            "protected_paths": {"type": "list", "elements": "str", "default": []},
            "state_dir": {"type": "path", "required": True},
            "mount_root": {"type": "path", "required": True},
            "state": {
                "type": "str",
                "choices": ["present", "absent", "mounted"],
                "default": "present",
            },
        },
        required_if=[("state", "present", ["members"]), ("state", "absent", ["members"])],
        supports_check_mode=True,
    )
    try:
        run(module)
    except Refusal as err:
        # the filesystem refused, for a caller that acts on it (drivelab run releases its
        # own PostgreSQL data on exactly those named with holds_postgresql_data)
        # (the data may lie on drivelab's own filesystem of another name over the same
        # drives: an earlier cell's md array, whose members this one reuses)
        held_on = getattr(err, "held_on", None) or [module.params["name"]]
        module.fail_json(msg=f"refused: {err}", refusal=err.code, filesystem=held_on[0],
                         filesystems=held_on)  # fmt: skip
    except (OSError, ValueError, KeyError) as err:  # a probe that errors is a refusal
        name = module.params["name"]
        module.fail_json(
            msg=f"refused: {name}: {err.__class__.__name__}: {err}",
            refusal=REFUSED,
            filesystem=name,
        )


#: what a record holds of the request it was made for (state: mounted takes them from it)
RECORDED = ("members", "fs", "mkfs_options", "raid_level", "raid_method", "mount_options")


def as_recorded(params):
    """``params`` with the request read from drivelab's record of filesystem ``name``
    (state: mounted), or None when drivelab recorded none of that name."""
    rec = own_records(params["state_dir"]).get(params["name"])
    if not rec:
        return None
    if not isinstance(rec.get("members"), list) or not rec["members"]:
        raise Refusal(f"{params['name']}: its record in {params['state_dir']} names no members")
    return {**params, **{k: rec[k] for k in RECORDED if rec.get(k) is not None}}


def run(module):
    p = module.params
    if p["state"] == "mounted":
        p = as_recorded(p)
        if p is None:
            module.exit_json(changed=False, msg=f"{module.params['name']}: drivelab made no"
                             " filesystem of that name here")  # fmt: skip
    name, members, fs, level = p["name"], p["members"], p["fs"], p["raid_level"]
    method = p["raid_method"] if level != "none" else "none"
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", name):
        raise Refusal(
            f"filesystem name {name!r}: must match [a-z][a-z0-9_]{{0,31}} (it names a folder)"
        )
    mount_root = p["mount_root"]
    point = os.path.join(mount_root, name)
    # what the operator asked for, checked before anything is looked at
    mkfs_options(fs, p["mkfs_options"], raid=level != "none" and method == "btrfs")
    opts = p["mount_options"]
    mount_options(fs, opts)
    if method == "mdadm" and not os.path.exists("/proc/mdstat"):
        reason = f"{name}: md RAID is not available here (no /proc/mdstat): skipped"
        module.warn(reason)
        module.exit_json(changed=False, skip_reason=reason)
    if method == "btrfs":
        if fs != "btrfs":
            raise Refusal(
                f"{name}: native RAID {level} needs fs btrfs, not {fs} (or raid_method: mdadm)"
            )
        if level not in ("raid0", "raid1", "raid10"):
            raise Refusal(f"{name}: btrfs RAID level must be raid0, raid1 or raid10, not {level}")
    if level == "none" and len(members) != 1:
        raise Refusal(f"{name}: {len(members)} drives need a raid_level")
    if len(set(members)) != len(members):
        raise Refusal(f"{name}: a drive is listed twice in its members")
    # every tool a step needs, before anything is written
    need = tools_for(fs, method)
    if p["state"] == "absent":  # removal wipes and unmounts, it makes nothing
        need = [t for t in need if not t.startswith(("mkfs.", "mount"))]
    tools = resolve_tools(need, f"{name} ({fs})")

    recs = own_records(p["state_dir"])
    own_uuids, own_mounts = own_marks(recs, mount_root)
    protected = pg_paths() + p["protected_paths"]
    label = f"drivelab-{name}"[: FILESYSTEMS[fs]["label_max"]]
    want = {
        "name": name,
        "members": members,
        "fs": fs,
        "mkfs_options": p["mkfs_options"],
        "raid_level": level,
        "raid_method": method,
    }

    def gate(own_mounts):
        probed = probe_drives(members, p["inventory"])  # an array's members probed at once
        return [
            check(m, p["inventory"], min_size=p["min_size"], protected_paths=protected,
                  own_uuids=own_uuids, own_mounts=own_mounts, mount_root=mount_root,
                  probed=probed)
            for m in members
        ]  # fmt: skip

    gated = gate(own_mounts)  # the gate, for every member, right now
    devices = [g["device"] for g in gated]
    cmds = Commands(devices, mount_root, tools)
    rec = recs.get(name)
    holds = sorted({h for g in gated for h in g["holds"]})

    if p["state"] == "absent":
        if not rec:
            module.exit_json(changed=False, msg=f"{name}: drivelab made no filesystem here")
        if module.check_mode:
            module.exit_json(changed=True)
        if holds:
            raise Refusal(
                f"{name}: holds PostgreSQL data ({', '.join(holds)}): drop it first",
                code=HOLDS_POSTGRESQL_DATA,
            )
        unmount(cmds, name, point)
        if rec.get("md_uuid") and os.path.exists(md_path(name)):
            cmds.extra.add(md_path(name))
            sh(cmds.wipefs(md_path(name)))
            sh(cmds.mdadm_stop(name))
        # only the members that carry this filesystem (a member since formatted as
        # another of drivelab's is that one's to remove)
        ours = {rec.get("uuid"), rec.get("md_uuid")} - {None}
        for g in gated:
            if (g["own"] and g.get("uuid") in ours) or rec.get("md_uuid"):
                sh(cmds.wipefs(g["device"]))
        os.unlink(os.path.join(p["state_dir"], f"{name}.json"))
        module.exit_json(changed=True, msg=f"{name}: unmounted and wiped its drivelab marker")

    if rec and rec.get("replaced_by") and p["state"] == "mounted":
        reason = f"{name}: its drives were since formatted as drivelab's {rec['replaced_by']}: not mounted"
        module.warn(reason)
        module.exit_json(changed=False, skip_reason=reason)
    same = (
        rec
        and not rec.get("replaced_by")
        and {k: rec.get(k) for k in want} == want
        and all(g["own"] for g in gated)
    )
    if p["state"] == "mounted" and not same:
        raise Refusal(
            f"{name}: its drives no longer carry the filesystem drivelab recorded"
            f" ({', '.join(devices)}); nothing was mounted"
        )
    if same:
        # the device by the name the kernel gave it in this boot (an NVMe namespace may
        # be renamed by a reboot), an array drivelab made assembled if it is stopped
        target = devices[0]
        if method == "mdadm":
            target = md_path(name)
            if not os.path.exists(target):
                if module.check_mode:
                    module.exit_json(changed=True, devices=devices,
                                     msg=f"would assemble {target} and mount {point}")  # fmt: skip
                assemble(cmds, name, rec, gated)
            cmds.extra.add(target)
        found = signatures(target)[1].get("UUID")
        others = {r["uuid"]: n for n, r in recs.items() if n != name}
        if found != rec["uuid"] and p["state"] == "mounted" and found in others:
            # a record left from before its drives were made into another of drivelab's
            # filesystems (a Btrfs RAID's members since formatted one by one)
            reason = f"{name}: its drives now carry drivelab's {others[found]}: not mounted"
            module.warn(reason)
            module.exit_json(changed=False, skip_reason=reason)
        if found != rec["uuid"]:
            raise Refusal(
                f"{name}: {target} carries UUID {found or 'none'}, not the {rec['uuid']}"
                " drivelab recorded; nothing was mounted"
            )
        rec = {**rec, "device": target, "devices": devices}
        now = mounted_at(point)
        if now and rec.get("mount_options", opts) == opts:
            if rec != recs[name]:
                write_record(p["state_dir"], rec)
            module.exit_json(changed=False, uuid=rec["uuid"], device=target, devices=devices,
                             label=rec["label"], mount_point=point)  # fmt: skip
        if module.check_mode:
            module.exit_json(changed=True, devices=devices, msg=f"would mount {point} with {opts}")
        if now:  # mounted with other options: mount again (never over PostgreSQL's data)
            if holds:
                raise Refusal(
                    f"{name}: holds PostgreSQL data ({', '.join(holds)}): drop it before"
                    f" mounting it with {opts}",
                    code=HOLDS_POSTGRESQL_DATA,
                )
            unmount(cmds, name, point)
        mount_point_ready(point)
        sh(cmds.mount(fs, target, name, opts, devices if method == "btrfs" else ()))
        write_record(p["state_dir"], {**rec, "mount_options": opts})
        module.exit_json(changed=True, uuid=rec["uuid"], device=target, devices=devices,
                         label=rec["label"], mount_point=point)  # fmt: skip
    if holds:
        err = Refusal(
            f"{name}: holds PostgreSQL data ({', '.join(holds)}): drop it before reformatting",
            code=HOLDS_POSTGRESQL_DATA,
        )
        # the filesystems the data is on: drivelab's own, where it mounted them
        err.held_on = sorted({os.path.basename(g["mounted_at"]) for g in gated
                              if g["holds"] and g["mounted_at"]}) or [name]  # fmt: skip
        raise err
    if module.check_mode:
        module.exit_json(
            changed=True, devices=devices, msg=f"would make {fs} on {', '.join(devices)}"
        )
    # our own mount of an earlier filesystem goes first (wherever drivelab mounted it)
    for at in sorted({g["mounted_at"] for g in gated if g["mounted_at"]}):
        unmount(cmds, os.path.basename(at), at)
    # then our own md arrays over these members (an earlier cell's, of another name):
    # stopped, their records gone with them (wipefs below erases their superblocks)
    if any(g.get("own_md_holders") for g in gated):
        for old, orec in sorted(recs.items()):
            if orec.get("md_uuid") and set(orec.get("devices") or []) & set(devices):
                point_old = os.path.join(mount_root, old)
                if mounted_at(point_old):
                    unmount(cmds, old, point_old)
                if os.path.exists(md_path(old)):
                    sh(cmds.mdadm_stop(old))
                os.unlink(os.path.join(p["state_dir"], f"{old}.json"))
        # one the kernel assembled at boot by a name of its own (md127): drivelab's all
        # the same (the gate found its members' superblocks drivelab's, with a recorded
        # UUID), unmounted (gated) and open in no process
        for kname in sorted({h for g in gated for h in holders_of(g["kname"])}):
            sh(cmds.mdadm_stop_kernel_name(kname))
    # re-check, now unmounted: nothing else may hold these devices
    gated = gate({})
    if [g["device"] for g in gated] != devices:
        raise Refusal(f"{name}: the devices changed between two checks of the gate")
    mount_point_ready(point)
    # drivelab's filesystems of other names on these drives (an earlier cell's RAID set
    # over the same members): what follows destroys them, so their records say so (kept:
    # the set's other members still carry its marker, drivelab's to wipe), never left to
    # describe a filesystem that could be mounted again
    replaced = [old for old in replaced_records(recs, name, gated)  # md ones went above
                if os.path.exists(os.path.join(p["state_dir"], f"{old}.json"))]  # fmt: skip
    for dev in devices:
        sh(cmds.wipefs(dev))
    for old in replaced:
        write_record(p["state_dir"], {**recs[old], "replaced_by": name, "replaced_at": time.time()})
    target = devices[0]
    md_uuid = None
    if method == "mdadm":
        sh(cmds.mdadm_create(name, level, devices))
        target = md_path(name)
        md_uuid = signatures(devices[0])[1].get("UUID")
    targets = devices if method == "btrfs" else [target]
    sh(cmds.mkfs(fs, label, p["mkfs_options"], targets,
                 raid_level=level if method == "btrfs" else "none"))  # fmt: skip
    uuid = signatures(target)[1].get("UUID")
    if not uuid:
        raise Refusal(f"{name}: mkfs ran but blkid finds no UUID on {target}")
    write_record(
        p["state_dir"],
        {**want, "uuid": uuid, "md_uuid": md_uuid, "label": label, "device": target,
         "devices": devices, "mount_options": opts, "made_at": time.time()},
    )  # fmt: skip
    sh(cmds.mount(fs, target, name, opts, devices if method == "btrfs" else ()))
    module.exit_json(changed=True, uuid=uuid, device=target, devices=devices, label=label,
                     mount_point=point, replaced=replaced)  # fmt: skip


def replaced_records(recs, name, gated):
    """The names of drivelab's other filesystems that ``gated`` members carry (their
    UUID, or their md array's, recorded), or whose record names one of these devices."""
    found = {g["uuid"] for g in gated if g["own"] and g.get("uuid")}
    devices = {g["device"] for g in gated}
    return sorted(
        old
        for old, rec in recs.items()
        if old != name
        and not rec.get("replaced_by")
        and ({rec.get("uuid"), rec.get("md_uuid")} & found
             or set(rec.get("devices") or []) & devices)
    )  # fmt: skip


if __name__ == "__main__":
    main()
