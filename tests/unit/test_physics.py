"""Physics checks (collector/verdicts/physics.py) on real captured outputs: the lab's pre-tests
(tests/data/pretest: nvme and hdd7200; tests/data/physics: hdd7200wc, a 7200 rpm drive
that is RAM in fact) and the lab's run folders and telemetry (tests/data/physics, see its
README), judged against what a drive can physically do; then where the flags are
stored, how the reports word them, and the inventory fields they rest on."""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from collector import scenario as sc
from collector.cli import main as cli
from collector.errors import DrivelabError
from collector.gather.folder import gather_run
from collector.paths import REPO
from collector.records import CellSpec, ClientResult, Sample
from collector.report import html, load
from collector.report.findings import physics_lines
from collector.run.storing import record
from collector.scenario.inventory import candidate_drives
from collector.store import Store
from collector.verdicts import drivefacts, physics
from collector.verdicts.pretest import collect, for_cell, physics_facts
from tests.unit.hostcode import module_util

DATA = Path(__file__).resolve().parents[1] / "data"
PRETEST = DATA / "pretest"
PHYS = DATA / "physics"


def device(name: str) -> dict[str, Any]:
    """A real device-facts file of the lab (db/dbhost-<name>.json of a run folder)."""
    return json.loads((PHYS / "device" / f"dbhost-{name}.json").read_text())


