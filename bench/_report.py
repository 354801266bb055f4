"""Write one bench script's figures into its own section of docs/benchmarks.md.

Each script owns the text between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``;
re-running it replaces that section only, so scripts never clobber each other.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HEADER = (
    "# Benchmarks\n\nFigures written by the scripts in `bench/`; each section names its script.\n"
)


def machine_note() -> str:
    mem_kib = 0
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    return (
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node() or 'host'}: "
        f"{os.cpu_count()} cores, {mem_kib / 1024**2:.0f} GiB RAM, kernel {platform.release()}"
    )


def commit() -> str:
    """The commit a script measured, short, and whether tracked files differed from it."""
    proc = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=DOC.parent.parent,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=DOC.parent.parent,
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    return proc.stdout.strip() + (" with uncommitted changes" if dirty else "")


def update_section(name: str, body: str, doc: Path = DOC) -> None:
    """Replaces the section NAME of doc (docs/benchmarks.md unless another doc carries
    a script-written section of its own) and writes the file atomically."""
    text = doc.read_text(encoding="utf-8") if doc.exists() else HEADER
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n{body.rstrip()}\n{end}"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    text = (
        pattern.sub(lambda _m: block, text)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + block + "\n"
    )
    doc.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=doc.parent, prefix=f".{doc.stem}.")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, doc)
