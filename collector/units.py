"""Sizes as people write them ("512M", "4GiB", "1073741824") to bytes, and back."""

from __future__ import annotations

import math
import re

from collector.errors import DrivelabError

_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str, what: str = "size") -> int:
    """Bytes in ``text``: a number with an optional binary suffix K/M/G/T/P (KiB, MB ... all
    mean powers of 1024, as in ``free`` and cgroups). Raises DrivelabError naming ``what``."""
    match = _SIZE.match(str(text))
    if not match or not math.isfinite(float(match.group(1))):  # 400 digits are inf
        raise DrivelabError(
            f"{what} {text!r}: not a size; write a number of bytes or a number with K, M, G, T or P"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def human_size(n: float) -> str:
    """1073741824 -> '1.0 GiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover
