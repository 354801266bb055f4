"""Every verb's ``--json`` document against its schema (collector/documents.py): the real
output of each verb, on the realistic store, a plan, an Ansible-read lease on this
machine and documents captured from the lab's hosts. The lab tests validate the lab's
own (lab status, status, check, drives) as they read them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from collector import build, documents
from collector.cli import main as cli
from collector.errors import EXIT_HOSTS, EXIT_USAGE, DrivelabError
from collector.paths import REPO

DATA = Path(__file__).parent.parent / "data" / "check"


def _stdout(argv: list[str], capsys) -> dict:
    assert cli.main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_report_compare_and_plan_documents_fit_their_schemas(results_db, capsys):
    db = str(results_db)
    report = _stdout(["report", "--db", db, "--json", "-"], capsys)
    documents.validate("report", report)
    assert report["cells"] and report["runs"] and report["latency_histogram"]
    documents.validate("compare", _stdout(["compare", "hdd", "ssd", "--db", db, "--json", "-"],
                                          capsys))  # fmt: skip
    plan = _stdout(["run", str(REPO / "scenarios" / "seed-two-clients.yml"), "--size", "lab",
                    "--dry-run", "--json", "--db", db], capsys)  # fmt: skip
    documents.validate("plan", plan)
    assert [c["index"] for c in plan["cells"]] == list(range(1, len(plan["cells"]) + 1))


def test_the_lease_read_through_ansible_fits_the_status_schema(tmp_path, capsys):
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"db": {"hosts": {"dbhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "drivelab_lease_file": str(tmp_path / "lease.json"),
    }}}}}}))  # fmt: skip
    doc = _stdout(["status", "-i", str(inv), "--json"], capsys)
    documents.validate("status", doc)
    assert doc["lease"] is None and doc["text"] == "free"


@pytest.mark.parametrize(("verb", "captured"), [("check", "lab-check.json"),
                                                 ("drives", "lab-drives.json")])  # fmt: skip
def test_documents_captured_from_the_lab_fit(verb, captured):
    doc = json.loads((DATA / captured).read_text(encoding="utf-8"))
    documents.validate(verb, build.stamped(doc))


def test_a_key_renamed_dropped_or_of_another_type_is_named(results_db, capsys):
    doc = _stdout(["compare", "hdd", "ssd", "--db", str(results_db), "--json", "-"], capsys)
    pair = doc["pairs"][0]
    renamed = {k if k != "contender_client_bound" else "clientbound": v for k, v in pair.items()}
    for broken, where in [
        ({**doc, "pairs": [renamed]}, r"pairs\.0\.(contender_client_bound|clientbound)"),
        ({**doc, "schema_version": 2}, "schema_version"),
        ({k: v for k, v in doc.items() if k != "drivelab"}, "drivelab"),
        ({**doc, "pairs": [{**pair, "contender_client_bound": 1}]},
         r"pairs\.0\.contender_client_bound: Input should be a valid boolean"),
    ]:  # fmt: skip
        with pytest.raises(DrivelabError, match=rf"^compare document: {where}"):
            documents.validate("compare", broken)


def test_schema_prints_each_verbs_json_schema(capsys):
    for verb in documents.SCHEMAS:
        schema = _stdout(["schema", verb], capsys)
        assert schema["$schema"].endswith("2020-12/schema")
        assert {"schema_version", "drivelab"} <= set(schema["required"])
        assert schema["additionalProperties"] is False
    cell = _stdout(["schema", "report"], capsys)["$defs"]["Cell"]["properties"]
    assert {"client_bound", "cache_defeated", "latency_p99_s", "latency_p999_s"} <= set(cell)


# ------------------------------------------------------------------ exit statuses per verb


def _verbs() -> list[str]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sorted(sub.choices)


@pytest.mark.parametrize("verb", _verbs())
def test_every_verb_gives_a_bad_argument_the_input_status(verb, capsys):
    assert cli.main([verb, "--no-such-flag"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("drivelab: ") and err.count("\n") == 1


@pytest.mark.parametrize("verb", ["status", "drives"])
def test_a_db_host_that_does_not_answer_is_the_hosts_status(verb, tmp_path, capsys):
    gone = {"ansible_host": "127.0.0.1", "ansible_port": 1}  # refused at once
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"db": {"hosts": {"dbhost": gone}}}}}))
    assert cli.main([verb, "-i", str(inv), "--json"]) == EXIT_HOSTS
    assert "dbhost" in capsys.readouterr().err


def test_help_lists_the_exit_statuses(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    for status in ("0  done", "1  results incomplete", "2  the input", "3  the lab is busy",
                   "4  the hosts", "5  the controller"):  # fmt: skip
        assert status in text


def test_the_lab_status_model_has_the_fields_the_lab_reports():
    """documents.py (types) may not import the lab's dataclasses (hosts): its models of
    them are held to their fields here, so a field added to the lab is one added to the
    schema."""
    import dataclasses  # noqa: PLC0415

    from collector.hosts import lab  # noqa: PLC0415

    for model, source in ((documents.LabHost, lab.LabHost), (documents.LabDrive, lab.LabDrive),
                          (documents.LabStatus, lab.LabStatus)):  # fmt: skip
        fields = {f.name for f in dataclasses.fields(source)}
        own = set(model.model_fields) - {"schema_version", "drivelab", "lease"}
        assert own == fields, (model.__name__, own ^ fields)
