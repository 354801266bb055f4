#!/usr/bin/python
"""A VM lab host: a qemu guest booting Debian's own kernel, on the lab's bridges through
tap links, its candidate drives emulated as the devices a real DB host has (SATA, SCSI,
NVMe namespaces, virtio disks), each with its serial, model and rotation rate, its IOPS
capped by qemu's own throttling.

The guest's root is a qcow2 overlay of the cached raw image (lab_image kind vm), so the
image is never written. What makes the guest this host (its name, addresses, host key,
the lab key, sshd's drop-in, the apt proxy) goes onto a seed disk: a tar archive, serial
drivelab-seed, that the image's drivelab-seed.service unpacks over the root at every
boot before the network and sshd start.

Acceleration: kvm where /dev/kvm opens and a guest really boots on it, tcg otherwise.
"Really boots" is tried, not assumed (a nested machine can have a /dev/kvm whose guests
hang in early boot, or a qemu that aborts at once): accel auto boots under kvm once and,
if qemu does not start or sshd has not answered within kvm_probe seconds, stops it and
boots under tcg; the verdict is kept in accel_file with the machine's kernel release, so
the probe is paid once per machine."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import platform
import signal
import socket
import subprocess
import tarfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_lab import LabError, end_pids, pid_alive, run, ssh_answers

DOCUMENTATION = r"""
module: lab_vm
short_description: One qemu VM host of the drivelab VM lab
options:
  name: {description: host name (inventory name), type: str, required: true}
  dir: {description: "this VM's folder (overlay, seed, pid, console log, QMP socket); must contain drivelab", type: str, required: true}
  image: {description: "the image folder (root.raw, vmlinuz, initrd.img)", type: str, required: true}
  address: {description: the guest's lab address; up waits for its sshd there, type: str, required: true}
  memory_mb: {description: guest RAM in MiB, type: int, default: 2048}
  cpus: {description: guest vCPUs, type: int, default: 2}
  accel: {description: "auto (kvm if a guest boots on it, else tcg), kvm or tcg", type: str, default: auto}
  accel_file: {description: where accel auto keeps its verdict for this machine, type: str, required: true}
  kvm_probe: {description: seconds a kvm boot gets to answer over SSH before auto takes tcg, type: int, default: 60}
  nics: {description: "[{tap, bridge, mac}]: one virtio NIC on a tap of each bridge", type: list, elements: dict, default: []}
  marker: {description: alias written on the taps (lab down removes links carrying it), type: str, required: true}
  drives: {description: "[{name, class, bus (sata|scsi|nvme|virtio), size}]", type: list, elements: dict, default: []}
  classes: {description: "{class: {iops, backing (shm|disk), rpm}}: each drive's IOPS cap (qemu throttling), backing, rotation rate", type: dict, default: {}}
  shm_dir: {description: folder of RAM-backed drive files, type: str, required: true}
  disk_dir: {description: folder of disk-backed drive files, type: str, required: true}
  nvme_serial: {description: serial of the one NVMe controller all nvme drives are namespaces of, type: str, default: DLNVME0001}
  files: {description: "files of the seed disk: [{path, content | src, mode}]", type: list, elements: dict, default: []}
  state: {description: present (booted, sshd answering) or absent (stopped, its folder removed), type: str, default: present}
  timeout: {description: seconds to wait for sshd after a start, type: int, default: 600}
"""

PROGRAM = "qemu-system-x86_64"
SEED_SERIAL = "drivelab-seed"
BUSES = ("sata", "scsi", "nvme", "virtio")
# q35's built-in AHCI controller has six ports
SATA_PORTS = 6


class Qmp:
    """The guest's QMP monitor on its unix socket: one command at a time."""

    def __init__(self, path, timeout=10.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        self._read()  # the greeting
        self.execute("qmp_capabilities")

    def _read(self):
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise LabError("QMP closed the connection")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)

    def execute(self, command, **arguments):
        msg = {"execute": command, **({"arguments": arguments} if arguments else {})}
        self.sock.sendall(json.dumps(msg).encode() + b"\n")
        while True:
            reply = self._read()
            if "return" in reply:
                return reply["return"]
            if "error" in reply:
                raise LabError(f"QMP {command}: {reply['error'].get('desc', reply['error'])}")

    def close(self):
        self.sock.close()


def running(pidfile):
    """The pid of this VM's qemu, if it runs (a stale pidfile's pid may be anything)."""
    try:
        with open(pidfile, encoding="ascii") as fh:
            pid = int(fh.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv0 = fh.read().split(b"\0")[0]
    except (OSError, ValueError):
        return None
    return pid if os.path.basename(argv0) == PROGRAM.encode() and pid_alive(pid) else None


def stop(pid, qmp_path, grace=20.0):
    """quit through QMP (the disks are the lab's to throw away), SIGTERM, then SIGKILL."""
    with contextlib.suppress(OSError, LabError, ValueError):
        q = Qmp(qmp_path, timeout=5.0)
        with contextlib.suppress(OSError, LabError):
            q.execute("quit")
        q.close()
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.2)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        end_pids([pid], grace=5.0)


def seed_archive(files):
    """The seed disk: a tar archive of the files, owned by root, padded to whole MiB (a
    raw disk image of qemu's is whole sectors)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        dirs = set()
        for f in files:
            parts = f["path"].strip("/").split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                    tar.addfile(info)
        for f in files:
            if f.get("src"):
                with open(f["src"], "rb") as fh:
                    data = fh.read()
            else:
                data = str(f.get("content", "")).encode()
            info = tarfile.TarInfo(f["path"].strip("/"))
            info.size, info.mode, info.mtime = len(data), int(str(f.get("mode", "0644")), 8), 0
            tar.addfile(info, io.BytesIO(data))
    data = out.getvalue()
    return data + b"\0" * (-len(data) % (1024 * 1024))


def drive_specs(p):
    """Each drive as qemu is given it and as the guest will name it: its file, cap,
    rotation rate, serial, model (SATA, SCSI), WWN (SCSI), namespace id (NVMe) and its
    /dev/disk/by-id name under udev's rules."""
    out, names, nsid, wwn = [], set(), 0, 0x5000C50015EA0000
    for d in p["drives"]:
        name = str(d.get("name", ""))
        if not name or name in names or len(name) > 16:
            raise LabError(f"drive {name or '?'}: a name of at most 16 characters, used once")
        names.add(name)
        if d.get("bus") not in BUSES:
            raise LabError(f"drive {name}: bus must be one of {', '.join(BUSES)}")
        cls = p["classes"].get(d.get("class"))
        if not isinstance(cls, dict):
            raise LabError(f"drive {name}: class {d.get('class')} is not a lab drive class")
        shm = cls.get("backing") == "shm"
        spec = {
            "name": name,
            "bus": d["bus"],
            "class": d["class"],
            "size": int(d["size"]),
            "path": os.path.join(p["shm_dir"] if shm else p["disk_dir"], f"{name}.img"),
            # through the controller's page cache (a guest flush is an fdatasync of the
            # file): with O_DIRECT (cache.direct=on) the 512-byte-aligned writes of an md
            # superblock to a disk file on this machine's 4 KiB ext4 ended in EIO in the guest
            "direct": False,
            "iops": int(cls.get("iops") or 0),
            "rotation_rate": int(cls.get("rpm") or 0),
            "serial": f"DL{name.upper()}",
            "model": f"DRIVELAB_{name.upper()}",
        }
        if d["bus"] == "sata":
            spec["by_id"] = f"ata-{spec['model']}_{spec['serial']}"
        elif d["bus"] == "scsi":
            wwn += 1
            spec["wwn"] = f"0x{wwn:016x}"
            spec["by_id"] = f"wwn-{spec['wwn']}"
        elif d["bus"] == "nvme":
            nsid += 1
            spec["nsid"], spec["serial"] = nsid, p["nvme_serial"]
            spec["by_id"] = f"nvme-QEMU_NVMe_Ctrl_{p['nvme_serial']}_{nsid}"
        else:
            spec["by_id"] = f"virtio-{spec['serial']}"
        out.append(spec)
    if sum(d["bus"] == "sata" for d in out) > SATA_PORTS:
        raise LabError(f"at most {SATA_PORTS} sata drives (q35's AHCI ports)")
    return out


def drive_argv(drives, nvme_serial):
    """-drive/-device pairs of the candidate drives, by bus, in their order."""
    argv, sata, scsi, nvme = [], 0, False, False
    for d in drives:
        node = f"d-{d['name']}"
        opts = [
            "if=none",
            f"id={node}",
            f"file={d['path']}",
            "format=raw",
            "aio=threads",
            "discard=unmap",
            f"cache.direct={'on' if d.get('direct') else 'off'}",
        ]
        if int(d.get("iops") or 0) > 0:
            opts.append(f"throttling.iops-total={int(d['iops'])}")
        argv += ["-drive", ",".join(opts)]
        rate = int(d.get("rotation_rate") or 0)
        if d["bus"] == "sata":
            dev = f"ide-hd,drive={node},bus=ide.{sata},serial={d['serial']},model={d['model']}"
            dev += f",rotation_rate={rate or 1}"
            sata += 1
        elif d["bus"] == "scsi":
            if not scsi:
                argv += ["-device", "virtio-scsi-pci,id=scsi0"]
                scsi = True
            dev = (
                f"scsi-hd,drive={node},bus=scsi0.0,serial={d['serial']},vendor=DRIVELAB,"
                f"product={d['model'][:16]},rotation_rate={rate or 1}"
            )
            if d.get("wwn"):
                dev += f",wwn={d['wwn']}"
        elif d["bus"] == "nvme":
            if not nvme:
                argv += ["-device", f"nvme,id=nvme0,serial={nvme_serial}"]
                nvme = True
            dev = f"nvme-ns,drive={node},bus=nvme0,nsid={d['nsid']}"
        else:
            dev = f"virtio-blk-pci,drive={node},serial={d['serial']}"
        argv += ["-device", dev]
    return argv


def qemu_argv(p, base, accel):
    argv = [
        PROGRAM,
        "-name",
        f"drivelab-{p['name']},process=drivelab-{p['name']}",
        "-machine",
        "q35",
        "-accel",
        "kvm" if accel == "kvm" else "tcg,thread=multi",
        "-cpu",
        "host" if accel == "kvm" else "max",
        "-smp",
        str(p["cpus"]),
        "-m",
        str(p["memory_mb"]),
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-chardev",
        f"file,id=console,path={base}/console.log",
        "-serial",
        "chardev:console",
        "-qmp",
        f"unix:{base}/qmp.sock,server=on,wait=off",
        "-pidfile",
        f"{base}/qemu.pid",
        "-daemonize",
        "-kernel",
        f"{p['image']}/vmlinuz",
        "-initrd",
        f"{p['image']}/initrd.img",
        "-append",
        "console=ttyS0 root=/dev/vda1 rw",
        "-drive",
        f"if=none,id=root,file={base}/root.qcow2,format=qcow2,cache=unsafe,discard=unmap",
        "-device",
        "virtio-blk-pci,drive=root,serial=drivelab-root",
        "-drive",
        f"if=none,id=seed,file={base}/seed.tar,format=raw,readonly=on",
        "-device",
        f"virtio-blk-pci,drive=seed,serial={SEED_SERIAL}",
    ]
    for i, nic in enumerate(p["nics"]):
        argv += [
            "-netdev",
            f"tap,id=n{i},ifname={nic['tap']},script=no,downscript=no",
            "-device",
            f"virtio-net-pci,netdev=n{i},mac={nic['mac']}",
        ]
    return argv + drive_argv(p["specs"], p["nvme_serial"])


def ensure_tap(nic, marker):
    """A persistent tap on its bridge, marked as the lab's; True if it was made or moved."""
    rc, out, _ = run(["ip", "-j", "link", "show", "dev", nic["tap"]], check=False)
    if rc != 0:
        run(["ip", "tuntap", "add", "dev", nic["tap"], "mode", "tap"])
        run(["ip", "link", "set", nic["tap"], "alias", marker])
        link = {}
    else:
        link = json.loads(out)[0]
        if link.get("ifalias") != marker:
            raise LabError(f"link {nic['tap']} exists and is not the lab's")
    if link.get("master") == nic["bridge"] and "UP" in link.get("flags", []):
        return rc != 0
    run(["ip", "link", "set", nic["tap"], "master", nic["bridge"], "up"])
    return True


def ensure_drive_file(d):
    """The drive's backing file, sparse, of its size (grown, never shrunk)."""
    path = d["path"]
    if os.path.exists(path) and os.path.getsize(path) >= int(d["size"]):
        return False
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, int(d["size"]))
    finally:
        os.close(fd)
    return True


