"""Loads the host-side module_utils of the roles as the modules see them on a host
(``ansible.module_utils.<name>``), and a role's module file as Ansible ships it, so unit
tests run the very code Ansible ships."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROLES = Path(__file__).resolve().parents[2] / "roles"


def module_util(role: str, name: str) -> ModuleType:
    full = f"ansible.module_utils.{name}"
    if full in sys.modules:
        return sys.modules[full]
    spec = importlib.util.spec_from_file_location(
        full, ROLES / role / "module_utils" / f"{name}.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[full] = module
    spec.loader.exec_module(module)
    return module


def library_module(role: str, name: str) -> ModuleType:
    """roles/<role>/library/<name>.py as a Python module (its functions plain functions)."""
    spec = importlib.util.spec_from_file_location(name, ROLES / role / "library" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
