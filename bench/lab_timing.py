"""Wall time of `drivelab lab up` (from nothing), a converging `lab up` (nothing to do)
and `lab down`, for 2 and 16 clients. Targets: up <= 60 s for 2 clients, down <= 20 s.

Run as root on the machine the lab is for: `make bench` or `.venv/bin/python bench/lab_timing.py`.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine_note, update_section

REPO = Path(__file__).resolve().parent.parent
DRIVELAB = str(Path(sys.executable).parent / "drivelab")


def timed(*args: str) -> float:
    started = time.monotonic()
    subprocess.run([DRIVELAB, *args], cwd=REPO, check=True, capture_output=True)
    return time.monotonic() - started


def main() -> None:
    rows = []
    timed("lab", "down")
    for clients in (2, 16):
        try:
            up = timed("lab", "up", "--clients", str(clients))
            again = timed("lab", "up", "--clients", str(clients))
        finally:
            down = timed("lab", "down")
        rows.append((clients, up, again, down))
        print(f"{clients:>3} clients: up {up:.1f} s, up again {again:.1f} s, down {down:.1f} s")
    body = [
        "## Lab up / down (`bench/lab_timing.py`)",
        "",
        machine_note(),
        "",
        "Targets: `lab up` <= 60 s for 2 clients, `lab down` <= 20 s. "
        "8 drives (4 x 4 GiB, 4 x 1 GiB).",
        "",
        "| clients | lab up (from nothing) | lab up again (converge, no change) | lab down |",
        "|---:|---:|---:|---:|",
    ]
    body += [f"| {c} | {u:.1f} s | {a:.1f} s | {d:.1f} s |" for c, u, a, d in rows]
    update_section("lab_timing", "\n".join(body))


if __name__ == "__main__":
    main()
