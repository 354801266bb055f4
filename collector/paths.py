"""Where things live: the repository (playbooks, inventory) and the lab's own folders."""

from __future__ import annotations

import os
import sys
from pathlib import Path

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
