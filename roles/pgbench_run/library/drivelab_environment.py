#!/usr/bin/python
"""The environment a run's figures came from, as the DB host has it: kernel and OS
release, the vm.dirty_* and swappiness sysctls, CPU (model, count, frequency governor),
and for the filesystem holding ``path``: its mount as mounted (/proc/self/mounts, not
as asked), its block device's queue (scheduler, read-ahead, queue depth, rotational,
write cache; a partition's from its disk, a dm/md device's own and its members'), and
the filesystem's features. Reads /proc and /sys; the only programs run are the
filesystem's own read-only tools (dumpe2fs -h, xfs_info), by argument vector.

Given a cluster's ``port`` (and the client ``databases``), the same module run also
reads PostgreSQL (psql as postgres: its version, the settings it was given, where the
client databases live, which is then the path described) and the host's memory
(module_utils drivelab_memory): not three module runs on the path of every repetition.
Given ``snapshot_sql`` (the role's snapshot query), it reads the server's counters before
the run as well, last, in the same module run (module_utils drivelab_psql): not a module
run of its own on that path (docs/scaling.md, "Why the hot path is shaped as it is").

Given ``cold_start`` (the cluster and its major version), the same module run first does
the run's cold start (module_utils drivelab_coldstart; the module drivelab_cold_start
alone is one module run more on the DB host's path before every repetition): a failed
cold start fails the module, naming its step
(``cold_start_failed``); what fails after it is the environment's, and every result,
failed or not, carries ``cold_start`` with each step's seconds. Its ``mode`` "settled"
is the settled start instead (a rate search's warm steps: vacuums, CHECKPOINT, sync; the
server and its caches kept). In check mode neither is done."""

from __future__ import annotations

import os
import re
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_coldstart import cold_start, refusal
from ansible.module_utils.drivelab_memory import memory
from ansible.module_utils.drivelab_psql import PsqlError, json_row, json_value

DOCUMENTATION = r"""
module: drivelab_environment
short_description: kernel, sysctls, CPU and the storage under a path, for a run to carry
options:
  path:
    description: "a path on the filesystem to describe (the data of the run); must exist; default: where the client databases live (port)"
    type: path
  port:
    description: "a drivelab cluster's port: read its version, settings and where the databases live, and the host's memory"
    type: int
  databases:
    description: the client databases (drivelab_<client>) whose location is the path
    type: list
    elements: str
    default: []
  socket:
    description: folder of the server's Unix socket
    type: path
    default: /var/run/postgresql
  snapshot_sql:
    description: "with port: the role's snapshot query (one row), read last, returned as snapshot"
    type: str
  cold_start:
    description: "with port and databases: the cold start first, of this cluster (drivelab or drivelab_<fs>) of this major version"
    type: dict
    options:
      cluster: {type: str, required: true}
      major: {type: str, required: true}
      mode: {type: str, choices: [cold, settled], default: cold}
"""

#: one JSON row: the version, the settings the server was given (not the defaults, not
#: this session's own; a setting that may hold a secret is written "(hidden)"), and
#: where the client databases live (their tablespace, else the data directory)
PG_QUERY = r"""
SELECT json_build_object(
  'version', current_setting('server_version'),
  'version_num', current_setting('server_version_num')::int,
  'data_directory', current_setting('data_directory'),
  'data_paths', (SELECT array_agg(DISTINCT coalesce(nullif(pg_tablespace_location(dattablespace), ''),
                                                   current_setting('data_directory')))
                 FROM pg_database WHERE datname::text = ANY(string_to_array(:'dbs', ','))),
  'settings', (SELECT coalesce(json_object_agg(name, json_build_object(
                   'setting', CASE WHEN name ~ '(conninfo|passphrase|_command)' THEN '(hidden)' ELSE setting END,
                   'unit', unit, 'source', source, 'pending_restart', pending_restart) ORDER BY name), '{}')
               FROM pg_settings
               WHERE source IN ('configuration file', 'command line', 'environment variable', 'global')))
"""
DATABASE = re.compile(r"^drivelab_[^\s/,]+$")