def machine_key():
    return f"{platform.release()} {platform.machine()}"


def accel_verdict(path):
    try:
        with open(path, encoding="utf-8") as fh:
            info = json.load(fh)
    except (OSError, ValueError):
        return None
    return info.get("accel") if info.get("machine") == machine_key() else None


def save_verdict(path, accel, why):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"machine": machine_key(), "accel": accel, "why": why}, fh, indent=2)
    os.replace(tmp, path)


def kvm_usable():
    try:
        fd = os.open("/dev/kvm", os.O_RDWR)
    except OSError:
        return False
    os.close(fd)
    return True


def start(p, base, accel):
    """Starts qemu (it daemonizes once its devices are up); returns its pid."""
    argv = qemu_argv(p, base, accel)
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        err = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise LabError(f"qemu did not start: {err[-1] if err else 'rc ' + str(proc.returncode)}")
    pid = running(f"{base}/qemu.pid")
    if not pid:
        raise LabError("qemu started but its pid file names no qemu")
    return pid, argv


def wait_ssh(address, pid, seconds):
    started = time.monotonic()
    while not ssh_answers(address):
        if not pid_alive(pid):
            return None, "qemu ended"
        if time.monotonic() - started > seconds:
            return None, f"sshd did not answer on {address}:22 within {seconds} s"
        time.sleep(0.5)
    return round(time.monotonic() - started, 1), ""


