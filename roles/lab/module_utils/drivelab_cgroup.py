# The lab DB host's limits, on whichever cgroup hierarchy this machine has: a memory
# limit and per-device read and write IOPS caps (the emulated drive classes).
#
#   v1: memory/<name>/memory.limit_in_bytes, blkio/<name>/blkio.throttle.{read,write}_iops_device
#   v2: <name>/memory.max and <name>/io.max ("MAJ:MIN riops=N wiops=N"), after +memory
#       and +io in the parent's cgroup.subtree_control
#
# Pure Python on a folder laid out as cgroupfs: the lab_cgroup module points it at
# /sys/fs/cgroup, the unit tests at a temporary tree. Every write goes through
# Cgroupfs.write, so what was written, with what value and in what order is observable.
from __future__ import annotations

import os
import time

V1_CONTROLLERS = ("memory", "blkio")
V2_CONTROLLERS = ("memory", "io")
PAGE = os.sysconf("SC_PAGE_SIZE")
WHAT_TO_DO = (
    "boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1, the default of current"
    " distributions) or with the v1 memory and blkio controllers mounted, as root"
)


class CgroupError(Exception):
    """The lab cannot have its limits here; str() is one line saying what is missing
    and what to do."""


def _read(path):
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read()
    except OSError:
        return None


class Cgroupfs:
    """Reads and writes interface files; ``log`` keeps every write and removal in
    order, as (action, path, value)."""

    def __init__(self):
        self.log = []

    def read(self, path):
        text = _read(path)
        if text is None:
            raise CgroupError(f"cgroup: cannot read {path}")
        return text

    def write(self, path, value):
        self.log.append(("write", path, value))
        try:
            with open(path, "w", encoding="ascii") as fh:
                fh.write(value)
        except OSError as err:
            raise CgroupError(
                f"cgroup: writing {value!r} to {path} failed ({err.strerror})"
            ) from None

    def mkdir(self, path):
        self.log.append(("mkdir", path, None))
        os.mkdir(path)

    def rmdir(self, path):
        self.log.append(("rmdir", path, None))
        os.rmdir(path)


class Hierarchy:
    """Where the lab's groups live. ``kind`` is v1 or v2; ``root`` the cgroup mount
    (v1: the folder the controllers are mounted under)."""

    def __init__(self, kind, root):
        self.kind = kind
        self.root = root

    def dirs(self, name):
        """The group folders a process joins (by writing its pid to cgroup.procs)."""
        if self.kind == "v1":
            return [os.path.join(self.root, c, name) for c in V1_CONTROLLERS]
        return [os.path.join(self.root, name)]

    def describe(self):
        return {"kind": self.kind, "root": self.root}


def _v2_controllers(folder):
    text = _read(os.path.join(folder, "cgroup.controllers"))
    return None if text is None else set(text.split())


def choose(root="/sys/fs/cgroup", prefer="auto"):
    """The hierarchy the lab uses: v1 where the memory and blkio controllers are
    mounted (as the lab was first built), else the unified v2 hierarchy (at ``root``,
    or at ``root``/unified on a hybrid system) where it offers memory and io.
    ``prefer`` v1 or v2 insists on one. Raises CgroupError saying what is missing."""
    v1 = all(os.path.isfile(os.path.join(root, c, "cgroup.procs")) for c in V1_CONTROLLERS)
    v2_root, v2_have = None, None
    for folder in (root, os.path.join(root, "unified")):
        have = _v2_controllers(folder)
        if have is not None:
            v2_root, v2_have = folder, have
            break
    v2 = v2_have is not None and set(V2_CONTROLLERS) <= v2_have
    if prefer in ("auto", "v1") and v1:
        return Hierarchy("v1", root)
    if prefer in ("auto", "v2") and v2:
        return Hierarchy("v2", v2_root)
    v1_said = (
        f"cgroup v1 memory and blkio are not mounted at {root}/{{memory,blkio}}"
        if not v1
        else "cgroup v1 was not asked for"
    )
    if v2_root is None:
        v2_said = f"no cgroup v2 hierarchy at {root} or {root}/unified"
    elif v2:
        v2_said = "cgroup v2 was not asked for"
    else:
        missing = " and ".join(c for c in V2_CONTROLLERS if c not in v2_have)
        offered = " ".join(sorted(v2_have)) or "none"
        v2_said = f"the cgroup v2 hierarchy at {v2_root} lacks {missing} (offers: {offered})"
    raise CgroupError(
        f"lab: no usable cgroup for the DB host's memory limit and IOPS caps: {v1_said},"
        f" and {v2_said}; {WHAT_TO_DO}"
    )


def want_caps(throttle, major_minor):
    """{"7:3": 120} from [{major_minor or device, iops or iops_cap}] (0 or none: uncapped)."""
    want = {}
    for r in throttle:
        iops = int(r.get("iops") or r.get("iops_cap") or 0)
        if iops > 0:
            want[r.get("major_minor") or major_minor(r["device"])] = iops
    return want


def v1_rules(text):
    """{"7:3": 120} from a blkio.throttle.*_iops_device file."""
    out = {}
    for line in text.splitlines():
        dev, _, val = line.partition(" ")
        if val.strip().isdigit() and int(val) > 0:
            out[dev] = int(val)
    return out


def v2_io_rules(text):
    """{"7:3": {"riops": 120, "wiops": 120}} from io.max; 'max' means no cap."""
    out = {}
    for line in text.splitlines():
        dev, *pairs = line.split()
        caps = {}
        for pair in pairs:
            key, _, val = pair.partition("=")
            if key in ("riops", "wiops") and val.isdigit():
                caps[key] = int(val)
        if caps:
            out[dev] = caps
    return out


