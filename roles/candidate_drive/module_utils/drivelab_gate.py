# The safety gate: may drivelab format this device? Pure reads of /sys, /proc and
# probes (blkid, wipefs); any probe that errors is a refusal. Shared by drive_gate
# (checks every requested drive) and drive_format (checks again right before mkfs).
from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import subprocess
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.drivelab_argv import Refusal

OWN_LABEL = re.compile(r"(^|:)drivelab")


def _run(argv):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def _read(path, default=None):
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return default


def kname_of(devpath):
    """/dev/loop3 -> loop3 (the kernel name under /sys/class/block)."""
    st = os.stat(devpath)
    link = os.path.realpath(f"/sys/dev/block/{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}")
    return os.path.basename(link)


def parent_of(kname):
    """The whole disk a partition belongs to (sda1 -> sda); None for a whole disk."""
    if os.path.exists(f"/sys/class/block/{kname}/partition"):
        return os.path.basename(os.path.dirname(os.path.realpath(f"/sys/class/block/{kname}")))
    return None


def partitions_of(kname):
    base = f"/sys/class/block/{kname}"
    try:
        return sorted(
            e
            for e in os.listdir(base)
            if e.startswith(kname) and os.path.exists(f"{base}/{e}/partition")
        )
    except OSError:
        return []


def holders_of(kname):
    try:
        return sorted(os.listdir(f"/sys/class/block/{kname}/holders"))
    except OSError:
        return []


def slaves_of(kname):
    try:
        return sorted(os.listdir(f"/sys/class/block/{kname}/slaves"))
    except OSError:
        return []


def family(kname):
    """kname, its partitions, its parent disk, and (recursively) the devices under it
    (slaves: for md/dm) and over it (holders)."""
    seen, todo = set(), [kname]
    while todo:
        k = todo.pop()
        if not k or k in seen:
            continue
        seen.add(k)
        todo += partitions_of(k) + slaves_of(k) + holders_of(k)
        todo.append(parent_of(k))
    return seen


def _unescape(field):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts():
    """[(mount point, source, "maj:min", fstype)] from /proc/self/mountinfo."""
    out = []
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            f, r = left.split(), right.split()
            out.append((_unescape(f[4]), r[1] if len(r) > 1 else "", f[2], r[0] if r else ""))
    return out


def kname_of_majmin(majmin):
    path = f"/sys/dev/block/{majmin}"
    return os.path.basename(os.path.realpath(path)) if os.path.exists(path) else None


def knames_behind_path(path, mount_table):
    """Block devices a path lives on: its mount's source device (btrfs: every member).
    Of mounts stacked on one point the last listed is the one on top (>=)."""
    real = os.path.realpath(path)
    best = None
    for point, source, majmin, fstype in mount_table:
        if (real + "/").startswith(point.rstrip("/") + "/") and (
            best is None or len(point) >= len(best[0])
        ):
            best = (point, source, majmin, fstype)
    if best is None:
        return set()
    found = set()
    k = kname_of_majmin(best[2])
    if k:
        found.add(k)
    if best[1].startswith("/dev/") and os.path.exists(best[1]):
        with contextlib.suppress(OSError):
            found.add(kname_of(best[1]))
    if best[3] == "btrfs":
        found |= btrfs_members(best[1])
    return found


def btrfs_members(source):
    """Every member device of the Btrfs whose mount source is ``source``: the kernel
    lists them in /sys/fs/btrfs/<fsid>/devices (no btrfs-progs needed)."""
    k = None
    if source.startswith("/dev/") and os.path.exists(source):
        with contextlib.suppress(OSError):
            k = kname_of(source)
    return set().union(*[g for g in btrfs_groups() if k in g])


def btrfs_groups():
    """[{member knames}] of every Btrfs the kernel knows (mounted ones at least)."""
    groups = []
    try:
        fsids = os.listdir("/sys/fs/btrfs")
    except OSError:
        return groups
    for fsid in fsids:
        with contextlib.suppress(OSError):
            groups.append(set(os.listdir(f"/sys/fs/btrfs/{fsid}/devices")))
    return [g for g in groups if g]