SYSCTLS = (
    "vm.dirty_ratio",
    "vm.dirty_background_ratio",
    "vm.dirty_bytes",
    "vm.dirty_background_bytes",
    "vm.dirty_expire_centisecs",
    "vm.dirty_writeback_centisecs",
    "vm.swappiness",
)
QUEUE = ("scheduler", "read_ahead_kb", "nr_requests", "rotational", "write_cache")
#: xfs_info fields that are properties of the format (not of the size): section.key
XFS_FIELDS = (
    "meta-data.isize",
    "meta-data.crc",
    "meta-data.finobt",
    "meta-data.sparse",
    "meta-data.rmapbt",
    "meta-data.reflink",
    "meta-data.bigtime",
    "meta-data.inobtcount",
    "meta-data.nrext64",
    "meta-data.attr",
    "meta-data.sectsz",
    "data.bsize",
    "data.sunit",
    "data.swidth",
    "naming.ftype",
    "log.log",
    "log.bsize",
    "log.version",
    "log.sectsz",
    "log.sunit",
    "log.lazy-count",
)
#: xfs_info's on/off feature flags, listed as features when 1
XFS_FLAGS = ("crc", "finobt", "sparse", "rmapbt", "reflink", "bigtime", "inobtcount", "nrext64")


def read(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


def oneline(text, width=200):
    return " ".join(str(text).split())[:width]


def number(text):
    return int(text) if text is not None and re.fullmatch(r"-?\d+", text) else text


def unescape(field):
    r"""/proc/mounts writes space, tab, newline and backslash as \040 \011 \012 \134."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mounts(text):
    """[{source, mount_point, fstype, options}] of a /proc/mounts text, in its order."""
    out = []
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 4:
            out.append(
                {
                    "source": unescape(f[0]),
                    "mount_point": unescape(f[1]),
                    "fstype": f[2],
                    "options": unescape(f[3]),
                }
            )
    return out


def mount_of(path, table):
    """The mount ``path`` lives on: the longest mount point that holds it; of mounts
    stacked on one point, the last listed (the one on top)."""
    best = None
    for m in table:
        point = m["mount_point"].rstrip("/") + "/"
        if (path.rstrip("/") + "/").startswith(point) and (
            best is None or len(m["mount_point"]) >= len(best["mount_point"])
        ):
            best = m
    return best


def active(scheduler):
    """'none [mq-deadline] kyber' -> 'mq-deadline' (a single word is the only one)."""
    if scheduler is None:
        return None
    m = re.search(r"\[([^]]+)\]", scheduler)
    return m[1] if m else scheduler or None


def queue_of(sysdir):
    q = os.path.join(sysdir, "queue")
    out = {k: number(read(os.path.join(q, k))) for k in QUEUE}
    out["scheduler"] = active(out["scheduler"])
    return out


def sysdir_of(majmin):
    """The device's folder under /sys/devices, by "major:minor"; None if not a block device."""
    link = f"/sys/dev/block/{majmin}"
    return os.path.realpath(link) if os.path.exists(link) else None


def whole_disk(sysdir):
    """A partition's disk folder (its parent), else the folder itself."""
    return os.path.dirname(sysdir) if os.path.exists(os.path.join(sysdir, "partition")) else sysdir


def members(sysdir, seen=None):
    """The whole disks under a dm/md device (slaves, recursively; a partition's disk)."""
    seen = set() if seen is None else seen
    out = []
    slaves = os.path.join(sysdir, "slaves")
    try:
        names = sorted(os.listdir(slaves))
    except OSError:
        return out
    for name in names:
        d = os.path.realpath(os.path.join(slaves, name))
        if d in seen:
            continue
        seen.add(d)
        below = members(d, seen)
        out += below or [whole_disk(d)]
    return out


def btrfs_fsid(kname):
    """The fsid under /sys/fs/btrfs whose devices/ lists ``kname``; None if none."""
    try:
        fsids = sorted(os.listdir("/sys/fs/btrfs"))
    except OSError:
        return None
    for fsid in fsids:
        if os.path.exists(f"/sys/fs/btrfs/{fsid}/devices/{kname}"):
            return fsid
    return None


def parse_dumpe2fs(text):
    """dumpe2fs -h (or tune2fs -l): the features, flags, block size, default mount options."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    feats = fields.get("Filesystem features")
    if feats is None:
        return None
    # needs_recovery is a state (set while mounted, the journal in use), not a feature
    return {
        "features": sorted(f for f in feats.split() if f not in ("needs_recovery", "(none)")),
        "flags": fields.get("Filesystem flags"),
        "block_size": number(fields.get("Block size")),
        "default_mount_options": fields.get("Default mount options"),
    }


def parse_xfs_info(text):
    """xfs_info: {section.key: value} of :data:`XFS_FIELDS`, and the flags that are on."""
    fields = {}
    section = None
    for line in text.splitlines():
        m = re.match(r"^(\S+)\s*=", line)
        if m:
            section = m[1]
        elif not line.startswith(" "):
            continue
        body = line.split("=", 1)[1] if "=" in line else ""
        # the value right after the section's "=" (e.g. "internal log", "version 2")
        first = re.match(r"^(\S[^=]*?)\s{2,}", body)
        if m and first and "=" not in first[1]:
            fields[f"{section}.{section}"] = first[1].strip()
        for key, value in re.findall(r"([\w-]+)=([^\s,]+)", body):
            fields.setdefault(f"{section}.{key}", value)
    if not fields:
        return None
    return {
        "features": sorted(k for k in XFS_FLAGS if fields.get(f"meta-data.{k}") == "1"),
        "fields": {k: number(fields[k]) for k in XFS_FIELDS if k in fields},
    }


def _tool(module, argv, parse):
    rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
    parsed = parse(out) if rc == 0 else None
    if parsed is None:
        return {"error": f"{' '.join(argv)}: exit {rc}: {oneline(err or out)}"}
    return {**parsed, "tool": " ".join(argv[:-1])}


def _btrfs(kname):
    fsid = btrfs_fsid(kname) if kname else None
    if fsid is None:
        return {"error": f"no /sys/fs/btrfs/<fsid> lists {kname}"}
    try:
        names = sorted(os.listdir(f"/sys/fs/btrfs/{fsid}/features"))
    except OSError as e:
        return {"error": f"/sys/fs/btrfs/{fsid}/features: {e.strerror}"}
    return {"features": names, "tool": f"/sys/fs/btrfs/{fsid}/features"}


def fs_features(module, mount, device):
    """The filesystem's features, from the tool that reads its own superblock (ext2-4:
    dumpe2fs -h on the device; xfs: xfs_info on the mount point; btrfs: sysfs)."""
    fstype = mount["fstype"]
    if fstype in ("ext2", "ext3", "ext4"):
        if not device:
            return {"error": f"no block device behind {mount['source']}"}
        return _tool(module, ["dumpe2fs", "-h", device], parse_dumpe2fs)
    if fstype == "xfs":
        return _tool(module, ["xfs_info", mount["mount_point"]], parse_xfs_info)
    if fstype == "btrfs":
        return _btrfs(os.path.basename(device) if device else None)
    return {"features": None, "note": f"{fstype}: features not read"}


def storage(module, path):
    real = os.path.realpath(path)
    table = parse_mounts(read("/proc/self/mounts") or "")
    mount = mount_of(real, table)
    if mount is None:
        module.fail_json(msg=f"path: {path}: no mount in /proc/self/mounts holds it")
    out = {"path": path, "mount": mount}
    # the filesystem's device: st_dev of the path (the real device on most; btrfs
    # and a few others give an anonymous one), else the mount's source device node
    st_dev = os.stat(real).st_dev
    sysdir = sysdir_of(f"{os.major(st_dev)}:{os.minor(st_dev)}")
    if sysdir is None and mount["source"].startswith("/dev/"):
        try:
            rdev = os.stat(mount["source"]).st_rdev
            sysdir = sysdir_of(f"{os.major(rdev)}:{os.minor(rdev)}")
        except OSError:
            sysdir = None
    if sysdir is None:
        out["device"] = None
        out["filesystem"] = fs_features(module, mount, None)
        return out
    kname = os.path.basename(sysdir)
    disk = whole_disk(sysdir)
    out["device"] = {
        "name": kname,
        "path": f"/dev/{kname}",
        "partition": disk != sysdir,
        "disk": os.path.basename(disk),
        "dm_name": read(os.path.join(sysdir, "dm", "name")),
        "md_level": read(os.path.join(sysdir, "md", "level")),
    }
    out["queue"] = queue_of(disk)
    under = members(disk)
    fsid = btrfs_fsid(kname) if mount["fstype"] == "btrfs" else None
    btrfs = sorted(os.listdir(f"/sys/fs/btrfs/{fsid}/devices")) if fsid else []
    if len(btrfs) > 1:  # a multi-device Btrfs: every member's disk, the mounted one too
        under += [whole_disk(os.path.realpath(f"/sys/fs/btrfs/{fsid}/devices/{n}")) for n in btrfs]
    if under:
        out["members"] = {os.path.basename(d): queue_of(d) for d in under}
    out["filesystem"] = fs_features(module, mount, out["device"]["path"])
    return out


def os_release():
    fields = {}
    for line in (read("/etc/os-release") or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key] = value.strip().strip('"')
    return {"pretty_name": fields.get("PRETTY_NAME"), "version_id": fields.get("VERSION_ID")}


def cpu():
    model = None
    for line in (read("/proc/cpuinfo") or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("model name", "Model", "cpu model"):
            model = value.strip()
            break
    governors = set()
    drivers = set()
    base = "/sys/devices/system/cpu"
    for name in sorted(os.listdir(base)):
        if re.fullmatch(r"cpu\d+", name):
            g = read(f"{base}/{name}/cpufreq/scaling_governor")
            d = read(f"{base}/{name}/cpufreq/scaling_driver")
            if g:
                governors.add(g)
            if d:
                drivers.add(d)
    return {
        "model": model,
        "count": os.cpu_count(),
        "allowed": len(os.sched_getaffinity(0)),
        # a VM, or no cpufreq driver: the kernel does not scale the frequency
        "governor": ",".join(sorted(governors)) if governors else "none (no cpufreq)",
        "frequency_driver": ",".join(sorted(drivers)) or None,
    }


def postgresql(module, port, socket, databases):
    """What the cluster on ``port`` says of itself (PG_QUERY), as a dict."""
    try:
        return json_value(module, port, socket, PG_QUERY, {"dbs": ",".join(databases)})
    except PsqlError as err:
        module.fail_json(msg=f"postgresql on port {port}: {oneline(str(err))}")


class Module(AnsibleModule):
    """Every result, failed or not, carries ``carry`` (what the cold start did)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.carry = {}

    def exit_json(self, **kwargs):
        super().exit_json(**{**kwargs, **self.carry})

    def fail_json(self, msg, **kwargs):
        super().fail_json(msg=msg, **{**kwargs, **self.carry})


