"""What a scenario's names and arguments may be, and the DB host's own rules.

The name patterns (drives, scenarios, hosts, arguments, mount options, script paths) and
the annotated string types the models of :mod:`collector.scenario.schema` check with.
``HOST_RULES`` is the DB host's own allow-list module for mkfs and mount options, and
``PG_RULES`` its rules for PostgreSQL settings (which names drivelab keeps for itself,
what a value may be), both loaded from roles/ by path (``REPO`` from
:mod:`collector.paths`), so a scenario is refused with the line the host would give.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator

from collector.paths import REPO
from collector.scenario.wording import _show

#: drive and RAID set names: what the inventory and playbooks/drives.yml accept
#: (roles/preflight/defaults/main.yml preflight_name_pattern)
DRIVE_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
#: scenario and size names; the scenario name is also its results folder
#: a filesystem variant's name (``filesystems[].name``): a word of a cell's names
VARIANT_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
SCENARIO_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
#: one mkfs or pgbench -i argument: no spaces, quotes or shell metacharacters
ARGUMENT = re.compile(r"[A-Za-z0-9_=,.:/+^-]{1,200}")
#: mount options, as roles/preflight checks them
MOUNT_OPTIONS = re.compile(r"[A-Za-z0-9_=,.:/-]{1,200}")
#: a custom pgbench script path, relative to the scenario file
SCRIPT_PATH = re.compile(r"[A-Za-z0-9_./-]{1,200}")
#: inventory host names. A client's database and role are drivelab_<client>: SQL
#: identifiers (roles/pgbench_database writes one into a query) and folder names.
#: The DB host's name names files and folders.
CLIENT_NAME = re.compile(r"[a-z][a-z0-9_]{0,53}")
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def _matching(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{_show(value)} is not a valid {what} ({pattern.pattern})")
        return value

    return check


DriveName = Annotated[str, AfterValidator(_matching(DRIVE_NAME, "drive name"))]
ScenarioName = Annotated[str, AfterValidator(_matching(SCENARIO_NAME, "name"))]
Argument = Annotated[str, AfterValidator(_matching(ARGUMENT, "argument"))]
MountOptions = Annotated[str, AfterValidator(_matching(MOUNT_OPTIONS, "mount option string"))]
VariantName = Annotated[str, AfterValidator(_matching(VARIANT_NAME, "filesystem variant name"))]


def _host_module(role: str, name: str) -> Any:
    """A role's module_utils file, as the host's modules use it: loaded from the role, so
    a scenario is refused with the very line the host would give, before anything runs."""
    path = REPO / "roles" / role / "module_utils" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: the DB host's allow-lists for mkfs and mount options (drive_format builds its argv with them)
HOST_RULES = _host_module("candidate_drive", "drivelab_argv")
#: a filesystem drivelab makes: a row of the host side's table (drivelab_argv.FILESYSTEMS)
FilesystemName = Literal[tuple(HOST_RULES.FILESYSTEMS)]  # type: ignore[valid-type]
#: the DB host's rules for PostgreSQL settings (module drivelab_pg_settings)
PG_RULES = _host_module("postgresql_server", "drivelab_pgsettings")
