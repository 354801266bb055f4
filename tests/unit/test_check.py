"""`drivelab check`'s verdicts: one line per problem, naming the host and what to do,
from what playbooks/check.yml answered (tests/data/check/: captured from the namespace
lab, a good host and hosts broken on purpose) and the measured clocks; and the
candidate_drives entries `drivelab drives --yaml` prints."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

import collector.scenario as sc
from collector.cli import checkcmd
from collector.hosts import hostcheck
from collector.scenario.inventory import inventory_by_count
from collector.scenario.loader import parse

DATA = Path(__file__).resolve().parents[1] / "data" / "check"


def answers(name: str) -> dict:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def lines(found: list[checkcmd.Problem]) -> list[str]:
    return [p.line() for p in found]


def test_a_ready_lab_has_no_problem() -> None:
    good = answers("lab-good.json")
    inv = inventory_by_count(2)
    for group in inv["all"]["children"].values():
        for hv in group["hosts"].values():
            hv["drivelab_lab"] = True  # one kernel clock: the controller's
    clocks = {h: {"offset_s": 0.0001, "bound_s": 0.0008} for h in good}
    assert checkcmd.problems(inv, good, clocks) == []
    # the same answers from hosts of their own: their kernels' clocks are not synchronised
    found = checkcmd.problems(inventory_by_count(2), good, clocks)
    assert {(p.host, p.check) for p in found} == {(h, "clock") for h in good}


def test_each_broken_host_is_one_line_naming_it_and_what_to_do() -> None:
    broken = answers("lab-broken.json")
    inv = inventory_by_count(2)
    clocks = {"dbhost": {"offset_s": 0.0, "bound_s": 0.001},
              "client1": {"offset_s": 1.25, "bound_s": 0.002}}  # fmt: skip
    found = lines(checkcmd.problems(inv, broken, clocks))
    assert len(found) == len(set(found)), found
    by_host: dict[str, list[str]] = {}
    for line in found:
        by_host.setdefault(line.split(":", 1)[0], []).append(line)
    # unreachable: SSH named, and nothing else said of it
    (ssh,) = by_host["client2"]
    assert ssh.startswith("client2: not reached over SSH as root: ") and "known_hosts" in ssh
    # a drive that is not there, in the gate's own words
    assert any("drive ghost (/dev/disk/by-id/drivelab-missing): does not exist" in x
               for x in by_host["dbhost"]), by_host["dbhost"]  # fmt: skip
    # not a lab host: its kernel's unsynchronised clock is named
    assert any("clock not synchronised" in x for x in by_host["dbhost"])
    # 1.25 s ahead of the controller
    assert "client1: clock +1,250.0 ms off the controller's (±2.0 ms), more than 100 ms" in (
        " ".join(by_host["client1"])
    )
    assert "\n" not in "".join(found)


def test_sudo_that_asks_for_a_password_is_named_with_the_fix() -> None:
    ans = {"client1": {"ping": {"ping": "pong", "changed": False},
                       "host": {"failed": True, "msg": "Missing sudo password"}, "gate": None}}  # fmt: skip
    inv = inventory_by_count(1)
    inv["all"]["children"]["clients"]["hosts"]["client1"]["ansible_user"] = "drivelab"
    (line,) = lines(checkcmd.problems(inv, ans, {}))
    assert line == (
        "client1: sudo as drivelab failed: Missing sudo password (give drivelab passwordless"
        " sudo, or set ansible_become_password)"
    )


def test_drives_yaml_is_entries_for_what_the_gate_would_format() -> None:
    devices = [
        {"would_format": True, "listed_as": None, "wipe_needed": True,
         "entry": {"name": "nvme_samsung_x_s1", "device": "/dev/disk/by-id/nvme-Samsung_X_S1",
                   "size_bytes": 1000204886016, "serial": "S1"}},
        {"would_format": True, "listed_as": "ssd", "entry": {"name": "already"}},
        {"would_format": False, "listed_as": None, "refusal": "drive x: is mounted at /",
         "entry": {"name": "root"}},
    ]  # fmt: skip
    entries = checkcmd.candidate_entries(devices)
    assert entries == [
        {"name": "nvme_samsung_x_s1", "device": "/dev/disk/by-id/nvme-Samsung_X_S1",
         "size_bytes": 1000204886016, "serial": "S1", "wipe": True}
    ]  # fmt: skip
    # what --yaml prints is what an inventory takes
    assert (
        yaml.safe_load(yaml.safe_dump({"candidate_drives": entries}))["candidate_drives"][0][
            "serial"
        ]
        == "S1"
    )


def test_what_check_prints_for_a_ready_lab() -> None:
    doc = answers("lab-check.json")  # `drivelab check --json` on the namespace lab
    text = checkcmd.check_text(doc)
    assert text[0].startswith("dbhost: Python 3.") and "9 candidate drives pass the gate" in text[0]
    assert "memory 0.5 GiB" in text[0] and " clock +" in text[0]
    assert [t.split(":")[0] for t in text[:3]] == ["dbhost", "client1", "client2"]
    assert text[-1].startswith("check: 3 hosts, no problems (")


def test_what_check_prints_for_problems() -> None:
    doc = answers("lab-check.json")
    doc["problems"] = [{"host": "client2", "check": "ssh", "message": "not reached"}]
    assert checkcmd.check_text(doc)[0] == "client2: not reached"
    assert checkcmd.check_text(doc)[-1].startswith("check: 3 hosts, 1 problem (")
    # --scenario: its notes after the problems
    doc["notes"] = ["drive ssd: the largest datasets ... measure RAM, not the drive"]
    assert checkcmd.check_text(doc)[1] == "note: " + doc["notes"][0]


def test_what_drives_prints_for_the_lab() -> None:
    doc = answers("lab-drives.json")  # `drivelab drives --json` on the namespace lab
    text = checkcmd.drives_text(doc)
    assert text[0] == f"dbhost: {len(doc['devices'])} block devices"
    assert (
        "  /dev/loop0 [nvme]: 4.3 GB, non-rotational, no serial, write cache on; would format"
        in (text)
    )
    refused = [t for t in text if "refused: " in t]
    assert refused and all("[" not in t.split(":")[0] for t in refused)  # none the lab's own
    # the lab lists every device the gate would format: nothing left to paste
    assert yaml.safe_load(checkcmd.drives_yaml(doc)) == {"candidate_drives": []}


def lab_like(drives: dict[str, int], memory: int) -> dict:
    """Two clients and a DB host with these candidate drives (name: declared bytes)."""
    inv = inventory_by_count(2)
    db = inv["all"]["children"]["db"]["hosts"]["dbhost"]
    db["db_memory_bytes"] = memory
    db["candidate_drives"] = [
        {"name": n, "device": f"/dev/disk/by-id/x-{n}", "size_bytes": b} for n, b in drives.items()
    ]
    return inv


def planned(inv: dict, scales: str, drives: str = "[small, big]") -> list:
    return sc.expand(fit_scenario(scales, drives), inv)


def fit_scenario(scales: str, drives: str = "[small, big]") -> sc.Scenario:
    doc = yaml.safe_load(f"""
        name: fit
        drives: {drives}
        workload: {{scale: {scales}, duration: 5}}
        hosts: [2]
    """)  # fmt: skip
    return parse(doc, "fit.yml")


def test_a_dataset_too_big_for_its_drive_is_a_problem_and_one_that_fits_memory_a_note() -> None:
    """pgbench's size per scale unit (pg_database_size: 7.6e6 + 15.68e6 x scale bytes per
    database): scale 100 on two client hosts is 3.15 GB of datasets, which 4 GB cannot
    hold with 1.5 times the room, 40 GB can, and which does not fit twice in 1 GiB of
    memory; scale 1 does, on each drive."""
    assert hostcheck.dataset_bytes(100, 2) == 2 * (7_634_279 + 100 * 15_680_216)
    inv = lab_like({"small": 4 * 10**9, "big": 40 * 10**9}, memory=1 << 30)
    found, notes = hostcheck.dataset_problems(planned(inv, "[1, 100]"), inv)
    assert [(p.host, p.check) for p in found] == [("dbhost", "space")], found
    (line,) = lines(found)
    assert line.startswith("dbhost: drive small: small-") and "s100-h2" in line, line
    assert "the drive is 3.7 GiB" in line and "smaller scale" in line, line
    assert notes == []
    _, notes = hostcheck.dataset_problems(planned(inv, "[1]"), inv)
    assert [n.split(":")[0] for n in notes] == ["drive small", "drive big"], notes
    assert "fit in twice the DB host's memory (1.0 GiB)" in notes[0], notes
    # no declared size, no memory: nothing said
    bare = inventory_by_count(2)
    assert hostcheck.dataset_problems(planned(bare, "[100]", "[nvme]"), bare) == ([], [])


def test_a_scenario_stops_only_on_its_own_hosts_and_drives() -> None:
    found = [
        hostcheck.Problem("dbhost", "drive", "drive ghost (/dev/x): does not exist"),
        hostcheck.Problem("dbhost", "drive", "drive small (/dev/y): has partitions"),
        hostcheck.Problem("client3", "ssh", "not reached over SSH as drivelab: timed out"),
        hostcheck.Problem("client1", "clock", "clock +300.0 ms off the controller's"),
    ]
    mine = hostcheck.for_scenario(found, {"dbhost", "client1", "client2"}, {"small", "big"})
    assert [(p.host, p.message.split(" (")[0]) for p in mine] == [
        ("dbhost", "drive small"), ("client1", "clock +300.0 ms off the controller's")
    ]  # fmt: skip


def test_a_run_whose_datasets_do_not_fit_its_drive_stops_in_preflight(tmp_path) -> None:
    """``drivelab run``'s preflight holds the datasets against the drives before the
    lease or any playbook: one line naming the DB host, the drive and what to do."""
    from rich.console import Console  # noqa: PLC0415

    from collector.errors import DrivelabError  # noqa: PLC0415
    from collector.run import conductor as scenariorun  # noqa: PLC0415

    inv = lab_like({"small": 4 * 10**9, "big": 40 * 10**9}, memory=1 << 30)
    cells = planned(inv, "[100]")
    opts = scenariorun.RunOptions(inventory=tmp_path / "hosts.yml", db=tmp_path / "d.db")
    run = scenariorun.ScenarioRun(fit_scenario("[100]"), cells, inv, opts, Console())
    try:
        run.check_hosts()
    except DrivelabError as err:
        said = str(err)
    else:
        raise AssertionError("a dataset bigger than its drive did not stop the run")
    assert said.startswith("preflight: dbhost: drive small: small-"), said
    assert said.endswith(": nothing was touched"), said
    # on the big drive alone it goes on
    run.cells = [c for c in cells if c.cell.drive == "big"]
    run.check_hosts()
