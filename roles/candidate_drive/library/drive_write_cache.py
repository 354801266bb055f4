#!/usr/bin/python
"""Reads a drive's volatile write cache, and turns it on or off on the device itself
(hdparm / sdparm / nvme), verifying that it took. Where no device-level control exists
(loop devices, most VMs) it reports "unchangeable" with the reason and changes nothing."""

from __future__ import annotations

import json
import os
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_gate import kname_of
from ansible.module_utils.drivelab_wcache import (
    WriteCacheError,
    control_for,
    nvme_controller,
    parse_kernel_view,
    parse_state,
    read_argv,
    set_argv,
)

DOCUMENTATION = r"""
module: drive_write_cache
short_description: a drive's volatile write cache (read, set on the device, verify)
options:
  device: {description: the drive's device, type: path, required: true}
  want: {description: "leave (only read), on, off, or restore (what it was before drivelab first changed it)", type: str, choices: [leave, on, off, restore], default: leave}
  state_dir: {description: where the original state is kept until restored, type: path, required: true}
"""


def run(argv):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def transport(kname):
    rc, out = run(["lsblk", "-J", "-d", "-n", "-o", "TRAN", f"/dev/{kname}"])
    try:
        return (json.loads(out).get("blockdevices") or [{}])[0].get("tran") if rc == 0 else None
    except ValueError:
        return None


def kernel_view(kname):
    """The block layer's view of the device's cache (whether it sends flushes)."""
    try:
        with open(f"/sys/block/{kname}/queue/write_cache", encoding="ascii") as fh:
            return "write back" if parse_kernel_view(fh.read()) else "write through"
    except (OSError, WriteCacheError) as err:
        return f"unreadable ({err})"


def main():
    module = AnsibleModule(
        argument_spec={
            "device": {"type": "path", "required": True},
            "want": {
                "type": "str",
                "choices": ["leave", "on", "off", "restore"],
                "default": "leave",
            },
            "state_dir": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    dev = os.path.realpath(module.params["device"])
    want = module.params["want"]
    kname = kname_of(dev)
    saved = os.path.join(module.params["state_dir"], f"wcache-{kname}.json")
    if want == "restore":
        if not os.path.exists(saved):
            want = "leave"
        else:
            with open(saved, encoding="utf-8") as fh:
                want = json.load(fh)["original"]
    result = {
        "device": dev,
        "kernel_view": None,
        "state": "unknown",
        "control": None,
        "changeable": False,
    }
    result["kernel_view"] = kernel_view(kname)
    tool, reason = control_for(kname, transport(kname))
    if tool is None:
        result.update(state="unchangeable", reason=reason)
        if want != "leave":
            result.update(skip_cells=True, msg=f"{dev}: write cache {want} asked, but {reason}")
            module.warn(result["msg"] + ": cells that need it are skipped")
        module.exit_json(changed=False, **result)
    result["control"] = tool
    if tool == "nvme":
        # the feature is the controller's: read and set there, not on the namespace
        try:
            dev = nvme_controller(kname)
        except WriteCacheError as err:
            module.fail_json(msg=f"{result['device']}: {err}", **result)
        result["controller"] = dev
    rc, out = run(read_argv(tool, dev))
    try:
        if rc != 0:
            raise WriteCacheError(
                f"{' '.join(read_argv(tool, dev))} exited {rc}: {out.strip()[:120]}"
            )
        now = parse_state(tool, out)
    except WriteCacheError as err:
        result.update(state="unchangeable", reason=str(err))
        if want != "leave":
            result.update(skip_cells=True, msg=f"{dev}: write cache {want} asked, but {err}")
            module.warn(result["msg"] + ": cells that need it are skipped")
        module.exit_json(changed=False, **result)
    result.update(
        state="on" if now["on"] else "off",
        changeable=now["changeable"],
        original=result.get("state"),
    )
    result["original"] = result["state"]
    if want == "leave" or result["state"] == want:
        if module.params["want"] == "restore" and os.path.exists(saved) and not module.check_mode:
            os.unlink(saved)
        module.exit_json(changed=False, **result)
    if not now["changeable"]:
        result.update(
            skipped=True, msg=f"{dev}: the drive reports its write cache setting as not changeable"
        )
        module.exit_json(changed=False, **result)
    if module.check_mode:
        module.exit_json(changed=True, **result)
    if module.params["want"] != "restore" and not os.path.exists(saved):
        os.makedirs(module.params["state_dir"], mode=0o700, exist_ok=True)
        with open(saved, "w", encoding="utf-8") as fh:
            json.dump({"device": dev, "original": result["original"]}, fh)
    rc, out = run(set_argv(tool, dev, want == "on"))
    if rc != 0:
        module.fail_json(
            msg=f"{dev}: {' '.join(set_argv(tool, dev, want == 'on'))} failed: {out.strip()[:200]}",
            **result,
        )
    rc, out = run(read_argv(tool, dev))
    after = parse_state(tool, out) if rc == 0 else None
    if not after or after["on"] != (want == "on"):
        module.fail_json(
            msg=f"{dev}: asked for write cache {want}, the drive still reports it otherwise",
            **result,
        )
    result["state"] = want
    # the kernel's view after the set: libata revalidates a SATA disk and follows it
    # (write through once off); for NVMe it stays the controller's capability (write back
    # while a volatile write cache is present, so flushes are still sent)
    result["kernel_view"] = kernel_view(kname)
    if module.params["want"] == "restore":
        os.unlink(saved)
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
