"""The PostgreSQL major version the runner hands to every repetition's playbook, read
from the cell's database.json (the server's own version string, as the database stage
recorded it): the DB host then need not work it out again before each repetition."""

from __future__ import annotations

import json

import pytest

from collector import runfolder


def database_json(tmp_path, postgresql):
    path = tmp_path / "database.json"
    path.write_text(json.dumps({"cluster": "drivelab", "postgresql": postgresql}))
    return path


@pytest.mark.parametrize(
    ("version", "major"),
    [
        ("15.18 (Debian 15.18-0+deb12u1)", "15"),  # the namespace lab's, Debian 12
        ("17.12 (Debian 17.12-1.pgdg13+1)", "17"),
        ("16beta1", "16"),
        ("9.6.24", "9.6"),
    ],
)
def test_the_major_version_of_the_servers_own_string(tmp_path, version, major):
    assert runfolder.pg_major(database_json(tmp_path, {"version": version})) == major


@pytest.mark.parametrize("postgresql", [{}, {"version": None}, {"version": "devel"}, []])
def test_without_a_version_the_playbook_works_it_out_itself(tmp_path, postgresql):
    assert runfolder.pg_major(database_json(tmp_path, postgresql)) is None


def test_a_missing_or_broken_file_is_none(tmp_path):
    assert runfolder.pg_major(tmp_path / "database.json") is None
    (tmp_path / "database.json").write_text("{")
    assert runfolder.pg_major(tmp_path / "database.json") is None
