# Volatile write cache of a drive: how to read it, how to change it on the DEVICE
# (hdparm for ATA, sdparm for SCSI/SAS, nvme-cli for NVMe), and how to parse what those
# tools print. Never writes /sys/block/X/queue/write_cache: that only changes what the
# kernel believes (writing "write through" stops it sending flushes to a caching drive).
from __future__ import annotations

import os
import re

HDPARM_W = re.compile(r"write-caching\s*=\s*(\d+)\s*\((on|off)\)")
SDPARM_WCE = re.compile(r"^\s*WCE\s+(\d+)\s+\[cha:\s*(\w)", re.M)
SDPARM_WCE_VALUE = re.compile(r"^\s*(\d+)\s*$")
NVME_FEATURE = re.compile(r"Current value:\s*(0x[0-9a-fA-F]+|\d+)")


class WriteCacheError(Exception):
    pass


def control_for(kname, transport):
    """Which tool controls the cache: 'hdparm', 'sdparm', 'nvme', or None with a reason."""
    if kname.startswith("loop"):
        return None, "loop device: it has no device-level write cache to change"
    if kname.startswith(("zram", "ram", "dm-", "md")):
        return None, f"{kname} is a virtual device: no device-level write cache"
    if kname.startswith("nvme"):
        return "nvme", None
    if kname.startswith("vd") or transport == "virtio":
        return None, "virtio disk: the hypervisor owns the cache, no device-level control"
    if transport in ("sata", "ata", "pata"):
        return "hdparm", None
    if transport in ("sas", "scsi", "fc", "iscsi", "usb", "spi", "srp"):
        return "sdparm", None
    return "sdparm", None


def nvme_controller(kname, sys_block="/sys/class/block"):
    """/dev/nvme0 for namespace nvme0n1: the volatile write cache is a feature of the
    controller, and a set-feature sent to a namespace is refused ("Feature Not Namespace
    Specific"). The controller is the namespace's parent device in sysfs."""
    ctrl = os.path.basename(os.path.realpath(os.path.join(sys_block, kname, "device")))
    if not re.fullmatch(r"nvme\d+", ctrl):
        raise WriteCacheError(f"{kname}: no NVMe controller found above it in sysfs ({ctrl})")
    return f"/dev/{ctrl}"


def read_argv(tool, dev):
    return {
        "hdparm": ["hdparm", "-W", dev],
        "sdparm": ["sdparm", "--get=WCE", dev],
        "nvme": ["nvme", "get-feature", dev, "--feature-id=0x06"],
    }[tool]


def set_argv(tool, dev, on):
    return {
        "hdparm": ["hdparm", f"-W{1 if on else 0}", dev],
        "sdparm": ["sdparm", "--set=WCE" if on else "--clear=WCE", dev],
        "nvme": ["nvme", "set-feature", dev, "--feature-id=0x06", f"--value={1 if on else 0}"],
    }[tool]


def parse_state(tool, text):
    """True (cache on) / False (off) from the tool's output; raises WriteCacheError.
    For sdparm also tells whether the setting is changeable ("cha: n" = no)."""
    if tool == "hdparm":
        m = HDPARM_W.search(text)
        if not m:
            raise WriteCacheError(
                f"hdparm -W printed no 'write-caching = N (on|off)' line: {text.strip()[:80]!r}"
            )
        return {"on": m.group(1) != "0", "changeable": True}
    if tool == "sdparm":
        m = SDPARM_WCE.search(text)
        if m:
            return {"on": m.group(1) != "0", "changeable": m.group(2).lower() != "n"}
        m = SDPARM_WCE_VALUE.match(text.strip().splitlines()[-1] if text.strip() else "")
        if m:
            return {"on": m.group(1) != "0", "changeable": True}
        raise WriteCacheError(
            f"sdparm --get=WCE printed no 'WCE  N  [cha: ...]' line: {text.strip()[:80]!r}"
        )
    if tool == "nvme":
        m = NVME_FEATURE.search(text)
        if not m:
            raise WriteCacheError(
                f"nvme get-feature printed no 'Current value:' field: {text.strip()[:80]!r}"
            )
        return {"on": bool(int(m.group(1), 0) & 1), "changeable": True}
    raise WriteCacheError(f"unknown write cache tool {tool}")


def parse_kernel_view(text):
    """/sys/block/X/queue/write_cache: 'write back' -> True, 'write through' -> False."""
    t = (text or "").strip()
    if t == "write back":
        return True
    if t == "write through":
        return False
    raise WriteCacheError(
        f"queue/write_cache reads {t!r}, expected 'write back' or 'write through'"
    )
