"""Where the results store is: an SQLite file (a path, the default) or a PostgreSQL
database (a ``postgresql://`` URI). ``--db`` and ``DRIVELAB_DB`` take either.

libpq's keyword form (``host=db.example dbname=results``) is a PostgreSQL target too,
never a file name: a value that starts with ``word=`` is parsed as one, and refused in
one line when libpq cannot read it (a file so named is given as ``./host=...``).

A URI never carries a password: the password is libpq's business (``~/.pgpass``,
``PGPASSFILE``, ``PGPASSWORD``), so it is never in argv, a log, a report or the store.
A URI with one is refused in one line, before anything connects.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from collector.errors import DrivelabError
from collector.paths import results_dir

#: the environment variable that names the store when ``--db`` is not given
ENV = "DRIVELAB_DB"
_SCHEMES = ("postgresql://", "postgres://")
#: libpq's keyword/value form begins with a keyword and ``=``
_KEYWORD_FORM = re.compile(r"\s*[A-Za-z_]+\s*=")


@dataclass(frozen=True)
class PostgresTarget:
    """A PostgreSQL results database, by its URI (without a password)."""

    uri: str

    def exists(self) -> bool:
        """A server store is there once its database is: :meth:`Store.open` says
        whether it holds drivelab's tables (the runner's "any stored yet?" test)."""
        return True

    def __str__(self) -> str:
        return self.uri


Target = Path | PostgresTarget


def default_target() -> Target:
    """``DRIVELAB_DB`` if set, else ``results/drivelab.db`` (``DRIVELAB_RESULTS`` moves it)."""
    env = os.environ.get(ENV, "").strip()
    if env:
        return parse_target(env, where=ENV)
    return results_dir() / "drivelab.db"


def parse_target(text: str | os.PathLike[str] | Target | None, where: str = "--db") -> Target:
    """A path or a ``postgresql://`` URI; ``None`` is :func:`default_target`."""
    if text is None:
        return default_target()
    if isinstance(text, PostgresTarget | Path):
        return text  # a Path is a file, whatever its name (``./host=x.db`` included)
    s = os.fspath(text)
    keywords = _KEYWORD_FORM.match(s) is not None
    if not keywords and not s.lower().startswith(_SCHEMES):
        return Path(s)
    _refuse_password(s, where, keywords)
    return PostgresTarget(s)


def _refuse_password(uri: str, where: str, keywords: bool = False) -> None:
    """A password in the URI (``user:secret@`` or ``?password=``) or the keyword form
    (``password=``) is refused; the message does not repeat the value, so the password
    is not printed either."""
    from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415  (keep --help fast)

    form = "connection string (keyword=value)" if keywords else "URI"
    unreadable = "connection string (keyword=value)" if keywords else "connection URI"
    try:
        params = conninfo_to_dict(uri)
    except Exception as err:  # psycopg.ProgrammingError: libpq could not parse it
        hint = "; a file whose name starts so is given as ./NAME" if keywords else ""
        said = _without_secret(" ".join(str(err).split()))
        raise DrivelabError(f"{where}: not a PostgreSQL {unreadable} ({said}){hint}") from None
    if "password" in params:
        raise DrivelabError(
            f"{where}: the PostgreSQL {form} carries a password: refused (it would be seen in"
            " argv and logs); give postgresql://user@host/dbname and put the password in"
            " ~/.pgpass (or PGPASSFILE, PGPASSWORD)"
        )


def _without_secret(text: str) -> str:
    return re.sub(r"(://[^:/@\s]*):[^@\s]*@", r"\1:***@", text)
