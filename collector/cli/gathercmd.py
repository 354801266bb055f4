"""``drivelab gather RUN_DIR [RUN_DIR...] [--db PATH|URI]``: store fetched run folders.

Each RUN_DIR is a run folder (``runs/<scenario>/<cell_id>/rep-N``) or a folder above
some (``runs/<scenario>``). Every run is stored (again: gathering twice replaces)
and gets one line: cell, repetition, status, aggregate tps. A folder that is not a
run folder gets one ``drivelab: ...`` line on stderr; the others are still stored,
and the exit status is then 2."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from collector.cli.options import DB_HELP, db_arg
from collector.errors import DrivelabError, one_line


def summary_line(gathered) -> str:
    """``two-client/nvme-ext4-...-tpcb rep 0: complete, 7,961.3 tps (window)``."""
    rs = gathered.stats()
    status = rs.status.value + (f" ({rs.reason})" if rs.reason else "")
    reported = [c.tps for c in gathered.run.clients if c.tps is not None]
    if rs.tps is None and reported:
        n = len(gathered.run.clients)
        tps = f"{sum(reported):,.1f} tps (pgbench sum of {len(reported)} of {n} clients)"
    elif rs.tps is None:
        tps = "no tps"
    else:
        tps = f"{rs.tps:,.1f} tps " + ("(window)" if rs.windowed else "(pgbench sum)")
    run = gathered.run
    attempt = f" attempt {run.attempt}" if run.attempt > 1 else ""
    return f"{gathered.scenario}/{gathered.cell_id} rep {run.repetition}{attempt}: {status}, {tps}"


def cmd_gather(args: argparse.Namespace) -> int:
    from collector.run.storing import gather_folders  # noqa: PLC0415  (--help fast: numpy)
    from collector.store.target import default_target  # noqa: PLC0415

    db = args.db if args.db is not None else default_target()
    errors = 0
    for _, gathered in gather_folders(db, args.run_dirs):
        if isinstance(gathered, DrivelabError):
            errors += 1
            print(f"drivelab: {one_line(str(gathered))}", file=sys.stderr)
        else:
            print(summary_line(gathered), flush=True)
    return 2 if errors else 0


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``gather``."""
    p = sub.add_parser("gather", help="store fetched run folders in the results store")
    p.add_argument(
        "run_dirs",
        nargs="+",
        type=Path,
        metavar="RUN_DIR",
        help="runs/<scenario>/<cell>/rep-N, or a folder above run folders",
    )
    p.add_argument("--db", type=db_arg, default=None, help=DB_HELP)
    p.set_defaults(func=cmd_gather)
