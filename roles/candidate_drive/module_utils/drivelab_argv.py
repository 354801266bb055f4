# The one place that builds the argv of every command that writes to a candidate
# drive: wipefs, mkfs (one per filesystem of FILESYSTEMS), mdadm, mount and umount. Pure Python, standard
# library only: the modules on the DB host import it as ansible.module_utils, and the
# controller's scenario check loads the same file, so every entry point (scenario,
# playbook -e, tasks_from, the module called directly) gets the same refusals.
#
# mkfs and mount options pass an allow-list per filesystem: the options a benchmark
# needs, each value checked for its type. Nothing the operator gives may name a path,
# a device, a file to read or a directory to copy. Every argv built here is then
# sealed: each argument that looks like a path must be one drivelab itself put there
# (a device the gate passed in this run, the mount point), or nothing runs.
from __future__ import annotations

import os
import re
import shutil

#: refusal codes a caller may act on (a module's failed result carries one as ``refusal``)
REFUSED = "refused"  # any other refusal: nothing to do but read the message
HOLDS_POSTGRESQL_DATA = "holds_postgresql_data"  # release drivelab's databases, then retry


#: the filesystems drivelab makes on a candidate drive, one row each: its mkfs and the
#: flag that makes it overwrite (the gate has passed the device), the Debian/Ubuntu
#: package that carries it, the longest label it takes, whether it spans a RAID itself,
#: and the mkfs option that keeps it from discarding the device first (a drive brought
#: to a state by writing it: drive_state; an ``-E`` suboption joins the list). drive_format, the
#: scenario schema, the preflight filter and the allow-lists below read it; the argument
#: specs and docs/scenarios.md are held to it by tests/unit/test_vocabulary.py. A new
#: filesystem is a row here, its MKFS and MOUNT allow-lists, and their tests.
FILESYSTEMS = {
    "ext4": {"mkfs": "mkfs.ext4", "force": "-F", "package": "e2fsprogs", "label_max": 16,
             "native_raid": False, "nodiscard": ("-E", "nodiscard")},
    "xfs": {"mkfs": "mkfs.xfs", "force": "-f", "package": "xfsprogs", "label_max": 12,
            "native_raid": False, "nodiscard": ("-K",)},
    "btrfs": {"mkfs": "mkfs.btrfs", "force": "-f", "package": "btrfs-progs", "label_max": 255,
              "native_raid": True, "nodiscard": ("-K",)},
}  # fmt: skip


def filesystem_names():
    """The filesystems as the one-line refusals list them: ``ext4, xfs or btrfs``."""
    names = list(FILESYSTEMS)
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


class Refusal(Exception):
    """drivelab will not do it. str() is one line naming the culprit and the reason;
    ``index`` is the position of the culprit in a list of arguments, when it is one;
    ``code`` says what kind of refusal it is, for a caller to decide on (never the text)."""

    def __init__(self, msg, index=None, code=REFUSED):
        super().__init__(msg)
        self.index = index
        self.code = code


# --- value types -------------------------------------------------------------------------

_INT = re.compile(r"[0-9]{1,12}")
_SIZE = re.compile(r"[0-9]{1,12}[kKmMgGtTpP]?")  # 4096, 64k, 128M (mke2fs, btrfs)
_XFS_SIZE = re.compile(r"[0-9]{1,12}[kKmMgGtTpPsSbB]?")  # xfs also takes s(ectors), b(locks)
_WORD = re.compile(r"[a-z][a-z0-9_-]{0,31}")


def _int(lo=0, hi=2**62):
    def ok(v):
        return bool(_INT.fullmatch(v)) and lo <= int(v) <= hi

    ok.what = f"a whole number from {lo} to {hi}" if hi < 2**62 else "a whole number"
    return ok


def _pattern(rx, what):
    def ok(v):
        return bool(rx.fullmatch(v))

    ok.what = what
    return ok


def _choice(*values):
    def ok(v):
        return v in values

    ok.what = "one of " + ", ".join(values)
    return ok


def _features(known):
    """A comma list of feature names, each optionally negated with '^'."""

    def ok(v):
        return bool(v) and all(f.removeprefix("^") in known for f in v.split(","))

    ok.what = "a comma list of (^)" + "|".join(sorted(known))
    return ok


