from __future__ import annotations

import pytest

from collector.errors import DrivelabError
from collector.hosts.playbook import parse_recap
from collector.units import human_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1073741824", 1073741824),
        ("512M", 512 * 1024**2),
        ("512MiB", 512 * 1024**2),
        ("512mb", 512 * 1024**2),
        ("4G", 4 * 1024**3),
        ("1.5G", int(1.5 * 1024**3)),
        (" 2 T ", 2 * 1024**4),
        ("64k", 65536),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "5ZB", "abc", "-1G", "1e9", "12 apples", "512M; rm -rf /"])
def test_parse_size_rejects_with_the_culprit(text):
    with pytest.raises(DrivelabError, match="--db-memory"):
        parse_size(text, "--db-memory")


def test_human_size():
    assert human_size(536870912) == "512.0 MiB"
    assert human_size(4 * 1024**3) == "4.0 GiB"
    assert human_size(100) == "100 B"


def test_parse_recap_reads_every_host():
    text = """PLAY RECAP *********************************************************************
localhost                  : ok=30   changed=0    unreachable=0    failed=0    skipped=2    rescued=0    ignored=0
client1                    : ok=3    changed=1    unreachable=1    failed=0    skipped=0    rescued=0    ignored=0
"""
    recap = parse_recap(text)
    assert recap["localhost"]["changed"] == 0
    assert recap["localhost"]["ok"] == 30
    assert recap["client1"] == {
        "ok": 3, "changed": 1, "unreachable": 1, "failed": 0, "skipped": 0, "rescued": 0, "ignored": 0,
    }  # fmt: skip
