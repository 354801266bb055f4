# The lab's cliff classes: a drive that writes fast until a stated number of bytes has
# been written to it and not discarded since, and slowly after, as an SSD's writes slow
# once its spare blocks are used up and a TRIM gives them back.
#
# What was written and discarded is the kernel's own count, per block device
# (/sys/dev/block/MAJ:MIN/stat: write sectors, field 7; discard sectors, field 14; 512
# bytes each). A drive's debt is what was written and not discarded since the lab made
# its file, never below zero and never above the drive's size (a whole-drive discard
# leaves it fresh). Past the class's mark, the write IOPS cap of the DB host's cgroup is
# the class's slow one; reads keep the class's cap.
#
# Two writers keep the debt, one state file under one lock: the watcher (main() below,
# a daemon of the lab machine that lab up starts and lab down ends by its pid), every
# POLL seconds; and the action lab_caps, as it puts the caps back, so a run never starts
# under the fast cap of a drive past its mark. Neither touches a drive whose caps are
# lifted: a lift stays a lift.
#
# This file is also the watcher's program: lab up copies it into the lab folder and runs
# it with /usr/bin/python3 (no Ansible there), so it imports only the standard library
# and the cgroup helpers are its own.
from __future__ import annotations

import fcntl
import json
import os
import signal
import sys
import time

SECTOR = 512
POLL = 0.05
SYS_BLOCK = "/sys/dev/block"


def counters(mm, sys_block=SYS_BLOCK):
    """(write sectors, discard sectors, size in sectors, backing file's inode or 0) of
    the block device MAJ:MIN, as the kernel counts them."""
    base = os.path.join(sys_block, mm)
    with open(os.path.join(base, "stat"), encoding="ascii") as fh:
        fields = fh.read().split()
    with open(os.path.join(base, "size"), encoding="ascii") as fh:
        size = int(fh.read())
    inode = 0
    try:
        with open(os.path.join(base, "loop", "backing_file"), encoding="utf-8") as fh:
            inode = os.stat(fh.read().strip()).st_ino
    except OSError:
        pass
    discard = int(fields[13]) if len(fields) > 13 else 0
    return int(fields[6]), discard, size, inode


def advance(entry, written, discarded, size, inode):
    """The drive's entry after the counters read now. A drive seen for the first time,
    or whose loop device now holds another file (its counters run on since boot), starts
    fresh: no debt. Counters that went back (a device made anew) count from zero."""
    if entry is None or entry.get("inode") != inode:
        return {"inode": inode, "written": written, "discarded": discarded, "debt": 0}
    dw = written - entry["written"] if written >= entry["written"] else written
    dd = discarded - entry["discarded"] if discarded >= entry["discarded"] else discarded
    debt = min(size, max(0, entry["debt"] + dw - dd))
    return {"inode": inode, "written": written, "discarded": discarded, "debt": debt}


def write_cap(drive, entry):
    """The write IOPS cap a cliff drive has now: slow past its mark, fast before."""
    past = entry is not None and entry["debt"] * SECTOR >= drive["after_bytes"]
    return drive["iops_after"] if past else drive["iops"]


def observe(config, state, read=None):
    """The state with every cliff drive's debt brought up to date (``read``: counters of
    a MAJ:MIN; by default the kernel's, under the config's sys_block if it names one)."""
    sys_block = config.get("sys_block", SYS_BLOCK)
    read = read or (lambda mm: counters(mm, sys_block))
    out = dict(state)
    for d in config["drives"]:
        try:
            out[d["major_minor"]] = advance(state.get(d["major_minor"]), *read(d["major_minor"]))
        except (OSError, ValueError, IndexError):
            continue  # its loop device is gone (lab down under way): nothing to cap
    return out


def with_cliffs(config, state, caps):
    """``caps`` ({MAJ:MIN: iops}, as lab_caps puts them back) with each cliff drive's
    write cap as its debt says: {MAJ:MIN: (read, write)}."""
    out = dict(caps)
    for d in config["drives"]:
        mm = d["major_minor"]
        if mm in out:
            out[mm] = (out[mm], write_cap(d, state.get(mm)))
    return out


class Locked:
    """The state file, read and written under an exclusive lock on its lock file."""

    def __init__(self, path):
        self.path = path
        self.state = {}

    def __enter__(self):
        self.fh = open(self.path + ".lock", "a", encoding="ascii")
        fcntl.flock(self.fh, fcntl.LOCK_EX)
        try:
            with open(self.path, encoding="utf-8") as fh:
                self.state = json.load(fh)
        except (OSError, ValueError):
            self.state = {}
        return self

    def save(self, state):
        if state != self.state:
            tmp = self.path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(state, fh, sort_keys=True)
            os.replace(tmp, self.path)
            self.state = state

    def __exit__(self, *exc):
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


def write_rules(kind, group):
    """(file, {MAJ:MIN: write IOPS cap}) of the group: the caps in place now."""
    if kind == "v1":
        path = os.path.join(group, "blkio.throttle.write_iops_device")
        rules = {}
        with open(path, encoding="ascii") as fh:
            for line in fh.read().splitlines():
                dev, _, val = line.partition(" ")
                if val.strip().isdigit() and int(val) > 0:
                    rules[dev] = int(val)
        return path, rules
    path = os.path.join(group, "io.max")
    rules = {}
    with open(path, encoding="ascii") as fh:
        for line in fh.read().splitlines():
            dev, *pairs = line.split()
            for pair in pairs:
                key, _, val = pair.partition("=")
                if key == "wiops" and val.isdigit():
                    rules[dev] = int(val)
    return path, rules


def group_folder(config):
    h = config["hierarchy"]
    if h["kind"] == "v1":
        return os.path.join(h["root"], "blkio", config["group"])
    return os.path.join(h["root"], config["group"])


def _write(path, value):
    with open(path, "w", encoding="ascii") as fh:
        fh.write(value)


def step(config, locked, read=None, write=_write):
    """One look: debts brought up to date, and each capped cliff drive's write cap set
    as its debt says (``write(path, value)``: to the cgroup file, one rule, as the
    kernel takes it). Returns [(drive, cap, debt in bytes)] for each cap changed."""
    state = observe(config, locked.state, read)
    kind = config["hierarchy"]["kind"]
    path, rules = write_rules(kind, group_folder(config))
    changes = []
    for d in config["drives"]:
        mm = d["major_minor"]
        if mm not in rules:
            continue  # lifted (or not made yet): left as it is
        want = write_cap(d, state.get(mm))
        if rules[mm] != want:
            write(path, f"{mm} {want}" if kind == "v1" else f"{mm} wiops={want}")
            changes.append((d["name"], want, state[mm]["debt"] * SECTOR))
    locked.save(state)
    return changes


def main(argv):
    """The watcher: ``drivelab-cliff <config.json>``, until SIGTERM."""
    with open(argv[1], encoding="utf-8") as fh:
        config = json.load(fh)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        with Locked(config["state"]) as locked:
            try:
                changes = step(config, locked)
            except OSError as err:  # the group gone (lab down under way): look again
                print(f"{time.time():.3f} cannot read the caps: {err}", flush=True)
                changes = []
        for name, cap, debt in changes:
            print(f"{time.time():.3f} {name}: write cap {cap}, debt {debt} bytes", flush=True)
        time.sleep(POLL)


if __name__ == "__main__":
    main(sys.argv)