def _subopts(spec):
    """name=value[,name=value...] where each name is in spec (value type, or None for a
    bare flag)."""

    def ok(v):
        for part in v.split(","):
            name, eq, value = part.partition("=")
            if name not in spec:
                return False
            check = spec[name]
            if check is None:
                if eq:
                    return False
            elif isinstance(check, tuple):  # flag that may also take a value
                if eq and not check[0](value):
                    return False
            elif not eq or not check(value):
                return False
        return True

    ok.what = "name=value pairs of " + ", ".join(spec)
    ok.names = spec
    return ok


SIZE = _pattern(_SIZE, "a size (4096, 64k, 1M)")
XSIZE = _pattern(_XFS_SIZE, "a size (4096, 64k, 1m)")
BOOL01 = _choice("0", "1")
POW2_BLOCK = _choice(*[str(2**n) for n in range(10, 17)])  # 1 KiB .. 64 KiB

# --- mkfs allow-lists ----------------------------------------------------------------------
# short option -> (long names, value check or None for a flag). Anything not here is
# refused, so the options that name a path or a device (ext4 -d, -J device=, -z, -l,
# -c; xfs -l logdev=, -r rtdev=, -d file/name=, -p protofile, -c options=; btrfs
# --rootdir, -r, --device-uuid...) and those that would forge drivelab's own marker
# (-L, -U, uuid=) are refused by not being listed.

EXT4_FEATURES = {
    "64bit", "bigalloc", "casefold", "dir_index", "dir_nlink", "ea_inode", "encrypt",
    "ext_attr", "extent", "extents", "extra_isize", "fast_commit", "filetype", "flex_bg",
    "has_journal", "huge_file", "inline_data", "large_dir", "large_file", "metadata_csum",
    "metadata_csum_seed", "mmp", "orphan_file", "project", "quota", "resize_inode",
    "sparse_super", "sparse_super2", "stable_inodes", "uninit_bg", "verity",
}  # fmt: skip
BTRFS_FEATURES = {
    "mixed-bg", "extref", "raid56", "skinny-metadata", "no-holes", "zoned", "quota",
    "free-space-tree", "block-group-tree", "raid-stripe-tree", "squota", "list-all",
}  # fmt: skip
BTRFS_PROFILES = (
    "single",
    "dup",
    "raid0",
    "raid1",
    "raid1c3",
    "raid1c4",
    "raid10",
    "raid5",
    "raid6",
)

MKFS = {
    "ext4": {
        "-b": ((), POW2_BLOCK),
        "-C": ((), SIZE),
        "-E": ((), _subopts({
            "stride": _int(1), "stripe_width": _int(1), "stripe-width": _int(1),
            "lazy_itable_init": (BOOL01,), "lazy_journal_init": (BOOL01,),
            "packed_meta_blocks": (BOOL01,), "num_backup_sb": _choice("0", "1", "2"),
            "resize": _int(1), "discard": None, "nodiscard": None,
            "assume_storage_prezeroed": (BOOL01,),
        })),
        "-G": ((), _int(1, 2**31)),
        "-g": ((), _int(256, 2**31)),
        "-i": ((), _int(1024, 2**26)),
        "-I": ((), _choice("128", "256", "512", "1024", "2048", "4096")),
        "-j": ((), None),
        "-J": ((), _subopts({"size": _int(1, 2**20), "fast_commit_size": _int(1, 2**20)})),
        "-m": ((), _pattern(re.compile(r"[0-9]{1,2}(\.[0-9]{1,3})?"), "a percentage (0-50)")),
        "-N": ((), _int(1)),
        "-O": ((), _features(EXT4_FEATURES)),
        "-T": ((), _pattern(_WORD, "a usage type from mke2fs.conf (news, largefile, ...)")),
        "-e": ((), _choice("continue", "remount-ro", "panic")),
        "-K": ((), None),
    },
    "xfs": {
        "-b": ((), _subopts({"size": XSIZE})),
        "-d": ((), _subopts({
            "agcount": _int(1), "agsize": XSIZE, "su": XSIZE, "sw": _int(1),
            "sunit": _int(0), "swidth": _int(0), "noalign": None,
            "cowextsize": _int(0), "extszinherit": _int(0), "daxinherit": BOOL01,
            "size": XSIZE,
        })),
        "-i": ((), _subopts({
            "size": XSIZE, "maxpct": _int(0, 100), "align": BOOL01, "attr": _choice("1", "2"),
            "projid32bit": BOOL01, "sparse": BOOL01, "nrext64": BOOL01, "exchange": BOOL01,
        })),
        "-l": ((), _subopts({
            "size": XSIZE, "version": _choice("1", "2"), "sunit": _int(0), "su": XSIZE,
            "lazy-count": BOOL01, "agnum": _int(0),
        })),
        "-m": ((), _subopts({
            "crc": BOOL01, "finobt": BOOL01, "rmapbt": BOOL01, "reflink": BOOL01,
            "bigtime": BOOL01, "inobtcount": BOOL01,
        })),
        "-n": ((), _subopts({"size": XSIZE, "version": _choice("2", "ci"), "ftype": BOOL01, "parent": BOOL01})),
        "-r": ((), _subopts({"extsize": XSIZE})),
        "-s": ((), _subopts({"size": XSIZE})),
        "-K": ((), None),
    },
    "btrfs": {
        "-d": (("--data",), _choice(*BTRFS_PROFILES)),
        "-m": (("--metadata",), _choice(*BTRFS_PROFILES)),
        "-n": (("--nodesize",), SIZE),
        "-s": (("--sectorsize",), SIZE),
        "-O": (("--features",), _features(BTRFS_FEATURES)),
        "-R": (("--runtime-features",), _features({"quota", "free-space-tree"})),
        "-M": (("--mixed",), None),
        "-K": (("--nodiscard",), None),
        "-b": (("--byte-count",), SIZE),
        "--csum": (("--checksum",), _choice("crc32c", "xxhash", "sha256", "blake2")),
    },
}  # fmt: skip

