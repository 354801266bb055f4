"""What the physics checks know about a drive, from its device facts.

A drivelab filesystem is one drive or a RAID set; :func:`drive_from_facts` reads the
candidate_drive role's ``drive_facts`` of its members (SMART, the inventory's declared
fields) into a :class:`Drive`: its rotation rate and where it came from, and whether it
has power-loss protection. :mod:`collector.verdicts.physics` judges with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Drive:
    """What the rules need to know about a drive (a drivelab filesystem: one drive or a
    RAID set). ``rpm``: revolutions per minute, 0 when it does not rotate, None when
    unknown; ``rpm_source`` says where it came from. ``power_loss_protection``: as the
    inventory states it, None when nothing says."""

    name: str
    rpm: int | None = None
    #: where ``rpm`` came from (``SMART``, ``SMART (NVMe)``, ``inventory``); when it is
    #: unknown, why, if there is more to say than that nothing gave it
    rpm_source: str = ""
    power_loss_protection: bool | None = None

    @property
    def rotating(self) -> bool:
        return bool(self.rpm)

    @property
    def flush_ceiling(self) -> float | None:
        """Flushes per second a rotating drive can complete: one per revolution."""
        return self.rpm / 60 if self.rpm else None


def _declared(d: Mapping[str, Any]) -> Mapping[str, Any]:
    value = d.get("declared")
    return value if isinstance(value, Mapping) else {}


def _member_rpm(d: Mapping[str, Any]) -> tuple[int | None, str]:
    """One drive's rotation rate from its ``drive_facts`` entry: SMART's
    ``rotation_rate`` (0: solid state), an NVMe drive (does not rotate), else the
    inventory's ``rpm``."""
    smart = d.get("smart") if isinstance(d.get("smart"), Mapping) else {}
    if smart.get("available"):
        rate = smart.get("rotation_rate")
        if isinstance(rate, int) and not isinstance(rate, bool) and rate >= 0:
            return rate, "SMART"
        if str(smart.get("protocol") or "").lower() == "nvme":
            return 0, "SMART (NVMe)"
    declared = _declared(d).get("rpm")
    if isinstance(declared, int) and not isinstance(declared, bool) and declared >= 0:
        return declared, "inventory"
    return None, ""


def drive_from_facts(name: str, device_facts: Mapping[str, Any] | None) -> Drive:
    """The :class:`Drive` of a filesystem's device facts (``db/<host>-<fs>.json``:
    ``drives[]`` as the candidate_drive role's ``drive_facts`` module read them, each
    with ``smart`` and the inventory's ``declared`` fields). RAID: rotating when every
    member is (at the fastest member's rate), not rotating when none is, else unknown."""
    drives = device_facts.get("drives") if isinstance(device_facts, Mapping) else None
    members = [m for m in drives if isinstance(m, Mapping)] if isinstance(drives, list) else []
    if not members:
        return Drive(name)
    rates = [_member_rpm(m) for m in members]
    known = [r for r, _ in rates if r is not None]
    sources = sorted({s for r, s in rates if r is not None})
    why = ""
    if len(known) < len(rates):
        rpm = None
    elif all(known):
        rpm = max(known)
    elif not any(known):
        rpm = 0
    else:
        rpm, why = None, "its members rotate and do not"  # a commit may land on either
    plp = [_declared(m).get("power_loss_protection") for m in members]
    protected = None
    if plp and all(p is True for p in plp):
        protected = True
    elif any(p is False for p in plp):
        protected = False
    return Drive(name, rpm, ", ".join(sources) if rpm is not None else why, protected)
