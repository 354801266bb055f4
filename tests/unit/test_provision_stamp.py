"""The provisioning stamp `drivelab run` skips provisioning by: equal for the same roles,
inventory and passwords; different as soon as any of them changes."""

from __future__ import annotations

import shutil

import pytest

from collector.paths import REPO
from collector.run import stages as runner


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """A copy of the example inventory and a passwords folder of its own."""
    inventory = tmp_path / "inventory"
    shutil.copytree(REPO / "inventory" / "example", inventory)
    secrets = tmp_path / "secrets"
    (secrets / "dbhost").mkdir(parents=True)
    (secrets / "dbhost" / "client1.password").write_text("one\n")
    monkeypatch.setattr(runner, "SECRETS_DIR", secrets)
    return inventory, secrets


def test_the_same_inputs_give_the_same_stamp(setup):
    inventory, _ = setup
    assert runner.provision_stamp(inventory) == runner.provision_stamp(inventory)
    assert runner.provision_stamp(inventory / "hosts.yml") == runner.provision_stamp(
        inventory / "hosts.yml"
    )


def test_a_folder_holding_hosts_yml_is_that_file(setup):
    """`drivelab run` names the lab's inventory by its hosts.yml, the runner's callers
    that name none by its folder (collector.paths.LOCAL_INVENTORY): one inventory, one
    stamp. When they differed, a provisioning re-run after `drivelab run` found no host
    current and rewrote every stamp (6 changes on the 2-client lab)."""
    inventory, _ = setup
    assert runner.provision_stamp(inventory) == runner.provision_stamp(inventory / "hosts.yml")
    # a folder of other inventory files is hashed whole
    (inventory / "hosts.yml").rename(inventory / "lab.yml")
    before = runner.provision_stamp(inventory)
    (inventory / "lab.yml").write_text((inventory / "lab.yml").read_text() + "\n# more\n")
    assert runner.provision_stamp(inventory) != before


def test_an_inventory_change_changes_it(setup):
    inventory, _ = setup
    before = runner.provision_stamp(inventory / "hosts.yml")
    vars_file = next((inventory / "group_vars").rglob("*.yml"))
    vars_file.write_text(vars_file.read_text() + "\npostgresql_settings: {work_mem: 8MB}\n")
    assert runner.provision_stamp(inventory / "hosts.yml") != before  # group_vars beside it
    before = runner.provision_stamp(inventory / "hosts.yml")
    hosts = inventory / "hosts.yml"
    hosts.write_text(hosts.read_text() + "\n# a comment\n")
    assert runner.provision_stamp(inventory / "hosts.yml") != before


def test_new_passwords_change_it(setup):
    inventory, secrets = setup
    before = runner.provision_stamp(inventory)
    (secrets / "dbhost" / "client1.password").write_text("two\n")
    assert runner.provision_stamp(inventory) != before


def test_a_role_change_changes_it(setup, tmp_path, monkeypatch):
    inventory, _ = setup
    repo = tmp_path / "repo"
    for part in ("roles", "playbooks"):
        shutil.copytree(REPO / part, repo / part)
    (repo / "ansible.cfg").write_text((REPO / "ansible.cfg").read_text())
    monkeypatch.setattr(runner, "REPO", repo)
    before = runner.provision_stamp(inventory)
    defaults = repo / "roles" / "postgresql_server" / "defaults" / "main.yml"
    defaults.write_text(defaults.read_text() + "\n# changed\n")
    assert runner.provision_stamp(inventory) != before
