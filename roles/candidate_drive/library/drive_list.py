#!/usr/bin/python
"""Every whole block device of the DB host (``drivelab drives``), read-only: its stable
path (a /dev/disk/by-id link with the serial in it where there is one), serial, WWN,
model, size, rotational, transport and the kernel's view of its write cache, with the
gate's verdict: would drivelab format it as a candidate drive declared with that path,
serial and size (and, for a device the inventory already lists, as listed), and if not,
why. ceph-volume's ``inventory`` is the model."""

from __future__ import annotations

import json
import os
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_gate import Refusal, check, own_marks, own_records, pg_paths
from ansible.module_utils.drivelab_gate import _read as read

DOCUMENTATION = r"""
module: drive_list
short_description: the DB host's block devices with the gate's verdict (read-only)
options:
  inventory: {description: the DB host's candidate_drives, type: list, elements: dict, default: []}
  protected_paths: {description: more paths whose devices must never be touched, type: list, elements: str, default: []}
  state_dir: {description: where drivelab records the filesystems it made, type: path, required: true}
  mount_root: {description: drivelab's own mount points live here, type: path, required: true}
"""

#: by-id link prefixes, best first: the ones that carry the serial
BY_ID = ("nvme-eui.", "nvme-", "ata-", "scsi-", "virtio-", "usb-", "wwn-")
#: devices that are never drives
SKIP = ("ram", "zram", "sr", "fd")


def stable_paths(kname):
    """The /dev/disk/by-id links to /dev/<kname>, best first (one naming the serial
    before a WWN), then by-path."""
    found = []
    for folder in ("/dev/disk/by-id", "/dev/disk/by-path"):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            link = os.path.join(folder, name)
            if os.path.realpath(link) == f"/dev/{kname}":
                found.append(link)

    def rank(link):
        base = os.path.basename(link)
        for i, prefix in enumerate(BY_ID):
            if "/by-id/" in link and base.startswith(prefix):
                # nvme-eui. is an NVMe namespace's own identity: best for a namespace
                return (i if prefix != "nvme-eui." else len(BY_ID), base)
        return (len(BY_ID) + 1, base)

    return sorted(found, key=rank)


def lsblk():
    """{kname: lsblk's row} of every whole device."""
    done = subprocess.run(
        ["lsblk", "-J", "-b", "-d", "-o", "KNAME,TYPE,SIZE,ROTA,MODEL,SERIAL,WWN,TRAN"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    try:
        rows = json.loads(done.stdout).get("blockdevices") or []
    except ValueError:
        rows = []
    return {r.get("kname"): r for r in rows if r.get("kname")}


def name_for(kname, path):
    """A candidate drive name for the device: the by-id link's name, made safe."""
    base = os.path.basename(path) if path.startswith("/dev/disk/") else kname
    safe = "".join(c if c.isalnum() else "_" for c in base.lower())
    return safe[:60] or kname


def describe(kname, row, inventory, gate_args):
    paths = stable_paths(kname)
    path = paths[0] if paths else f"/dev/{kname}"
    sectors = read(f"/sys/class/block/{kname}/size")
    size = int(sectors) * 512 if sectors and sectors.isdigit() else None
    listed = next(
        (e for e in inventory
         if e.get("device") and os.path.realpath(str(e["device"])) == f"/dev/{kname}"),
        None,
    )  # fmt: skip
    serial = row.get("serial") or read(f"/sys/class/block/{kname}/device/serial")
    entry = {"name": name_for(kname, path), "device": path, "size_bytes": size}
    if serial:
        entry["serial"] = serial
    judged = listed or entry
    others = [e for e in inventory if e is not listed]
    try:
        # a device nobody listed is not opened exclusively, not even for a moment
        verdict = check(
            judged["name"], [judged, *others], exclusive_open=listed is not None, **gate_args
        )
        would, why = True, None
        wipe = bool(verdict.get("wipe_needed"))
    except Refusal as err:
        would, why, wipe = False, str(err), False
    except Exception as err:  # a probe that errors is a refusal
        would, why, wipe = (
            False,
            f"the gate's probe failed ({err.__class__.__name__}: {err})",
            False,
        )
    wc = read(f"/sys/block/{kname}/queue/write_cache")
    return {
        "kname": kname,
        "path": path,
        "paths": paths,
        "serial": serial,
        "wwn": row.get("wwn"),
        "model": (row.get("model") or "").strip() or None,
        "size_bytes": size,
        "rotational": row.get("rota") in (True, "1", 1),
        "transport": row.get("tran"),
        "write_cache": {"write back": "on", "write through": "off"}.get(wc or "", wc),
        "listed_as": listed.get("name") if listed else None,
        "would_format": would,
        "wipe_needed": wipe,
        "refusal": why,
        "entry": entry,
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "inventory": {"type": "list", "elements": "dict", "default": []},
            "protected_paths": {"type": "list", "elements": "str", "default": []},
            "state_dir": {"type": "path", "required": True},
            "mount_root": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    own_uuids, own_mounts = own_marks(own_records(p["state_dir"]), p["mount_root"])
    gate_args = {
        "protected_paths": pg_paths() + p["protected_paths"],
        "own_uuids": own_uuids,
        "own_mounts": own_mounts,
        "mount_root": p["mount_root"],
    }
    rows = lsblk()
    devices = []
    for kname in sorted(os.listdir("/sys/block")):
        if kname.startswith(SKIP) or read(f"/sys/block/{kname}/size") in (None, "0"):
            continue  # not a drive, or a loop device with nothing attached
        devices.append(describe(kname, rows.get(kname, {}), p["inventory"], gate_args))
    module.exit_json(changed=False, devices=devices)


if __name__ == "__main__":
    main()
