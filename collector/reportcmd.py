"""``drivelab report [SCENARIO]`` and ``drivelab compare A B``: read the results store,
do the statistics, print a table and, on request, write HTML, CSV and JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from collector.errors import DrivelabError

#: the --db help of every verb that reads or writes results
DB_HELP = (
    "results store: an SQLite file, or postgresql://user@host/dbname (password from"
    " ~/.pgpass or PGPASSWORD, never here); default $DRIVELAB_DB, else results/drivelab.db"
)


def db_arg(text: str):
    """``--db``: a path or a ``postgresql://`` URI (one with a password is refused)."""
    from collector.store.target import parse_target  # noqa: PLC0415  (keep --help fast)

    return parse_target(text)


def _default_db():
    from collector.store.target import default_target  # noqa: PLC0415

    return default_target()


def cmd_report(args: argparse.Namespace) -> int:
    from rich.console import Console  # noqa: PLC0415  (keep --help fast)

    from collector.report import export, load_all, open_store, terminal  # noqa: PLC0415

    with open_store(args.db) as store:
        views = load_all(store, [args.scenario] if args.scenario else None, args.baseline)
    console = Console()
    terminal.publish(views, console)
    if args.html:
        from collector.report import html  # noqa: PLC0415  (matplotlib is slow to import)

        console.print(f"HTML report: {html.publish(views, args.html)}")
    if args.csv:
        files = export.write_csv(views, args.csv)
        console.print(f"CSV: {len(files)} files in {args.csv}")
    if args.json:
        console.print(f"JSON: {export.write_json(views, args.json)}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from collector.report import compare, open_store  # noqa: PLC0415

    if args.a == args.b:
        raise DrivelabError(f"compare: baseline and contender are both {args.a!r}")
    with open_store(args.db) as store:
        result = compare.compare(store, args.a, args.b, args.scenario)
    compare.publish(result)
    if args.json:
        Path(args.json).write_text(
            json.dumps(compare.as_dict(result), indent=1) + "\n", encoding="utf-8"
        )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``report`` and ``compare``."""
    rep = sub.add_parser("report", help="tables and plots of stored results")
    rep.add_argument("scenario", nargs="?", metavar="SCENARIO", help="one scenario (default: all)")
    rep.add_argument("--db", type=db_arg, default=None, help=DB_HELP)
    rep.add_argument("--baseline", metavar="DRIVE", help="drive the ratios refer to")
    rep.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML report")
    rep.add_argument("--csv", type=Path, metavar="DIR", help="write every figure's data as CSV")
    rep.add_argument("--json", type=Path, metavar="FILE", help="write every figure's data as JSON")
    rep.set_defaults(func=lambda a: cmd_report(_with_db(a)))
    cmp = sub.add_parser(
        "compare",
        help="baseline A vs contender B: two scenarios, or two drives or setting sets of one",
    )
    cmp.add_argument("a", metavar="A", help="baseline: a scenario, a drive or a setting set")
    cmp.add_argument("b", metavar="B", help="contender: a scenario, a drive or a setting set")
    cmp.add_argument("--scenario", help="the scenario holding drives (or setting sets) A and B")
    cmp.add_argument("--db", type=db_arg, default=None, help=DB_HELP)
    cmp.add_argument("--json", type=Path, metavar="FILE", help="also write the comparison as JSON")
    cmp.set_defaults(func=lambda a: cmd_compare(_with_db(a)))


def _with_db(args: argparse.Namespace) -> argparse.Namespace:
    if args.db is None:
        args.db = _default_db()
    return args