#: options drive_format sets itself, and why they are not the operator's
OWN_MKFS = {"-L": "the label is drivelab's own marker", "-f": "drivelab adds it",
            "-F": "drivelab adds it", "-q": "drivelab adds it",
            "--label": "the label is drivelab's own marker", "--force": "drivelab adds it",
            "--quiet": "drivelab adds it"}  # fmt: skip
#: btrfs profiles drive_format sets from raid_level
RAID_SET = {"-d", "-m"}

#: packages that carry each tool on Debian and Ubuntu
PACKAGE = {**{row["mkfs"]: row["package"] for row in FILESYSTEMS.values()},
           "wipefs": "util-linux", "blkid": "util-linux", "mount": "mount",
           "umount": "mount", "mdadm": "mdadm"}  # fmt: skip


def _long_names(fs):
    return {long: short for short, (longs, _) in MKFS[fs].items() for long in longs}


def mkfs_options(fs, options, *, raid=False):
    """The operator's extra mkfs arguments for ``fs``, checked against the allow-list
    and returned as [(option, value or None)] in canonical form. ``raid``: drivelab
    sets the Btrfs profiles itself. Raises Refusal naming the first bad argument."""
    if fs not in MKFS:
        raise Refusal(f"mkfs: filesystem {fs!r} is not {filesystem_names()}")
    if not isinstance(options, (list, tuple)):
        raise Refusal(f"mkfs options must be a list of arguments, not {type(options).__name__}")
    table, longs = MKFS[fs], _long_names(fs)
    out, i = [], 0
    while i < len(options):
        at, tok = i, options[i]
        where = f"mkfs.{fs} option {tok!r}"
        if not isinstance(tok, str) or not tok:
            raise Refusal(f"mkfs.{fs} option {tok!r}: each argument must be a non-empty string", at)
        i += 1
        value = None
        if tok.startswith("--"):
            name, eq, attached = tok.partition("=")
            short = longs.get(name, name)
            if eq:
                value = attached
        elif tok.startswith("-") and len(tok) >= 2:
            short = tok[:2]
            if len(tok) > 2:
                value = tok[2:]  # getopt's -b4096
        else:
            raise Refusal(
                f"{where}: a bare argument is not an option"
                " (mkfs takes its devices from the gate, never from the options)",
                at,
            )
        if short in OWN_MKFS or tok in OWN_MKFS:
            raise Refusal(f"{where}: not allowed ({OWN_MKFS.get(short) or OWN_MKFS[tok]})", at)
        if short not in table:
            raise Refusal(
                f"{where}: not an option drivelab allows for {fs}"
                f" (allowed: {', '.join(sorted(table))})",
                at,
            )
        if raid and fs == "btrfs" and short in RAID_SET:
            raise Refusal(f"{where}: the data and metadata profiles come from raid_level", at)
        check = table[short][1]
        if check is None:
            if value is not None:
                raise Refusal(f"{where}: {short} takes no value", at)
            out.append((short, None))
            continue
        if value is None:
            if i >= len(options) or not isinstance(options[i], str):
                raise Refusal(f"{where}: needs a value ({check.what})", at)
            value = options[i]
            at = i
            i += 1
        if not check(value):
            fault = _subopt_fault(check.names, value) if hasattr(check, "names") else None
            raise Refusal(
                f"mkfs.{fs} option {short} {value!r}: {fault or 'must be ' + check.what}", at
            )
        out.append((short, value))
    return out


