"""The one argv builder for wipefs, mkfs, mdadm and mount (roles/candidate_drive/
module_utils/drivelab_argv.py): every option the allow-lists accept produces an argv
that names no device but the gated ones; every option family that names a path, a
device, a file or a directory is refused in one line naming it."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.hostcode import module_util

argv = module_util("candidate_drive", "drivelab_argv")
ROOT_DIR = Path(__file__).resolve().parents[2]

GATED = ["/dev/loop20", "/dev/loop21", "/dev/loop22", "/dev/loop23"]
OTHER = "/dev/loop29"  # a device the gate did not pass
ROOT = "/srv/drivelab"
TOOLS = {t: f"/usr/sbin/{t}" for t in ("wipefs", "mkfs.ext4", "mkfs.xfs", "mkfs.btrfs", "mdadm", "mount", "umount", "blkid")}  # fmt: skip

#: for every option each allow-list accepts, values it accepts (every suboption at least once)
ACCEPTED = {
    "ext4": {
        "-b": ["1024", "4096", "65536"], "-C": ["16k", "65536"],
        "-E": ["stride=16,stripe_width=64", "stripe-width=64", "lazy_itable_init=0",
               "lazy_journal_init", "packed_meta_blocks=1", "num_backup_sb=2", "resize=100000",
               "discard", "nodiscard", "assume_storage_prezeroed=1"],
        "-G": ["16"], "-g": ["32768"], "-i": ["16384"], "-I": ["256", "512"], "-j": [None],
        "-J": ["size=64", "fast_commit_size=1", "size=128,fast_commit_size=2"], "-m": ["0", "1.5"],
        "-N": ["100000"], "-O": ["^has_journal", "metadata_csum,64bit", "fast_commit,^resize_inode"],
        "-T": ["largefile4", "news"], "-e": ["remount-ro"], "-K": [None],
    },
    "xfs": {
        "-b": ["size=4096", "size=64k"],
        "-d": ["agcount=4", "agsize=1g", "su=64k,sw=4", "sunit=128,swidth=512", "noalign",
               "cowextsize=32", "extszinherit=16", "daxinherit=0", "size=2g"],
        "-i": ["size=512", "maxpct=25", "align=1", "attr=2", "projid32bit=1", "sparse=1",
               "nrext64=0", "exchange=0"],
        "-l": ["size=64m", "version=2", "sunit=8", "su=32k", "lazy-count=1", "agnum=0"],
        "-m": ["crc=1", "finobt=1", "rmapbt=0", "reflink=1", "bigtime=1", "inobtcount=1"],
        "-n": ["size=8192", "version=ci", "ftype=1", "parent=0"], "-r": ["extsize=64k"],
        "-s": ["size=4096"], "-K": [None],
    },
    "btrfs": {
        "-d": ["single", "dup", "raid1"], "-m": ["dup", "raid1c3"], "-n": ["16k", "65536"],
        "-s": ["4096"], "-O": ["no-holes,^free-space-tree", "block-group-tree"],
        "-R": ["quota"], "-M": [None], "-K": [None], "-b": ["2g"],
        "--csum": ["xxhash", "crc32c", "sha256", "blake2"],
    },
}  # fmt: skip
MOUNT_ACCEPTED = {
    "ext4": "noatime,data=writeback,barrier=0,commit=30,journal_checksum,stripe=16,dioread_nolock,errors=remount-ro,init_itable=10",
    "xfs": "noatime,allocsize=64m,largeio,inode64,logbufs=8,logbsize=256k,sunit=128,swidth=512,swalloc",
    "btrfs": "noatime,compress=zstd:3,space_cache=v2,ssd,autodefrag,commit=60,nodatacow,discard=async,thread_pool=4,max_inline=2048",
}  # fmt: skip


def builder() -> object:
    return argv.Commands(GATED, ROOT, TOOLS)


def named_paths(args: list[str]) -> set[str]:
    """Everything in an argv (after the tool) that could name a file or a device."""
    found = set()
    for arg in args[1:]:
        for part in arg.split(","):
            for value in part.split("=", 1):
                if "/" in value:
                    found.add(value)
    return found


def test_the_table_covers_every_allowed_option():
    assert {fs: set(opts) for fs, opts in ACCEPTED.items()} == {
        fs: set(opts) for fs, opts in argv.MKFS.items()
    }


@pytest.mark.parametrize(
    ("fs", "option", "value"),
    [(fs, o, v) for fs, opts in ACCEPTED.items() for o, vs in opts.items() for v in vs],
)
def test_every_accepted_option_names_only_gated_devices(fs, option, value):
    options = [option] if value is None else [option, value]
    made = builder().mkfs(fs, "drivelab-x", options, GATED[:1])
    assert made[0] == TOOLS[f"mkfs.{fs}"]
    assert made[-1] == GATED[0]
    assert named_paths(made) <= set(GATED), made
    if value is not None:
        assert value in made


def test_all_options_at_once_and_raid_members():
    for fs, opts in ACCEPTED.items():
        options = [x for o, vs in opts.items() for x in ([o] if vs[0] is None else [o, vs[0]])]
        if fs == "btrfs":
            options = [x for x in options if x not in ("-d", "-m", "single", "dup")]
            made = builder().mkfs(fs, "drivelab-r", options, GATED, raid_level="raid10")
            assert made[-4:] == GATED and "raid10" in made
        else:
            made = builder().mkfs(fs, "drivelab-x", options, GATED[:1])
        assert named_paths(made) <= set(GATED), made


@pytest.mark.parametrize("fs", sorted(MOUNT_ACCEPTED))
def test_mount_argv_names_the_gated_device_and_the_mount_point_only(fs):
    members = GATED if fs == "btrfs" else ()
    made = builder().mount(fs, GATED[0], "nvme", MOUNT_ACCEPTED[fs], members)
    assert made[:3] == [TOOLS["mount"], "-t", fs]
    assert made[-2:] == [GATED[0], f"{ROOT}/nvme"]
    assert named_paths(made) <= {*GATED, f"{ROOT}/nvme"}
    if fs == "btrfs":
        assert all(f"device={d}" in made[4].split(",") for d in GATED)


REFUSED_MKFS = [
    # a device or a path as an argument, for each filesystem
    ("ext4", ["/dev/loop29"], "mkfs.ext4 option '/dev/loop29': a bare argument is not an option"),
    ("xfs", ["/dev/loop29"], "mkfs.xfs option '/dev/loop29': a bare argument is not an option"),
    ("btrfs", ["/dev/loop29"], "mkfs.btrfs option '/dev/loop29': a bare argument is not an option"),
    ("btrfs", ["-n", "16k", "loop29"], "mkfs.btrfs option 'loop29': a bare argument"),
    ("ext4", ["--", "/dev/loop29"], "mkfs.ext4 option '--': not an option drivelab allows"),
    # ext4: a directory to copy, an external journal, an undo file, a bad-blocks file
    ("ext4", ["-d", "/var/lib/postgresql"], "mkfs.ext4 option '-d': not an option drivelab allows for ext4"),
    ("ext4", ["-d/etc"], "mkfs.ext4 option '-d/etc': not an option drivelab allows for ext4"),
    ("ext4", ["-J", "device=/dev/loop29"], "mkfs.ext4 option -J 'device=/dev/loop29': 'device' is not a suboption"),
    ("ext4", ["-Jdevice=/dev/loop29"], "mkfs.ext4 option -J 'device=/dev/loop29': 'device' is not a suboption"),
    ("ext4", ["-J", "location=/dev/x"], "'location' is not a suboption"),
    ("ext4", ["-z", "/tmp/undo"], "mkfs.ext4 option '-z': not an option drivelab allows"),
    ("ext4", ["-l", "/etc/badblocks"], "mkfs.ext4 option '-l': not an option drivelab allows"),
    ("ext4", ["-c"], "mkfs.ext4 option '-c': not an option drivelab allows"),
    ("ext4", ["-S"], "mkfs.ext4 option '-S': not an option drivelab allows"),
    ("ext4", ["-E", "offset=4096"], "'offset' is not a suboption"),
    ("ext4", ["-E", "root_owner=0:0"], "'root_owner' is not a suboption"),
    ("ext4", ["-b", "4096/"], "mkfs.ext4 option -b '4096/': must be one of 1024"),
    # xfs: external log, realtime device, a file, a protofile, a config file
    ("xfs", ["-l", "logdev=/dev/loop29"], "mkfs.xfs option -l 'logdev=/dev/loop29': 'logdev' is not a suboption"),
    ("xfs", ["-l", "size=64m,logdev=/dev/loop29"], "'logdev' is not a suboption"),
    ("xfs", ["-l", "internal=0"], "'internal' is not a suboption"),
    ("xfs", ["-r", "rtdev=/dev/loop29"], "mkfs.xfs option -r 'rtdev=/dev/loop29': 'rtdev' is not a suboption"),
    ("xfs", ["-d", "file,name=/var/lib/x"], "'file' is not a suboption"),
    ("xfs", ["-d", "name=/dev/loop29"], "'name' is not a suboption"),
    ("xfs", ["-p", "/etc/proto"], "mkfs.xfs option '-p': not an option drivelab allows"),
    ("xfs", ["-c", "options=/etc/mkfs.conf"], "mkfs.xfs option '-c': not an option drivelab allows"),
    ("xfs", ["-m", "uuid=00000000-0000-0000-0000-000000000000"], "'uuid' is not a suboption"),
    ("xfs", ["-d", "su=64k/"], "su= must be a size"),
    # btrfs: a directory to copy, forged identities
    ("btrfs", ["--rootdir", "/var/lib/postgresql"], "mkfs.btrfs option '--rootdir': not an option drivelab allows"),
    ("btrfs", ["--rootdir=/etc"], "mkfs.btrfs option '--rootdir=/etc': not an option drivelab allows"),
    ("btrfs", ["-r", "/etc"], "mkfs.btrfs option '-r': not an option drivelab allows"),
    ("btrfs", ["-U", "u"], "mkfs.btrfs option '-U': not an option drivelab allows"),
    ("btrfs", ["--device-uuid", "u"], "mkfs.btrfs option '--device-uuid': not an option"),
    ("btrfs", ["--shrink"], "mkfs.btrfs option '--shrink': not an option"),
    ("btrfs", ["-d", "/dev/loop29"], "mkfs.btrfs option -d '/dev/loop29': must be one of single"),
    # drivelab's own marker and flags
    ("ext4", ["-L", "drivelab-nvme"], "mkfs.ext4 option '-L': not allowed (the label is drivelab's own marker)"),
    ("btrfs", ["--label=drivelab-x"], "mkfs.btrfs option '--label=drivelab-x': not allowed"),
    ("ext4", ["-U", "clear"], "mkfs.ext4 option '-U': not an option drivelab allows"),
    ("xfs", ["-f"], "mkfs.xfs option '-f': not allowed (drivelab adds it)"),
    ("xfs", ["-N"], "mkfs.xfs option '-N': not an option drivelab allows"),
    # malformed
    ("ext4", ["-b"], "mkfs.ext4 option '-b': needs a value"),
    ("ext4", ["-j", "1"], "mkfs.ext4 option '1': a bare argument"),
    ("btrfs", ["-M=1"], "mkfs.btrfs option '-M=1': -M takes no value"),
    ("ext4", [""], "each argument must be a non-empty string"),
]  # fmt: skip


@pytest.mark.parametrize(("fs", "options", "expected"), REFUSED_MKFS, ids=lambda v: repr(v)[:60])
def test_forbidden_mkfs_options_are_refused_naming_them(fs, options, expected):
    with pytest.raises(argv.Refusal) as info:
        builder().mkfs(fs, "drivelab-x", options, GATED[:1])
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_btrfs_profiles_come_from_raid_level_in_a_raid():
    with pytest.raises(argv.Refusal, match="profiles come from raid_level"):
        builder().mkfs("btrfs", "drivelab-r", ["-d", "raid0"], GATED, raid_level="raid10")


REFUSED_MOUNT = [
    ("btrfs", "noatime,device=/dev/loop29", "mount option 'device=/dev/loop29' (btrfs): not allowed"),
    ("ext4", "loop", "mount option 'loop' (ext4): not allowed (it would mount a file"),
    ("ext4", "noatime,offset=1048576", "mount option 'offset=1048576' (ext4): not allowed"),
    ("ext4", "journal_path=/dev/loop29", "mount option 'journal_path=/dev/loop29' (ext4): not allowed"),
    ("ext4", "journal_dev=1793", "not allowed (it names another device)"),
    ("ext4", "usrjquota=/etc/q,jqfmt=vfsv1", "mount option 'usrjquota=/etc/q' (ext4): not allowed"),
    ("xfs", "logdev=/dev/loop29", "mount option 'logdev=/dev/loop29' (xfs): not allowed"),
    ("xfs", "rtdev=/dev/loop29", "mount option 'rtdev=/dev/loop29' (xfs): not allowed"),
    ("btrfs", "subvol=/x", "mount option 'subvol=/x' (btrfs): not allowed"),
    ("btrfs", "degraded", "not allowed (a RAID member would be missing)"),
    ("ext4", "x-mount.mkdir=/etc", "mount option 'x-mount.mkdir=/etc' (ext4): not allowed"),
    ("ext4", "X-mount.owner=root", "not allowed"),
    ("ext4", "bind", "mount option 'bind' (ext4): not allowed"),
    ("xfs", "data=writeback", "mount option 'data=writeback' (xfs): not an option drivelab allows for xfs"),
    ("ext4", "commit=/dev/x", "mount option 'commit=/dev/x' (ext4): needs a value"),
    ("btrfs", "compress=zstd/", "the value must be"),
    ("ext4", "noatime,,", "mount option '' (ext4): not an option"),
]  # fmt: skip


@pytest.mark.parametrize(("fs", "opts", "expected"), REFUSED_MOUNT, ids=lambda v: repr(v)[:50])
def test_forbidden_mount_options_are_refused_naming_them(fs, opts, expected):
    with pytest.raises(argv.Refusal) as info:
        builder().mount(fs, GATED[0], "nvme", opts)
    assert expected in str(info.value)


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda c: c.wipefs(OTHER), f"{OTHER}: not a device the gate passed in this run"),
        (lambda c: c.mkfs("ext4", "drivelab-x", [], [OTHER]), "not a device the gate passed"),
        (lambda c: c.mkfs("btrfs", "drivelab-x", [], [GATED[0], OTHER], raid_level="raid1"), "not a device the gate passed"),
        (lambda c: c.mkfs("ext4", "drivelab-x", [], GATED[:2]), "only a Btrfs RAID spans several"),
        (lambda c: c.mdadm_create("md", "raid1", [GATED[0], OTHER]), "not a device the gate passed"),
        (lambda c: c.mdadm_assemble("md", "0" * 32, [GATED[0], OTHER]), "not a device the gate passed"),
        (lambda c: c.mdadm_assemble("md", "/dev/loop29", GATED[:2]), "is not 32 hex digits"),
        (lambda c: c.mdadm_assemble("../md", "0" * 32, GATED[:2]), "must be a plain name"),
        (lambda c: c.mdadm_stop_kernel_name("../sda"), "not a kernel md array name"),
        (lambda c: c.mount("ext4", OTHER, "nvme", "noatime"), "not a device the gate passed"),
        (lambda c: c.mount("btrfs", GATED[0], "r", "noatime", [GATED[0], OTHER]), "not a device the gate passed"),
        (lambda c: c.mount("ext4", GATED[0], "../etc", "noatime"), "must be a plain name under /srv/drivelab"),
        (lambda c: c.umount("../../"), "must be a plain name"),
        (lambda c: c.mkfs("ext4", "/dev/loop29", [], GATED[:1]), "label '/dev/loop29' is not drivelab's"),
        (lambda c: c.seal(["/usr/sbin/mkfs.ext4", "-E", "x=/dev/loop29", GATED[0]]), "names /dev/loop29"),
    ],
    ids=["wipefs", "mkfs", "btrfs-raid", "ext4-two", "mdadm", "assemble", "assemble-uuid", "assemble-name", "stop-kname", "mount", "btrfs-device", "point", "umount", "label", "seal"],
)  # fmt: skip
def test_no_command_names_a_device_the_gate_did_not_pass(build, expected):
    with pytest.raises(argv.Refusal) as info:
        build(builder())
    assert expected in str(info.value)


def test_a_stopped_array_is_assembled_by_its_recorded_uuid_from_gated_members_only():
    uuid = "5d6b3a2e-91c4-4f0e-8a7d-0123456789ab"  # as blkid prints an md member's
    made = builder().mdadm_assemble("md10", uuid, GATED)
    assert made == ["/usr/sbin/mdadm", "--assemble", "/dev/md/drivelab-md10", f"--uuid={uuid}",
                    "--run", *GATED]  # fmt: skip
    assert builder().mdadm_assemble("md1", "5d6b3a2e:91c44f0e:8a7d0123:456789ab", GATED[:2])
    # as the kernel assembled it at boot (md127), stopped by that name only
    assert builder().mdadm_stop_kernel_name("md127") == ["/usr/sbin/mdadm", "--stop", "/dev/md127"]


def test_mount_root_must_be_a_real_folder():
    for root in ("/", "relative/path", ""):
        with pytest.raises(argv.Refusal, match="must be an absolute folder"):
            argv.Commands(GATED, root, TOOLS)


TOKENS = st.one_of(
    st.sampled_from([o for opts in argv.MKFS.values() for o in opts]),
    st.sampled_from(["-d", "-r", "-l", "-J", "-p", "-c", "-z", "--rootdir", "-L", "-U", "--"]),
    st.sampled_from([v for opts in ACCEPTED.values() for vs in opts.values() for v in vs if v]),
    st.sampled_from([OTHER, "/etc", "logdev=/dev/loop29", "device=/dev/loop29", "rtdev=/dev/sda", "name=/x", "/dev/disk/by-id/x", "loop29", "~root", "file"]),
    st.text("abcdefgx0123456789=,/-.:^_", min_size=1, max_size=12),
)  # fmt: skip


@settings(max_examples=3000, deadline=None, derandomize=True)
@given(fs=st.sampled_from(list(argv.FILESYSTEMS)), options=st.lists(TOKENS, max_size=6))
def test_whatever_the_options_an_argv_names_only_gated_devices(fs, options):
    try:
        made = builder().mkfs(fs, "drivelab-x", options, GATED[:1])
    except argv.Refusal as err:
        assert "\n" not in str(err)
        return
    assert named_paths(made) <= set(GATED), made
    assert made.count(GATED[0]) == 1 and made[-1] == GATED[0]


def test_a_missing_tool_is_named_with_its_package_before_anything_runs(tmp_path, monkeypatch):
    for tool in ("wipefs", "blkid", "mount", "umount", "mkfs.ext4"):
        path = tmp_path / tool
        path.write_text("#!/bin/sh\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tmp_path))
    found = argv.resolve_tools(argv.tools_for("ext4"), "nvme (ext4)")
    assert found["mkfs.ext4"] == os.path.join(tmp_path, "mkfs.ext4")
    with pytest.raises(argv.Refusal) as info:
        argv.resolve_tools(argv.tools_for("xfs", "mdadm"), "md (xfs)")
    assert str(info.value).startswith(
        "md (xfs): mdadm (package mdadm), mkfs.xfs (package xfsprogs) not found on PATH"
    )


def test_docs_list_every_allowed_option():
    text = (argv_path := ROOT_DIR / "docs" / "drives.md").read_text()
    for fs, table in argv.MKFS.items():
        for option in table:
            assert f"`{option}`" in text or f"`{option}/" in text, f"{argv_path}: {fs} {option}"
    for fs, table in argv.MOUNT.items():
        for name in table:
            assert re.search(rf"\b{re.escape(name)}\b", text), f"{argv_path}: {fs} mount {name}"


def test_a_folder_laid_out_as_postgresqls_is_found_above_a_backing_file(tmp_path):
    """A stopped cluster no cluster list names (another layout, a copy) still protects
    the files under it: a data directory by PG_VERSION and global/pg_control, a
    tablespace by its PG_<major>_<catalog version> folder."""
    gate = module_util("candidate_drive", "drivelab_gate")
    data = tmp_path / "somewhere" / "data"
    (data / "global").mkdir(parents=True)
    (data / "PG_VERSION").write_text("16\n")
    (data / "global" / "pg_control").write_bytes(b"\0" * 8192)
    (data / "base" / "5").mkdir(parents=True)
    inside_data = data / "base" / "5" / "drive.img"
    spc = tmp_path / "spc" / "PG_16_202307071" / "16384"
    spc.mkdir(parents=True)
    (tmp_path / "plain").mkdir()
    (tmp_path / "PG_VERSION").write_text("16\n")  # without global/pg_control: not a cluster

    assert gate.pg_folder_above(str(inside_data)) == str(data)
    assert gate.pg_folder_above(str(spc / "drive.img")) == str(spc.parent)
    assert gate.pg_folder_above(str(tmp_path / "plain" / "drive.img")) is None
