"""Wall time of `make demo` (lab up, the two-client scenario in its lab size over the
four emulated drive classes, the report). Target: <= 10 minutes on this machine from a
fresh clone. Run it in a fresh clone for the honest figure; it leaves the lab up."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine_note, update_section

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    started = time.monotonic()
    env = dict(os.environ, COLUMNS="160")  # the report table unwrapped in the captured output
    proc = subprocess.run(
        ["make", "demo"], cwd=REPO, capture_output=True, text=True, check=False, env=env
    )
    seconds = time.monotonic() - started
    tail = [line for line in proc.stdout.splitlines() if line.strip()][-25:]
    print("\n".join(tail))
    print(f"make demo: exit {proc.returncode}, {seconds:.0f} s")
    table = [line for line in tail if line.startswith(("│", "┃", "┏", "┡", "└"))]
    body = [
        "## make demo (`bench/demo_timing.py`)",
        "",
        machine_note(),
        "",
        f"`make demo` from {REPO}: exit {proc.returncode}, **{seconds / 60:.1f} min** "
        "(target <= 10 min), setup included.",
        "",
        "```",
        *table,
        "```",
    ]
    update_section("demo", "\n".join(body))
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
