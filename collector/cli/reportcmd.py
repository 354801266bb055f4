"""``drivelab report [SCENARIO]`` and ``drivelab compare A B``: read the results store,
do the statistics, print a table and, on request, write HTML, CSV and JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from collector import build
from collector.cli.options import DB_HELP, db_arg, with_db
from collector.errors import DrivelabError


def cmd_report(args: argparse.Namespace) -> int:
    from collector.report.publish import publish  # noqa: PLC0415  (keep --help fast)

    return publish(
        args.db, args.scenario, args.baseline, html=args.html, csv=args.csv, json=args.json,
        verbose=args.verbose,
    )  # fmt: skip


def cmd_compare(args: argparse.Namespace) -> int:
    from collector.report import compare, open_store  # noqa: PLC0415

    if args.a == args.b:
        raise DrivelabError(f"compare: baseline and contender are both {args.a!r}")
    with open_store(args.db) as store:
        result = compare.compare(store, args.a, args.b, args.scenario)
    text = json.dumps(build.stamped(compare.as_dict(result)), indent=1) + "\n"
    if args.json is not None and str(args.json) == "-":
        sys.stdout.write(text)  # the document alone on stdout
        return 0
    compare.publish(result)
    if args.json:
        tmp = args.json.with_name(args.json.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(args.json)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``report`` and ``compare``."""
    rep = sub.add_parser("report", help="tables and plots of stored results")
    rep.add_argument("scenario", nargs="?", metavar="SCENARIO", help="one scenario (default: all)")
    rep.add_argument("--db", type=db_arg, default=None, help=DB_HELP)
    rep.add_argument("--baseline", metavar="DRIVE", help="drive the ratios refer to")
    rep.add_argument(
        "-v", "--verbose", action="store_true",
        help="every start line and physics note, not their summary",
    )  # fmt: skip
    rep.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML report")
    rep.add_argument("--csv", type=Path, metavar="DIR", help="write every figure's data as CSV")
    rep.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        help="write every figure's data as JSON ('-': to stdout, instead of the table)",
    )
    rep.set_defaults(func=lambda a: cmd_report(with_db(a)))
    cmp = sub.add_parser(
        "compare",
        help="baseline A vs contender B: two scenarios, or two drives or setting sets of one",
    )
    cmp.add_argument("a", metavar="A", help="baseline: a scenario, a drive or a setting set")
    cmp.add_argument("b", metavar="B", help="contender: a scenario, a drive or a setting set")
    cmp.add_argument("--scenario", help="the scenario holding drives (or setting sets) A and B")
    cmp.add_argument("--db", type=db_arg, default=None, help=DB_HELP)
    cmp.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        help="also write the comparison as JSON ('-': to stdout, instead of the table)",
    )
    cmp.set_defaults(func=lambda a: cmd_compare(with_db(a)))
