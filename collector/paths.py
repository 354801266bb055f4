"""Where things live: the repository (playbooks, inventory) and the lab's own folders."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any

import yaml

#: the repository root: collector/ is installed editable, so its parent holds playbooks/
REPO = Path(__file__).resolve().parent.parent
PLAYBOOKS = REPO / "playbooks"
LOCAL_INVENTORY = REPO / "inventory" / "local"


def results_dir() -> Path:
    """Results folder; ``DRIVELAB_RESULTS`` overrides the default ``results/``."""
    return Path(os.environ.get("DRIVELAB_RESULTS", REPO / "results"))


def ansible_bin(name: str) -> str:
    """The ansible executable beside the running Python (the venv's), else on PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else name


@functools.cache
def _role_defaults(role: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()) or {}


def host_default(name: str, role: str = "drivelab") -> Any:
    """A fact of the hosts as the host side holds it: role ``role``'s default ``name``
    (``roles/<role>/defaults/main.yml``; role drivelab is the home of the shared ones), so
    the controller never spells a host's folder again. A name the role does not define
    is a KeyError: a programming error, not an operator's."""
    return _role_defaults(role)[name]
