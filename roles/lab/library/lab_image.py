#!/usr/bin/python
"""The root filesystem of the lab's hosts: one Debian tree per release, made once with
debootstrap and kept in a cache folder across `lab down` (containers only ever see it
through their own copy-on-write layer; nothing writes to it after it is made).

kind vm makes the VM lab's DB host disk instead (folder ``vm-<release>``): the same
tree with Debian's kernel, written into a raw ext4 image (``root.raw``, by ``mkfs.ext4
-d``, no loop mount) beside the kernel and initramfs qemu boots directly; the tree is
not kept. A VM only ever sees the image through a qcow2 overlay of its own.

An image is complete when its image.json exists: it is built in a sibling folder and
renamed into place, so a build that stops half-way leaves nothing that looks usable."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_lab import LabError, run

DOCUMENTATION = r"""
module: lab_image
short_description: A cached Debian tree (debootstrap) for the drivelab container lab
options:
  release: {description: Debian suite, type: str, required: true, choices: [bookworm, trixie]}
  cache_dir: {description: cache folder (its path must contain drivelab), type: str, required: true}
  mirror: {description: Debian archive, type: str, default: "http://deb.debian.org/debian"}
  packages: {description: packages beyond minbase, type: list, elements: str, required: true}
  user: {description: "an unprivileged login made in the image, with passwordless sudo (empty: none)", type: str, default: ""}
  kind: {description: "container (a tree) or vm (a raw root disk, kernel and initramfs)", type: str, default: container}
  disk_size: {description: "vm: size of the raw root disk in bytes (sparse)", type: int, default: 6442450944}
"""

MARKER = "image.json"
# how a VM image is laid out; an image of another layout is made again
VM_LAYOUT = "gpt: root ext4 (1), spare (2)"
# a spare partition after the root, empty: the root disk has partitions, as a real
# host's has, and one of them holds nothing (the gate must refuse it all the same)
SPARE_BYTES = 64 * 1024**2

# The VM's first boot: the seed disk (a tar archive the lab writes per VM, serial
# drivelab-seed) unpacked over the root before the network and sshd start, as
# cloud-init's NoCloud would, without its long run of Python under an emulated CPU
# (docs/scaling.md).
SEED_UNIT = """\
[Unit]
Description=drivelab lab: this host's own files from the lab's seed disk
DefaultDependencies=no
Requires=dev-disk-by\\x2did-virtio\\x2ddrivelab\\x2dseed.device
After=dev-disk-by\\x2did-virtio\\x2ddrivelab\\x2dseed.device systemd-remount-fs.service
Before=sysinit.target systemd-networkd.service ssh.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/tar --extract --same-permissions --numeric-owner --directory=/ --file=/dev/disk/by-id/virtio-drivelab-seed
ExecStart=/bin/sh -c 'cat /etc/hostname > /proc/sys/kernel/hostname'

[Install]
WantedBy=sysinit.target
"""

# sshd listens on the host's lab address only: it starts once networkd has put it there
SSH_AFTER_NETWORK = """\
[Unit]
Wants=systemd-networkd-wait-online.service
After=systemd-networkd-wait-online.service
"""


def unmount_under(path):
    """debootstrap mounts /proc and /sys inside the tree; a stopped build can leave them."""
    root = os.path.realpath(path).rstrip("/") + "/"
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        points = [line.split()[4].replace("\\040", " ") for line in fh]
    for point in sorted((p for p in points if p.startswith(root)), key=len, reverse=True):
        run(["umount", "-l", point], check=False)


def in_use(image):
    """Whether a host of a running lab stands on the image: an overlay mount (a container
    host's layer) with the tree as its lower dir, or a process (a VM's qemu, through its
    overlay) holding the raw disk open."""
    if os.path.isfile(image):
        for fd in glob.glob("/proc/[0-9]*/fd/*"):
            with contextlib.suppress(OSError):
                if os.readlink(fd) == image:
                    return True
        return False
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        return any(f"lowerdir={image}" in line for line in fh)


def add_user(rootfs, user):
    """The login a real lab gives drivelab: an unprivileged user (its home made) allowed
    every command through sudo without a password."""
    run(["chroot", rootfs, "useradd", "--create-home", "--shell", "/bin/bash", user])
    sudoers = os.path.join(rootfs, "etc/sudoers.d", "drivelab")
    with open(sudoers, "w", encoding="ascii") as fh:
        fh.write(
            f"# drivelab's lab: the login of a real lab, passwordless sudo\n{user} ALL=(ALL:ALL) NOPASSWD: ALL\n"
        )
    os.chmod(sudoers, 0o440)


def configure(rootfs):
    """What every container host needs that a fresh debootstrap does not give: no host
    keys or machine id of its own (each host gets them at start), no recommended
    packages, and no services started by package installs outside systemd's control."""
    for name in os.listdir(os.path.join(rootfs, "etc/ssh")):
        if name.startswith("ssh_host_"):
            os.unlink(os.path.join(rootfs, "etc/ssh", name))
    with open(os.path.join(rootfs, "etc/machine-id"), "w", encoding="ascii"):
        pass  # empty: systemd gives each booted container its own
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(rootfs, "var/lib/dbus/machine-id"))
    conf = os.path.join(rootfs, "etc/apt/apt.conf.d/90drivelab-no-recommends")
    with open(conf, "w", encoding="ascii") as fh:
        fh.write('APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n')
    # apt's lists are fetched again through the lab's proxy on every host
    lists = os.path.join(rootfs, "var/lib/apt/lists")
    for name in os.listdir(lists):
        path = os.path.join(lists, name)
        if os.path.isfile(path) and name != "lock":
            os.unlink(path)
    shutil.rmtree(os.path.join(rootfs, "var/cache/apt/archives"), ignore_errors=True)
    os.makedirs(os.path.join(rootfs, "var/cache/apt/archives/partial"), exist_ok=True)


