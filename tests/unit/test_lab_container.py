"""The container lab's host-side pieces that are pure logic: the files written into a
host's layer (and never through a symlink out of it), the systemd-nspawn command line,
and the gate's view of a loop device bound into a container."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from tests.unit.hostcode import module_util

ROLES = Path(__file__).resolve().parents[2] / "roles"
module_util("lab", "drivelab_lab")
_spec = importlib.util.spec_from_file_location(
    "lab_container", ROLES / "lab/library/lab_container.py"
)
lc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lc)
LabError = lc.LabError


def test_files_are_written_once_with_their_mode(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    key = tmp_path / "key"
    key.write_text("lab key\n")
    files = [
        {"path": "/etc/hostname", "content": "dbhost\n"},
        {"path": "/root/.ssh/authorized_keys", "src": str(key), "mode": "0600"},
    ]
    assert lc.write_files(str(root), files) == ["/etc/hostname", "/root/.ssh/authorized_keys"]
    assert (root / "etc/hostname").read_text() == "dbhost\n"
    assert (root / "root/.ssh/authorized_keys").stat().st_mode & 0o777 == 0o600
    assert lc.write_files(str(root), files) == []
    os.chmod(root / "etc/hostname", 0o600)
    assert lc.write_files(str(root), files) == ["/etc/hostname"]


def test_a_symlinked_folder_leading_out_of_the_tree_is_refused(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "controller-etc"
    root.mkdir()
    outside.mkdir()
    (root / "root").mkdir()
    (root / "root/.ssh").symlink_to(outside)
    with pytest.raises(LabError, match="leads out of the container"):
        lc.write_files(str(root), [{"path": "/root/.ssh/authorized_keys", "content": "k"}])
    assert list(outside.iterdir()) == []


def test_a_symlinked_file_is_replaced_not_written_through(tmp_path):
    root, target = tmp_path / "root", tmp_path / "controller-file"
    (root / "etc").mkdir(parents=True)
    target.write_text("the controller's\n")
    (root / "etc/hostname").symlink_to(target)
    assert lc.write_files(str(root), [{"path": "/etc/hostname", "content": "client1\n"}])
    assert target.read_text() == "the controller's\n"
    assert not (root / "etc/hostname").is_symlink()


def test_nspawn_boots_systemd_in_the_hosts_namespace_with_its_drives():
    argv = lc.argv_for(
        {"name": "dbhost", "netns": "drivelab-dbhost", "binds": ["/dev/loop3", "/dev/loop4"]},
        "/var/lib/drivelab/containers/dbhost/root",
    )
    assert argv[0] == "systemd-nspawn"
    for flag in (
        "--boot",
        "--register=no",
        "--keep-unit",
        "--network-namespace-path=/run/netns/drivelab-dbhost",
        "--directory=/var/lib/drivelab/containers/dbhost/root",
        "--bind=/dev/loop3",
        "--bind=/dev/loop4",
    ):
        assert flag in argv, flag
    # a host whose clock runs off (libfaketime): systemd's own programs told to skip it
    skewed = lc.argv_for(
        {"name": "client2", "netns": "drivelab-client2", "binds": [],
         "setenv": ["FAKETIME_SKIP_CMDS=systemd,systemd-journald"]},
        "/var/lib/drivelab/containers/client2/root",
    )  # fmt: skip
    assert "--setenv=FAKETIME_SKIP_CMDS=systemd,systemd-journald" in skewed
