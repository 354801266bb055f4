"""``drivelab export [SCENARIO ...] -o FILE`` and ``drivelab import FILE``: move scenarios
with their runs, raw-output references and facts between results stores (an SQLite
file and a PostgreSQL database, either way) through one JSON document
(:mod:`collector.store.transfer`). Importing the same document twice changes nothing."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from collector.cli.options import DB_HELP, db_arg
from collector.errors import DrivelabError


def cmd_export(args: argparse.Namespace) -> int:
    from collector.report import open_store  # noqa: PLC0415
    from collector.store import transfer  # noqa: PLC0415

    with open_store(args.db) as store:
        doc = transfer.export(store, args.scenarios)
    if str(args.output) == "-":
        sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
        return 0
    out = Path(args.output)
    transfer.write_export(doc, out)
    runs = sum(len(s["runs"]) for s in doc["scenarios"])
    print(f"exported {len(doc['scenarios'])} scenarios, {runs} runs: {out}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from collector.store import transfer  # noqa: PLC0415
    from collector.store.target import default_target  # noqa: PLC0415

    where = str(args.file)
    try:
        doc = json.loads(Path(args.file).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DrivelabError(f"{where}: not a drivelab export ({err})") from None
    transfer.check(doc, where)
    target = args.db if args.db is not None else default_target()
    for name, counts in transfer.import_document(target, doc):
        print(
            f"{name}: {counts['added']} runs added, {counts['replaced']} replaced,"
            f" {counts['kept']} already stored"
        )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``export`` and ``import``."""
    exp = sub.add_parser("export", help="write scenarios of a results store as one JSON document")
    exp.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="default: every scenario")
    exp.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="the document ('-': stdout)"
    )
    exp.add_argument("--db", type=db_arg, default=None, help=DB_HELP)
    exp.set_defaults(func=cmd_export)
    imp = sub.add_parser("import", help="merge an exported document into a results store")
    imp.add_argument("file", type=Path, metavar="FILE", help="a document drivelab export wrote")
    imp.add_argument("--db", type=db_arg, default=None, help=DB_HELP)
    imp.set_defaults(func=cmd_import)
