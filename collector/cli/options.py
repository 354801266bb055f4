"""The flags more than one verb takes: ``--db`` (the results store) and ``--inventory``
(the hosts). Verbs import these, never each other."""

from __future__ import annotations

import argparse
from pathlib import Path

from collector.errors import DrivelabError
from collector.paths import LOCAL_INVENTORY
from collector.scenario.inventory import inventory_source

#: the --db help of every verb that reads or writes results
DB_HELP = (
    "results store: an SQLite file, or postgresql://user@host/dbname (password from"
    " ~/.pgpass or PGPASSWORD, never here); default $DRIVELAB_DB, else results/drivelab.db"
)


def db_arg(text: str):
    """``--db``: a path or a ``postgresql://`` URI (one with a password is refused)."""
    from collector.store.target import parse_target  # noqa: PLC0415  (keep --help fast)

    return parse_target(text)


def default_db():
    """The store a verb uses without ``--db``: $DRIVELAB_DB, else results/drivelab.db."""
    from collector.store.target import default_target  # noqa: PLC0415

    return default_target()


def with_db(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with ``db`` set to the default store where ``--db`` was not given."""
    if args.db is None:
        args.db = default_db()
    return args


def inventory_file(arg: str | None) -> Path:
    """The inventory source ``--inventory``/``-i`` names, as Ansible is given it: a folder
    holding hosts.yml is that file, any other folder or file is itself (``hosts.ini``
    with ``group_vars/``, several files, an inventory plugin's)."""
    path = inventory_source(Path(arg) if arg else LOCAL_INVENTORY)
    if not arg and path.is_dir():
        path = path / "hosts.yml"
    if not path.exists():
        hint = (
            "run 'drivelab lab up' first"
            if not arg
            else "give an inventory folder or file, as ansible-playbook -i takes it"
        )
        raise DrivelabError(f"inventory {path} does not exist: {hint}")
    return path
