"""Scenario files: the schema, its one-line errors, and the matrix of cells they expand to.

A scenario (``scenarios/*.yml``, documented in docs/scenarios.md) names drives and RAID
sets, filesystems, placements, datasets, client host counts and a pgbench workload;
``expand`` crosses them into ``PlannedCell`` s in run order, each carrying the
``collector.cell.Cell`` to measure, the request ``playbooks/drives.yml`` takes for it, and how
many repetitions to run.

Every problem with a file is one ``DrivelabError`` line naming the file, the YAML path
and what is wrong (``scenarios/x.yml: workload.duration: must be greater than 0 (got
-5)``); pydantic's errors are translated, never shown.

The package, one module per seam; imports go only down this list's arrows, never
back up:

- :mod:`collector.scenario.wording`: pydantic's errors and every other problem as one
  line (``_fail``, ``_first_error``, ``_show``, ``_printable``, ``MAX_MESSAGE``).
- :mod:`collector.scenario.schema` (-> wording): the name patterns (``DRIVE_NAME``,
  ``CLIENT_NAME``...), ``HOST_RULES`` and the pydantic models, :class:`Scenario` last.
- :mod:`collector.scenario.loader` (-> schema, wording): hardened YAML reading
  (``_read_yaml``, ``MAX_FILE_BYTES``, ``MAX_VALUES``), :func:`parse` and :func:`load`.
- :mod:`collector.scenario.inventory` (-> loader, schema, wording):
  :func:`load_inventory`, :func:`db_host`, :func:`client_hosts`,
  :func:`validate_against_inventory`.
- :mod:`collector.scenario.matrix` (-> inventory, schema): :class:`AdaptivePolicy`,
  :class:`PlannedCell`, :func:`expand`, :func:`drive_batch`.
- :mod:`collector.scenario.plan` (-> matrix, schema): the time estimates
  (:func:`estimate_seconds`...) and :func:`plan_text`.
- :mod:`collector.scenario.pgsettings` (-> schema, wording): the scenario's PostgreSQL
  settings as asked of the DB host's server, and its verdicts as one line
  (:func:`~collector.scenario.pgsettings.check`).

Every public name, and the private ones the tests use, is re-exported here:
``from collector.scenario import ...`` and ``scenario.<name>`` work as they did when
this was one module.
"""

from collector.scenario.inventory import (
    NOT_CHECKED_WITHOUT_INVENTORY,
    client_hosts,
    db_host,
    inventory_by_count,
    load_inventory,
    validate_against_inventory,
)
from collector.scenario.loader import MAX_FILE_BYTES, MAX_VALUES, load, parse
from collector.scenario.matrix import AdaptivePolicy, PlannedCell, drive_batch, expand
from collector.scenario.pgsettings import NOT_CHECKED_WITHOUT_SERVER
from collector.scenario.plan import (
    INIT_FIXED,
    INIT_PER_SCALE_PER_HOST,
    OVERHEAD_PER_REPETITION,
    PRETEST_SECONDS,
    TPS_PER_CLIENT_GUESS,
    estimate_seconds,
    init_seconds,
    plan_doc,
    plan_text,
    pretest_seconds,
    repetition_seconds,
)
from collector.scenario.rules import (
    ARGUMENT,
    CLIENT_NAME,
    DRIVE_NAME,
    HOST_NAME,
    HOST_RULES,
    MOUNT_OPTIONS,
    PG_RULES,
    SCENARIO_NAME,
    SCRIPT_PATH,
    Argument,
    DriveName,
    MountOptions,
    ScenarioName,
)
from collector.scenario.schema import (
    WRITE_CACHE,
    AdaptiveRepetitions,
    AdaptiveSpec,
    Filesystem,
    Postgresql,
    Pretests,
    RaidSet,
    Repetitions,
    Scenario,
    Strict,
    Workload,
)
from collector.scenario.wording import MAX_MESSAGE, _printable, _show

__all__ = [
    "ARGUMENT",
    "CLIENT_NAME",
    "DRIVE_NAME",
    "HOST_NAME",
    "HOST_RULES",
    "INIT_FIXED",
    "INIT_PER_SCALE_PER_HOST",
    "MAX_FILE_BYTES",
    "MAX_MESSAGE",
    "MAX_VALUES",
    "MOUNT_OPTIONS",
    "NOT_CHECKED_WITHOUT_INVENTORY",
    "NOT_CHECKED_WITHOUT_SERVER",
    "OVERHEAD_PER_REPETITION",
    "PG_RULES",
    "PRETEST_SECONDS",
    "SCENARIO_NAME",
    "SCRIPT_PATH",
    "TPS_PER_CLIENT_GUESS",
    "WRITE_CACHE",
    "AdaptivePolicy",
    "AdaptiveRepetitions",
    "AdaptiveSpec",
    "Argument",
    "DriveName",
    "Filesystem",
    "MountOptions",
    "PlannedCell",
    "Postgresql",
    "Pretests",
    "RaidSet",
    "Repetitions",
    "Scenario",
    "ScenarioName",
    "Strict",
    "Workload",
    "_printable",
    "_show",
    "client_hosts",
    "db_host",
    "drive_batch",
    "estimate_seconds",
    "expand",
    "init_seconds",
    "inventory_by_count",
    "load",
    "load_inventory",
    "parse",
    "plan_doc",
    "plan_text",
    "pretest_seconds",
    "repetition_seconds",
    "validate_against_inventory",
]