def with_drive(facts: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """``facts`` with its (first) drive entry changed: hand-made SMART or inventory data
    on a real entry's shape."""
    out = copy.deepcopy(facts)
    for key, value in changes.items():
        out["drives"][0][key] = value
    return out


SMART = {"available": True, "protocol": "ATA", "model": "ST31500341AS", "passed": True}


# --------------------------------------------------------------------------- the drive


@pytest.mark.parametrize(
    ("case", "facts", "rpm", "source", "plp"),
    [
        ("lab hdd7200: the inventory's rpm (loop: no SMART)", lambda: device("hdd7200"),
         7200, "inventory", None),
        ("lab hdd7200wc: 7200 on paper", lambda: device("hdd7200wc"), 7200, "inventory", None),
        ("lab nvme: rpm 0", lambda: device("nvme"), 0, "inventory", None),
        ("SMART rotation rate wins over the inventory",
         lambda: with_drive(device("hdd7200"), smart={**SMART, "rotation_rate": 5400}),
         5400, "SMART", None),
        ("SMART 0: Solid State Device",
         lambda: with_drive(device("hdd7200"), smart={**SMART, "rotation_rate": 0}),
         0, "SMART", None),
        ("NVMe has no rotation_rate and does not rotate",
         lambda: with_drive(device("hdd7200"), smart={**SMART, "protocol": "NVMe"},
                            declared={}), 0, "SMART (NVMe)", None),
        ("SMART without a rate: the inventory's",
         lambda: with_drive(device("hdd7200"), smart={**SMART, "protocol": "SCSI"}),
         7200, "inventory", None),
        ("nothing says", lambda: with_drive(device("hdd7200"), declared={}), None, "", None),
        ("a string rpm counts as not stated",
         lambda: with_drive(device("hdd7200"), declared={"rpm": "7200"}), None, "", None),
        ("power-loss protection stated",
         lambda: with_drive(device("nvme"), declared={"rpm": 0, "power_loss_protection": True}),
         0, "inventory", True),
        ("no file at all", lambda: None, None, "", None),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)  # fmt: skip
def test_the_drives_rotation_rate_and_where_it_came_from(case, facts, rpm, source, plp):
    d = drivefacts.drive_from_facts("d", facts())
    assert (d.rpm, d.rpm_source, d.power_loss_protection) == (rpm, source, plp), case


def raid(*members: dict[str, Any]) -> dict[str, Any]:
    base = device("hdd7200")
    return {**base, "drives": [m["drives"][0] for m in members]}


def test_a_raid_set_rotates_when_every_member_does_at_its_fastest():
    ten = with_drive(device("hdd7200"), declared={"rpm": 10000})
    assert drivefacts.drive_from_facts("r", raid(device("hdd7200"), ten)).rpm == 10000
    assert drivefacts.drive_from_facts("r", raid(device("nvme"), device("nvme"))).rpm == 0
    # a rotating and a solid-state member: a commit may land on either
    mixed = drivefacts.drive_from_facts("r", raid(device("hdd7200"), device("nvme")))
    assert mixed.rpm is None
    assert physics.drive_notes(mixed)[0].message == (
        "not checked: rotation rate unknown (its members rotate and do not)"
    )
    unknown = with_drive(device("hdd7200"), declared={})
    assert drivefacts.drive_from_facts("r", raid(device("hdd7200"), unknown)).rpm is None
    plp = with_drive(device("nvme"), declared={"rpm": 0, "power_loss_protection": True})
    no = with_drive(device("nvme"), declared={"rpm": 0, "power_loss_protection": False})
    assert drivefacts.drive_from_facts("r", raid(plp, plp)).power_loss_protection is True
    assert drivefacts.drive_from_facts("r", raid(plp, device("nvme"))).power_loss_protection is None
    assert drivefacts.drive_from_facts("r", raid(plp, no)).power_loss_protection is False


def test_the_ceilings_are_one_flush_per_revolution():
    ceilings = {
        rpm: drivefacts.Drive("d", rpm).flush_ceiling for rpm in (5400, 7200, 10000, 15000, 0)
    }
    assert ceilings == {5400: 90, 7200: 120, 10000: pytest.approx(166.67, abs=0.01),
                        15000: 250, 0: None}  # fmt: skip


# --------------------------------------------------------------------------- pre-tests


def pretest_samples(*folders: Path) -> list[Sample]:
    return [s for f in folders for s in collect(f, {"cell": "c", "filesystem": "ext4"})]


def test_pg_test_fsync_of_the_honest_hdd7200_is_not_flagged():
    """61 fdatasync/s (the lab caps it at 120 IOPS, a flush costs two) under 120/s."""
    flags = physics.pretest_flags(
        pretest_samples(PRETEST), {"hdd7200": drivefacts.Drive("hdd7200", 7200, "inventory")}
    )
    assert [f for f in flags if f.drive == "hdd7200"] == []


def test_pg_test_fsync_of_the_rotating_but_fast_drive_is_flagged():
    """The lab's hdd7200wc, captured: RAM under an inventory that says 7200 rpm."""
    flags = physics.pretest_flags(
        pretest_samples(PHYS / "pretest"),
        {"hdd7200wc": drivefacts.drive_from_facts("hdd7200wc", device("hdd7200wc"))},
    )
    (flag,) = [f for f in flags if f.drive == "hdd7200wc"]
    assert flag.code == physics.FLUSH_ABSORBED and flag.level == physics.WARNING
    fig = flag.figures
    assert fig["source"] == "pg_test_fsync" and fig["write_cache"] == "unchangeable"
    assert fig["ceiling_per_s"] == 120 and fig["rpm"] == 7200 and fig["margin"] == 1.25
    # the fastest sync method of the "one 8kB write" section is the one judged
    rates = {
        s.labels["method"]: s.value
        for s in pretest_samples(PHYS / "pretest")
        if s.metric == physics.FSYNC_METRIC and s.labels["section"] == physics.FSYNC_SECTION
    }
    assert fig["method"] == max(rates, key=rates.get)
    assert fig["rate_per_s"] == max(rates.values()) > 1.25 * 120
    assert fig["ratio"] == pytest.approx(fig["rate_per_s"] / 120)
    assert "a volatile write cache is absorbing flushes, results are not durable" in flag.message
    assert f"{fig['rate_per_s']:,.0f}/s" in flag.message and "7200 rpm" in flag.message


def test_the_same_fast_flushes_on_a_protected_cache_are_a_note():
    drive = drivefacts.Drive("hdd7200wc", 7200, "inventory", power_loss_protection=True)
    flags = physics.pretest_flags(pretest_samples(PHYS / "pretest"), {"hdd7200wc": drive})
    (flag,) = [f for f in flags if f.drive == "hdd7200wc"]
    assert flag.code == physics.FLUSH_PROTECTED and flag.level == physics.NOTE
    assert "power-loss protection" in flag.message


def test_a_drive_of_unknown_rotation_is_said_once_not_checked():
    flags = physics.pretest_flags(pretest_samples(PRETEST), {})
    assert sorted((f.drive, f.code) for f in flags) == [
        ("hdd7200", physics.FLUSH_UNCHECKED),
        ("nvme", physics.FLUSH_UNCHECKED),
    ]
    assert flags[0].message.startswith("not checked: rotation rate unknown")


@pytest.mark.parametrize(
    ("rate", "flagged"), [(120.0, False), (150.0, False), (150.5, True), (400.0, True)]
)
def test_the_margin_is_a_quarter_above_the_ceiling(rate, flagged):
    """Hand-made samples: the rule's boundary (7200 rpm: 120/s, flagged above 150/s)."""
    s = Sample(physics.FSYNC_METRIC, rate, "operations/second",
               {"drive": "d", "write_cache": "off", "section": "one 8kB write",
                "method": "fdatasync"})  # fmt: skip
    flags = physics.pretest_flags([s], {"d": drivefacts.Drive("d", 7200, "inventory")})
    assert bool(flags) is flagged


def test_physics_facts_read_the_rotation_from_the_device_facts_folder(tmp_path):
    """As the runner calls it: the pre-tests' samples and the cell's db/ folder (the
    lab's device facts; database.json and a drive without facts there are no matter)."""
    for name in ("hdd7200", "hdd7200wc", "hdd10k", "ssd"):
        shutil.copy(PHYS / "device" / f"dbhost-{name}.json", tmp_path)
    (tmp_path / "database.json").write_text("{}")
    facts = physics_facts(pretest_samples(PHYS / "pretest"), tmp_path)
    assert sorted((f["drive"], f["code"]) for f in facts) == [
        ("hdd7200wc", physics.FLUSH_ABSORBED),
        # hdd10k: 91 fdatasync/s under its 166.7/s; hdd7200: fio only
        ("nvme", physics.FLUSH_UNCHECKED),  # no device facts of nvme in that folder
        ("ssd", physics.PLP_UNKNOWN),
    ]
    json.dumps(facts)  # stored as JSON


# --------------------------------------------------------------------------- a run


def run_folder(name: str, tmp_path: Path) -> Path:
    """A copy of a captured run folder (tests/data/physics/runs/<name>)."""
    dest = tmp_path / name
    shutil.copytree(PHYS / "runs" / name, dest)
    return dest


def run_codes(gathered) -> list[tuple[str, str]]:
    return [(f["drive"], f["code"]) for f in gathered.run.facts["physics"]]


def test_single_client_commits_of_the_rotating_but_fast_drive_are_flagged(tmp_path):
    gathered = gather_run(run_folder("hdd7200wc-single", tmp_path))
    (flag,) = [physics.Flag.from_fact(f) for f in gathered.run.facts["physics"]]
    tps = gathered.run.clients[0].tps
    assert flag.code == physics.FLUSH_ABSORBED
    assert flag.figures["source"] == "pgbench" and flag.figures["connections"] == 1
    assert flag.figures["rate_per_s"] == tps > 150
    assert "single-client pgbench commits" in flag.message


def test_single_client_commits_of_the_honest_hdd7200_are_not(tmp_path):
    gathered = gather_run(run_folder("hdd7200-single", tmp_path))
    assert gathered.run.clients[0].tps <= 120
    assert run_codes(gathered) == []


def test_single_client_check_applies_only_where_each_commit_flushes_the_drive(tmp_path):
    """The flagged run, told otherwise: WAL on the system disk, commits not flushed,
    two connections (group commit), a read-only mode: nothing to judge."""
    gathered = gather_run(run_folder("hdd7200wc-single", tmp_path))
    facts, cell = dict(gathered.run.facts), gathered.cell
    client = gathered.run.clients
    drive = drivefacts.drive_from_facts("hdd7200wc", device("hdd7200wc"))

    def flags(cell=cell, mode="tpcb", **db: Any) -> list[str]:
        return [f.code for f in physics.run_flags(drive, cell, mode=mode,
                                                  db_facts={**facts, **db}, clients=client)]  # fmt: skip

    assert flags() == [physics.FLUSH_ABSORBED]
    assert flags(wal_placement="system disk") == []
    settings = facts["postgresql_settings"]
    assert flags(postgresql_settings={**settings, "synchronous_commit": "off"}) == []
    assert flags(postgresql_settings={**settings, "fsync": "off"}) == []
    assert flags(mode="select-only") == []
    two = CellSpec(**{**cell.__dict__, "params": {**cell.params, "clients_per_host": 2}})
    assert flags(cell=two) == []


# --------------------------------------------------------------------------- fio against pgbench


def telemetry(name: str) -> list[Sample]:
    """The run's stored telemetry, as run_telemetry fetched it (tests/data/physics)."""
    rows = json.loads((PHYS / "telemetry" / f"{name}.json").read_text())
    return [Sample(**r) for r in rows]


def fio_of(name: str):
    samples = collect(PHYS / "pretest", {"cell": "c", "filesystem": "ext4"})
    return for_cell(samples, CellSpec(drive=name, filesystem="ext4"))


TELEMETRY_CASES = json.loads((PHYS / "telemetry" / "cases.json").read_text())


@pytest.mark.parametrize("case", sorted(TELEMETRY_CASES))
def test_fio_against_pgbench_on_real_runs(case):
    """Each captured run against its drive's captured fio pre-test: cases.json holds the
    run's figures (tps, transactions, blks_read, cache verdict, devices) and the flags
    the rules must give."""
    c = TELEMETRY_CASES[case]
    cell = CellSpec(**{**c["cell"], "mount_options": None})
    flags = physics.iops_flags(
        c["cell"]["drive"], cell, pretest=fio_of(c["cell"]["drive"]),
        samples=telemetry(case), devices=c["devices"], tps=c["tps"],
        transactions=c["transactions"], db_buffers=c["db_buffers"],
        cache_verdict=c["cache_verdict"],
    )  # fmt: skip
    assert [f.code for f in flags] == c["expect"], [f.message for f in flags]


def test_reads_above_what_fio_got_are_flagged():
    """The honest hdd7200 run's telemetry with every read count tripled (hand-scaled):
    more reads per second than fio's queue depth 32 got from the drive."""
    c = TELEMETRY_CASES["hdd7200-defeated"]
    tripled = [
        Sample(s.metric, s.value * (3 if s.metric == physics.READ_IOPS else 1), s.unit,
               s.labels, s.timestamp)
        for s in telemetry("hdd7200-defeated")
    ]  # fmt: skip
    cell = CellSpec(**{**c["cell"], "mount_options": None})
    flags = physics.iops_flags("hdd7200", cell, pretest=fio_of("hdd7200"), samples=tripled,
                               devices=c["devices"], tps=c["tps"], transactions=c["transactions"],
                               db_buffers=c["db_buffers"], cache_verdict=None)  # fmt: skip
    (flag,) = flags
    assert flag.code == physics.IOPS_ABOVE_FIO and flag.level == physics.WARNING
    pre = fio_of("hdd7200")
    reads = physics.mean_iops(tripled, physics.READ_IOPS, c["devices"])
    assert flag.figures["ratio"] == pytest.approx(reads / pre.rand_read_qd32)
    assert flag.figures["ratio"] > 1.25


def test_without_a_pre_test_or_telemetry_the_check_says_it_was_not_made():
    cell = CellSpec(drive="ssd", filesystem="ext4", clients=1,
                    params={"clients_per_host": 4})  # fmt: skip
    kw = {"devices": ["loop1"], "tps": 100.0, "transactions": 1000, "db_buffers": {},
          "cache_verdict": None}  # fmt: skip
    none = physics.iops_flags("ssd", cell, pretest=None, samples=[], **kw)
    assert [(f.code, f.message) for f in none] == [
        (physics.IOPS_UNCHECKED, "not checked: no fio pre-test of this drive")
    ]
    off = CellSpec(**{**cell.__dict__, "write_cache": "off"})
    assert physics.iops_flags("ssd", off, pretest=None, samples=[], **kw)[0].message == (
        "not checked: no fio pre-test of this drive with its write cache off"
    )
    blind = physics.iops_flags("hdd7200", cell, pretest=fio_of("hdd7200"), samples=None, **kw)
    assert [f.message for f in blind] == ["not checked: no telemetry of the run"]


def test_the_pre_test_a_cell_is_judged_against():
    samples = collect(PHYS / "pretest", {"cell": "c", "filesystem": "ext4"})
    leave = CellSpec(drive="hdd7200", filesystem="ext4")
    assert for_cell(samples, leave).write_cache == "unchangeable"
    # a cell that sets the cache needs a pre-test in that state; another filesystem, its own
    assert for_cell(samples, CellSpec(drive="hdd7200", filesystem="ext4", write_cache="on")) is None
    assert for_cell(samples, CellSpec(drive="hdd7200", filesystem="xfs")) is None
    assert for_cell(samples, CellSpec(drive="ghost", filesystem="ext4")) is None


# --------------------------------------------------------------------------- stored, reported


@pytest.fixture
def physics_store(tmp_path):
    """The captured runs gathered into a store, with the pre-tests, their flags, and
    the telemetry flags as the runner stores them."""
    path = tmp_path / "drivelab.db"
    pre = pretest_samples(PHYS / "pretest")
    with Store.open(path) as store:
        for name in ("hdd7200-single", "hdd7200wc-single"):
            gathered = gather_run(run_folder(name, tmp_path))
            run_id = record(store, gathered)
        sid = store.scenario(gathered.scenario).id
        store.add_samples(pre, scenario_id=sid)
        facts_dir = tmp_path / "facts"
        shutil.copytree(PHYS / "device", facts_dir)
        store.add_facts(sid, {"physics": physics_facts(pre, facts_dir)}, scope="pretest")
        store.add_facts(sid, {"physics_iops": physics.as_facts([])}, scope="run", run_id=run_id)
    return path, gathered.scenario


def test_the_terminal_report_says_each_flag_in_words(physics_store, capsys, monkeypatch):
    path, _ = physics_store
    monkeypatch.setenv("COLUMNS", "250")
    assert cli.main(["report", "-v", "--db", str(path)]) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    flush = [line for line in lines if line.startswith("flush ")]
    assert any(line.startswith("flush hdd7200wc: pg_test_fsync") for line in flush), flush
    assert any(line.startswith("flush hdd7200wc: single-client pgbench") for line in flush)
    assert not [line for line in flush if line.startswith("flush hdd7200:")], flush
    assert "plp nvme: power-loss protection: unknown (SMART has no field for it; set" \
           " power_loss_protection in the inventory)" in lines  # fmt: skip
    # the hdd7200 runs were stored without telemetry: said once for that cell
    assert any(line.startswith("fio hdd7200") and "no telemetry" in line for line in lines)
    assert not any(line.startswith("fio hdd7200wc") for line in lines)


def test_the_html_report_lists_them(physics_store):
    path, name = physics_store
    with Store.open(path, create=False) as store:
        page = html.render([load(store, name)])
    assert "<h3>Physics checks</h3>" in page
    assert "<li class=warn>flush hdd7200wc: pg_test_fsync" in page
    assert "<li>plp nvme: power-loss protection: unknown" in page


def test_a_line_every_drive_shares_is_said_once(physics_store):
    path, name = physics_store
    with Store.open(path, create=False) as store:
        view = load(store, name)
        sid = store.scenario(name).id
        for cv in view.cells:
            for r in cv.stats.runs:
                store.add_facts(sid, {"physics_iops": physics.as_facts(
                    [physics.Flag(physics.IOPS_UNCHECKED, cv.drive, physics.NOTE,
                                  "not checked: no fio pre-test of this drive")])},
                                scope="run", run_id=r.run_id)  # fmt: skip
        view = load(store, name)
    fio = [p for p in physics_lines(view) if p.kind == "fio"]
    assert [(p.who, p.message) for p in fio] == [
        ("all drives", "not checked: no fio pre-test of this drive")
    ]


# --------------------------------------------------------------------------- the inventory


def scenario_on(tmp_path: Path, drives: list[str]) -> sc.Scenario:
    path = tmp_path / "x.yml"
    path.write_text(yaml.safe_dump({"name": "x", "drives": drives,
                                    "workload": {"scale": [1], "duration": 5}}))  # fmt: skip
    return sc.load(path)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("rpm", "7200rpm", "rpm must be a whole number of revolutions per minute"
                           " (0: it does not rotate), not '7200rpm'"),
        ("rpm", -1, "rpm must be a whole number"),
        ("rpm", True, "rpm must be a whole number"),
        ("power_loss_protection", "yes", "power_loss_protection must be true or false, not 'yes'"),
    ],
)  # fmt: skip
def test_bad_declared_fields_are_one_line_naming_the_drive(tmp_path, field, value, words):
    inv = sc.load_inventory(DATA / "inventory")
    drives = inv["all"]["children"]["db"]["hosts"]["dbhost"]["candidate_drives"]
    next(d for d in drives if d["name"] == "hdd7200")[field] = value
    s = scenario_on(tmp_path, ["nvme", "hdd7200"])
    with pytest.raises(DrivelabError) as info:
        sc.validate_against_inventory(s, inv, tmp_path / "x.yml")
    msg = str(info.value)
    assert "\n" not in msg and "inventory: dbhost candidate drive 'hdd7200': " + words in msg
    # a drive the scenario does not use is not its business
    sc.validate_against_inventory(scenario_on(tmp_path, ["nvme"]), inv, tmp_path / "x.yml")


