"""drivelab's own-filesystem records: the write cache originals kept in the same state
folder are not records (a wcache file used to crash the gate with a KeyError)."""

from __future__ import annotations

import json

from tests.unit.hostcode import module_util

module_util("candidate_drive", "drivelab_argv")
gate = module_util("candidate_drive", "drivelab_gate")


def test_records_skip_write_cache_originals_and_give_uuids_and_mounts(tmp_path):
    (tmp_path / "nvme.json").write_text(json.dumps({"name": "nvme", "uuid": "u1"}))
    (tmp_path / "md10.json").write_text(json.dumps({"name": "md10", "uuid": "u2", "md_uuid": "m2"}))
    (tmp_path / "wcache-sda.json").write_text(json.dumps({"device": "/dev/sda", "original": "on"}))
    (tmp_path / ".rec.tmp.json").write_text("{half")
    records = gate.own_records(str(tmp_path))
    assert sorted(records) == ["md10", "nvme"]
    uuids, mounts = gate.own_marks(records, "/srv/drivelab")
    assert sorted(uuids) == ["m2", "u1", "u2"]
    assert mounts == {"/srv/drivelab/md10": "md10", "/srv/drivelab/nvme": "nvme"}


def test_no_state_folder_means_no_records(tmp_path):
    assert gate.own_records(str(tmp_path / "missing")) == {}
