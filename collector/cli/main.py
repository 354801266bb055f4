"""The ``drivelab`` console script. Subcommands live in their own modules; each has a
``register(subparsers)`` that adds its parser and sets ``func``. An error ends in one
line on stderr, ``drivelab: <what is wrong>``, and the exit status of its class
(:mod:`collector.errors`: 2 the input, 3 the lab busy, 4 the hosts, 5 the controller;
1 a run whose results are incomplete)."""

from __future__ import annotations

import argparse
import errno
import sqlite3
import sys
from collections.abc import Sequence
from typing import NoReturn

from collector import __version__
from collector.errors import (
    EXIT_CONTROLLER,
    EXIT_USAGE,
    DrivelabError,
    Stopped,
    one_line,
)

#: what ``drivelab --help`` says of the exit statuses (collector.errors, docs/collector.md)
EXIT_STATUSES = """\
exit statuses (every verb):
  0  done
  1  results incomplete: a repetition partial or failed, a cell not run
     (check: problems found)
  2  the input: arguments, a scenario, an inventory, a drive the gate refused
  3  the lab is busy: its lease is held; retry later, or run --wait
  4  the hosts: one does not answer over SSH, a playbook failed on it
  5  the controller: the results store damaged, full or unreachable; disk full
  128+n  stopped by signal n (Ctrl-C: 130)"""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line naming it, not a usage dump."""

    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix("drivelab").strip()
        prefix = f"{where}: " if where else ""
        raise DrivelabError(f"{prefix}{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    # keep --help fast: the verbs are imported only when a command is parsed
    from collector.cli import (  # noqa: PLC0415
        checkcmd,
        gathercmd,
        labcmd,
        reportcmd,
        runcmd,
        schemacmd,
        statuscmd,
        transfercmd,
        watchcmd,
    )

    parser = OneLineParser(
        prog="drivelab",
        description="How fast is PostgreSQL on this drive, and why.",
        epilog=EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"drivelab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    sub.required = True
    labcmd.register(sub)
    runcmd.register(sub)
    statuscmd.register(sub)
    checkcmd.register(sub)
    gathercmd.register(sub)
    reportcmd.register(sub)
    watchcmd.register(sub)
    transfercmd.register(sub)
    schemacmd.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = None
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        return int(args.func(args) or 0)
    except DrivelabError as err:
        print(f"drivelab: {one_line(str(err))}", file=sys.stderr)
        return err.exit_status
    except OSError as err:
        # a path given that cannot be read or written (a folder where a file is wanted,
        # a file where a folder is): the path and why, not a traceback
        where = f"{err.filename}: " if err.filename is not None else ""
        print(f"drivelab: {one_line(where + (err.strerror or str(err)))}", file=sys.stderr)
        return EXIT_CONTROLLER if err.errno in (errno.ENOSPC, errno.EDQUOT) else EXIT_USAGE
    except sqlite3.DatabaseError as err:
        # "database or disk is full": SQLite rolled the write back, the store is intact;
        # "database disk image is malformed": a damaged file, found only when a read
        # reaches the damaged page (opening it checks the header alone)
        print(f"drivelab: results store{_store_named(args)}: {one_line(str(err))}", file=sys.stderr)
        return EXIT_CONTROLLER
    except KeyboardInterrupt as err:
        # Ctrl-C: 130; SIGTERM, SIGHUP during a run (Stopped): 128 + the signal's number
        stopped = isinstance(err, Stopped)
        print(f"drivelab: {err if stopped else 'interrupted'}", file=sys.stderr)
        return err.exit_status if stopped else 130
    except Exception as err:
        # the PostgreSQL results store gone or refusing mid-way (psycopg's errors, not
        # imported here: SQLite users never load it); libpq's words never hold a password
        if type(err).__module__.split(".")[0] != "psycopg":
            raise
        print(f"drivelab: results store: {one_line(str(err))}", file=sys.stderr)
        return EXIT_CONTROLLER


def _store_named(args: argparse.Namespace | None) -> str:
    """`` <path>``: the SQLite store the verb was using, when it names one."""
    if args is None or not hasattr(args, "db"):
        return ""
    from collector.store.target import parse_target  # noqa: PLC0415

    try:
        return f" {parse_target(args.db)}"
    except DrivelabError:
        return ""


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
