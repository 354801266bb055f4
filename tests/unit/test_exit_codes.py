"""Exit statuses say the class of failure (collector.errors), so CI can tell "fix your
file" (2) from "the lab is busy, retry later" (3) from "the hosts failed" (4) from "the
controller's store or disk failed" (5), and a run whose results are incomplete (1) from a
clean one (0; tests/lab/test_faults.py). Each class is produced here by the real code
path that meets it: a lease held by a live holder, a host that refuses the connection."""

from __future__ import annotations

import io
import json
import os
import socket

import pytest
from rich.console import Console

from collector import build
from collector.cli import main as cli
from collector.errors import (
    EXIT_BUSY,
    EXIT_CONTROLLER,
    EXIT_HOSTS,
    EXIT_USAGE,
    DrivelabError,
    HostFailure,
    LabBusy,
)
from collector.gather.folder import gather_run
from collector.hosts import playbook
from collector.run.preflight import preflight
from collector.run.storing import record
from collector.store import Store
from tests.unit.test_lease import holder, make_lease, rules
from tests.unit.test_physics import run_folder
from tests.unit.test_preflight import LOCAL, inventory


def test_each_class_has_its_own_status():
    statuses = [EXIT_USAGE, EXIT_BUSY, EXIT_HOSTS, EXIT_CONTROLLER]
    assert len(set(statuses)) == 4 and 0 not in statuses and 1 not in statuses
    assert DrivelabError("x").exit_status == EXIT_USAGE


@pytest.mark.parametrize(
    ("failures", "status"),
    [
        ((), EXIT_HOSTS),
        (({"host": "db", "task": "t", "msg": "m"},), EXIT_HOSTS),
        (({"host": "db", "msg": "in use", "refusal": "lease_held"},), EXIT_BUSY),
        (({"host": "db", "msg": "mounted", "refusal": "mounted"},), EXIT_USAGE),
    ],
)
def test_a_failed_playbook_is_the_hosts_unless_a_module_refused(failures, status):
    assert playbook.PlaybookFailed("failed", failures).exit_status == status


def test_a_lease_held_by_a_live_run_is_busy(tmp_path):
    path = str(tmp_path / "lease.json")
    rules.take(path, holder("run-1", controller=socket.gethostname(), pid=os.getpid()), 120)
    with pytest.raises(LabBusy) as err:
        make_lease(tmp_path).take()
    assert err.value.exit_status == EXIT_BUSY


def test_a_host_that_does_not_answer_is_the_hosts(tmp_path):
    gone = {"ansible_host": "127.0.0.1", "ansible_port": 1}
    with pytest.raises(HostFailure) as err:
        preflight(inventory(tmp_path, {"here": LOCAL, "gone": gone}), Console(file=io.StringIO()))
    assert err.value.exit_status == EXIT_HOSTS


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "--no-such-flag"],
        ["run", "no-such-scenario.yml", "--dry-run"],
        ["compare", "a"],
    ],
)
def test_bad_arguments_and_files_are_the_input(argv, capsys):
    assert cli.main(argv) == EXIT_USAGE
    assert capsys.readouterr().err.startswith("drivelab: ")


def test_a_file_that_is_no_store_is_the_input(tmp_path, capsys):
    """--db naming a file that never was a store is the input's fault; a store damaged
    on disk is the controller's (test_bad_input: a damaged store, exit 5)."""
    db = tmp_path / "drivelab.db"
    db.write_bytes(b"SQLite format 3\0" + b"\xff" * 4080)
    assert cli.main(["report", "--db", str(db)]) == EXIT_USAGE
    assert "not a drivelab results store" in capsys.readouterr().err


# ------------------------------------------------------------------ machine-readable output


def test_report_and_compare_json_to_stdout_are_the_document_alone(
    results_db, tmp_path, capsys, monkeypatch
):
    """``--json -``: stdout is one JSON document (no table around it, no file named
    ``-``), stamped with its schema version and drivelab's version and commit."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "--db", str(results_db), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == build.SCHEMA_VERSION
    assert doc["drivelab"] == build.info() and doc["drivelab"]["commit"]
    assert {c["drive"] for c in doc["cells"]} == {"hdd", "ssd"}
    assert cli.main(["compare", "hdd", "ssd", "--db", str(results_db), "--json", "-"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert cmp["schema_version"] == build.SCHEMA_VERSION and len(cmp["pairs"]) == 1
    assert not (tmp_path / "-").exists()


def test_every_stored_run_names_the_build_that_stored_it(tmp_path):
    """A run folder gathered and stored (as drivelab run and drivelab gather store it)
    carries the run fact ``drivelab``: the version and commit that stored it."""
    with Store.open(tmp_path / "drivelab.db") as store:
        gathered = gather_run(run_folder("hdd7200-single", tmp_path))
        run_id = record(store, gathered)
        sid = store.scenario(gathered.scenario).id
        facts = {f.key: f.value for f in store.facts(sid, run_id) if f.scope == "run"}
    assert facts["drivelab"] == build.info() and facts["drivelab"]["version"]