def swaps():
    out = []
    for line in (_read("/proc/swaps", "") or "").splitlines()[1:]:
        dev = line.split()[0]
        if dev.startswith("/dev/") and os.path.exists(dev):
            with contextlib.suppress(OSError):
                out.append(kname_of(dev))
        elif os.path.exists(dev):  # a swap file: the device it lives on
            out += list(knames_behind_path(dev, mounts()))
    return out


def signatures(devpath):
    """wipefs --no-act's signatures, plus blkid -p's TYPE/PTTYPE; errors raise Refusal."""
    rc, out, err = _run(["wipefs", "--no-act", "--json", devpath])
    if rc != 0:
        raise Refusal(f"wipefs --no-act failed: {err.strip() or rc}")
    sigs = json.loads(out).get("signatures", []) if out.strip() else []
    rc, out, err = _run(["blkid", "-p", "-o", "export", devpath])
    probe = {}
    if rc == 0:
        probe = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    elif rc != 2:  # 2: nothing found
        raise Refusal(f"blkid -p failed: {err.strip() or rc}")
    return sigs, probe


def probe_drives(drives, inventory):
    """signatures() of the named drives' devices, all at once, every probe ended before
    it returns: {real device path: (sigs, probe), or the exception its probe raised}.

    A probe waits on its device (0.2-0.4 s each on an IOPS-capped drive, docs/scaling.md),
    so one after another they add up. check() takes the result and judges the drives
    one at a time after it: a check looks for processes holding a device's family open,
    and a probe of another member of the same array running beside it would be one.
    Devices that are not (or no longer) block devices are left to check() to name."""
    reals = []
    for entry in inventory:
        if entry.get("name") not in drives or not entry.get("device"):
            continue
        real = os.path.realpath(str(entry["device"]))
        try:
            if stat.S_ISBLK(os.stat(real).st_mode) and real not in reals:
                reals.append(real)
        except OSError:
            continue
    return probe_all(reals)


def probe_all(reals, probe=None):
    """probe (signatures) of every path at once, each in a thread of its own, all ended
    before it returns: {path: its result, or the exception it raised}."""
    probe = probe or signatures

    def one(real):
        try:
            return probe(real)
        except Exception as err:  # check() raises it, for this drive alone
            return err

    if not reals:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(reals))) as pool:
        running = {real: pool.submit(one, real) for real in reals}
        return {real: future.result() for real, future in running.items()}


def _signatures_of(real, probed):
    """A prefetched probe's result (probe_drives), or the probe run now."""
    if probed is None or real not in probed:
        return signatures(real)
    found = probed[real]
    if isinstance(found, Exception):
        raise found
    return found


def open_in_processes(match):
    """'pid (comm)' of every process but this one with an open file whose stat result
    ``match`` accepts (a scan of /proc/*/fd)."""
    holders = []
    me = os.getpid()
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        if int(pid) == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if match(st):
                holders.append(f"{pid} ({_read(f'/proc/{pid}/comm', '?')})")
                break
    return holders


def held_open_by(knames):
    """Pids (other than ours) with the device or a partition of it open."""
    targets = set()
    for k in knames:
        dev = f"/dev/{k}"
        if os.path.exists(dev):
            targets.add(os.stat(dev).st_rdev)
    return open_in_processes(lambda st: stat.S_ISBLK(st.st_mode) and st.st_rdev in targets)


def device_identity(kname):
    """serial and wwn as the kernel reports them (None where there are none)."""
    serial = _read(f"/sys/class/block/{kname}/device/serial") or _read(
        f"/sys/class/block/{kname}/serial"
    )
    wwn = _read(f"/sys/class/block/{kname}/device/wwid") or _read(f"/sys/class/block/{kname}/wwid")
    if serial is None or wwn is None:
        rc, out, _ = _run(["lsblk", "-J", "-d", "-n", "-o", "SERIAL,WWN", f"/dev/{kname}"])
        if rc == 0 and out.strip():
            row = (json.loads(out).get("blockdevices") or [{}])[0]
            serial = serial or row.get("serial")
            wwn = wwn or row.get("wwn")
    return (serial or None), (wwn or None)


