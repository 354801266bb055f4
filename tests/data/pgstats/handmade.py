"""Hand-make the PostgreSQL 14 and 16 snapshots from the captured 15 and 17 ones (no
Debian release ships 14 or 16, and no other package source is reachable here).

What each version's views have, from the PostgreSQL documentation of that version
(monitoring-stats.html, "pg_stat_bgwriter", "pg_stat_wal", "pg_stat_io"):

* 14: pg_stat_bgwriter and pg_stat_wal with exactly 15's columns; no pg_stat_io.
  log_checkpoints lines as 15's (no lsn fields; those came in 16).
* 16: pg_stat_bgwriter with 15's columns (checkpoints_timed ... buffers_backend_fsync),
  pg_stat_wal as 15's, pg_stat_io with exactly 17's columns; no pg_stat_checkpointer.
  log_checkpoints lines as 17's (with lsn and redo lsn).

So 14 is 15's capture with server_version_num 140013, and 16 is 17's capture with
pg_stat_checkpointer's figures moved into pg_stat_bgwriter under 16's names, and
buffers_backend / buffers_backend_fsync the writes / fsyncs of relations by every
backend type but the checkpointer and the background writer in pg_stat_io (what 17's
reader takes instead of them), with server_version_num 160009.

    python tests/data/pgstats/handmade.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: 17's pg_stat_checkpointer column -> 16's pg_stat_bgwriter column
CHECKPOINTER_TO_BGWRITER = {
    "num_timed": "checkpoints_timed",
    "num_requested": "checkpoints_req",
    "write_time": "checkpoint_write_time",
    "sync_time": "checkpoint_sync_time",
    "buffers_written": "buffers_checkpoint",
}


def backend(io: list[dict], column: str) -> int:
    return sum(
        r.get(column) or 0
        for r in io
        if r["backend_type"] not in ("checkpointer", "background writer")
        and r["object"] == "relation"
    )


def make(source: int, target: int, version: int, change) -> None:
    out = HERE / str(target)
    out.mkdir(exist_ok=True)
    for when in ("before", "after"):
        doc = json.loads((HERE / str(source) / f"pg_server-{when}.json").read_text())
        doc["server"]["server_version_num"] = version
        change(doc["server"])
        text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
        (out / f"pg_server-{when}.json").write_text(text)
    shutil.copy(HERE / str(source) / "pg_checkpoints.log", out / "pg_checkpoints.log")


def as_16(server: dict) -> None:
    ckpt = server.pop("pg_stat_checkpointer")
    bgw = server["pg_stat_bgwriter"]
    for new, old in CHECKPOINTER_TO_BGWRITER.items():
        bgw[old] = ckpt[new]
    bgw["buffers_backend"] = backend(server["pg_stat_io"], "writes")
    bgw["buffers_backend_fsync"] = backend(server["pg_stat_io"], "fsyncs")


def main() -> None:
    make(15, 14, 140013, lambda server: None)
    make(17, 16, 160009, as_16)


if __name__ == "__main__":
    main()
