"""What several roles share has one home, role drivelab (STYLE 12, kubespray's
kubespray-defaults as the model): no other role or playbook spells a shared fact again,
the pgbench vocabulary agrees wherever Ansible or the controller cannot read it from
there, and no role calls a module it cannot see by itself (its own library/ or that of a
role it depends on in meta/main.yml)."""

from __future__ import annotations

import ast
import importlib.util
import re
import typing
from pathlib import Path

import pytest
import yaml

from collector import cell
from collector.paths import REPO
from collector.scenario import schema

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
DEFAULTS = yaml.safe_load((ROLES / "drivelab/defaults/main.yml").read_text())

#: the literal of each shared fact, and the variable that is its home
SHARED = {
    "5440": "drivelab_pg_port",
    "/srv/drivelab": "drivelab_mount_root",
    "/var/lib/drivelab/candidates": "drivelab_candidate_state_dir",
    "/var/lib/drivelab/lease.json": "drivelab_lease_file",
    "/var/lib/drivelab-client": "drivelab_client_dir",
    "/usr/local/lib/drivelab": "drivelab_lib_dir",
    ".local/share/drivelab/secrets": "drivelab_secrets_dir",
    "/var/run/postgresql": "drivelab_pg_login",
    "login_user": "drivelab_pg_login",
    "login_port": "drivelab_pg_login",
    "supported-versions": "roles/drivelab/tasks/version.yml",
}
HOST_FILES = sorted(
    p
    for p in [
        *ROLES.glob("*/**/*.yml"),
        *ROLES.glob("*/templates/**/*.j2"),
        *ROOT.glob("playbooks/*.yml"),
    ]
    if not p.is_relative_to(ROLES / "drivelab")
)


def test_the_home_holds_each_shared_fact():
    text = yaml.safe_dump(DEFAULTS) + (ROLES / "drivelab/tasks/version.yml").read_text()
    for literal in SHARED:
        assert literal in text, literal


