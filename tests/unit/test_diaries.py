"""Code comments say what and why; the figures that chose a shape live in docs/scaling.md
("Why the hot path is shaped as it is"), where one table can be measured again. A timing
diary in a comment ("took 0.9-1.2 s in a profiled run") goes stale where it stands."""

import re

from collector.paths import REPO

#: how the diaries that were moved out read: a measured cost, or a profiled run
DIARY = re.compile(
    r"profiled run|\b(?:took|cost|costs)\s+(?:about\s+)?\d[\d.]*(?:-\d[\d.]*)?\s?m?s\b",
    re.IGNORECASE,
)
SUFFIXES = {".py", ".yml", ".yaml", ".j2", ".sh"}


def diaries(text: str) -> list[str]:
    return [m.group(0) for m in DIARY.finditer(text)]


def test_the_rule_sees_a_diary():
    assert diaries("# as the command module, this task took 0.9-1.2 s on the lab") == [
        "took 0.9-1.2 s"
    ]
    assert diaries("# six files, 3.3 s for two clients in a profiled run") == ["profiled run"]
    assert diaries("# a module run each (docs/scaling.md)") == []


def test_no_timing_diary_in_the_code():
    found = {}
    for top in ("collector", "roles", "playbooks"):
        for path in sorted((REPO / top).rglob("*")):
            if not (path.suffix in SUFFIXES and path.is_file()):
                continue
            if hits := diaries(path.read_text(encoding="utf-8")):
                found[str(path.relative_to(REPO))] = hits
    assert found == {}
