"""``drivelab report`` and ``drivelab compare``: filled in by the collector issue."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the report and compare subcommands (none yet)."""