def fstrim(module, port, socket, databases):
    """``fstrim -v`` of the filesystem under the client databases (the mount holding
    their data path), before the run: its mount point, the bytes it trimmed, seconds."""
    pg = postgresql(module, port, socket, databases)
    path = os.path.realpath((pg["data_paths"] or [pg["data_directory"]])[0])
    mount = mount_of(path, parse_mounts(read("/proc/self/mounts") or ""))
    if mount is None:
        module.fail_json(msg=f"fstrim: no mount holds {path}")
    started = time.monotonic()
    proc = subprocess.run(["fstrim", "-v", mount["mount_point"]], capture_output=True,
                          text=True, check=False, cwd="/")  # fmt: skip
    if proc.returncode != 0:
        module.fail_json(
            msg=f"fstrim {mount['mount_point']}: {oneline(proc.stderr or proc.stdout)}"
        )
    m = re.search(r"\(([0-9]+) bytes\)", proc.stdout)
    return {"mount_point": mount["mount_point"], "trimmed_bytes": int(m.group(1)) if m else None,
            "seconds": round(time.monotonic() - started, 3)}  # fmt: skip


def main():
    module = Module(
        argument_spec={
            "path": {"type": "path"},
            "port": {"type": "int"},
            "databases": {"type": "list", "elements": "str", "default": []},
            "socket": {"type": "path", "default": "/var/run/postgresql"},
            "snapshot_sql": {"type": "str"},
            # the cell's TRIM policy: recorded; fstrim: the data's filesystem trimmed first
            "trim": {"type": "str", "choices": ["none", "discard", "fstrim"]},
            "cold_start": {
                "type": "dict",
                "options": {
                    "cluster": {"type": "str", "required": True},
                    "major": {"type": "str", "required": True},
                    "mode": {"type": "str", "choices": ["cold", "settled"], "default": "cold"},
                },
            },
        },
        required_one_of=[("path", "port")],
        required_by={"snapshot_sql": ("port",), "cold_start": ("port", "databases")},
        supports_check_mode=True,
    )
    p = module.params
    bad = [db for db in p["databases"] if not DATABASE.match(db)]
    if bad:
        module.fail_json(msg=f"databases: {', '.join(bad)}: not drivelab databases")
    trimmed = None
    if p["trim"] == "fstrim" and not module.check_mode and p["port"] is not None:
        trimmed = fstrim(module, p["port"], p["socket"], p["databases"])
    if p["cold_start"] and not module.check_mode:
        cold = p["cold_start"]
        refused = refusal(cold["cluster"], p["databases"])
        if refused:
            module.fail_json(msg=refused, cold_start_failed=True)
        seconds, failed = cold_start(
            cold["major"], cold["cluster"], p["port"], p["databases"], mode=cold["mode"]
        )
        if failed:
            module.fail_json(msg=failed[0], rc=failed[1], cold_start_failed=True, seconds=seconds)
        # from here on a failure is the environment's: the cold start is done, and says so
        module.carry = {"changed": True, "cold_start": {"seconds": seconds, "mode": cold["mode"]}}
    extra = {}
    if p["port"] is not None:
        pg = postgresql(module, p["port"], p["socket"], p["databases"])
        pg["data_paths"] = pg["data_paths"] or []
        extra = {"postgresql": pg, "memory": memory()}
    path = p["path"] or (extra["postgresql"]["data_paths"] or [pg["data_directory"]])[0]
    if not os.path.isabs(path):
        module.fail_json(msg=f"path: {path!r} is not absolute")
    if not os.path.exists(path):
        module.fail_json(msg=f"path: {path} does not exist on this host")
    uname = os.uname()
    environment = {
        "kernel": {"release": uname.release, "version": uname.version},
        "os": os_release(),
        "sysctl": {k: number(read("/proc/sys/" + k.replace(".", "/"))) for k in SYSCTLS},
        "cpu": cpu(),
        "storage": storage(module, path),
    }
    if p["trim"]:
        environment["trim"] = {"policy": p["trim"], **(trimmed or {})}
    wal = os.path.join(extra["postgresql"]["data_directory"], "pg_wal") if extra else None
    if wal and os.path.islink(wal):
        # initdb --waldir: the WAL on a drive of its own, recorded as the data's storage is
        environment["wal"] = storage(module, os.path.realpath(wal))
    if p["snapshot_sql"]:  # last: as close to the clients' start as the module gets
        try:
            extra["snapshot"] = json_row(module, p["port"], p["socket"], p["snapshot_sql"])
        except PsqlError as err:
            module.fail_json(msg=f"snapshot of the server on port {p['port']}: {oneline(str(err))}")
    module.exit_json(environment=environment, **extra)


if __name__ == "__main__":
    main()