def _subopt_fault(spec, value):
    """Why ``value`` is not name=value pairs of ``spec``, naming the part at fault."""
    for part in value.split(","):
        name, eq, val = part.partition("=")
        check = spec.get(name, False)
        if check is False:
            return f"{name!r} is not a suboption drivelab allows (allowed: {', '.join(spec)})"
        if check is None and eq:
            return f"{name} takes no value"
        if isinstance(check, tuple):
            check = check[0] if eq else None
        if check is not None and (not eq or not check(val)):
            return f"{name}= must be {check.what}"
    return None


def _flat(pairs):
    return [x for opt, val in pairs for x in ((opt,) if val is None else (opt, val))]


# --- mount options ------------------------------------------------------------------------

_MOUNT_COMMON = {
    "defaults": None, "rw": None, "noatime": None, "relatime": None, "strictatime": None,
    "lazytime": None, "nolazytime": None, "nodiratime": None, "diratime": None,
    "sync": None, "async": None, "dirsync": None, "nodev": None, "nosuid": None,
    "noexec": None, "discard": None, "nodiscard": None,
}  # fmt: skip
MOUNT = {
    "ext4": {
        **_MOUNT_COMMON,
        "data": _choice("ordered", "writeback", "journal"), "barrier": (BOOL01,),
        "nobarrier": None, "commit": _int(0, 86400), "journal_checksum": None,
        "nojournal_checksum": None, "journal_async_commit": None, "delalloc": None,
        "nodelalloc": None, "stripe": _int(0), "inode_readahead_blks": _int(0, 2**30),
        "dioread_nolock": None, "dioread_lock": None, "max_batch_time": _int(0),
        "min_batch_time": _int(0), "journal_ioprio": _int(0, 7), "auto_da_alloc": (BOOL01,),
        "noauto_da_alloc": None, "errors": _choice("continue", "remount-ro", "panic"),
        "init_itable": (_int(0),), "noinit_itable": None, "block_validity": None,
        "noblock_validity": None, "discard": None,
    },
    "xfs": {
        **_MOUNT_COMMON,
        "allocsize": XSIZE, "largeio": None, "nolargeio": None, "inode64": None,
        "inode32": None, "logbufs": _int(2, 8), "logbsize": XSIZE, "noalign": None,
        "sunit": _int(0), "swidth": _int(0), "swalloc": None, "wsync": None,
        "filestreams": None, "ikeep": None, "noikeep": None,
    },
    "btrfs": {
        **_MOUNT_COMMON,
        "compress": (_pattern(re.compile(r"(zlib|lzo|zstd|no)(:[0-9]{1,2})?"), "zlib|lzo|zstd|no[:level]"),),
        "compress-force": (_pattern(re.compile(r"(zlib|lzo|zstd)(:[0-9]{1,2})?"), "zlib|lzo|zstd[:level]"),),
        "space_cache": (_choice("v1", "v2"),), "nospace_cache": None, "ssd": None,
        "nossd": None, "ssd_spread": None, "nossd_spread": None, "autodefrag": None,
        "noautodefrag": None, "commit": _int(0, 86400), "datacow": None, "nodatacow": None,
        "datasum": None, "nodatasum": None, "discard": (_choice("sync", "async"),),
        "flushoncommit": None, "noflushoncommit": None, "barrier": None, "nobarrier": None,
        "thread_pool": _int(1, 1024), "max_inline": XSIZE, "skip_balance": None,
    },
}  # fmt: skip
#: what drivelab adds itself, or never: a device, a loop, an offset, a file
_MOUNT_WHY = {
    "device": "drivelab adds the members of a Btrfs RAID itself",
    "loop": "it would mount a file, not the gated drive",
    "offset": "it would mount a file, not the gated drive",
    "sizelimit": "it would mount a file, not the gated drive",
    "logdev": "it names another device", "rtdev": "it names another device",
    "journal_dev": "it names another device", "journal_path": "it names another device",
    "usrjquota": "it names a file", "grpjquota": "it names a file",
    "subvol": "drivelab mounts the whole filesystem", "subvolid": "drivelab mounts the whole filesystem",
    "degraded": "a RAID member would be missing",
    "ro": "a benchmark writes", "remount": "drivelab mounts, never remounts",
    "bind": "it would mount a folder, not the gated drive",
}  # fmt: skip