NVME_NAMESPACE = re.compile(r"^nvme\d+n\d+$")


def nvme_namespace(kname, sys_block="/sys/class/block"):
    """(nsid, its sibling namespaces) of an NVMe namespace: the namespaces of the same
    controller (or subsystem, under native multipath: the namespace's device in sysfs);
    None for any other device."""
    if not NVME_NAMESPACE.match(kname):
        return None
    parent = os.path.realpath(os.path.join(sys_block, kname, "device"))
    siblings = sorted(
        k
        for k in os.listdir(sys_block)
        if k != kname
        and NVME_NAMESPACE.match(k)
        and os.path.realpath(os.path.join(sys_block, k, "device")) == parent
    )
    nsid = _read(os.path.join(sys_block, kname, "nsid"))
    return (int(nsid) if nsid and nsid.isdigit() else None), siblings


def namespace_refusal(where, entry, kname, *, nsid, siblings, serial):
    """An NVMe namespace is named by its namespace id or its own WWN: the serial is its
    controller's, shared by every sibling, so a serial alone could be any of them."""
    declared = entry.get("nsid")
    if declared not in (None, "") and int(declared) != nsid:
        return (
            f"{where}: is namespace {nsid} of its NVMe controller (serial {serial}), the"
            f" inventory declares nsid {declared} (namespaces beside it: {', '.join(siblings)})"
        )
    if siblings and declared in (None, "") and entry.get("wwn") in (None, ""):
        return (
            f"{where}: is namespace {nsid} of an NVMe controller with {len(siblings) + 1}"
            f" namespaces ({kname} and {', '.join(siblings)}): its serial {serial} names the"
            " controller, not the namespace (the inventory must declare nsid or wwn)"
        )
    return None


def protected_knames(protected_paths, mount_table):
    """Every device behind /, /boot, each mounted filesystem, swap and extra paths
    (PostgreSQL's data directories and tablespaces)."""
    found = {}
    for point, source, majmin, fstype in mount_table:
        k = kname_of_majmin(majmin)
        if not k and source.startswith("/dev/") and os.path.exists(source):
            try:
                k = kname_of(source)
            except OSError:
                k = None
        if k:
            found.setdefault(k, f"mounted at {point}")
        if fstype == "btrfs":
            for member in btrfs_members(source):
                found.setdefault(member, f"part of the btrfs mounted at {point}")
    for k in swaps():
        found[k] = "in use as swap"
    for path in ["/", "/boot", *protected_paths]:
        if os.path.exists(path):
            for k in knames_behind_path(path, mount_table):
                found[k] = f"the device behind {path}"
    return found


def pg_paths():
    """PostgreSQL data directories and their tablespaces: every cluster Debian's
    pg_lsclusters knows (running or not), and the working directory of every running
    postmaster (it is its data directory, wherever and however it was started)."""
    datadirs = []
    try:
        rc, out, _ = _run(["pg_lsclusters", "--no-header"])
    except FileNotFoundError:  # no postgresql-common, no Debian cluster (a running one is below)
        rc, out = 1, ""
    if rc == 0:
        for line in out.splitlines():
            fields = line.split()
            if len(fields) >= 6 and fields[5].startswith("/"):
                datadirs.append(fields[5])
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        if _read(f"/proc/{pid}/comm") not in ("postgres", "postmaster"):
            continue
        with contextlib.suppress(OSError):
            cwd = os.readlink(f"/proc/{pid}/cwd")
            if os.path.exists(os.path.join(cwd, "PG_VERSION")):
                datadirs.append(cwd)
    return data_paths(datadirs)


