"""The matrix's fio jobs as job-file sections (filter drive_pretest_jobs), each word
checked first: the job file is written on the DB host and fio runs it as root, so a
value that is not one of these shapes never reaches it (a newline in a block size
would be a line of the job file)."""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

NAME = re.compile(r"m-[a-z0-9]+-[0-9]{1,8}[km]?-qd[0-9]{1,4}-nj[0-9]{1,2}-(direct|fdatasync)")
BLOCK = re.compile(r"([0-9]{1,8})([km]?)")
RW = ("read", "write", "randread", "randwrite", "randrw")


def _int(job, key, low, high):
    value = job.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        name = job.get("name")
        raise AnsibleFilterError(f"fio job {name!r}: {key} must be {low} to {high}, not {value!r}")
    return value


def drive_pretest_jobs(jobs):
    """The sections of ``jobs`` (drive_pretest_jobs), one string each; refuses the first
    job with a word out of shape, naming it."""
    out = []
    for job in jobs:
        name = job.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise AnsibleFilterError(f"fio job name {name!r}: not {NAME.pattern}")
        if job.get("rw") not in RW:
            rw = job.get("rw")
            raise AnsibleFilterError(f"fio job {name!r}: rw {rw!r} is not one of {', '.join(RW)}")
        block = BLOCK.fullmatch(str(job.get("bs")))
        size = int(block[1]) * {"": 1, "k": 1024, "m": 1048576}[block[2]] if block else 0
        if not 512 <= size <= 67108864 or size % 512:
            bs = job.get("bs")
            raise AnsibleFilterError(f"fio job {name!r}: bs {bs!r} is not 512 bytes to 64m")
        direct, fdatasync = job.get("direct", True), job.get("fdatasync", False)
        if not isinstance(direct, bool) or not isinstance(fdatasync, bool):
            raise AnsibleFilterError(f"fio job {name!r}: direct and fdatasync must be booleans")
        lines = [
            f"[{name}]",
            f"rw={job['rw']}",
            f"bs={job['bs']}",
            f"iodepth={_int(job, 'iodepth', 1, 1024)}",
            f"numjobs={_int(job, 'numjobs', 1, 64)}",
            "group_reporting=1",
            f"direct={int(direct)}",
        ]
        if job["rw"] == "randrw":
            lines.append(f"rwmixread={_int(job, 'rwmixread', 1, 99)}")
        if fdatasync:
            lines.append("fdatasync=1")
        out.append("\n".join(lines))
    return out


class FilterModule:
    def filters(self):
        return {"drive_pretest_jobs": drive_pretest_jobs}