def mount_options(fs, opts):
    """The operator's mount option string for ``fs``, checked against the allow-list;
    returns the list of options. Raises Refusal naming the first bad option."""
    if fs not in MOUNT:
        raise Refusal(f"mount: filesystem {fs!r} is not {filesystem_names()}")
    if not isinstance(opts, str) or not opts:
        raise Refusal(f"mount options {opts!r}: must be a non-empty option string")
    table = MOUNT[fs]
    out = []
    for opt in opts.split(","):
        name, eq, value = opt.partition("=")
        where = f"mount option {opt!r} ({fs})"
        if name.lower() in _MOUNT_WHY or name.lower().startswith(("x-", "x_")):
            why = _MOUNT_WHY.get(name.lower(), "a userspace option mount would act on")
            raise Refusal(f"{where}: not allowed ({why})")
        if name not in table:
            raise Refusal(f"{where}: not an option drivelab allows for {fs}")
        check = table[name]
        if check is None:
            if eq:
                raise Refusal(f"{where}: {name} takes no value")
        elif isinstance(check, tuple):
            if eq and not check[0](value):
                raise Refusal(f"{where}: the value must be {check[0].what}")
        elif not eq or not check(value):
            raise Refusal(f"{where}: needs a value, {check.what}")
        out.append(opt)
    return out


# --- tools ----------------------------------------------------------------------------------


def tools_for(fs, raid_method="none"):
    """The commands a format needs, in the order they run."""
    need = ["blkid", "wipefs"]
    if raid_method == "mdadm":
        need.append("mdadm")
    return [
        *need,
        FILESYSTEMS[fs]["mkfs"] if fs in FILESYSTEMS else f"mkfs.{fs}",
        "mount",
        "umount",
    ]


def resolve_tools(names, what):
    """{name: absolute path} from this process's PATH; refuses, before anything is
    written, naming every missing tool and the package that carries it."""
    found, missing = {}, []
    for name in names:
        path = shutil.which(name)
        if path:
            found[name] = path
        else:
            missing.append(f"{name} (package {PACKAGE.get(name, name)})")
    if missing:
        raise Refusal(
            f"{what}: {', '.join(missing)} not found on PATH on this host;"
            " nothing was written (install it, or let the candidate_drive role do it)"
        )
    return found


# --- the argv builder --------------------------------------------------------------------


def md_path(name):
    return f"/dev/md/drivelab-{name}"