def data_paths(datadirs):
    """Each data directory, its tablespaces and its WAL directory where that lies
    elsewhere (``pg_wal``, before version 10 ``pg_xlog``, a link to another folder:
    initdb --waldir, which puts the WAL on another drive that is PostgreSQL's data too)."""
    paths = []
    for datadir in dict.fromkeys(datadirs):
        paths.append(datadir)
        tblspc = os.path.join(datadir, "pg_tblspc")
        with contextlib.suppress(OSError):
            paths += [os.path.realpath(os.path.join(tblspc, t)) for t in os.listdir(tblspc)]
        for wal in ("pg_wal", "pg_xlog"):
            link = os.path.join(datadir, wal)
            if os.path.islink(link):
                paths.append(os.path.realpath(link))
    return paths


_TABLESPACE_DIR = re.compile(r"PG_[0-9]+(\.[0-9]+)?_[0-9]{9}")


def pg_folder_above(path):
    """The nearest folder above ``path`` that is laid out as PostgreSQL's own: a data
    directory (PG_VERSION and global/pg_control) or a tablespace's version folder
    (PG_<major>_<catalog version>). Finds a stopped cluster that neither pg_lsclusters
    nor a running postmaster names (another distribution's layout, a copy, a backup)."""
    folder = os.path.dirname(os.path.realpath(path))
    while True:
        if os.path.isfile(os.path.join(folder, "PG_VERSION")) and os.path.isfile(
            os.path.join(folder, "global", "pg_control")
        ):
            return folder
        if _TABLESPACE_DIR.fullmatch(os.path.basename(folder)):
            return folder
        up = os.path.dirname(folder)
        if up == folder:
            return None
        folder = up


def inside(path, folder):
    return (path.rstrip("/") + "/").startswith(folder.rstrip("/") + "/")


def fs_place(path):
    """(maj:min, path inside that filesystem) of ``path``: the same file reached through
    a bind mount, or a folder mounted twice, has the same place. Of mounts stacked on
    one point the last listed is the one on top (>=)."""
    real = os.path.realpath(path)
    best = None
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            f = line.split(" - ")[0].split()
            point = _unescape(f[4])
            if inside(real, point) and (best is None or len(point) >= len(best[0])):
                best = (point, f[2], _unescape(f[3]))
    if best is None:
        return None, real
    rel = os.path.relpath(real, best[0])
    return best[1], os.path.normpath(os.path.join(best[2], rel))


def inside_anyhow(path, folder):
    """``path`` lies in ``folder``, by its name or by its place in the filesystem."""
    if inside(os.path.realpath(path), os.path.realpath(folder)):
        return True
    (dev, at), (fdev, fat) = fs_place(path), fs_place(folder)
    return dev is not None and dev == fdev and inside(at, fat)


def file_held_open_by(st):
    """Pids with the file (device and inode of ``st``) open, as 'pid (comm)'."""
    key = (st.st_dev, st.st_ino)
    return open_in_processes(lambda f: (f.st_dev, f.st_ino) == key)


def in_container():
    """True on a host that is a container (systemd writes /run/systemd/container in one;
    the container manager sets container= in PID 1's environment)."""
    if os.path.exists("/run/systemd/container"):
        return True
    try:
        with open("/proc/1/environ", "rb") as fh:
            return any(v.startswith(b"container=") for v in fh.read().split(b"\0"))
    except OSError:
        return False


