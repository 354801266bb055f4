#!/usr/bin/python
"""The root filesystem of the container lab's hosts: one Debian tree per release, made
once with debootstrap and kept in a cache folder across `lab down` (containers only ever
see it through their own copy-on-write layer; nothing writes to it after it is made).

A tree is complete when its image.json exists: it is built in a sibling folder and
renamed into place, so a build that stops half-way leaves no tree that looks usable."""

from __future__ import annotations

import contextlib
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
"""

MARKER = "image.json"


def unmount_under(path):
    """debootstrap mounts /proc and /sys inside the tree; a stopped build can leave them."""
    root = os.path.realpath(path).rstrip("/") + "/"
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        points = [line.split()[4].replace("\\040", " ") for line in fh]
    for point in sorted((p for p in points if p.startswith(root)), key=len, reverse=True):
        run(["umount", "-l", point], check=False)


def in_use(rootfs):
    """Whether an overlay mount (a container host's layer) has the tree as its lower dir."""
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        return any(f"lowerdir={rootfs}" in line for line in fh)


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


def main():
    module = AnsibleModule(
        argument_spec={
            "release": {"type": "str", "required": True, "choices": ["bookworm", "trixie"]},
            "cache_dir": {"type": "str", "required": True},
            "mirror": {"type": "str", "default": "http://deb.debian.org/debian"},
            "packages": {"type": "list", "elements": "str", "required": True},
            "user": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    cache = os.path.realpath(p["cache_dir"])
    if "drivelab" not in cache:
        module.fail_json(msg=f"image cache {p['cache_dir']}: not a drivelab folder, refusing")
    final = os.path.join(cache, p["release"])
    rootfs = os.path.join(final, "rootfs")
    marker = os.path.join(final, MARKER)
    if os.path.exists(marker):
        with open(marker, encoding="utf-8") as fh:
            info = json.load(fh)
        # an image made with other packages or another login is made again, unless a
        # running container lab stands on it
        if info.get("packages") == p["packages"] and info.get("user", "") == p["user"]:
            module.exit_json(changed=False, rootfs=rootfs, **info)
        if in_use(rootfs):
            module.fail_json(
                msg=f"image {p['release']}: made with other packages or login, and a running"
                " container lab uses it: run 'drivelab lab down' first"
            )
    if module.check_mode:
        module.exit_json(changed=True, rootfs=rootfs)
    if not shutil.which("debootstrap"):
        module.fail_json(msg="debootstrap is not installed (Debian package debootstrap)")
    build = f"{final}.build-{os.getpid()}"
    started = time.monotonic()
    try:
        os.makedirs(cache, mode=0o755, exist_ok=True)
        for name in os.listdir(cache):  # builds that were stopped half-way
            if name.startswith(p["release"] + ".build-"):
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
        info = {
            "release": p["release"],
            "version": os_release.get("VERSION_ID", "").strip('"'),
            "packages": p["packages"],
            "user": p["user"],
            "mirror": p["mirror"],
            "build_seconds": round(time.monotonic() - started, 1),
        }
        with open(os.path.join(build, MARKER), "w", encoding="utf-8") as fh:
            json.dump(info, fh, indent=2)
        os.rename(build, final)
    except (LabError, OSError) as err:
        unmount_under(build)
        shutil.rmtree(build, ignore_errors=True)
        module.fail_json(msg=f"image {p['release']}: {err}")
    module.exit_json(changed=True, rootfs=rootfs, **info)


if __name__ == "__main__":
    main()