class Commands:
    """Builds argv for the commands that write to candidate drives, bound to the
    devices the gate passed in this run and to drivelab's mount root. Every argv is
    sealed: an argument that looks like a path must be one of those, or a Refusal is
    raised instead of a command."""

    def __init__(self, gated, mount_root, tools):
        self.gated = {os.path.realpath(d) for d in gated}
        root = os.path.normpath(str(mount_root))
        if not os.path.isabs(root) or root == "/":
            raise Refusal(f"mount root {mount_root!r}: must be an absolute folder other than /")
        self.mount_root = root
        self.tools = tools
        self.extra = set()  # md arrays drivelab created in this run

    def _tool(self, name):
        if name not in self.tools:
            raise Refusal(f"{name}: was not resolved before the first write")
        return self.tools[name]

    def _device(self, dev):
        if dev in self.extra:
            return dev
        real = os.path.realpath(dev)
        if real not in self.gated:
            raise Refusal(f"{dev}: not a device the gate passed in this run; nothing was run")
        return real

    def _point(self, name):
        point = os.path.join(self.mount_root, name)
        if os.path.dirname(point) != self.mount_root or not re.fullmatch(r"[a-z0-9_]+", name):
            raise Refusal(
                f"mount point name {name!r}: must be a plain name under {self.mount_root}"
            )
        return point

    def seal(self, argv, allowed=()):
        """argv unchanged if every argument after the tool that could name a path or a
        device is drivelab's own (a gated device, an md array made in this run, the
        mount point); else a Refusal."""
        ok = self.gated | self.extra | set(allowed)
        for arg in argv[1:]:
            if arg in ok:
                continue
            for part in arg.split(","):
                key, eq, value = part.partition("=")
                for v in (key, value) if eq else (part,):
                    if ("/" in v or v.startswith("~")) and v not in ok:
                        raise Refusal(
                            f"{os.path.basename(argv[0])}: argument {arg!r} names {v},"
                            " which is not a device the gate passed in this run; nothing was run"
                        )
        return list(argv)

    def wipefs(self, dev):
        return self.seal([self._tool("wipefs"), "-a", self._device(dev)])

    def mdadm_create(self, name, level, devices):
        devs = [self._device(d) for d in devices]
        md = md_path(name)
        if level not in ("raid0", "raid1", "raid5", "raid10"):
            raise Refusal(f"{name}: md RAID level {level!r} is not raid0, raid1, raid5 or raid10")
        self._point(name)  # the same name rules
        self.extra.add(md)
        return self.seal(
            [self._tool("mdadm"), "--create", md, f"--level={level.removeprefix('raid')}",
             f"--raid-devices={len(devs)}", "--metadata=1.2", "--run", "--force", *devs]
        )  # fmt: skip

    def mdadm_assemble(self, name, md_uuid, devices):
        """mdadm --assemble of drivelab's array ``name`` from gated members, by its UUID
        (32 hex digits, any of - : . between them, as blkid and mdadm print it)."""
        devs = [self._device(d) for d in devices]
        digits = re.sub(r"[-:.]", "", str(md_uuid))
        if not re.fullmatch(r"[0-9a-fA-F]{32}", digits):
            raise Refusal(f"{name}: md array UUID {md_uuid!r} is not 32 hex digits")
        self._point(name)  # the same name rules
        md = md_path(name)
        self.extra.add(md)
        return self.seal(
            [self._tool("mdadm"), "--assemble", md, f"--uuid={md_uuid}", "--run", *devs]
        )

    def mdadm_stop_kernel_name(self, kname):
        """mdadm --stop of an array by the kernel's name for it (md127), which the caller
        has found to be drivelab's own, made of gated members only."""
        if not re.fullmatch(r"md[0-9]+", str(kname)):
            raise Refusal(f"{kname!r}: not a kernel md array name (md<number>)")
        md = f"/dev/{kname}"
        return self.seal([self._tool("mdadm"), "--stop", md], allowed=[md])

    def mdadm_stop(self, name):
        md = md_path(name)
        return self.seal([self._tool("mdadm"), "--stop", md], allowed=[md])

    def mkfs(self, fs, label, options, targets, *, raid_level="none"):
        """mkfs.<fs> over ``targets`` (one device, or every member of a Btrfs RAID)."""
        pairs = mkfs_options(fs, options, raid=raid_level != "none")
        devs = [self._device(t) for t in targets]
        row = FILESYSTEMS[fs]  # mkfs_options refused any other
        native = row["native_raid"] and raid_level != "none"
        if len(devs) != 1 and not native:
            raise Refusal(f"mkfs.{fs}: {len(devs)} devices, only a Btrfs RAID spans several")
        raid = ["-d", raid_level, "-m", raid_level] if native else []
        argv = [self._tool(row["mkfs"]), row["force"], "-q", "-L", label, *raid, *_flat(pairs),
                *devs]  # fmt: skip
        if "/" in label or not label.startswith("drivelab-"):
            raise Refusal(f"mkfs.{fs}: label {label!r} is not drivelab's")
        return self.seal(argv)

    def mount(self, fs, source, name, opts, members=()):
        """mount -t fs -o opts source <mount root>/<name>; a Btrfs RAID gets device=
        for every member."""
        point = self._point(name)
        checked = mount_options(fs, opts)
        src = self._device(source)
        if members and len(members) > 1:
            if fs != "btrfs":
                raise Refusal(f"mount: only Btrfs mounts several devices, not {fs}")
            checked += [f"device={self._device(m)}" for m in members]
        return self.seal(
            [self._tool("mount"), "-t", fs, "-o", ",".join(checked), src, point],
            allowed=[point],
        )

    def umount(self, name):
        point = self._point(name)
        return self.seal([self._tool("umount"), point], allowed=[point])