def check_loop_backing(
    where, kname, *, protected_paths, mount_root, candidate_knames, mount_table, declared=None
):
    """A loop device writes to its backing file: refuse one whose file lies in
    PostgreSQL's data or tablespaces, in a protected path, on a filesystem drivelab
    mounted for a candidate or on another candidate drive, is itself a block device,
    is open in a process, or has other hard links (another name elsewhere).
    ``declared``: the inventory's ``backing_file``, which vouches for a file outside a
    container (where none of these checks can see it)."""
    backing = _read(f"/sys/block/{kname}/loop/backing_file")
    if not backing:
        raise Refusal(f"{where}: is a loop device with no backing file (not attached)")
    if backing.endswith(" (deleted)"):
        raise Refusal(f"{where}: its backing file {backing} was deleted")
    real = os.path.realpath(backing)
    label = f"its backing file {backing}" + (f" (-> {real})" if real != backing else "")
    try:
        st = os.stat(real)
    except FileNotFoundError as err:
        # In a container, a loop device the container manager bound in has its backing
        # file in the manager's filesystem: the kernel names it as the manager sees it,
        # and no path of this host reaches it, so none of the checks below can be made
        # here. Only the side that sees it can vouch for it: the inventory declares that
        # very file (the lab declares the files it made), else the device is refused.
        if in_container():
            if declared == backing:
                return None
            said = f"declares {declared}" if declared else "declares none"
            raise Refusal(
                f"{where}: {label} lies outside this container, where it cannot be"
                f" examined, and the inventory {said} (backing_file: {backing} vouches for it)"
            ) from err
        raise Refusal(f"{where}: {label} cannot be examined ({err.strerror})") from err
    except OSError as err:
        raise Refusal(f"{where}: {label} cannot be examined ({err.strerror})") from err
    if stat.S_ISBLK(st.st_mode):
        raise Refusal(f"{where}: {label} is a block device (the loop writes through to it)")
    if not stat.S_ISREG(st.st_mode):
        raise Refusal(f"{where}: {label} is not a regular file")
    for path in [*protected_paths, mount_root]:
        if path and os.path.exists(path) and inside_anyhow(real, path):
            # PostgreSQL's paths (pg_lsclusters, a Perl script, and a scan of /proc) only
            # to name the refusal: not once per loop device the gate passes
            kind = (
                "drivelab's mount root" if path == mount_root
                else "a PostgreSQL data directory or tablespace" if path in set(pg_paths())
                else "a protected path"
            )  # fmt: skip
            raise Refusal(f"{where}: {label} lies inside {path} ({kind})")
    found = pg_folder_above(real)
    if found:
        raise Refusal(
            f"{where}: {label} lies inside {found} (laid out as a PostgreSQL data directory"
            " or tablespace)"
        )
    under = knames_behind_path(real, mount_table)
    clash = sorted(under & set(candidate_knames))
    if clash:
        raise Refusal(f"{where}: {label} lies on candidate drive {', '.join(clash)}")
    if st.st_nlink > 1:
        raise Refusal(
            f"{where}: {label} has {st.st_nlink} hard links (another name may be protected)"
        )
    openers = file_held_open_by(st)
    if openers:
        raise Refusal(f"{where}: {label} is held open by {', '.join(openers)}")
    return real


def own_records(state_dir):
    """{name: record} of the filesystems drivelab made (state_dir/<name>.json). The
    write cache originals kept in the same folder (wcache-*.json) are not records."""
    records = {}
    try:
        names = sorted(os.listdir(state_dir))
    except FileNotFoundError:
        return records
    for entry in names:
        if not entry.endswith(".json") or entry.startswith(("wcache-", ".")):
            continue
        with open(os.path.join(state_dir, entry), encoding="utf-8") as fh:
            rec = json.load(fh)
        if isinstance(rec, dict) and rec.get("name") and rec.get("uuid"):
            records[rec["name"]] = rec
    return records


def own_marks(records, mount_root):
    """What makes a filesystem drivelab's own: its UUIDs (md arrays too) and mount points."""
    uuids = [r["uuid"] for r in records.values()] + [
        r["md_uuid"] for r in records.values() if r.get("md_uuid")
    ]
    return uuids, {os.path.join(mount_root, name): name for name in records}


#: signatures that are not a filesystem but a part of something larger, whose loss is
#: not seen where it happens (an array short of a member, a volume group short of a
#: physical volume, a key slot, a pool): wipe: true is not enough to destroy them; the
#: operator names each type in wipe: [...]
NOT_FILESYSTEMS = {
    "linux_raid_member": "a member of an md array (not assembled here)",
    "LVM2_member": "an LVM physical volume",
    "crypto_LUKS": "a LUKS encrypted volume",
    "zfs_member": "a member of a ZFS pool",
    "bcache": "a bcache backing or cache device",
    "ceph_bluestore": "a Ceph OSD",
    "isw_raid_member": "a member of an Intel firmware RAID set",
    "ddf_raid_member": "a member of a DDF firmware RAID set",
    "VMFS_volume_member": "a VMFS volume member",
}


