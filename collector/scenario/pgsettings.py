"""A scenario's PostgreSQL settings against the DB host's own server.

The schema (:mod:`collector.scenario.schema`) refuses, offline, the names drivelab keeps
for itself or that would stop the run, and values that are not strings, numbers or
true/false. Whether PostgreSQL knows a name, and takes a value (its units, range, enum
values, booleans), only the server can say, for its version: ``drivelab run`` asks the
DB host's installed server (``playbooks/pg_settings.yml``: ``postgres -C``, read-only,
no cluster needs to run) about every (name, value) the scenario gives, before the first
cell, and :func:`check` turns the first refusal into one line naming the file and the
YAML path (``postgresql.sets.fast.wal_sync_method``). The verdicts are made by the host
module's rules (roles/postgresql_server/module_utils/drivelab_pgsettings.py), the same
ones it applies to an inventory's settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collector.scenario.rules import PG_RULES
from collector.scenario.schema import Scenario
from collector.scenario.wording import _fail, _key

#: what --dry-run cannot check: it never asks a host
NOT_CHECKED_WITHOUT_SERVER = (
    "the PostgreSQL settings' names and values (the DB host's server checks them when the"
    " run starts, before any drive is touched)"
)


def pairs(s: Scenario) -> list[tuple[str, str, str]]:
    """(YAML path, name, value as the settings file holds it) of every setting the
    scenario gives, in the file's order: ``postgresql.settings`` first, then each set."""
    out = [
        (f"postgresql.settings.{_key(name)}", name, PG_RULES.value_text(value))
        for name, value in s.postgresql.settings.items()
    ]
    for set_name, items in s.postgresql.sets.items():
        out += [
            (f"postgresql.sets.{set_name}.{_key(name)}", name, PG_RULES.value_text(value))
            for name, value in items.items()
        ]
    return out


def to_ask(s: Scenario) -> list[dict[str, str]]:
    """Each distinct (name, value) once: ``postgresql_server_check_pairs``."""
    seen: dict[tuple[str, str], None] = {}
    for _, name, text in pairs(s):
        seen.setdefault((name, text))
    return [{"name": n, "value": v} for n, v in seen]


def check(s: Scenario, answer: Mapping[str, Any], source: str | None = None) -> str:
    """The server's verdicts (``answer``: host, version, verdicts) on the scenario's
    settings: the first refused one (in the file's order) as a ``DrivelabError`` line,
    else a line saying what was checked and which settings need a restart."""
    source = source or s.source
    host, version = answer.get("host", "the DB host"), answer.get("version", "?")
    verdicts = {(v.get("name"), v.get("value")): v for v in answer.get("verdicts") or []}
    restart = []
    for path, name, text in pairs(s):
        v = verdicts.get((name, text))
        if v is None:
            raise _fail(source, f"{path}: PostgreSQL {version} on {host} gave no verdict")
        if not v.get("ok"):
            raise _fail(source, f"{path}: PostgreSQL {version} on {host} {v.get('message')}")
        if v.get("context") == "postmaster" and name not in restart:
            restart.append(name)
    n = len({name for _, name, _ in pairs(s)})
    need = f"; a restart for {', '.join(restart)}" if restart else "; a reload suffices"
    return f"PostgreSQL settings: {n} checked by PostgreSQL {version} on {host}{need}"