def ensure(fs, h, name, memory_limit, caps, *, check_mode=False):
    """The group ``name`` with the memory limit (bytes, rounded down to pages; None:
    left alone) and exactly the IOPS caps in ``caps``: {MAJ:MIN: iops} the same both ways,
    as a drive has, or {MAJ:MIN: (read, write)} (a cliff class past its mark:
    module_utils drivelab_cliff). Returns whether anything changed (in check mode: would
    change)."""
    if h.kind == "v1":
        return _ensure_v1(fs, h, name, memory_limit, caps, check_mode=check_mode)
    return _ensure_v2(fs, h, name, memory_limit, caps, check_mode=check_mode)


def _split(caps, index):
    """{MAJ:MIN: iops} of one direction (0: read, 1: write) of ``caps``."""
    return {dev: v[index] if isinstance(v, (tuple, list)) else v for dev, v in caps.items()}


def _make(fs, folders, check_mode):
    missing = [f for f in folders if not os.path.isdir(f)]
    if not check_mode:
        for f in missing:
            fs.mkdir(f)
    return bool(missing)


def _ensure_v1(fs, h, name, memory_limit, caps, *, check_mode):
    mem, blkio = h.dirs(name)
    changed = _make(fs, [mem, blkio], check_mode)
    if check_mode and changed:
        return True
    if memory_limit is not None:
        path = os.path.join(mem, "memory.limit_in_bytes")
        want = memory_limit // PAGE * PAGE
        if int(fs.read(path)) != want:
            changed = True
            if not check_mode:
                fs.write(path, str(want))
    for index, direction in enumerate(("read", "write")):
        path = os.path.join(blkio, f"blkio.throttle.{direction}_iops_device")
        have, want = v1_rules(fs.read(path)), _split(caps, index)
        for dev in sorted(set(have) | set(want)):
            if have.get(dev) != want.get(dev):
                changed = True
                if not check_mode:
                    fs.write(path, f"{dev} {want.get(dev, 0)}")
    return changed


def _ensure_v2(fs, h, name, memory_limit, caps, *, check_mode):
    control = os.path.join(h.root, "cgroup.subtree_control")
    enabled = set(fs.read(control).split())
    missing = [c for c in V2_CONTROLLERS if c not in enabled]
    changed = bool(missing)
    if missing and not check_mode:
        fs.write(control, " ".join(f"+{c}" for c in missing))
    (group,) = h.dirs(name)
    changed = _make(fs, [group], check_mode) or changed
    if check_mode and not os.path.isdir(group):
        return True
    if memory_limit is not None:
        path = os.path.join(group, "memory.max")
        want = memory_limit // PAGE * PAGE
        have = fs.read(path).strip()
        if have != str(want):
            changed = True
            if not check_mode:
                fs.write(path, str(want))
    path = os.path.join(group, "io.max")
    have, reads, writes = v2_io_rules(fs.read(path)), _split(caps, 0), _split(caps, 1)
    for dev in sorted(set(have) | set(caps)):
        want = {"riops": reads[dev], "wiops": writes[dev]} if dev in caps else {}
        if have.get(dev, {}) != want:
            changed = True
            if not check_mode:
                r, w = reads.get(dev, "max"), writes.get(dev, "max")
                fs.write(path, f"{dev} riops={r} wiops={w}")
    return changed


def remove(fs, h, name, end_pids, check_mode=False):
    """End every process left in the group (``end_pids(pids)`` returns those that did
    not end), then remove it; the parent's controllers stay enabled (other groups of the
    machine may use them). Returns whether anything was there."""
    changed = False
    for folder in h.dirs(name):
        if not os.path.isdir(folder):
            continue
        changed = True
        if check_mode:
            continue
        pids = [int(p) for p in fs.read(os.path.join(folder, "cgroup.procs")).split()]
        left = end_pids(pids) if pids else []
        if left:
            raise CgroupError(f"cgroup {folder}: processes {left} did not end")
        for _ in range(50):  # a group empties a moment after its last process ends
            try:
                fs.rmdir(folder)
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise CgroupError(f"cgroup {folder}: could not remove it")
    return changed


def lab_groups(root, prefix):
    """Every group of the lab's (named with ``prefix``) at the top of each hierarchy
    under ``root``: root/<controller>/<prefix>* on v1 (and root/unified/<prefix>* beside
    it), root/<prefix>* when root is itself the v2 mount. Groups deeper down (another
    program's units) are never the lab's."""
    if not os.path.isdir(root):
        return []
    if os.path.isfile(os.path.join(root, "cgroup.controllers")):
        tops = [root]
    else:
        tops = [os.path.join(root, e) for e in sorted(os.listdir(root))]
    found = []
    for top in tops:
        try:
            names = sorted(os.listdir(top))
        except OSError:
            continue
        found += [
            os.path.join(top, n)
            for n in names
            if n.startswith(prefix) and os.path.isdir(os.path.join(top, n))
        ]
    return found


def lift_caps(fs, group):
    """Every IOPS cap of ``group`` off (v1 blkio throttle files, v2 io.max): a process
    with I/O queued on a 120-IOPS device cannot end until that I/O is done."""
    for name in ("blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device"):
        path = os.path.join(group, name)
        if os.path.exists(path):
            for dev in v1_rules(fs.read(path)):
                fs.write(path, f"{dev} 0")
    path = os.path.join(group, "io.max")
    if os.path.exists(path):
        for dev in v2_io_rules(fs.read(path)):
            fs.write(path, f"{dev} riops=max wiops=max")
