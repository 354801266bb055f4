"""The read side's row types, and the small helpers the writes share."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from collector.records import CellSpec, RunStatus


@dataclass(frozen=True)
class ScenarioInfo:
    id: int
    name: str
    created_at: float
    baseline_drive: str | None
    spec: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""


@dataclass(frozen=True)
class StoredRun:
    id: int
    cell_id: int
    repetition: int
    status: RunStatus
    reason: str | None
    started_at: float | None
    ended_at: float | None
    commands: tuple[str, ...]
    #: 1, or the retry's number when a partial or failed attempt was run again
    attempt: int = 1
    #: the host name of the controller that recorded it ('' before schema version 4)
    controller: str = ""


@dataclass(frozen=True)
class Fact:
    scope: str
    key: str
    value: Any
    host: str | None = None
    run_id: int | None = None


def _filesystem_options(cell: CellSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if cell.mkfs_options:
        out["mkfs_options"] = list(cell.mkfs_options)
    if cell.mount_options is not None:
        out["mount_options"] = cell.mount_options
    if cell.filesystem_name:
        out["name"] = cell.filesystem_name
    return out


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