def wipe_refusal(where, found, wipe, label):
    """Why the signatures found may not be wiped under the inventory's wipe (true,
    false or a list of accepted types), or None. A list accepts exactly its types."""
    accepted = set(wipe) if isinstance(wipe, list) else set()
    for t in found:
        if t in NOT_FILESYSTEMS and t not in accepted:
            said = f"wipe: {wipe}" if isinstance(wipe, list) else "wipe: true"
            return (
                f"{where}: carries a {t} signature, {NOT_FILESYSTEMS[t]}, which {said} does"
                f" not destroy (the inventory must say wipe: [{t}] to accept it)"
            )
    if wipe is True:
        return None
    rest = sorted(set(found) - accepted)
    if not rest:
        return None
    if accepted:
        return (
            f"{where}: carries a {'/'.join(rest)} signature{label}, which wipe: {sorted(accepted)}"
            " does not name"
        )
    return (
        f"{where}: carries a {'/'.join(found)} signature{label} and the inventory does not say"
        " wipe: true"
    )


def _device_numbers(devpath):
    """The device numbers of the block device ``devpath`` names (links followed), or
    None (no path, not there, not a block device)."""
    if not devpath:
        return None
    try:
        st = os.stat(str(devpath))
    except OSError:
        return None
    return st.st_rdev if stat.S_ISBLK(st.st_mode) else None


def same_wwn(wwn, kname, inventory, entry):
    """The other candidate drive whose device has WWN ``wwn`` ("name (kname)"), or None."""
    for other in inventory:
        numbers = None if other is entry else _device_numbers(other.get("device"))
        if numbers is None:
            continue
        k = kname_of_majmin(f"{os.major(numbers)}:{os.minor(numbers)}")
        if k and k != kname and device_identity(k)[1] == wwn:
            return f"drive {other.get('name')} ({k})"
    return None


