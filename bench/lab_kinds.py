"""The two kinds of lab on this machine: `lab up` of a namespace lab and of a container
lab (Debian 13 hosts, systemd-nspawn), and the seed-two-clients scenario in its lab size
on each, with its report table. Writes the section "lab_kinds" of docs/benchmarks.md and
the same section of docs/lab.md (where the two kinds are described).

Run as root: `.venv/bin/python bench/lab_kinds.py` (about 25 minutes; it tears down any
lab first and leaves none). Whether the container image and apt caches existed before is
printed with the figures: the first container lab on a machine builds the image (about
a minute) and fetches every package once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine_note, update_section

REPO = Path(__file__).resolve().parent.parent
DRIVELAB = str(Path(sys.executable).parent / "drivelab")
LAB_DOC = REPO / "docs" / "lab.md"
CACHE = Path("/var/cache/drivelab")


def run(*args: str, env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    proc = subprocess.run(
        [DRIVELAB, *args], cwd=REPO, capture_output=True, text=True, check=False, env=env
    )
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
        raise SystemExit(f"drivelab {' '.join(args)}: exit {proc.returncode}")
    return time.monotonic() - started, proc


def table_of(stdout: str) -> list[str]:
    edges = ("│", "┃", "┏", "┡", "└")
    return [line.rstrip() for line in stdout.splitlines() if line.startswith(edges)]


def one_kind(kind: str, tmp: Path) -> dict:
    cached = (CACHE / "images" / "trixie" / "image.json").exists()
    up_args = ["lab", "up"]
    if kind == "container":
        up_args += ["--hosts", "container", "--release", "trixie"]
    run("lab", "down")
    try:
        up, _ = run(*up_args)
        env = dict(os.environ, COLUMNS="160")
        db = tmp / f"{kind}.db"
        seconds, proc = run(
            "run", "scenarios/seed-two-clients.yml", "--size", "lab", "--db", str(db), env=env
        )
    finally:
        down, _ = run("lab", "down")
    table = table_of(proc.stdout)
    print(
        f"{kind}: lab up {up:.1f} s (image cached before: {cached}), "
        f"run {seconds:.0f} s, down {down:.1f} s"
    )
    print("\n".join(table))
    return {"kind": kind, "up": up, "run": seconds, "down": down, "cached": cached, "table": table}


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="drivelab-bench-") as tmp:
        results = [one_kind(kind, Path(tmp)) for kind in ("netns", "container")]
    body = [
        "## Lab kinds (`bench/lab_kinds.py`)",
        "",
        machine_note(),
        "",
        "`drivelab run scenarios/seed-two-clients.yml --size lab` (4 drives x 2 repetitions, "
        "2 clients, scale 34, 15 s) on a fresh lab of each kind; `lab up` from nothing, the "
        "run including provisioning (on the container lab, every package installed by the "
        "roles on fresh hosts).",
        "",
        "| lab | hosts | lab up | the scenario | lab down |",
        "|---|---|---:|---:|---:|",
    ]
    for r in results:
        hosts = (
            "namespaces of this machine (Debian 12, PostgreSQL 15)"
            if r["kind"] == "netns"
            else "Debian 13 containers, systemd (PostgreSQL 17); image "
            + ("cached before" if r["cached"] else "built in this run")
        )
        figures = f"{r['up']:.1f} s | {r['run'] / 60:.1f} min | {r['down']:.1f} s"
        body.append(f"| {r['kind']} | {hosts} | {figures} |")
    for r in results:
        body += ["", f"Report, {r['kind']} lab:", "", "```", *r["table"], "```"]
    text = "\n".join(body)
    update_section("lab_kinds", text)
    in_lab_doc = text.replace("## Lab kinds", "### Measured: both kinds", 1)
    update_section("lab_kinds", in_lab_doc, doc=LAB_DOC)


if __name__ == "__main__":
    main()
