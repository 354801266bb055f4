#!/usr/bin/python
"""What the drive was: model, serial, firmware, size, rotational, block sizes,
scheduler, write cache (kernel view), SMART health and rotation rate where available,
filesystem, and what the inventory declares about it that no probe can read (its
rotation rate, power-loss protection)."""

from __future__ import annotations

import json
import os
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_gate import kname_of

DOCUMENTATION = r"""
module: drive_facts
short_description: device facts of candidate drives, for every result to carry
options:
  devices: {description: the drives' devices, type: list, elements: path, required: true}
  inventory:
    description: the DB host's candidate_drives; a drive's rpm and power_loss_protection are reported as declared
    type: list
    elements: dict
    default: []
"""

#: inventory fields of a candidate drive reported as ``declared`` (no probe reads them)
DECLARED = ("rpm", "power_loss_protection")

LSBLK_COLS = "NAME,PATH,TYPE,SIZE,ROTA,MODEL,SERIAL,WWN,TRAN,VENDOR,REV,PHY-SEC,LOG-SEC,MIN-IO,OPT-IO,SCHED,RQ-SIZE,FSTYPE,LABEL,UUID"


def read(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


def smart(dev, kname):
    if kname.startswith(("loop", "zram", "ram", "dm-", "md")):
        return {"available": False, "reason": "not available on a virtual device"}
    proc = subprocess.run(
        ["smartctl", "--json=o", "-i", "-H", "-A", dev], capture_output=True, text=True, check=False
    )
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        return {"available": False, "reason": f"smartctl gave no JSON (exit {proc.returncode})"}
    status = doc.get("smartctl", {}).get("exit_status", proc.returncode)
    if status & 0b11:
        msgs = [m.get("string", "") for m in doc.get("smartctl", {}).get("messages", [])]
        return {"available": False, "reason": "; ".join(msgs) or f"smartctl exit status {status}"}
    nvme = doc.get("nvme_smart_health_information_log", {})
    return {
        "available": True,
        "exit_status": status,
        "protocol": doc.get("device", {}).get("protocol"),
        "model": doc.get("model_name") or doc.get("scsi_model_name"),
        "serial": doc.get("serial_number"),
        "firmware": doc.get("firmware_version"),
        "rotation_rate": doc.get("rotation_rate"),
        "passed": doc.get("smart_status", {}).get("passed"),
        "power_on_hours": doc.get("power_on_time", {}).get("hours") or nvme.get("power_on_hours"),
        "percentage_used": nvme.get("percentage_used"),
        "temperature_c": doc.get("temperature", {}).get("current"),
    }


def declared(real, inventory):
    """The inventory's DECLARED fields of the entry whose device is ``real``."""
    for entry in inventory:
        device = entry.get("device") if isinstance(entry, dict) else None
        if isinstance(device, str) and os.path.realpath(device) == real:
            return {k: entry[k] for k in DECLARED if k in entry}
    return {}


def facts(dev, inventory=()):
    real = os.path.realpath(dev)
    kname = kname_of(real)
    proc = subprocess.run(
        ["lsblk", "-J", "-b", "-d", "-o", LSBLK_COLS, real],
        capture_output=True,
        text=True,
        check=False,
    )
    row = (json.loads(proc.stdout).get("blockdevices") or [{}])[0] if proc.returncode == 0 else {}
    q = f"/sys/block/{kname}/queue"
    sched = read(f"{q}/scheduler") or ""
    active = sched[sched.find("[") + 1 : sched.find("]")] if "[" in sched else sched or None
    back = read(f"/sys/block/{kname}/loop/backing_file")
    # blkid -p probes the device itself (lsblk needs udev's database for these)
    probe = subprocess.run(
        ["blkid", "-p", "-o", "export", real], capture_output=True, text=True, check=False
    )
    sig = dict(line.split("=", 1) for line in probe.stdout.splitlines() if "=" in line)
    return {
        "device": real,
        "kname": kname,
        "model": row.get("model") or ("loop device" if kname.startswith("loop") else None),
        "vendor": row.get("vendor"),
        "serial": row.get("serial"),
        "wwn": row.get("wwn"),
        "firmware": row.get("rev"),
        "transport": row.get("tran"),
        "size_bytes": row.get("size"),
        "rotational": read(f"{q}/rotational") == "1",
        "logical_block_size": int(read(f"{q}/logical_block_size") or 0),
        "physical_block_size": int(read(f"{q}/physical_block_size") or 0),
        "scheduler": active,
        "write_cache_kernel_view": read(f"{q}/write_cache"),
        "loop_backing_file": back,
        "loop_direct_io": read(f"/sys/block/{kname}/loop/dio") == "1" if back else None,
        "fstype": sig.get("TYPE"),
        "label": sig.get("LABEL"),
        "uuid": sig.get("UUID"),
        "smart": smart(real, kname),
        "declared": declared(real, inventory),
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "devices": {"type": "list", "elements": "path", "required": True},
            "inventory": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    module.exit_json(changed=False, drives=[facts(d, p["inventory"]) for d in p["devices"]])


if __name__ == "__main__":
    main()