def check(
    drive,
    inventory,
    *,
    min_size=0,
    protected_paths=(),
    own_uuids=(),
    own_mounts=None,
    mount_root=None,
    exclusive_open=True,
    probed=None,
):
    """Checks one candidate drive. Returns a dict of facts when it may be formatted;
    raises Refusal (one line: device and reason) when it may not.

    drive: the name requested. inventory: candidate_drives (list of dicts).
    own_uuids: filesystem UUIDs drivelab recorded as made by itself.
    own_mounts: {mount point: drive name} of drivelab's own mount points; a device
      mounted exactly there with its own marker is reported as ours, not refused.
    mount_root: drivelab's mount root (a loop device's backing file may not lie there).
    exclusive_open: the last check, that nothing else has it open, opens it exclusively
      for a moment; ``drive_list`` leaves that out for devices the inventory does not list.
    probed: probe_drives()'s result, taken before the first check; a device not in it
      is probed here.
    """
    own_mounts = own_mounts or {}
    entries = [e for e in inventory if e.get("name") == drive]
    if not entries:
        raise Refusal(f"drive {drive}: not listed in the inventory's candidate_drives")
    entry = entries[0]
    devpath = str(entry.get("device") or "")
    where = f"drive {drive} ({devpath or 'no device'})"
    if len(entries) > 1:
        raise Refusal(f"{where}: listed twice in candidate_drives")
    if not devpath:
        raise Refusal(f"{where}: has no device in the inventory")
    if not os.path.lexists(devpath):
        raise Refusal(f"{where}: does not exist")
    real = os.path.realpath(devpath)
    if real != devpath:
        where = f"drive {drive} ({devpath} -> {real})"
    try:
        st = os.stat(real)
    except OSError as err:
        raise Refusal(f"{where}: cannot stat it ({err.strerror})") from err
    if not stat.S_ISBLK(st.st_mode):
        raise Refusal(f"{where}: is not a block device")
    # the same device listed under two names: an alias and its target, a second device
    # node of the same numbers, or twice (device numbers, not path strings)
    for other in inventory:
        if other is not entry and _device_numbers(other.get("device")) == st.st_rdev:
            raise Refusal(
                f"{where}: listed twice in candidate_drives (also as {other.get('name')})"
            )
    kname = kname_of(real)
    if parent_of(kname):
        raise Refusal(f"{where}: is a partition of {parent_of(kname)}, not a whole disk")
    is_loop = os.major(st.st_rdev) == 7 or kname.startswith("loop")
    if is_loop and entry.get("allow_loop") is not True:
        raise Refusal(f"{where}: is a loop device and the inventory does not say allow_loop: true")
    if _read(f"/sys/class/block/{kname}/ro") == "1":
        raise Refusal(f"{where}: is read-only")
    sectors = _read(f"/sys/class/block/{kname}/size")
    if sectors is None or not sectors.isdigit():
        raise Refusal(f"{where}: cannot read its size")
    size = int(sectors) * 512
    serial, wwn = device_identity(kname)
    if entry.get("serial") not in (None, "") and str(entry["serial"]) != (serial or ""):
        raise Refusal(
            f"{where}: serial is {serial or 'unreadable'}, the inventory declares {entry['serial']}"
        )
    if entry.get("wwn") not in (None, "") and str(entry["wwn"]).lower() != (wwn or "").lower():
        raise Refusal(
            f"{where}: WWN is {wwn or 'unreadable'}, the inventory declares {entry['wwn']}"
        )
    if wwn:
        twin = same_wwn(wwn, kname, inventory, entry)
        if twin:
            raise Refusal(f"{where}: has WWN {wwn}, as {twin} does: one disk on two paths")
    ns = nvme_namespace(kname)
    if ns:
        why = namespace_refusal(where, entry, kname, nsid=ns[0], siblings=ns[1], serial=serial)
        if why:
            raise Refusal(why)
    # what the device is comes first (serial, WWN, namespace): then its size
    if entry.get("size_bytes") not in (None, "") and int(entry["size_bytes"]) != size:
        raise Refusal(
            f"{where}: is {size} bytes, the inventory declares {int(entry['size_bytes'])}"
        )
    if min_size and size < int(min_size):
        raise Refusal(
            f"{where}: is {size} bytes, smaller than the {int(min_size)} the scenario needs"
        )

    mount_table = mounts()
    backing = None
    if is_loop:
        candidate_knames = set()
        for other in inventory:
            odev = str(other.get("device") or "")
            if other is not entry and odev and os.path.exists(odev):
                with contextlib.suppress(OSError):
                    candidate_knames.add(kname_of(os.path.realpath(odev)))
        backing = check_loop_backing(
            where, kname, protected_paths=list(protected_paths), mount_root=mount_root,
            candidate_knames=candidate_knames, mount_table=mount_table,
            declared=entry.get("backing_file"),
        )  # fmt: skip
    members = family(kname)
    # a failed probe is a refusal, but the checks below name an in-use device better
    try:
        sigs, probe = _signatures_of(real, probed)
        probe_error = None
    except Refusal as err:
        sigs, probe, probe_error = [], {}, str(err)
    own = bool(OWN_LABEL.search(probe.get("LABEL", ""))) and probe.get("UUID") in set(own_uuids)
    mounted_points = []
    for point, source, majmin, _fstype in mount_table:
        src_k = None
        if source.startswith("/dev/") and os.path.exists(source):
            try:
                src_k = kname_of(source)
            except OSError:
                src_k = None
        if kname_of_majmin(majmin) in members or src_k in members:
            mounted_points.append(point)
    protected = protected_knames(protected_paths, mount_table)
    if wwn:
        # a second path to a protected disk (another SCSI path, no multipath): its
        # kernel name differs, its WWN does not
        for k in sorted(protected):
            disk = parent_of(k) or k
            if disk not in members and device_identity(disk)[1] == wwn:
                raise Refusal(
                    f"{where}: has WWN {wwn}, as {disk} does, which {protected[k]}"
                    " (one disk on two paths)"
                )
    # our own filesystem, mounted at our own mount point, is not a refusal
    own_point = None
    if own:
        points = set(mounted_points)
        for k in members:
            m = re.match(
                r"^(?:mounted at|part of the btrfs mounted at) (.*)$", protected.get(k, "")
            )
            if m:
                points.add(m.group(1))
        if points and all(p in own_mounts for p in points) and len(points) == 1:
            own_point = points.pop()
    holds = []
    for k in sorted(members):
        reason = protected.get(k)
        if not reason or (own_point and reason.endswith(f"mounted at {own_point}")):
            continue
        behind = reason.removeprefix("the device behind ")
        if (
            own_point
            and behind != reason
            and (behind + "/").startswith(own_point.rstrip("/") + "/")
        ):
            holds.append(behind)  # PostgreSQL data on our own drive: refused only when reformatting
            continue
        rel = "is" if k == kname else f"is related to {k}, which is"
        raise Refusal(f"{where}: {rel} {reason}")
    for point in mounted_points:
        if point != own_point:
            raise Refusal(f"{where}: is mounted at {point}")
    if probe_error:
        raise Refusal(f"{where}: {probe_error}")
    hold = holders_of(kname)
    # a member of drivelab's own md array (its superblock drivelab's label and recorded
    # UUID), assembled: that array is drivelab's to stop before the member is used again
    own_md = own and bool(hold) and all(re.fullmatch(r"md\d+", h) for h in hold)
    if hold and not own_md:
        raise Refusal(f"{where}: has holders {', '.join(hold)} (LVM, md or dm)")
    parts = partitions_of(kname)
    if parts:
        raise Refusal(f"{where}: has partitions {', '.join(parts)}")
    if probe.get("PTTYPE") or any(s.get("type") in ("gpt", "dos", "PMBR") for s in sigs):
        raise Refusal(
            f"{where}: has a partition table ({probe.get('PTTYPE') or 'found by wipefs'})"
        )
    if (
        entry.get("wipe")
        and not is_loop
        and entry.get("serial") in (None, "")
        and (entry.get("wwn") in (None, ""))
    ):
        raise Refusal(
            f"{where}: the inventory says wipe for a real disk without its serial or wwn"
            " (a name such as /dev/sdb can name another disk after a reboot): declare one"
        )
    found = sorted(
        {s.get("type", "?") for s in sigs} | ({probe["TYPE"]} if probe.get("TYPE") else set())
    )
    if found and not own:
        label = f" labelled {probe['LABEL']!r}" if probe.get("LABEL") else ""
        why = wipe_refusal(where, found, entry.get("wipe"), label)
        if why:
            raise Refusal(why)
    if not own_point and exclusive_open:
        openers = held_open_by(members)
        if openers:
            raise Refusal(f"{where}: is held open by {', '.join(openers)}")
        # the md driver holds the members of an assembled array exclusively: a member of
        # drivelab's own array (assembled at boot, not mounted) is judged by the array,
        # which no process has open (above) and nothing mounts (mount table, above)
        if not own_md:
            try:
                fd = os.open(real, os.O_RDONLY | os.O_EXCL)
            except OSError as err:
                raise Refusal(f"{where}: cannot be opened exclusively ({err.strerror})") from err
            os.close(fd)
    return {
        "name": drive,
        "device": real,
        "declared_device": devpath,
        "kname": kname,
        "size_bytes": size,
        "serial": serial,
        "wwn": wwn,
        "nsid": ns[0] if ns else None,
        "loop": is_loop,
        "backing_file": backing,
        "signatures": found,
        "fstype": probe.get("TYPE"),
        "label": probe.get("LABEL"),
        "uuid": probe.get("UUID"),
        "own": own,
        "mounted_at": own_point,
        "holds": sorted(set(holds)),
        "own_md_holders": hold if own_md else [],
        "wipe_needed": bool(found) and not own,
    }