def chroot_run(rootfs, argv):
    """argv inside the tree with /proc, /sys and /dev bound (update-initramfs needs them)."""
    binds = [os.path.join(rootfs, d) for d in ("proc", "sys", "dev")]
    try:
        for src, dst in zip(("/proc", "/sys", "/dev"), binds, strict=True):
            run(["mount", "--bind", src, dst])
        run(["chroot", rootfs, *argv])
    finally:
        for dst in reversed(binds):
            run(["umount", "-l", dst], check=False)


def configure_vm(rootfs):
    """A tree that boots under qemu as a real host: virtio in the initramfs, the root
    in fstab, systemd-networkd, the seed unit, sshd after the network."""
    with open(os.path.join(rootfs, "etc/initramfs-tools/modules"), "a", encoding="ascii") as fh:
        fh.write("virtio_pci\nvirtio_blk\n")
    with open(os.path.join(rootfs, "etc/fstab"), "w", encoding="ascii") as fh:
        fh.write("LABEL=drivelab-root / ext4 rw,errors=remount-ro 0 1\n")
    units = os.path.join(rootfs, "etc/systemd/system")
    with open(os.path.join(units, "drivelab-seed.service"), "w", encoding="ascii") as fh:
        fh.write(SEED_UNIT)
    wants = os.path.join(units, "sysinit.target.wants")
    os.makedirs(wants, exist_ok=True)
    os.symlink("../drivelab-seed.service", os.path.join(wants, "drivelab-seed.service"))
    os.makedirs(os.path.join(units, "ssh.service.d"), exist_ok=True)
    with open(os.path.join(units, "ssh.service.d/drivelab.conf"), "w", encoding="ascii") as fh:
        fh.write(SSH_AFTER_NETWORK)
    chroot_run(rootfs, ["systemctl", "enable", "systemd-networkd.service"])
    chroot_run(rootfs, ["update-initramfs", "-u", "-k", "all"])


def export_vm(rootfs, out, disk_size):
    """The kernel, the initramfs and the raw root disk out of the tree, into out."""
    boot = os.path.join(rootfs, "boot")
    kernels = sorted(n for n in os.listdir(boot) if n.startswith("vmlinuz-"))
    if not kernels:
        raise LabError("the tree has no kernel in /boot (package linux-image-amd64)")
    version = kernels[-1].removeprefix("vmlinuz-")
    shutil.copy(os.path.join(boot, kernels[-1]), os.path.join(out, "vmlinuz"))
    shutil.copy(os.path.join(boot, f"initrd.img-{version}"), os.path.join(out, "initrd.img"))
    raw = os.path.join(out, "root.raw")
    with open(raw, "wb") as fh:
        fh.truncate(disk_size)
    mib = 1024**2
    # GPT: 1 MiB in, the root, the spare, 1 MiB left for the backup table
    root_bytes = disk_size - SPARE_BYTES - 2 * mib
    table = (
        "label: gpt\n"
        f"start=2048, size={root_bytes // 512}, type=linux, name=drivelab-root\n"
        f"size={SPARE_BYTES // 512}, type=linux, name=drivelab-spare\n"
    )
    run(["sfdisk", "--quiet", raw], input_text=table)
    run(
        [
            "mkfs.ext4", "-q", "-F", "-L", "drivelab-root", "-E", f"offset={mib}",
            "-d", rootfs, raw, f"{root_bytes // 1024}k",
        ]
    )  # fmt: skip
    return version


