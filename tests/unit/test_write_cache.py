"""Write cache: which tool controls which drive, the exact commands, and parsing what
hdparm, sdparm and nvme-cli print (formats from their sources, see FACTS.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = (
    Path(__file__).resolve().parents[2] / "roles/candidate_drive/module_utils/drivelab_wcache.py"
)
_spec = importlib.util.spec_from_file_location("drivelab_wcache", _PATH)
wc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wc)


@pytest.mark.parametrize(
    ("kname", "transport", "tool", "reason"),
    [
        ("loop3", None, None, "loop device"),
        ("vda", "virtio", None, "virtio disk"),
        ("dm-0", None, None, "virtual device"),
        ("md127", None, None, "virtual device"),
        ("nvme0n1", "nvme", "nvme", None),
        ("sda", "sata", "hdparm", None),
        ("sdb", "sas", "sdparm", None),
        ("sdc", "usb", "sdparm", None),
    ],
)
def test_control_for(kname, transport, tool, reason):
    got_tool, got_reason = wc.control_for(kname, transport)
    assert got_tool == tool
    assert (reason is None and got_reason is None) or reason in got_reason


@pytest.mark.parametrize(
    ("tool", "on", "argv"),
    [
        ("hdparm", True, ["hdparm", "-W1", "/dev/sda"]),
        ("hdparm", False, ["hdparm", "-W0", "/dev/sda"]),
        ("sdparm", True, ["sdparm", "--set=WCE", "/dev/sda"]),
        ("sdparm", False, ["sdparm", "--clear=WCE", "/dev/sda"]),
        ("nvme", True, ["nvme", "set-feature", "/dev/sda", "--feature-id=0x06", "--value=1"]),
        ("nvme", False, ["nvme", "set-feature", "/dev/sda", "--feature-id=0x06", "--value=0"]),
    ],
)
def test_set_commands(tool, on, argv):
    assert wc.set_argv(tool, "/dev/sda", on) == argv


def test_read_commands():
    assert wc.read_argv("hdparm", "/dev/sda") == ["hdparm", "-W", "/dev/sda"]
    assert wc.read_argv("sdparm", "/dev/sdb") == ["sdparm", "--get=WCE", "/dev/sdb"]
    assert wc.read_argv("nvme", "/dev/nvme0n1") == [
        "nvme",
        "get-feature",
        "/dev/nvme0n1",
        "--feature-id=0x06",
    ]


@pytest.mark.parametrize(
    ("tool", "text", "on", "changeable"),
    [
        ("hdparm", "\n/dev/sda:\n write-caching =  1 (on)\n", True, True),
        ("hdparm", "\n/dev/sda:\n write-caching =  0 (off)\n", False, True),
        (
            "sdparm",
            "    /dev/sdb: SEAGATE   ST600MM0006       0004\nWCE           1  [cha: y, def:  1, sav:  1]\n",
            True,
            True,
        ),
        (
            "sdparm",
            "    /dev/sdb: SEAGATE   ST600MM0006       0004\nWCE           0  [cha: n, def:  0, sav:  0]\n",
            False,
            False,
        ),
        ("sdparm", "1\n", True, True),
        ("nvme", "get-feature:0x06 (Volatile Write Cache), Current value:0x00000001\n", True, True),
        (
            "nvme",
            "get-feature:0x06 (Volatile Write Cache), Current value:0x00000000\n",
            False,
            True,
        ),
    ],
    ids=[
        "hdparm-on",
        "hdparm-off",
        "sdparm-on",
        "sdparm-off-fixed",
        "sdparm-value-only",
        "nvme-on",
        "nvme-off",
    ],
)
def test_parse_state(tool, text, on, changeable):
    assert wc.parse_state(tool, text) == {"on": on, "changeable": changeable}


@pytest.mark.parametrize(
    ("tool", "text"),
    [
        ("hdparm", "\n/dev/vda:\n SG_IO: bad/missing sense data, sb[]:  70 00 05\n"),
        ("hdparm", ""),
        ("sdparm", "sdparm: Operation not permitted\n"),
        ("nvme", "NVMe status: INVALID_FIELD\n"),
    ],
)
def test_parse_state_refuses_what_it_does_not_know(tool, text):
    with pytest.raises(wc.WriteCacheError):
        wc.parse_state(tool, text)


def test_kernel_view():
    assert wc.parse_kernel_view("write back\n") is True
    assert wc.parse_kernel_view("write through") is False
    with pytest.raises(wc.WriteCacheError):
        wc.parse_kernel_view("")
