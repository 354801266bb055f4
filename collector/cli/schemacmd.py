"""``drivelab schema VERB``: the JSON Schema of a verb's ``--json`` document
(:mod:`collector.documents`), for a script that reads it to check itself against."""

from __future__ import annotations

import argparse
import json
import sys


def cmd_schema(args: argparse.Namespace) -> int:
    from collector import documents  # noqa: PLC0415

    sys.stdout.write(json.dumps(documents.json_schema(args.verb), indent=1) + "\n")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from collector.documents import SCHEMAS  # noqa: PLC0415

    p = sub.add_parser("schema", help="the JSON Schema of a verb's --json document")
    p.add_argument(
        "verb",
        choices=sorted(SCHEMAS),
        help="plan is run --dry-run's, lab-status lab status's",
    )
    p.set_defaults(func=cmd_schema)