def test_good_declared_fields_pass(tmp_path):
    inv = sc.load_inventory(DATA / "inventory")
    drives = inv["all"]["children"]["db"]["hosts"]["dbhost"]["candidate_drives"]
    drives[0].update(rpm=0, power_loss_protection=False)
    sc.validate_against_inventory(scenario_on(tmp_path, ["nvme"]), inv, tmp_path / "x.yml")
    assert candidate_drives(inv)[0]["rpm"] == 0


def drive_facts_module():
    module_util("candidate_drive", "drivelab_argv")
    module_util("candidate_drive", "drivelab_gate")
    spec = importlib.util.spec_from_file_location(
        "drivelab_drive_facts", REPO / "roles/candidate_drive/library/drive_facts.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_drive_facts_reports_what_the_inventory_declares(tmp_path):
    """Matched by the resolved device, as the gate resolves /dev/disk/by-id links."""
    target = tmp_path / "loop9"
    target.write_text("")
    (tmp_path / "by-id").mkdir()
    (tmp_path / "by-id" / "ata-X").symlink_to(target)
    inventory = [
        {"name": "other", "device": str(tmp_path / "elsewhere"), "rpm": 15000},
        {"name": "hdd", "device": str(tmp_path / "by-id" / "ata-X"), "rpm": 7200,
         "power_loss_protection": False, "wipe": True},
    ]  # fmt: skip
    mod = drive_facts_module()
    assert mod.declared(str(target), inventory) == {"rpm": 7200, "power_loss_protection": False}
    assert mod.declared(str(tmp_path / "nothing"), inventory) == {}


def test_the_lab_classes_carry_their_rotation_rates():
    defaults = yaml.safe_load((REPO / "roles/lab/defaults/main.yml").read_text())
    classes = defaults["lab_drive_classes"]
    assert {k: v.get("rpm") for k, v in classes.items()} == {
        "nvme": 0, "ssd": 0, "hdd10k": 10000, "hdd7200": 7200, "hdd7200wc": 7200, "ssdcliff": 0,
    }  # fmt: skip
    # rotating on paper, uncapped in fact; the honest class at one IO per revolution
    assert classes["hdd7200wc"]["iops"] == 0 and classes["hdd7200"]["iops"] == 120
    names = [d["name"] for d in defaults["lab_drives"]]
    # each added after the others, so the drives before keep their loop devices
    assert names[-2:] == ["hdd7200wc", "ssdcliff"]
    template = (REPO / "roles/lab/templates/inventory/hosts.yml.j2").read_text()
    assert "rpm: {{ lab_drive_classes[r.item.class].rpm | int }}" in template


def test_the_single_client_rule_reads_the_clients_pgbench_tps():
    """Hand-made: one client host, one connection, WAL on the drive, commits flushed."""
    cell = CellSpec(drive="d", placement="cluster", clients=1, params={"clients_per_host": 1})
    client = [ClientResult("client1", tps=300.0)]
    db = {"wal_placement": "on the drive",
          "postgresql_settings": {"fsync": "on", "synchronous_commit": "on"}}  # fmt: skip
    flags = physics.run_flags(drivefacts.Drive("d", 7200, "inventory"), cell, mode="tpcb",
                              db_facts=db, clients=client)  # fmt: skip
    assert [f.figures["rate_per_s"] for f in flags] == [300.0]
