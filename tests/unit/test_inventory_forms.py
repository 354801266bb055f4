"""drivelab reads an inventory as Ansible reads it (``ansible-inventory``): the example
inventory as one hosts.yml, and the same inventory split as Ansible users write it
(hosts.ini, group_vars/, host_vars/, nested groups), give drivelab the same DB host,
drives, clients and variables; a broken file is one line naming it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

import collector.scenario as sc
from collector.cli.options import inventory_file
from collector.errors import DrivelabError
from collector.scenario.inventory import candidate_drives, host_vars, lab_vars, prometheus_url

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory" / "example"
EXAMPLE_DOC = yaml.safe_load((EXAMPLE / "hosts.yml").read_text(encoding="utf-8"))


def split(tmp_path: Path, *, nested: bool = False) -> Path:
    """The example inventory as hosts.ini + group_vars/all.yml + host_vars/pgbox.yml (and,
    nested, the clients as two racks of group clients)."""
    doc = copy.deepcopy(EXAMPLE_DOC)
    folder = tmp_path / "split"
    (folder / "group_vars").mkdir(parents=True)
    (folder / "host_vars").mkdir()
    all_vars = {
        **doc["all"]["vars"],
        **yaml.safe_load((EXAMPLE / "group_vars" / "all.yml").read_text(encoding="utf-8")),
    }
    (folder / "group_vars" / "all.yml").write_text(yaml.safe_dump(all_vars), encoding="utf-8")
    pgbox = doc["all"]["children"]["db"]["hosts"]["pgbox"]
    (folder / "host_vars" / "pgbox.yml").write_text(yaml.safe_dump(pgbox), encoding="utf-8")
    clients = doc["all"]["children"]["clients"]["hosts"]
    lines = ["[db]", "pgbox", ""]
    if nested:
        lines += ["[rack1]", "client1", "", "[rack2]", "client2", "", "[clients:children]"]
        lines += ["rack1", "rack2", ""]
    else:
        lines += ["[clients]", *clients, ""]
    for name, hv in clients.items():
        (folder / "host_vars" / f"{name}.yml").write_text(yaml.safe_dump(hv), encoding="utf-8")
    (folder / "hosts.ini").write_text("\n".join(lines), encoding="utf-8")
    return folder


def what_drivelab_sees(inventory: dict) -> dict:
    db, drives = sc.db_host(inventory)
    clients = sc.client_hosts(inventory)
    return {
        "db": db,
        "drives": drives,
        "entries": candidate_drives(inventory),
        "clients": clients,
        "vars": {h: host_vars(inventory, h) for h in [db, *clients]},
    }


def test_the_example_as_yaml_and_split_as_ini_read_the_same(tmp_path: Path) -> None:
    whole = what_drivelab_sees(sc.load_inventory(EXAMPLE))
    assert whole["db"] == "pgbox"
    assert whole["drives"] == ["hdd7200", "ssd100"]
    assert whole["clients"] == ["client1", "client2"]
    # group_vars/all.yml beside hosts.yml is read, as Ansible reads it
    assert whole["vars"]["client1"]["ansible_ssh_common_args"].startswith("-o ControlMaster")
    assert whole["vars"]["client1"]["ansible_user"] == "drivelab"
    for nested in (False, True):
        folder = split(tmp_path / str(nested), nested=nested)
        assert what_drivelab_sees(sc.load_inventory(folder)) == whole


def test_candidate_drives_in_host_vars_are_drives_of_the_db_host(tmp_path: Path) -> None:
    """The issue's case: drives in host_vars/pgbox.yml were 'not a drive of pgbox (have: none)'."""
    folder = split(tmp_path)
    scenario = tmp_path / "s.yml"
    scenario.write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "drives": ["ssd100"],
                "workload": {"scale": 1, "duration": 5},
                "hosts": [2],
            }
        ),
        encoding="utf-8",
    )
    s = sc.load(scenario)
    sc.validate_against_inventory(s, sc.load_inventory(folder), scenario)
    assert [c.cell.drive for c in sc.expand(s, sc.load_inventory(folder))] == ["ssd100"]


def test_a_folder_without_hosts_yml_is_given_to_ansible_as_it_is(tmp_path: Path) -> None:
    folder = split(tmp_path)
    assert inventory_file(str(folder)) == folder
    assert inventory_file(str(EXAMPLE)) == EXAMPLE / "hosts.yml"
    assert inventory_file(str(folder / "hosts.ini")) == folder / "hosts.ini"


def test_lab_wide_variables_come_from_group_all(tmp_path: Path) -> None:
    folder = split(tmp_path)
    with (folder / "group_vars" / "all.yml").open("a", encoding="utf-8") as fh:
        fh.write("prometheus_server_url: http://prom.lab.example.org:9090/\n")
    inv = sc.load_inventory(folder)
    assert lab_vars(inv)["prometheus_server_url"].startswith("http://prom")
    assert prometheus_url(inv) == "http://prom.lab.example.org:9090"


def test_an_edited_file_is_read_again(tmp_path: Path) -> None:
    folder = split(tmp_path)
    assert sc.db_host(sc.load_inventory(folder))[1] == ["hdd7200", "ssd100"]
    pgbox = folder / "host_vars" / "pgbox.yml"
    doc = yaml.safe_load(pgbox.read_text(encoding="utf-8"))
    doc["candidate_drives"] = doc["candidate_drives"][:1]
    pgbox.write_text(yaml.safe_dump(doc) + "# edited\n", encoding="utf-8")
    assert sc.db_host(sc.load_inventory(folder))[1] == ["hdd7200"]


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("hosts.ini", "[db\npgbox\n", "not an inventory Ansible reads: "),
        ("hosts.yml", "all:\n  children:\n    db:\n      hosts: 7\n", 'Invalid "hosts" entry'),
        ("hosts.yml", "all: [1\n", "line 2: not valid YAML"),
    ],
)
def test_a_broken_inventory_is_one_line_naming_the_file(
    tmp_path: Path, name: str, text: str, words: str
) -> None:
    (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(DrivelabError) as info:
        sc.load_inventory(tmp_path / name)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / name}: ")
    assert words in message and "\n" not in message and "Traceback" not in message


def test_a_broken_group_vars_file_is_named(tmp_path: Path) -> None:
    folder = split(tmp_path)
    (folder / "group_vars" / "all.yml").write_text("ansible_user: [drivelab\n", encoding="utf-8")
    with pytest.raises(DrivelabError) as info:
        sc.load_inventory(folder)
    assert str(info.value).startswith(f"{folder / 'group_vars' / 'all.yml'}: line 2: not valid")