def console_tail(base):
    try:
        with open(f"{base}/console.log", "rb") as fh:
            lines = fh.read()[-2000:].decode(errors="replace").strip().splitlines()
    except OSError:
        return "no console output"
    return " | ".join(line.strip() for line in lines[-3:]) or "no console output"


def boot(p, base):
    """Boots the VM, kvm first where auto allows; returns (pid, argv, accel, seconds)."""
    verdict = accel_verdict(p["accel_file"])
    if p["accel"] != "auto":
        order = [p["accel"]]
    elif verdict:
        order = [verdict]
    else:
        order = ["kvm", "tcg"] if kvm_usable() else ["tcg"]
    for accel in order:
        probing = p["accel"] == "auto" and verdict is None and accel == "kvm"
        try:
            pid, argv = start(p, base, accel)
        except LabError as err:
            # qemu may also die at once under kvm where /dev/kvm opens (a nested host:
            # "kvm_buf_set_msrs: Assertion ... failed" on a CI machine): tcg then too
            if not probing:
                raise
            left = running(f"{base}/qemu.pid")
            if left:
                stop(left, f"{base}/qmp.sock", grace=5.0)
            save_verdict(p["accel_file"], "tcg", f"under kvm, {err}")
            continue
        seconds, why = wait_ssh(p["address"], pid, p["kvm_probe"] if probing else p["timeout"])
        if seconds is not None:
            if p["accel"] == "auto" and verdict is None:
                save_verdict(p["accel_file"], accel, "a guest booted to SSH")
            return pid, argv, accel, seconds
        stop(pid, f"{base}/qmp.sock", grace=5.0)
        if not probing:
            raise LabError(f"{why} ({accel}; console: {console_tail(base)})")
        save_verdict(p["accel_file"], "tcg", f"under kvm, {why}")
    raise LabError("no acceleration left to try")  # pragma: no cover


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "dir": {"type": "str", "required": True},
            "image": {"type": "str", "required": True},
            "address": {"type": "str", "required": True},
            "memory_mb": {"type": "int", "default": 2048},
            "cpus": {"type": "int", "default": 2},
            "accel": {"type": "str", "default": "auto", "choices": ["auto", "kvm", "tcg"]},
            "accel_file": {"type": "str", "required": True},
            "kvm_probe": {"type": "int", "default": 60},
            "nics": {"type": "list", "elements": "dict", "default": []},
            "marker": {"type": "str", "required": True},
            "drives": {"type": "list", "elements": "dict", "default": []},
            "classes": {"type": "dict", "default": {}},
            "shm_dir": {"type": "str", "required": True},
            "disk_dir": {"type": "str", "required": True},
            "nvme_serial": {"type": "str", "default": "DLNVME0001"},
            "files": {"type": "list", "elements": "dict", "default": []},
            "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
            "timeout": {"type": "int", "default": 600},
        },
        supports_check_mode=True,
    )
    p = module.params
    base = os.path.realpath(p["dir"])
    if "drivelab" not in base:
        module.fail_json(msg=f"vm {p['name']}: folder {p['dir']} is not drivelab's")
    pidfile, qmp = f"{base}/qemu.pid", f"{base}/qmp.sock"
    pid = running(pidfile)

    if p["state"] == "absent":
        if module.check_mode:
            module.exit_json(changed=bool(pid or os.path.exists(base)))
        if pid:
            stop(pid, qmp)
        existed = os.path.exists(base)
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(base):
                os.unlink(os.path.join(base, name))
            os.rmdir(base)
        module.exit_json(changed=bool(pid) or existed)

    for name in ("root.raw", "vmlinuz", "initrd.img"):
        if not os.path.isfile(os.path.join(p["image"], name)):
            module.fail_json(msg=f"vm {p['name']}: no {name} in the image folder {p['image']}")
    try:
        p["specs"] = drive_specs(p)
        for d in p["specs"]:
            if "drivelab" not in os.path.realpath(d["path"]):
                raise LabError(f"drive {d['name']}: {d['path']} is not in a drivelab folder")
        seed = seed_archive(p["files"])
    except (LabError, OSError) as err:
        module.fail_json(msg=f"vm {p['name']}: {err}")
    digest = hashlib.sha256(seed).hexdigest()
    # what the VM runs is what it was started with: argv (accel aside) and seed
    argv = qemu_argv(p, base, "tcg")
    argv[6] = argv[8] = "(accel)"
    want = {"argv": argv, "seed": digest}
    try:
        with open(f"{base}/state.json", encoding="utf-8") as fh:
            have = json.load(fh)
    except (OSError, ValueError):
        have = {}
    same = {"argv": have.get("argv"), "seed": have.get("seed")} == want
    if module.check_mode:
        module.exit_json(changed=not (pid and same))
    changed = False
    try:
        os.makedirs(base, mode=0o700, exist_ok=True)
        for nic in p["nics"]:
            changed |= ensure_tap(nic, p["marker"])
        for d in p["specs"]:
            changed |= ensure_drive_file(d)
        if pid and same:
            if not ssh_answers(p["address"]):
                raise LabError(f"runs (pid {pid}) but sshd does not answer on {p['address']}:22")
            module.exit_json(changed=changed, pid=pid, accel=have.get("accel"), drives=p["specs"])
        if pid:
            stop(pid, qmp)
        if not os.path.exists(f"{base}/root.qcow2"):
            run(
                [
                    "qemu-img",
                    "create",
                    "-q",
                    "-f",
                    "qcow2",
                    "-F",
                    "raw",
                    "-b",
                    os.path.join(p["image"], "root.raw"),
                    f"{base}/root.qcow2",
                ]
            )
        tmp = f"{base}/seed.tar.tmp"
        with open(tmp, "wb") as fh:
            fh.write(seed)
        os.replace(tmp, f"{base}/seed.tar")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{base}/console.log")
        pid, argv, accel, seconds = boot(p, base)
    except (LabError, OSError) as err:
        module.fail_json(msg=f"vm {p['name']}: {err}")
    with open(f"{base}/state.json.tmp", "w", encoding="utf-8") as fh:
        json.dump({**want, "accel": accel, "full_argv": argv}, fh, indent=1)
    os.replace(f"{base}/state.json.tmp", f"{base}/state.json")
    module.exit_json(changed=True, pid=pid, accel=accel, boot_seconds=seconds, drives=p["specs"])


if __name__ == "__main__":
    main()
