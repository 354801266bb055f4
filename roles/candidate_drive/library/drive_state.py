#!/usr/bin/python
"""Brings one candidate drive to a stated state before drivelab makes its filesystem
(docs/drives.md, "Drive state"): purge (a discard of the whole device, or a secure
discard where the device supports one), precondition (fio's sequential writes of a
multiple of its capacity), then rounds of one fio workload until the PTS steady-state
rule holds over the last rounds, or a round limit is hit.

Every step writes the whole device: the gate runs first, in this module, and nothing is
touched unless the drive passes it and holds no filesystem that is mounted or holds
PostgreSQL data (drive_format state=absent unmounts drivelab's own first). Returns each
step's figures and every round's, and the state reached."""

from __future__ import annotations

import json
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_argv import REFUSED, Refusal
from ansible.module_utils.drivelab_gate import check, own_marks, own_records, pg_paths
from ansible.module_utils.drivelab_steady import window_holds

DOCUMENTATION = r"""
module: drive_state
short_description: purge, precondition and steady-state rounds on one gated candidate drive
options:
  name: {description: the drive (a candidate drive's name), type: str, required: true}
  inventory: {description: the DB host's candidate_drives, type: list, elements: dict, required: true}
  state: {description: "the state: name, purge, precondition, steady_state (role candidate_drive's spec)", type: dict, required: true}
  protected_paths: {description: more paths whose devices are never written, type: list, elements: str, default: []}
  state_dir: {description: drivelab's records of its own filesystems, type: path, required: true}
  mount_root: {description: drivelab's mount root, type: path, required: true}
"""

#: fio's options common to every step: the raw device, direct I/O, no fio-side verify
FIO_COMMON = ["--ioengine=libaio", "--direct=1", "--output-format=json", "--group_reporting"]
BLOCK = r"[0-9]{1,8}[km]?"


def sh(argv, what):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, cwd="/")
    if proc.returncode != 0:
        raise Refusal(f"{what}: {' '.join(argv)}: {(proc.stderr or proc.stdout).strip()[:300]}")
    return proc.stdout


def fio(device, name, args, what):
    """One fio job on ``device``; its write figures (IOPS, bytes/s, bytes, seconds)."""
    out = sh(["fio", f"--name={name}", f"--filename={device}", *FIO_COMMON, *args], what)
    job = json.loads(out[out.index("{") :])["jobs"][0]
    w = job["write"]
    return {"iops": w["iops"], "bw_bytes": w["bw_bytes"], "io_bytes": w["io_bytes"],
            "seconds": w["runtime"] / 1000.0}  # fmt: skip


def purge(device, how, name):
    """The whole device discarded (blkdiscard), or discarded securely; refused where the
    device does not support it (the kernel says so)."""
    argv = ["blkdiscard", "--force"] + (["--secure"] if how == "secure" else []) + [device]
    started = time.monotonic()
    sh(argv, f"{name}: purge {how}")
    return {"how": how, "seconds": round(time.monotonic() - started, 3)}


def precondition(device, size, spec, name):
    """Sequential writes over the whole device, ``multiple`` times its ``size``."""
    total = int(size * float(spec["multiple"]))
    args = ["--rw=write", f"--bs={spec['block_size']}", f"--iodepth={spec['iodepth']}",
            "--size=100%", f"--io_size={total}"]  # fmt: skip
    return {**fio(device, "precondition", args, f"{name}: precondition"), "target_bytes": total}


def steady(device, spec, name):
    """Rounds of the stated workload until the rule holds over the last ``window`` rounds,
    or ``max_rounds`` have run; every round's figures."""
    args = [f"--rw={spec['pattern']}", f"--bs={spec['block_size']}", f"--iodepth={spec['iodepth']}",
            "--size=100%", "--time_based", f"--runtime={spec['round_seconds']}",
            "--randrepeat=0", "--norandommap"]  # fmt: skip
    rule = {k: spec[k] for k in ("window", "range_pct", "excursion_pct")}
    rounds = []
    for n in range(1, int(spec["max_rounds"]) + 1):
        rounds.append(fio(device, f"round{n}", args, f"{name}: steady-state round {n}"))
        iops = [r["iops"] for r in rounds]
        if window_holds(iops, spec["window"], spec["range_pct"], spec["excursion_pct"]):
            return {"rounds": rounds, "steady": True, "steady_round": n, "rule": rule}
    return {"rounds": rounds, "steady": False, "steady_round": None, "rule": rule}


def validate(state, name):
    """The request's words, checked before anything is touched (they go into argv)."""
    import re  # noqa: PLC0415

    if state.get("purge", "none") not in ("none", "discard", "secure"):
        raise Refusal(f"{name}: purge {state.get('purge')!r}: none, discard or secure")
    for key in ("precondition", "steady_state"):
        spec = state.get(key)
        if spec and not re.fullmatch(BLOCK, str(spec.get("block_size", ""))):
            raise Refusal(f"{name}: {key}.block_size {spec.get('block_size')!r}: not {BLOCK}")
    ss = state.get("steady_state")
    if ss and ss.get("pattern") not in ("randwrite", "write", "randrw"):
        raise Refusal(
            f"{name}: steady_state.pattern {ss.get('pattern')!r}: randwrite, write or randrw"
        )


def run(module):
    p = module.params
    name, state = p["name"], p["state"]
    validate(state, name)
    recs = own_records(p["state_dir"])
    own_uuids, own_mounts = own_marks(recs, p["mount_root"])
    g = check(name, p["inventory"], protected_paths=pg_paths() + p["protected_paths"],
              own_uuids=own_uuids, own_mounts=own_mounts, mount_root=p["mount_root"])  # fmt: skip
    if g.get("mounted_at") or g.get("holds"):
        raise Refusal(
            f"drive {name} ({g['device']}): mounted at {g.get('mounted_at') or '?'} or holding"
            " data: drive_state writes the whole device; its filesystem goes first"
        )
    if module.check_mode:
        module.exit_json(changed=True, msg=f"would bring {g['device']} to {state.get('name')}")
    out = {"name": state.get("name"), "device": g["device"], "size_bytes": g["size_bytes"]}
    started = time.monotonic()
    if state.get("purge", "none") != "none":
        out["purge"] = purge(g["device"], state["purge"], name)
    if state.get("precondition"):
        out["precondition"] = precondition(
            g["device"], g["size_bytes"], state["precondition"], name
        )
    if state.get("steady_state"):
        out["steady_state"] = steady(g["device"], state["steady_state"], name)
    out["seconds"] = round(time.monotonic() - started, 3)
    out["finished_at"] = time.time()
    module.exit_json(changed=True, state=out)


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "inventory": {"type": "list", "elements": "dict", "required": True},
            "state": {"type": "dict", "required": True},
            "protected_paths": {"type": "list", "elements": "str", "default": []},
            "state_dir": {"type": "path", "required": True},
            "mount_root": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    try:
        run(module)
    except Refusal as err:
        module.fail_json(msg=f"refused: {err}", refusal=err.code, filesystem=module.params["name"])
    except (OSError, ValueError, KeyError) as err:
        name = module.params["name"]
        module.fail_json(msg=f"refused: {name}: {err.__class__.__name__}: {err}", refusal=REFUSED,
                         filesystem=name)  # fmt: skip


if __name__ == "__main__":
    main()