def main():
    module = AnsibleModule(
        argument_spec={
            "release": {"type": "str", "required": True, "choices": ["bookworm", "trixie"]},
            "cache_dir": {"type": "str", "required": True},
            "mirror": {"type": "str", "default": "http://deb.debian.org/debian"},
            "packages": {"type": "list", "elements": "str", "required": True},
            "user": {"type": "str", "default": ""},
            "kind": {"type": "str", "default": "container", "choices": ["container", "vm"]},
            "disk_size": {"type": "int", "default": 6 * 1024**3},
        },
        supports_check_mode=True,
    )
    p = module.params
    cache = os.path.realpath(p["cache_dir"])
    if "drivelab" not in cache:
        module.fail_json(msg=f"image cache {p['cache_dir']}: not a drivelab folder, refusing")
    vm = p["kind"] == "vm"
    final = os.path.join(cache, ("vm-" if vm else "") + p["release"])
    rootfs = os.path.join(final, "rootfs")
    image = os.path.join(final, "root.raw") if vm else rootfs
    marker = os.path.join(final, MARKER)
    if os.path.exists(marker):
        with open(marker, encoding="utf-8") as fh:
            info = json.load(fh)
        # an image made with other packages or another login is made again, unless a
        # running container lab stands on it
        same_layout = not vm or info.get("layout") == VM_LAYOUT
        if (
            same_layout
            and info.get("packages") == p["packages"]
            and info.get("user", "") == p["user"]
        ):
            module.exit_json(changed=False, rootfs=rootfs, dir=final, **info)
        if in_use(image):
            module.fail_json(
                msg=f"image {p['release']}: made with other packages or login, and a running"
                " container lab uses it: run 'drivelab lab down' first"
            )
    if module.check_mode:
        module.exit_json(changed=True, rootfs=rootfs, dir=final)
    if not shutil.which("debootstrap"):
        module.fail_json(msg="debootstrap is not installed (Debian package debootstrap)")
    build = f"{final}.build-{os.getpid()}"
    started = time.monotonic()
    try:
        os.makedirs(cache, mode=0o755, exist_ok=True)
        for name in os.listdir(cache):  # builds that were stopped half-way
            if name.startswith(os.path.basename(final) + ".build-"):
                unmount_under(os.path.join(cache, name))
                shutil.rmtree(os.path.join(cache, name))
        if os.path.exists(final):  # a tree without its marker is not a finished build
            unmount_under(final)
            shutil.rmtree(final)
        run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=" + ",".join(p["packages"]),
                p["release"],
                os.path.join(build, "rootfs"),
                p["mirror"],
            ]
        )
        configure(os.path.join(build, "rootfs"))
        if p["user"]:
            add_user(os.path.join(build, "rootfs"), p["user"])
        with open(os.path.join(build, "rootfs/etc/os-release"), encoding="utf-8") as fh:
            os_release = dict(line.rstrip("\n").split("=", 1) for line in fh if "=" in line)
        kernel = ""
        if vm:
            configure_vm(os.path.join(build, "rootfs"))
            kernel = export_vm(os.path.join(build, "rootfs"), build, p["disk_size"])
            shutil.rmtree(os.path.join(build, "rootfs"))
        info = {
            "release": p["release"],
            "version": os_release.get("VERSION_ID", "").strip('"'),
            "packages": p["packages"],
            "user": p["user"],
            "mirror": p["mirror"],
            "kind": p["kind"],
            **({"kernel": kernel, "layout": VM_LAYOUT} if vm else {}),
            "build_seconds": round(time.monotonic() - started, 1),
        }
        with open(os.path.join(build, MARKER), "w", encoding="utf-8") as fh:
            json.dump(info, fh, indent=2)
        os.rename(build, final)
    except (LabError, OSError) as err:
        unmount_under(build)
        shutil.rmtree(build, ignore_errors=True)
        module.fail_json(msg=f"image {p['release']}: {err}")
    module.exit_json(changed=True, rootfs=rootfs, dir=final, **info)


if __name__ == "__main__":
    main()