@pytest.mark.parametrize("path", HOST_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_copy_of_a_shared_fact(path):
    text = path.read_text()
    copies = {
        lit: home for lit, home in SHARED.items() if re.search(rf"(?<![\w-]){re.escape(lit)}", text)
    }
    assert not copies, f"{path.relative_to(ROOT)} spells shared facts again; use {copies}"


def _code_strings(path: Path):
    """The string literals of a module's code (docstrings aside: they may show a path)."""
    tree = ast.parse(path.read_text())
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.lineno, node.value


def test_the_controller_reads_the_hosts_folders_from_their_home():
    """The controller's copies of the hosts' folders (the stamp folder, the clients' run
    folders, Prometheus's) are read from the roles' defaults (collector.paths.host_default),
    as the host side reads them, never spelled again in collector/."""
    prometheus = yaml.safe_load((ROLES / "prometheus_server/defaults/main.yml").read_text())
    folders = {
        v for d in (DEFAULTS, prometheus) for v in d.values()
        if isinstance(v, str) and v.startswith("/") and "{{" not in v
    }  # fmt: skip
    assert {"/var/lib/drivelab/provisioned", "/var/lib/drivelab-client"} <= folders
    found = [
        f"{path.relative_to(ROOT)}:{line}: {value!r}"
        for path in sorted((ROOT / "collector").rglob("*.py"))
        for line, value in _code_strings(path)
        if any(value == f or value.startswith(f + "/") for f in folders)
    ]
    assert not found, "spelled again, read collector.paths.host_default: " + "; ".join(found)


def test_the_pgbench_vocabulary_agrees():
    """Argument spec choices are static YAML (Ansible cannot template them) and the
    controller is Python: both are held to drivelab_pgbench_modes and _logs here."""
    modes, logs = DEFAULTS["drivelab_pgbench_modes"], DEFAULTS["drivelab_pgbench_logs"]
    spec = yaml.safe_load((ROLES / "pgbench_run/meta/argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    assert options["pgbench_run_mode"]["choices"] == modes
    assert options["pgbench_run_log"]["choices"] == logs
    argv = importlib.util.spec_from_file_location(
        "drivelab_pgbench_filter_facts", ROLES / "pgbench_run/filter_plugins/pgbench.py"
    )
    assert argv and argv.loader
    pgbench = importlib.util.module_from_spec(argv)
    argv.loader.exec_module(pgbench)
    assert list(pgbench.MODES) == modes, "pgbench_run's filter drivelab_pgbench_argv"
    assert list(pgbench.LOGS) == logs, "pgbench_run's filter drivelab_pgbench_argv"
    assert list(cell.MODES) == modes, "collector.cell.MODES"
    assert list(cell.LOGS) == logs, "collector.cell.LOGS"
    workload = schema.Workload.model_fields
    assert typing.get_args(workload["mode"].annotation) == cell.MODES, "the scenario schema"
    assert typing.get_args(workload["log"].annotation) == cell.LOGS, "the scenario schema"
    docs = (REPO / "docs" / "scenarios.md").read_text(encoding="utf-8").splitlines()
    for key, words in (("workload.mode", modes), ("workload.log", logs)):
        row = next(line for line in docs if line.startswith(f"| `{key}` |"))
        assert re.findall(r"`([^`]+)`", row.split("|")[3]) == words, f"docs/scenarios.md {key}"


# --- modules: each role sees the ones it calls ---------------------------------------

#: task keywords (anything else without a dot names a module)
KEYWORDS = {
    "name", "when", "register", "loop", "loop_control", "vars", "block", "rescue", "always",
    "tags", "notify", "listen", "changed_when", "failed_when", "check_mode", "diff",
    "delegate_to", "delegate_facts", "run_once", "no_log", "environment", "become",
    "become_user", "args", "module_defaults", "until", "retries", "delay", "async", "poll",
    "throttle", "ignore_errors", "ignore_unreachable", "any_errors_fatal", "timeout",
}  # fmt: skip


def tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always"):
            yield from tasks(node.get(key) or [])


def dependencies(role: str) -> set[str]:
    """The role and every role it depends on, transitively (meta/main.yml)."""
    seen, todo = set(), [role]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        meta = yaml.safe_load((ROLES / name / "meta/main.yml").read_text()) or {}
        for dep in meta.get("dependencies") or []:
            todo.append(dep["role"] if isinstance(dep, dict) else dep)
    return seen


def visible(role: str, kind: str, suffix: str = ".py") -> set[str]:
    return {p.stem for r in dependencies(role) for p in (ROLES / r / kind).glob(f"*{suffix}")}


@pytest.mark.parametrize("role", sorted(p.name for p in ROLES.iterdir()), ids=str)
def test_a_role_calls_only_modules_it_sees(role):
    """A role's library/ (modules) and action_plugins/ (actions run on the controller,
    e.g. pgbench_run's drivelab_start) are on Ansible's paths once the role is loaded, and
    a role loads its dependencies first; ansible.cfg adds none of them for the roles."""
    modules = visible(role, "library") | visible(role, "action_plugins")
    used = set()
    for path in [*(ROLES / role).glob("tasks/*.yml"), *(ROLES / role).glob("handlers/*.yml")]:
        for task in tasks(yaml.safe_load(path.read_text()) or []):
            used |= {k for k in task if "." not in k and k not in KEYWORDS}
    assert used <= modules, f"{role} calls {sorted(used - modules)}, in no library/ it depends on"


@pytest.mark.parametrize("role", sorted(p.name for p in ROLES.iterdir()), ids=str)
def test_a_module_imports_only_module_utils_it_sees(role):
    utils = visible(role, "module_utils")
    for path in (ROLES / role).glob("library/*.py"):
        imported = set(
            re.findall(r"^from ansible\.module_utils\.(\w+) import", path.read_text(), re.M)
        )
        imported -= {"basic", "common", "six"}
        assert imported <= utils, f"{path.relative_to(ROOT)} imports {sorted(imported - utils)}"
