#!/usr/bin/python
"""What `drivelab check` asks of every host, in one module run and read-only: who the
module runs as (root, once become worked), its Python, its memory as PostgreSQL sees it,
the PostgreSQL major version its distribution provides and those installed, whether the
packages the roles need are installed or installable (apt's candidate), the free space
under the folders drivelab writes, and the kernel's clock state (the NTP status
timedatectl and chronyc report: synchronised or not, and the maximum error)."""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import platform
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_memory import memory

DOCUMENTATION = r"""
module: drivelab_host_check
short_description: a host's readiness for drivelab, read-only
options:
  packages: {type: list, elements: str, default: [], description: "Debian packages the roles install here ({pg}: the PostgreSQL major)"}
  pg_version: {type: str, default: "", description: "the pinned PostgreSQL major (empty: the one the distribution provides)"}
  paths: {type: list, elements: str, default: [], description: folders drivelab writes here (free space under each)}
"""

#: struct timex (linux/timex.h) up to ``status``, on 64-bit Linux; the rest is room
STA_UNSYNC = 0x0040
TIME_ERROR = 5


class Timex(ctypes.Structure):
    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("rest", ctypes.c_byte * 200),
    ]


def clock_state():
    """{synchronized: bool or None, maxerror_s, how}: the kernel's own NTP state
    (adjtimex, read only: modes 0), which is what timedatectl's NTPSynchronized and
    chrony's leap status come from; None where it cannot be read."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        tx = Timex()
        state = libc.adjtimex(ctypes.byref(tx))
    except (OSError, AttributeError):
        return {"synchronized": None, "maxerror_s": None, "how": "adjtimex unavailable"}
    if state < 0:
        return {"synchronized": None, "maxerror_s": None, "how": "adjtimex failed"}
    synced = state != TIME_ERROR and not (tx.status & STA_UNSYNC)
    return {"synchronized": synced, "maxerror_s": tx.maxerror / 1e6, "how": "adjtimex"}


def has_lists():
    """Whether apt has package lists at all (a host whose apt never updated has none: it
    cannot say what is installable until the roles' apt update)."""
    return bool(glob.glob("/var/lib/apt/lists/*_Packages*"))


def packages(names):
    """{name: "installed" | "installable" | "not installable" | "unknown"} from dpkg and
    apt-cache ("unknown": apt has no package lists yet)."""
    if not names:
        return {}
    out = {}
    done = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\n", *names],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    for line in done.stdout.splitlines():
        name, _, status = line.partition(" ")
        if status.strip() == "installed":
            out[name] = "installed"
    rest = [n for n in names if n not in out]
    if rest and not has_lists():
        return {**out, **dict.fromkeys(rest, "unknown")}
    if rest:
        policy = subprocess.run(
            ["apt-cache", "policy", *rest], capture_output=True, text=True, check=False
        )
        current = None
        for line in policy.stdout.splitlines():
            if line and not line.startswith(" ") and line.endswith(":"):
                current = line[:-1]
            elif current and line.strip().startswith("Candidate:"):
                candidate = line.split(":", 1)[1].strip()
                out[current] = "installable" if candidate != "(none)" else "not installable"
        for n in rest:
            out.setdefault(n, "not installable")
    return out


def free_bytes(path):
    """Free bytes of the filesystem the folder is (or would be made) on."""
    while path and not os.path.exists(path):
        path = os.path.dirname(path.rstrip("/")) or "/"
    return shutil.disk_usage(path or "/").free


def postgresql():
    """The major version the distribution provides (postgresql-common's answer) and
    the majors installed."""
    provided = None
    try:
        done = subprocess.run(
            ["/usr/share/postgresql-common/supported-versions"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        lines = done.stdout.split()
        provided = lines[-1] if done.returncode == 0 and lines else None
    except OSError:
        pass
    installed = sorted(
        (os.path.basename(os.path.dirname(os.path.dirname(p)))
         for p in glob.glob("/usr/lib/postgresql/*/bin/postgres")),
        key=lambda v: [int(x) if x.isdigit() else x for x in v.split(".")],
    )  # fmt: skip
    return {"provided": provided, "installed": installed}


def main():
    module = AnsibleModule(
        argument_spec={
            "packages": {"type": "list", "elements": "str", "default": []},
            "paths": {"type": "list", "elements": "str", "default": []},
            "pg_version": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    pg = postgresql()
    major = p["pg_version"] or pg["provided"]
    # without a pinned version or postgresql-common, the major is not known before the
    # roles install postgresql-common: those packages are not asked about
    names = [n.replace("{pg}", major) if major else n for n in p["packages"]
             if major or "{pg}" not in n]  # fmt: skip
    module.exit_json(
        changed=False,
        uid=os.geteuid(),
        python=platform.python_version(),
        memory=memory(),
        postgresql={**pg, "major": major or None},
        packages=packages(names),
        free_bytes={path: free_bytes(path) for path in p["paths"]},
        clock=clock_state(),
    )


if __name__ == "__main__":
    main()
